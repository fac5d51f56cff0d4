#include "cli/network.h"

namespace sandgate::cli {

void add_net_options(CLI::App* sub, NetArgs& a) {
  sub->add_option("--net", a.mode,
                  "the run's network: none (default: loopback only) or allowlist (a veth to\n"
                  "--net-upstream; the kernel's egress guard lets through only the entries of\n"
                  "--allow and of the policy's \"egress\", refusing the rest with EPERM; the\n"
                  "run's /etc/resolv.conf names its own resolver, which answers the list's\n"
                  "names and REFUSES every other name, never forwarding it)")
      ->check(CLI::IsMember({"none", "allowlist"}));
  sub->add_option(
      "--allow", a.allow,
      "an egress allowlist entry (repeatable): [tcp:|udp:]ADDRESS[/PREFIX]:PORT,\n"
      "[IPV6[/PREFIX]]:PORT or [tcp:|udp:]NAME:PORT, PORT a number or *; without\n"
      "tcp:/udp: both. A NAME (no wildcard) is resolved by the run's resolver\n"
      "through --dns-upstream; the addresses of each answer are allowed with the\n"
      "entry's port before the answer reaches the run (IPv4 only).\n"
      "  --allow 203.0.113.20:443 --allow registry.sandgate.test:443 --allow '10.0.0.0/8:*'");
  sub->add_option("--net-upstream", a.upstream,
                  "with --net allowlist: the network namespace the run's traffic goes to (an\n"
                  "`ip netns` mount such as /run/netns/egress, or /proc/PID/ns/net). sandgate\n"
                  "never changes its routes: give it a namespace whose only way out is the one\n"
                  "you mean");
  sub->add_option("--dns-upstream", a.dns_upstream,
                  "with --net allowlist: the DNS server (IPV4[:PORT], port 53 by default,\n"
                  "reachable from --net-upstream) the run's resolver asks about the list's\n"
                  "names; required when an entry is a NAME. Other names are never sent to it");
}

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
