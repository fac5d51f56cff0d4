// The per-call resource controller (docs/DESIGN.md ideas 4-6). A run gets a cgroup carrying the run
// ceiling, under its tenant's cgroup (weight, budget); its long-lived processes live in
// <run>/main; each tool call gets <run>/call-<n> with the grant of its intent, is watched by
// the monitor and handled by its ladder, and ends with a structured outcome. The grant is
// revoked (the call's cgroup killed and removed) when the call ends.
//
// Off the critical path of a call: each run keeps one spare cgroup, made (and recorded in the
// run record, before mkdir) ahead of the call that takes it, so begin_call writes only the
// grant's limits into it; and a call whose processes are all gone has its cgroup removed by
// the controller's reaper thread after end_call has returned the outcome. Anything still in
// a call's cgroup at end_call is killed there and then, as before: nothing the call started
// outlives its outcome. end_run (and a RunScope's destructor) waits for the run's pending
// reaper work, so nothing of a run outlives it; a crash leaves only recorded cgroups, which
// `sandgate gc` removes.
//
// The controller knows nothing of providers: it hands out Placements (core/placement.h), and
// the caller gives it what the call returned (core/exec_result.h) at the end of a call.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "controller/cgroup.h"
#include "controller/ladder.h"
#include "controller/monitor.h"
#include "controller/net_meter.h"
#include "controller/outcome.h"
#include "controller/policy.h"
#include "controller/runq.h"
#include "core/exec_result.h"
#include "core/host_paths.h"
#include "core/placement.h"
#include "core/state.h"

namespace sandgate::controller {

struct ControllerOptions {
  HostPaths paths;
  // sandgate's top cgroup in every hierarchy; tests use their own so they never touch a real run.
  std::string root = "sandgate";
  Policy policy = default_policy();
  // Null: detected from <proc>/self/mountinfo.
  std::unique_ptr<CgroupBackend> backend;
  // Null: the backend itself. Tests pass a recording fake.
  Actuator* actuator = nullptr;
  // The memory limit whoever made `root` set on it (the replay's host budget): every run's
  // calls count against it, and the ladder's budget rule watches it (or the tenant's
  // memory_budget, if smaller). None: the root has no limit of sandgate's.
  std::optional<Bytes> root_memory_budget;
};

class Controller;

class RunScope {
 public:
  ~RunScope();  // waits for the reaper's pending work on this run (see Controller::settle)
  const std::string& run_id() const { return run_id_; }
  const std::string& tenant() const { return tenant_name_; }
  const Cgroup& cgroup() const { return run_; }
  // <run>/main: the run's long-lived processes (the provider's supervisor, resident processes).
  const Cgroup& main_cgroup() const { return main_; }
  // Where the run's long-lived processes go (EnvSpec::placement).
  const Placement& main_placement() const { return main_placement_; }
  // "MAJOR:MINOR" of the block device io grants apply to ("": none, io limits dropped).
  const std::string& io_device() const { return io_device_; }

 private:
  friend class Controller;
  std::string run_id_, tenant_name_;
  std::string io_device_;
  Cgroup tenant_, run_, main_;
  // What the run's calls count against for the budget rule (per-call mode), if anything.
  std::optional<MemoryBudget> budget_;
  Placement main_placement_;
  uint64_t trigger_key_ = 0;  // the run's pressure trigger in the monitor (0: none)
  // The run cgroup's counters kept open, read around each call for its OOM kills (a partial
  // read is a few preads; read_usage opened every file by path, twice on each call's path).
  std::mutex reader_mu_;
  std::unique_ptr<UsageReader> reader_;  // made at the first read
  void wait_settled();                   // until pending_ is 0
  // Shared with the reaper thread, under mu_: the run record (one writer at a time: its
  // temporary file is per process), the call numbers and the spare. The reaper holds mu_
  // while it places the parked process, the kernel's slow step (an RCU grace period on v1).
  std::mutex mu_;
  std::optional<RunState> state_;
  int next_call_ = 1;
  std::optional<Cgroup> spare_;  // the next call's cgroup, made ahead, no limits written yet
  std::unique_ptr<UsageReader> spare_reader_;  // its reader, files open (may be null)
  std::string spare_id_;         // its call id ("call-<n>")
  pid_t spare_parked_ = 0;       // the run's parked process, in spare_ already (adopt_parked)
  // The last parked process placed in a spare: never placed again. A call that came before it
  // was placed leaves it parked, and the provider reports it once more; by the time that
  // second placement runs, a later call may be running in it, and moving it would take that
  // call out of its cgroups (its grant, its charges, the ladder's view of it).
  pid_t placed_parked_ = 0;
  // The reaper's pending work on this run, under its own lock: a call that ends queues its
  // cgroup's removal without waiting for a placement the reaper is making under mu_.
  std::mutex pending_mu_;
  std::condition_variable settled_;  // pending_ reached 0
  int pending_ = 0;                  // reaper jobs of this run not yet finished
  bool closing_ = false;             // end_run began: no more spares
  bool last_call_ = false;           // under mu_: no call follows (Controller::last_call)
};

// Where a call's processes live. kCgroup: on this host, in a cgroup of the call's own that the
// controller makes, grants, watches and revokes. kGuest: under a kernel of their own (a
// microVM), where the controller's part in the guest does all of that
// (controller/guest_control.h); the host's processes of such a run are QEMU's threads, in the
// run's cgroup, so a host cgroup for the call would hold nothing, and none is made.
enum class CallHost { kCgroup, kGuest };

class CallScope {
 public:
  const std::string& id() const { return id_; }
  const IntentChoice& intent() const { return intent_; }
  const Grant& grant() const { return grant_; }
  const Cgroup& cgroup() const { return cg_; }  // empty (no dirs) for a CallHost::kGuest call
  // Where the call's first process goes (Environment::exec's placement).
  const Placement& placement() const { return placement_; }
  // The wall-clock limit to give the provider for this call (0: none).
  Duration timeout() const { return grant_.timeout; }
  // When the call started: LadderAction::at is measured from here (steady_clock).
  std::chrono::steady_clock::time_point start() const { return start_; }

 private:
  friend class Controller;
  uint64_t serial_ = 0;
  std::string id_;
  std::vector<std::string> argv_;
  IntentChoice intent_;
  Grant grant_;
  Cgroup cg_;
  Placement placement_;
  std::unique_ptr<Ladder> ladder_;
  std::chrono::steady_clock::time_point start_;
  RunScope* run_ = nullptr;
  uint64_t run_oom_kills_before_ = 0;
  std::optional<MemoryLowered> memory_lowered_;  // the grant's memory limit lowered to a room
};

class Controller {
 public:
  static Result<std::unique_ptr<Controller>> create(ControllerOptions options);
  ~Controller();

  const Policy& policy() const { return options_.policy; }
  CgroupBackend& backend() { return *options_.backend; }
  // The burst monitor shared by all calls (its counters and CPU time, for benchmarks).
  const Monitor& monitor() const { return *monitor_; }
  // What the layout cannot do for this policy (e.g. "memory_high: v1 has no soft limit"): the
  // controller still runs, and reports say so.
  const std::vector<std::string>& absent_capabilities() const { return absent_; }

  // Makes <root>/<tenant>/<run>/main with the run ceiling and the tenant's weight and budget,
  // recorded in a run record of its own (<run>-cgroups) before anything is made.
  Result<std::unique_ptr<RunScope>> begin_run(const std::string& tenant, const std::string& run_id);
  // Makes <run>/call-<n> with the grant of the declared or inferred intent and starts
  // watching it. CallHost::kGuest: the grant and intent only, no host cgroup and no watch (see
  // CallHost).
  Result<std::unique_ptr<CallScope>> begin_call(RunScope& run,
                                                const std::optional<std::string>& intent,
                                                const std::vector<std::string>& argv,
                                                CallHost host = CallHost::kCgroup);
  // The block device ("MAJOR:MINOR", from the run's workspace) that the io grants of this run
  // and its later calls apply to; applies the run ceiling's io limits to the run cgroup.
  // "" (the workspace is on no block device, e.g. tmpfs) drops the io limits of the run with
  // a log line; so does a layout without io limits (an absent capability).
  Status set_io_device(RunScope& run, std::string device);
  // From now until end_call, the monitor reads the call's run-queue delay through `meter`
  // (controller/runq.h; the session wires in the eBPF activity tracer). Without one the call is
  // not measured: the run-queue rule neither counts it as waiting nor needs it to throttle it.
  void measure_runq(const CallScope& call, std::unique_ptr<RunqMeter> meter);
  // From now until end_call, the monitor reads the call's network bytes through `meter`
  // (controller/net_meter.h; the session wires in the eBPF egress guard on `--net allowlist`
  // runs): its peak rate goes into the outcome and the network rule (net_throttle_bytes_per_s)
  // acts on it. Without one the call has no network view and the rule leaves it alone.
  void measure_net(const CallScope& call, std::unique_ptr<NetMeter> meter);
  // The run's parked process (Environment::park, providers/provider.h): the reaper writes it
  // into the next call's cgroup (the spare), off any call's path, and the call that takes the
  // spare gets it as Placement::placed_pid, so the provider starting the call there writes
  // nothing. A process that is gone, or a spare not yet made or taken, changes nothing but
  // speed: the provider then places the call's process itself, as it would without.
  void adopt_parked(RunScope& run, pid_t pid);
  // The next call is the run's last (a one-call run's, session/server.h): when it ends, no
  // spare cgroup is made for a call that will not come (a mkdir per hierarchy beside the run's
  // destroy, and its removal at end_run).
  void last_call(RunScope& run);
  // Stops watching, reads the final counters, revokes the grant (kills anything left in the
  // call's cgroup and removes it) and classifies how the call ended. `observed_inside`: what
  // the controller's part inside a microVM's guest saw of the call (controller/guest_control.h),
  // where its processes lived (a CallHost::kGuest call, which has no host cgroup to read or
  // revoke); it is the outcome's observation but for the run's OOM kills, which are the host's.
  CallOutcome end_call(std::unique_ptr<CallScope> call, ExecResult result,
                       std::optional<CallObservation> observed_inside = std::nullopt);
  // Removes the run's cgroups (after the provider's environment is destroyed), and the
  // tenant's and root's if no other run uses them. Waits for the reaper's pending work on the
  // run first; the spare is removed with the run.
  Status end_run(std::unique_ptr<RunScope> run);
  // Waits until the reaper has done the run's pending work: the cgroups of its ended calls
  // removed (and forgotten by the run record), its next spare made. For tests and benchmarks;
  // nothing needs it for correctness.
  void settle(RunScope& run);

 private:
  explicit Controller(ControllerOptions options);
  // The grant's limits this layout applies, io ones only with an `io_device`.
  Limits call_limits(const Grant& grant, const std::string& io_device) const;
  bool policy_wants_io() const;
  // Queues `job` for the reaper thread as pending work of `run` (at the front when `first`).
  void defer(RunScope& run, std::function<void()> job, bool first = false);
  // Reaper jobs: make the run's next spare cgroup; remove an ended call's cgroup.
  void make_spare(RunScope& run);
  void make_spare_locked(RunScope& run);  // with run.mu_ held
  void place_parked(RunScope& run, pid_t pid);
  void remove_call_cgroup(RunScope& run, const Cgroup& cg);
  // The memory limit below `want` (none: unlimited) that a call of `run` starting now must
  // have so that it alone cannot fill its run's ceiling or its budget; nullopt when `want`
  // fits in both (see begin_call).
  std::optional<MemoryLowered> lower_to_room(RunScope& run, std::optional<Bytes> want) const;
  // The OOM kills counted in the run's cgroup so far (through run.reader_); nullopt if it
  // could not be read.
  std::optional<uint64_t> run_oom_kills(RunScope& run);
  void reaper_loop();

  ControllerOptions options_;
  std::unique_ptr<BackendActuator> own_actuator_;
  Actuator* actuator_ = nullptr;
  std::unique_ptr<Monitor> monitor_;
  std::vector<std::string> absent_;
  std::atomic<uint64_t> next_serial_{1};
  // Runs begin and end on many threads (a server's environments, a replay's workers): the
  // tenant cgroup one run removes when it looks unused must not vanish under another run
  // that is being made in it.
  std::mutex tenants_mu_;
  // The reaper thread and its queue (jobs run in order; each ends its run's pending_ count).
  std::mutex reaper_mu_;
  std::condition_variable reaper_cv_;
  std::deque<std::function<void()>> reaper_jobs_;
  bool reaper_stop_ = false;
  std::thread reaper_;
};

}  // namespace sandgate::controller
