#include "core/egress.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

namespace sandgate {
namespace {

std::array<uint8_t, 16> ip(const char* text) {
  std::array<uint8_t, 16> a{};
  ::inet_pton(std::string(text).find(':') != std::string::npos ? AF_INET6 : AF_INET, text, a.data());
  return a;
}

TEST(EgressRule, ParsesAddressesPrefixesPortsAndProtocols) {
  auto r = parse_egress_rule("203.0.113.20:443");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->family, AF_INET);
  EXPECT_EQ(r->prefix_len, 32);
  EXPECT_EQ(r->port, 443);
  EXPECT_EQ(r->protocol, 0);
  EXPECT_EQ(r->addr, ip("203.0.113.20"));

  r = parse_egress_rule("udp:203.0.113.7/24:*");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->protocol, IPPROTO_UDP);
  EXPECT_EQ(r->prefix_len, 24);
  EXPECT_EQ(r->port, 0);
  EXPECT_EQ(r->addr, ip("203.0.113.0"));  // host bits cleared

  r = parse_egress_rule("tcp:[2001:db8::/32]:8443");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->family, AF_INET6);
  EXPECT_EQ(r->protocol, IPPROTO_TCP);
  EXPECT_EQ(r->prefix_len, 32);
  EXPECT_EQ(r->port, 8443);
}

TEST(EgressRule, BadEntriesSayWhatIsWrong) {
  struct Case {
    const char* text;
    const char* says;
  } cases[] = {
      {"203.0.113.20", "no :PORT"},
      {"203.0.113.20:0", "port \"0\""},
      {"203.0.113.20:70000", "port \"70000\""},
      {"203.0.113.20:http", "port \"http\""},
      {"203.0.113.20/33:443", "prefix length \"33\""},
      {"registry.example/24:443", "a name takes no /PREFIX"},
      {"*.example.com:443", "wildcards are not supported"},
      {"registry..example:443", "an empty label"},
      {"-registry.example:443", "begins or ends with '-'"},
      {"my_host.example:443", "'_' is not a letter"},
      {"registry.example:", "port \"\""},
      {"registry.example", "no :PORT"},
      {"1.2.3:443", "not an IPv4 address"},
      {"2001:db8::1:443", "[brackets]"},
      {"[2001:db8::1:443", "no ']'"},
      {"[2001:db8::1]443", "no :PORT after ']'"},
      {"[zz::1]:443", "not an IPv6 address"},
      {":443", "no address"},
  };
  for (const auto& c : cases) {
    auto r = parse_egress_rule(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.error().message().find(c.says), std::string::npos) << c.text << ": " << r.error().message();
    EXPECT_NE(r.error().message().find(c.text), std::string::npos) << r.error().message();
  }
}

TEST(EgressRule, NamesAreHostsWithAPortAndAllowNothingByThemselves) {
  auto r = parse_egress_rule("Registry.Sandgate.Test.:443");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_TRUE(r->is_name());
  EXPECT_EQ(r->name, "registry.sandgate.test");
  EXPECT_EQ(r->family, 0);
  EXPECT_EQ(r->port, 443);
  EXPECT_EQ(r->protocol, 0);
  EXPECT_EQ(r->text, "Registry.Sandgate.Test.:443");
  EXPECT_FALSE(egress_allows(*r, AF_INET, ip("203.0.113.20"), 443, IPPROTO_TCP));

  r = parse_egress_rule("udp:ntp.example:*");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->protocol, IPPROTO_UDP);
  EXPECT_EQ(r->port, 0);
  std::string long_label(64, 'a');
  auto bad = parse_egress_rule(long_label + ".example:443");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("longer than 63"), std::string::npos)
      << bad.error().message();

  auto rules = parse_egress_rules({"203.0.113.20:443", "registry.sandgate.test:443"});
  ASSERT_TRUE(rules.ok());
  EXPECT_TRUE(has_names(*rules));
  ASSERT_EQ(address_rules(*rules).size(), 1u);
  EXPECT_EQ(address_rules(*rules)[0].text, "203.0.113.20:443");
}

TEST(EgressVerdict, DnsDecisionsSayNameTypeAndAnswer) {
  EgressVerdict v;
  v.hook = "dns";
  v.name = "x\x1b.exfil.sandgate.test";
  v.query_type = "A";
  v.answer = "REFUSED";
  v.port = 53;
  v.protocol = "udp";
  Json j = to_json(v);
  EXPECT_EQ(j["verdict"], "denied");
  EXPECT_EQ(j["rcode"], "REFUSED");
  EXPECT_EQ(j["type"], "A");
  std::string line = describe(v);
  EXPECT_EQ(line.find('\x1b'), std::string::npos) << line;
  EXPECT_NE(line.find("never forwarded"), std::string::npos) << line;
  EgressVerdict c{0, "connect", "203.0.113.10", 443, "tcp", false};
  EXPECT_EQ(describe(c), "connect tcp 203.0.113.10:443 denied");
  EXPECT_FALSE(to_json(c).contains("name"));
}

TEST(EgressRule, AllowsWhatTheKernelGuardWould) {
  auto r = parse_egress_rule("tcp:203.0.113.0/24:443");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(egress_allows(*r, AF_INET, ip("203.0.113.99"), 443, IPPROTO_TCP));
  EXPECT_FALSE(egress_allows(*r, AF_INET, ip("203.0.114.1"), 443, IPPROTO_TCP));
  EXPECT_FALSE(egress_allows(*r, AF_INET, ip("203.0.113.99"), 80, IPPROTO_TCP));
  EXPECT_FALSE(egress_allows(*r, AF_INET, ip("203.0.113.99"), 443, IPPROTO_UDP));
  EXPECT_FALSE(egress_allows(*r, AF_INET6, ip("2001:db8::1"), 443, IPPROTO_TCP));
}

}  // namespace
}  // namespace sandgate
