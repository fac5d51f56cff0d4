#include "workloads/hold.h"

#include <poll.h>
#include <sys/inotify.h>
#include <sys/sysinfo.h>

#include <algorithm>
#include <chrono>

#include "core/fd.h"
#include "workloads/memory.h"

namespace sandgate::workloads {

Result<HoldLevel> parse_hold_level(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  if (text == "stop") return HoldLevel{true, 0};
  auto b = parse_bytes(text);
  if (!b.ok())
    return logic_error("parse hold level",
                       "expected a byte count (\"104857600\", \"100MiB\") or \"stop\", got '" +
                           std::string(text.substr(0, 40)) + "'");
  return HoldLevel{false, b->value};
}

Result<HoldLevel> read_hold_level(const std::string& path) {
  SG_ASSIGN_OR_RETURN(std::string text, read_file(path, 4096));
  auto level = parse_hold_level(text);
  if (!level.ok()) {
    Error e = std::move(level).error();
    e.path = path;
    return e;
  }
  return level;
}

Result<Achieved> run_hold(const HoldOptions& o, const std::atomic<bool>& stop) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  Achieved a;
  a.name = "hold";
  a.base_rss_bytes = self_rss_bytes();

  HoldLevel level{false, o.mem};
  UniqueFd watch;
  if (!o.follow.empty()) {
    SG_ASSIGN_OR_RETURN(level, read_hold_level(o.follow));
    // Watch the directory, not the file: a writer that replaces the file by rename (the safe
    // way to update it) leaves a watch on the old inode silent.
    std::string dir = o.follow.find('/') == std::string::npos
                          ? "."
                          : o.follow.substr(0, std::max<size_t>(1, o.follow.rfind('/')));
    watch = UniqueFd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    if (watch.valid() &&
        ::inotify_add_watch(watch.get(), dir.c_str(),
                            IN_CLOSE_WRITE | IN_MOVED_TO | IN_MODIFY | IN_CREATE) < 0) {
      watch.reset();  // polling every poll_ms still follows it
    }
  }

  // Address space for any level up to the machine's RAM; nothing is charged until touched.
  struct sysinfo si{};
  uint64_t ram = ::sysinfo(&si) == 0 ? static_cast<uint64_t>(si.totalram) * si.mem_unit : 0;
  SG_ASSIGN_OR_RETURN(MemoryHolder mem, MemoryHolder::reserve(std::max<uint64_t>(ram, level.bytes)));

  bool reported_bad_file = false;
  auto elapsed_ms = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  };
  while (!level.stop && !stop.load()) {
    if (o.limit && Clock::now() - start >= *o.limit) break;
    a.target_peak_mem = std::max(a.target_peak_mem, level.bytes);
    uint64_t goal = level.bytes > a.base_rss_bytes ? level.bytes - a.base_rss_bytes : 0;
    if (goal > mem.touched()) {
      while (mem.touched() < std::min(goal, mem.capacity()) && !stop.load())
        mem.grow(goal, 16 << 20);
    } else if (goal < mem.touched()) {
      if (auto st = mem.shrink(goal); !st.ok()) a.errors.push_back("memory: " + st.error().message());
    }
    a.touched_peak_bytes = std::max(a.touched_peak_bytes, mem.touched());
    uint64_t rss = self_rss_bytes();
    if (rss > a.achieved_peak_mem) {
      a.achieved_peak_mem = rss;
      a.achieved_peak_at_ms = elapsed_ms();
    }

    int timeout = static_cast<int>(o.poll_ms);
    if (o.limit) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*o.limit - (Clock::now() - start));
      timeout = static_cast<int>(std::clamp<int64_t>(left.count(), 0, o.poll_ms));
    }
    if (watch.valid()) {
      pollfd pfd{watch.get(), POLLIN, 0};
      if (::poll(&pfd, 1, timeout) > 0) {
        char buf[4096];
        while (::read(watch.get(), buf, sizeof(buf)) > 0) {
        }
      }
    } else {
      ::poll(nullptr, 0, timeout);
    }
    if (!o.follow.empty()) {
      auto next = read_hold_level(o.follow);
      if (next.ok()) {
        level = *next;
      } else if (!reported_bad_file) {
        // A writer that truncates then writes can be caught in between: keep the last level.
        a.errors.push_back("hold: " + next.error().message() + " (keeping the last level)");
        reported_bad_file = true;
      }
    }
  }
  a.interrupted = stop.load();
  a.wall_ms = elapsed_ms();
  return a;
}

}  // namespace sandgate::workloads
