// sandgate probe: the escape probes against one provider (or the mutation self-test), judged
// with two witnesses; a table grouped by boundary, exit 1 if anything is exposed.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>

#include "cli/common.h"
#include "core/files.h"
#include "core/json.h"
#include "core/progress.h"
#include "core/strings.h"
#include "core/table.h"
#include "core/units.h"
#include "ebpf/activity_tracer.h"
#include "ebpf/egress.h"
#include "probes/plan.h"
#include "probes/suite.h"
#include "providers/weakening.h"
#include "reports/from_qualify.h"
#include "reports/writers.h"

namespace sandgate::cli {
namespace {

struct ProbeArgs {
  std::string provider;
  std::vector<std::string> only;
  std::string json;
  bool self_test = false;
  bool allow_unsafe_host = false;
  std::string image;                    // podman: a local image for every run's root
  std::string report;                   // a directory for the report model in every format
  std::string net = "none";             // --net none|allowlist
  std::vector<std::string> allow;       // --allow (default with allowlist: the lab's registry)
  std::vector<std::string> base_paths;  // --base-path: every run's read-only base narrowed
  std::string workspace_size;           // --workspace-size (namespaces): "" is off
};

void print_table(const probes::ProviderRun& run) {
  std::string name = run.provider + (run.unsafe ? " (UNSAFE: no isolation)" : "");
  for (auto w : run.weakenings) name += " +" + providers::to_string(w);
  if (!run.egress_allow.empty()) name += " --net allowlist (" + join(run.egress_allow, ", ") + ")";
  if (!run.base_paths.empty()) name += " --base-path (" + join(run.base_paths, ", ") + ")";
  if (run.workspace_size != 0)
    name += " --workspace-size " + format_bytes(Bytes{run.workspace_size});
  std::cout << "provider " << name << "\n";
  // Grouped by boundary; one set of widths for all the groups, so they line up.
  TextTable table({{"probe"}, {"verdict"}, {"layer"}, {"why", TextTable::Align::kLeft, 90}},
                  {.indent = "    ", .header = false});
  std::string boundary;
  for (const auto& j : run.judgements) {
    if (j.boundary != boundary) {
      boundary = j.boundary;
      table.section("").section("  " + boundary);
    }
    table.row({j.id, to_string(j.verdict), to_string(j.layer),
               j.known_limit.empty() ? j.why : j.why + " [known limit: " + j.known_limit + "]"});
  }
  std::cout << table.render();
  auto t = probes::tally(run.judgements);
  // Warnings (allowed by design, a vector for later: persist.git_hooks) do not fail the run.
  // Exposures with a known limit (what only a separate kernel hides) are shown, and do not
  // fail the run either: no setting of this provider closes them.
  size_t known = run.exposed().size() - run.failing().size();
  std::cout << "\n  " << t.blocked << " blocked, " << t.exposed << " exposed"
            << (known ? " (" + std::to_string(known) + " a known limit of the provider)" : "")
            << ", " << t.inconclusive << " inconclusive, " << t.warning << " warning in "
            << format_duration(run.wall) << "\n";
  // Declared capabilities are claims: one with an exposed probe is not delivered.
  for (const auto& k : run.contradictions())
    std::cout << "  declared " << to_string(k.capability) << ", contradicted by "
              << join(k.probes, ", ") << "\n";
}

// The probes of `expected` that did not flag the run exposed.
std::vector<std::string> missing_catchers(const probes::ProviderRun& run,
                                          const std::vector<std::string>& expected) {
  std::vector<std::string> missing;
  for (const auto& id : expected) {
    bool caught = false;
    for (const auto* j : run.exposed()) caught |= j->id == id;
    if (!caught) missing.push_back(id);
  }
  return missing;
}

std::string join_ids(const Json& ids) {
  std::string list;
  for (const auto& id : ids) list += (list.empty() ? "" : ", ") + id.get<std::string>();
  return list.empty() ? "(none)" : list;
}

Json report_json(const std::vector<probes::ProviderRun>& runs, const probes::Suite& suite,
                 double wall_s, const Json& matrix, const Json& missing, const Json& not_held,
                 const Json& not_applicable) {
  Json j = {{"schema_version", probes::kReportSchemaVersion},
            {"marker", suite.marker()},
            {"baseline_ms", to_millis(suite.baseline_wall())},
            {"wall_s", wall_s}};
  Json list = Json::array();
  for (const auto& r : runs) list.push_back(r.to_json());
  j["runs"] = list;
  if (!matrix.is_null()) j["mutation_matrix"] = matrix;
  // Per weakening, the probes its plan expects to catch it (probes/plan.cc) that did not.
  if (!missing.is_null()) j["mutation_missing"] = missing;
  // Per weakening, the probes its plan expects the remaining layers to hold that they did not.
  if (!not_held.is_null()) j["mutation_not_held"] = not_held;
  // The weakenings the provider does not take (ProviderInfo::only_weakenings): not run.
  if (!not_applicable.empty()) j["mutation_not_applicable"] = not_applicable;
  return j;
}

int run_probe(Globals& g, const ProbeArgs& a) {
  // stderr: a status line on a terminal, plain lines in a CI log (core/progress.h).
  Progress progress;
  // An error goes on a line of its own, not onto the end of the status line.
  auto fail = [&progress](const auto& error) {
    progress.clear();
    return cli::fail(error);
  };
  if (::geteuid() != 0) return fail("sandgate probe needs root (the lab is a network namespace)");
  if (!a.self_test && a.provider.empty()) return fail("--provider is required (or --self-test)");
  auto start = std::chrono::steady_clock::now();
  probes::SuiteOptions so;
  so.paths = g.paths();
  so.id_pool = g.parsed_id_pool;
  so.cgroup_root = g.cgroup_root_name();
  so.probe_binary = companion_binary("sandgate-probe");
  so.only = a.only;
  auto base = base_paths_arg({}, a.base_paths);
  if (!base.ok()) return fail(base.error());
  so.base_paths = std::move(base).value();
  if (!a.workspace_size.empty()) {
    auto size = parse_bytes(a.workspace_size);
    if (!size.ok()) return fail(std::move(size).error().context_add("--workspace-size"));
    so.workspace_size = size->value;
  }
  so.progress = progress.reporter("sandgate probe");
  // The third witness where the kernel allows it (judge.h, kernel_crossings); where it does
  // not, the verdicts rest on two witnesses and the log says why.
  auto tracer = ebpf::ActivityTracer::open();
  if (tracer.ok())
    so.tracer = tracer->get();
  else
    std::cerr << "sandgate probe: no kernel witness (" << tracer.error().message() << ")\n";
  // The allowlist variant: the lab is the runs' upstream; the registry decoy is what they may
  // reach unless --allow says otherwise.
  std::unique_ptr<ebpf::EgressGuard> guard;
  if (a.net == "allowlist") {
    auto rules = parse_egress_rules(
        a.allow.empty()
            ? std::vector<std::string>{"tcp:203.0.113.20:443", "tcp:registry.sandgate.test:443"}
            : a.allow);
    if (!rules.ok()) return fail(std::move(rules).error().context_add("--allow"));
    auto opened = ebpf::EgressGuard::open();
    if (!opened.ok())
      return fail(std::move(opened).error().context_add(
          "--net allowlist needs the eBPF egress guard (sandgate doctor, \"bpf\")"));
    guard = std::move(opened).value();
    so.egress_allow = std::move(rules).value();
    so.egress_guard = guard.get();
  } else if (!a.allow.empty()) {
    return fail("--allow needs --net allowlist");
  }
  auto suite = probes::Suite::create(so);
  if (!suite.ok()) return fail(suite.error());

  std::vector<probes::ProviderRun> runs;
  Json matrix, missing, not_held;
  Json not_applicable = Json::array();  // self-test: weakenings the provider does not take
  bool failed = false;
  if (!a.self_test) {
    providers::ProviderOptions po = g.provider_options();
    po.allow_unsafe_host = a.allow_unsafe_host;
    if (auto s = check_image_provider(a.provider, a.image); !s.ok()) return fail(s.error());
    po.image = a.image;
    auto provider = g.registry.create(a.provider, po);
    if (!provider.ok()) return fail(provider.error());
    auto run = (*suite)->run(**provider);
    if (!run.ok()) return fail(run.error());
    runs.push_back(std::move(run).value());
    failed = !runs.back().failing().empty();
  } else {
    // The only place ProviderOptions::self_test_weakenings is ever set.
    providers::ProviderOptions po = g.provider_options();
    po.self_test_weakenings = true;
    // The jail unless --provider names another provider that honours weakenings (podman, microvm).
    auto provider = g.registry.create(a.provider.empty() ? "namespaces" : a.provider, po);
    if (!provider.ok()) return fail(provider.error());
    auto hardened = (*suite)->run(**provider);
    if (!hardened.ok()) return fail(hardened.error());
    runs.push_back(std::move(hardened).value());
    matrix = Json::object();
    missing = Json::object();
    not_held = Json::object();
    Json hard = Json::array();
    for (const auto* j : runs.back().failing()) hard.push_back(j->id);
    matrix["hardened"] = hard;
    if (!hard.empty()) failed = true;
    const auto honoured = providers::honoured_weakenings((*provider)->info());
    for (auto w : providers::all_weakenings()) {
      if (!providers::weakened(honoured, w)) {
        // Refused by this provider (a microVM's guest has none of the jail's settings): not
        // a weakening it can be given, so nothing to catch.
        not_applicable.push_back(providers::to_string(w));
        continue;
      }
      progress.line("sandgate probe: self-test: weakened with " + providers::to_string(w));
      auto run = (*suite)->run(**provider, {w});
      (void)providers::remove_shared_dirs(po.paths);
      if (!run.ok()) return fail(run.error());
      runs.push_back(std::move(run).value());
      Json caught = Json::array();
      for (const auto* j : runs.back().exposed()) caught.push_back(j->id);
      matrix[providers::to_string(w)] = caught;
      // Caught is not enough: by every probe that tests directly what the weakening opens.
      // A weakening no plan expects anything of fails too (a new one must be given catchers).
      auto expected = probes::probes_catching(w);
      Json not_caught = Json::array();
      for (const auto& id : missing_catchers(runs.back(), expected)) not_caught.push_back(id);
      if (expected.empty()) not_caught.push_back("(no probe is planned to catch it)");
      missing[providers::to_string(w)] = not_caught;
      // And the layers that stay must still hold what the plan says each holds alone.
      Json unheld = Json::array();
      for (const auto& line : probes::missing_holders(
               w, (*provider)->capabilities(), runs.back().judgements, runs.back().landlock_abi))
        unheld.push_back(line);
      not_held[providers::to_string(w)] = unheld;
      if (caught.empty() || !not_caught.empty() || !unheld.empty()) failed = true;
    }
  }
  double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  progress.clear();  // the tables, on stdout, start on a clean line

  for (const auto& r : runs) {
    print_table(r);
    std::cout << "\n";
  }
  if (a.self_test) {
    std::cout << "mutation matrix (weakening: probes that flagged it exposed; each must include "
                 "the probes its plan expects)\n";
    TextTable table({{"weakening"}, {"result"}, {"probes"}}, {.indent = "  ", .header = false});
    for (auto& [name, ids] : matrix.items()) {
      const Json* absent = missing.contains(name) ? &missing[name] : nullptr;
      const Json* unheld = not_held.contains(name) ? &not_held[name] : nullptr;
      bool ok = name == "hardened"
                    ? ids.empty()
                    : !ids.empty() && absent && absent->empty() && unheld && unheld->empty();
      table.row({name, ok ? "ok" : "FAILED", ids.empty() ? "(none)" : join_ids(ids)});
      if (absent && !absent->empty())
        table.row({"", "", "expected but not flagged: " + join_ids(*absent)});
      if (unheld && !unheld->empty())
        table.row({"", "", "expected still blocked: " + join_ids(*unheld)});
    }
    for (const auto& name : not_applicable)
      table.row({name.get<std::string>(), "n/a", "not a weakening this provider takes"});
    std::cout << table.render();
  }
  std::printf("baseline %.1fs, total %.1fs\n", to_seconds((*suite)->baseline_wall()), wall_s);
  if (!a.report.empty()) {
    auto model = reports::from_probe_report(
        report_json(runs, **suite, wall_s, matrix, missing, not_held, not_applicable),
        doctor_report(g));
    if (!model.ok()) return fail(std::move(model).error().context_add("building the report"));
    if (auto s = make_dirs(a.report, 0755); !s.ok()) return fail(s.error());
    if (auto s = reports::write_all_formats(*model, a.report); !s.ok())
      return fail(std::move(s).error().context_add("writing the report"));
  }
  if (!a.json.empty()) {
    auto s = write_json_file_atomic(
        a.json, report_json(runs, **suite, wall_s, matrix, missing, not_held, not_applicable));
    if (!s.ok()) return fail(s.error());
  }
  if (auto s = (*suite)->close(); !s.ok())
    return fail(std::move(s).error().context_add("cleaning up"));
  return failed ? 1 : 0;
}

}  // namespace

void add_probe_command(CLI::App& app, Globals& g) {
  auto a = std::make_shared<ProbeArgs>();
  auto* sub = app.add_subcommand(
      "probe",
      "Try to cross each isolation boundary from inside a provider and judge each attempt with\n"
      "two witnesses (the probe's report and what the host saw).\n"
      "  sandgate probe --provider namespaces\n"
      "  sandgate probe --provider host_dir --allow-unsafe-host --only net --json report.json\n"
      "  sandgate probe --self-test     (every test-only weakening must be caught, by every\n"
      "                                  probe its plan names, and the layers it leaves must\n"
      "                                  still block what each holds alone: probes/plan.cc)\n"
      "  sandgate probe --self-test --provider podman   (the same weakenings as Podman flags)\n"
      "  sandgate probe --self-test --provider microvm  (share_host_network only: a tap on the\n"
      "                                  lab; the others are listed n/a)\n"
      "Each probe runs natively first (the baseline) inside a fresh lab network namespace with\n"
      "decoys; canaries (tokens, a home, host files, a sentinel process) are removed afterwards.\n"
      "Verdicts: blocked (by which layer), exposed (with the evidence), inconclusive (why).\n"
      "Exit status: 0 nothing exposed, 1 something exposed (or the self-test failed), 2 error.");
  sub->add_option("--provider", a->provider, "provider to probe (see `sandgate providers`)");
  sub->add_option(
      "--only", a->only,
      "boundary: fs, net, creds, proc, disclosure, crossrun, persist, resource (repeatable)");
  sub->add_option("--json", a->json, "write the full report (schema_version 1) to FILE");
  sub->add_option("--report", a->report,
                  "also write the report model in every format into DIR (report.json,\n"
                  "report.html, junit.xml, report.sarif, summary.md), as qualify does");
  sub->add_flag(
      "--self-test", a->self_test,
      "run against the namespaces provider (or --provider podman), hardened and with each\n"
      "test-only weakening");
  sub->add_flag("--allow-unsafe-host", a->allow_unsafe_host, "permit the host_dir provider");
  sub->add_option("--net", a->net,
                  "none (default) or allowlist: providers that declare net.egress_policy run\n"
                  "wired to the lab with an egress allowlist enforced by the kernel's guard; the\n"
                  "allowed endpoint must be reachable (a warning: allowed by design), everything\n"
                  "else blocked with layer egress. Others run as with none (the table says which)")
      ->check(CLI::IsMember({"none", "allowlist"}));
  sub->add_option("--allow", a->allow,
                  "with --net allowlist: an entry, [tcp:|udp:]ADDRESS[/PREFIX]:PORT or NAME:PORT\n"
                  "(repeatable; default tcp:203.0.113.20:443 and tcp:registry.sandgate.test:443,\n"
                  "the lab's registry decoy by address and by name). Each run's resolver asks the\n"
                  "lab's DNS decoy about the names and refuses every other name");
  sub->add_option("--image", a->image,
                  "podman: every run's root from this local image (checked with `podman image\n"
                  "exists`; no registry is contacted) instead of the assembled read-only base");
  add_base_path_option(sub, a->base_paths);
  sub->add_option("--workspace-size", a->workspace_size,
                  "SIZE: the namespaces provider's runs get their workspace on a filesystem of\n"
                  "their own of SIZE (as `exec --workspace-size`); other providers run as before");
  sub->callback([&g, a] { g.exit_code = run_probe(g, *a); });
}

}  // namespace sandgate::cli
