// Run-queue delay as a ladder signal: how long a call's tasks waited runnable for a CPU.
//
// The controller does not measure it itself (that takes the scheduler's tracepoints, the eBPF
// activity tracer in ebpf/, which the controller must not know about); it owns this interface,
// and the orchestration layer hands each call a meter (session/run_session.cc wires the tracer
// in). The monitor reads every measured call's meter at each sample, turns the totals into a
// rate over the policy's window (ms of waiting per second of wall time), and gives each call's
// ladder the worst rate among the OTHER active calls and whether this call uses the most CPU.
#pragma once

#include <cstdint>
#include <optional>

namespace sandgate::controller {

// Cumulative since the call began: time its tasks spent runnable but not running (summed over
// the tasks, so it may exceed wall time) and how many such waits there were.
struct RunqTotals {
  uint64_t delay_ns = 0;
  uint64_t waits = 0;
  bool operator==(const RunqTotals&) const = default;
};

class RunqMeter {
 public:
  virtual ~RunqMeter() = default;
  // The call's totals so far; nullopt when they cannot be read now (the call is not measured).
  // Called on the monitor's thread while the call is watched, never after end_call; must be
  // cheap (one map lookup) and must not block.
  virtual std::optional<RunqTotals> read() = 0;
};

}  // namespace sandgate::controller
