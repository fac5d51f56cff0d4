// The Environment both built-in providers share: a run directory with a fresh workspace, a
// record in the state directory, and a supervisor that runs the calls. A provider contributes
// only what differs: the supervisor's configuration and who owns the workspace.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "core/state.h"
#include "providers/provider.h"
#include "providers/supervisor.h"

namespace sandgate::providers {

struct RunLayout {
  std::string run_id;
  std::string run_dir;    // <work_dir>/<run-id>
  std::string workspace;  // <run_dir>/workspace
  std::string root;       // <run_dir>/root: mount point for a jail's new root
  // A copy-on-write workspace's layers (providers/workspace.h): <run_dir>/upper, where every
  // write of the run lands, and overlayfs's own <run_dir>/overlay-work.
  std::string upper;
  std::string overlay_work;
  // The run's secrets: a tmpfs at <run_dir>/secrets, mode 0500, one 0400 file per secret, all
  // owned by the call's host uid; empty when the run has none. A provider shows it to calls
  // (the jail binds it read-only at /run/secrets; a container binds this directory).
  std::string secrets_dir;
  // The workspace filesystem's image (EnvSpec::workspace_size): <run_dir>/workspace.img.
  std::string workspace_image;
};

// Resolves an EnvSpec environment allowlist against `host_env` (NAME=VALUE strings):
// "NAME" passes the host's value if set, "NAME=VALUE" sets a value. Bad names are an error.
Result<std::vector<std::string>> resolve_env_allowlist(const std::vector<std::string>& allow,
                                                       char** host_env);

// A run's host ids: its id and the host id its uid/gid 0 maps to, with the range's lease when
// it has its own (the lease's lock is recorded with the run's record when the environment is
// created, and released with it).
struct RunIds {
  std::string run_id;
  uid_t base = 0;
  std::optional<IdRangeLease> lease;
};
// `shared`: the fixed ProviderOptions::id_map_base every such run shares (test-only
// weakenings); otherwise a range of its own from ProviderOptions::id_pool. The run id is the
// spec's, or a new one.
Result<RunIds> assign_run_ids(const ProviderOptions& options, const EnvSpec& spec, bool shared);

class SupervisedEnvironment : public Environment {
 public:
  struct Recipe {
    std::string provider;
    bool needs_root_dir = false;  // a jail: make <run_dir>/root
    uid_t workspace_uid = 0;      // host ids owning the workspace
    gid_t workspace_gid = 0;
    // The run's id range (RunIds::lease), recorded with the run from its first write; null:
    // the run has none of its own. host_id_base() reports id_base.
    const IdRangeLease* id_range = nullptr;
    uid_t id_base = 0;
    std::string workspace_inside;  // the workspace as calls see it; empty: the host path
    std::string secrets_inside;    // the secrets directory as calls see it; empty: the host path
    std::string supervisor_exe;    // ProviderOptions::supervisor_exe
    // The provider shows the workspace to calls by binding layout.workspace (a jail): it may
    // then be a filesystem of its own (EnvSpec::workspace_size). Otherwise such a spec is
    // refused.
    bool workspace_filesystem = false;
    // Non-empty (reuse_workspace, a test-only weakening): the workspace is this existing
    // directory, shared with other runs and left in place at destroy.
    std::string shared_workspace;
    std::function<Result<SupervisorConfig>(const RunLayout&)> configure;
    // Called after `configure`, before the supervisor starts: what the supervisor must find in
    // place on the host (a jail's /proc views), recorded in `state` before it is made. May
    // complete the supervisor's configuration.
    std::function<Status(const RunLayout&, SupervisorConfig&, RunState& state)> before_start;
    // Set for a contained supervisor (SupervisorConfig::contained): how the runtime starts it.
    // Called after `configure`; it records what it is about to make in `state`.
    std::function<Result<ContainedLaunch>(const RunLayout&, RunState& state)> launch;
    // Called once the supervisor is ready: reads back what the run was given (an error names
    // the setting that did not hold, and the run is destroyed).
    std::function<Status(const RunLayout&, pid_t supervisor_pid)> verify;
    // Called once the supervisor is ready, before any call: wires the run's network (a jail
    // with an egress allowlist), recording what it claims in `state`; returns the address the
    // run's resolv.conf names (Environment::dns_address), or "".
    std::function<Result<std::string>(const RunLayout&, pid_t supervisor_pid, RunState& state)>
        network;
    // Called at destroy (or when the run's timeout stopped it) once a foreground runtime
    // (ContainedLaunch::foreground_output) has ended, before what the record holds is released:
    // the provider forgets what the runtime removed itself (a container it removed need not be
    // removed again). Kept with the environment.
    std::function<Status(const RuntimeExit&, RunState& state)> runtime_exited;
    // Called at destroy, before the run's supervisor is stopped: work for the provider's next
    // run (the next run's /proc views server) that should overlap a run's end, not its start
    // and first call (whose cores it took), nor the next run's create. A Podman run's end is
    // long (`run --rm`, ~0.1 s of removing its container); a jail's comes after a served
    // one-call run's answer.
    std::function<void()> stopping;
  };

  static Result<std::unique_ptr<SupervisedEnvironment>> create(const HostPaths& paths,
                                                               const EnvSpec& spec,
                                                               const Recipe& recipe);
  ~SupervisedEnvironment() override;

  const std::string& run_id() const override { return layout_.run_id; }
  std::string workspace_host_path() const override { return layout_.workspace; }
  std::string workspace_path() const override { return workspace_inside_; }
  WorkspaceInfo workspace_info() const override { return workspace_info_; }
  std::string secrets_host_path() const override { return layout_.secrets_dir; }
  uid_t host_id_base() const override { return id_base_; }
  std::string dns_address() const override { return dns_address_; }
  Result<pid_t> park() override;
  pid_t take_late_parked() override;
  Status alive() const override;
  Result<ExecResult> exec(const Call& call, const Placement& placement) override;
  Status destroy() override;

  pid_t supervisor_pid() const { return supervisor_ ? supervisor_->pid() : -1; }
  int landlock_abi() const override { return supervisor_ ? supervisor_->landlock_abi() : -1; }
  // A foreground runtime's pid while it runs (ContainedLaunch::foreground_output); -1: none.
  pid_t runtime_pid() const { return supervisor_ ? supervisor_->runtime_pid() : -1; }
  const RunLayout& layout() const { return layout_; }

 private:
  Status make_workspace(const EnvSpec& spec, const Recipe& recipe);
  Status make_overlay(const EnvSpec& spec, uid_t uid, gid_t gid);
  Status make_workspace_on_filesystem(const EnvSpec& spec, uid_t uid, gid_t gid);
  Status make_secrets(const EnvSpec& spec, const Recipe& recipe);

  SupervisedEnvironment(HostPaths paths, RunState state, RunLayout layout)
      : paths_(std::move(paths)), state_(std::move(state)), layout_(std::move(layout)) {}

  HostPaths paths_;
  RunState state_;
  RunLayout layout_;
  std::string workspace_inside_;
  WorkspaceInfo workspace_info_;
  uid_t id_base_ = 0;
  std::string dns_address_;
  std::optional<Supervisor> supervisor_;
  std::function<Status(const RuntimeExit&, RunState& state)> runtime_exited_;
  std::function<void()> stopping_;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
  bool timed_out_ = false;
  bool destroyed_ = false;
};

}  // namespace sandgate::providers
