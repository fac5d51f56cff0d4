#include "workloads/victim.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>

#include "core/stats.h"

namespace sandgate::workloads {

Json LatencySummary::to_json() const {
  return Json{{"schema_version", 1},
              {"count", count},
              {"interval_us", interval_us},
              {"work_bytes", work_bytes},
              {"p50_us", p50_us},
              {"p90_us", p90_us},
              {"p99_us", p99_us},
              {"max_us", max_us},
              {"mean_us", mean_us},
              {"missed_deadlines", missed_deadlines},
              {"wall_ms", wall_ms},
              {"cpu", cpu < 0 ? Json(nullptr) : Json(cpu)},
              {"interrupted", interrupted}};
}

LatencySummary summarize_latencies(std::vector<int64_t> latencies_us, int64_t interval_us) {
  stats::Distribution<int64_t> lat(std::move(latencies_us));
  LatencySummary s;
  s.interval_us = interval_us;
  s.count = lat.size();
  s.p50_us = lat.percentile(50);
  s.p90_us = lat.percentile(90);
  s.p99_us = lat.percentile(99);
  s.max_us = lat.max();
  s.mean_us = lat.mean();
  s.missed_deadlines = lat.count_above(interval_us);
  return s;
}

namespace {

using Clock = std::chrono::steady_clock;

// One unit: touch every cache line of the working set, then a little compute.
uint64_t work_unit(std::vector<uint64_t>& ws, uint64_t seed) {
  constexpr size_t kLine = 64 / sizeof(uint64_t);
  uint64_t acc = seed;
  for (size_t i = 0; i < ws.size(); i += kLine) {
    ws[i] = ws[i] * 31 + acc;
    acc += ws[i];
  }
  for (int k = 0; k < 20000; ++k) acc = acc * 6364136223846793005ull + 1442695040888963407ull;
  return acc;
}

}  // namespace

Result<LatencySummary> run_victim(const VictimOptions& o, const std::atomic<bool>& stop) {
  if (o.interval <= Duration::zero()) return logic_error("victim", "--interval must be > 0");
  if (o.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(o.cpu, &set);
    if (::sched_setaffinity(0, sizeof(set), &set) != 0)
      return sys_error("sched_setaffinity", "cpu " + std::to_string(o.cpu));
  }
  std::vector<uint64_t> ws(std::max<uint64_t>(o.work_bytes / sizeof(uint64_t), 1), 1);
  const auto interval = std::chrono::duration_cast<Clock::duration>(o.interval);
  std::vector<int64_t> lat;
  lat.reserve(static_cast<size_t>(o.duration / o.interval) + 1);

  volatile uint64_t sink = 0;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(o.duration);
  bool interrupted = false;
  for (uint64_t k = 0;; ++k) {
    auto due = start + interval * static_cast<int64_t>(k);
    if (due >= end) break;
    if (stop.load()) {
      interrupted = true;
      break;
    }
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(due.time_since_epoch()).count();
    timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
      if (stop.load()) break;
    }
    if (stop.load()) {
      interrupted = true;
      break;
    }
    sink = work_unit(ws, k);
    lat.push_back(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - due).count());
  }
  (void)sink;
  LatencySummary s = summarize_latencies(std::move(lat),
      std::chrono::duration_cast<std::chrono::microseconds>(o.interval).count());
  s.work_bytes = o.work_bytes;
  s.cpu = o.cpu;
  s.interrupted = interrupted;
  s.wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  return s;
}

}  // namespace sandgate::workloads
