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

Status check_secret_name(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 128 && name != "." && name != "..";
  for (char c : name)
    ok = ok && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '.' || c == '-');
  if (!ok)
    return logic_error("secret name",
                       "'" + name + "' must be 1-128 of [A-Za-z0-9_.-] and not '.' or '..'");
  return {};
}

std::string display_name(const ProviderInfo& info) {
  return info.unsafe ? info.name + " (UNSAFE: no isolation)" : info.name;
}

}  // namespace sandgate::providers
