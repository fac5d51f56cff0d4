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
      {"registry.example:443", "is a name"},
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
