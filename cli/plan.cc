// sandgate plan: how many concurrent runs fit a host, from traces alone (replay/planner.h has
// the model; README.md "Capacity planner").
#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/common.h"
#include "controller/policy.h"
#include "core/table.h"
#include "core/units.h"
#include "replay/planner.h"
#include "replay/trace.h"
#include "reports/job_report.h"
#include "reports/writers.h"

namespace sandgate::cli {
namespace {

struct PlanArgs {
  std::vector<std::string> traces;
  std::string host_memory;
  double host_cpus = 0;
  std::string policy;
  double risk = 0.01;
  std::string json;
  std::string report;
  size_t trials = 10000;
  uint64_t seed = 1;
  size_t max_runs = 20000;
  std::string cpu_overcommit;  // "": not compressible (1)
};

std::string human(double b) { return human_bytes(Bytes{static_cast<uint64_t>(b)}); }
std::string gib(double b) { return fmt::format("{:.1f}GiB", b / (1024.0 * 1024 * 1024)); }

int run_plan(Globals& g, const PlanArgs& a) {
  auto memory = parse_bytes(a.host_memory);
  if (!memory.ok()) return fail("--host-memory: " + memory.error().message());
  double overcommit = 1;
  if (!a.cpu_overcommit.empty()) {
    auto x = replay::parse_cpu_overcommit(a.cpu_overcommit);
    if (!x.ok()) return fail("--cpu-overcommit: " + x.error().detail);
    overcommit = *x;
  }
  auto policy = load_policy_arg(a.policy);
  if (!policy.ok()) return fail(policy.error());
  auto paths = replay::trace_files(a.traces);
  if (!paths.ok()) return fail(paths.error());
  std::vector<replay::TraceProfile> profiles;
  for (const auto& path : *paths) {
    auto trace = replay::read_trace(path);
    if (!trace.ok()) return fail(trace.error());
    if (trace->samples.empty()) return fail(path + ": no samples, nothing to plan from");
    profiles.push_back(replay::profile_trace(*trace, path, *policy));
  }
  replay::PlanOptions o;
  o.host_memory_bytes = memory->value;
  o.host_cpus = a.host_cpus;
  o.risk = a.risk;
  o.trials = a.trials;
  o.seed = a.seed;
  o.max_runs = a.max_runs;
  o.cpu_overcommit = overcommit;
  auto plan = replay::plan_capacity(profiles, o, *policy);
  if (!plan.ok()) return fail(plan.error());

  std::cout << fmt::format(
      "plan: {} traces, host {} ({} bytes) and {} cpus, risk {}, {} trials, seed {}, policy "
      "'{}', cpu {}\n",
      plan->traces, human_bytes(*memory), memory->value, a.host_cpus, a.risk, a.trials, a.seed,
      policy->name,
      overcommit > 1 ? fmt::format("overcommitted up to {:g}x the cores", overcommit)
                     : std::string("not overcommitted"));
  constexpr auto kRight = TextTable::Align::kRight;
  TextTable fits({{"policy"},
                  {"fits", kRight},
                  {"binding"},
                  {"by mem", kRight},
                  {"by cpu", kRight},
                  {"reserved", kRight},
                  {"used", kRight},
                  {"P(mem>host)", kRight},
                  {"P(cpu>host)", kRight},
                  {"slow-down", kRight}});
  auto n = [](size_t v, bool at_least) { return (at_least ? ">=" : "") + std::to_string(v); };
  for (const auto& f : plan->fits) {
    fits.row({f.policy, n(f.fits, f.at_least), f.binding,
              n(f.fits_by_memory, f.fits_by_memory >= o.max_runs),
              n(f.fits_by_cpu_demand, f.fits_by_cpu_demand >= o.max_runs), gib(f.reserved_bytes),
              gib(f.used_bytes), fmt::format("{:.4f}", f.p_memory_exceeded),
              fmt::format("{:.4f}", f.p_cpu_exceeded),
              fmt::format("{:.2f}x/{:.2f}x", f.cpu_slowdown_mean, f.cpu_slowdown_p95)});
  }
  std::cout << fits.render();
  for (const auto& f : plan->fits) std::cout << fmt::format("  {}: {}\n", f.policy, f.note);
  TextTable intents({{"intent"},
                     {"calls", kRight},
                     {"seconds", kRight},
                     {"grant", kRight},
                     {"use p50", kRight},
                     {"use p99", kRight},
                     {"use max", kRight},
                     {"over grant", kRight}});
  for (const auto& u : plan->intents) {
    intents.row({u.intent, std::to_string(u.calls), fmt::format("{:.0f}", u.seconds),
                 u.grant_bytes ? human(*u.grant_bytes) : "none", human(u.p50), human(u.p99),
                 human(u.max), std::to_string(u.calls_over_grant)});
  }
  std::cout << intents.render();
  std::cout << "use: a call's peak memory above its run's baseline (median outside calls).\n";
  std::cout
      << "fits: the smaller of 'by mem' and 'by cpu'; binding: the resource that decides it.\n"
         "by mem: largest N whose chance of exceeding host memory is <= risk, judged on the\n"
         "model's reservation (static rows; per-call-grant: baseline + whole grants of\n"
         "active calls) or on what runs really hold (per-call: use held to grants; actual).\n"
         "by cpu: largest N whose CPU demand (per-call rows: held to the grants) exceeds\n"
         "host cpus x --cpu-overcommit with a chance <= risk.\n"
         "P(mem>host), P(cpu>host): what `fits` runs really hold exceeds the host (cpu:\n"
         "its cores, not overcommitted).\n"
         "slow-down: mean/p95 over time of max(1, cpu demand / cores) at `fits`: how much\n"
         "longer CPU work takes when the cores are shared (1.00x: never).\n"
         "reserved / used: mean sums at that N (per-call rows reserve their envelopes).\n";
  Json j = replay::to_json(*plan);
  Json names = Json::array();
  for (const auto& p : *paths) names.push_back(p);
  j["trace_files"] = names;
  if (!a.json.empty()) {
    if (auto s = write_json_file_atomic(a.json, j); !s.ok()) return fail(s.error());
    std::cout << "wrote " << a.json << "\n";
  }
  if (!a.report.empty()) {
    // The same figures, read back strictly as the report model's plan section.
    auto section = reports::plan_section_from_json(j);
    if (!section.ok()) return fail(std::move(section).error().context_add("the plan's report"));
    reports::Report report = reports::job_report("plan", doctor_report(g));
    report.plan = std::move(section).value();
    std::error_code ec;
    std::filesystem::create_directories(a.report, ec);
    if (ec) return fail("--report " + a.report + ": " + ec.message());
    if (auto s = reports::write_all_formats(report, a.report); !s.ok())
      return fail(std::move(s).error().context_add("writing the report"));
    std::cout << "wrote the report into " << a.report << "\n";
  }
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, Globals& g) {
  auto a = std::make_shared<PlanArgs>();
  auto* sub = app.add_subcommand(
      "plan",
      "How many concurrent agent runs fit one host, from traces alone (nothing is run).\n"
      "Runs are traces picked at random and looped from random start offsets; a Monte Carlo\n"
      "over --trials draws (fixed --seed: the same answer every time). Per policy:\n"
      "  static-peak     each run reserves its own peak\n"
      "  static-average  each run reserves (and is limited to) its average: shown with the\n"
      "                  share of runs OOM-killed and P(host exhausted) if not enforced\n"
      "  per-call        actual use with each call held to baseline + its intent's grant\n"
      "                  (the policy's), admitted on what runs really hold\n"
      "  per-call-grant  admitted as if every active call used its whole grant\n"
      "  actual          the traces' own use (reference)\n"
      "Each model gets two answers on the same trials: the largest N whose chance of exceeding\n"
      "--host-memory is <= --risk, and the largest N whose CPU demand exceeds --host-cpus\n"
      "(times --cpu-overcommit) with a chance <= --risk. \"fits\" is the smaller; \"binding\"\n"
      "names the resource that decided it. CPU counts like memory unless you say it may be\n"
      "shared: --cpu-overcommit 1.5 accepts demand up to 1.5x the cores, and the table shows\n"
      "what that costs (the slow-down of CPU work, mean and p95 over time).\n"
      "Example: sandgate plan --traces traces/ --host-memory 64GiB --host-cpus 16");
  sub->add_option("--traces", a->traces, "directories of traces (*.jsonl, *.trace), or trace files")
      ->required();
  sub->add_option("--host-memory", a->host_memory, "host memory: 64GiB, 128GB")->required();
  sub->add_option("--host-cpus", a->host_cpus, "host cores")
      ->required()
      ->check(CLI::PositiveNumber);
  sub->add_option("--cpu-overcommit", a->cpu_overcommit,
                  "CPU demand accepted, as a ratio >= 1 of --host-cpus (1.5: up to 150%); the\n"
                  "excess is served by slowing CPU work down (default 1: CPU counts like memory)");
  sub->add_option("--policy", a->policy, "policy JSON for per-call grants (default: built-in)");
  sub->add_option("--risk", a->risk, "accepted chance of exceeding host memory (or CPU), in (0, 1)")
      ->check(CLI::Range(1e-9, 0.999999));
  sub->add_option("--json", a->json, "also write every figure to this JSON file");
  sub->add_option("--report", a->report,
                  "write the report (report.json, report.html with the capacity curve, ...) "
                  "into this directory, with the host's facts (doctor)");
  sub->add_option("--trials", a->trials, "Monte Carlo trials (at least 10/risk)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--seed", a->seed, "random seed");
  sub->add_option("--max-runs", a->max_runs, "largest N searched")->check(CLI::PositiveNumber);
  sub->callback([&g, a] { g.exit_code = run_plan(g, *a); });
}

}  // namespace sandgate::cli
