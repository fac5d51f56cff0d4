// sandgate: the command line's front, a small static binary. `sandgate exec --socket S ...`, a
// call through a `serve` or `record` server (an agent's every tool call), is answered here;
// every other command line is the full sandgate's: sandgate-main, beside this binary, executed
// in this process's place with the same arguments.
//
// Why two binaries: a warm call's whole process was ~20 ms against ~15 for bubblewrap, and
// 4-5 ms of it was this process starting before it connected: the dynamic loader mapping and
// relocating libc, libm and libmnl, and the faults of a 150 MB binary's start (160 page faults
// at ~25 us each on a small VM). The full sandgate cannot be static (libmnl has no archive in
// Debian); this front links what a call needs (the protocol's client, CLI11, nlohmann/json)
// statically and position-independent (ASLR kept), and starts like /bin/true.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>

#include "cli/basics.h"
#include "cli/exec_client.h"

namespace {

// `exec ... --socket ...` before any `--`: worth parsing here. Anything else (another command,
// global options before `exec`, plain `exec --provider`) goes to sandgate-main unparsed.
bool socket_call(int argc, char** argv) {
  if (argc < 3 || std::string_view(argv[1]) != "exec") return false;
  for (int i = 2; i < argc; ++i) {
    std::string_view word = argv[i];
    if (word == "--") return false;
    if (word == "--socket" || word.starts_with("--socket=")) return true;
  }
  return false;
}

// sandgate-main beside this binary, in this process's place; returns only on failure.
int run_full(char** argv) {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0)
    return sandgate::cli::fail(std::string("reading /proc/self/exe: ") + std::strerror(errno));
  std::string path(self, static_cast<size_t>(n));
  path = path.substr(0, path.rfind('/') + 1) + "sandgate-main";
  ::execv(path.c_str(), argv);
  return sandgate::cli::fail("cannot run " + path + " (the full sandgate, installed beside this " +
                             "binary): " + std::strerror(errno));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sandgate::cli;
  if (!socket_call(argc, argv)) return run_full(argv);
  set_up_signals();  // as sandgate-main does: the same client behaves the same in either

  CLI::App app{"sandgate"};
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();
  ExecArgs args;
  add_exec_subcommand(app, args);
  one_value_per_occurrence(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Error&) {
    // --help, or a mistake: sandgate-main says it, as it says every other command's.
    return run_full(argv);
  }
  if (args.socket.empty()) return run_full(argv);
  return exec_client(args);
}
