#include "core/egress.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>

#include "core/dns.h"
#include "core/terminal_text.h"

namespace sandgate {

namespace {

Error bad(const std::string& text, const std::string& why) {
  return Error{EINVAL, "egress rule", "",
               "\"" + text + "\": " + why +
                   " (expected [tcp:|udp:]ADDRESS[/PREFIX]:PORT, "
                   "[IPV6[/PREFIX]]:PORT or NAME:PORT, PORT a number or *)"};
}

// "*" is 0 (any port).
Result<uint16_t> parse_port(const std::string& text, const std::string& port) {
  if (port == "*") return uint16_t{0};
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value == 0 ||
      value > 65535)
    return bad(text, "port \"" + port + "\" is not 1..65535 or *");
  return static_cast<uint16_t>(value);
}

}  // namespace

Result<EgressRule> parse_egress_rule(const std::string& text) {
  EgressRule r;
  r.text = text;
  std::string rest = text;
  if (rest.rfind("tcp:", 0) == 0) {
    r.protocol = IPPROTO_TCP;
    rest = rest.substr(4);
  } else if (rest.rfind("udp:", 0) == 0) {
    r.protocol = IPPROTO_UDP;
    rest = rest.substr(4);
  }
  std::string host, port;
  if (!rest.empty() && rest[0] == '[') {
    size_t close = rest.find(']');
    if (close == std::string::npos) return bad(text, "no ']' after the IPv6 address");
    host = rest.substr(1, close - 1);
    if (close + 1 >= rest.size() || rest[close + 1] != ':') return bad(text, "no :PORT after ']'");
    port = rest.substr(close + 2);
    r.family = AF_INET6;
  } else {
    size_t colon = rest.rfind(':');
    if (colon == std::string::npos) return bad(text, "no :PORT");
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
    if (host.find(':') != std::string::npos) return bad(text, "an IPv6 address goes in [brackets]");
    r.family = AF_INET;
  }
  // A host name: letters where an IPv4 address has only digits and dots.
  if (r.family == AF_INET && host.find_first_not_of("0123456789./") != std::string::npos) {
    if (host.find('/') != std::string::npos)
      return bad(text, "a name takes no /PREFIX (its addresses come from the run's resolver)");
    if (auto ok = dns::check_host_name(host); !ok.ok())
      return bad(text, "\"" + host + "\" is not a host name: " + ok.error().detail);
    r.name = dns::normalize_name(host);
    r.family = 0;
    SG_ASSIGN_OR_RETURN(r.port, parse_port(text, port));
    return r;
  }
  int max_prefix = r.family == AF_INET ? 32 : 128;
  int prefix = max_prefix;
  if (size_t slash = host.find('/'); slash != std::string::npos) {
    std::string p = host.substr(slash + 1);
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), prefix);
    if (p.empty() || ec != std::errc() || end != p.data() + p.size() || prefix < 0 ||
        prefix > max_prefix)
      return bad(text, "prefix length \"" + p + "\" is not 0.." + std::to_string(max_prefix));
    host = host.substr(0, slash);
  }
  if (host.empty()) return bad(text, "no address");
  if (::inet_pton(r.family, host.c_str(), r.addr.data()) != 1)
    return bad(text,
               "\"" + host + "\" is not an IPv" + (r.family == AF_INET ? "4" : "6") + " address");
  r.prefix_len = static_cast<uint8_t>(prefix);
  // Bits past the prefix are cleared, so that 203.0.113.7/24 means 203.0.113.0/24.
  for (int bit = prefix; bit < max_prefix; ++bit)
    r.addr[bit / 8] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
  SG_ASSIGN_OR_RETURN(r.port, parse_port(text, port));
  return r;
}

Result<std::vector<EgressRule>> parse_egress_rules(const std::vector<std::string>& texts) {
  std::vector<EgressRule> rules;
  for (const auto& t : texts) {
    SG_ASSIGN_OR_RETURN(auto r, parse_egress_rule(t));
    rules.push_back(std::move(r));
  }
  return rules;
}

bool has_names(const std::vector<EgressRule>& rules) {
  for (const auto& r : rules)
    if (r.is_name()) return true;
  return false;
}

std::vector<EgressRule> address_rules(const std::vector<EgressRule>& rules) {
  std::vector<EgressRule> out;
  for (const auto& r : rules)
    if (!r.is_name()) out.push_back(r);
  return out;
}

bool egress_allows(const EgressRule& rule, int family, const std::array<uint8_t, 16>& addr,
                   uint16_t port, uint8_t protocol) {
  if (rule.is_name() || family != rule.family) return false;
  if (rule.protocol != 0 && rule.protocol != protocol) return false;
  if (rule.port != 0 && rule.port != port) return false;
  for (int bit = 0; bit < rule.prefix_len; ++bit) {
    uint8_t mask = static_cast<uint8_t>(0x80 >> (bit % 8));
    if ((addr[bit / 8] & mask) != (rule.addr[bit / 8] & mask)) return false;
  }
  return true;
}

Json to_json(const EgressVerdict& v) {
  Json j = {{"hook", v.hook},
            {"address", v.address},
            {"port", v.port},
            {"protocol", v.protocol},
            {"verdict", v.allowed ? "allowed" : "denied"},
            {"pid", v.pid}};
  if (v.hook == "dns") {
    j["name"] = v.name;
    j["type"] = v.query_type;
    j["rcode"] = v.answer;
  }
  return j;
}

std::string describe(const EgressVerdict& v) {
  if (v.hook == "dns") {
    std::string line = "dns " + v.query_type + " " + terminal_safe(v.name) + " " +
                       (v.allowed ? "allowed" : "denied") + " (" + v.answer;
    if (!v.allowed) line += ", never forwarded";
    if (!v.address.empty()) line += ": " + v.address;
    return line + ")";
  }
  return v.hook + " " + v.protocol + " " + v.address + ":" + std::to_string(v.port) + " " +
         (v.allowed ? "allowed" : "denied");
}

}  // namespace sandgate
