#include "workloads/load.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/fd.h"
#include "workloads/fanout.h"
#include "workloads/memory.h"

namespace sandgate::workloads {

// --- The plan ---

size_t point_at(const Segment& s, int64_t t_ms) {
  auto it = std::upper_bound(s.points.begin(), s.points.end(), t_ms,
                             [](int64_t t, const SegmentPoint& p) { return t < p.t_ms; });
  return it == s.points.begin() ? 0 : static_cast<size_t>(it - s.points.begin()) - 1;
}

uint64_t io_goal_at(const Segment& s, double t_ms) {
  if (s.points.empty()) return 0;
  size_t i = point_at(s, static_cast<int64_t>(std::floor(t_ms)));
  const SegmentPoint& p = s.points[i];
  if (i + 1 >= s.points.size()) return p.io_bytes;
  const SegmentPoint& q = s.points[i + 1];
  double f = (t_ms - static_cast<double>(p.t_ms)) / static_cast<double>(q.t_ms - p.t_ms);
  f = std::clamp(f, 0.0, 1.0);
  return p.io_bytes + static_cast<uint64_t>(f * static_cast<double>(q.io_bytes - p.io_bytes));
}

uint64_t planned_memory_at(const Segment& s, double t_ms, double rate, int64_t lookahead_ms,
                           int64_t margin_ms) {
  if (s.points.empty()) return 0;
  size_t i = point_at(s, static_cast<int64_t>(std::floor(t_ms)));
  uint64_t level = s.points[i].mem_bytes;
  for (size_t j = i + 1; j < s.points.size(); ++j) {
    const SegmentPoint& q = s.points[j];
    double until = static_cast<double>(q.t_ms) - t_ms;
    if (until > static_cast<double>(lookahead_ms)) break;
    if (q.mem_bytes <= level) continue;
    double lead_s = std::max(0.0, until - static_cast<double>(margin_ms)) / 1000.0;
    double ramp = static_cast<double>(q.mem_bytes) - rate * lead_s;
    if (ramp > static_cast<double>(level)) level = static_cast<uint64_t>(ramp);
  }
  return level;
}

uint64_t upcoming_memory_peak(const Segment& s, double t_ms, int64_t lookahead_ms) {
  uint64_t peak = 0;
  for (size_t j = point_at(s, static_cast<int64_t>(std::floor(t_ms))) + 1; j < s.points.size();
       ++j) {
    if (static_cast<double>(s.points[j].t_ms) - t_ms > static_cast<double>(lookahead_ms)) break;
    peak = std::max(peak, s.points[j].mem_bytes);
  }
  return peak;
}

double target_cpu_ms(const Segment& s) {
  double total = 0;
  for (size_t i = 0; i < s.points.size(); ++i) {
    int64_t until = i + 1 < s.points.size() ? s.points[i + 1].t_ms : s.end_ms;
    if (until > s.points[i].t_ms)
      total += static_cast<double>(s.points[i].cpu_millicores) / 1000.0 *
               static_cast<double>(until - s.points[i].t_ms);
  }
  return total;
}

std::pair<uint64_t, int64_t> target_memory_peak(const Segment& s) {
  uint64_t peak = 0;
  int64_t at = -1;
  for (const auto& p : s.points) {
    if (p.mem_bytes > peak) {
      peak = p.mem_bytes;
      at = p.t_ms;
    }
  }
  return {peak, at};
}

CpuShare cpu_share(uint64_t millicores, int threads) {
  CpuShare c;
  if (millicores == 0 || threads <= 0) return c;
  c.active = static_cast<int>(std::min<uint64_t>((millicores + 999) / 1000,
                                                 static_cast<uint64_t>(threads)));
  c.fraction = std::min(1.0, static_cast<double>(millicores) / (1000.0 * c.active));
  return c;
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

// --- The run ---

namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kCpuPeriodNs = 10'000'000;  // duty-cycle period of a CPU burner
constexpr double kPlanRateShare = 0.5;        // of the measured touch rate, for planning

int64_t thread_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Time this thread spent runnable but waiting for a CPU (second field of schedstat,
// Documentation/scheduler/sched-stats.rst); 0 where the kernel does not keep it.
int64_t run_delay_ns() {
  auto text = read_file("/proc/thread-self/schedstat", 256);
  if (!text.ok()) return 0;
  unsigned long long on_cpu = 0, waiting = 0;
  if (std::sscanf(text->c_str(), "%llu %llu", &on_cpu, &waiting) != 2) return 0;
  return static_cast<int64_t>(waiting);
}

void sleep_until(Clock::time_point when) {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch()).count();
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  // steady_clock is CLOCK_MONOTONIC on Linux. EINTR (a stop signal) just returns early.
  ::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
}

// Shared between the control loop and the worker threads.
struct Shared {
  std::atomic<uint64_t> cpu_millicores{0};
  std::atomic<uint64_t> io_goal{0};
  std::atomic<uint64_t> io_done{0};
  std::atomic<int64_t> cpu_wait_ns{0};
  std::atomic<bool> finished{false};
  std::mutex errors_mu;
  std::vector<std::string> errors;
  void add_error(std::string e) {
    std::lock_guard<std::mutex> lock(errors_mu);
    errors.push_back(std::move(e));
  }
};

// Burns this thread's share of the target, period by period. Work is a dependent arithmetic
// chain the compiler cannot drop; its result goes to a volatile sink.
void cpu_worker(int index, int threads, Shared& sh) {
  volatile uint64_t sink = 0;
  uint64_t x = 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index);
  int64_t debt = 0;
  auto next = Clock::now();
  while (!sh.finished.load(std::memory_order_relaxed)) {
    CpuShare share = cpu_share(sh.cpu_millicores.load(std::memory_order_relaxed), threads);
    auto period_end = next + std::chrono::nanoseconds(kCpuPeriodNs);
    if (index < share.active) {
      int64_t want = static_cast<int64_t>(share.fraction * kCpuPeriodNs) + debt;
      int64_t t0 = thread_cpu_ns(), got = 0;
      while (got < want && Clock::now() < period_end) {
        for (int k = 0; k < 2000; ++k) x = x * 6364136223846793005ull + 1442695040888963407ull;
        got = thread_cpu_ns() - t0;
      }
      // Time a neighbour took from us this period is made up later, but at most two periods'
      // worth: a long stall (frozen cgroup) must not turn into a burst the trace never had.
      debt = std::clamp<int64_t>(want - got, 0, 2 * kCpuPeriodNs);
    } else {
      debt = 0;
    }
    sink = x;
    next = period_end;
    auto now = Clock::now();
    if (next < now - std::chrono::nanoseconds(kCpuPeriodNs)) next = now;  // fell behind: resync
    if (share.fraction < 1.0 || index >= share.active) sleep_until(next);
  }
  (void)sink;
  sh.cpu_wait_ns += run_delay_ns();
}

// Writes toward io_goal: 1 MiB chunks, each fdatasync'ed and dropped from the page cache.
void io_worker(const std::string& path, const LoadOptions& o, Shared& sh) {
  auto fd = open_fd(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (!fd.ok()) {
    sh.add_error("io: " + fd.error().message());
    return;
  }
  std::string buf(o.io_chunk, '\0');
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<char>('a' + i % 26);
  uint64_t done = 0;
  while (!sh.finished.load(std::memory_order_relaxed)) {
    uint64_t goal = sh.io_goal.load(std::memory_order_relaxed);
    if (done >= goal) {
      ::usleep(2000);
      continue;
    }
    uint64_t n = std::min<uint64_t>(o.io_chunk, goal - done);
    off_t off = static_cast<off_t>(done % o.io_file_cap);
    ssize_t w = ::pwrite(fd->get(), buf.data(), n, off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      sh.add_error("io: " + sys_error("pwrite", path).message());
      return;
    }
    if (::fdatasync(fd->get()) != 0) {
      sh.add_error("io: " + sys_error("fdatasync", path).message());
      return;
    }
    // Written back, so the pages are clean and can be dropped: the cgroup is charged for page
    // cache, and the memory curve must not grow by what the I/O curve wrote.
    ::posix_fadvise(fd->get(), off, w, POSIX_FADV_DONTNEED);
    done += static_cast<uint64_t>(w);
    sh.io_done.store(done, std::memory_order_relaxed);
  }
}

// Running maxima of a sampled series, so that "the first time it reached 99% of its peak" can
// be answered at the end without keeping every sample.
class PeakTracker {
 public:
  void add(int64_t t_ms, uint64_t v) {
    if (records_.empty() || v > records_.back().second) records_.push_back({t_ms, v});
  }
  uint64_t peak() const { return records_.empty() ? 0 : records_.back().second; }
  int64_t first_at_fraction(double f) const {
    for (const auto& [t, v] : records_)
      if (static_cast<double>(v) >= f * static_cast<double>(peak())) return t;
    return -1;
  }

 private:
  std::vector<std::pair<int64_t, uint64_t>> records_;
};

double rusage_ms(const rusage& r) {
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000.0 +
         static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1000.0;
}

}  // namespace

Result<Achieved> run_segment(const Segment& s, const LoadOptions& o,
                             const std::atomic<bool>& stop) {
  if (s.points.empty()) return logic_error("run segment", "points: needs at least one point");
  const auto start = Clock::now();
  auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  };

  Achieved a;
  a.name = s.name;
  std::tie(a.target_peak_mem, a.target_peak_at_ms) = target_memory_peak(s);
  a.target_cpu_ms = target_cpu_ms(s);
  a.target_io_bytes = s.points.back().io_bytes;
  uint64_t max_cpu = 0;
  for (const auto& p : s.points) {
    a.target_peak_pids = std::max(a.target_peak_pids, p.pids);
    max_cpu = std::max(max_cpu, p.cpu_millicores);
  }

  // CPU is counted from here, so a caller that runs this in-process (tests) measures only it.
  rusage self0{}, kids0{};
  ::getrusage(RUSAGE_SELF, &self0);
  ::getrusage(RUSAGE_CHILDREN, &kids0);

  const int64_t control_wait0 = run_delay_ns();
  Shared sh;
  sh.cpu_millicores = s.points[0].cpu_millicores;
  a.cpu_cores_available = o.cores > 0 ? o.cores : available_cores();
  a.cpu_threads = static_cast<int>(std::min<uint64_t>((max_cpu + 999) / 1000,
                                                      static_cast<uint64_t>(a.cpu_cores_available)));
  a.cpu_capped = max_cpu > static_cast<uint64_t>(a.cpu_cores_available) * 1000;

  // Workers first, so that their stacks are part of the resident base the memory target
  // subtracts.
  std::vector<std::thread> workers;
  for (int i = 0; i < a.cpu_threads; ++i) workers.emplace_back(cpu_worker, i, a.cpu_threads, std::ref(sh));
  std::string io_path;
  bool made_workdir = false;
  if (a.target_io_bytes > 0) {
    if (::mkdir(s.workdir.c_str(), 0700) == 0) {
      made_workdir = true;
    } else if (errno != EEXIST) {
      sh.add_error("io: " + sys_error("mkdir workdir", s.workdir).message());
    }
    io_path = s.workdir + "/.sandgate-load-" + std::to_string(::getpid()) + ".io";
    workers.emplace_back(io_worker, io_path, std::cref(o), std::ref(sh));
  }
  const uint64_t own_tasks = 1 + workers.size();

  Fanout fanout;
  PeakTracker rss_peak;
  uint64_t peak_tasks = own_tasks;
  bool fanout_refused = false;

  MemoryHolder mem;
  a.base_rss_bytes = self_rss_bytes();
  if (a.target_peak_mem > a.base_rss_bytes) {
    auto r = MemoryHolder::reserve(a.target_peak_mem - a.base_rss_bytes);
    if (r.ok()) {
      mem = std::move(*r);
    } else {
      sh.add_error("memory: " + r.error().message());
    }
  }
  auto touch_goal = [&](uint64_t total) {
    return total > a.base_rss_bytes ? total - a.base_rss_bytes : 0;
  };
  // Touch rate (bytes/s) as measured, smoothed. It varies by two orders of magnitude: on a VM,
  // guest memory the host has not backed yet (never touched, or returned by free page
  // reporting) faults at 0.5-1.4 GB/s, recycled memory at ~20 GB/s, and which kind the next
  // pages are is unknown. So the plan uses half of what it measured, and never more than
  // max_plan_rate: a rise that runs slower than the last ones still lands on time, at the
  // price of a step becoming a ramp of at most delta / max_plan_rate.
  double touch_rate = o.initial_touch_rate;

  for (;;) {
    double now = elapsed_ms();
    if (stop.load() || now >= static_cast<double>(s.end_ms)) {
      a.interrupted = stop.load() && now < static_cast<double>(s.end_ms);
      break;
    }
    const SegmentPoint& p = s.points[point_at(s, static_cast<int64_t>(now))];
    sh.cpu_millicores.store(p.cpu_millicores, std::memory_order_relaxed);
    sh.io_goal.store(io_goal_at(s, now), std::memory_order_relaxed);

    uint64_t children = p.pids > own_tasks ? p.pids - own_tasks : 0;
    if (children != fanout.alive() && !(fanout_refused && children > fanout.alive())) {
      if (auto st = fanout.set(children); !st.ok()) {
        sh.add_error("pids: " + st.error().message());
        fanout_refused = true;  // not retried until the target falls: pids.max said no
      }
    }
    if (children < fanout.alive() || children == 0) fanout_refused = false;
    peak_tasks = std::max<uint64_t>(peak_tasks, own_tasks + fanout.alive());

    uint64_t target_now = p.mem_bytes;
    double plan_rate = std::min(kPlanRateShare * touch_rate, o.max_plan_rate);
    uint64_t planned = planned_memory_at(s, now, plan_rate, o.lookahead_ms, o.margin_ms);
    uint64_t want = touch_goal(planned);
    bool growing = false;
    if (want > mem.touched()) {
      // Behind the level in force: this growth is late already, and how long it takes is the
      // machine's page faults (less any wait for a CPU, counted in control_wait_ms).
      const bool behind = touch_goal(target_now) > mem.touched();
      const int64_t wait0 = behind ? run_delay_ns() : 0;
      auto t0 = Clock::now();
      uint64_t grown = mem.grow(want, o.grow_step);
      double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      if (behind)
        a.behind_touch_ms +=
            std::max(0.0, secs * 1e3 - static_cast<double>(run_delay_ns() - wait0) / 1e6);
      // Only chunks long enough to time say anything about the rate.
      // Quick to believe it got slower, slow to believe it got faster: the next pages may be
      // colder than the last ones.
      if (grown >= (1u << 20) && secs > 0) {
        double measured = static_cast<double>(grown) / secs;
        double alpha = measured < touch_rate ? 0.5 : 0.1;
        touch_rate = (1 - alpha) * touch_rate + alpha * measured;
      }
      growing = mem.touched() < std::min(want, mem.capacity());
    } else if (want < mem.touched()) {
      // While a rise is being prepared (the plan is above the level in force), a faster rate
      // measured meanwhile lowers the plan: keep what is touched up to the coming peak rather
      // than release memory that is needed again in a moment.
      uint64_t floor = planned > target_now
                           ? touch_goal(std::max(planned, upcoming_memory_peak(s, now, o.lookahead_ms)))
                           : want;
      if (floor < mem.touched()) {
        if (auto st = mem.shrink(floor); !st.ok()) sh.add_error("memory: " + st.error().message());
      }
    }
    a.touched_peak_bytes = std::max(a.touched_peak_bytes, mem.touched());
    rss_peak.add(static_cast<int64_t>(elapsed_ms()), self_rss_bytes());

    if (growing) continue;
    // Sleep to the next sample or the next point, whichever is first.
    size_t i = point_at(s, static_cast<int64_t>(now));
    double wake = std::min(now + static_cast<double>(o.sample_every_ms),
                           static_cast<double>(s.end_ms));
    if (i + 1 < s.points.size()) wake = std::min(wake, static_cast<double>(s.points[i + 1].t_ms));
    sleep_until(start + std::chrono::microseconds(static_cast<int64_t>(wake * 1000.0)));
  }

  a.wall_ms = static_cast<int64_t>(elapsed_ms());
  sh.finished = true;
  for (auto& t : workers) t.join();
  (void)fanout.set(0);  // SIGKILL + reap: their (tiny) CPU time joins RUSAGE_CHILDREN
  a.achieved_peak_pids = peak_tasks;
  a.achieved_io_bytes = sh.io_done.load();
  a.cpu_wait_ms = static_cast<double>(sh.cpu_wait_ns.load()) / 1e6;
  a.control_wait_ms = static_cast<double>(run_delay_ns() - control_wait0) / 1e6;
  if (!io_path.empty()) {
    if (::unlink(io_path.c_str()) != 0 && errno != ENOENT) {
      a.io_files_removed = false;
      sh.add_error("io: " + sys_error("unlink", io_path).message());
    }
    if (made_workdir) ::rmdir(s.workdir.c_str());  // only if empty: others' files stay
  }
  a.achieved_peak_mem = rss_peak.peak();
  if (a.target_peak_mem > 0) a.achieved_peak_at_ms = rss_peak.first_at_fraction(0.99);
  rusage self{}, kids{};
  ::getrusage(RUSAGE_SELF, &self);
  ::getrusage(RUSAGE_CHILDREN, &kids);
  a.achieved_cpu_ms =
      rusage_ms(self) - rusage_ms(self0) + rusage_ms(kids) - rusage_ms(kids0);
  a.errors = std::move(sh.errors);
  return a;
}

}  // namespace sandgate::workloads
