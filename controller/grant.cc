// Grants: what an intent's grant is under the policy's mode (how a grant becomes cgroup limits
// and rlimits is in grant_limits.cc).
#include "controller/policy.h"

namespace sandgate::controller {

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
