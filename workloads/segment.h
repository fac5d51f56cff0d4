// What sandgate-load reproduces: one segment of a trace (a call, or the run's resident baseline)
// as a target curve, and what it achieved against it. The replayer writes a Segment as JSON
// into the workspace and runs `sandgate-load run --segment FILE` inside the sandbox.
//
//   {"name":"c12","points":[{"t_ms":0,"mem_bytes":1e8,"cpu_millicores":1500,"pids":4,
//    "io_bytes":0}, ...],"end_ms":2300,"workdir":"/workspace/load"}
//
// Between points the targets are held (step), not interpolated: a trace sample is the level
// over its interval. io_bytes is the cumulative I/O to reach by that time: it is the one
// target that is paced, evenly across the interval that ends at the point (a cumulative
// counter's rise over an interval is a rate over that interval).
//
// Reading is strict: an unknown key, a wrong type, a negative or fractional count, points not
// starting at 0 or not strictly increasing in time, io_bytes going down, or end_ms before the
// last point are errors that name the field ("points[2].t_ms: ..."). Numbers may be written
// as integral floats (1e8).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/result.h"

namespace sandgate::workloads {

inline constexpr int kAchievedSchemaVersion = 1;

struct SegmentPoint {
  int64_t t_ms = 0;  // from the segment's start
  uint64_t mem_bytes = 0;
  uint64_t cpu_millicores = 0;
  uint64_t pids = 0;       // tasks to hold (as the pids controller counts them: threads and
                           // processes), sandgate-load's own included; the rest is fan-out
  uint64_t io_bytes = 0;   // cumulative bytes written (write + fdatasync) under workdir
  bool operator==(const SegmentPoint&) const = default;
};

struct Segment {
  std::string name;
  std::vector<SegmentPoint> points;  // sorted by t_ms, first at 0
  int64_t end_ms = 0;                // hold the last point until then, then exit 0
  std::string workdir = ".";         // where file I/O happens
  Json to_json() const;
  static Result<Segment> from_json(const Json& j);  // errors name the field
  bool operator==(const Segment&) const = default;
};

// Printed by sandgate-load as one JSON object on stdout when the segment ends (or on SIGTERM).
// from_json ignores keys it does not know, so fields can be added without breaking readers.
struct Achieved {
  std::string name;
  int64_t wall_ms = 0;
  uint64_t target_peak_mem = 0, achieved_peak_mem = 0;  // RSS it held, measured by itself
  double target_cpu_ms = 0, achieved_cpu_ms = 0;        // CPU time (target: integral of curve)
  uint64_t target_peak_pids = 0, achieved_peak_pids = 0;
  uint64_t target_io_bytes = 0, achieved_io_bytes = 0;

  // Added by the implementation (all optional in from_json):
  int schema_version = kAchievedSchemaVersion;
  // When the peak was reached, ms from the start: the target's first point at its maximum;
  // achieved: the first sample at >= 99% of the achieved peak (-1: no memory target).
  int64_t target_peak_at_ms = -1, achieved_peak_at_ms = -1;
  // How achieved_peak_mem was measured: "rss_statm" (resident pages of the process from
  // /proc/self/statm, sampled every few ms and after each growth step; children share the
  // address space and add nothing).
  std::string mem_measure = "rss_statm";
  uint64_t base_rss_bytes = 0;   // resident before any target memory was touched
  uint64_t touched_peak_bytes = 0;  // the most bytes it had touched at once (its own count)
  // CPU: threads used for the curve and the cores they could use (sched_getaffinity); capped
  // when the curve asked for more cores than that. achieved_cpu_ms is getrusage user+sys of
  // the process and its reaped children, so it includes the page faults of the memory curve.
  int cpu_threads = 0;
  int cpu_cores_available = 0;
  bool cpu_capped = false;
  // How long the CPU threads were runnable but waiting for a CPU (schedstat run delay): the
  // part of the curve that neighbours on shared cores took. A shortfall in achieved_cpu_ms up
  // to this much is contention, not the generator.
  double cpu_wait_ms = 0;
  // The same for the control thread, which touches the memory curve and samples it: when it
  // waited long for a CPU, the machine, not the plan, decided how late the peak was.
  double control_wait_ms = 0;
  // Time the control thread spent touching memory the curve already asked for (behind the
  // level in force), on the CPU or stalled in page faults, not waiting for a CPU (that is
  // control_wait_ms). A machine whose page faults are slower than the curve rises (a VM's
  // guest memory the host has not backed yet) makes the peak late by up to this much.
  double behind_touch_ms = 0;
  bool io_files_removed = true;  // the I/O files were removed at the end
  bool interrupted = false;      // ended early by SIGTERM/SIGINT
  std::vector<std::string> errors;  // what it could not do ("memory: ENOMEM at 1.50GiB")
  Json to_json() const;
  static Result<Achieved> from_json(const Json& j);
};

}  // namespace sandgate::workloads
