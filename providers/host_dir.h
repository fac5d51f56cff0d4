// host_dir: the bypass cable. Runs calls in a plain per-run directory on the host, as the user
// sandgate runs as, with the host's environment: no isolation at all. It exists so that the
// harness can show what exposure looks like; it is never a default, cannot be constructed
// without an explicit unsafe opt-in, and is marked unsafe wherever it is printed.
#pragma once

#include <memory>

#include "providers/provider.h"

namespace sandgate::providers {

class HostDirProvider : public Provider {
 public:
  static const ProviderInfo& static_info();
  // Fails unless options.allow_unsafe_host is set, and says why.
  static Result<std::unique_ptr<Provider>> make(const ProviderOptions& options);

  const ProviderInfo& info() const override { return static_info(); }
  Status available() const override { return {}; }
  Result<std::unique_ptr<Environment>> create(const EnvSpec& spec) override;

 private:
  explicit HostDirProvider(ProviderOptions options) : options_(std::move(options)) {}
  ProviderOptions options_;
};

}  // namespace sandgate::providers
