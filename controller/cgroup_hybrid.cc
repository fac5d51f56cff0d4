#include "controller/cgroup_hybrid.h"

#include <signal.h>

#include "controller/cgroup_v2.h"

namespace sandgate::controller {

using namespace cgroup_detail;

HybridBackend::HybridBackend(const CgroupLayout& layout, KernelVersion kernel)
    : unified_mount_(layout.unified_mount), v1_(layout, /*with_freezer=*/false) {
  unified::add_features(unified_mount_, kernel, features_);
  features_.memory_high = false;              // the memory controller is v1's
  features_.memory_peak = v1_.has("memory");  // memory.max_usage_in_bytes
  features_.io_limits = v1_.has("blkio");     // blkio.throttle.*_bps_device
}

Result<Cgroup> HybridBackend::create(const std::string& rel, RunState* state) {
  Cgroup cg;
  cg.rel = rel;
  // No controller is enabled on the unified mount, so no subtree_control to write: it is
  // made as the v1 hierarchies are, in the same record.
  SG_TRY(v1_.create(rel, state, cg, {{"unified", unified_mount_}}));
  return cg;
}

Status HybridBackend::set_limits(const Cgroup& cg, const Limits& limits) {
  return v1_.set_limits(cg, limits);
}

Result<std::vector<CounterFile>> HybridBackend::counter_files(const Cgroup& cg) const {
  SG_TRY(dir_of(cg, "unified", "read_usage"));
  std::vector<CounterFile> files = v1_.counter_files(cg);
  for (const auto& f : unified::pressure_files()) files.push_back(f);
  return files;
}

Result<Usage> HybridBackend::read_usage(const Cgroup& cg) const {
  SG_ASSIGN_OR_RETURN(auto files, counter_files(cg));
  return read_counters(cg, files);
}

std::unique_ptr<UsageReader> HybridBackend::usage_reader(const Cgroup& cg) const {
  return std::make_unique<CounterReader>(cg, [this](const Cgroup& c) { return counter_files(c); });
}

Status HybridBackend::freeze(const Cgroup& cg, bool frozen) {
  SG_ASSIGN_OR_RETURN(std::string dir, dir_of(cg, "unified", "freeze"));
  if (!features_.freeze) return logic_error("freeze", "cgroup.freeze needs Linux 5.2", dir);
  return unified::freeze(dir, frozen);
}

Status HybridBackend::kill(const Cgroup& cg) {
  SG_ASSIGN_OR_RETURN(std::string dir, dir_of(cg, "unified", "kill"));
  if (!features_.atomic_kill) {
    FreezeFn freeze;
    if (features_.freeze) freeze = [&](bool f) { return unified::freeze(dir, f); };
    return kill_by_freezing(freeze, distinct_dirs(cg));
  }
  SG_TRY(unified::kill(dir));
  // A process is placed in every hierarchy, so cgroup.kill reaches it; one that was written
  // into the v1 directories only (a placement cut short) is swept up here.
  return signal_subtrees(distinct_dirs(cg), SIGKILL);
}

Status HybridBackend::signal(const Cgroup& cg, int sig) {
  return signal_subtrees(distinct_dirs(cg), sig);
}

Result<std::vector<pid_t>> HybridBackend::procs(const Cgroup& cg) const {
  return procs_of(distinct_dirs(cg));
}

Status HybridBackend::remove(const Cgroup& cg) { return remove_cgroup(*this, cg); }

Placement HybridBackend::placement(const Cgroup& cg) const {
  return {distinct_dirs(cg)};
}

Result<UniqueFd> HybridBackend::memory_threshold_eventfd(const Cgroup& cg, uint64_t bytes) {
  return v1_.usage_threshold_eventfd(cg, bytes);
}

Result<UniqueFd> HybridBackend::memory_pressure_trigger(const Cgroup& cg, Duration stall,
                                                        Duration window) {
  SG_ASSIGN_OR_RETURN(std::string dir, dir_of(cg, "unified", "memory pressure trigger"));
  // Without PSI triggers on the unified mount, the v1 memory controller still notifies.
  if (!features_.psi_triggers) return v1_.pressure_level_eventfd(cg);
  return unified::pressure_trigger(dir, "memory.pressure", stall, window);
}

}  // namespace sandgate::controller
