// The graduated response for one call: throttle -> freeze -> cancel -> kill, each step taken
// only when the one before did not help, each recorded with its time (docs/DESIGN.md idea 6).
//
// Every side effect goes through an Actuator, so the decisions are tested with a recording
// fake (oomd BaseKillPluginMock) and separately for real through the cgroup backend.
#pragma once

#include <optional>
#include <string>

#include "controller/cgroup.h"
#include "controller/outcome.h"
#include "controller/policy.h"

namespace sandgate::controller {

class Actuator {
 public:
  virtual ~Actuator() = default;
  virtual Status set_limits(const Cgroup& cg, const Limits& limits) = 0;
  virtual Status freeze(const Cgroup& cg, bool frozen) = 0;
  virtual Status signal(const Cgroup& cg, int sig) = 0;
  virtual Status kill(const Cgroup& cg) = 0;
};

// The real one: straight to the cgroup backend.
class BackendActuator : public Actuator {
 public:
  explicit BackendActuator(CgroupBackend& backend) : backend_(backend) {}
  Status set_limits(const Cgroup& cg, const Limits& l) override { return backend_.set_limits(cg, l); }
  Status freeze(const Cgroup& cg, bool f) override { return backend_.freeze(cg, f); }
  Status signal(const Cgroup& cg, int sig) override { return backend_.signal(cg, sig); }
  Status kill(const Cgroup& cg) override { return backend_.kill(cg); }

 private:
  CgroupBackend& backend_;
};

// Run-queue delay around one call, over the policy's runq_window (the monitor's view of every
// active call, controller/runq.h).
struct RunqSignal {
  double others_ms_per_s = 0;  // the worst run-queue delay rate among the OTHER active calls
  std::string worst_call;      // which call that is (its cgroup), for the reason; "" if none
  double cpu_cores = 0;        // this call's CPU use over the window
  bool most_cpu = false;       // no other active call uses more CPU
};

// One call's own network traffic over the policy's net_window (controller/net_meter.h).
struct NetSignal {
  double bytes_out_per_s = 0;
  double bytes_in_per_s = 0;
  double cpu_cores = 0;  // this call's CPU use over the same window
  double bytes_per_s() const { return bytes_out_per_s + bytes_in_per_s; }
};

// The memory budget a call counts against (LadderSettings::freeze_budget_at), as the monitor
// read it at this sample.
struct BudgetSignal {
  std::string name;   // the budget's cgroup, for the reason
  uint64_t used = 0;  // bytes charged to it now
  uint64_t limit = 0;
  bool largest = false;  // this call holds the most memory of the budget's active calls
  bool growing = false;  // this call's memory rose since the monitor's previous sample (since
                         // its start, 0 charged, at its first)
};

// What the ladder sees at one step.
struct LadderInput {
  Duration now{0};                      // since the call started
  Usage usage;
  std::optional<double> host_memory_psi;  // host memory pressure, some avg10 (%)
  bool largest_active_call = true;      // this call holds the most memory of the active ones
  // Set by the monitor when the run-queue rule is on and this call's CPU use over a window is
  // known; nullopt: no run-queue decision this step.
  std::optional<RunqSignal> runq;
  // Set by the monitor when the call has a network meter and its rate over a window is known
  // (the peak is recorded whether or not the network rule is on); nullopt: no network view.
  std::optional<NetSignal> net;
  // Set by the monitor when the call counts against a memory budget (per-call mode) and the
  // budget could be read at this sample.
  std::optional<BudgetSignal> budget;
};

class Ladder {
 public:
  Ladder(const LadderSettings& settings, const Grant& grant, const CgroupFeatures& features,
         Cgroup cgroup, Actuator& actuator);

  // Decides and acts on one sample. Records every action (and observed kernel OOM kills) into
  // the observation, which also accumulates peaks.
  void step(const LadderInput& in);
  // Records a sample without acting on it (the last read after the call ended).
  void observe(const LadderInput& in);
  // The call ended: close open intervals (throttled / frozen time).
  void finish(Duration now);

  const CallObservation& observation() const { return obs_; }
  bool done() const { return state_ == State::kKilled; }
  // The CPU squeeze is on (for memory, other calls' run-queue delay or the network).
  bool squeezed() const { return squeezed_; }

 private:
  enum class State { kNormal, kThrottled, kFrozen, kCancelling, kKilled };
  void record(const std::string& action, Duration at, const std::string& reason);
  void throttle(const LadderInput& in);
  void unthrottle(const LadderInput& in);
  void step_runq(const LadderInput& in);
  void step_net(const LadderInput& in);
  // The budget rule: freezes this call if its budget is nearly full and it is one of the calls
  // filling it; true if it did.
  bool freeze_for_budget(const LadderInput& in);
  // Frozen by the budget rule: thaws, or cancels once budget_freeze_max has passed.
  void step_frozen_for_budget(const LadderInput& in);
  // The CPU squeeze shared by the memory, run-queue and network throttles: applied when the
  // first of them starts, given back when the last ends.
  bool squeeze(Duration now, Limits* applied);
  void release(Duration now);
  // "; the cpu squeeze stays for memory" (and the other reasons still holding), or "".
  std::string squeeze_stays() const;
  void cancel(Duration at, Termination why, const std::string& reason);
  void kill(Duration at, const std::string& reason);

  LadderSettings settings_;
  Grant grant_;
  CgroupFeatures features_;
  Cgroup cgroup_;
  Actuator& actuator_;
  State state_ = State::kNormal;
  CallObservation obs_;
  Duration throttled_since_{0}, frozen_since_{0}, cancelled_at_{0};
  bool throttled_ = false;       // by memory
  bool runq_throttled_ = false;  // by other calls' run-queue delay
  bool net_throttled_ = false;   // by its own network rate
  bool frozen_for_budget_ = false;  // frozen by the budget rule (else by host pressure)
  bool squeezed_ = false;        // the CPU squeeze is on (for any of the three)
  Duration runq_since_{0}, net_since_{0};
  // Counters seen at the previous step, to turn totals into events.
  uint64_t last_oom_kill_ = 0, last_pids_refused_ = 0, last_cpu_us_ = 0;
  Duration last_at_{0};
  bool first_ = true;
  Duration pids_pinned_since_{-1};
};

}  // namespace sandgate::controller
