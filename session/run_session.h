// A run as an orchestrator sees it: an environment from a provider and a run scope from the
// controller, met at Placement. This layer is the one place that knows both sides of the seam
// (docs/ARCHITECTURE.md): the providers know nothing of policy, the controller nothing of
// providers, and everything above (the CLI, the protocol server, the probe suite, the replayer)
// runs calls through RunSession and nothing else.
//
//   open   the policy's required capabilities against the provider (a provider that lacks any
//          is refused, naming all it lacks: "visibly disqualified"), then the controller's run
//          scope, then the provider's environment with its supervisor in <run>/main, then the
//          io device of its workspace
//   call   one tool call: its own cgroup and grant (declared or inferred intent), placed
//          before exec, watched by the monitor and the ladder, ended with a CallOutcome
//   run_resident
//          a process of the run itself, not a call: in <run>/main, under the run's ceiling,
//          with no grant of its own and no outcome (the replay's level holder, the victim)
//   close  the environment, then the run's cgroups
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "controller/controller.h"
#include "core/exec_result.h"
#include "ebpf/activity_tracer.h"
#include "ebpf/egress.h"
#include "providers/provider.h"
#include "session/dns_resolver.h"
#include "session/export.h"

namespace sandgate::session {

struct CallRequest {
  std::vector<std::string> argv;
  std::optional<std::string> intent;  // declared; nullopt: inferred from argv
  std::vector<std::string> env;       // extra NAME=VALUE for this call
  std::string cwd;                    // inside the environment; empty: the workspace
  int cancel_fd = -1;                 // readable: cancel the call (e.g. a signalfd for SIGINT)
  int stdin_fd = -1;                  // the call's stdin (providers::Call); -1: /dev/null
  size_t output_limit = 1 << 20;      // per stream kept in the outcome; the rest is counted
  // No call follows in this run (a one-call exec): no process is parked for a next one, whose
  // fork, restriction and placement would take CPU from this call on a small host, and no
  // cgroup is made ahead for it (Controller::last_call).
  bool last = false;
  std::function<void(int stream, std::string_view data)> on_output;
  // Called once the call's scope exists (intent, grant, cgroup) and its first process sits in
  // that cgroup with its rlimits, parked before it execs, with its host pid: the moment to
  // check from the host what the call was given (limits read back, prlimit). The call is
  // held until this returns.
  std::function<void(const controller::CallScope& scope, pid_t host_pid)> on_started;
};

// "MAJOR:MINOR" of the block device `path` is on (stat's st_dev), for io grants; the whole disk
// when that is a partition (the kernel throttles disks only; found through <sysfs>/dev/block);
// "" when it is on an anonymous device (major 0: tmpfs, overlayfs) or cannot be stat'ed (logged).
std::string io_device_of(const std::string& path, const std::string& sysfs = "/sys");

// What a run is watched with besides the controller.
struct RunOptions {
  // The kernel's account of each call (execs, connects, sensitive opens) goes into its
  // outcome's `observed`; null: not traced. Shared by the runs of a process; outlives them.
  ebpf::ActivityTracer* tracer = nullptr;
  // Enforces the allowlist of a run with EnvSpec::network == kAllowlist: attached to the run's
  // cgroup before anything of the run exists, released when it closes; each call's outcome
  // gets the guard's decisions about it (observed.egress). Such a run without a guard is
  // refused: the provider wires a network, the guard is what limits it.
  ebpf::EgressGuard* egress = nullptr;
  // An allowlisted run's resolver (session/dns_resolver.h) asks this server (reachable from
  // the upstream namespace; --dns-upstream) about the list's names. Required when the list
  // names a host; without names every query is refused and the resolver needs none.
  std::optional<sockaddr_in> dns_upstream;
  // Each next call's process parked and placed in its cgroups ahead (Environment::park,
  // Controller::adopt_parked). Off: each call's process is moved on the call's path, as before;
  // the baseline of the benchmark that measures what parking saves.
  bool park_ahead = true;
};

class RunSession {
 public:
  static Result<std::unique_ptr<RunSession>> open(controller::Controller& controller,
                                                  providers::Provider& provider,
                                                  providers::EnvSpec spec,
                                                  const RunOptions& options = {});
  ~RunSession();  // close(); errors logged
  RunSession(const RunSession&) = delete;
  RunSession& operator=(const RunSession&) = delete;

  // One call, start to outcome. An error means the call could not be run at all (no cgroup,
  // the environment is gone); everything that happened to a call that ran, a command that
  // could not be started included, is an outcome. Precondition: not called concurrently on
  // one session (an environment runs one call at a time).
  Result<controller::CallOutcome> call(const CallRequest& request);

  // A process of the run itself (see above), run to completion of its first process (one that
  // detaches leaves its daemon in <run>/main, where it lives until the run ends). Like call(),
  // never concurrently with another call or resident process of the same session.
  Result<ExecResult> run_resident(const providers::Call& call);

  // Writes `data` as the file `name` in the workspace (providers::Environment::put_file): a
  // replay's segments and held level, handed to a run while it runs, whatever its provider.
  Status put_file(const std::string& name, std::string_view data);
  // Reads the workspace file `name`, at most max_bytes (providers::Environment::get_file);
  // nullopt: no such file yet. Beside a resident process only where workspace_live_on_host().
  Result<std::optional<std::string>> get_file(const std::string& name, size_t max_bytes);
  // providers::Environment::workspace_live_on_host.
  bool workspace_live_on_host() const { return !env_ || env_->workspace_live_on_host(); }

  // What the run holds outside its calls, read with no call running, and the OOM kills among
  // its resident processes, as the run's kernel counts them: the host's <run> and <run>/main,
  // or a microVM guest's own cgroups (as of its last exec's end).
  Result<ResidentUsage> resident_usage();

  // providers::Environment::routes_end_in_launcher.
  bool routes_end_in_launcher() const { return env_ && env_->routes_end_in_launcher(); }
  // providers::Environment::landlock_abi (-1: unknown).
  int landlock_abi() const { return env_ ? env_->landlock_abi() : -1; }

  // What the run hands back before it ends (session/export.h): the commits at the workspace's
  // HEAD as a branch of the recipe's repository, and/or a copy of the final workspace. Call
  // between the last call and close(); whatever it leaves out is destroyed by close().
  Status export_results(const RunExport& what);

  // Whether the run can still take a call (providers::Environment::alive); an error once
  // closed. Does not block.
  Status alive() const;

  // Destroys the environment, then the run's cgroups. Idempotent.
  Status close();

  const std::string& run_id() const { return run_id_; }
  const std::string& workspace_path() const { return workspace_path_; }  // as calls see it
  const std::string& workspace_host_path() const {
    return workspace_host_path_;
  }  // as the host sees it
  const providers::ProviderInfo& provider() const { return provider_info_; }
  std::string secrets_host_path() const { return env_ ? env_->secrets_host_path() : ""; }
  providers::WorkspaceInfo workspace_info() const {
    return env_ ? env_->workspace_info() : providers::WorkspaceInfo{};
  }
  const controller::RunScope& run() const { return *run_; }
  // An allowlisted run's resolver (null otherwise): its address and its log, for checks from
  // the host (the probes' second witness).
  const DnsResolver* dns_resolver() const { return resolver_.get(); }

 private:
  explicit RunSession(controller::Controller& c) : controller_(c) {}
  controller::Controller& controller_;
  providers::ProviderInfo provider_info_;
  std::unique_ptr<controller::RunScope> run_;
  std::unique_ptr<providers::Environment> env_;
  std::string run_id_, workspace_path_, workspace_host_path_, recipe_;
  ebpf::ActivityTracer* tracer_ = nullptr;
  uint64_t traced_run_ = 0;  // the run's cgroup id the tracer watches (0: none)
  ebpf::EgressGuard* egress_ = nullptr;
  uint64_t guarded_run_ = 0;  // the run's cgroup id the guard holds (0: none)
  std::unique_ptr<DnsResolver> resolver_;
  uint64_t calls_ = 0;  // calls begun, for the resolver's attribution
  // The environment parks each next call's process (Environment::park), and the controller
  // places it ahead: a call's start then moves no process between cgroups.
  bool parking_ = false;
  bool closed_ = false;
};

}  // namespace sandgate::session
