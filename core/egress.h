// An egress allowlist entry (issue 13's "explicit egress policy"): where a run may connect or
// send, and nothing else. Spelled on the command line and in policies as
//   [tcp:|udp:]ADDRESS[/PREFIX]:PORT       203.0.113.20:443   udp:203.0.113.53:53
//   [tcp:|udp:][IPV6[/PREFIX]]:PORT        [2001:db8::20]:443  [2001:db8::/32]:*
// PORT may be `*` (any port); without tcp:/udp: both protocols. Names (registry.example:443)
// are not accepted: a name resolves to addresses only inside the run's network, which the
// allowlist must not depend on.
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
  int family = 0;                    // AF_INET, AF_INET6
  std::array<uint8_t, 16> addr{};    // network order; IPv4 in the first 4 bytes
  uint8_t prefix_len = 0;            // 0..32 (v4), 0..128 (v6)
  uint16_t port = 0;                 // 0: any
  uint8_t protocol = 0;              // IPPROTO_TCP, IPPROTO_UDP; 0: both
  std::string text;                  // as written, for messages and reports
  bool operator==(const EgressRule&) const = default;
};

// What the kernel's egress guard decided about one connect or send of a call (observed.egress
// in its outcome): the destination and whether the run's allowlist let it through.
struct EgressVerdict {
  pid_t pid = 0;
  std::string hook;      // "connect", "sendmsg"
  std::string address;   // "203.0.113.20", "2001:db8::20"
  uint16_t port = 0;
  std::string protocol;  // "tcp", "udp"
  bool allowed = false;
  bool operator==(const EgressVerdict&) const = default;
};
// {"hook", "address", "port", "protocol", "verdict": "allowed"|"denied", "pid"}
Json to_json(const EgressVerdict& v);

// An error names the entry and what is wrong with it.
Result<EgressRule> parse_egress_rule(const std::string& text);
Result<std::vector<EgressRule>> parse_egress_rules(const std::vector<std::string>& texts);

// Whether `rule` allows a connection to (family, addr, port, protocol): the kernel guard's
// decision, computed in user space (tests, reports).
bool egress_allows(const EgressRule& rule, int family, const std::array<uint8_t, 16>& addr,
                   uint16_t port, uint8_t protocol);

}  // namespace sandgate
