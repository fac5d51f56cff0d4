// The pure cgroup v1 backend (Documentation/admin-guide/cgroup-v1/): one hierarchy per
// controller, limits in memory.limit_in_bytes, cpu.cfs_quota_us, cpu.shares, pids.max,
// blkio.throttle.*_bps_device; memory
// pressure only as memory.pressure_level notifications; freeze through the freezer hierarchy,
// and kill emulated as freeze + SIGKILL + thaw.
//
// V1Hierarchies is the v1 controller part on its own (limits and usage): the v1 backend is it
// plus the freezer, the hybrid backend is it plus the unified mount.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "controller/cgroup.h"
#include "controller/cgroup_internal.h"

namespace sandgate::controller {

class V1Hierarchies {
 public:
  // The hierarchies (memory, cpu, cpuacct, pids, blkio, and freezer when `with_freezer`) the
  // layout mounts; a missing one is simply absent and a limit that needs it is an error naming it.
  // cpuset is never used: its children need cpuset.cpus/mems before a process can join.
  V1Hierarchies(const CgroupLayout& layout, bool with_freezer);

  // hierarchy -> mount point; comounted controllers ("cpu,cpuacct") share a mount.
  const std::map<std::string, std::string>& mounts() const { return mounts_; }
  bool has(const std::string& hierarchy) const { return mounts_.count(hierarchy) > 0; }

  // Makes `rel` in each distinct mount, and in the mounts of `more` (hierarchy -> mount: the
  // hybrid layout's unified one), recorded in `state` in one write, and fills cg.dirs for
  // every hierarchy.
  Status create(const std::string& rel, RunState* state, Cgroup& cg,
                const std::map<std::string, std::string>& more = {}) const;
  // memory_max, cpu_cores, cpu_weight, pids_max, io_read_bps / io_write_bps (blkio.throttle.
  // read_bps_device / write_bps_device "MAJ:MIN N" for io_device); memory_high is an error
  // naming it (v1 has no soft limit the kernel throttles at). Every field is checked before
  // any is written.
  Status set_limits(const Cgroup& cg, const Limits& limits) const;
  // The memory, cpu, cpuacct and pids counter files of `cg` (for read_counters and
  // CounterReader); a hierarchy the cgroup lacks leaves its counters at zero. v1 counts no
  // memory.high or plain OOM events: memory_events.max is memory.failcnt,
  // memory_events.oom_kill is memory.oom_control "oom_kill". Full reads only: memory.failcnt
  // and cpu.stat (throttling).
  std::vector<cgroup_detail::CounterFile> counter_files(const Cgroup& cg) const;
  // An eventfd registered for memory.pressure_level "medium" through cgroup.event_control
  // (Documentation/admin-guide/cgroup-v1/memory.rst, "Memory Pressure").
  Result<UniqueFd> pressure_level_eventfd(const Cgroup& cg) const;
  // An eventfd registered for a memory.usage_in_bytes threshold of `bytes` through
  // cgroup.event_control (CgroupBackend::memory_threshold_eventfd).
  Result<UniqueFd> usage_threshold_eventfd(const Cgroup& cg, uint64_t bytes) const;
  // freezer.state FROZEN / THAWED, polled (bounded) until the state is reached. Thawing
  // thaws the whole subtree, so a killed task below can exit.
  Status freezer_freeze(const Cgroup& cg, bool frozen) const;

 private:
  std::map<std::string, std::string> mounts_;
};

class V1Backend final : public CgroupBackend {
 public:
  explicit V1Backend(const CgroupLayout& layout);

  CgroupLayoutKind kind() const override { return CgroupLayoutKind::kV1; }
  const CgroupFeatures& features() const override { return features_; }
  Result<Cgroup> create(const std::string& rel, RunState* state) override;
  Status set_limits(const Cgroup& cg, const Limits& limits) override;
  Result<Usage> read_usage(const Cgroup& cg) const override;
  std::unique_ptr<UsageReader> usage_reader(const Cgroup& cg) const override;
  Status freeze(const Cgroup& cg, bool frozen) override;
  Status kill(const Cgroup& cg) override;
  Status signal(const Cgroup& cg, int sig) override;
  Result<std::vector<pid_t>> procs(const Cgroup& cg) const override;
  Status remove(const Cgroup& cg) override;
  Placement placement(const Cgroup& cg) const override;
  // `stall` and `window` cannot be expressed in v1: the kernel decides "medium" itself.
  Result<UniqueFd> memory_pressure_trigger(const Cgroup& cg, Duration stall,
                                           Duration window) override;
  Result<UniqueFd> memory_threshold_eventfd(const Cgroup& cg, uint64_t bytes) override;

 private:
  // The files read_usage and usage_reader read: V1Hierarchies' counters.
  Result<std::vector<cgroup_detail::CounterFile>> counter_files(const Cgroup& cg) const;

  V1Hierarchies v1_;
  CgroupFeatures features_;
};

}  // namespace sandgate::controller
