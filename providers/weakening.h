// Test-only weakenings of the namespace provider, for `sandgate probe --self-test` alone: the
// probe suite must flag each one (mutation testing of the isolation, not of the code).
//
// Unreachable elsewhere: a provider honours them only when ProviderOptions::self_test_weakenings
// is set, which only the probe self-test does; no other command, flag, policy or environment
// variable sets it, and create() refuses a spec that carries one otherwise.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/result.h"

namespace sandgate::providers {

enum class Weakening {
  kMountHome,           // bind the launching user's home read-write at the same path
  kPassHostEnv,         // pass the whole host environment to calls
  kShareHostNetwork,    // no new network namespace: the launcher's (in probe: the lab's)
  kRootWithCaps,        // calls run as uid 0 with the full capability sets, no no_new_privs
  kNoSeccomp,           // no syscall filter
  kReuseWorkspace,      // one workspace shared by every run (not removed at destroy)
  kShareTmp,            // /tmp is one host directory shared by every run
};

std::string to_string(Weakening w);  // "mount_home", "pass_host_env", ...
Result<Weakening> weakening_from_string(const std::string& name);
std::vector<Weakening> all_weakenings();

}  // namespace sandgate::providers
