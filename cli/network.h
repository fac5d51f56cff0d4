// The network options of the commands that make runs (exec, probe): --net, --allow and
// --net-upstream, and how they become an EnvSpec's network.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/net_options.h"
#include "core/egress.h"
#include "core/result.h"
#include "ebpf/egress.h"
#include "providers/provider.h"
#include "session/dns_resolver.h"

namespace sandgate::cli {

// Fills spec.network, spec.egress (the policy's entries, then --allow's) and
// spec.upstream_netns; an error names the option and the entry.
Status apply_net_args(const NetArgs& a, const std::vector<EgressRule>& policy_egress,
                      providers::EnvSpec& spec);
// --dns-upstream as the run session takes it (unset without it); an error names the option.
Result<std::optional<sockaddr_in>> dns_upstream_of(const NetArgs& a);

// The guard an allowlisted run needs (null for --net none); an error says how to check why it
// cannot load (`sandgate doctor`).
Result<std::unique_ptr<ebpf::EgressGuard>> open_guard_for(const providers::EnvSpec& spec);

}  // namespace sandgate::cli
