// sandgate providers: every provider with its capabilities and whether this host can run it.
#include <iostream>

#include "cli/common.h"
#include "core/json.h"

namespace sandgate::cli {
namespace {

int run_providers(Globals& g, bool json) {
  providers::ProviderOptions options = g.provider_options();
  options.allow_unsafe_host = true;  // only to ask it questions; nothing is created
  Json out = Json::array();
  for (const auto& entry : g.registry.entries()) {
    std::string availability = "available";
    auto p = entry.factory(options);
    if (!p.ok()) availability = p.error().message();
    else if (auto s = (*p)->available(); !s.ok()) availability = s.error().message();
    // An external provider's declarations are known once it has described itself.
    const providers::ProviderInfo& info = p.ok() ? (*p)->info() : entry.info;
    Json caps = Json::array();
    for (auto c : info.capabilities) caps.push_back(to_string(c));
    out.push_back({{"name", info.name},
                   {"unsafe", info.unsafe},
                   {"summary", info.summary},
                   {"capabilities", caps},
                   {"available", availability == "available"},
                   {"availability", availability}});
    if (!json) {
      std::cout << providers::display_name(info) << "\n  " << info.summary
                << "\n  capabilities: " << to_string(info.capabilities)
                << "\n  on this host: " << availability << "\n";
    }
  }
  if (!json)
    std::cout << "external:PATH  any program speaking docs/PROVIDER_PROTOCOL.md; configure names "
                 "with --providers-config\n";
  if (json) std::cout << dump_json(Json{{"schema_version", 1}, {"providers", out}}, 2) << "\n";
  return 0;
}

}  // namespace

void add_providers_command(CLI::App& app, Globals& g) {
  auto json = std::make_shared<bool>(false);
  auto* sub = app.add_subcommand(
      "providers", "List isolation providers, their capabilities and whether this host can run them.");
  sub->add_flag("--json", *json, "machine-readable output");
  sub->callback([&g, json] { g.exit_code = run_providers(g, *json); });
}

}  // namespace sandgate::cli
