// The recorder behind `sandgate record`: samples one run's cgroup at an interval (memory, CPU
// from usage deltas, pids, io bytes) through the controller's own usage readers, and notes
// each call made through the controller as a call event with its intent. The result is a
// `sandgate trace v1` (replay/trace.h).
//
// Time 0 is the moment the recorder starts. Calls may begin and end on any thread; samples are
// taken on the recorder's own thread, and a sample carries the id of the call open when it was
// taken (calls through one run are sequential: the environment runs one call at a time).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "controller/cgroup.h"
#include "core/result.h"
#include "core/units.h"
#include "replay/trace.h"

namespace sandgate::replay {

struct RecorderOptions {
  Duration interval = std::chrono::milliseconds(50);
  // source, host and notes for the trace's header; interval_ms is filled in from `interval`.
  TraceHeader header;
};

struct RecorderProgress {
  Duration elapsed{0};
  size_t calls = 0;    // begun so far
  size_t samples = 0;
  uint64_t mem_bytes = 0;  // the latest sample's
  std::optional<std::string> open_call;
};

// Cumulative bytes read and written by the cgroup's processes: v2 io.stat (rbytes + wbytes of
// every device) in the "unified" directory when that has an io.stat, else v1
// blkio.throttle.io_service_bytes_recursive ("Total" line). Neither file is in
// controller::Usage (the controller limits io, it never reads it), hence this small reader.
// nullopt when the cgroup has neither file (no io accounting on this layout).
std::optional<uint64_t> read_io_bytes(const controller::Cgroup& cg);

// Pure parsers behind read_io_bytes (unit-tested on kernel text).
std::optional<uint64_t> parse_io_stat_v2(std::string_view text);
std::optional<uint64_t> parse_blkio_service_bytes(std::string_view text);

// CPU use over an interval in millicores (1000 = one core busy for the whole interval).
uint64_t cpu_millicores(uint64_t usage_delta_us, Duration wall);

class Recorder {
 public:
  // Starts sampling `cg` through `backend` (which must outlive the recorder) on a thread.
  Recorder(controller::CgroupBackend& backend, controller::Cgroup cg, RecorderOptions options);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // A call starts now; returns its id ("c1", "c2", ...).
  std::string begin_call(const std::string& intent, const std::string& tool,
                         const std::string& command);
  // The call `id` ended now, having done what `observed` says (the call outcome's tracer and
  // guard parts, observed_of(); nullopt: nothing was watching, or it did not run).
  void end_call(const std::string& id, std::optional<CallObserved> observed = std::nullopt);
  RecorderProgress progress() const;
  // Stops sampling (after one last sample) and returns the trace; a call still open ends now.
  Trace finish();

 private:
  void loop();
  void take_sample();
  int64_t now_ms() const;

  controller::CgroupBackend& backend_;
  controller::Cgroup cg_;
  RecorderOptions options_;
  std::chrono::steady_clock::time_point start_;
  std::unique_ptr<controller::UsageReader> reader_;  // used on the sampling thread only

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  Trace trace_;
  std::vector<size_t> open_;  // indexes into trace_.calls of calls not yet ended
  uint64_t last_cpu_us_ = 0;
  std::chrono::steady_clock::time_point last_cpu_at_;
  bool have_cpu_ = false;
  std::thread thread_;
  bool finished_ = false;
};

// A command line as one string for the trace: arguments joined by spaces, each quoted with
// single quotes when it holds anything a shell would split or expand.
std::string join_command(const std::vector<std::string>& argv);

}  // namespace sandgate::replay
