// What `exec --socket` needs and nothing more: the exec command's arguments and options, the
// client that sends the call to a `serve --socket` or `record` server, and where the call's
// output goes. The full sandgate (cli/exec.cc) and its static front (cli/front_main.cc) both
// build on it: the front answers `sandgate exec --socket ...` itself, without loading the rest.
#pragma once

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cli/net_options.h"
#include "core/terminal_text.h"
#include "session/export.h"

namespace sandgate::cli {

struct ExecArgs {
  std::string provider;
  std::string image;        // --image (podman): a local image for the root filesystem
  bool raw_output = false;  // copy control sequences to a terminal unchanged
  std::string intent;
  std::string policy;
  std::string tenant = "default";
  bool no_controller = false;
  bool trace = false;  // --trace: the kernel's account of the call (eBPF)
  NetArgs net;         // --net, --allow, --net-upstream
  std::string workspace;
  std::vector<std::string> env;
  std::vector<std::string> ro_binds;
  std::vector<std::string> base_paths;  // --base-path
  std::string recipe_mode = "auto";
  std::string workspace_size;        // --workspace-size: "" is the host's filesystem
  std::vector<std::string> secrets;  // NAME=FILE
  session::RunExport export_;        // --export-branch, --export-force, --export
  std::string timeout;
  bool json = false;
  bool allow_unsafe_host = false;
  std::string socket;  // client mode: the call goes to a `serve --socket` / `record` server
  std::string run;     // client mode: the environment there (default $SANDGATE_RUN)
  std::vector<std::string> command;
  // The options the command line gave, by name ("--policy"): exec_client refuses those a
  // server's run does not take instead of dropping them.
  std::set<std::string> given;
};

// The `exec` subcommand with every option it takes, bound to `args` (which must outlive the
// parse); the caller sets its callback.
CLI::App* add_exec_subcommand(CLI::App& app, ExecArgs& args);

// Where a call's output goes: the caller's stdout and stderr, as it comes. A stream that is a
// terminal gets it through TerminalText (its control sequences shown, not obeyed) unless
// --raw-output; a pipe or a file gets the bytes unchanged.
class OutputSink {
 public:
  explicit OutputSink(bool raw) {
    for (int fd : {1, 2}) filtered_[fd] = !raw && ::isatty(fd) == 1;
  }
  void write(int fd, std::string_view data) {
    if (fd != 1 && fd != 2) return;
    if (!filtered_[fd]) return put(fd, data);
    put(fd, text_[fd].feed(data));
  }
  // The end of both streams: what a filter still held.
  void finish() {
    for (int fd : {1, 2})
      if (filtered_[fd]) put(fd, text_[fd].finish());
  }

 private:
  static void put(int fd, std::string_view data) {
    if (!data.empty()) (void)!::write(fd, data.data(), data.size());
  }
  bool filtered_[3] = {false, false, false};
  TerminalText text_[3];
};

// `exec --socket PATH` (a.socket set): the call, and its output and exit status.
int exec_client(const ExecArgs& a);

}  // namespace sandgate::cli
