// sandgate qualify: the main job. What the host supports (doctor), then every selected provider
// exercised for real, side by side: create + exec + destroy (timed), the cost of one call in a
// live run with and without the controller, the escape probes (probes/suite.h), and a short
// replay of a recorded burst (replay/experiment.h). One table, providers as columns; a
// provider this host cannot run is a column that says why. Written as DIR/qualify.json with
// DIR/probe-<provider>.json beside it, and as the report model (reports/) in every format:
// report.json, report.html, junit.xml, report.sarif, summary.md.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <iostream>
#include <optional>

#include "cli/common.h"
#include "cli/measure.h"
#include "cli/qualify_trace.h"
#include "core/files.h"
#include "core/process.h"
#include "core/progress.h"
#include "core/stats.h"
#include "core/strings.h"
#include "core/table.h"
#include "core/units.h"
#include "ebpf/activity_tracer.h"
#include "probes/lab/lab.h"
#include "probes/suite.h"
#include "providers/microvm.h"
#include "providers/podman.h"
#include "replay/experiment.h"
#include "reports/from_qualify.h"
#include "reports/writers.h"
#include "session/run_session.h"

namespace sandgate::cli {
namespace {

struct QualifyArgs {
  std::string out = "reports/out";
  std::vector<std::string> providers;
  bool allow_unsafe_host = false;
  int cycles = 9;  // 9: the median's 95% interval is the 2nd to the 8th sample (core/stats.h)
  int calls = 20;
  bool probes = true;
  std::vector<std::string> only;  // probe boundaries; empty: all
  bool replay = true;
  std::string replay_trace;  // empty: the built-in burst
  std::string policy;        // whose required capabilities each provider is held to
  std::string image;         // podman: a local image for every run's root
  std::vector<std::string> base_paths;  // --base-path: the probes' runs on a narrowed base
};

// The probe suite's verdicts for one provider, summarised for qualify.json; the full report
// goes beside it.
Json probe_summary(const probes::ProviderRun& run, const std::string& file) {
  auto t = probes::tally(run.judgements);
  Json exposed = Json::array(), failing = Json::array();
  for (const auto* j : run.exposed()) exposed.push_back(j->id);
  // Exposed beyond what a shared kernel can hide (known limits are exposed, and listed, but do
  // not disqualify): what fails the provider.
  for (const auto* j : run.failing()) failing.push_back(j->id);
  Json contradicted = Json::array();
  for (const auto& k : run.contradictions())
    contradicted.push_back({{"capability", to_string(k.capability)}, {"probes", k.probes}});
  return {{"blocked", t.blocked},
          {"exposed", t.exposed},
          {"inconclusive", t.inconclusive},
          {"warning", t.warning},
          {"exposed_ids", exposed},
          {"known_limit", t.exposed - static_cast<int>(failing.size())},
          {"failing_ids", failing},
          {"wall_ms", to_millis(run.wall)},
          {"contradicted_capabilities", contradicted},
          {"report", file}};
}

// The policy's required capabilities against what the provider delivers: its declaration,
// less what the probes contradicted (when they ran). A contradicted capability the policy
// requires disqualifies the provider as surely as one it never declared.
Json policy_check(const controller::Policy& policy, const CapabilitySet& declared,
                  const probes::ProviderRun* run, std::string& error) {
  CapabilitySet delivered = run ? run->effective() : declared;
  Json required = Json::array(), missing = Json::array(), contradicted = Json::array();
  for (auto c : policy.required_capabilities) required.push_back(to_string(c));
  for (auto c : missing_capabilities(delivered, policy.required_capabilities)) {
    missing.push_back(to_string(c));
    if (declared.count(c)) contradicted.push_back(to_string(c));
  }
  if (!missing.empty() && error.empty()) {
    error = "disqualified for policy " + policy.name + ": it does not deliver " +
            join(missing.get<std::vector<std::string>>(), ", ");
    if (!contradicted.empty())
      error += " (declared, contradicted by the probes: " +
               join(contradicted.get<std::vector<std::string>>(), ", ") + ")";
  }
  return {{"name", policy.name},
          {"required", required},
          {"missing", missing},
          {"contradicted", contradicted},
          {"qualified", missing.empty()}};
}

std::string cut(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(0, n - 3) + "...";
}

// Metrics as rows, providers as columns.
TextTable side_by_side(const Json& providers, const QualifyArgs& a) {
  constexpr auto kRight = TextTable::Align::kRight;
  std::vector<TextTable::Column> columns = {{""}};
  for (const auto& e : providers)
    columns.push_back({e.value("display_name", e["name"].get<std::string>()), kRight});
  TextTable table(std::move(columns));
  auto row = [&](const std::string& label, const std::function<std::string(const Json&)>& cell) {
    std::vector<std::string> cells = {label};
    for (const auto& e : providers) cells.push_back(cell(e));
    table.row(std::move(cells));
  };
  auto ms = [](const Json& e, const char* key) {
    return e.contains(key) ? fmt::format("{:.1f} ms", e[key].get<double>()) : std::string("-");
  };
  row("qualified", [](const Json& e) { return e["ok"].get<bool>() ? "yes" : "NO"; });
  row("run: create+exec+destroy", [&](const Json& e) { return ms(e, "median_ms"); });
  row("call: provider exec", [&](const Json& e) { return ms(e, "exec_ms"); });
  row("call: with the controller", [&](const Json& e) { return ms(e, "call_ms"); });
  if (a.probes) {
    for (const char* verdict : {"blocked", "exposed", "inconclusive", "warning"}) {
      row(std::string("probes ") + verdict, [&](const Json& e) {
        return e.contains("probes") ? std::to_string(e["probes"][verdict].get<int>())
                                    : std::string("-");
      });
    }
  }
  if (a.replay) {
    row("replay: calls completed", [](const Json& e) {
      if (!e.contains("replay")) return std::string("-");
      return fmt::format("{}/{}", e["replay"]["completed"].get<size_t>(),
                         e["replay"]["calls"].get<size_t>());
    });
    row("replay: memory error (median)", [](const Json& e) {
      if (!e.contains("replay")) return std::string("-");
      return fmt::format("{:.1f}%", 100 * e["replay"]["mem_error_median"].get<double>());
    });
    row("replay: call end error (p95)", [](const Json& e) {
      if (!e.contains("replay")) return std::string("-");
      return fmt::format("{:.0f} ms", e["replay"]["end_error_p95_ms"].get<double>());
    });
  }
  return table;
}

int run_qualify(Globals& g, const QualifyArgs& a) {
  // stderr: a status line on a terminal, plain lines in a CI log (core/progress.h).
  Progress progress;
  // An error goes on a line of its own, not onto the end of the status line.
  auto fail = [&progress](const auto& error) {
    progress.clear();
    return cli::fail(error);
  };
  providers::ProviderOptions options = g.provider_options();
  options.allow_unsafe_host = a.allow_unsafe_host;
  std::vector<std::string> names = a.providers;
  if (names.empty()) {
    // The default providers: every safe one that is not opt-in (microvm). The unsafe bypass
    // cable is never a default.
    for (const auto& e : g.registry.entries())
      if (!e.info.unsafe && !e.info.opt_in) names.push_back(e.info.name);
  }
  if (!a.image.empty() && std::find(names.begin(), names.end(), "podman") == names.end())
    return fail("--image: only the podman provider runs a container image, and it is not selected");
  auto policy_arg = load_policy_arg(a.policy);
  if (!policy_arg.ok()) return fail(policy_arg.error());
  auto base_paths = base_paths_arg(policy_arg->base_allow, a.base_paths);
  if (!base_paths.ok()) return fail(base_paths.error());
  const bool privileged = ::geteuid() == 0;
  if (a.probes && !privileged)
    return fail("qualify runs the escape probes as root (or pass --no-probes)");
  if (auto s = make_dirs(a.out, 0755); !s.ok()) return fail(s.error());

  // The short replay's plan is read and checked before anything runs.
  std::optional<replay::ReplayPlan> plan;
  std::optional<replay::PolicyChoice> policy;
  const bool replay = a.replay && privileged;
  if (replay) {
    auto trace = a.replay_trace.empty()
                     ? replay::parse_trace(qualify_trace_text(), "built-in burst")
                     : replay::read_trace(a.replay_trace);
    if (!trace.ok()) return fail(std::move(trace).error().context_add("--replay-trace"));
    replay::ReplayTiming timing;
    timing.compress_silence = true;
    auto p = replay::plan_replay(*trace, a.replay_trace.empty() ? "burst" : a.replay_trace, timing);
    if (!p.ok()) return fail(p.error());
    plan = std::move(p).value();
    auto c = replay::resolve_policy(a.policy.empty() ? "default" : a.policy, 0, 0);
    if (!c.ok()) return fail(c.error());
    policy = std::move(c).value();
  }
  std::unique_ptr<controller::Controller> controller;
  if (privileged) {
    controller::ControllerOptions copts;
    copts.paths = options.paths;
    copts.root = g.cgroup_root_name();
    copts.policy = *policy_arg;
    auto c = controller::Controller::create(std::move(copts));
    if (!c.ok()) return fail(std::move(c).error().context_add("the controller for the call costs"));
    controller = std::move(c).value();
  }

  // docs/DESIGN.md, safety rules: the lab is made and entered before any provider starts (the suite
  // does it; without probes, the replay's own lab), so whatever a run sends lands on the
  // decoys, never off the machine.
  // Declared before the suite, which holds a pointer to it: destroyed after the suite.
  std::unique_ptr<ebpf::ActivityTracer> tracer;
  std::unique_ptr<probes::Suite> suite;
  std::unique_ptr<probes::lab::Lab> lab;
  std::optional<NetnsGuard> in_lab;
  if (a.probes) {
    probes::SuiteOptions so;
    so.paths = g.paths();
    so.id_pool = g.parsed_id_pool;
    so.cgroup_root = g.cgroup_root_name();
    so.probe_binary = companion_binary("sandgate-probe");
    if (so.probe_binary.empty()) return fail("sandgate-probe is not installed beside sandgate");
    so.only = a.only;
    so.base_paths = *base_paths;
    so.progress = progress.reporter("qualify: probes");
    // The third witness where the kernel allows it (judge.h, kernel_crossings); where it does
    // not, the verdicts rest on two witnesses and the log says why.
    auto opened = ebpf::ActivityTracer::open();
    if (opened.ok())
      tracer = std::move(opened).value();
    else
      std::cerr << "qualify: no kernel witness (" << opened.error().message() << ")\n";
    so.tracer = tracer.get();
    auto made = probes::Suite::create(so);
    if (!made.ok())
      return fail(std::move(made).error().context_add("setting up the escape probes"));
    suite = std::move(made).value();
  } else if (replay) {
    auto made = probes::lab::Lab::create(g.paths());
    if (!made.ok()) return fail(std::move(made).error().context_add("the replay's network lab"));
    lab = std::move(made).value();
    auto entered = lab->enter();
    if (!entered.ok()) return fail(std::move(entered).error().context_add("entering the lab"));
    in_lab.emplace(std::move(entered).value());
  }

  progress.status("qualify: checking the host (doctor)");
  Json report = {{"schema_version", 2},
                 {"created", utc_now()},
                 {"doctor", doctor_report(g)},
                 {"providers", Json::array()}};
  if (a.probes && !base_paths->empty()) report["probe_base_paths"] = *base_paths;
  reports::ProbeFiles probe_files;  // the full probe reports, for the report model
  bool all_ok = true;
  // Every provider asked for, in order: made and checked first, so that the run costs can be
  // sampled round-robin across them.
  struct Candidate {
    std::string name, shown;
    Json entry;
    std::vector<std::string> errors;
    std::unique_ptr<providers::Provider> p;
    std::vector<double> cycles_ms;
  };
  std::vector<Candidate> candidates;
  for (const auto& name : names) {
    Candidate c{name, name, {{"name", name}}, {}, nullptr, {}};
    providers::ProviderOptions own = options;
    if (name == "podman") own.image = a.image;
    auto p = g.registry.create(name, own);
    if (!p.ok()) {
      c.errors.push_back(p.error().message());
      candidates.push_back(std::move(c));
      continue;
    }
    c.p = std::move(p).value();
    c.shown = display_name(c.p->info());
    if (name == "podman") {
      // The column names the mode: what crossrun.user_inotify finds depends on it.
      auto mode = providers::resolve_podman_mode(own, a.image);
      std::string word = mode.ok() ? providers::to_string(*mode) : "unavailable";
      c.entry["podman_mode"] = word;
      c.shown += " (" + word + (a.image.empty() ? "" : ", image " + a.image) + ")";
    }
    if (name == "microvm") {
      // Every microvm timing depends on the accelerator: the column says which.
      auto vm = providers::microvm_host(options.paths);
      c.shown += " (" + (vm.accel.empty() ? std::string("no accel") : vm.accel) + ")";
      c.entry["accel"] = vm.accel;
      c.entry["accel_why"] = vm.accel_why;
    }
    c.entry["display_name"] = c.shown;
    c.entry["unsafe"] = c.p->info().unsafe;
    Json caps = Json::array();
    for (auto cap : c.p->capabilities()) caps.push_back(to_string(cap));
    c.entry["capabilities"] = caps;
    if (auto s = c.p->available(); !s.ok()) {
      c.entry["unavailable"] = s.error().message();
      c.errors.push_back("not available on this host: " + s.error().message());
    }
    candidates.push_back(std::move(c));
  }

  // The run costs, interleaved: each round is a bare spawn of /bin/true (the cost of doing
  // nothing, reports/model.h Report::spawn_samples_ms) and then one create + exec + destroy of
  // every provider still running, so sample i of each saw the same moment of the machine.
  std::vector<double> spawn_ms;
  const std::string rounds =
      fmt::format("qualify: run costs: create + exec + destroy, {} rounds", a.cycles);
  for (int i = 0; i < a.cycles; ++i) {
    progress.status(rounds, fmt::format("(round {}/{})", i + 1, a.cycles));
    auto base = bare_spawn();
    if (!base.ok()) return fail(std::move(base).error().context_add("the spawn baseline"));
    spawn_ms.push_back(*base);
    for (auto& c : candidates) {
      if (!c.errors.empty()) continue;
      auto t = cycle(*c.p);
      if (t.ok())
        c.cycles_ms.push_back(*t);
      else
        c.errors.push_back(t.error().message());
    }
  }
  report["spawn_samples_ms"] = spawn_ms;

  for (auto& c : candidates) {
    Json& entry = c.entry;
    std::vector<std::string>& errors = c.errors;
    auto finish = [&] {
      entry["ok"] = errors.empty();
      if (!errors.empty()) {
        entry["error"] = join(errors, "; ");
        entry["errors"] = errors;  // one reason each, for the report model
        all_ok = false;
      }
      report["providers"].push_back(entry);
    };
    if (!c.p || entry.contains("unavailable")) {
      finish();
      continue;
    }
    const std::string& name = c.name;
    const std::string& shown = c.shown;
    const std::vector<double>& ms = c.cycles_ms;
    entry["cycles_ms"] = ms;
    if (!ms.empty()) entry["median_ms"] = stats::median(ms);

    if (controller && errors.empty()) {
      progress.status(
          fmt::format("qualify: {}: call costs: {} calls of true, with and without the controller",
                      shown, a.calls));
      auto costs = call_costs(*c.p, *controller, a.calls);
      if (costs.ok()) {
        entry["exec_samples_ms"] = costs->exec_ms;
        entry["call_samples_ms"] = costs->call_ms;
        entry["exec_ms"] = stats::median(costs->exec_ms);
        entry["call_ms"] = stats::median(costs->call_ms);
      } else {
        errors.push_back(costs.error().message());
      }
    }

    std::optional<probes::ProviderRun> probed;
    if (suite && errors.empty()) {
      auto run = suite->run(*c.p);
      if (!run.ok()) {
        errors.push_back(run.error().message());
      } else {
        std::string file = a.out + "/probe-" + name + ".json";
        // A provider name may carry a path (external:/opt/x): keep the file name flat.
        std::replace(file.begin() + static_cast<std::ptrdiff_t>(a.out.size()) + 1, file.end(), '/',
                     '_');
        Json full = {{"schema_version", probes::kReportSchemaVersion}, {"runs", {run->to_json()}}};
        if (auto s = write_json_file_atomic(file, full); !s.ok()) return fail(s.error());
        probe_files[name] = std::move(full);
        entry["probes"] = probe_summary(*run, file);
        if (!run->failing().empty()) errors.push_back("the escape probes found it exposed");
        probed = std::move(run).value();
      }
    }
    std::string disqualified;
    entry["policy"] =
        policy_check(*policy_arg, c.p->capabilities(), probed ? &*probed : nullptr, disqualified);
    if (!disqualified.empty()) errors.push_back(disqualified);

    // The replay measures containment and fidelity, not isolation: an exposed provider is
    // still replayed (one that could not run a call is not).
    if (plan && !ms.empty()) {
      providers::ProviderOptions own = options;
      if (name == "podman") own.image = a.image;
      auto scores = short_replay(g, name, own, *plan, *policy, progress, "qualify: " + shown);
      if (!scores.ok()) {
        errors.push_back(scores.error().message());
      } else {
        entry["replay"] = reports::to_json(replay_summary(*scores));
        if (scores->completed < scores->calls)
          errors.push_back(fmt::format("replay: {} of {} calls did not complete",
                                       scores->calls - scores->completed, scores->calls));
      }
    }
    finish();
  }

  in_lab.reset();
  if (lab) {
    if (auto s = lab->destroy(); !s.ok())
      return fail(std::move(s).error().context_add("removing the lab"));
  }
  if (suite) {
    if (auto s = suite->close(); !s.ok())
      return fail(std::move(s).error().context_add("cleaning up the probes"));
  }
  // The same findings as the report model, in every format.
  auto model = reports::from_qualify(report, probe_files);
  if (!model.ok()) return fail(std::move(model).error().context_add("building the report"));
  // Every probe whose verdict differs between the providers, each provider's verdict and its
  // evidence: bubblewrap's and Podman's results are a check on the judge too, and where they
  // differ from the jail the evidence must say why.
  auto diffs = reports::probe_differences(*model);
  Json differences = Json::array();
  for (const auto& d : diffs) {
    Json row = {{"probe", d.id}, {"providers", Json::object()}};
    for (const auto& [provider, cell] : d.verdicts) {
      row["providers"][provider] = {{"verdict", cell.verdict}};
      if (!cell.why.empty()) row["providers"][provider]["why"] = cell.why;
    }
    differences.push_back(std::move(row));
  }
  report["probe_differences"] = differences;
  std::string file = a.out + "/qualify.json";
  if (auto s = write_json_file_atomic(file, report); !s.ok()) return fail(s.error());
  if (auto s = reports::write_all_formats(*model, a.out); !s.ok())
    return fail(std::move(s).error().context_add("writing the report"));

  progress.clear();  // the results, on stdout, start on a clean line
  std::cout << side_by_side(report["providers"], a).render();
  for (const auto& e : report["providers"])
    if (e.contains("error"))
      std::cout << "✗ " << e.value("display_name", e["name"].get<std::string>()) << ": "
                << e["error"].get<std::string>() << "\n";
  if (!differences.empty()) {
    std::cout << "\nwhere the probes disagree (" << differences.size() << "):\n";
    for (const auto& d : differences) {
      std::cout << "  " << d["probe"].get<std::string>() << "\n";
      for (const auto& [provider, v] : d["providers"].items())
        std::cout << "    " << provider << ": " << v["verdict"].get<std::string>()
                  << (v.contains("why") ? " — " + cut(v["why"].get<std::string>(), 110) : "")
                  << "\n";
    }
  }
  std::cout << "\nrun: median of " << a.cycles << " create + exec(true) + destroy; call: median of "
            << a.calls << " calls of true in one live run\n";
  std::cout << "report: " << file << "; " << a.out
            << "/report.html, report.json, junit.xml, report.sarif, summary.md\n";
  return all_ok ? 0 : 1;
}

}  // namespace

void add_qualify_command(CLI::App& app, Globals& g) {
  auto a = std::make_shared<QualifyArgs>();
  auto* sub = app.add_subcommand(
      "qualify",
      "The main job: check the host (as `doctor`), then exercise every provider side by side:\n"
      "  run    create an environment, run true, destroy it (timed, --cycles times)\n"
      "  call   one call of true in a live run, through the provider alone and through the\n"
      "         controller (its own cgroup and grant), median of --calls\n"
      "  probes the escape probes (as `probe`, inside a fresh lab network namespace)\n"
      "  replay a short recorded burst replayed through the per-call policy\n"
      "  policy the policy's required capabilities against what each provider delivers: its\n"
      "         declaration less what the probes contradicted\n"
      "--base-path (and the policy's base.allow) narrows the read-only base of the probes'\n"
      "runs, as `probe --base-path` does (qualify.json: probe_base_paths); the run and call\n"
      "costs and the replay use each provider's default base.\n"
      "Prints one table with the providers as columns, and every probe whose verdict differs\n"
      "between them with each one's evidence. Writes DIR/qualify.json and\n"
      "DIR/probe-<provider>.json, and the report in every format (`sandgate report render`):\n"
      "DIR/report.html, report.json, junit.xml, report.sarif, summary.md.\n"
      "Default providers: every safe one this build has (and every configured external one);\n"
      "one this host cannot run is listed with the reason. Exit status 1 if any selected\n"
      "provider is unavailable, fails, or is exposed by a probe.\n"
      "Example: sandgate qualify --provider namespaces --provider podman --out reports/out");
  sub->add_option("--out", a->out, "report directory")->capture_default_str();
  sub->add_option("--provider", a->providers, "qualify only these providers (repeatable)");
  sub->add_option("--cycles", a->cycles, "create + exec + destroy cycles per provider")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  sub->add_option("--calls", a->calls, "calls of true per provider for the call cost")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  sub->add_flag("--allow-unsafe-host", a->allow_unsafe_host, "permit --provider host_dir");
  sub->add_option("--image", a->image,
                  "podman: every run's root from this local image instead of the assembled\n"
                  "read-only base (the column is named podman (rootful, image NAME): a rootless "
                  "run has no image)");
  sub->add_flag("--no-probes{false}", a->probes, "skip the escape probes");
  sub->add_option("--policy", a->policy,
                  "hold each provider to this policy's required capabilities (default: the "
                  "built-in policy); a declared capability the probes contradict counts as absent");
  sub->add_option("--only", a->only,
                  "probe only this boundary: fs, net, creds, proc, disclosure, crossrun, persist, "
                  "resource (repeatable)");
  add_base_path_option(sub, a->base_paths);
  sub->add_flag("--no-replay{false}", a->replay, "skip the short replay");
  sub->add_option(
      "--replay-trace", a->replay_trace,
      "the trace the short replay runs (default: a built-in recorded burst, traces/burst.trace)");
  sub->callback([&g, a] { g.exit_code = run_qualify(g, *a); });
}

}  // namespace sandgate::cli
