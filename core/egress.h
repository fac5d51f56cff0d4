// An egress allowlist entry (issue 13's "explicit egress policy"): where a run may connect or
// send, and nothing else. Spelled on the command line and in policies as
//   [tcp:|udp:]ADDRESS[/PREFIX]:PORT       203.0.113.20:443   udp:203.0.113.53:53
//   [tcp:|udp:][IPV6[/PREFIX]]:PORT        [2001:db8::20]:443  [2001:db8::/32]:*
//   [tcp:|udp:]NAME:PORT                   registry.sandgate.test:443
// PORT may be `*` (any port); without tcp:/udp: both protocols. A NAME is a host name (letters,
// digits, '-', dots; no wildcard, no /PREFIX): it allows nothing by itself. The run's own
// resolver (session/dns_resolver.h) answers it, and the addresses of each answer join the
// run's list with the entry's port and protocol before the answer reaches the run.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/result.h"

namespace sandgate {

struct EgressRule {
  int family = 0;                  // AF_INET, AF_INET6
  std::array<uint8_t, 16> addr{};  // network order; IPv4 in the first 4 bytes
  uint8_t prefix_len = 0;          // 0..32 (v4), 0..128 (v6)
  uint16_t port = 0;               // 0: any
  uint8_t protocol = 0;            // IPPROTO_TCP, IPPROTO_UDP; 0: both
  std::string text;                // as written, for messages and reports
  // A NAME entry: the host name (lower case, no final dot); family is then 0 and addr unset
  // until the run's resolver answers it.
  std::string name;
  bool is_name() const { return !name.empty(); }
  bool operator==(const EgressRule&) const = default;
};

// What the kernel's egress guard decided about one connect or send of a call (observed.egress
// in its outcome): the destination and whether the run's allowlist let it through.
// A "dns" decision is the run's resolver's: `name` asked (type `query_type`), `address` the
// addresses it answered with (comma-separated, "" when refused), port 53, protocol udp;
// allowed when the name is in the list (forwarded), denied when refused (never forwarded).
struct EgressVerdict {
  pid_t pid = 0;
  std::string hook;     // "connect", "sendmsg", "dns"
  std::string address;  // "203.0.113.20", "2001:db8::20"
  uint16_t port = 0;
  std::string protocol;  // "tcp", "udp"
  bool allowed = false;
  std::string name;        // dns: the name asked
  std::string query_type;  // dns: "A", "AAAA", ...
  std::string answer;      // dns: the rcode sent back ("NOERROR", "REFUSED", ...)
  bool operator==(const EgressVerdict&) const = default;
};
// {"hook", "address", "port", "protocol", "verdict": "allowed"|"denied", "pid"}, and for dns
// "name", "type", "rcode".
Json to_json(const EgressVerdict& v);
// One line for a terminal: "connect tcp 203.0.113.10:443 denied",
// "dns A x.exfil.sandgate.test denied (REFUSED, never forwarded)". The name is the sandbox's
// text: shown with control bytes escaped.
std::string describe(const EgressVerdict& v);

// An error names the entry and what is wrong with it.  A NAME entry takes no /PREFIX.
Result<EgressRule> parse_egress_rule(const std::string& text);
Result<std::vector<EgressRule>> parse_egress_rules(const std::vector<std::string>& texts);

// The entries that name hosts, and the rest.
bool has_names(const std::vector<EgressRule>& rules);
std::vector<EgressRule> address_rules(const std::vector<EgressRule>& rules);

// Whether `rule` allows a connection to (family, addr, port, protocol): the kernel guard's
// decision, computed in user space (tests, reports).
bool egress_allows(const EgressRule& rule, int family, const std::array<uint8_t, 16>& addr,
                   uint16_t port, uint8_t protocol);

}  // namespace sandgate
