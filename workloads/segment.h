// What sandgate-load reproduces: one segment of a trace (a call, or the run's resident baseline)
// as a target curve, and what it achieved against it. The replayer writes a Segment as JSON
// into the workspace and runs `sandgate-load run --segment FILE` inside the sandbox.
//
//   {"name":"c12","points":[{"t_ms":0,"mem_bytes":1e8,"cpu_millicores":1500,"pids":4,
//    "io_bytes":0}, ...],"end_ms":2300,"workdir":"/workspace/load"}
//
// Between points the targets are held (step), not interpolated: a trace sample is the level
// over its interval. io_bytes is the cumulative I/O to reach by that time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/result.h"

namespace sandgate::workloads {

struct SegmentPoint {
  int64_t t_ms = 0;  // from the segment's start
  uint64_t mem_bytes = 0;
  uint64_t cpu_millicores = 0;
  uint64_t pids = 0;       // processes to hold (fan-out), including sandgate-load itself
  uint64_t io_bytes = 0;   // cumulative bytes written (and read back) under workdir
};

struct Segment {
  std::string name;
  std::vector<SegmentPoint> points;  // sorted by t_ms, first at 0
  int64_t end_ms = 0;                // hold the last point until then, then exit 0
  std::string workdir = ".";         // where file I/O happens
  Json to_json() const;
  static Result<Segment> from_json(const Json& j);  // errors name the field
};

// Printed by sandgate-load as one JSON object on stdout when the segment ends (or on SIGTERM).
struct Achieved {
  std::string name;
  int64_t wall_ms = 0;
  uint64_t target_peak_mem = 0, achieved_peak_mem = 0;  // RSS it held, measured by itself
  double target_cpu_ms = 0, achieved_cpu_ms = 0;        // CPU time (target: integral of curve)
  uint64_t target_peak_pids = 0, achieved_peak_pids = 0;
  uint64_t target_io_bytes = 0, achieved_io_bytes = 0;
  Json to_json() const;
  static Result<Achieved> from_json(const Json& j);
};

}  // namespace sandgate::workloads
