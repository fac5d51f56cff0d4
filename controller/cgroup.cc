#include "controller/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <set>
#include <thread>

#include "controller/cgroup_hybrid.h"
#include "controller/cgroup_internal.h"
#include "controller/cgroup_v1.h"
#include "controller/cgroup_v2.h"
#include "core/log.h"
#include "core/strings.h"

namespace sandgate::controller {

Result<std::map<std::string, uint64_t>> parse_flat_keyed(std::string_view text) {
  std::map<std::string, uint64_t> out;
  int number = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++number;
    if (line.empty()) continue;
    auto bad = [&](const std::string& why) {
      return logic_error("parse flat-keyed file",
                         "line " + std::to_string(number) + " '" + std::string(line) + "': " + why);
    };
    size_t sp = line.find(' ');
    if (sp == std::string_view::npos || sp == 0) return bad("expected 'key value'");
    std::string_view key = line.substr(0, sp), value = line.substr(sp + 1);
    if (value.empty() || value.find(' ') != std::string_view::npos)
      return bad("expected one value after the key");
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc() || end != value.data() + value.size())
      return bad("the value is not an unsigned number");
    if (!out.emplace(std::string(key), v).second) return bad("the key appears twice");
  }
  return out;
}

std::vector<std::string> describe(const CgroupFeatures& f) {
  auto yes_no = [](bool b, const std::string& yes, const std::string& no) {
    return b ? "yes (" + yes + ")" : "no (" + no + ")";
  };
  return {
      "memory.high: " + yes_no(f.memory_high, "memory.high throttles and reclaims above it",
                               "v1 has none; only the hard limit applies"),
      "memory peak: " + yes_no(f.memory_peak, "kernel-kept high-water mark",
                               "memory.peak needs Linux 5.19; peaks are sampled only"),
      "per-cgroup PSI: " + yes_no(f.psi, "memory.pressure, cpu.pressure",
                                  "no cgroup2 pressure files (v1, or a kernel without PSI)"),
      "pressure triggers: " + yes_no(f.psi_triggers, "PSI triggers, poll POLLPRI",
                                     "v1 memory.pressure_level eventfd instead"),
      "freeze: " + yes_no(f.freeze, "cgroup.freeze or the v1 freezer",
                          "neither cgroup.freeze nor a v1 freezer hierarchy"),
      "atomic kill: " + yes_no(f.atomic_kill, "cgroup.kill", "emulated as freeze + SIGKILL + thaw"),
      "io limits: " + yes_no(f.io_limits, "io.max or blkio.throttle.*_bps_device",
                             "no cgroup2 io controller and no v1 blkio hierarchy"),
  };
}

namespace {

// The default reader: read_usage every time (fakes, and any backend without its own).
class ReadUsageEachTime final : public UsageReader {
 public:
  ReadUsageEachTime(const CgroupBackend& backend, Cgroup cg)
      : backend_(backend), cg_(std::move(cg)) {}
  Result<Usage> read(bool) override { return backend_.read_usage(cg_); }

 private:
  const CgroupBackend& backend_;
  Cgroup cg_;
};

}  // namespace

Result<UniqueFd> CgroupBackend::memory_threshold_eventfd(const Cgroup& cg, uint64_t) {
  return sys_error(EOPNOTSUPP, "memory threshold",
                   cg.rel + ": this layout has no memory usage threshold notification");
}

Result<MemoryRoom> CgroupBackend::memory_room(const Cgroup& cg, bool with_reclaimable) const {
  // v1's "no limit" is PAGE_COUNTER_MAX pages, rounded down to a page: anything this large is
  // none.
  constexpr uint64_t kV1Unlimited = uint64_t{1} << 62;
  const bool v1 = cg.dirs.count("memory") != 0;
  auto dir = cg.dirs.find(v1 ? "memory" : "unified");
  if (dir == cg.dirs.end())
    return logic_error("memory room", cg.rel + ": in no hierarchy with a memory controller");
  auto read = [&](const char* name) {
    return std::move(read_file(dir->second + "/" + name, 1 << 16)).context("memory room");
  };
  MemoryRoom room;
  SG_ASSIGN_OR_RETURN(std::string limit, read(v1 ? "memory.limit_in_bytes" : "memory.max"));
  if (!(!v1 && limit.rfind("max", 0) == 0)) {
    SG_ASSIGN_OR_RETURN(uint64_t l, cgroup_detail::parse_u64(limit));
    if (!(v1 && l >= kV1Unlimited)) room.limit = l;
  }
  SG_ASSIGN_OR_RETURN(std::string charged, read(v1 ? "memory.usage_in_bytes" : "memory.current"));
  SG_ASSIGN_OR_RETURN(room.charged, cgroup_detail::parse_u64(charged));
  if (with_reclaimable) {
    SG_ASSIGN_OR_RETURN(std::string stat, read("memory.stat"));
    // v1's total_* keys count the whole subtree, as usage_in_bytes does; v2's keys always do.
    uint64_t inactive = 0, active = 0, mapped = 0;
    SG_TRY(cgroup_detail::parse_flat_keyed_into(
        stat, {{v1 ? "total_inactive_file" : "inactive_file", &inactive},
               {v1 ? "total_active_file" : "active_file", &active},
               {v1 ? "total_mapped_file" : "file_mapped", &mapped}}));
    room.reclaimable = inactive + active - std::min(inactive + active, mapped);
  }
  return room;
}

Status CgroupBackend::attach(const Cgroup& cg, pid_t pid) {
  for (const auto& dir : placement(cg).cgroup_dirs)
    SG_TRY(std::move(write_file(dir + "/cgroup.procs", std::to_string(pid))).context("attach"));
  return {};
}

std::unique_ptr<UsageReader> CgroupBackend::usage_reader(const Cgroup& cg) const {
  return std::make_unique<ReadUsageEachTime>(*this, cg);
}

Result<std::unique_ptr<CgroupBackend>> make_cgroup_backend(const CgroupLayout& layout) {
  auto kernel = cgroup_detail::running_kernel();
  switch (layout.kind) {
    case CgroupLayoutKind::kV2:
      return std::unique_ptr<CgroupBackend>(new V2Backend(layout, kernel));
    case CgroupLayoutKind::kHybrid:
      return std::unique_ptr<CgroupBackend>(new HybridBackend(layout, kernel));
    case CgroupLayoutKind::kV1:
      return std::unique_ptr<CgroupBackend>(new V1Backend(layout));
    case CgroupLayoutKind::kNone:
      break;
  }
  return logic_error("make cgroup backend",
                     "no cgroup filesystem is mounted: per-call limits are unavailable");
}

namespace cgroup_detail {

using Clock = std::chrono::steady_clock;

KernelVersion parse_kernel_release(std::string_view release) {
  KernelVersion v;
  auto num = [&](int& out) {
    auto [end, ec] = std::from_chars(release.data(), release.data() + release.size(), out);
    if (ec != std::errc()) return false;
    release.remove_prefix(static_cast<size_t>(end - release.data()));
    return true;
  };
  int major = 0, minor = 0;
  if (!num(major) || release.empty() || release.front() != '.') return v;
  release.remove_prefix(1);
  if (!num(minor)) return v;
  return {major, minor};
}

KernelVersion running_kernel() {
  struct utsname u;
  if (::uname(&u) != 0) return {};
  return parse_kernel_release(u.release);
}

Status check_rel(const std::string& rel) {
  auto bad = [&](const std::string& why) {
    return logic_error("cgroup path", why + " (want a relative path like 'sandgate/r1/call-1')",
                       rel);
  };
  if (rel.empty()) return bad("empty");
  if (rel.front() == '/') return bad("absolute");
  size_t start = 0;
  for (;;) {
    size_t end = rel.find('/', start);
    std::string part = rel.substr(start, end == std::string::npos ? end : end - start);
    if (part.empty() || part == "." || part == "..") return bad("bad component '" + part + "'");
    if (end == std::string::npos) return {};
    start = end + 1;
  }
}

Result<std::string> make_cgroup_dirs(const std::string& mount, const std::string& rel,
                                     RunState* state, const PrepareParent& prepare) {
  SG_TRY(check_rel(rel));
  SG_ASSIGN_OR_RETURN(DirFd parent, DirFd::open(mount));
  size_t start = 0;
  for (;;) {
    size_t end = rel.find('/', start);
    std::string name = rel.substr(start, end == std::string::npos ? end : end - start);
    if (prepare) SG_TRY(prepare(parent));
    if (!parent.exists(name)) {
      Resource r{Resource::Kind::kCgroup, parent.child(name)};
      if (state) SG_TRY(std::move(state->record(r)).context("recording " + r.path));
      if (::mkdirat(parent.get(), name.c_str(), 0755) != 0) {
        int err = errno;
        if (state) (void)state->forget(r);
        // Someone made it between the look and the mkdir: reuse it, as for any existing one.
        if (err != EEXIST) return sys_error(err, "mkdir cgroup", r.path);
      }
    }
    SG_ASSIGN_OR_RETURN(parent, parent.openat_dir(name));
    if (end == std::string::npos) return parent.path();
    start = end + 1;
  }
}

Result<std::vector<std::string>> make_cgroup_dirs_in(const std::vector<std::string>& mounts,
                                                     const std::string& rel, RunState* state) {
  SG_TRY(check_rel(rel));
  // Parents first within a mount: release_resources removes in the reverse order.
  std::vector<Resource> recorded;
  if (state) {
    for (const auto& mount : mounts) {
      std::string path = mount;
      for (std::string_view name : split(rel, '/')) {
        path += "/" + std::string(name);
        if (::access(path.c_str(), F_OK) != 0) recorded.push_back({Resource::Kind::kCgroup, path});
      }
    }
    if (!recorded.empty())
      SG_TRY(std::move(state->record_all(recorded)).context("recording cgroup " + rel));
  }
  std::vector<std::string> out;
  for (const auto& mount : mounts) {
    auto dir = make_cgroup_dirs(mount, rel, nullptr);
    if (!dir.ok()) {
      if (state) {
        std::vector<Resource> unmade;
        for (const auto& r : recorded)
          if (::access(r.path.c_str(), F_OK) != 0) unmade.push_back(r);
        (void)state->forget_all(unmade);
      }
      return std::move(dir).error();
    }
    out.push_back(std::move(dir).value());
  }
  return out;
}

std::vector<std::string> distinct_dirs(const Cgroup& cg) {
  std::vector<std::string> out;
  for (const auto& [key, dir] : cg.dirs) {
    if (std::find(out.begin(), out.end(), dir) == out.end()) out.push_back(dir);
  }
  return out;
}

Result<std::string> dir_of(const Cgroup& cg, const std::string& key, std::string_view what) {
  auto it = cg.dirs.find(key);
  if (it == cg.dirs.end())
    return logic_error(std::string(what), "cgroup '" + cg.rel + "' has no " + key + " hierarchy");
  return it->second;
}

bool is_gone(const Error& e) { return e.err == ENOENT || e.err == ENODEV; }

Result<std::vector<pid_t>> read_procs(const std::string& dir) {
  SG_ASSIGN_OR_RETURN(DirFd d, DirFd::open(dir));
  SG_ASSIGN_OR_RETURN(std::string text, d.read("cgroup.procs", 16 << 20));
  std::vector<pid_t> out;
  std::string_view rest = text;
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (line.empty()) continue;
    pid_t pid = 0;
    auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), pid);
    if (ec != std::errc() || end != line.data() + line.size() || pid <= 0)
      return logic_error("parse cgroup.procs", "not a pid: '" + std::string(line) + "'", dir);
    out.push_back(pid);
  }
  return out;
}

Result<std::vector<pid_t>> procs_of(const std::vector<std::string>& dirs) {
  std::set<pid_t> pids;
  for (const auto& dir : dirs) {
    SG_ASSIGN_OR_RETURN(auto procs, read_procs(dir));
    pids.insert(procs.begin(), procs.end());
  }
  return std::vector<pid_t>(pids.begin(), pids.end());
}

namespace {

Status collect_deepest_first(const std::string& dir, std::vector<std::string>& out, int depth) {
  // cgroupfs limits the depth itself (cgroup.max.depth); this guards against a loop in a fake.
  if (depth > 64) return logic_error("walk cgroup", "deeper than 64 levels", dir);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return sys_error("opendir", dir);
  std::vector<std::string> children;
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN) {
      struct stat st;
      is_dir =
          ::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
    }
    if (is_dir) children.push_back(dir + "/" + name);
  }
  ::closedir(d);
  std::sort(children.begin(), children.end());
  for (const auto& c : children) {
    auto s = collect_deepest_first(c, out, depth + 1);
    if (!s.ok() && !is_gone(s.error())) return s;
  }
  out.push_back(dir);
  return {};
}

}  // namespace

Result<std::vector<std::string>> subtree_deepest_first(const std::string& dir) {
  std::vector<std::string> out;
  SG_TRY(collect_deepest_first(dir, out, 0));
  return out;
}

Result<std::vector<pid_t>> subtree_procs(const std::vector<std::string>& dirs) {
  std::set<pid_t> pids;
  for (const auto& top : dirs) {
    auto tree = subtree_deepest_first(top);
    if (!tree.ok()) {
      if (is_gone(tree.error())) continue;
      return std::move(tree).error();
    }
    for (const auto& dir : *tree) {
      auto procs = read_procs(dir);
      if (!procs.ok()) {
        if (is_gone(procs.error())) continue;
        return std::move(procs).error();
      }
      pids.insert(procs->begin(), procs->end());
    }
  }
  return std::vector<pid_t>(pids.begin(), pids.end());
}

Status signal_subtrees(const std::vector<std::string>& dirs, int sig) {
  SG_ASSIGN_OR_RETURN(auto pids, subtree_procs(dirs));
  for (pid_t pid : pids) {
    // Every pid read from our own cgroup is one of ours; ESRCH: it exited since the read.
    if (::kill(pid, sig) != 0 && errno != ESRCH)
      return sys_error("kill", std::to_string(pid)).context_add("signal " + std::to_string(sig));
  }
  return {};
}

Status wait_empty(const std::vector<std::string>& dirs, Clock::time_point deadline, bool rekill) {
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    SG_ASSIGN_OR_RETURN(auto pids, subtree_procs(dirs));
    if (pids.empty()) return {};
    if (Clock::now() >= deadline) {
      return logic_error(
          "wait for cgroup to empty",
          std::to_string(pids.size()) + " process(es) left, first " + std::to_string(pids.front()),
          dirs.empty() ? std::string() : dirs.front());
    }
    if (rekill) {
      for (pid_t pid : pids) ::kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

Status remove_subtrees(const std::vector<std::string>& dirs, Clock::time_point deadline) {
  for (const auto& top : dirs) {
    auto tree = subtree_deepest_first(top);
    if (!tree.ok()) {
      if (is_gone(tree.error())) {
        spdlog::debug("cgroup {} already gone", top);
        continue;
      }
      return std::move(tree).error();
    }
    for (const auto& dir : *tree) {
      auto pause = std::chrono::milliseconds(1);
      for (;;) {
        if (::rmdir(dir.c_str()) == 0) break;
        int err = errno;
        if (err == ENOENT || err == ENODEV) {
          spdlog::debug("cgroup {} vanished before rmdir ({})", dir, errno_name(err));
          break;
        }
        // EBUSY: a killed process has not finished exiting, or a child appeared.
        if (err != EBUSY || Clock::now() >= deadline) return sys_error(err, "rmdir cgroup", dir);
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::milliseconds(20));
      }
    }
  }
  return {};
}

Status kill_by_freezing(const FreezeFn& freeze, const std::vector<std::string>& dirs) {
  bool frozen = false;
  if (freeze) {
    auto f = freeze(true);
    frozen = f.ok();
    if (!f.ok()) spdlog::warn("kill without a completed freeze: {}", f.error().message());
  }
  Status killed = signal_subtrees(dirs, SIGKILL);
  if (freeze) {
    // Thaw even when the freeze did not complete: a frozen cgroup keeps its killed tasks.
    SG_TRY(std::move(freeze(false)).context("thaw after SIGKILL"));
  }
  SG_TRY(std::move(killed).context("kill"));
  if (!frozen) return wait_empty(dirs, Clock::now() + kSettleTimeout, /*rekill=*/true);
  return {};
}

Status remove_cgroup(CgroupBackend& backend, const Cgroup& cg) {
  auto deadline = Clock::now() + kSettleTimeout;
  std::vector<std::string> dirs = distinct_dirs(cg);
  SG_ASSIGN_OR_RETURN(auto left, subtree_procs(dirs));
  if (!left.empty()) {
    spdlog::debug("removing cgroup {}: killing {} process(es) left in it", cg.rel, left.size());
    if (auto killed = backend.kill(cg); !killed.ok()) {
      if (!is_gone(killed.error()))
        return std::move(killed).error().context_add("remove " + cg.rel);
      spdlog::debug("cgroup {} vanished while being killed", cg.rel);
    }
  }
  SG_TRY(std::move(wait_empty(dirs, deadline, /*rekill=*/true)).context("remove " + cg.rel));
  return std::move(remove_subtrees(dirs, deadline)).context("remove " + cg.rel);
}

Status poll_until(const std::function<Result<bool>()>& done, Duration bound,
                  const std::string& what, const std::string& path) {
  auto deadline = Clock::now() + bound;
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    SG_ASSIGN_OR_RETURN(bool ok, done());
    if (ok) return {};
    if (Clock::now() >= deadline)
      return logic_error(what, "not reached within " + format_duration(bound), path);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10000));
  }
}

Result<uint64_t> parse_u64(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    return logic_error("parse", "not an unsigned number: '" + std::string(text) + "'");
  return v;
}

Status parse_u64_into(std::string_view text, uint64_t& out) {
  SG_ASSIGN_OR_RETURN(out, parse_u64(text));
  return {};
}

Status parse_flat_keyed_into(std::string_view text,
                             std::initializer_list<std::pair<std::string_view, uint64_t*>> fields) {
  SG_ASSIGN_OR_RETURN(auto m, parse_flat_keyed(text));
  for (auto [key, out] : fields) {
    auto it = m.find(std::string(key));
    *out = it == m.end() ? 0 : it->second;
  }
  return {};
}

std::vector<CounterFile> pids_counter_files(const char* hierarchy) {
  return {
      {hierarchy, "pids.current", Tier::kEveryRead, false,
       [](std::string_view t, Usage& u) {
         u.pids_counted = true;
         return parse_u64_into(t, u.pids_current);
       }},
      // pids.current falls when a parent outside reaps an exited task: read every time.
      {hierarchy, "pids.events", Tier::kEveryRead, false,
       [](std::string_view t, Usage& u) {
         return parse_flat_keyed_into(t, {{"max", &u.pids_max_events}});
       },
       Moves::kOnlyWhenItsTasksRun},  // a fork refused: a task of the cgroup forked
  };
}

namespace {

// The directories of a cgroup that its counter files are in, each opened once.
class CounterDirs {
 public:
  explicit CounterDirs(const Cgroup& cg) : cg_(cg) {}

  // Opens `f` in its directory and names its path in `path`; an invalid fd when the file may
  // be absent and is.
  Result<UniqueFd> open(const CounterFile& f, std::string& path) {
    SG_ASSIGN_OR_RETURN(std::string dir, dir_of(cg_, f.hierarchy, "read_usage"));
    auto it = dirs_.find(dir);
    if (it == dirs_.end()) {
      SG_ASSIGN_OR_RETURN(DirFd d, DirFd::open(dir));
      it = dirs_.emplace(dir, std::move(d)).first;
    }
    path = it->second.child(f.name);
    auto fd = it->second.openat(f.name, O_RDONLY);
    if (!fd.ok() && f.may_be_absent && fd.error().err == ENOENT) return UniqueFd();
    return fd;
  }

 private:
  const Cgroup& cg_;
  std::map<std::string, DirFd> dirs_;
};

// Reads the whole of an open counter file from offset 0 (into `buf`, kept between reads) and
// parses it into `u`. A read shorter than asked for is the whole text: a cgroup file's text
// is made at once by its show function (seq_file), a regular file's (the fakes) ends at EOF.
Status read_counter(int fd, const CounterFile& f, const std::string& path, std::string& buf,
                    Usage& u) {
  constexpr size_t kMaxBytes = 1 << 20;
  if (buf.size() < 4096) buf.resize(4096);
  size_t len = 0;
  for (;;) {
    if (len == buf.size()) {
      if (buf.size() >= kMaxBytes) return logic_error("read", "larger than 1 MiB", path);
      buf.resize(buf.size() * 2);
    }
    ssize_t n = ::pread(fd, buf.data() + len, buf.size() - len, static_cast<off_t>(len));
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error("read", path);
    }
    len += static_cast<size_t>(n);
    if (n == 0 || len < buf.size()) break;
  }
  auto parsed = f.parse(std::string_view(buf.data(), len), u);
  if (!parsed.ok()) {
    Error e = std::move(parsed).error();
    if (e.path.empty()) e.path = path;
    return e;
  }
  return {};
}

}  // namespace

Result<Usage> read_counters(const Cgroup& cg, const std::vector<CounterFile>& files) {
  CounterDirs dirs(cg);
  Usage u;
  std::string buf, path;
  for (const auto& f : files) {
    SG_ASSIGN_OR_RETURN(UniqueFd fd, dirs.open(f, path));
    if (fd.valid()) SG_TRY(read_counter(fd.get(), f, path, buf, u));
  }
  return u;
}

CounterReader::CounterReader(Cgroup cg, CounterFileList list)
    : cg_(std::move(cg)), list_(std::move(list)) {}

Status CounterReader::open() {
  SG_ASSIGN_OR_RETURN(auto files, list_(cg_));
  CounterDirs dirs(cg_);
  std::vector<OpenFile> opened;
  opened.reserve(files.size());
  for (const auto& f : files) {
    if (f.tier == Tier::kNotSampled) continue;
    std::string path;
    SG_ASSIGN_OR_RETURN(UniqueFd fd, dirs.open(f, path));
    // An absent file stays absent for the cgroup's life (kernel version, PSI off).
    if (fd.valid()) opened.push_back({f, std::move(path), std::move(fd)});
  }
  files_ = std::move(opened);
  has_clock_ = std::any_of(files_.begin(), files_.end(),
                           [](const OpenFile& f) { return f.file.moves == Moves::kCpuClock; });
  opened_ = true;
  return {};
}

Status CounterReader::read_file(OpenFile& f, Usage& u) {
  return read_counter(f.fd.get(), f.file, f.path, buf_, u);
}

Result<Usage> CounterReader::read(bool full) {
  if (!opened_) {
    auto s = open();
    if (!s.ok()) {
      int err = s.error().err;
      if (err != EMFILE && err != ENFILE) return std::move(s).error();
      // No descriptors to keep: read by path this time (a full read), and try again next.
      if (!warned_)
        spdlog::warn(
            "cgroup {}: no file descriptors to keep its counters open, reading them "
            "by path: {}",
            cg_.rel, s.error().message());
      warned_ = true;
      SG_ASSIGN_OR_RETURN(auto files, list_(cg_));
      return read_counters(cg_, files);
    }
  }
  // The fields a read skips keep their last values (the first read is full), never zero.
  if (!last_) full = true;
  Usage u = last_.value_or(Usage{});
  auto wanted = [full](const OpenFile& f) { return full || f.file.tier == Tier::kEveryRead; };
  // The CPU clock first, with everything else that moves at any time; then the files only the
  // cgroup's own tasks move, each unless the clock stands where it stood at its last read.
  for (auto& f : files_)
    if (wanted(f) && f.file.moves != Moves::kOnlyWhenItsTasksRun) SG_TRY(read_file(f, u));
  // A file counts as read at this clock only once the whole read has succeeded: a read that
  // fails halfway keeps last_, and a file marked read in it would be skipped next time with
  // the value that read dropped.
  std::vector<OpenFile*> read_now;
  for (auto& f : files_) {
    if (!wanted(f) || f.file.moves != Moves::kOnlyWhenItsTasksRun) continue;
    if (has_clock_ && f.read_at_cpu_us == u.cpu_usage_us) continue;
    SG_TRY(read_file(f, u));
    read_now.push_back(&f);
  }
  for (auto* f : read_now) f->read_at_cpu_us = u.cpu_usage_us;
  last_ = u;
  return u;
}

Result<std::map<std::string, uint64_t>> read_flat_keyed(const DirFd& dir, const std::string& name) {
  SG_ASSIGN_OR_RETURN(std::string text, dir.read(name));
  auto parsed = parse_flat_keyed(text);
  if (!parsed.ok()) {
    Error e = std::move(parsed).error();
    e.path = dir.child(name);
    return e;
  }
  return parsed;
}

uint64_t value_or_zero(const std::map<std::string, uint64_t>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? 0 : it->second;
}

Result<uint64_t> cpu_quota_us(double cores) {
  if (!std::isfinite(cores) || cores <= 0)
    return logic_error("set_limits",
                       "cpu_cores must be a positive number, got " + std::to_string(cores));
  // The kernel refuses a quota under 1 ms (kernel/sched/core.c, min_cfs_quota_period).
  double quota = std::round(cores * static_cast<double>(kCpuPeriodUs));
  if (quota > 1e12) return logic_error("set_limits", "cpu_cores is too large");
  return std::max<uint64_t>(1000, static_cast<uint64_t>(quota));
}

Status check_cpu_weight(uint32_t weight) {
  if (weight < 1 || weight > 10000)
    return logic_error("set_limits", "cpu_weight must be 1..10000, got " + std::to_string(weight));
  return {};
}

Status check_io_limits(const Limits& limits, const std::string& rel) {
  if (!has_io_limits(limits)) return {};
  const char* field = limits.io_read_bps ? "io_read_bps" : "io_write_bps";
  const std::string& dev = limits.io_device;
  size_t colon = dev.find(':');
  auto digits = [](std::string_view s) {
    return !s.empty() && s.size() <= 10 &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (dev.empty())
    return logic_error("set_limits",
                       std::string("io_device: ") + field +
                           " needs the MAJOR:MINOR of the block device it applies to",
                       rel);
  if (colon == std::string::npos || !digits(std::string_view(dev).substr(0, colon)) ||
      !digits(std::string_view(dev).substr(colon + 1)))
    return logic_error("set_limits",
                       "io_device: expected MAJOR:MINOR like 254:0, got '" + dev + "'", rel);
  if (limits.io_read_bps && *limits.io_read_bps == 0)
    return logic_error("set_limits", "io_read_bps: must be positive", rel);
  if (limits.io_write_bps && *limits.io_write_bps == 0)
    return logic_error("set_limits", "io_write_bps: must be positive", rel);
  return {};
}

}  // namespace cgroup_detail
}  // namespace sandgate::controller
