// What each call of a trace used above the run's baseline: the figures grants are sized on.
// One computation, shared by the capacity planner's per-intent table (replay/planner.h) and
// `sandgate policy suggest` (replay/suggest.h), so both speak of the same numbers.
//
// Definitions (README.md, "Capacity planner"):
// - the run's baseline: the median (core/stats.h) of its samples outside every call (a sample
//   is inside a call when start_ms <= t_ms <= end_ms); when every sample is inside a call, the
//   least it ever held (the most that can be called a baseline). Memory, CPU and pids each.
// - a call's use: the largest of its samples (those inside [start_ms, end_ms]) minus the
//   baseline, at least 0. A call with no sample inside it used 0 (nothing was measured).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "replay/trace.h"

namespace sandgate::replay {

struct RunBaseline {
  double mem = 0;  // bytes
  double cpu = 0;  // millicores
  double pids = 0;
};

// Preconditions: the trace has at least one sample.
RunBaseline run_baseline(const Trace& trace);

struct CallUse {
  std::string intent;
  double seconds = 0;
  double above_baseline = 0;       // memory, bytes
  double cpu_above_baseline = 0;   // millicores
  double pids_above_baseline = 0;  // 0 when the trace did not measure pids
};

// One per call of the trace, in its order.
std::vector<CallUse> call_uses(const Trace& trace, const RunBaseline& baseline);

// The calls of one intent, pooled over traces: what a per-intent table summarises.
struct IntentCalls {
  size_t calls = 0;
  double seconds = 0;
  std::vector<double> mem, cpu, pids;  // each call's use above its run's baseline
};
// Grouped by the calls' own intent, sorted by name.
std::map<std::string, IntentCalls> calls_by_intent(const std::vector<CallUse>& uses);

}  // namespace sandgate::replay
