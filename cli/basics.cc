#include "cli/basics.h"

#include <signal.h>

#include <iostream>

namespace sandgate::cli {

int fail(const Error& e) { return fail(e.message()); }

int fail(const std::string& message) {
  std::cerr << "sandgate: error: " << message << "\n";
  return kExitError;
}

void add_base_path_option(CLI::App* sub, std::vector<std::string>& paths) {
  sub->add_option(
      "--base-path", paths,
      "PATH: narrow the read-only base (namespaces, podman without --image) to these host\n"
      "paths, each bound read-only at its own place, instead of the host's whole /usr\n"
      "(which shows a run every world-readable file there: /usr/local/etc/npmrc, SDK\n"
      "properties). Repeatable; absolute, existing paths, or the preset 'minimal'\n"
      "(/usr/bin, /usr/sbin, /usr/libexec, /usr/lib/x86_64-linux-gnu, /usr/lib64,\n"
      "/usr/lib/python3*, /usr/lib/locale, /usr/share/perl5, /usr/share/zoneinfo,\n"
      "/usr/local/bin, /usr/local/lib; a C toolchain adds /usr/lib/gcc and /usr/include).\n"
      "Added to the policy's base.allow");
}

// Every repeatable option takes one value each time it is given (`--env A --env B`), as the
// help says. CLI11's default lets a vector option swallow the words after it, and then a `--`
// right after one (`exec --env X=1 -- sh -c ...`) ended the option's words instead of the
// options: `-c` was parsed as an option of sandgate's and refused.
void one_value_per_occurrence(CLI::App& app) {
  for (CLI::Option* opt : app.get_options())
    if (opt->nonpositional()) opt->allow_extra_args(false);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    one_value_per_occurrence(*sub);
}

void set_up_signals() {
  // SIGINT/SIGTERM/SIGHUP are taken through a signalfd (cli/signals.h) so that a run is torn
  // down before exiting. Block them here, before any thread exists (the controller's monitor
  // is one): a thread with them unblocked would take the default action and kill us mid-run.
  sigset_t interrupts;
  sigemptyset(&interrupts);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&interrupts, sig);
  sigprocmask(SIG_BLOCK, &interrupts, nullptr);
  // A write to a pipe whose reader died (a supervisor killed before it read its go byte, a
  // call's pipe) is an EPIPE to handle, not the end of sandgate: the chaos test saw `serve`
  // die of SIGPIPE when one run's supervisor was killed as it started, taking every other
  // run of that server with it. A handler that does nothing, not SIG_IGN: a handler is reset
  // to the default at exec, so the commands sandgate starts still get SIGPIPE as usual.
  struct sigaction pipe_action = {};
  pipe_action.sa_handler = [](int) {};
  sigemptyset(&pipe_action.sa_mask);
  sigaction(SIGPIPE, &pipe_action, nullptr);
}

}  // namespace sandgate::cli
