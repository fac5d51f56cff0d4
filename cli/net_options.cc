#include "cli/net_options.h"

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

}  // namespace sandgate::cli
