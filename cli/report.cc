// sandgate report render: a saved report (the model, or a qualify.json with its probe files
// beside it) rendered again in any format; sandgate report merge: many hosts' reports in one
// fleet. Wiring only: reading is reports/from_qualify.h, rendering reports/writers.h, the
// fleet reports/fleet.h.
#include <ctime>
#include <iostream>

#include "cli/common.h"
#include "reports/fleet.h"
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

struct MergeArgs {
  std::vector<std::string> in;
  std::string out = "-";
  std::string format = "json";
  std::vector<std::string> classes;  // HOST=CLASS
  std::vector<std::string> names;    // FILE=NAME
};

// "A=B" options into a map; a malformed or repeated one is bad input.
Result<std::map<std::string, std::string>> assignments(const std::vector<std::string>& args,
                                                       const std::string& option,
                                                       const std::string& shape) {
  std::map<std::string, std::string> out;
  for (const auto& a : args) {
    auto eq = a.rfind('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == a.size())
      return logic_error(option, "expected " + shape + ", got \"" + a.substr(0, 80) + "\"");
    if (!out.emplace(a.substr(0, eq), a.substr(eq + 1)).second)
      return logic_error(option, "given twice for " + a.substr(0, eq).substr(0, 80));
  }
  return out;
}

int run_merge(const MergeArgs& a) {
  auto format = reports::parse_fleet_format(a.format);
  if (!format.ok()) return fail(format.error());
  auto classes = assignments(a.classes, "--class", "HOST=CLASS");
  if (!classes.ok()) return fail(classes.error());
  auto names = assignments(a.names, "--name", "FILE=NAME");
  if (!names.ok()) return fail(names.error());
  reports::MergeOptions options;
  options.classes = std::move(classes).value();
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char created[32];
  std::strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
  options.created = created;
  auto fleet = reports::merge_report_files(a.in, *names, options);
  if (!fleet.ok()) return fail(fleet.error());
  std::string text = reports::render_fleet(*fleet, *format);
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
      "Reports: render a saved report again, in any format; merge many hosts' reports into a\n"
      "fleet.\n"
      "Example: sandgate report render --format html reports/out/qualify.json -o report.html\n"
      "Example: sandgate report merge node-a/report.json node-b/report.json -o fleet.json");
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

  auto m = std::make_shared<MergeArgs>();
  auto* merge = report->add_subcommand(
      "merge",
      "Merges many hosts' reports into one fleet: a matrix host x provider (qualified or\n"
      "not and why, exposed/inconclusive/warning probes, run cost), and the differences\n"
      "between hosts of one kind called out. Each IN is a report.json or a qualify.json\n"
      "(with its probe files beside it), one per host.\n"
      "A host is named by IN=NAME or --name IN=NAME, else by its doctor's hostname, else by\n"
      "its file (report.json and qualify.json: by their directory). Two hosts with one name\n"
      "are an error naming both files.\n"
      "Its class (its kind) is machine/linux-MAJOR.MINOR/cgroup layout/kvm|tcg from its\n"
      "doctor's facts (\"?\" for one its report lacks), or --class HOST=CLASS. Within a class\n"
      "every provider qualification, probe verdict and capability that differs between hosts\n"
      "is shown with each host's evidence; between classes differences are only summarised.\n"
      "Formats: json (the fleet document, schema in the README), md, html.\n"
      "Example:\n"
      "  sandgate report merge node-a/report.json node-b/report.json \\\n"
      "      old/qualify.json=node-c --class node-c=gpu-pool -o fleet.json\n"
      "  sandgate report merge --format md node-*/report.json     # to standard output");
  merge->add_option("IN", m->in, "report.json or qualify.json, or FILE=NAME")->required();
  merge->add_option("-o,--out", m->out, "output file; - for standard output")
      ->capture_default_str();
  merge->add_option("--format", m->format, "json, md or html")->capture_default_str();
  merge
      ->add_option("--class", m->classes,
                   "HOST=CLASS: the host's class, not its facts' (repeatable)")
      ->allow_extra_args(false);
  merge->add_option("--name", m->names, "FILE=NAME: the name of the host whose report FILE is")
      ->allow_extra_args(false);
  merge->callback([&g, m] { g.exit_code = run_merge(*m); });
}

}  // namespace sandgate::cli
