// sandgate policy: print the built-in policy (a file to copy and edit) or check a policy file.
// Wiring only: the format and its strict parser are controller/policy.h.
#include <iostream>

#include "cli/common.h"
#include "controller/policy.h"

namespace sandgate::cli {
namespace {

struct PolicyArgs {
  bool print_default = false;
  std::string check;
};

int run_policy(const PolicyArgs& a) {
  if (a.print_default) {
    std::cout << controller::builtin_policy_json();
    return 0;
  }
  auto p = controller::load_policy_file(a.check);
  if (!p.ok()) return fail(p.error());
  std::cout << dump_json(controller::to_json(*p), 2) << "\n";
  return 0;
}

}  // namespace

void add_policy_command(CLI::App& app, Globals& g) {
  auto a = std::make_shared<PolicyArgs>();
  auto* sub = app.add_subcommand(
      "policy",
      "Print the built-in policy, or check a policy file.\n"
      "A policy gives each tool call the limits of its intent (compile, test, install, search,\n"
      "edit, run, default: declared, or inferred from the command line by the policy's rules),\n"
      "and sets the run's ceiling, tenants and when the ladder steps in. Without --policy,\n"
      "exec, serve, record, trace import and plan use the built-in one. To write your own,\n"
      "start from it:\n"
      "  sandgate policy --print-default > my-policy.json\n"
      "  $EDITOR my-policy.json          # sizes \"512MiB\", durations \"10m\", cpu in cores\n"
      "  sandgate policy --check my-policy.json\n"
      "  sandgate exec --policy my-policy.json --provider namespaces -- make -j2\n"
      "--check is as strict as every command that loads a policy: an unknown key, a wrong type\n"
      "or an out-of-range value is an error naming its path, e.g.\n"
      "  intents.compile.memory_max: expected a size like \"512MiB\", got 12\n"
      "and a valid file is printed back with every default filled in. Every key is described\n"
      "in the README, section \"Policy\".");
  auto* print = sub->add_flag("--print-default", a->print_default,
                              "print the built-in policy (controller/builtin_policy.json)");
  auto* check = sub->add_option("--check", a->check,
                                "parse FILE strictly; print the policy it gives, or the error")
                    ->type_name("FILE");
  print->excludes(check);
  sub->require_option(1);
  sub->callback([&g, a] { g.exit_code = run_policy(*a); });
}

}  // namespace sandgate::cli
