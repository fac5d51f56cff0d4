// The supervisor: one process per run, started by a provider, that runs the run's calls.
//
// It is this very binary re-executed (runc's `init`): the host clones a child, optionally into
// new namespaces, and the child execs /proc/self/exe with kSupervisorArg. Every binary that
// can host a provider (sandgate, the test and benchmark binaries) calls maybe_run_supervisor()
// first thing in main.
//
// In a jail (namespaces provider) the supervisor is pid 1 of the run's pid namespace: it
// assembles the root filesystem, then forks each call, drops every privilege in the child and
// execs the command. When it dies, the kernel kills everything in the namespace. On the host
// (host_dir provider) it is a child subreaper, so daemonised descendants come back to it and
// are killed at the end of the run.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/fd.h"
#include "core/guest_call_control.h"
#include "core/process.h"
#include "core/result.h"
#include "core/state.h"
#include "providers/provider.h"

namespace sandgate::providers {

inline constexpr char kSupervisorArg[] = "__sandgate-supervisor";
// The microVM guest agent (guest_agent.cc): the guest kernel runs the supervisor binary as its
// /init with this argument.
inline constexpr char kGuestAgentArg[] = "__sandgate-guest";

// If argv asks for a supervisor (or the guest agent), runs it and returns its exit code;
// nullopt otherwise. `guest_control`: the controller's part the guest agent runs for each call
// (core/guest_call_control.h), given by a binary that links the controller (sandgate,
// sandgate-supervisor); without it the agent puts each call in a cgroup of its own with no
// grant, and says so in the call's outcome.
std::optional<int> maybe_run_supervisor(int argc, char** argv,
                                        const GuestCallControlFactory& guest_control = {});
// The supervisor on an already connected control socket: reads the config, runs the calls.
int serve_supervisor(int control);
// The guest agent (pid 1 of a microVM): see providers/microvm.h.
int run_guest_agent(int argc, char** argv, const GuestCallControlFactory& guest_control);

// What the jail is made of (namespaces provider only).
struct JailConfig {
  std::string root_dir;        // an empty host directory used as the new root's mount point
  std::string workspace_host;  // bound read-write at workspace
  std::string workspace = "/workspace";
  std::string home = "/home/sandbox";
  std::vector<BindMount> readonly_mounts;
  // The read-only base's host paths (EnvSpec::base_paths); empty: the default base.
  std::vector<std::string> base_paths;
  // The run's secrets (RunLayout::secrets_dir, a tmpfs on the host): bound read-only at
  // secrets; empty: the run has none and the jail has no /run/secrets.
  std::string secrets_host;
  std::string secrets = "/run/secrets";
  uid_t uid = 10001;
  gid_t gid = 10001;
  std::string hostname = "sandgate";
  bool seccomp = true;
  // The TCP ports calls may connect to where they share a network namespace (!new_network;
  // Landlock, ABI 4+): the ports of the run's egress allowlist. Empty: no TCP connect and no
  // TCP bind at all. tcp_connect_any (an allowlist entry with any port): Landlock leaves
  // connect alone. In the run's own namespace Landlock leaves TCP alone (call_landlock_rules).
  std::vector<uint16_t> tcp_connect_ports;
  bool tcp_connect_any = false;
  // A host file bound read-only at /etc/resolv.conf, and nsswitch's hosts then "files dns"
  // (--net allowlist: the file names the run's resolver, written once the run is wired).
  // Empty: no resolv.conf, and names come from /etc/hosts only.
  std::string resolv_conf_host;
  // The run's /proc views (providers/proc_views.h): a host directory served by the run's views
  // server, each file of which is bound read-only over the jail's /proc file of that name.
  // Empty: the jail's /proc is the kernel's (--no-proc-views).
  std::string proc_views_host;
  // Test-only weakenings (weakening.h); the defaults are the hardened jail.
  std::vector<BindMount> readwrite_mounts;  // mount_home: bound read-write, nosuid, nodev
  std::string tmp_host;         // share_tmp: this host directory at /tmp instead of a tmpfs
  // The calls' network namespace is the run's own: the jail makes one (isolate), or the
  // container runtime did (contained). false (share_host_network): the launcher's network.
  bool new_network = true;
  bool drop_privileges = true;  // false (root_with_caps): calls keep uid 0 of the user
                                // namespace, every capability, and no no_new_privs
  bool seccomp_full_width_compare = false;  // true (seccomp_full_width_compare): the filter's
                                            // argument rules compare all 64 bits
  bool landlock = true;  // false (no_landlock): no Landlock ruleset, no Landlock scope
};

// The environment the processes of sandgate's own binary on a run's side start with (the
// supervisor, the /proc views server): nothing of the host's (its tokens, the agent's
// variables) except PATH and the sanitizer and log settings a test build needs to behave the
// same in the child.
std::vector<std::string> supervisor_env();

struct SupervisorConfig {
  bool isolate = false;  // new namespaces + jail; false: calls run on the host as they are
  // Started by a container runtime (podman provider), which made the namespaces, the root
  // filesystem, the user and the capability set: the supervisor assembles nothing and drops
  // nothing it does not have, but each call still gets its session, rlimits, oom_score_adj,
  // no_new_privs, the Landlock ruleset (paths from `jail`) and the seccomp filter (unless
  // jail.seccomp is false). The supervisor is pid 1 of the container's pid namespace.
  bool contained = false;
  // Started by the guest agent of a microVM (providers/microvm.h) as root of its own kernel:
  // with `contained`, nothing is assembled, and each call drops to jail.uid/gid with no
  // capabilities as in the jail.
  bool guest = false;
  JailConfig jail;
  std::vector<std::string> base_env;  // every call's environment starts from this
  std::string default_cwd;            // as calls see it
  uid_t id_map_base = 1'000'000;      // isolate: host id of uid/gid 0 inside
  // isolate: the run's user namespace is created by id_map_base, not by sandgate (host root),
  // so it owns it. The kernel charges what it counts per user (inotify instances and watches,
  // user namespaces: kernel/ucount.c) at every level of the namespace tree, and in the host's
  // namespace to the owner: owned by root, every run (and every root process of the host)
  // draws from one count. Host side only: not sent to the supervisor.
  bool run_owns_user_namespace = false;
  // The launcher's end of the run's sysinfo channel (sysinfo_notify.h), from the run's views
  // server: sent to the supervisor with the config, and each call's child then sends its
  // sysinfo listener there. None: sysinfo(2) stays the kernel's. Host side only (an fd, sent
  // as one).
  std::shared_ptr<UniqueFd> sysinfo_channel;
  // Called by Supervisor::start with the supervisor's pid once it has been let go to exec,
  // before its config is sent: waits for what the jail takes from the host's mount namespace
  // and that is made meanwhile (the run's /proc views, mounted by their server). The
  // supervisor makes its own mount namespace only when the config arrives (isolate), so it
  // sees that mount. A failure ends the start. Supervisor::start only (a container's runtime
  // binds the views at launch: the podman provider waits for them before). Host side only.
  std::function<Status(pid_t supervisor)> before_config;
};

Json to_json(const SupervisorConfig& c);

Result<SupervisorConfig> supervisor_config_from_json(const Json& j);

// How a contained supervisor is started: `argv` (a container runtime's "run" command, which
// must pass fd 3 into the container, e.g. `podman run --preserve-fds 1 ...`), followed by the
// supervisor's own arguments. The runtime either returns once the container is running
// (`podman run -d`), or stays in the foreground for the container's whole life (`foreground`).
struct ContainedLaunch {
  std::vector<std::string> argv;
  // Not 0 (rootless Podman): the runtime runs as uid/gid 0 of a new user and mount namespace
  // that this host id owns, with 0..65535 inside mapped onto userns_owner.. on the host (maps
  // written by sandgate, as for the jail: no /etc/subuid line, no setuid newuidmap). The
  // kernel's per-user counts of everything the run does are then charged to userns_owner.
  uid_t userns_owner = 0;
  // The runtime's whole environment; empty: sandgate's own. argv[0] must then be a path.
  std::vector<std::string> env;
  // Cgroup directories the runtime is written into before it execs, so that everything it
  // starts (conmon, the container) is in them from its first instruction.
  std::vector<std::string> cgroup_dirs;
  // Not empty: the runtime stays in the foreground until the container has ended, in a session
  // of its own, with its output (and the container's) in this file, which it must be able to
  // create (`podman run --rm` without --detach: one runtime process does create, start, wait and
  // remove, where a detached run needs a second one to remove the container). start_contained
  // returns as soon as the supervisor is ready; stop() waits for the runtime
  // (Supervisor::runtime_exit).
  std::string foreground_output;
  // How long the runtime gets to start the container and the supervisor in it to say "ready".
  // Past it the runtime's process group is killed and the start fails with ETIMEDOUT and the
  // runtime's output: a runtime stuck on a lock or a hung storage fails the run, not the caller.
  // Podman starts in 0.3-3 s here; the margin is for a loaded host and a first start.
  std::chrono::milliseconds start_timeout = std::chrono::seconds(90);
  // How long a foreground runtime gets, once pid 1 was asked to end (stop()) or went away, to
  // remove its container and exit; then it is killed (RuntimeExit::killed) and the container
  // left to the provider's own removal (`podman rm --force`, from the run's record). Podman's
  // removal takes 0.05-0.3 s here; the margin is for a loaded host.
  std::chrono::milliseconds stop_grace = std::chrono::seconds(60);
  // Run once the runtime has been started, before start_contained waits for the supervisor:
  // what the run needs only by its first call, done while the runtime spends its few hundred
  // ms starting the container rather than before (the assembled root's alternatives links).
  // An error kills the runtime's session and fails the start.
  std::function<Status()> while_starting;
};

// How a foreground runtime ended (ContainedLaunch::foreground_output).
struct RuntimeExit {
  ExitStatus status;
  bool killed = false;  // it outlived the grace period after "shutdown" and was killed
  std::string output;   // its output file's first 16 KiB
};

// Runs a runtime command the way start_contained starts one (launch.userns_owner, env and
// cgroup_dirs; fd 3 is /dev/null) but without a supervisor, to its end: a bare rootless
// `podman run` as a run's own id, the baseline of the rootless benchmarks. Output bounded.
Result<CommandResult> run_contained_runtime(const ContainedLaunch& launch);

// The host side of one supervisor.
class Supervisor {
 public:
  // Starts the supervisor and waits until it reports ready (jail assembled). The process is
  // recorded in `state` right after it exists and before it does anything.
  // `placement` puts the supervisor (and so every call it forks, until placed itself) into
  // the run's cgroups before it execs.
  // `exe` is the binary to re-execute (empty: /proc/self/exe).
  static Result<Supervisor> start(const SupervisorConfig& config, const Placement& placement,
                                  RunState& state, const std::string& exe = {});
  // The same for config.contained: runs `launch` (the runtime places the supervisor; the
  // caller records the container before) and waits for "ready".
  static Result<Supervisor> start_contained(const SupervisorConfig& config,
                                            const ContainedLaunch& launch);
  // The same over a control socket someone else connected (a microVM's bridge to its guest
  // agent, guest_bridge.h): configures it and waits for "ready". pid() is then the host pid
  // the bridge gives as sender (the QEMU process).
  static Result<Supervisor> attach(const SupervisorConfig& config, UniqueFd control);
  Supervisor(Supervisor&&) noexcept = default;
  Supervisor& operator=(Supervisor&&) noexcept = default;
  ~Supervisor() { (void)stop(); }

  // Runs one call to completion; call.timeout (0: none) kills the call's process group.
  // call.park_next parks the next call's process while this one runs (its host pid in the
  // result); a process parked before is the one this call starts in.
  Result<ExecResult> exec(const Call& call, const Placement& placement);
  // Parks the next call's process now (Environment::park): its host pid. One at a time.
  Result<pid_t> park();
  // The process a call parked for the next one whose "parked" came only after that call had
  // ended (a short call on a busy host): its host pid once the word is here, else 0. Never
  // waits (Environment::take_late_parked).
  pid_t take_late_parked();

  // Ends the run: every process of it is killed and reaped. Idempotent.
  Status stop();

  pid_t pid() const { return contained_ ? contained_pid_ : process_.pid(); }
  // The Landlock ABI the calls' ruleset was built for, as "ready" said (0: no Landlock).
  int landlock_abi() const { return landlock_abi_; }
  // A foreground runtime's pid while it runs (our child); -1: none.
  pid_t runtime_pid() const { return runtime_.pid(); }
  // How the foreground runtime ended, once stop() has waited for it; nullopt before, or none.
  const std::optional<RuntimeExit>& runtime_exit() const { return runtime_exit_; }
  bool running() const { return contained_ ? control_.valid() : process_.running(); }
  // Whether the supervisor can still take a call, without blocking: an error naming it when
  // its end of the control socket has gone (it exited or was killed, its container or guest
  // went away). An idle supervisor sends nothing, so between calls a hang-up is all the socket
  // can show.
  Status reachable() const;

 private:
  Supervisor() = default;
  // Sends the config (and the seccomp program) and waits for "ready", until `deadline` if one
  // is given (then an Error with err ETIMEDOUT); `went_away` explains a failed exchange.
  static Status configure(
      Supervisor& s, const SupervisorConfig& config,
      const std::function<Error(const Error&)>& went_away,
      std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);
  // configure's halves. `placed_during_setup`: the supervisor is placed in the run's cgroups
  // while it assembles the jail, and makes its cgroup namespace once it hears "placed".
  static Status send_config(Supervisor& s, const SupervisorConfig& config, bool placed_during_setup,
                            const std::function<Error(const Error&)>& went_away);
  static Status await_ready(Supervisor& s, const std::function<Error(const Error&)>& went_away,
                            std::optional<std::chrono::steady_clock::time_point> deadline);
  bool isolate_ = false;
  bool contained_ = false;
  pid_t contained_pid_ = -1;  // host pid of a contained supervisor (not our child)
  int landlock_abi_ = 0;
  ChildProcess process_;
  UniqueFd control_;
  uint64_t next_call_ = 1;
  // The process parked for the next call: the id it was parked with, its host pid.
  struct Parked {
    uint64_t id;
    pid_t host_pid;
  };
  std::optional<Parked> parked_;
  // The id of a park asked for with a call that ended before its "parked" came. Cleared when
  // the word is taken, and when another park is asked for (the supervisor then replaces the
  // parked process, so the word, if it comes, names one that is gone).
  std::optional<uint64_t> late_park_;
  // A foreground runtime (ContainedLaunch::foreground_output) and its output file.
  ChildProcess runtime_;
  std::string runtime_output_;
  std::chrono::milliseconds runtime_grace_{0};  // ContainedLaunch::stop_grace
  std::optional<RuntimeExit> runtime_exit_;
};

}  // namespace sandgate::providers
