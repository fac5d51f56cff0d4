// sandgate report render: a saved report (the model, or a qualify.json with its probe files
// beside it) rendered again in any format. Wiring only: reading is reports/from_qualify.h,
// rendering reports/writers.h.
#include <iostream>

#include "cli/common.h"
#include "reports/from_qualify.h"
#include "reports/writers.h"

namespace sandgate::cli {
namespace {

struct RenderArgs {
  std::string format;
  std::string in;
  std::string out = "-";
};

int run_render(const RenderArgs& a) {
  auto format = reports::parse_format(a.format);
  if (!format.ok()) return fail(format.error());
  auto report = reports::load_report(a.in);
  if (!report.ok()) return fail(report.error());
  std::string text = reports::render(*report, *format);
  if (a.out == "-") {
    std::cout << text << std::flush;
    return 0;
  }
  if (auto s = reports::write_report_file(a.out, text); !s.ok()) return fail(s.error());
  return 0;
}

}  // namespace

void add_report_command(CLI::App& app, Globals& g) {
  auto* report = app.add_subcommand(
      "report",
      "Reports: render a saved report again, in any format.\n"
      "Example: sandgate report render --format html reports/out/qualify.json -o report.html");
  report->require_subcommand(1);
  auto a = std::make_shared<RenderArgs>();
  auto* render = report->add_subcommand(
      "render",
      "Renders a saved report: IN is a report.json (the model, `--format json`), or a\n"
      "qualify.json with its probe-<provider>.json files beside it. Formats:\n"
      "  html   one self-contained page: the probe matrix, costs and replay as inline SVG,\n"
      "         every verdict with its evidence (nothing is fetched when it is opened)\n"
      "  junit  JUnit XML: a suite per provider, a case per probe (exposed = failure,\n"
      "         inconclusive = skipped with the reason), for any CI's test view\n"
      "  sarif  SARIF 2.1.0: a rule per probe, a result per exposed or warning verdict,\n"
      "         for code-scanning views\n"
      "  md     a short Markdown summary for a pull-request comment or a job summary\n"
      "  json   the report model itself (schema in the README), self-contained\n"
      "Errors name the field that is wrong (\"providers[1].probes.verdicts[3].verdict: ...\").\n"
      "Example: sandgate report render --format junit reports/out/qualify.json -o junit.xml");
  render->add_option("--format", a->format, "html, junit, sarif, md or json")->required();
  render->add_option("IN", a->in, "report.json or qualify.json")->required();
  render->add_option("-o,--out", a->out, "output file; - for standard output")
      ->capture_default_str();
  render->callback([&g, a] { g.exit_code = run_render(*a); });
}

}  // namespace sandgate::cli
