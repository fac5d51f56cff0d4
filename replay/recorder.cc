#include "replay/recorder.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "core/fd.h"
#include "core/log.h"

namespace sandgate::replay {
namespace {

std::optional<uint64_t> to_u64(std::string_view s) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::vector<std::string_view> split_ws(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

template <typename F>
void for_each_line(std::string_view text, F f) {
  while (!text.empty()) {
    size_t nl = text.find('\n');
    f(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
}

std::optional<std::string> read_small(const std::string& path) {
  auto text = read_file(path, 1 << 20);
  if (!text.ok()) return std::nullopt;
  return std::move(text).value();
}

}  // namespace

// Documentation/admin-guide/cgroup-v2.rst, "io.stat": one line per device,
// "8:16 rbytes=1459200 wbytes=314773504 rios=192 wios=353 dbytes=0 dios=0".
std::optional<uint64_t> parse_io_stat_v2(std::string_view text) {
  uint64_t total = 0;
  bool bad = false;
  for_each_line(text, [&](std::string_view line) {
    auto fields = split_ws(line);
    for (size_t i = 1; i < fields.size(); ++i) {
      auto eq = fields[i].find('=');
      if (eq == std::string_view::npos) continue;
      auto key = fields[i].substr(0, eq);
      if (key != "rbytes" && key != "wbytes") continue;
      auto v = to_u64(fields[i].substr(eq + 1));
      if (!v) bad = true;
      else total += *v;
    }
  });
  if (bad) return std::nullopt;
  return total;
}

// Documentation/admin-guide/cgroup-v1/blkio-controller.rst: "MAJ:MIN Read N" ... and a last
// "Total N" line that sums every device and operation.
std::optional<uint64_t> parse_blkio_service_bytes(std::string_view text) {
  uint64_t read_write = 0;
  std::optional<uint64_t> total;
  for_each_line(text, [&](std::string_view line) {
    auto fields = split_ws(line);
    if (fields.size() == 2 && fields[0] == "Total") total = to_u64(fields[1]);
    if (fields.size() == 3 && (fields[1] == "Read" || fields[1] == "Write"))
      if (auto v = to_u64(fields[2])) read_write += *v;
  });
  // "Total" also counts discards on newer kernels; Read + Write is what the trace means.
  if (read_write > 0 || total) return read_write;
  return std::nullopt;
}

std::optional<uint64_t> read_io_bytes(const controller::Cgroup& cg) {
  if (auto it = cg.dirs.find("unified"); it != cg.dirs.end())
    if (auto text = read_small(it->second + "/io.stat")) return parse_io_stat_v2(*text);
  if (auto it = cg.dirs.find("blkio"); it != cg.dirs.end())
    if (auto text = read_small(it->second + "/blkio.throttle.io_service_bytes_recursive"))
      return parse_blkio_service_bytes(*text);
  return std::nullopt;
}

uint64_t cpu_millicores(uint64_t usage_delta_us, Duration wall) {
  auto wall_us = std::chrono::duration_cast<std::chrono::microseconds>(wall).count();
  if (wall_us <= 0) return 0;
  return (usage_delta_us * 1000 + static_cast<uint64_t>(wall_us) / 2) / static_cast<uint64_t>(wall_us);
}

std::string join_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                   "0123456789-_./=:,+@%") == std::string::npos;
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) {
      if (c == '\'') out += "'\\''";
      else out += c;
    }
    out += '\'';
  }
  return out;
}

Recorder::Recorder(controller::CgroupBackend& backend, controller::Cgroup cg, RecorderOptions options)
    : backend_(backend), cg_(std::move(cg)), options_(std::move(options)) {
  start_ = std::chrono::steady_clock::now();
  trace_.header = options_.header;
  trace_.header.interval_ms = std::max<int64_t>(
      1, std::chrono::duration_cast<std::chrono::milliseconds>(options_.interval).count());
  reader_ = backend_.usage_reader(cg_);
  // The CPU baseline for the first interval's delta.
  if (auto u = reader_->read(true); u.ok()) {
    last_cpu_us_ = u->cpu_usage_us;
    last_cpu_at_ = std::chrono::steady_clock::now();
    have_cpu_ = true;
  }
  thread_ = std::thread([this] { loop(); });
}

Recorder::~Recorder() {
  if (!finished_) (void)finish();
}

int64_t Recorder::now_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start_)
      .count();
}

std::string Recorder::begin_call(const std::string& intent, const std::string& tool,
                                 const std::string& command) {
  std::lock_guard lock(mu_);
  CallEvent c;
  c.id = "c" + std::to_string(trace_.calls.size() + 1);
  c.intent = intent;
  c.tool = tool;
  c.command = command;
  c.start_ms = now_ms();
  c.end_ms = c.start_ms;
  trace_.calls.push_back(c);
  open_.push_back(trace_.calls.size() - 1);
  return c.id;
}

void Recorder::end_call(const std::string& id, std::optional<CallObserved> observed) {
  std::lock_guard lock(mu_);
  for (auto it = open_.begin(); it != open_.end(); ++it) {
    if (trace_.calls[*it].id != id) continue;
    trace_.calls[*it].end_ms = std::max(trace_.calls[*it].start_ms, now_ms());
    trace_.calls[*it].observed = std::move(observed);
    open_.erase(it);
    return;
  }
}

RecorderProgress Recorder::progress() const {
  std::lock_guard lock(mu_);
  RecorderProgress p;
  p.elapsed = std::chrono::steady_clock::now() - start_;
  p.calls = trace_.calls.size();
  p.samples = trace_.samples.size();
  if (!trace_.samples.empty()) p.mem_bytes = trace_.samples.back().mem_bytes;
  if (!open_.empty()) p.open_call = trace_.calls[open_.back()].id;
  return p;
}

void Recorder::take_sample() {
  // The sample belongs to the call open when the read starts, and is timed then. On a busy host
  // this thread can stall for tens of milliseconds between the read and the lock below; a call
  // that ends in that gap must still own what the read saw (its exit, its peak), or the memory
  // of a burst shows up between calls.
  std::optional<std::string> call;
  std::chrono::steady_clock::time_point at;
  {
    std::lock_guard lock(mu_);
    at = std::chrono::steady_clock::now();
    if (!open_.empty()) call = trace_.calls[open_.back()].id;
  }
  auto usage = reader_->read(true);
  if (!usage.ok()) {
    spdlog::debug("record: cannot read {}: {}", cg_.rel, usage.error().message());
    return;
  }
  std::optional<uint64_t> io = read_io_bytes(cg_);
  std::lock_guard lock(mu_);
  Sample s;
  s.t_ms = std::chrono::duration_cast<std::chrono::milliseconds>(at - start_).count();
  // Samples must be strictly increasing in time (the reader refuses equal times).
  if (!trace_.samples.empty() && s.t_ms <= trace_.samples.back().t_ms) return;
  s.mem_bytes = usage->memory_current;
  s.pids = usage->pids_current;
  if (have_cpu_ && usage->cpu_usage_us >= last_cpu_us_ && at > last_cpu_at_)
    s.cpu_millicores = cpu_millicores(usage->cpu_usage_us - last_cpu_us_, at - last_cpu_at_);
  last_cpu_us_ = usage->cpu_usage_us;
  last_cpu_at_ = at;
  have_cpu_ = true;
  // Cumulative: never let a counter that could not be read this time go backwards.
  uint64_t prev_io = trace_.samples.empty() ? 0 : trace_.samples.back().io_bytes;
  s.io_bytes = std::max(prev_io, io.value_or(prev_io));
  s.call = std::move(call);
  trace_.samples.push_back(std::move(s));
}

void Recorder::loop() {
  auto next = std::chrono::steady_clock::now() + options_.interval;
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (wake_.wait_until(lock, next, [this] { return stop_; })) break;
    lock.unlock();
    take_sample();
    lock.lock();
    next += options_.interval;
    // Fell behind (a slow read, a busy host): skip the missed ticks, do not burst to catch up.
    auto now = std::chrono::steady_clock::now();
    if (next < now) next = now + options_.interval;
  }
}

Trace Recorder::finish() {
  {
    std::lock_guard lock(mu_);
    if (finished_) return trace_;
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  take_sample();
  std::lock_guard lock(mu_);
  int64_t now = now_ms();
  for (size_t i : open_) trace_.calls[i].end_ms = std::max(trace_.calls[i].start_ms, now);
  open_.clear();
  std::stable_sort(trace_.calls.begin(), trace_.calls.end(),
                   [](const CallEvent& a, const CallEvent& b) { return a.start_ms < b.start_ms; });
  finished_ = true;
  return trace_;
}

}  // namespace sandgate::replay
