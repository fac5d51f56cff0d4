// Grants: what an intent's grant is under the policy's mode, and how a grant becomes cgroup
// limits (to_limits) and per-process rlimits (to_process_limits).
#include "controller/policy.h"

namespace sandgate::controller {

Limits Grant::to_limits() const {
  Limits l;
  l.memory_max = memory_max;
  l.memory_high = memory_high;
  l.cpu_cores = cpu_cores;
  l.pids_max = pids_max;
  if (io_read_bps) l.io_read_bps = io_read_bps->value;
  if (io_write_bps) l.io_write_bps = io_write_bps->value;
  return l;  // io_device: the controller's to fill in
}

ProcessLimits Grant::to_process_limits() const {
  ProcessLimits l;
  l.open_files = open_files;
  if (file_size) l.file_size = file_size->value;
  return l;
}

Grant grant_for(const Policy& p, const std::string& intent) {
  auto it = p.intents.find(intent);
  if (it == p.intents.end()) it = p.intents.find("default");
  if (it == p.intents.end()) return Grant{};
  if (p.mode == PolicyMode::kStatic) {
    // Static mode: the run ceiling is the one limit; a call keeps only its wall-clock timeout,
    // and the run's rlimits (per process, so they cannot be a shared ceiling: every call gets
    // them, or nothing applies them at all).
    Grant g;
    g.timeout = it->second.timeout;
    g.open_files = p.run.open_files;
    g.file_size = p.run.file_size;
    return g;
  }
  return it->second;
}

Policy static_policy(const Grant& run_limit) {
  Policy p = default_policy();
  p.name = "static";
  p.mode = PolicyMode::kStatic;
  p.run = run_limit;
  return p;
}

}  // namespace sandgate::controller
