// The probe catalogue: every probe sandgate-probe can run, keyed by id, registered by one
// explicit call per boundary (docs/STYLE.md, "a name-keyed registry with an explicit list").
//
// sandgate-probe, the static binary that runs them (natively for the baseline, then inside
// each provider), has this interface. The judge (probes/judge) codes against it.
//
//   sandgate-probe list
//       One JSON object per line: {"id", "boundary", "attempt", "params": [names it uses],
//       "explicit": bool}. Explicit probes (crossrun.plant, persist.plant: they hold or leave
//       things for a later phase) run only when named with --id.
//   sandgate-probe run [--boundary B]... [--id ID]... [--param KEY=VALUE]...
//       Runs the selected probes (every non-explicit probe when neither --boundary nor --id is
//       given; --boundary selects its non-explicit probes) in catalogue order, each in a forked
//       child, and prints one ProbeReport (probes/probe_report.h) per line on stdout, flushed after
//       each. Exit status 0 whatever the results; 2 with one line on stderr for a usage error
//       (unknown option, boundary, id or parameter key, a --param without '='). A probe that lacks
//       a parameter it needs reports preconditions=false and result "error"; it never guesses a
//       target.
//   sandgate-probe whoami         {"uid","euid","gid","egid","cap_eff"}: the setuid helper action
//   sandgate-probe linger MARKER SECONDS
//       Sleeps (at most 120 s) with the marker in its argv: the detached process persist.plant
//       leaves behind, for the host to find. SIGTERM ends it.
//   sandgate-probe cleanup --param marker=M [--param workspace=..] [--param home=..] [...]
//       Removes what persist.plant planted with that marker (given the same parameters) and
//       SIGTERMs its linger processes; one JSON line says what was removed. The native
//       baseline runs it after persist.find. crossrun.plant removes its own objects when it ends.
//
// Ids are <boundary>.<name>; boundaries: fs, net, creds, proc, disclosure, crossrun, persist,
// resource. Results: reached = the action worked (natively: the baseline holds); denied = the
// kernel refused it (errno says how); not_found = the target does not exist from here; error = the
// probe could not tell (see detail).
//
// Parameters (--param KEY=VALUE; every probe names the ones it reads in `list`):
//   marker=STR          unique token of this suite invocation (letters, digits, '-', '_'; at most
//                       40). Planted files, processes, SysV objects and network requests carry
//                       it: HTTP requests as "?sandgate=MARKER" in the request target and an
//                       "X-Sandgate-Marker" header, TCP/UDP payloads as "sandgate MARKER", DNS as
//                       the label MARKER.exfil.sandgate.test.
//   workspace=PATH      the run's workspace as the probe sees it (default: the current directory)
//   host_canary=PATH    a host file outside the workspace (its content should carry the marker)
//   host_write_dir=PATH a host directory outside the workspace; fs.write_host_dir leaves
//                       sandgate-probe-MARKER in it for the host to witness (the caller owns and
//                       removes the directory)
//   other_workspace=PATH another run's workspace, as a host path
//   home=PATH           the launching user's home (a canary home in the suite): credential
//                       files are read there; persist.plant writes $HOME markers and rc lines there
//   token_names=A,B,C   environment variables holding canary tokens
//   sentinel_pid=PID    a host process that records the signals it receives (host pid)
//   host_pidns=INODE    inode of the host's pid namespace (stat -L /proc/1/ns/pid)
//   host_mntns=INODE    inode of the host's mount namespace; crontab markers are planted only
//                       when the probe's own mount namespace differs (see persist.plant)
//   setuid_helper=PATH  a setuid-root copy of sandgate-probe (proc.setuid_helper)
//   ssh_auth_sock=PATH  the launching user's agent socket when SSH_AUTH_SOCK is not set inside
//   extra_sockets=P,Q   more unix socket paths to try with the runtime sockets
//   other_pids=P,Q      run A's pids, from its ready file (crossrun.*)
//   other_abstract=NAME run A's abstract unix socket name, without the leading '@'
//   other_port=N        run A's loopback TCP port
//   other_shm_key=K     run A's SysV shared memory key (decimal)
//   other_msg_key=K     run A's SysV message queue key (decimal)
//   hold_ms=N           how long crossrun.plant holds its objects (default 30000, max 600000)
//   hold_inotify=1      crossrun.plant also holds every inotify instance its uid may have
//                       (at most 15 s: see crossrun.cc), for crossrun.user_inotify
//   other_inotify_held=N, other_inotify_user_limit=true|false
//                       run A's inotify hold, from its ready file (crossrun.user_inotify)
//   linger_s=N          how long persist.plant's detached process lives (default 60, max 120)
//   mem_bytes=N         resource.memory target (default 512MiB)
//   max_procs=N         resource.fork_bomb cap (default 256, max 4096)
//   spin_ms=N           resource.cpu_spin wall time (default 500, max 60000)
//   spin_procs=N        resource.cpu_spin processes (default 2, max 64)
//   fill_bytes=N        resource.disk_fill target in the workspace (default 256MiB)
//   max_fds=N           resource.fd_exhaust cap (default 4096, max 1048576)
//   sleep_ms=N          resource.wall_clock sleep (default 1000, max 3600000)
//   resource_hold_ms=N  how long memory and fork_bomb hold what they reached (default 0, max 60000)
//   probe_timeout_ms=N  the runner kills a probe child after this (default 150000)
//   newer_syscall_nr=N  proc.newer_syscall's number: the first above the highest the host's
//                       seccomp library can name (424..1023; every argument is -1)
// Sizes accept a plain byte count or a binary unit suffix: 512MiB, 1GiB, 64KiB.
//
// Safety (the probes also run natively, as root, and under the unsafe host_dir provider):
// nothing is ever written to core_pattern, sysrq-trigger, /sys, release_agent or base binaries
// (opening them for writing is the evidence); mount and unshare happen in forked children;
// kill(-1) is sent only when the pid namespace is provably not the host's, and then only
// SIGWINCH (default action: ignore); network probes talk only to the lab decoys
// (probes/lab/lab_addresses.h) and unix sockets; AF_VSOCK is created and bound, never connected
// (CID 2 is the real hypervisor, outside every namespace), also with high bits set in the
// family; syscalls tried by raw number get arguments the kernel rejects (a bad fd, bad flags),
// and a clone into a new user namespace only exits. Resource probes are capped by their parameters;
// their children die with them (PR_SET_PDEATHSIG) and are reaped; files they make are removed.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/result.h"
#include "probes/probe_report.h"

namespace sandgate::probes {

// The --param values of one invocation.
class Params {
 public:
  void set(const std::string& key, const std::string& value) { values_[key] = value; }
  bool has(const std::string& key) const { return values_.count(key) > 0; }
  std::optional<std::string> get(const std::string& key) const;
  // A non-negative integer (sizes may carry KiB/MiB/GiB); nullopt when absent or malformed.
  std::optional<long long> number(const std::string& key) const;
  // number(key), or `fallback` when absent, clamped to [0, max].
  long long number_or(const std::string& key, long long fallback, long long max) const;
  // Comma-separated values, empty entries dropped.
  std::vector<std::string> list(const std::string& key) const;
  const std::map<std::string, std::string>& all() const { return values_; }

 private:
  std::map<std::string, std::string> values_;
};

// A probe: attempts one thing and fills in attempt/result/errno/evidence/preconditions/detail.
// The runner sets id and boundary.
using ProbeFn = ProbeReport (*)(const Params&);

struct ProbeSpec {
  std::string id;                   // "fs.read_host_canary"
  std::string attempt;              // what it tries, in words, for `list`
  std::vector<std::string> params;  // the parameters it reads
  ProbeFn run = nullptr;
  // Run only when named with --id, never by --boundary or the run-everything default: probes
  // that hold or leave things behind for a later phase (crossrun.plant, persist.plant).
  bool explicit_only = false;

  std::string boundary() const { return id.substr(0, id.find('.')); }
  Json describe() const;  // the `list` line
};

inline const std::vector<std::string>& all_boundaries() {
  static const std::vector<std::string> kBoundaries = {
      "fs", "net", "creds", "proc", "disclosure", "crossrun", "persist", "resource"};
  return kBoundaries;
}

class Catalogue {
 public:
  // Refuses a duplicate id, an id whose boundary is not one of all_boundaries(), a missing run.
  Status add(ProbeSpec spec);
  const ProbeSpec* find(const std::string& id) const;
  const std::vector<ProbeSpec>& all() const { return probes_; }
  // The probes in the given boundaries or with the given ids (all when both are empty), in
  // catalogue order; an unknown boundary or id is an error naming it.
  Result<std::vector<const ProbeSpec*>> select(const std::vector<std::string>& boundaries,
                                               const std::vector<std::string>& ids) const;
  // Every parameter name some probe reads (plus the runner's own), for rejecting typos.
  std::vector<std::string> known_params() const;

 private:
  std::vector<ProbeSpec> probes_;
};

// One registration function per boundary file, and the explicit list of them.
Status register_fs_probes(Catalogue& c);
Status register_net_probes(Catalogue& c);
Status register_creds_probes(Catalogue& c);
Status register_proc_probes(Catalogue& c);
Status register_disclosure_probes(Catalogue& c);
Status register_crossrun_probes(Catalogue& c);
Status register_persist_probes(Catalogue& c);
Status register_resource_probes(Catalogue& c);
Status register_builtin_probes(Catalogue& c);

// `sandgate-probe cleanup`: removes every persistence marker persist.plant made with this
// marker (same targets, same parameters) and SIGTERMs the linger processes carrying it.
// Returns what it removed and signalled.
Json cleanup_markers(const Params& p);

// Runs one probe as the runner does (in a forked child, killed after probe_timeout_ms), with
// id and boundary filled in. A probe child that crashes yields result "error" with the signal.
ProbeReport run_probe(const ProbeSpec& spec, const Params& params);

}  // namespace sandgate::probes
