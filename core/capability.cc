#include "core/capability.h"

#include <algorithm>

#include "core/strings.h"

namespace sandgate {

namespace {
struct CapName {
  Capability cap;
  const char* name;
};
constexpr CapName kCapNames[] = {
    {Capability::kFsIsolated, "fs.isolated"},
    {Capability::kFsReadonlyBase, "fs.readonly_base"},
    {Capability::kNetNone, "net.none"},
    {Capability::kNetEgressPolicy, "net.egress_policy"},
    {Capability::kCredsScrubbedEnv, "creds.scrubbed_env"},
    {Capability::kProcPidNs, "proc.pid_ns"},
    {Capability::kProcUserNs, "proc.user_ns"},
    {Capability::kProcSeccomp, "proc.seccomp"},
    {Capability::kProcNoNewPrivs, "proc.no_new_privs"},
    {Capability::kProcNoCaps, "proc.no_caps"},
    {Capability::kProcLandlock, "proc.landlock"},
    {Capability::kIpcIsolated, "ipc.isolated"},
    {Capability::kKernelSeparate, "kernel.separate"},
    {Capability::kLimitsPerCall, "limits.per_call"},
    {Capability::kEphemeralWorkspace, "ephemeral.workspace"},
};
}  // namespace

std::string to_string(Capability c) {
  for (const auto& n : kCapNames)
    if (n.cap == c) return n.name;
  return "unknown";
}

Result<Capability> capability_from_string(const std::string& name) {
  for (const auto& n : kCapNames)
    if (name == n.name) return n.cap;
  std::string known;
  for (const auto& n : kCapNames) known += (known.empty() ? "" : ", ") + std::string(n.name);
  return logic_error("parse capability",
                     "unknown capability '" + excerpt(name) + "' (known: " + known + ")");
}

std::vector<Capability> all_capabilities() {
  std::vector<Capability> all;
  for (const auto& n : kCapNames) all.push_back(n.cap);
  return all;
}

std::string to_string(const CapabilitySet& set) {
  std::string s;
  for (auto c : set) s += (s.empty() ? "" : ", ") + to_string(c);
  return s.empty() ? "(none)" : s;
}

std::vector<Capability> missing_capabilities(const CapabilitySet& have,
                                             const std::vector<Capability>& required) {
  std::vector<Capability> missing;
  for (auto c : required)
    if (!have.contains(c) && std::find(missing.begin(), missing.end(), c) == missing.end())
      missing.push_back(c);
  return missing;
}

}  // namespace sandgate
