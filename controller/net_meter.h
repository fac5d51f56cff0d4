// A call's network bytes as a ladder signal: what went out through its sockets and came in.
//
// The controller does not count them itself (the eBPF egress guard's cgroup_skb programs do,
// in ebpf/, which the controller must not know about); it owns this interface, and the
// orchestration layer hands each call of a `--net allowlist` run a meter (session/run_session.cc
// wires in the guard: that is where a run has a network at all). The monitor reads every
// metered call's meter at each sample and turns the totals into a rate over the policy's
// `net_window`; the call's ladder compares it with `net_throttle_bytes_per_s`.
//
// Kept apart from RunqMeter (controller/runq.h) rather than merged into one "call meters"
// interface: the two come from different programs that load independently (the activity tracer,
// the egress guard), a call may have either without the other, and each is read for its own
// rule over its own window.
#pragma once

#include <cstdint>
#include <optional>

namespace sandgate::controller {

// Cumulative since the call began, off loopback (the run's own namespace).
struct NetTotals {
  uint64_t bytes_out = 0;
  uint64_t bytes_in = 0;
  bool operator==(const NetTotals&) const = default;
};

class NetMeter {
 public:
  virtual ~NetMeter() = default;
  // The call's totals so far; nullopt when they cannot be read now. Called on the monitor's
  // thread while the call is watched, never after end_call; must be cheap (one map lookup),
  // must not block, and must not change what the call's end reads (non-destructive).
  virtual std::optional<NetTotals> read() = 0;
};

}  // namespace sandgate::controller
