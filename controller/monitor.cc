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

Monitor::Monitor(CgroupBackend& backend, HostPaths paths, Duration interval)
    : backend_(backend), paths_(std::move(paths)), interval_(interval),
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
                    std::chrono::steady_clock::time_point start) {
  // The reader opens nothing until the monitor thread's first sample.
  auto reader = backend_.usage_reader(cg);
  {
    std::lock_guard<std::mutex> lock(mu_);
    watched_[id] = Watched{cg, ladder, std::move(trigger), start, std::move(reader), 0};
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
  std::lock_guard<std::mutex> lock(mu_);
  watched_.erase(id);
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
  for (auto& [w, u] : usages) {
    LadderInput in;
    in.now = std::chrono::duration_cast<Duration>(now - w->start);
    in.host_memory_psi = host_psi;
    in.largest_active_call = u.memory_current == largest;
    in.usage = std::move(u);
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
    bool triggered = false;
    if (r > 0) {
      if (fds[0].revents) {
        uint64_t v;
        (void)!::read(wake_.get(), &v, sizeof v);
      }
      for (size_t i = 1; i < fds.size(); ++i) {
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
    if (triggered || now >= next) {
      sample_all();
      next = now + interval_;
    } else if (idle) {
      next = now + interval_;
    }
  }
}

}  // namespace sandgate::controller
