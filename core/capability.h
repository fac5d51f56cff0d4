// What an isolation provider can honour, by name. A policy lists the capabilities it requires;
// a provider lacking any is refused with the list of what it lacks ("visibly disqualified").
// Shared vocabulary: providers declare them, policies require them, reports print them.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "core/result.h"

namespace sandgate {

enum class Capability {
  kFsIsolated,          // fs.isolated: host paths outside the workspace are not reachable
  kFsReadonlyBase,      // fs.readonly_base: the base system is mounted read-only
  kNetNone,             // net.none: no network but loopback
  kNetEgressPolicy,     // net.egress_policy: egress allowlists are enforced
  kCredsScrubbedEnv,    // creds.scrubbed_env: no host environment unless allowlisted
  kProcPidNs,           // proc.pid_ns: host processes are invisible
  kProcUserNs,          // proc.user_ns: root inside is not root outside
  kProcSeccomp,         // proc.seccomp: a syscall filter denies the dangerous surface
  kProcNoNewPrivs,      // proc.no_new_privs: setuid binaries cannot raise privilege
  kProcNoCaps,          // proc.no_caps: calls run with every capability set empty
  kProcLandlock,        // proc.landlock: calls are held to a Landlock ruleset (writes, TCP,
                        // abstract sockets and signals confined to what the run allows)
  kIpcIsolated,         // ipc.isolated: SysV IPC and abstract sockets are private
  kKernelSeparate,      // kernel.separate: a separate kernel (VM)
  kLimitsPerCall,       // limits.per_call: each call can be placed in its own cgroup
  kEphemeralWorkspace,  // ephemeral.workspace: a fresh workspace per run, removed after
};
using CapabilitySet = std::set<Capability>;

std::string to_string(Capability c);  // "fs.isolated"
Result<Capability> capability_from_string(const std::string& name);
std::vector<Capability> all_capabilities();
std::string to_string(const CapabilitySet& set);  // "fs.isolated, net.none"

// The capabilities in `required` that `have` lacks, each once, in `required`'s order.
std::vector<Capability> missing_capabilities(const CapabilitySet& have,
                                             const std::vector<Capability>& required);

}  // namespace sandgate
