// namespaces: sandgate's own namespace jail (no bubblewrap). Each run gets new user, mount,
// pid, net, ipc, uts and cgroup namespaces; a root assembled from read-only binds of the host's
// base system, a generated /etc, fresh /proc, minimal /dev and tmpfs /tmp; the workspace as the
// only writable host-backed path. Calls run as uid 10001 with no capabilities, no_new_privs,
// a Landlock ruleset (where the kernel has it) and a seccomp filter, each in its own session;
// the run's supervisor is pid 1, so the whole process tree dies with the run.
#pragma once

#include <memory>

#include "providers/provider.h"

namespace sandgate::providers {

class NamespacesProvider : public Provider {
 public:
  // What every namespaces provider declares; proc.landlock is added per instance.
  static const ProviderInfo& static_info();
  // This kernel's Landlock ABI (0: none), from a real landlock_create_ruleset call.
  static int landlock_abi();
  static Result<std::unique_ptr<Provider>> make(const ProviderOptions& options);

  // static_info() with proc.landlock when this kernel has Landlock (the jail applies it).
  const ProviderInfo& info() const override { return info_; }
  // Needs root (to map ids and assemble mounts) and user namespaces.
  Status available() const override;
  Result<std::unique_ptr<Environment>> create(const EnvSpec& spec) override;
  // The default seccomp program and the shared /etc/alternatives mount.
  void warm_up() override;

 private:
  NamespacesProvider(ProviderOptions options, int landlock_abi);
  ProviderOptions options_;
  ProviderInfo info_;
};

}  // namespace sandgate::providers
