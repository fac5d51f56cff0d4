// The victim: a latency-sensitive workload that runs beside the aggressors and says what they
// did to it (`sandgate-load victim`).
//
// Every interval it runs one fixed unit of work: a read-modify-write of every cache line of its
// working set, then a short dependent arithmetic chain. A unit's latency runs from its
// *scheduled* start to its end, so time spent waiting for a CPU, for a page, or frozen counts.
// The schedule is fixed (unit k is due at start + k * interval): when the victim falls behind,
// late units run back to back and each records how late it was, so a stall is not hidden by
// skipping the units it delayed (no coordinated omission).
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "core/json.h"
#include "core/result.h"
#include "core/units.h"

namespace sandgate::workloads {

struct VictimOptions {
  Duration duration = std::chrono::seconds(5);
  Duration interval = std::chrono::milliseconds(10);
  uint64_t work_bytes = 4 << 20;
  int cpu = -1;  // pin to this CPU when >= 0
};

struct LatencySummary {
  uint64_t count = 0;
  int64_t interval_us = 0;
  uint64_t work_bytes = 0;
  int64_t p50_us = 0, p90_us = 0, p99_us = 0, max_us = 0;
  double mean_us = 0;
  uint64_t missed_deadlines = 0;  // units that ended after the next one was due
  int64_t wall_ms = 0;
  int cpu = -1;
  bool interrupted = false;
  Json to_json() const;
};

// The summary of per-unit latencies (any order): percentiles by nearest rank (core/stats.h).
LatencySummary summarize_latencies(std::vector<int64_t> latencies_us, int64_t interval_us);

// Runs until the duration has passed or `stop` becomes true.
Result<LatencySummary> run_victim(const VictimOptions& options, const std::atomic<bool>& stop);

}  // namespace sandgate::workloads
