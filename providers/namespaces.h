// namespaces: sandgate's own namespace jail (no bubblewrap). Each run gets new user, mount,
// pid, net, ipc, uts and cgroup namespaces; a root assembled from read-only binds of the host's
// base system, a generated /etc, fresh /proc, minimal /dev and tmpfs /tmp; the workspace as the
// only writable host-backed path. Calls run as uid 10001 with no capabilities, no_new_privs and
// a seccomp filter, each in its own session; the run's supervisor is pid 1, so the whole
// process tree dies with the run.
#pragma once

#include <memory>

#include "providers/provider.h"

namespace sandgate::providers {

class NamespacesProvider : public Provider {
 public:
  static const ProviderInfo& static_info();
  static Result<std::unique_ptr<Provider>> make(const ProviderOptions& options);

  const ProviderInfo& info() const override { return static_info(); }
  // Needs root (to map ids and assemble mounts) and user namespaces.
  Status available() const override;
  Result<std::unique_ptr<Environment>> create(const EnvSpec& spec) override;

 private:
  explicit NamespacesProvider(ProviderOptions options) : options_(std::move(options)) {}
  ProviderOptions options_;
};

}  // namespace sandgate::providers
