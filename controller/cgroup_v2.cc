#include "controller/cgroup_v2.h"

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "core/proc_cgroup.h"

namespace sandgate::controller {

using namespace cgroup_detail;

namespace {

// The controllers a call's grant is written to; io when the kernel offers it, so io.pressure
// accounting and later io.max work in the call's cgroup.
constexpr const char* kWantedControllers[] = {"memory", "cpu", "pids", "io"};

std::set<std::string> split_words(std::string_view text) {
  std::set<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find_first_of(" \n", start);
    if (end == std::string_view::npos) end = text.size();
    if (end > start) out.emplace(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

Result<std::set<std::string>> read_words(const DirFd& dir, const std::string& name) {
  SG_ASSIGN_OR_RETURN(std::string text, dir.read(name, 4096));
  return split_words(text);
}

// Enables, in `parent`'s cgroup.subtree_control, the wanted controllers its cgroup.controllers
// offers and that are not enabled yet, in one write. A parent that holds processes refuses
// (EBUSY, "no internal processes"): processes live in leaves only.
Status enable_controllers(const DirFd& parent) {
  SG_ASSIGN_OR_RETURN(auto offered, read_words(parent, "cgroup.controllers"));
  SG_ASSIGN_OR_RETURN(auto enabled, read_words(parent, "cgroup.subtree_control"));
  std::string add;
  for (const char* c : kWantedControllers) {
    if (offered.count(c) && !enabled.count(c)) add += (add.empty() ? "+" : " +") + std::string(c);
  }
  if (add.empty()) return {};
  return std::move(parent.write("cgroup.subtree_control", add))
      .context("enabling '" + add + "' for the children of " + parent.path());
}

// A limit's controller must be enabled for the cgroup (listed in its cgroup.controllers).
Status need_controller(const std::set<std::string>& controllers, const std::string& controller,
                       const std::string& field, const std::string& dir) {
  if (controllers.count(controller)) return {};
  return logic_error("set_limits",
                     field + ": the " + controller + " controller is not enabled for this cgroup",
                     dir);
}

}  // namespace

namespace unified {

void add_features(const std::string& mount, KernelVersion kernel, CgroupFeatures& f) {
  f.psi = ::access((mount + "/memory.pressure").c_str(), F_OK) == 0;
  f.psi_triggers = f.psi && kernel.at_least(5, 2);
  f.freeze = kernel.at_least(5, 2);
  f.atomic_kill = kernel.at_least(5, 14);
}

Status freeze(const std::string& dir, bool frozen) {
  SG_ASSIGN_OR_RETURN(DirFd d, DirFd::open(dir));
  if (frozen) {
    SG_TRY(d.write("cgroup.freeze", "1"));
  } else {
    // A descendant frozen on its own stays frozen when only its parent thaws: thaw them all.
    SG_ASSIGN_OR_RETURN(auto tree, subtree_deepest_first(dir));
    for (const auto& sub : tree) {
      auto sub_dir = DirFd::open(sub);
      auto s =
          sub_dir.ok() ? sub_dir->write("cgroup.freeze", "0") : Status(std::move(sub_dir).error());
      if (!s.ok() && !is_gone(s.error())) return s;
    }
  }
  // The kernel reports the state reached in cgroup.events once every task has stopped
  // (Documentation/admin-guide/cgroup-v2.rst, cgroup.freeze).
  uint64_t want = frozen ? 1 : 0;
  return poll_until(
      [&]() -> Result<bool> {
        SG_ASSIGN_OR_RETURN(auto events, read_flat_keyed(d, "cgroup.events"));
        return value_or_zero(events, "frozen") == want;
      },
      kSettleTimeout, frozen ? "freeze" : "thaw", d.child("cgroup.events"));
}

Status kill(const std::string& dir) {
  SG_ASSIGN_OR_RETURN(DirFd d, DirFd::open(dir));
  return d.write("cgroup.kill", "1");
}

bool may_use_any_trigger_window() {
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  return (data[CAP_TO_INDEX(CAP_SYS_RESOURCE)].effective & CAP_TO_MASK(CAP_SYS_RESOURCE)) != 0;
}

Status check_trigger(Duration stall, Duration window, bool any_window) {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  // psi.rst: "The window size ... must be in the 500ms - 10s range"; the stall fits in it.
  if (window < milliseconds(500) || window > seconds(10))
    return logic_error("pressure trigger",
                       "window must be 500ms..10s, got " + format_duration(window));
  if (stall <= Duration::zero() || stall > window)
    return logic_error("pressure trigger", "stall must be positive and at most the window, got " +
                                               format_duration(stall));
  // kernel/sched/psi.c, psi_trigger_create(): an opener without CAP_SYS_RESOURCE gets EINVAL
  // for any other window, since its triggers ride on the 2 s averaging work.
  if (!any_window && window % seconds(2) != Duration::zero())
    return logic_error("pressure trigger",
                       "without CAP_SYS_RESOURCE the kernel takes only windows that are a "
                       "multiple of 2s, got " +
                           format_duration(window));
  return {};
}

Result<UniqueFd> pressure_trigger(const std::string& dir, const std::string& file, Duration stall,
                                  Duration window) {
  using std::chrono::microseconds;
  SG_TRY(check_trigger(stall, window, may_use_any_trigger_window()));
  auto stall_us = std::chrono::duration_cast<microseconds>(stall).count();
  auto window_us = std::chrono::duration_cast<microseconds>(window).count();
  SG_ASSIGN_OR_RETURN(DirFd d, DirFd::open(dir));
  SG_ASSIGN_OR_RETURN(UniqueFd fd, d.openat(file, O_RDWR | O_NONBLOCK));
  // One write with the terminating NUL, as in psi.rst's example (the /proc/pressure files
  // overwrite the last byte written with a NUL).
  std::string spec = "some " + std::to_string(stall_us) + " " + std::to_string(window_us);
  spec.push_back('\0');
  ssize_t n = ::write(fd.get(), spec.data(), spec.size());
  if (n < 0) return sys_error("write PSI trigger", d.child(file));
  return fd;
}

std::vector<CounterFile> pressure_files() {
  return {
      {"unified", "memory.pressure", Tier::kNotSampled, true,
       [](std::string_view t, Usage& u) -> Status {
         SG_ASSIGN_OR_RETURN(u.memory_pressure, parse_pressure(t));
         return {};
       }},
      {"unified", "cpu.pressure", Tier::kNotSampled, true,
       [](std::string_view t, Usage& u) -> Status {
         SG_ASSIGN_OR_RETURN(u.cpu_pressure, parse_pressure(t));
         return {};
       }},
  };
}

Status move_self_in_place(const std::string& mount) {
  if (mount.empty()) return logic_error("move self in place", "no unified cgroup mount");
  SG_ASSIGN_OR_RETURN(std::string own, read_file("/proc/self/cgroup", 64 * 1024));
  const std::string path = cgroup_path_in(own, "");
  if (path.empty() || path[0] != '/' || path.find("/..") != std::string::npos)
    return logic_error("move self in place", "no unified cgroup of this process", own);
  return write_file(mount + (path == "/" ? "" : path) + "/cgroup.procs",
                    std::to_string(::getpid()));
}

}  // namespace unified

V2Backend::V2Backend(CgroupLayout layout, KernelVersion kernel) : layout_(std::move(layout)) {
  unified::add_features(layout_.unified_mount, kernel, features_);
  bool memory = layout_.has_v2_controller("memory");
  features_.memory_high = memory;
  features_.memory_peak = memory && kernel.at_least(5, 19);
  features_.io_limits = layout_.has_v2_controller("io");  // io.max
}

Result<Cgroup> V2Backend::create(const std::string& rel, RunState* state) {
  // Controllers are enabled in every ancestor from the mount root down, never in the new
  // cgroup itself: it is a leaf that processes are placed in.
  SG_ASSIGN_OR_RETURN(std::string dir, std::move(make_cgroup_dirs(layout_.unified_mount, rel, state,
                                                                  enable_controllers))
                                           .context("creating cgroup " + rel));
  Cgroup cg;
  cg.rel = rel;
  cg.dirs["unified"] = dir;
  return cg;
}

Status V2Backend::set_limits(const Cgroup& cg, const Limits& limits) {
  SG_ASSIGN_OR_RETURN(std::string dir, dir_of(cg, "unified", "set_limits"));
  SG_ASSIGN_OR_RETURN(DirFd d, DirFd::open(dir));
  SG_ASSIGN_OR_RETURN(auto controllers, read_words(d, "cgroup.controllers"));
  // Check every field before writing any, so a refused grant leaves the cgroup as it was.
  std::optional<uint64_t> quota;
  if (limits.memory_max) SG_TRY(need_controller(controllers, "memory", "memory_max", dir));
  if (limits.memory_high) SG_TRY(need_controller(controllers, "memory", "memory_high", dir));
  if (limits.cpu_cores) {
    SG_TRY(need_controller(controllers, "cpu", "cpu_cores", dir));
    SG_ASSIGN_OR_RETURN(quota, cpu_quota_us(*limits.cpu_cores));
  }
  if (limits.cpu_weight) {
    SG_TRY(need_controller(controllers, "cpu", "cpu_weight", dir));
    SG_TRY(check_cpu_weight(*limits.cpu_weight));
  }
  if (limits.pids_max) SG_TRY(need_controller(controllers, "pids", "pids_max", dir));
  if (has_io_limits(limits)) {
    SG_TRY(need_controller(controllers, "io", limits.io_read_bps ? "io_read_bps" : "io_write_bps",
                           dir));
    SG_TRY(check_io_limits(limits, dir));
  }

  auto put = [&](const char* field, const char* file, const std::string& value) {
    return std::move(d.write(file, value)).context(std::string("set_limits ") + field);
  };
  if (limits.memory_max)
    SG_TRY(put("memory_max", "memory.max", std::to_string(limits.memory_max->value)));
  if (limits.memory_high)
    SG_TRY(put("memory_high", "memory.high", std::to_string(limits.memory_high->value)));
  if (quota)
    SG_TRY(
        put("cpu_cores", "cpu.max", std::to_string(*quota) + " " + std::to_string(kCpuPeriodUs)));
  if (limits.cpu_weight)
    SG_TRY(put("cpu_weight", "cpu.weight", std::to_string(*limits.cpu_weight)));
  if (limits.pids_max) SG_TRY(put("pids_max", "pids.max", std::to_string(*limits.pids_max)));
  if (has_io_limits(limits)) {
    // Documentation/admin-guide/cgroup-v2.rst, io.max: "MAJ:MIN rbps=N wbps=M", "max" for no
    // limit; both keys are written so an unset one is unlimited rather than left over.
    auto rate = [](const std::optional<uint64_t>& bps) {
      return bps ? std::to_string(*bps) : std::string("max");
    };
    SG_TRY(put(limits.io_read_bps ? "io_read_bps" : "io_write_bps", "io.max",
               limits.io_device + " rbps=" + rate(limits.io_read_bps) +
                   " wbps=" + rate(limits.io_write_bps)));
  }
  return {};
}

Result<std::vector<CounterFile>> V2Backend::counter_files(const Cgroup& cg) const {
  // What the ladder acts on is read every time; the kernel-kept peak and pressure wait for a
  // full read.
  static const std::pair<const char*, CounterFile> kFiles[] = {
      {"memory",
       {"unified", "memory.current", Tier::kEveryRead, false,
        [](std::string_view t, Usage& u) { return parse_u64_into(t, u.memory_current); }}},
      {"memory",
       {"unified", "memory.peak", Tier::kFullOnly, /*may_be_absent=*/true,  // Linux 5.19
        [](std::string_view t, Usage& u) -> Status {
          SG_ASSIGN_OR_RETURN(u.memory_peak, parse_u64(t));
          return {};
        }}},
      {"memory",
       {"unified", "memory.events", Tier::kEveryRead, false,
        [](std::string_view t, Usage& u) {
          MemoryEvents& e = u.memory_events;
          return parse_flat_keyed_into(
              t, {{"high", &e.high}, {"max", &e.max}, {"oom", &e.oom}, {"oom_kill", &e.oom_kill}});
        }}},
      // cpu.stat is always there (usage); the throttling keys only with the cpu controller.
      // memory.events stays ungated: v2 charges socket buffers in softirq, and a memory.max
      // written below the usage OOM-kills in the writer's context.
      {nullptr,
       {"unified", "cpu.stat", Tier::kEveryRead, false,
        [](std::string_view t, Usage& u) {
          return parse_flat_keyed_into(t, {{"usage_usec", &u.cpu_usage_us},
                                           {"throttled_usec", &u.cpu_throttled_us},
                                           {"nr_throttled", &u.cpu_nr_throttled}});
        },
        Moves::kCpuClock}},
  };
  SG_ASSIGN_OR_RETURN(std::string dir, dir_of(cg, "unified", "read_usage"));
  SG_ASSIGN_OR_RETURN(DirFd d, DirFd::open(dir));
  SG_ASSIGN_OR_RETURN(auto controllers, read_words(d, "cgroup.controllers"));
  std::vector<CounterFile> files;
  for (const auto& [controller, f] : kFiles)
    if (!controller || controllers.count(controller)) files.push_back(f);
  if (controllers.count("pids"))
    for (const auto& f : pids_counter_files("unified")) files.push_back(f);
  for (const auto& f : unified::pressure_files()) files.push_back(f);
  return files;
}

Result<Usage> V2Backend::read_usage(const Cgroup& cg) const {
  SG_ASSIGN_OR_RETURN(auto files, counter_files(cg));
  return read_counters(cg, files);
}

std::unique_ptr<UsageReader> V2Backend::usage_reader(const Cgroup& cg) const {
  return std::make_unique<CounterReader>(cg, [this](const Cgroup& c) { return counter_files(c); });
}

Status V2Backend::freeze(const Cgroup& cg, bool frozen) {
  SG_ASSIGN_OR_RETURN(std::string dir, dir_of(cg, "unified", "freeze"));
  if (!features_.freeze) return logic_error("freeze", "cgroup.freeze needs Linux 5.2", dir);
  return unified::freeze(dir, frozen);
}

Status V2Backend::kill(const Cgroup& cg) {
  SG_ASSIGN_OR_RETURN(std::string dir, dir_of(cg, "unified", "kill"));
  if (features_.atomic_kill) return unified::kill(dir);
  FreezeFn freeze;
  if (features_.freeze) freeze = [&](bool f) { return unified::freeze(dir, f); };
  return kill_by_freezing(freeze, {dir});
}

Status V2Backend::signal(const Cgroup& cg, int sig) {
  return signal_subtrees(distinct_dirs(cg), sig);
}

Result<std::vector<pid_t>> V2Backend::procs(const Cgroup& cg) const {
  SG_ASSIGN_OR_RETURN(std::string dir, dir_of(cg, "unified", "procs"));
  return read_procs(dir);
}

Status V2Backend::remove(const Cgroup& cg) { return remove_cgroup(*this, cg); }

Placement V2Backend::placement(const Cgroup& cg) const { return {distinct_dirs(cg)}; }

Result<UniqueFd> V2Backend::memory_pressure_trigger(const Cgroup& cg, Duration stall,
                                                    Duration window) {
  SG_ASSIGN_OR_RETURN(std::string dir, dir_of(cg, "unified", "memory pressure trigger"));
  if (!features_.psi_triggers)
    return logic_error("memory pressure trigger",
                       "no PSI triggers (kernel without PSI, or older than 5.2)", dir);
  return unified::pressure_trigger(dir, "memory.pressure", stall, window);
}

}  // namespace sandgate::controller
