// The burst monitor (DESIGN.md idea 5): one thread samples every active call's cgroup at a
// short interval (20 ms by default), and is woken early by each call's memory-pressure trigger
// (a PSI trigger on v2/unified, memory.pressure_level on v1). Each sample is handed to the
// call's ladder together with the host's memory pressure.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "controller/cgroup.h"
#include "controller/ladder.h"
#include "core/fd.h"
#include "core/host_paths.h"

namespace sandgate::controller {

class Monitor {
 public:
  Monitor(CgroupBackend& backend, HostPaths paths, Duration interval);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  // Starts watching a call. `ladder` must outlive unwatch(id). `trigger` may be invalid.
  void watch(uint64_t id, const Cgroup& cg, Ladder* ladder, UniqueFd trigger,
             std::chrono::steady_clock::time_point start);
  // Stops watching; after it returns the monitor no longer touches the ladder.
  void unwatch(uint64_t id);

  // Samples taken and trigger wake-ups so far (for benchmarks and tests).
  uint64_t samples() const { return samples_.load(); }
  uint64_t trigger_wakeups() const { return wakeups_.load(); }
  // CPU time the monitor thread has used so far (its pthread CPU clock), for the benchmark
  // that holds the monitor to a share of one core; nullopt if the clock cannot be read.
  std::optional<std::chrono::nanoseconds> cpu_time() const;

 private:
  struct Watched {
    Cgroup cg;
    Ladder* ladder;
    UniqueFd trigger;
    std::chrono::steady_clock::time_point start;
  };
  void loop();
  void sample_all();

  CgroupBackend& backend_;
  HostPaths paths_;
  Duration interval_;
  std::mutex mu_;
  std::map<uint64_t, Watched> watched_;
  UniqueFd wake_;  // eventfd: the set of watched calls changed, or stop
  short trigger_events_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> samples_{0}, wakeups_{0};
  std::thread thread_;
};

// Host memory pressure, some avg10 (%), from <proc>/pressure/memory; nullopt without PSI.
std::optional<double> host_memory_pressure(const HostPaths& paths);

}  // namespace sandgate::controller
