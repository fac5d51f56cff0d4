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
// Makes a provider of a family from its whole name ("external:/opt/x/provider").
using FamilyFactory = std::function<Result<std::unique_ptr<Provider>>(
    const std::string& name, const ProviderOptions& options)>;

class Registry {
 public:
  struct Entry {
    ProviderInfo info;
    ProviderFactory factory;
  };

  // Precondition: name not registered yet.
  void add(ProviderInfo info, ProviderFactory factory);
  // Names beginning with `prefix` that are not registered by name are made by `factory`
  // (external:/path/to/program: any program, no registration needed).
  void add_family(std::string prefix, FamilyFactory factory);
  // Unknown names are an error that lists the known ones.
  Result<std::unique_ptr<Provider>> create(const std::string& name,
                                           const ProviderOptions& options) const;
  const Entry* find(const std::string& name) const;
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;
  std::vector<std::pair<std::string, FamilyFactory>> families_;
};

// Adds every provider built into sandgate: host_dir and namespaces.
void register_builtin_providers(Registry& registry);

struct ExternalCommand;
// Adds the external providers: each configured one by name (external:NAME, from a providers
// config file), and the external: family for a program named by path (external:./prog).
void register_external_providers(Registry& registry,
                                 const std::vector<ExternalCommand>& configured);

}  // namespace sandgate::providers
