#include "providers/registry.h"

#include <cassert>

#include "providers/host_dir.h"
#include "providers/namespaces.h"
#include "providers/podman.h"

namespace sandgate::providers {

void Registry::add(ProviderInfo info, ProviderFactory factory) {
  assert(find(info.name) == nullptr);
  entries_.push_back({std::move(info), std::move(factory)});
}

const Registry::Entry* Registry::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.info.name == name) return &e;
  return nullptr;
}

Result<std::unique_ptr<Provider>> Registry::create(const std::string& name,
                                                   const ProviderOptions& options) const {
  if (const Entry* e = find(name)) return e->factory(options);
  std::string known;
  for (const auto& e : entries_) known += (known.empty() ? "" : ", ") + e.info.name;
  return logic_error("select provider", "unknown provider '" + name + "' (known: " + known + ")");
}

void register_builtin_providers(Registry& registry) {
  registry.add(HostDirProvider::static_info(), [](const ProviderOptions& o) {
    return HostDirProvider::make(o);
  });
  registry.add(NamespacesProvider::static_info(), [](const ProviderOptions& o) {
    return NamespacesProvider::make(o);
  });
  registry.add(PodmanProvider::static_info(),
               [](const ProviderOptions& o) { return PodmanProvider::make(o); });
}

}  // namespace sandgate::providers
