// sandgate provider conformance -- PROGRAM [ARGS]: the external-provider protocol conformance
// suite against any program (session/provider_conformance.h); one line per named check, exit
// status 1 if any failed.
#include <unistd.h>

#include <iostream>

#include "cli/common.h"
#include "core/table.h"
#include "session/provider_conformance.h"

namespace sandgate::cli {
namespace {

struct ConformanceArgs {
  std::vector<std::string> argv;
  std::string json;
};

int run_conformance_cmd(Globals& g, const ConformanceArgs& a) {
  session::ConformanceOptions o;
  o.paths = g.paths();
  o.cgroup_root = g.cgroup_root_name();
  o.argv = a.argv;
  o.progress = [](const session::ConformanceCheck& c) {
    std::cerr << "conformance: " << (c.passed ? "pass " : "FAIL ") << c.name << "\n";
  };
  auto checks = session::run_conformance(o);
  if (!checks.ok()) return fail(checks.error());
  TextTable table({{"check"}, {"result"}, {"detail", TextTable::Align::kLeft, 100}},
                  {.indent = "  "});
  int failed = 0;
  for (const auto& c : *checks) {
    table.row({c.name, c.passed ? "pass" : "FAIL", c.detail});
    failed += !c.passed;
  }
  std::cout << table.render() << "\n  " << checks->size() - failed << " passed, " << failed
            << " failed\n";
  if (!a.json.empty()) {
    if (auto s = write_json_file_atomic(a.json, session::to_json(*checks)); !s.ok())
      return fail(s.error());
  }
  return failed ? 1 : 0;
}

}  // namespace

void add_provider_command(CLI::App& app, Globals& g) {
  auto* sub =
      app.add_subcommand("provider", "Tools for external providers (docs/PROVIDER_PROTOCOL.md).");
  sub->require_subcommand(1);
  auto a = std::make_shared<ConformanceArgs>();
  auto* conf = sub->add_subcommand(
      "conformance",
      "Run the external-provider protocol conformance suite against a program:\n"
      "  sandgate provider conformance -- examples/providers/bwrap-provider\n"
      "It talks to the program as sandgate does (and sends what sandgate never would: bad\n"
      "JSON, unknown ops and keys, wrong types, an unknown environment, which it must refuse\n"
      "and survive), then runs calls through sandgate's own stack and checks them from the\n"
      "host: exit status, signals, output bytes and limit, command not found, environment\n"
      "(nothing of the provider's own), cwd, recipe, timeout, rlimits, and that the call's\n"
      "cgroup counted its CPU time (placement). Needs root. Exit status 1 if a check fails.");
  conf->add_option("--json", a->json, "also write the checks as JSON (schema_version 1) to FILE");
  conf->add_option("argv", a->argv, "the provider program and its arguments (after --)")
      ->required();
  conf->callback([&g, a] { g.exit_code = run_conformance_cmd(g, *a); });
}

}  // namespace sandgate::cli
