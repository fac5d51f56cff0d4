// The hybrid backend (docs/DESIGN.md, "Hosts the controller must handle"): v1 controller
// hierarchies for limits and usage (V1Hierarchies, shared with the v1 backend) and the
// controller-less unified cgroup2 mount for per-cgroup PSI, cgroup.freeze and cgroup.kill
// (the `unified` functions, shared with the v2 backend). A call's process is placed in both.
#pragma once

#include "controller/cgroup.h"
#include "controller/cgroup_internal.h"
#include "controller/cgroup_v1.h"
#include "controller/cgroup_v2.h"

namespace sandgate::controller {

class HybridBackend final : public CgroupBackend {
 public:
  HybridBackend(const CgroupLayout& layout, cgroup_detail::KernelVersion kernel);

  CgroupLayoutKind kind() const override { return CgroupLayoutKind::kHybrid; }
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
  Result<UniqueFd> memory_threshold_eventfd(const Cgroup& cg, uint64_t bytes) override;
  Status prime_attach() override { return unified::move_self_in_place(unified_mount_); }

 private:
  // The files read_usage and usage_reader read: V1Hierarchies' counters and the unified
  // mount's pressure files.
  Result<std::vector<cgroup_detail::CounterFile>> counter_files(const Cgroup& cg) const;

  std::string unified_mount_;
  V1Hierarchies v1_;
  CgroupFeatures features_;
};

}  // namespace sandgate::controller
