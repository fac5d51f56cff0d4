// sandgate gate: a current report against a baseline, for a pre-merge check on a change to a
// sandbox. Wiring only: the comparison is reports/gate.h, the summary reports/writers.h.
// Exit 0: nothing regressed; 1: something did (the listing says what, worst first); 2: bad
// input (a file that does not read, a field that is wrong), as for every command.
#include "reports/gate.h"

#include <iostream>

#include "cli/common.h"
#include "reports/from_qualify.h"
#include "reports/writers.h"

namespace sandgate::cli {
namespace {

struct GateArgs {
  std::string baseline, current, tolerance, markdown, json;
};

int run_gate(const GateArgs& a) {
  reports::GateTolerance tolerance;
  if (!a.tolerance.empty()) {
    auto t = reports::load_tolerance(a.tolerance);
    if (!t.ok()) return fail(std::move(t).error().context_add("--tolerance"));
    tolerance = std::move(t).value();
  }
  auto baseline = reports::load_report(a.baseline);
  if (!baseline.ok()) return fail(std::move(baseline).error().context_add("--baseline"));
  auto current = reports::load_report(a.current);
  if (!current.ok()) return fail(current.error());
  auto result = reports::run_gate(*baseline, *current, tolerance);
  std::cout << reports::render_gate_text(result, a.baseline, a.current) << std::flush;
  if (!a.markdown.empty()) {
    reports::MarkdownOptions md;
    md.what_changed = result.what_changed();
    if (md.what_changed.empty()) md.what_changed = {"nothing changed against the baseline"};
    auto text = reports::render_markdown(*current, md);
    if (auto s = reports::write_report_file(a.markdown, text); !s.ok()) return fail(s.error());
  }
  if (!a.json.empty()) {
    if (auto s = reports::write_report_file(a.json, reports::to_json(result).dump(2) + "\n");
        !s.ok())
      return fail(s.error());
  }
  return result.failing() > 0 ? 1 : 0;
}

}  // namespace

void add_gate_command(CLI::App& app, Globals& g) {
  auto a = std::make_shared<GateArgs>();
  auto* sub = app.add_subcommand(
      "gate",
      "Compares a current report against a baseline report and fails when something regressed.\n"
      "Worst first: a probe that was blocked and is now exposed; a probe that was blocked and\n"
      "now proves nothing, only warns or no longer runs; a capability no longer declared; a\n"
      "provider newly disqualified or gone; containment worse in the replay (fewer calls\n"
      "completed, more killed, cancelled or timed out, more work lost); the victim's latency\n"
      "inflation worse; costs worse. Costs are compared as ratios of samples taken side by side\n"
      "in one run (a run against a bare spawn of /bin/true, a controlled call against the\n"
      "provider's own exec), and called worse only when the 95% intervals of the two medians do\n"
      "not overlap and the median rose by more than 10%: one slow sample never fails a merge.\n"
      "Each finding ends with its key ([podman/net.vsock]); a reviewed, intended change is\n"
      "accepted by listing its key in the tolerance file:\n"
      "  {\"cost_relative\": 0.10, \"absolute_relative\": 1.0, \"confidence\": 0.95,\n"
      "   \"work_lost_s\": 0.5, \"victim_relative\": 0.5, \"accept\": [\"podman/proc.tiocsti\"]}\n"
      "(absolute_relative: for a benchmark figure with no baseline in its own run; see README)\n"
      "Reports are report.json (or qualify.json with its probe files), as `qualify` writes them.\n"
      "Exit status: 0 nothing regressed, 1 something did, 2 bad input.\n"
      "Example: sandgate gate --baseline ci/baseline/report.json reports/out/report.json "
      "--markdown gate.md");
  sub->add_option("--baseline", a->baseline, "the report to compare against (report.json)")
      ->required();
  sub->add_option("CURRENT", a->current, "the report of the change (report.json)")->required();
  sub->add_option("--tolerance", a->tolerance,
                  "JSON: thresholds and accepted findings (see above)");
  sub->add_option("--markdown", a->markdown,
                  "also write the Markdown summary of CURRENT with what changed first");
  sub->add_option("--json", a->json, "also write the findings as JSON");
  sub->callback([&g, a] { g.exit_code = run_gate(*a); });
}

}  // namespace sandgate::cli
