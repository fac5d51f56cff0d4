// The structured outcome every call returns (docs/DESIGN.md idea 6): what was asked for, what was
// granted, what was used, what the ladder did and when, how the call ended and whether an
// agent should retry. An OOM never reaches the agent as "exit 137".
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "controller/policy.h"
#include "core/activity.h"
#include "core/egress.h"
#include "core/exec_result.h"
#include "core/json.h"
#include "core/process.h"
#include "core/units.h"

namespace sandgate::controller {

// kNotStarted: the command could not be started inside the sandbox (it does not exist, is not
// executable, or a step before exec failed); its status is then 127 or 126, as a shell's.
enum class Termination { kExited, kTimeout, kMemoryLimit, kPidsLimit, kCancelled, kKilled, kNotStarted };
enum class RetryAdvice { kRetry, kRetryWithSmallerScope, kNoRetry };
std::string to_string(Termination t);  // "exited", "timeout", "memory_limit", ..., "not_started"
std::string to_string(RetryAdvice r);  // "retry", "retry_with_smaller_scope", "no_retry"

// One step the ladder took (or an event it observed, such as a kernel OOM kill).
struct LadderAction {
  std::string action;  // throttle, unthrottle, freeze, thaw, cancel, kill, oom_kill
  Duration at{0};      // since the call started
  std::string reason;
};

struct Peaks {
  uint64_t memory_bytes = 0;
  uint64_t pids = 0;
  double cpu_cores = 0;  // highest usage rate between two samples
  // Highest network rate (bytes out + in per second) over the policy's net_window; nullopt
  // when the call had no network meter or ended before half a window.
  std::optional<double> net_bytes_per_s;
};

// What the monitor learned about one call.
struct CallObservation {
  Peaks peaks;
  uint64_t cpu_usage_us = 0;
  uint64_t cpu_throttled_us = 0;
  uint64_t oom_kills = 0;         // kernel OOM kills inside the call's cgroup
  // OOM kills at the run's ceiling while the call ran (static mode: the run's one limit is
  // where memory runs out, and the kernel counts the kill there, not in the call's cgroup).
  uint64_t run_oom_kills = 0;
  uint64_t pids_refused = 0;      // forks refused at pids.max
  Duration throttled_for{0};      // time the ladder held the call throttled
  Duration frozen_for{0};
  std::vector<LadderAction> actions;
  bool cancelled_by_ladder = false;
  bool killed_by_ladder = false;
  std::string ladder_reason;      // why the ladder cancelled / killed
  Termination ladder_termination = Termination::kKilled;  // what its cancel/kill was for
  int samples = 0;
  // What the kernel saw the call's processes do (the eBPF activity tracer), when one was
  // watching the run: in JSON as observed.execs, observed.connects, observed.sensitive_opens.
  std::optional<TracedActivity> traced;
  // What the egress guard decided about the call's connects and sends, when the run has an
  // allowlist (observed.egress, in order; at most kTracedKeep, the rest counted).
  std::vector<EgressVerdict> egress;
  uint64_t egress_not_kept = 0;
  // What went through the call's sockets off loopback (the guard's meter), when the run has an
  // allowlist: observed.net = {bytes_out, bytes_in, packets_out, packets_in}, with
  // peak_bytes_per_s beside them when peaks.net_bytes_per_s is known.
  struct NetBytes {
    uint64_t bytes_out = 0, bytes_in = 0, packets_out = 0, packets_in = 0;
    bool operator==(const NetBytes&) const = default;
  };
  std::optional<NetBytes> net;
};

// A call's memory limit set below its grant: when it started, a shared limit above it (its
// run's ceiling, its budget) had less room left than the grant (Controller::begin_call). In
// JSON: memory_lowered = {limit_bytes, within}.
struct MemoryLowered {
  Bytes limit;         // the memory limit the call's cgroup had
  std::string within;  // the cgroup whose room it was ("sandgate/small")
  bool operator==(const MemoryLowered&) const = default;
};

struct CallOutcome {
  std::string call_id;
  std::vector<std::string> argv;
  IntentChoice intent;
  Grant grant;
  std::optional<MemoryLowered> memory_lowered;
  CallObservation observed;
  ExecResult exec;      // what the provider returned: exit status, wall time, output
  Termination termination = Termination::kExited;
  std::string reason;   // one line: why it ended
  RetryAdvice retry = RetryAdvice::kNoRetry;
  std::string advice;   // one line an agent can act on
};

// The termination, reason and retry advice, from what the call did and what was seen.
// Pure: unit-tested against every combination.
// Reads exec (status, timed_out, cancelled by the caller, start_failure) and observed.
void classify(CallOutcome& outcome);

Json to_json(const CallOutcome& o, bool with_output = true);

}  // namespace sandgate::controller
