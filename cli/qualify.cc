// sandgate qualify: the main job. What the host supports (doctor), then each selected provider
// exercised for real (create + exec + destroy, timed) and put through the escape probes
// (probes/suite.h), written as a JSON report.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <optional>

#include "cli/common.h"
#include "core/files.h"
#include "core/stats.h"
#include "core/strings.h"
#include "core/table.h"
#include "core/units.h"
#include "probes/suite.h"

namespace sandgate::cli {
namespace {

struct QualifyArgs {
  std::string out = "reports/out";
  std::vector<std::string> providers;
  bool allow_unsafe_host = false;
  int cycles = 5;
  bool probes = true;
  std::string policy;  // whose required capabilities each provider is held to
};

// The probe suite's verdicts for one provider, summarised for qualify.json; the full report
// goes beside it.
Json probe_summary(const probes::ProviderRun& run, const std::string& file) {
  auto t = probes::tally(run.judgements);
  Json exposed = Json::array();
  for (const auto* j : run.exposed()) exposed.push_back(j->id);
  Json contradicted = Json::array();
  for (const auto& k : run.contradictions())
    contradicted.push_back({{"capability", to_string(k.capability)}, {"probes", k.probes}});
  return {{"blocked", t.blocked},
          {"exposed", t.exposed},
          {"inconclusive", t.inconclusive},
          {"warning", t.warning},
          {"exposed_ids", exposed},
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

// One row per provider: ✓ or ✗, the median cycle, the probes' tally, what went wrong (a column
// only when something did).
TextTable summary_table(const Json& providers, bool probes) {
  constexpr auto kRight = TextTable::Align::kRight;
  constexpr const char* kVerdicts[] = {"blocked", "exposed", "inconclusive", "warning"};
  const bool errors = std::any_of(providers.begin(), providers.end(),
                                  [](const Json& e) { return e.contains("error"); });
  std::vector<TextTable::Column> columns = {{"provider"}, {"cycle", kRight}};
  if (probes) {
    for (const char* verdict : kVerdicts) columns.push_back({verdict, kRight});
  }
  if (errors) columns.push_back({"error"});
  TextTable table(std::move(columns));
  for (const auto& e : providers) {
    std::vector<std::string> row = {
        (e["ok"].get<bool>() ? "✓ " : "✗ ") + e.value("display_name", e["name"].get<std::string>()),
        e.contains("median_ms") ? fmt::format("{:.1f} ms", e["median_ms"].get<double>()) : "-"};
    if (probes) {
      for (const char* verdict : kVerdicts)
        row.push_back(e.contains("probes") ? std::to_string(e["probes"][verdict].get<size_t>())
                                           : "-");
    }
    if (errors) row.push_back(e.value("error", ""));
    table.row(std::move(row));
  }
  return table;
}

// One create + exec(/bin/true) + destroy; the wall time in milliseconds.
Result<double> cycle(providers::Provider& p) {
  auto start = std::chrono::steady_clock::now();
  auto env = p.create({});
  if (!env.ok()) return std::move(env).error();
  providers::Call call;
  call.argv = {"true"};
  auto r = (*env)->exec(call, {});
  SG_TRY((*env)->destroy());
  if (!r.ok()) return std::move(r).error();
  if (r->status.shell_code() != 0)
    return logic_error("exec true", "exited with " + r->status.describe());
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

int run_qualify(Globals& g, const QualifyArgs& a) {
  providers::ProviderOptions options = g.provider_options();
  options.allow_unsafe_host = a.allow_unsafe_host;
  std::vector<std::string> names = a.providers;
  if (names.empty()) {
    // The default providers: every safe one. The unsafe bypass cable is never a default.
    for (const auto& e : g.registry.entries())
      if (!e.info.unsafe) names.push_back(e.info.name);
  }
  auto policy = load_policy_arg(a.policy);
  if (!policy.ok()) return fail(policy.error());
  if (auto s = make_dirs(a.out, 0755); !s.ok()) return fail(s.error());
  // The suite makes the lab and enters it first (DESIGN.md, safety rules): every provider below
  // is created inside it, so whatever a run sends lands on the decoys, never off the machine.
  std::unique_ptr<probes::Suite> suite;
  if (a.probes) {
    if (::geteuid() != 0) return fail("qualify runs the escape probes as root (or pass --no-probes)");
    probes::SuiteOptions so;
    so.paths = g.paths();
    so.cgroup_root = g.cgroup_root_name();
    so.probe_binary = companion_binary("sandgate-probe");
    if (so.probe_binary.empty()) return fail("sandgate-probe is not installed beside sandgate");
    so.progress = [](const std::string& line) { std::cerr << "qualify: probes: " << line << "\n"; };
    auto made = probes::Suite::create(so);
    if (!made.ok()) return fail(std::move(made).error().context_add("setting up the escape probes"));
    suite = std::move(made).value();
  }
  std::cerr << "qualify: checking the host (doctor)...\n";
  Json report = {{"schema_version", 1}, {"doctor", doctor_report(g)}, {"providers", Json::array()}};
  bool all_ok = true;
  for (const auto& name : names) {
    Json entry = {{"name", name}};
    auto p = g.registry.create(name, options);
    if (!p.ok()) {
      entry["ok"] = false;
      entry["error"] = p.error().message();
      report["providers"].push_back(entry);
      all_ok = false;
      continue;
    }
    entry["display_name"] = display_name((*p)->info());
    entry["unsafe"] = (*p)->info().unsafe;
    Json caps = Json::array();
    for (auto c : (*p)->capabilities()) caps.push_back(to_string(c));
    entry["capabilities"] = caps;
    if (auto s = (*p)->available(); !s.ok()) {
      entry["ok"] = false;
      entry["error"] = s.error().message();
      report["providers"].push_back(entry);
      all_ok = false;
      continue;
    }
    std::vector<double> ms;
    std::string error;
    for (int i = 0; i < a.cycles && error.empty(); ++i) {
      std::cerr << "qualify: " << display_name((*p)->info()) << ": create + exec + destroy "
                << (i + 1) << "/" << a.cycles << "\r" << std::flush;
      auto t = cycle(**p);
      if (t.ok()) ms.push_back(*t);
      else error = t.error().message();
    }
    std::cerr << "\n";
    entry["cycles_ms"] = ms;
    if (!ms.empty()) entry["median_ms"] = stats::median(ms);
    std::optional<probes::ProviderRun> probed;
    if (suite && error.empty()) {
      auto run = suite->run(**p);
      if (!run.ok()) {
        error = run.error().message();
      } else {
        std::string file = a.out + "/probe-" + name + ".json";
        Json full = {{"schema_version", probes::kReportSchemaVersion}, {"runs", {run->to_json()}}};
        if (auto s = write_json_file_atomic(file, full); !s.ok()) return fail(s.error());
        entry["probes"] = probe_summary(*run, file);
        if (!run->exposed().empty()) error = "the escape probes found it exposed";
        probed = std::move(run).value();
      }
    }
    entry["policy"] =
        policy_check(*policy, (*p)->capabilities(), probed ? &*probed : nullptr, error);
    entry["ok"] = error.empty();
    if (!error.empty()) {
      entry["error"] = error;
      all_ok = false;
    }
    report["providers"].push_back(entry);
  }

  if (suite) {
    if (auto s = suite->close(); !s.ok()) return fail(std::move(s).error().context_add("cleaning up the probes"));
  }
  std::string file = a.out + "/qualify.json";
  if (auto s = write_json_file_atomic(file, report); !s.ok()) return fail(s.error());
  std::cout << summary_table(report["providers"], a.probes).render()
            << "cycle: the median time of one create + exec(true) + destroy (--cycles " << a.cycles
            << ")\n";
  std::cout << "report: " << file << "\n";
  return all_ok ? 0 : 1;
}

}  // namespace

void add_qualify_command(CLI::App& app, Globals& g) {
  auto a = std::make_shared<QualifyArgs>();
  auto* sub = app.add_subcommand(
      "qualify",
      "The main job: check the host (as `doctor`), then exercise each provider for real\n"
      "(create an environment, run a command, destroy it; timed), run the escape probes\n"
      "against it (as `probe`, inside a fresh lab network namespace), and write\n"
      "DIR/qualify.json with DIR/probe-<provider>.json beside it.\n"
      "Default providers: every safe one this build has. Exit status 1 if any selected provider\n"
      "is unavailable, fails, or is exposed by a probe.");
  sub->add_option("--out", a->out, "report directory")->capture_default_str();
  sub->add_option("--provider", a->providers, "qualify only these providers (repeatable)");
  sub->add_option("--cycles", a->cycles, "create + exec + destroy cycles per provider")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  sub->add_flag("--allow-unsafe-host", a->allow_unsafe_host, "permit --provider host_dir");
  sub->add_flag("--no-probes{false}", a->probes, "skip the escape probes (no root needed)");
  sub->add_option("--policy", a->policy,
                  "hold each provider to this policy's required capabilities (default: the "
                  "built-in policy); a declared capability the probes contradict counts as absent");
  sub->callback([&g, a] { g.exit_code = run_qualify(g, *a); });
}

}  // namespace sandgate::cli
