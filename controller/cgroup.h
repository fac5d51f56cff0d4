// One interface over the three cgroup layouts a host can have (docs/DESIGN.md, "Hosts the
// controller must handle"): pure v2, hybrid (v1 controllers for limits + the unified cgroup2
// mount for PSI, freeze and kill) and pure v1. The controller, the monitor and the ladder talk
// only to this; what a layout cannot do is a feature flag, never a silent no-op.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "controller/cgroup_layout.h"
#include "core/fd.h"
#include "core/host_features.h"
#include "core/placement.h"
#include "core/result.h"
#include "core/state.h"
#include "core/units.h"

namespace sandgate::controller {

// What a cgroup is limited to. An unset field is left at the kernel default (no limit).
struct Limits {
  std::optional<Bytes> memory_max;     // v2 memory.max; v1 memory.limit_in_bytes
  std::optional<Bytes> memory_high;    // v2 memory.high (reclaim + throttle); v1 has none
  std::optional<double> cpu_cores;     // v2 cpu.max "quota period"; v1 cpu.cfs_quota_us/period_us
  std::optional<uint32_t> cpu_weight;  // 1..10000 (v2 cpu.weight); v1 cpu.shares = w*1024/100
  std::optional<uint64_t> pids_max;    // pids.max
  // Bytes per second read from / written to `io_device`: v2 io.max "MAJ:MIN rbps=N wbps=M";
  // v1 blkio.throttle.read_bps_device / write_bps_device "MAJ:MIN N". A set io field without
  // io_device is an error naming io_device.
  std::optional<uint64_t> io_read_bps;
  std::optional<uint64_t> io_write_bps;
  std::string io_device;  // "MAJOR:MINOR" of the block device the io limits apply to
  bool operator==(const Limits&) const = default;
};

struct MemoryEvents {
  uint64_t high = 0, max = 0, oom = 0, oom_kill = 0;
};

// One sample of a cgroup's counters.
struct Usage {
  uint64_t memory_current = 0;
  std::optional<uint64_t> memory_peak;  // v2 memory.peak; v1 memory.max_usage_in_bytes
  uint64_t cpu_usage_us = 0;            // v2 cpu.stat usage_usec; v1 cpuacct.usage / 1000
  uint64_t cpu_throttled_us = 0;  // v2 cpu.stat throttled_usec; v1 cpu.stat throttled_time / 1000
  uint64_t cpu_nr_throttled = 0;
  uint64_t pids_current = 0;
  bool pids_counted = false;  // pids.current was read (a layout without pids leaves it false)
  uint64_t pids_max_events = 0;             // pids.events "max": forks refused at pids.max
  MemoryEvents memory_events;               // v2 memory.events; v1 memory.oom_control + failcnt
  std::optional<Pressure> memory_pressure;  // v2 / unified memory.pressure (parse_pressure)
  std::optional<Pressure> cpu_pressure;
};

// How much more memory a cgroup's limit lets its processes charge (CgroupBackend::memory_room).
struct MemoryRoom {
  std::optional<uint64_t> limit;  // none: no limit of its own (v2 "max", v1 the maximum)
  uint64_t charged = 0;           // memory.current / memory.usage_in_bytes
  // Page cache nothing maps, which the kernel reclaims before it OOM-kills: the file LRU less
  // what is mapped (memory.stat). Read only when asked for (memory_room's with_reclaimable).
  uint64_t reclaimable = 0;
};

// What this layout can do, answered before anything is created.
struct CgroupFeatures {
  bool memory_high = false;   // a soft limit the kernel throttles at (v2 only)
  bool memory_peak = false;   // a kernel-kept high-water mark
  bool psi = false;           // per-cgroup *.pressure
  bool psi_triggers = false;  // pressure files take triggers (poll POLLPRI), else v1 pressure_level
  bool freeze = false;        // cgroup.freeze, or the v1 freezer
  bool atomic_kill = false;   // cgroup.kill; otherwise kill = freeze + SIGKILL + thaw
  bool io_limits = false;     // per-device bandwidth limits: v2 io.max, v1 blkio.throttle.*
};
std::vector<std::string> describe(const CgroupFeatures& f);  // "memory.high: no (v1)" ...

// One logical cgroup across the hierarchies a backend uses.
struct Cgroup {
  std::string rel;                          // "sandgate/default/r1/call-3"
  std::map<std::string, std::string> dirs;  // hierarchy ("unified", "memory", "cpu", "pids",
                                            // "freezer", "cpuacct", "blkio") -> absolute
                                            // directory
};

// One cgroup's counters, read again and again (the burst monitor's samples). A backend's own
// reader keeps the control files open and re-reads them with pread at offset 0 (cgroupfs files
// regenerate their text on each read from offset 0), so a sample costs no path lookup.
//
// read(true) reads every counter CgroupBackend::read_usage does but the cgroup's own pressure
// (memory_pressure and cpu_pressure stay unset: no sample acts on them). read(false) reads only
// what the ladder acts on at every step: memory_current, memory_events.oom_kill, cpu_usage_us
// (the peak-rate window needs a fresh value at every step), pids_current and pids_max_events;
// a backend may refresh more where they share a file (v2 memory.events, cpu.stat), and may
// leave pids_max_events and v1's oom_kill as they were while the cgroup's CPU time has not
// moved (only its own tasks move them: cgroup_detail::Moves). Every other
// field keeps the value of the last full read, never zero: cpu throttling on v1,
// memory.failcnt and memory_peak (a high-water mark the kernel keeps, so a full read
// now and then and the last one at the end of a call miss nothing; memory_current covers the
// samples between). The first read is always a full one. Once the cgroup is
// removed, reads fail with ENOENT or ENODEV (cgroup_detail::is_gone). Not thread-safe: one
// reader per reading thread.
class UsageReader {
 public:
  virtual ~UsageReader() = default;
  virtual Result<Usage> read(bool full) = 0;
  // Opens now what the first read would (a spare cgroup's reader, off the call's path), so
  // that even a call's first and last reads are preads. A reader that opens nothing: a no-op.
  virtual Status prepare() { return {}; }
};

class CgroupBackend {
 public:
  virtual ~CgroupBackend() = default;
  virtual CgroupLayoutKind kind() const = 0;
  virtual const CgroupFeatures& features() const = 0;

  // Makes `rel` (and missing parents) in every hierarchy, enabling the controllers it needs on
  // v2 (cgroup.subtree_control of each parent). Each directory it makes is recorded in `state`
  // (when not null) before mkdir. An existing directory is reused.
  virtual Result<Cgroup> create(const std::string& rel, RunState* state) = 0;
  // Applies every set field; a field this layout cannot apply is an error naming it (callers
  // consult features() first).
  virtual Status set_limits(const Cgroup& cg, const Limits& limits) = 0;
  virtual Result<Usage> read_usage(const Cgroup& cg) const = 0;
  // Freezes or thaws and waits (bounded) until the kernel reports the state reached.
  virtual Status freeze(const Cgroup& cg, bool frozen) = 0;
  // Kills every process: cgroup.kill where there is one, else freeze + SIGKILL + thaw.
  virtual Status kill(const Cgroup& cg) = 0;
  // Sends `sig` to every process (cancel = SIGTERM).
  virtual Status signal(const Cgroup& cg, int sig) = 0;
  virtual Result<std::vector<pid_t>> procs(const Cgroup& cg) const = 0;
  // Kills what is left, waits (bounded) until empty and removes the directories, children of
  // `cg` first. ENOENT / ENODEV on the way are normal (expect the races) and not errors.
  virtual Status remove(const Cgroup& cg) = 0;
  // The cgroup.procs directories a call's first process must be written into.
  virtual Placement placement(const Cgroup& cg) const = 0;
  // Moves process `pid` into `cg` in every hierarchy (cgroup.procs of each placement dir).
  virtual Status attach(const Cgroup& cg, pid_t pid);
  // Moves this process into the cgroup it is already in, in one hierarchy: nothing changes, but
  // a move takes cgroup_threadgroup_rwsem for writing, which waits for an RCU grace period
  // after a quiet spell (5-20 ms on this project's VMs), and the moves that follow within
  // about a grace period do not wait (kernel/rcu/sync.c; `doctor` measures both). Run on a
  // the controller's reaper as a run begins (Controller::begin_run), it starts that wait ahead of
  // the run's placements, which then wait only for what is left of it. Blocks for the grace period.
  // The default (no unified hierarchy to move in): nothing.
  virtual Status prime_attach() { return {}; }
  // An fd that polls readable (POLLPRI on v2 triggers, POLLIN on a v1 eventfd) when the
  // cgroup's memory pressure crosses `stall` within `window` (v2/unified: a PSI trigger,
  // Documentation/accounting/psi.rst; v1: memory.pressure_level "medium" via
  // cgroup.event_control).
  virtual Result<UniqueFd> memory_pressure_trigger(const Cgroup& cg, Duration stall,
                                                   Duration window) = 0;
  // An eventfd that polls readable (POLLIN) each time `cg`'s memory charge crosses `bytes`,
  // up or down: v1's memory.usage_in_bytes threshold through cgroup.event_control
  // (Documentation/admin-guide/cgroup-v1/memory.rst, "Memory thresholds"); the kernel checks
  // it every 128 page charges, so about every 512 KiB. cgroup v2 has no such notification:
  // this default answers EOPNOTSUPP, and the charge is read at each sample only.
  virtual Result<UniqueFd> memory_threshold_eventfd(const Cgroup& cg, uint64_t bytes);
  // `cg`'s memory limit and charge, and with `with_reclaimable` also the page cache the kernel
  // would reclaim before it OOM-kills (memory.stat: a longer file, read only when needed).
  // The default reads the v1 memory hierarchy's files where the cgroup has one, else the
  // unified hierarchy's.
  virtual Result<MemoryRoom> memory_room(const Cgroup& cg, bool with_reclaimable) const;
  // A reader of `cg`'s counters (see UsageReader); it opens nothing until its first read, so
  // this cannot fail, and it must not outlive the backend. This default calls read_usage on
  // every read (full or not), so a fake backend needs nothing more.
  virtual std::unique_ptr<UsageReader> usage_reader(const Cgroup& cg) const;
};

// The backend for a layout: kV2, kHybrid or kV1; kNone is an error that says so.
Result<std::unique_ptr<CgroupBackend>> make_cgroup_backend(const CgroupLayout& layout);

// "key value\n" files (memory.events, cpu.stat, pids.events, memory.stat); pure.
Result<std::map<std::string, uint64_t>> parse_flat_keyed(std::string_view text);

}  // namespace sandgate::controller
