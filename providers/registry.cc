#include "providers/registry.h"

#include <cassert>

#include "core/strings.h"
#include "providers/external.h"
#include "providers/host_dir.h"
#include "providers/microvm.h"
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

void Registry::add_family(std::string prefix, FamilyFactory factory) {
  families_.emplace_back(std::move(prefix), std::move(factory));
}

Result<std::unique_ptr<Provider>> Registry::create(const std::string& name,
                                                   const ProviderOptions& options) const {
  if (const Entry* e = find(name)) return e->factory(options);
  for (const auto& [prefix, factory] : families_)
    if (name.starts_with(prefix)) return factory(name, options);
  std::string known;
  for (const auto& e : entries_) known += (known.empty() ? "" : ", ") + e.info.name;
  for (const auto& f : families_) known += (known.empty() ? "" : ", ") + f.first + "...";
  return logic_error("select provider", "unknown provider '" + name + "' (known: " + known + ")");
}

void register_builtin_providers(Registry& registry) {
  registry.add(HostDirProvider::static_info(),
               [](const ProviderOptions& o) { return HostDirProvider::make(o); });
  registry.add(NamespacesProvider::static_info(),
               [](const ProviderOptions& o) { return NamespacesProvider::make(o); });
  registry.add(PodmanProvider::static_info(),
               [](const ProviderOptions& o) { return PodmanProvider::make(o); });
  registry.add(MicrovmProvider::static_info(),
               [](const ProviderOptions& o) { return MicrovmProvider::make(o); });
}

void register_external_providers(Registry& registry,
                                 const std::vector<ExternalCommand>& configured) {
  for (const auto& c : configured) {
    // What it declares is known once it has described itself (when it is made).
    ProviderInfo info{c.name, "external provider: " + join(c.argv, " "), false, {}};
    registry.add(std::move(info),
                 [c](const ProviderOptions& o) { return ExternalProvider::make(o, c); });
  }
  registry.add_family(
      kExternalPrefix,
      [](const std::string& name, const ProviderOptions& o) -> Result<std::unique_ptr<Provider>> {
        std::string target = external_target(name);
        if (!names_program(target))
          return logic_error("select provider",
                             "no external provider is configured as '" + target +
                                 "' (name a program by path: external:./my-provider, or "
                                 "configure it: --providers-config FILE)");
        return ExternalProvider::make(o, ExternalCommand{name, {target}, {}});
      });
}

}  // namespace sandgate::providers
