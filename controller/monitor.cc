#include "controller/monitor.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <iterator>
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
      epoll_(::epoll_create1(EPOLL_CLOEXEC)),
      // A PSI trigger file always polls readable (DEFAULT_POLLMASK); only POLLPRI means it
      // fired (kernel/sched/psi.c psi_trigger_poll). A v1 pressure_level eventfd is POLLIN.
      trigger_events_(backend.features().psi_triggers ? EPOLLPRI : EPOLLIN) {
  // Without either the monitor cannot wait: say so at once rather than sample nothing.
  if (!wake_.valid() || !epoll_.valid())
    spdlog::error("monitor: no eventfd or epoll instance ({}): calls are not watched",
                  std::strerror(errno));
  struct epoll_event ev {};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  if (epoll_.valid() && ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) != 0)
    spdlog::error("monitor: epoll_ctl of its wake-up eventfd: {}", std::strerror(errno));
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

void Monitor::watch(uint64_t id, const Cgroup& cg, Ladder* ladder,
                    std::chrono::steady_clock::time_point start,
                    const std::optional<MemoryBudget>& budget, std::unique_ptr<UsageReader> reader,
                    uint64_t trigger) {
  // A reader of the monitor's own opens nothing until the monitor thread's first sample.
  if (!reader) reader = backend_.usage_reader(cg);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Watched w;
    w.cg = cg;
    w.ladder = ladder;
    w.start = start;
    w.reader = std::move(reader);
    w.trigger = trigger;
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

uint64_t Monitor::add_source(int fd, uint32_t events, Source source) {
  uint64_t token = next_token_++;
  struct epoll_event ev {};
  ev.events = events;
  ev.data.u64 = token;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    spdlog::debug("monitor: epoll_ctl: {}: sampled at each interval only", std::strerror(errno));
    return 0;
  }
  sources_[token] = std::move(source);
  return token;
}

void Monitor::drop_source(int fd, uint64_t& token) {
  if (token == 0) return;
  (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  sources_.erase(token);
  token = 0;
}

void Monitor::want_trigger(uint64_t key, const Cgroup& cg, Duration stall, Duration window) {
  // Nothing to do until a call of the run is watched, which wakes the monitor itself.
  UniqueFd old;  // closed outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  RunTrigger& t = triggers_[key];
  drop_source(t.fd.get(), t.token);
  old = std::move(t.fd);
  t = RunTrigger{};
  t.cg = cg;
  t.stall = stall;
  t.window = window;
}

void Monitor::remove_trigger(uint64_t key) {
  UniqueFd fd;  // declared before the lock: its close (a grace period) comes after the unlock
  std::lock_guard<std::mutex> lock(mu_);
  auto it = triggers_.find(key);
  if (it == triggers_.end()) return;
  drop_source(it->second.fd.get(), it->second.token);
  fd = std::move(it->second.fd);
  triggers_.erase(it);
}

std::optional<std::chrono::steady_clock::time_point> Monitor::make_due_triggers(
    std::chrono::steady_clock::time_point now) {
  std::optional<std::chrono::steady_clock::time_point> next;
  for (const auto& [id, w] : watched_) {
    if (w.trigger == 0) continue;
    auto it = triggers_.find(w.trigger);
    if (it == triggers_.end() || it->second.tried) continue;
    RunTrigger& t = it->second;
    if (const auto due = w.start + t.stall; now < due) {
      next = next ? std::min(*next, due) : due;
      continue;
    }
    t.tried = true;
    auto fd = backend_.memory_pressure_trigger(t.cg, t.stall, t.window);
    if (!fd.ok()) {
      spdlog::debug("monitor: no pressure trigger for {}: {}", t.cg.rel, fd.error().message());
      continue;
    }
    t.fd = std::move(fd).value();
    t.token = add_source(t.fd.get(), trigger_events_, Source{w.trigger, ""});
    ++triggers_made_;
  }
  return next;
}

std::unique_ptr<UsageReader> Monitor::unwatch(uint64_t id) {
  // Destroyed outside the lock (declared before it).
  std::unique_ptr<RunqMeter> meter;
  std::unique_ptr<NetMeter> net_meter;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = watched_.find(id);
  if (it == watched_.end()) return nullptr;
  meter = std::move(it->second.meter);
  net_meter = std::move(it->second.net_meter);
  // Read under mu_ only (sample_all): once out of the map it is the caller's alone.
  std::unique_ptr<UsageReader> reader = std::move(it->second.reader);
  if (!it->second.budget.empty()) {
    auto b = budgets_.find(it->second.budget);
    if (b != budgets_.end() && --b->second.refs == 0) {
      drop_source(b->second.wake.get(), b->second.wake_token);
      budgets_.erase(b);
    }
  }
  watched_.erase(it);
  return reader;
}

uint64_t Monitor::calls_charge(const std::string& ancestor) const {
  const std::string prefix = ancestor + "/";
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t sum = 0;
  for (const auto& [id, w] : watched_)
    if (w.cg.rel.compare(0, prefix.size(), prefix) == 0) sum += w.last_memory.value_or(0);
  return sum;
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
      // A call held to a CPU quota waits for its quota: its delay is not another call's doing.
      // The kernel's count of throttled periods says so, but on v1 it is refreshed by full reads
      // only (a squeezed hog's waits were once taken for a victim's, and the victim squeezed);
      // the ladder's own squeeze, over the window, says so at once.
      if (w->ladder && w->ladder->squeezed()) w->squeezed_at = now;
      const bool self_throttled = p.cpu_throttled_us > first.cpu_throttled_us ||
                                  (w->squeezed_at && *w->squeezed_at > now - runq_window_);
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

void Monitor::register_budget_wakes() {
  // Each budget's threshold eventfd is registered here, off the calls' path, when its first
  // call is watched (a cgroup.event_control write).
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, b] : budgets_) {
    if (b.budget.wake_at == 0 || b.wake_tried) continue;
    b.wake_tried = true;
    auto fd = backend_.memory_threshold_eventfd(b.budget.cg, b.budget.wake_at);
    if (!fd.ok()) {
      spdlog::debug("monitor: budget {}: sampled at each interval only: {}", key,
                    fd.error().message());
      continue;
    }
    b.wake = std::move(fd).value();
    b.wake_token = add_source(b.wake.get(), EPOLLIN, Source{std::nullopt, key});
  }
}

void Monitor::on_event(uint64_t token, uint32_t events, bool& triggered, bool& budget_crossed,
                       std::vector<UniqueFd>& hung_up) {
  auto it = sources_.find(token);
  if (it == sources_.end()) return;  // dropped since epoll_wait returned
  const Source source = it->second;
  if (!source.budget.empty()) {
    auto b = budgets_.find(source.budget);
    if (b == budgets_.end()) return;
    if (events & EPOLLIN) {
      budget_crossed = true;
      uint64_t v;
      (void)!::read(b->second.wake.get(), &v, sizeof v);
    } else {
      drop_source(b->second.wake.get(), b->second.wake_token);
      b->second.wake.reset();
    }
    return;
  }
  auto t = triggers_.find(*source.run_trigger);
  if (t == triggers_.end()) return;
  if (events & (EPOLLERR | EPOLLHUP)) {
    // The cgroup went away under the trigger: stop polling it, or epoll_wait would spin.
    drop_source(t->second.fd.get(), t->second.token);
    hung_up.push_back(std::move(t->second.fd));
    return;
  }
  if (events & trigger_events_) {
    triggered = true;
    // A v1 eventfd must be drained; a PSI trigger fd has nothing to read.
    uint64_t v;
    (void)!::read(t->second.fd.get(), &v, sizeof v);
  }
}

void Monitor::loop() {
  auto next = std::chrono::steady_clock::now();
  struct epoll_event events[16];
  while (!stop_) {
    register_budget_wakes();
    bool idle;
    std::optional<std::chrono::steady_clock::time_point> trigger_due;
    {
      std::lock_guard<std::mutex> lock(mu_);
      idle = watched_.empty();
      trigger_due = make_due_triggers(std::chrono::steady_clock::now());
    }
    int timeout_ms = -1;
    if (!idle) {
      // Awake for the next sample, or for the next run trigger to make if that comes first.
      const auto wake_at = trigger_due ? std::min(next, *trigger_due) : next;
      auto left = std::chrono::duration_cast<std::chrono::microseconds>(
          wake_at - std::chrono::steady_clock::now());
      timeout_ms = static_cast<int>(std::max<int64_t>(0, (left.count() + 999) / 1000));
    }
    int n = ::epoll_wait(epoll_.get(), events, std::size(events), timeout_ms);
    if (stop_) break;
    if (n < 0 && errno != EINTR) {
      // Not expected (EBADF without an epoll instance): sample at each interval regardless.
      n = 0;
      if (timeout_ms != 0) std::this_thread::sleep_for(interval_);
    }
    bool triggered = false, budget_crossed = false;
    std::vector<UniqueFd> hung_up;  // closed at the end of this turn, without mu_ held
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == 0) {
        uint64_t v;
        (void)!::read(wake_.get(), &v, sizeof v);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      on_event(events[i].data.u64, events[i].events, triggered, budget_crossed, hung_up);
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
