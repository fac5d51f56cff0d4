#include "cli/network.h"

namespace sandgate::cli {

void add_net_options(CLI::App* sub, NetArgs& a) {
  sub->add_option("--net", a.mode,
                  "the run's network: none (default: loopback only) or allowlist (a veth to\n"
                  "--net-upstream; the kernel's egress guard lets through only the entries of\n"
                  "--allow and of the policy's \"egress\", refusing the rest with EPERM)")
      ->check(CLI::IsMember({"none", "allowlist"}));
  sub->add_option("--allow", a.allow,
                  "an egress allowlist entry (repeatable): [tcp:|udp:]ADDRESS[/PREFIX]:PORT or\n"
                  "[IPV6[/PREFIX]]:PORT, PORT a number or *; without tcp:/udp: both.\n"
                  "  --allow 203.0.113.20:443 --allow udp:203.0.113.53:53 --allow '10.0.0.0/8:*'");
  sub->add_option("--net-upstream", a.upstream,
                  "with --net allowlist: the network namespace the run's traffic goes to (an\n"
                  "`ip netns` mount such as /run/netns/egress, or /proc/PID/ns/net). sandgate\n"
                  "never changes its routes: give it a namespace whose only way out is the one\n"
                  "you mean");
}

Status apply_net_args(const NetArgs& a, const std::vector<EgressRule>& policy_egress,
                      providers::EnvSpec& spec) {
  if (a.mode == "none") {
    if (!a.allow.empty() || !a.upstream.empty())
      return logic_error("--allow", "--allow and --net-upstream need --net allowlist");
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
