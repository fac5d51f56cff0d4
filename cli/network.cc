#include "cli/network.h"

namespace sandgate::cli {

Result<std::optional<sockaddr_in>> dns_upstream_of(const NetArgs& a) {
  if (a.dns_upstream.empty()) return std::optional<sockaddr_in>();
  if (a.mode != "allowlist")
    return logic_error("--dns-upstream", "--dns-upstream needs --net allowlist");
  SG_ASSIGN_OR_RETURN(auto addr, session::parse_dns_upstream(a.dns_upstream));
  return std::optional<sockaddr_in>(addr);
}

Status apply_net_args(const NetArgs& a, const std::vector<EgressRule>& policy_egress,
                      providers::EnvSpec& spec) {
  if (a.mode == "none") {
    if (!a.allow.empty() || !a.upstream.empty() || !a.dns_upstream.empty())
      return logic_error("--allow",
                         "--allow, --net-upstream and --dns-upstream need --net allowlist");
    spec.network = providers::NetworkMode::kNone;
    return {};
  }
  spec.network = providers::NetworkMode::kAllowlist;
  spec.egress = policy_egress;
  auto rules = parse_egress_rules(a.allow);
  if (!rules.ok()) return std::move(rules).error().context_add("--allow");
  spec.egress.insert(spec.egress.end(), rules->begin(), rules->end());
  if (a.upstream.empty())
    return logic_error("--net-upstream",
                       "--net allowlist needs --net-upstream NETNS: where the "
                       "run's allowed traffic goes");
  spec.upstream_netns = a.upstream;
  if (has_names(spec.egress) && a.dns_upstream.empty()) {
    std::string first;
    for (const auto& r : spec.egress)
      if (r.is_name() && first.empty()) first = r.text;
    return logic_error("--dns-upstream",
                       "the allowlist names a host (" + first +
                           "): --dns-upstream ADDR[:PORT] must name the DNS server its resolver "
                           "asks (reachable from --net-upstream)");
  }
  return {};
}

Result<std::unique_ptr<ebpf::EgressGuard>> open_guard_for(const providers::EnvSpec& spec) {
  if (spec.network != providers::NetworkMode::kAllowlist)
    return std::unique_ptr<ebpf::EgressGuard>();
  auto g = ebpf::EgressGuard::open();
  if (!g.ok())
    return std::move(g).error().context_add(
        "--net allowlist needs the eBPF egress guard (sandgate doctor, \"bpf\")");
  return g;
}

}  // namespace sandgate::cli
