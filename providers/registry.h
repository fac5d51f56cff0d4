// A name-keyed registry of providers with an explicit list of built-ins (oomd PluginRegistry).
// Built-ins are added by one register_builtin_providers() call, not by static
// self-registration, which the linker silently drops from a static library.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "providers/provider.h"

namespace sandgate::providers {

using ProviderFactory =
    std::function<Result<std::unique_ptr<Provider>>(const ProviderOptions& options)>;

class Registry {
 public:
  struct Entry {
    ProviderInfo info;
    ProviderFactory factory;
  };

  // Precondition: name not registered yet.
  void add(ProviderInfo info, ProviderFactory factory);
  // Unknown names are an error that lists the known ones.
  Result<std::unique_ptr<Provider>> create(const std::string& name,
                                           const ProviderOptions& options) const;
  const Entry* find(const std::string& name) const;
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;
};

// Adds every provider built into sandgate: host_dir and namespaces.
void register_builtin_providers(Registry& registry);

}  // namespace sandgate::providers
