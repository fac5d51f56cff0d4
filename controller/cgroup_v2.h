// The pure cgroup2 backend (Documentation/admin-guide/cgroup-v2.rst): one hierarchy, limits in
// memory.max/high, cpu.max, cpu.weight, pids.max, io.max; PSI, cgroup.freeze and cgroup.kill per cgroup.
//
// The `unified` functions are what cgroup2 does without any controller (pressure, freeze,
// kill); the hybrid backend uses them on its controller-less unified mount.
#pragma once

#include <string>
#include <vector>

#include "controller/cgroup.h"
#include "controller/cgroup_internal.h"

namespace sandgate::controller {

namespace unified {

// Per-cgroup PSI if the mount root has memory.pressure (absent when the kernel has no
// CONFIG_PSI or was booted with psi=0); freeze, kill and triggers by kernel version.
void add_features(const std::string& mount, cgroup_detail::KernelVersion kernel,
                  CgroupFeatures& features);
// Writes cgroup.freeze and waits (bounded) for cgroup.events to say "frozen 1" (or 0).
// Thawing thaws the whole subtree, so nothing below stays frozen on its own.
Status freeze(const std::string& dir, bool frozen);
// Writes "1" to cgroup.kill: SIGKILL to every process of the subtree at once (Linux 5.14).
Status kill(const std::string& dir);
// Whether the kernel takes any PSI trigger window from this process (CAP_SYS_RESOURCE);
// without it only multiples of 2 s.
bool may_use_any_trigger_window();
// The kernel's rules for a trigger (psi.rst, kernel/sched/psi.c), checked before writing so
// the error says which one: window 500ms..10s, 0 < stall <= window, and without
// CAP_SYS_RESOURCE (`any_window` false) a window that is a multiple of 2s.
Status check_trigger(Duration stall, Duration window, bool any_window);
// A PSI trigger: <dir>/<file> opened O_RDWR | O_NONBLOCK and "some <stall_us> <window_us>"
// written to it (Documentation/accounting/psi.rst); the fd polls POLLPRI when crossed.
Result<UniqueFd> pressure_trigger(const std::string& dir, const std::string& file, Duration stall,
                                  Duration window);
// memory.pressure and cpu.pressure of the "unified" directory, full reads only (the ladder acts
// on the host's pressure, not the call's); a missing file (no PSI) leaves them unset.
std::vector<cgroup_detail::CounterFile> pressure_files();
// This process written into the cgroup.procs of the cgroup it is in under `mount` (its
// /proc/self/cgroup "0::" line): CgroupBackend::prime_attach.
Status move_self_in_place(const std::string& mount);

}  // namespace unified

class V2Backend final : public CgroupBackend {
 public:
  V2Backend(CgroupLayout layout, cgroup_detail::KernelVersion kernel);

  CgroupLayoutKind kind() const override { return CgroupLayoutKind::kV2; }
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
  Result<UniqueFd> memory_pressure_trigger(const Cgroup& cg, Duration stall,
                                           Duration window) override;
  Status prime_attach() override { return unified::move_self_in_place(layout_.unified_mount); }

 private:
  // The files read_usage and usage_reader read: those of the controllers the cgroup has (its
  // cgroup.controllers, read once per reader) and the pressure files.
  Result<std::vector<cgroup_detail::CounterFile>> counter_files(const Cgroup& cg) const;

  CgroupLayout layout_;
  CgroupFeatures features_;
};

}  // namespace sandgate::controller
