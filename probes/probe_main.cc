// sandgate-probe: tries to cross each isolation boundary from wherever it runs and prints what
// happened, one JSON report per probe. The interface is documented in probes/catalogue.h.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "probes/catalogue.h"
#include "probes/probe_util.h"

namespace sandgate::probes {
namespace {

constexpr int kExitUsage = 2;

constexpr char kHelp[] =
    R"(sandgate-probe: try to cross each isolation boundary; one JSON report per probe

usage:
  sandgate-probe list
      every probe, one JSON object per line: {id, boundary, attempt, params, explicit}
  sandgate-probe run [--boundary B]... [--id ID]... [--param KEY=VALUE]...
      run the selected probes (all when no --boundary/--id), one ProbeReport JSON per line;
      exit 0 whatever the results, 2 on a usage error. Explicit probes (crossrun.plant,
      persist.plant) run only when named with --id.
  sandgate-probe cleanup --param marker=M [--param workspace=DIR] [--param home=DIR] ...
      remove what persist.plant planted with that marker; SIGTERM its linger processes
  sandgate-probe whoami
      {"uid","euid","gid","egid","cap_eff"} (the setuid helper action)
  sandgate-probe linger MARKER SECONDS
      sleep at most 120 s with the marker in argv (persist.plant's detached process)

boundaries: fs, net, creds, proc, disclosure, crossrun, persist, resource
results:    reached (the action worked), denied (refused; errno says how), not_found (no such
            target from here), error (could not tell; preconditions=false when a parameter or
            set-up was missing)

parameters (--param KEY=VALUE; `list` shows which probe reads which):
  marker=STR           unique token of this suite run ([A-Za-z0-9_-], at most 40); planted
                       files, processes, IPC objects and network requests carry it
                       (HTTP: "?sandgate=M" and X-Sandgate-Marker; DNS: M.exfil.sandgate.test)
  workspace=PATH       the workspace as seen here (default: current directory)
  host_canary=PATH     a host file outside the workspace
  host_write_dir=PATH  a host directory; fs.write_host_dir leaves sandgate-probe-M there
  other_workspace=PATH another run's workspace (host path)
  home=PATH            the launching user's (canary) home: credential files, $HOME markers
  token_names=A,B      environment variables holding canary tokens
  sentinel_pid=PID     a host process (carrying the marker in argv) that records signals
  host_pidns=INODE     inode of the host's pid namespace
  host_mntns=INODE     inode of the host's mount namespace (crontab/$HOME markers only when
                       this process's differs)
  setuid_helper=PATH   a setuid-root copy of sandgate-probe
  ssh_auth_sock=PATH   an SSH agent socket to try besides $SSH_AUTH_SOCK
  extra_sockets=P,Q    more unix sockets to try with the container runtime sockets
  base_canaries=P,Q    canary files in the directories of the read-only base (host paths)
  other_pids=P,Q  other_abstract=NAME  other_port=N  other_shm_key=K  other_msg_key=K
                       run A's identifiers from its ready file (crossrun.*)
  hold_ms=N            crossrun.plant hold (default 30000, max 600000)
  linger_s=N           persist.plant's detached process lifetime (default 60, max 120)
  mem_bytes=N (512MiB)  max_procs=N (256)  spin_ms=N (500)  spin_procs=N (2)
  fill_bytes=N (256MiB) max_fds=N (4096)   sleep_ms=N (1000) resource_hold_ms=N (0)
                       caps of the resource probes; sizes take KiB/MiB/GiB
  probe_timeout_ms=N   kill a probe still running after this (default 150000)

Network probes talk only to the lab decoys (169.254.169.254, fd00:ec2::254, 203.0.113.0/24);
run natively outside the lab they simply fail to connect.
)";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "sandgate-probe: %s (see sandgate-probe --help)\n", message.c_str());
  return kExitUsage;
}

struct RunArgs {
  std::vector<std::string> boundaries, ids;
  Params params;
};

// Parses [--boundary B]... [--id ID]... [--param K=V]...; "" on success, else the error.
std::string parse_run_args(int argc, char** argv, int first, const Catalogue& catalogue,
                           RunArgs& out) {
  auto known = catalogue.known_params();
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    auto take = [&](const std::string& flag) -> bool {
      if (arg == flag) {
        if (i + 1 >= argc) return false;
        value = argv[++i];
        return true;
      }
      if (arg.starts_with(flag + "=")) {
        value = arg.substr(flag.size() + 1);
        return true;
      }
      return false;
    };
    if (take("--boundary")) {
      out.boundaries.push_back(value);
    } else if (take("--id")) {
      out.ids.push_back(value);
    } else if (take("--param")) {
      auto eq = value.find('=');
      if (eq == std::string::npos || eq == 0) return "--param '" + value + "': expected KEY=VALUE";
      std::string key = value.substr(0, eq);
      if (std::find(known.begin(), known.end(), key) == known.end())
        return "--param '" + key + "': unknown parameter";
      out.params.set(key, value.substr(eq + 1));
    } else if (arg == "--boundary" || arg == "--id" || arg == "--param") {
      return arg + ": missing value";
    } else {
      return "unexpected argument '" + arg + "'";
    }
  }
  return "";
}

void print_line(const Json& j) {
  std::string line = j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

int cmd_list(const Catalogue& catalogue) {
  for (const auto& p : catalogue.all()) print_line(p.describe());
  return 0;
}

int cmd_run(const Catalogue& catalogue, const RunArgs& args) {
  auto selected = catalogue.select(args.boundaries, args.ids);
  if (!selected.ok()) return usage_error(selected.error().detail);
  for (const ProbeSpec* spec : *selected) print_line(run_probe(*spec, args.params).to_json());
  return 0;
}

int cmd_whoami() {
  std::string status = util::read_prefix("/proc/self/status", 1 << 16).data;
  std::string cap_eff;
  if (auto at = status.find("CapEff:"); at != std::string::npos) {
    cap_eff = status.substr(at + 7, status.find('\n', at) - at - 7);
    cap_eff.erase(0, cap_eff.find_first_not_of(" \t"));
  }
  print_line({{"uid", ::getuid()},
              {"euid", ::geteuid()},
              {"gid", ::getgid()},
              {"egid", ::getegid()},
              {"cap_eff", cap_eff}});
  return 0;
}

int cmd_linger(int argc, char** argv) {
  if (argc != 4) return usage_error("linger MARKER SECONDS");
  long long seconds = std::clamp(std::atoll(argv[3]), 0LL, 120LL);
  util::sleep_ms(seconds * 1000);
  return 0;
}

int main_impl(int argc, char** argv) {
  // A reader that went away must not kill the runner in the middle of a probe's cleanup.
  ::signal(SIGPIPE, SIG_IGN);
  util::note_inherited_fds();
  Catalogue catalogue;
  if (auto st = register_builtin_probes(catalogue); !st.ok()) {
    std::fprintf(stderr, "sandgate-probe: %s\n", st.error().message().c_str());
    return 1;
  }
  if (argc < 2) return usage_error("missing command: list, run, cleanup, whoami or linger");
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (cmd == "list") {
    if (argc != 2) return usage_error("list takes no arguments");
    return cmd_list(catalogue);
  }
  if (cmd == "whoami") return cmd_whoami();
  if (cmd == "linger") return cmd_linger(argc, argv);
  if (cmd == "run" || cmd == "cleanup") {
    RunArgs args;
    std::string err = parse_run_args(argc, argv, 2, catalogue, args);
    if (!err.empty()) return usage_error(err);
    if (cmd == "run") return cmd_run(catalogue, args);
    if (!args.boundaries.empty() || !args.ids.empty())
      return usage_error("cleanup takes only --param");
    Json result = cleanup_markers(args.params);
    print_line(result);
    return result.contains("error") ? kExitUsage : 0;
  }
  return usage_error("unknown command '" + cmd + "'");
}

}  // namespace
}  // namespace sandgate::probes

int main(int argc, char** argv) { return sandgate::probes::main_impl(argc, argv); }
