#include "providers/provider.h"

#include <algorithm>

namespace sandgate::providers {

Status check_requirements(const Provider& provider, const std::vector<Capability>& required) {
  auto missing = missing_capabilities(provider.capabilities(), required);
  if (missing.empty()) return {};
  std::string list;
  for (auto c : missing) list += (list.empty() ? "" : ", ") + to_string(c);
  return logic_error("check provider requirements",
                     "provider " + display_name(provider.info()) + " is disqualified: it lacks " + list);
}

BindMount parse_bind_mount(const std::string& spec) {
  auto colon = spec.find(':');
  if (colon == std::string::npos) return {spec, spec};
  return {spec.substr(0, colon), spec.substr(colon + 1)};
}

std::string display_name(const ProviderInfo& info) {
  return info.unsafe ? info.name + " (UNSAFE: no isolation)" : info.name;
}

}  // namespace sandgate::providers
