// The microvm provider: each run is a QEMU virtual machine with a kernel of its own, whose
// /init is sandgate's supervisor binary acting as guest agent (guest_agent.cc).
//
//   host                                            guest (its own kernel)
//   Supervisor --seqpacket-- HostBridge --virtio-serial-- agent (pid 1) --seqpacket-- supervisor
//   (supervisor.h, as for      (guest_bridge.h; a QEMU     mounts, cgroups,            loop, forks
//    every provider)            chardev unix socket)       bridge                       each call
//
// Calls run the code path of every other provider (Environment::exec -> Supervisor::exec): the
// guest's supervisor forks each call, which drops to the sandbox user with no capabilities,
// sets no_new_privs and installs sandgate's seccomp filter (compiled on the host, sent with
// the config), then execs. The agent parks each call until it sits in a cgroup of its own
// inside the guest (pure cgroup v2: /calls/call-<id>) with the grant the host sent with it
// (Call::guest_control), written and watched by the controller's v2 backend, monitor and
// ladder running in the agent (core/guest_call_control.h); what they observed comes back with
// "exited" (ExecResult::guest_observation) for the call's outcome.
//
// Disks (NVMe, which the cloud kernel has built in): the read-only base image (guest_image.h,
// cached) and the run's workspace image, an ext4 file of kWorkspaceBytes made from the recipe.
// Read-only binds (--ro-bind) are copies, not shares: the host copies each source into a third
// image of the run's own (make_bind_image), attached read-only (serial sandgate-ro); the agent
// mounts it nosuid/nodev and binds each entry at its destination, whose mount point it makes in
// an overlay over the base that is read-only again before any call runs. No host directory is
// shared into the guest and there is no network device (-nic none). Secrets (EnvSpec::secrets)
// travel as a fourth small image (serial sandgate-sec) made in a tmpfs of the run's own on the
// host, mounted read-only at /run/secrets in the guest.
// After the guest powers off, the workspace image is checked (e2fsck -n) and copied out of a
// read-only loop mount into <run>/workspace (read_back()).
//
// The accelerator: KVM when core/kvm_check.h finds that a guest really runs, TCG otherwise
// (SANDGATE_MICROVM_ACCEL=kvm|tcg forces one). A KVM boot that does not reach the agent within
// its deadline (nested or paravirtual KVM that runs the check's real-mode guest but not a
// kernel) falls back to TCG, and the fallback is remembered in the cache directory for this
// guest kernel. The machine type: under TCG QEMU's `microvm` with a PCIe host bridge
// (pcie=on) for the same virtio-serial-pci and NVMe devices, booted by qboot; it has no timer
// to calibrate the TSC against, so the kernel is told the host's TSC rate (which is the TCG
// guest's), measured once per process. Under KVM, or where the host's TSC is not constant,
// `pc`. Every timing is labelled with the accelerator and machine (MicrovmEnvironment::accel(),
// machine(), the workspace info's note).
//
// Lifecycle: the QEMU process is recorded in the run's state before it execs (parked on a
// pipe), put in the run's placement cgroups and bounded by the run ceiling (-m is the memory
// ceiling less QEMU's own overhead); destroy powers the guest off (kills QEMU if it does not
// stop) and removes the run directory with its images; `sandgate gc` kills a QEMU that
// outlived sandgate by its recorded pid.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "core/kvm_check.h"
#include "core/state.h"
#include "providers/provider.h"
#include "providers/supervisor.h"

namespace sandgate::providers {

inline constexpr uint64_t kWorkspaceBytes = uint64_t{1} << 30;  // sparse

// How a microVM would run here: the QEMU binary, the guest kernel, and the accelerator.
struct MicrovmHost {
  std::string qemu;    // empty: not installed
  std::string kernel;  // guest kernel image; empty: none
  std::string accel;   // "kvm" or "tcg"
  std::string accel_why;
  Status ready;  // ok when a guest can be made
};
// `kvm`: a check already made (doctor), else it is made once per process.
MicrovmHost microvm_host(const HostPaths& paths, const KvmCheckResult* kvm = nullptr);

class MicrovmEnvironment;

class MicrovmProvider : public Provider {
 public:
  static const ProviderInfo& static_info();
  static Result<std::unique_ptr<Provider>> make(const ProviderOptions& options);
  explicit MicrovmProvider(ProviderOptions options) : options_(std::move(options)) {}

  const ProviderInfo& info() const override { return static_info(); }
  Status available() const override;
  Result<std::unique_ptr<Environment>> create(const EnvSpec& spec) override;
  // The same, typed (tests, benchmarks: boot time, accelerator, read-back).
  Result<std::unique_ptr<MicrovmEnvironment>> create_vm(const EnvSpec& spec);

 private:
  ProviderOptions options_;
};

class MicrovmEnvironment : public Environment {
 public:
  // The largest stdin a call can carry into the guest (one bridge frame).
  static constexpr size_t kMaxStdinBytes = 1 << 20;
  ~MicrovmEnvironment() override;

  const std::string& run_id() const override { return state_.run_id(); }
  // Filled by read_back() after the guest stopped; empty before.
  std::string workspace_host_path() const override { return run_dir_ + "/workspace"; }
  std::string workspace_path() const override { return "/workspace"; }
  WorkspaceInfo workspace_info() const override;
  // A call's stdin reaches the guest when it is a file (a memfd, a regular file) of at most
  // kMaxStdinBytes, carried whole; any other (a terminal, a pipe) stays the guest's /dev/null.
  Result<ExecResult> exec(const Call& call, const Placement& placement) override;
  // Written in the guest by a resident exec: `cat` from the content as its stdin into a file
  // of its own, renamed over `name`, as the sandbox user.
  Status put_file(const std::string& name, std::string_view data) override;
  // A resident exec of `cat` in the guest; exit 3 from its test: no such file.
  Result<std::optional<std::string>> get_file(const std::string& name, size_t max_bytes) override;
  bool workspace_live_on_host() const override { return false; }
  // From the guest's cgroups /agent and /main, as the last exec's end reported them; asked
  // with a resident `true` when no exec has ended yet.
  std::optional<ResidentUsage> guest_resident_usage() override;
  // share_host_network: the guest's one device is a tap in the launcher's namespace.
  bool routes_end_in_launcher() const override { return !tap_name_.empty(); }
  // The guest kernel's, which its supervisor built the calls' ruleset for.
  int landlock_abi() const override { return supervisor_ ? supervisor_->landlock_abi() : -1; }
  const std::string& tap_name() const { return tap_name_; }
  Status destroy() override;
  Status settle_workspace() override { return read_back(); }
  // The tmpfs on the host that holds the secrets' image (for checks that another run cannot
  // reach it and that it is gone after destroy); "" when the run has no secrets.
  std::string secrets_host_path() const override { return secrets_dir_; }

  // Powers the guest off and copies the workspace image's content to workspace_host_path()
  // (owned by the mapped host ids, as the jail's). No call runs afterwards. Idempotent.
  Status read_back();

  const std::string& accel() const { return accel_; }
  const std::string& machine() const { return machine_; }  // "microvm" or "pc"
  Duration boot_time() const { return boot_time_; }        // QEMU start to the agent's "ready"
  pid_t qemu_pid() const { return qemu_pid_; }
  const std::string& run_dir() const { return run_dir_; }

 private:
  friend class MicrovmProvider;
  MicrovmEnvironment(HostPaths paths, RunState state)
      : paths_(std::move(paths)), state_(std::move(state)) {}
  // Asks the guest to power off, waits for QEMU (killing it after `grace`), joins the bridge.
  Status power_off(Duration grace);

  HostPaths paths_;
  RunState state_;
  std::string run_dir_;
  std::string workspace_image_;
  std::string secrets_dir_;  // the secrets' tmpfs on the host ("" without secrets)
  std::string binds_image_;  // --ro-bind's image ("" without): make_bind_image
  std::string console_;
  std::string accel_;
  uid_t host_uid_ = 0, host_gid_ = 0;
  CopyLimits read_back_limits_;
  Duration boot_time_{0};
  std::string machine_;
  pid_t qemu_pid_ = -1;
  std::optional<ResidentUsage> guest_resident_;  // as the last exec's end reported it
  std::string tap_name_;  // the guest's network device's host end (share_host_network)
  ChildProcess qemu_;
  std::optional<Supervisor> supervisor_;
  UniqueFd bridge_stop_;  // eventfd
  std::thread bridge_;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
  bool stopped_ = false;
  bool read_back_done_ = false;
  bool destroyed_ = false;
};

}  // namespace sandgate::providers
