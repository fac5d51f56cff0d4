#include "workloads/victim.h"

#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

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
              {"alloc_bytes", alloc_bytes},
              {"alloc_count", alloc_count},
              {"alloc_p50_us", alloc_p50_us},
              {"alloc_p95_us", alloc_p95_us},
              {"alloc_p99_us", alloc_p99_us},
              {"alloc_max_us", alloc_max_us},
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

void summarize_allocations(LatencySummary& s, std::vector<int64_t> alloc_us, uint64_t alloc_bytes) {
  stats::Distribution<int64_t> d(std::move(alloc_us));
  s.alloc_bytes = alloc_bytes;
  s.alloc_count = d.size();
  s.alloc_p50_us = d.percentile(50);
  s.alloc_p95_us = d.percentile(95);
  s.alloc_p99_us = d.percentile(99);
  s.alloc_max_us = d.max();
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

// One timed allocation: fresh anonymous pages, one byte written to each (each write is a page
// fault that takes a page from the cgroup's charge), then unmapped outside the timing.
// Returns microseconds, or -1 when the map failed (not counted).
int64_t timed_allocation(uint64_t bytes, uint64_t seed) {
  static const long page = ::sysconf(_SC_PAGESIZE) > 0 ? ::sysconf(_SC_PAGESIZE) : 4096;
  auto t0 = Clock::now();
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return -1;
  auto* c = static_cast<volatile char*>(p);
  for (uint64_t off = 0; off < bytes; off += static_cast<uint64_t>(page))
    c[off] = static_cast<char>(seed | 1);
  auto t1 = Clock::now();
  ::munmap(p, bytes);
  return std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count();
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
  std::vector<int64_t> lat, alloc;
  lat.reserve(static_cast<size_t>(o.duration / o.interval) + 1);
  if (o.alloc_bytes) alloc.reserve(lat.capacity());

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
    if (o.alloc_bytes)
      if (int64_t a = timed_allocation(o.alloc_bytes, k); a >= 0) alloc.push_back(a);
    lat.push_back(
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - due).count());
  }
  (void)sink;
  LatencySummary s = summarize_latencies(
      std::move(lat), std::chrono::duration_cast<std::chrono::microseconds>(o.interval).count());
  s.work_bytes = o.work_bytes;
  summarize_allocations(s, std::move(alloc), o.alloc_bytes);
  s.cpu = o.cpu;
  s.interrupted = interrupted;
  s.wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  return s;
}

}  // namespace sandgate::workloads
