// The effect generator: reproduces a Segment as real resource use in this process, and
// measures what it achieved (`sandgate-load run`).
//
// - Memory: one reservation, touched to grow, MADV_DONTNEED to shrink (memory.h). A rise is
//   anticipated: the holder ramps up at the touch rate it measures, so that the target is
//   resident *at* the point's time instead of one touch-duration later (a 700 MiB step takes
//   30 ms with huge pages on a warm machine but over a second on a VM's never-touched memory).
//   The target counts the whole process: what was resident before (binary, stacks) is
//   subtracted from what is touched.
// - CPU: threads (as many as the largest target needs, capped at the cores this process may
//   run on) that each burn their share of the target in 10 ms periods, measured in their own
//   CPU time, so time stolen by neighbours on a shared core is made up (bounded) rather than
//   counted as done.
// - Pids: fan-out children (fanout.h) so that the process's tasks (its threads included, as
//   the pids controller counts them) reach the target.
// - I/O: a file under workdir written in 1 MiB chunks, each fdatasync'ed (so it reaches the
//   block layer) and dropped from the page cache (so it is not charged as memory); overwritten
//   in place past 64 MiB so disk use stays bounded; removed at the end.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>

#include "core/result.h"
#include "core/units.h"
#include "workloads/segment.h"

namespace sandgate::workloads {

struct LoadOptions {
  int64_t sample_every_ms = 5;     // RSS sampling while holding
  uint64_t grow_step = 16 << 20;   // most bytes touched between two samples
  int64_t lookahead_ms = 3000;     // how far ahead a rise is anticipated, at most
  int64_t margin_ms = 10;          // a rise is planned to be resident this early
  double initial_touch_rate = 512.0 * (1 << 20);  // bytes/s until measured (the plan uses half)
  // bytes/s: the plan never assumes faster. 384 MiB/s sits below the slowest first-touch rate
  // measured on this VM (0.5 GB/s, host backing guest pages): at 1 GiB/s a 700 MiB burst
  // landed 420-510 ms late with the CPU idle; the price is a longer lead-in ramp.
  double max_plan_rate = 384.0 * (1 << 20);
  uint64_t io_chunk = 1 << 20;
  uint64_t io_file_cap = 64 << 20;
  int cores = 0;                   // 0: the CPUs in this process's affinity mask
};

// Runs the segment until end_ms or until `stop` becomes true (a signal handler sets it), then
// returns what was achieved. What it could not do (a refused fork, an I/O error) is listed in
// Achieved::errors rather than failing the run: the report is the point.
Result<Achieved> run_segment(const Segment& segment, const LoadOptions& options,
                             const std::atomic<bool>& stop);

// --- The plan, pure (unit-tested) ---

// Index of the point in force at t (the last with t_ms <= t).
size_t point_at(const Segment& s, int64_t t_ms);
// Cumulative I/O to have done by t: paced evenly across each interval, reaching point i's
// io_bytes at its t_ms.
uint64_t io_goal_at(const Segment& s, double t_ms);
// Memory to hold at t: the target in force, raised ahead of a rise (within lookahead_ms) onto
// a ramp at `rate` bytes/s that reaches the rise's target margin_ms before its time.
uint64_t planned_memory_at(const Segment& s, double t_ms, double rate, int64_t lookahead_ms,
                           int64_t margin_ms);
// The largest memory target among the points after t within lookahead_ms (0 if none).
uint64_t upcoming_memory_peak(const Segment& s, double t_ms, int64_t lookahead_ms);
// CPU time the curve asks for: the integral of millicores over [0, end_ms], in ms.
double target_cpu_ms(const Segment& s);
// The peak memory target and the first time it is in force (-1 when it is 0).
std::pair<uint64_t, int64_t> target_memory_peak(const Segment& s);

// How `millicores` is spread over `threads` burners: `active` of them each busy `fraction`
// of the time (fraction <= 1; capped when millicores > threads * 1000).
struct CpuShare {
  int active = 0;
  double fraction = 0;
};
CpuShare cpu_share(uint64_t millicores, int threads);

// The CPUs this process may run on (sched_getaffinity), at least 1.
int available_cores();

}  // namespace sandgate::workloads
