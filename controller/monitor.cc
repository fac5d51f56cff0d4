#include "controller/monitor.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <vector>

#include "core/host_features.h"
#include "core/log.h"

namespace sandgate::controller {

std::optional<double> host_memory_pressure(const HostPaths& paths) {
  auto text = read_file(paths.proc + "/pressure/memory", 4096);
  if (!text.ok()) return std::nullopt;
  auto p = parse_pressure(*text);
  if (!p.ok()) return std::nullopt;
  return p->some.avg10;
}

std::optional<double> rate_per_second(std::chrono::steady_clock::time_point from,
                                      uint64_t from_value, std::chrono::steady_clock::time_point to,
                                      uint64_t to_value, Duration window) {
  auto span = to - from;
  if (span <= Duration(0) || span * 2 < window || to_value < from_value) return std::nullopt;
  double seconds = std::chrono::duration<double>(span).count();
  return static_cast<double>(to_value - from_value) / seconds;
}

Monitor::Monitor(CgroupBackend& backend, HostPaths paths, Duration interval, Duration runq_window,
                 Duration net_window)
    : backend_(backend),
      paths_(std::move(paths)),
      interval_(interval),
      runq_window_(runq_window),
      net_window_(net_window),
      wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      // A PSI trigger file always polls readable (DEFAULT_POLLMASK); only POLLPRI means it
      // fired (kernel/sched/psi.c psi_trigger_poll). A v1 pressure_level eventfd is POLLIN.
      trigger_events_(backend.features().psi_triggers ? POLLPRI : POLLIN) {
  thread_ = std::thread([this] { loop(); });
}

Monitor::~Monitor() {
  stop_ = true;
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
  thread_.join();
}

std::optional<std::chrono::nanoseconds> Monitor::cpu_time() const {
  clockid_t clock;
  // const_cast: native_handle() is not const, and reading the clock id changes nothing.
  if (::pthread_getcpuclockid(const_cast<std::thread&>(thread_).native_handle(), &clock) != 0)
    return std::nullopt;
  struct timespec ts;
  if (::clock_gettime(clock, &ts) != 0) return std::nullopt;
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

void Monitor::watch(uint64_t id, const Cgroup& cg, Ladder* ladder, UniqueFd trigger,
                    std::chrono::steady_clock::time_point start,
                    const std::optional<MemoryBudget>& budget) {
  // The reader opens nothing until the monitor thread's first sample.
  auto reader = backend_.usage_reader(cg);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Watched w;
    w.cg = cg;
    w.ladder = ladder;
    w.trigger = std::move(trigger);
    w.start = start;
    w.reader = std::move(reader);
    if (budget) {
      w.budget = budget->cg.rel;
      Budget& b = budgets_[w.budget];
      if (b.refs++ == 0) {
        b.budget = *budget;
        b.reader = backend_.usage_reader(budget->cg);
      }
    }
    watched_[id] = std::move(w);
  }
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

void Monitor::add_trigger(uint64_t key, UniqueFd trigger) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    triggers_[key] = std::move(trigger);
  }
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

void Monitor::remove_trigger(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  triggers_.erase(key);
}

void Monitor::unwatch(uint64_t id) {
  // Destroyed outside the lock (declared before it).
  std::unique_ptr<RunqMeter> meter;
  std::unique_ptr<NetMeter> net_meter;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = watched_.find(id);
  if (it == watched_.end()) return;
  meter = std::move(it->second.meter);
  net_meter = std::move(it->second.net_meter);
  if (!it->second.budget.empty()) {
    auto b = budgets_.find(it->second.budget);
    if (b != budgets_.end() && --b->second.refs == 0) budgets_.erase(b);
  }
  watched_.erase(it);
}

void Monitor::set_net_meter(uint64_t id, std::unique_ptr<NetMeter> meter) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = watched_.find(id);
  if (it != watched_.end()) it->second.net_meter = std::move(meter);
}

std::optional<NetSignal> Monitor::net_signal(Watched& w, const Usage& u,
                                             std::chrono::steady_clock::time_point now) {
  if (net_window_ <= Duration(0) || !w.net_meter) return std::nullopt;
  auto totals = w.net_meter->read();
  if (!totals) return std::nullopt;  // not readable now: this sample adds no point
  auto& h = w.net_history;
  h.push_back({now, u.cpu_usage_us, *totals});
  // Keep one point at or before the window's start, so the rate spans the whole window.
  while (h.size() > 2 && h[1].at <= now - net_window_) h.pop_front();
  const NetPoint& first = h.front();
  auto out = rate_per_second(first.at, first.net.bytes_out, now, totals->bytes_out, net_window_);
  auto in = rate_per_second(first.at, first.net.bytes_in, now, totals->bytes_in, net_window_);
  auto cpu = rate_per_second(first.at, first.cpu_us, now, u.cpu_usage_us, net_window_);
  if (!out || !in) return std::nullopt;
  return NetSignal{*out, *in, cpu.value_or(0) / 1e6};
}

void Monitor::set_runq_meter(uint64_t id, std::unique_ptr<RunqMeter> meter) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = watched_.find(id);
  if (it != watched_.end()) it->second.meter = std::move(meter);
}

std::optional<double> Monitor::read_host_psi() {
  const std::string path = paths_.proc + "/pressure/memory";
  if (!host_psi_.valid()) {
    auto fd = open_fd(path, O_RDONLY | O_CLOEXEC);
    if (!fd.ok()) return std::nullopt;  // no PSI
    host_psi_ = std::move(fd).value();
  }
  char buf[4096];
  ssize_t n = ::pread(host_psi_.get(), buf, sizeof buf, 0);
  if (n < 0) {
    host_psi_.reset();
    return std::nullopt;
  }
  auto p = parse_pressure(std::string_view(buf, static_cast<size_t>(n)));
  if (!p.ok()) return std::nullopt;
  return p->some.avg10;
}

void Monitor::sample_all() {
  auto host_psi = read_host_psi();
  auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  // Read every call first, so the ladder knows which one is the largest.
  std::vector<std::pair<Watched*, Usage>> usages;
  usages.reserve(watched_.size());
  uint64_t largest = 0;
  for (auto& [id, w] : watched_) {
    bool full = w.reads++ % kFullReadEvery == 0;
    auto u = w.reader->read(full);
    if (!u.ok()) {
      // The call may be ending right now: a vanished cgroup is normal (expect the races).
      spdlog::debug("monitor: {}: {}", w.cg.rel, u.error().message());
      continue;
    }
    largest = std::max(largest, u->memory_current);
    usages.emplace_back(&w, std::move(u).value());
  }
  // The budget rule's view: each budget's charge, read once, and its largest call.
  struct BudgetRead {
    std::optional<uint64_t> used;
    uint64_t largest = 0;
  };
  std::map<std::string, BudgetRead> budget_reads;
  for (auto& [key, b] : budgets_) {
    auto u = b.reader->read(false);
    if (u.ok())
      budget_reads[key].used = u->memory_current;
    else
      spdlog::debug("monitor: budget {}: {}", key, u.error().message());
  }
  for (auto& [w, u] : usages)
    if (!w->budget.empty())
      budget_reads[w->budget].largest = std::max(budget_reads[w->budget].largest, u.memory_current);
  // The run-queue rule: every call's CPU rate and (measured calls') run-queue delay rate over
  // the window, from the points kept for it.
  struct Rates {
    std::optional<double> cpu_cores, runq_ms_per_s;
  };
  // cpu_throttled_us is refreshed by full reads only on some layouts (v1 cpu.stat); between
  // them it keeps its last value, so a rise over the window still shows.
  std::vector<Rates> rates(usages.size());
  if (runq_window_ > Duration(0)) {
    for (size_t i = 0; i < usages.size(); ++i) {
      auto& [w, u] = usages[i];
      RunqPoint p{now, u.cpu_usage_us, u.cpu_throttled_us, std::nullopt};
      if (w->meter)
        if (auto r = w->meter->read()) p.runq_ns = r->delay_ns;
      auto& h = w->history;
      h.push_back(p);
      // Keep one point at or before the window's start, so the rate spans the whole window.
      while (h.size() > 2 && h[1].at <= now - runq_window_) h.pop_front();
      const RunqPoint& first = h.front();
      if (auto c = rate_per_second(first.at, first.cpu_us, now, p.cpu_us, runq_window_))
        rates[i].cpu_cores = *c / 1e6;
      const bool self_throttled = p.cpu_throttled_us > first.cpu_throttled_us;
      if (first.runq_ns && p.runq_ns && !self_throttled)
        if (auto q = rate_per_second(first.at, *first.runq_ns, now, *p.runq_ns, runq_window_))
          rates[i].runq_ms_per_s = *q / 1e6;
    }
  }
  double most_cpu = 0;
  for (const auto& r : rates) most_cpu = std::max(most_cpu, r.cpu_cores.value_or(0));
  for (size_t i = 0; i < usages.size(); ++i) {
    auto& [w, u] = usages[i];
    LadderInput in;
    in.now = std::chrono::duration_cast<Duration>(now - w->start);
    in.host_memory_psi = host_psi;
    in.largest_active_call = u.memory_current == largest;
    in.net = net_signal(*w, u, now);
    if (!w->budget.empty()) {
      const BudgetRead& r = budget_reads[w->budget];
      if (r.used) {
        const MemoryBudget& b = budgets_.at(w->budget).budget;
        // A call's cgroup starts with nothing charged: its first sample compares against 0
        // (with a long interval, or woken by the budget, that sample may be the one that sees
        // the budget full).
        in.budget = BudgetSignal{w->budget, *r.used, b.limit, u.memory_current == r.largest,
                                 u.memory_current > w->last_memory.value_or(0)};
      }
    }
    w->last_memory = u.memory_current;
    in.usage = std::move(u);
    if (rates[i].cpu_cores) {
      RunqSignal sig;
      sig.cpu_cores = *rates[i].cpu_cores;
      sig.most_cpu = sig.cpu_cores >= most_cpu;
      for (size_t j = 0; j < usages.size(); ++j) {
        if (j == i || !rates[j].runq_ms_per_s || *rates[j].runq_ms_per_s <= sig.others_ms_per_s)
          continue;
        sig.others_ms_per_s = *rates[j].runq_ms_per_s;
        sig.worst_call = usages[j].first->cg.rel;
      }
      in.runq = std::move(sig);
    }
    w->ladder->step(in);
  }
  samples_ += usages.size();
}

void Monitor::loop() {
  auto next = std::chrono::steady_clock::now();
  std::vector<struct pollfd> fds;
  while (!stop_) {
    fds.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [id, w] : watched_)
        if (w.trigger.valid()) fds.push_back({w.trigger.get(), trigger_events_, 0});
      for (auto& [key, t] : triggers_)
        if (t.valid()) fds.push_back({t.get(), trigger_events_, 0});
    }
    // Last in the set: each budget's threshold eventfd, registered here, off the calls' path,
    // when its first call is watched (a cgroup.event_control write).
    const size_t budgets_from = fds.size();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [key, b] : budgets_) {
        if (b.budget.wake_at > 0 && !b.wake_tried) {
          b.wake_tried = true;
          auto fd = backend_.memory_threshold_eventfd(b.budget.cg, b.budget.wake_at);
          if (fd.ok())
            b.wake = std::move(fd).value();
          else
            spdlog::debug("monitor: budget {}: sampled at each interval only: {}", key,
                          fd.error().message());
        }
        if (b.wake.valid()) fds.push_back({b.wake.get(), POLLIN, 0});
      }
    }
    bool idle;
    {
      std::lock_guard<std::mutex> lock(mu_);
      idle = watched_.empty();
    }
    int timeout_ms = -1;
    if (!idle) {
      auto left = std::chrono::duration_cast<std::chrono::microseconds>(next - std::chrono::steady_clock::now());
      timeout_ms = static_cast<int>(std::max<int64_t>(0, (left.count() + 999) / 1000));
    }
    int r = ::poll(fds.data(), fds.size(), timeout_ms);
    if (stop_) break;
    bool triggered = false, budget_crossed = false;
    if (r > 0) {
      if (fds[0].revents) {
        uint64_t v;
        (void)!::read(wake_.get(), &v, sizeof v);
      }
      for (size_t i = budgets_from; i < fds.size(); ++i) {
        if (fds[i].revents & POLLIN) {
          budget_crossed = true;
          uint64_t v;
          (void)!::read(fds[i].fd, &v, sizeof v);
        } else if (fds[i].revents) {
          std::lock_guard<std::mutex> lock(mu_);
          for (auto& [key, b] : budgets_)
            if (b.wake.get() == fds[i].fd) b.wake.reset();
        }
      }
      for (size_t i = 1; i < budgets_from; ++i) {
        if (fds[i].revents & (POLLERR | POLLHUP | POLLNVAL)) {
          // The cgroup went away under the trigger: stop polling it, or poll would spin.
          std::lock_guard<std::mutex> lock(mu_);
          for (auto& [id, w] : watched_)
            if (w.trigger.get() == fds[i].fd) w.trigger.reset();
          for (auto& [key, t] : triggers_)
            if (t.get() == fds[i].fd) t.reset();
          continue;
        }
        if (fds[i].revents & trigger_events_) {
          triggered = true;
          // A v1 eventfd must be drained; a PSI trigger fd has nothing to read.
          uint64_t v;
          (void)!::read(fds[i].fd, &v, sizeof v);
        }
      }
    }
    auto now = std::chrono::steady_clock::now();
    if (triggered) ++wakeups_;
    if (budget_crossed) ++budget_wakeups_;
    if (triggered || budget_crossed || now >= next) {
      sample_all();
      next = now + interval_;
    } else if (idle) {
      next = now + interval_;
    }
  }
}

}  // namespace sandgate::controller
