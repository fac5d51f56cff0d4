#include "controller/cgroup_v1.h"

#include <sys/eventfd.h>

#include <algorithm>
#include <iterator>
#include <optional>

namespace sandgate::controller {

using namespace cgroup_detail;

namespace {

// cpu.shares for a cgroup2-style weight: the default weight 100 is the default 1024 shares
// (Documentation/admin-guide/cgroup-v2.rst, "Weights"); the kernel's minimum is 2
// (kernel/sched/sched.h, MIN_SHARES).
uint64_t shares_for_weight(uint32_t weight) {
  return std::max<uint64_t>(2, static_cast<uint64_t>(weight) * 1024 / 100);
}

}  // namespace

V1Hierarchies::V1Hierarchies(const CgroupLayout& layout, bool with_freezer) {
  std::vector<std::string> wanted = {"memory", "cpu", "cpuacct", "pids", "blkio"};
  if (with_freezer) wanted.push_back("freezer");
  for (const auto& h : wanted) {
    if (auto m = layout.v1_mount(h); !m.empty()) mounts_[h] = m;
  }
}

Status V1Hierarchies::create(const std::string& rel, RunState* state, Cgroup& cg,
                             const std::map<std::string, std::string>& more) const {
  if (mounts_.empty())
    return logic_error("create cgroup", "no v1 memory, cpu, cpuacct, pids or blkio hierarchy", rel);
  std::map<std::string, std::string> all = mounts_;
  all.insert(more.begin(), more.end());
  // Comounted controllers share a mount: make the directory once, name it for each.
  std::vector<std::string> distinct;
  for (const auto& [hierarchy, mount] : all)
    if (std::find(distinct.begin(), distinct.end(), mount) == distinct.end())
      distinct.push_back(mount);
  SG_ASSIGN_OR_RETURN(
      std::vector<std::string> dirs,
      std::move(make_cgroup_dirs_in(distinct, rel, state)).context("creating cgroup " + rel));
  for (const auto& [hierarchy, mount] : all) {
    size_t i =
        static_cast<size_t>(std::find(distinct.begin(), distinct.end(), mount) - distinct.begin());
    cg.dirs[hierarchy] = dirs[i];
  }
  return {};
}

Status V1Hierarchies::set_limits(const Cgroup& cg, const Limits& limits) const {
  if (limits.memory_high)
    return logic_error("set_limits",
                       "memory_high: cgroup v1 has no memory.high (only the hard limit, "
                       "memory_max); consult features().memory_high",
                       cg.rel);
  auto open = [&](const char* hierarchy, const char* field) -> Result<DirFd> {
    auto it = cg.dirs.find(hierarchy);
    if (it == cg.dirs.end())
      return logic_error("set_limits",
                         std::string(field) + ": no v1 " + hierarchy + " hierarchy is mounted",
                         cg.rel);
    return DirFd::open(it->second);
  };
  // Check every field before writing any, so a refused grant leaves the cgroup as it was.
  std::optional<DirFd> memory, cpu, pids, blkio;
  std::optional<uint64_t> quota;
  if (limits.memory_max) {
    SG_ASSIGN_OR_RETURN(memory, open("memory", "memory_max"));
  }
  if (limits.cpu_cores) {
    SG_ASSIGN_OR_RETURN(quota, cpu_quota_us(*limits.cpu_cores));
  }
  if (limits.cpu_weight) SG_TRY(check_cpu_weight(*limits.cpu_weight));
  if (limits.cpu_cores || limits.cpu_weight) {
    SG_ASSIGN_OR_RETURN(cpu, open("cpu", limits.cpu_cores ? "cpu_cores" : "cpu_weight"));
  }
  if (limits.pids_max) {
    SG_ASSIGN_OR_RETURN(pids, open("pids", "pids_max"));
  }
  if (has_io_limits(limits)) {
    SG_TRY(check_io_limits(limits, cg.rel));
    SG_ASSIGN_OR_RETURN(blkio, open("blkio", limits.io_read_bps ? "io_read_bps" : "io_write_bps"));
  }

  auto put = [](const DirFd& d, const char* field, const char* file, uint64_t value) {
    return std::move(d.write(file, std::to_string(value)))
        .context(std::string("set_limits ") + field);
  };
  if (limits.memory_max)
    SG_TRY(put(*memory, "memory_max", "memory.limit_in_bytes", limits.memory_max->value));
  if (quota) {
    // The period first: the kernel checks the quota against the period it is written with.
    SG_TRY(put(*cpu, "cpu_cores", "cpu.cfs_period_us", kCpuPeriodUs));
    SG_TRY(put(*cpu, "cpu_cores", "cpu.cfs_quota_us", *quota));
  }
  if (limits.cpu_weight)
    SG_TRY(put(*cpu, "cpu_weight", "cpu.shares", shares_for_weight(*limits.cpu_weight)));
  if (limits.pids_max) SG_TRY(put(*pids, "pids_max", "pids.max", *limits.pids_max));
  // Documentation/admin-guide/cgroup-v1/blkio-controller.rst, "Throttling/Upper limit policy":
  // one "MAJ:MIN bytes_per_second" rule per write.
  auto put_io = [&](const char* field, const char* file, uint64_t bps) {
    return std::move(blkio->write(file, limits.io_device + " " + std::to_string(bps)))
        .context(std::string("set_limits ") + field);
  };
  if (limits.io_read_bps)
    SG_TRY(put_io("io_read_bps", "blkio.throttle.read_bps_device", *limits.io_read_bps));
  if (limits.io_write_bps)
    SG_TRY(put_io("io_write_bps", "blkio.throttle.write_bps_device", *limits.io_write_bps));
  return {};
}

std::vector<CounterFile> V1Hierarchies::counter_files(const Cgroup& cg) const {
  static const CounterFile kFiles[] = {
      {"memory", "memory.usage_in_bytes", Tier::kEveryRead, false,
       [](std::string_view t, Usage& u) { return parse_u64_into(t, u.memory_current); }},
      // A high-water mark the kernel keeps: a full read's is never behind on what matters.
      {"memory", "memory.max_usage_in_bytes", Tier::kFullOnly, false,
       [](std::string_view t, Usage& u) -> Status {
         SG_ASSIGN_OR_RETURN(u.memory_peak, parse_u64(t));
         return {};
       }},
      // failcnt: how often the usage hit the limit, the nearest v1 has to memory.events "max".
      {"memory", "memory.failcnt", Tier::kFullOnly, false,
       [](std::string_view t, Usage& u) { return parse_u64_into(t, u.memory_events.max); }},
      // A v1 memcg OOM kill happens in the charge path of one of the cgroup's tasks (a limit
      // written below the usage is refused, not enforced by killing).
      {"memory", "memory.oom_control", Tier::kEveryRead, false,
       [](std::string_view t, Usage& u) {
         return parse_flat_keyed_into(t, {{"oom_kill", &u.memory_events.oom_kill}});  // 4.13
       },
       Moves::kOnlyWhenItsTasksRun},
      // Throttled: the cgroup's tasks used up their quota.
      {"cpu", "cpu.stat", Tier::kFullOnly, false,
       [](std::string_view t, Usage& u) -> Status {
         uint64_t throttled_ns = 0;
         SG_TRY(parse_flat_keyed_into(
             t, {{"nr_throttled", &u.cpu_nr_throttled}, {"throttled_time", &throttled_ns}}));
         u.cpu_throttled_us = throttled_ns / 1000;
         return {};
       },
       Moves::kOnlyWhenItsTasksRun},
      {"cpuacct", "cpuacct.usage", Tier::kEveryRead, false,
       [](std::string_view t, Usage& u) -> Status {
         SG_ASSIGN_OR_RETURN(uint64_t ns, parse_u64(t));
         u.cpu_usage_us = ns / 1000;
         return {};
       },
       Moves::kCpuClock},
  };
  std::vector<CounterFile> files(std::begin(kFiles), std::end(kFiles));
  for (const auto& f : pids_counter_files("pids")) files.push_back(f);
  // A hierarchy the layout lacks leaves its counters at zero.
  std::erase_if(files, [&](const CounterFile& f) { return !cg.dirs.count(f.hierarchy); });
  return files;
}

namespace {

// An eventfd registered through the memory cgroup's cgroup.event_control for `file` with
// `argument` ("medium" for memory.pressure_level, a byte count for memory.usage_in_bytes).
// The registration holds the eventfd, not `file`, which may close after; closing the eventfd
// unregisters it.
Result<UniqueFd> memory_event_fd(const Cgroup& cg, const char* file, const std::string& argument) {
  SG_ASSIGN_OR_RETURN(std::string dir,
                      dir_of(cg, "memory", std::string("notification on ") + file));
  SG_ASSIGN_OR_RETURN(DirFd d, DirFd::open(dir));
  UniqueFd efd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!efd) return sys_error("eventfd");
  SG_ASSIGN_OR_RETURN(UniqueFd watched, d.openat(file, O_RDONLY));
  SG_TRY(
      std::move(d.write("cgroup.event_control", std::to_string(efd.get()) + " " +
                                                    std::to_string(watched.get()) + " " + argument))
          .context(std::string("registering for ") + file));
  return efd;
}

}  // namespace

Result<UniqueFd> V1Hierarchies::pressure_level_eventfd(const Cgroup& cg) const {
  return memory_event_fd(cg, "memory.pressure_level", "medium");
}

Result<UniqueFd> V1Hierarchies::usage_threshold_eventfd(const Cgroup& cg, uint64_t bytes) const {
  return memory_event_fd(cg, "memory.usage_in_bytes", std::to_string(bytes));
}

Status V1Hierarchies::freezer_freeze(const Cgroup& cg, bool frozen) const {
  SG_ASSIGN_OR_RETURN(std::string dir, dir_of(cg, "freezer", "freeze"));
  SG_ASSIGN_OR_RETURN(DirFd d, DirFd::open(dir));
  const std::string want = frozen ? "FROZEN" : "THAWED";
  if (frozen) {
    SG_TRY(d.write("freezer.state", want));
  } else {
    // A descendant frozen on its own (CGROUP_FREEZING_SELF) stays frozen when only its parent
    // thaws, and a SIGKILLed task does not exit while frozen: thaw the whole subtree.
    SG_ASSIGN_OR_RETURN(auto tree, subtree_deepest_first(dir));
    for (const auto& sub : tree) {
      auto sub_dir = DirFd::open(sub);
      auto s =
          sub_dir.ok() ? sub_dir->write("freezer.state", want) : Status(std::move(sub_dir).error());
      if (!s.ok() && !is_gone(s.error())) return s;
    }
  }
  // FREEZING until every task has stopped
  // (Documentation/admin-guide/cgroup-v1/freezer-subsystem.rst).
  return poll_until(
      [&]() -> Result<bool> {
        SG_ASSIGN_OR_RETURN(std::string state, d.read("freezer.state", 64));
        while (!state.empty() && state.back() == '\n') state.pop_back();
        return state == want;
      },
      kSettleTimeout, frozen ? "freeze" : "thaw", d.child("freezer.state"));
}

V1Backend::V1Backend(const CgroupLayout& layout) : v1_(layout, /*with_freezer=*/true) {
  features_.memory_high = false;
  features_.memory_peak = v1_.has("memory");  // memory.max_usage_in_bytes
  features_.psi = false;
  features_.psi_triggers = false;
  features_.freeze = v1_.has("freezer");
  features_.atomic_kill = false;
  features_.io_limits = v1_.has("blkio");  // blkio.throttle.*_bps_device
}

Result<Cgroup> V1Backend::create(const std::string& rel, RunState* state) {
  Cgroup cg;
  cg.rel = rel;
  SG_TRY(v1_.create(rel, state, cg));
  return cg;
}

Status V1Backend::set_limits(const Cgroup& cg, const Limits& limits) {
  return v1_.set_limits(cg, limits);
}

Result<std::vector<CounterFile>> V1Backend::counter_files(const Cgroup& cg) const {
  return v1_.counter_files(cg);
}

Result<Usage> V1Backend::read_usage(const Cgroup& cg) const {
  SG_ASSIGN_OR_RETURN(auto files, counter_files(cg));
  return read_counters(cg, files);
}

std::unique_ptr<UsageReader> V1Backend::usage_reader(const Cgroup& cg) const {
  return std::make_unique<CounterReader>(cg, [this](const Cgroup& c) { return counter_files(c); });
}

Status V1Backend::freeze(const Cgroup& cg, bool frozen) {
  if (!features_.freeze) return logic_error("freeze", "no v1 freezer hierarchy is mounted", cg.rel);
  return v1_.freezer_freeze(cg, frozen);
}

Status V1Backend::kill(const Cgroup& cg) {
  FreezeFn freeze;
  if (features_.freeze) freeze = [&](bool f) { return v1_.freezer_freeze(cg, f); };
  return kill_by_freezing(freeze, distinct_dirs(cg));
}

Status V1Backend::signal(const Cgroup& cg, int sig) {
  return signal_subtrees(distinct_dirs(cg), sig);
}

Result<std::vector<pid_t>> V1Backend::procs(const Cgroup& cg) const {
  return procs_of(distinct_dirs(cg));
}

Status V1Backend::remove(const Cgroup& cg) { return remove_cgroup(*this, cg); }

Placement V1Backend::placement(const Cgroup& cg) const { return {distinct_dirs(cg)}; }

Result<UniqueFd> V1Backend::memory_threshold_eventfd(const Cgroup& cg, uint64_t bytes) {
  return v1_.usage_threshold_eventfd(cg, bytes);
}

Result<UniqueFd> V1Backend::memory_pressure_trigger(const Cgroup& cg, Duration, Duration) {
  return v1_.pressure_level_eventfd(cg);
}

}  // namespace sandgate::controller
