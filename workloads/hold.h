// `sandgate-load hold`: resident memory held at a level, for the replayer's run-level baseline
// (the memory a run keeps between its calls). The level is either fixed (--mem) or followed
// from a file the replayer rewrites (--follow): a byte count ("104857600" or "100MiB"), or
// "stop" to end.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"
#include "core/units.h"
#include "workloads/segment.h"

namespace sandgate::workloads {

struct HoldLevel {
  bool stop = false;
  uint64_t bytes = 0;
};
// Parses the follow file's text (surrounding whitespace ignored).
Result<HoldLevel> parse_hold_level(std::string_view text);
// Reads and parses the follow file; errors name it.
Result<HoldLevel> read_hold_level(const std::string& path);

struct HoldOptions {
  std::string follow;              // the level file; empty: hold `mem`
  uint64_t mem = 0;                // the fixed level when follow is empty
  std::optional<Duration> limit;   // --seconds: end after this long
  int64_t poll_ms = 20;            // re-read at least this often (inotify wakes it earlier)
};

// Holds until the level file says "stop", `limit` passes or `stop` becomes true. The level
// counts the whole process, like run's memory target. Returns what it held (name "hold":
// target_peak_mem = the largest level asked for). A level file that becomes unreadable or
// malformed keeps the last level (listed once in errors).
Result<Achieved> run_hold(const HoldOptions& options, const std::atomic<bool>& stop);

}  // namespace sandgate::workloads
