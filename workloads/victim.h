// The victim: a latency-sensitive workload that runs beside the aggressors and says what they
// did to it (`sandgate-load victim`).
//
// Every interval it runs one fixed unit of work: a read-modify-write of every cache line of its
// working set, then a short dependent arithmetic chain. A unit's latency runs from its
// *scheduled* start to its end, so time spent waiting for a CPU, for a page, or frozen counts.
// The schedule is fixed (unit k is due at start + k * interval): when the victim falls behind,
// late units run back to back and each records how late it was, so a stall is not hidden by
// skipping the units it delayed (no coordinated omission).
//
// Each unit also allocates: it maps `alloc_bytes` of fresh anonymous memory, writes one byte to
// every page and unmaps it again. The time from the map to the last page written is one
// allocation latency (what AgentCgroup reports as "allocation latency"): a page fault that must
// first reclaim, because the victim's cgroup or an ancestor (a host budget) is at its limit,
// shows here before it shows in the unit's latency.
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
  uint64_t alloc_bytes = 1 << 20;  // 0: no allocation per unit
  int cpu = -1;                    // pin to this CPU when >= 0
};

struct LatencySummary {
  uint64_t count = 0;
  int64_t interval_us = 0;
  uint64_t work_bytes = 0;
  int64_t p50_us = 0, p90_us = 0, p99_us = 0, max_us = 0;
  double mean_us = 0;
  uint64_t missed_deadlines = 0;  // units that ended after the next one was due
  // Allocation latencies (map + touch every page of alloc_bytes), nearest rank.
  uint64_t alloc_bytes = 0, alloc_count = 0;
  int64_t alloc_p50_us = 0, alloc_p95_us = 0, alloc_p99_us = 0, alloc_max_us = 0;
  int64_t wall_ms = 0;
  int cpu = -1;
  bool interrupted = false;
  Json to_json() const;
};

// The summary of per-unit latencies (any order): percentiles by nearest rank (core/stats.h).
LatencySummary summarize_latencies(std::vector<int64_t> latencies_us, int64_t interval_us);
// Fills the alloc_* fields from per-allocation latencies (any order).
void summarize_allocations(LatencySummary& s, std::vector<int64_t> alloc_us, uint64_t alloc_bytes);

// Runs until the duration has passed or `stop` becomes true.
Result<LatencySummary> run_victim(const VictimOptions& options, const std::atomic<bool>& stop);

}  // namespace sandgate::workloads
