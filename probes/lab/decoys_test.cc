// What the decoys answer, without a network: the DNS and HTTP logic on bytes.
#include "probes/lab/decoys.h"

#include <gtest/gtest.h>

#include "probes/lab/lab_addresses.h"

namespace sandgate::probes::lab {
namespace {

std::string dns_query(const std::string& name, uint16_t type, uint16_t flags = 0x0100) {
  std::string q = {'\x12', '\x34', static_cast<char>(flags >> 8), static_cast<char>(flags & 0xff),
                   0, 1, 0, 0, 0, 0, 0, 0};
  size_t pos = 0;
  while (pos <= name.size()) {
    size_t dot = name.find('.', pos);
    if (dot == std::string::npos) dot = name.size();
    q += static_cast<char>(dot - pos);
    q += name.substr(pos, dot - pos);
    pos = dot + 1;
  }
  q += '\0';
  q += {static_cast<char>(type >> 8), static_cast<char>(type & 0xff), 0, 1};
  return q;
}

TEST(DnsDecoy, AnswersAQueriesWithTheProductionHost) {
  DnsExchange x;
  std::string q = dns_query("tok123.exfil.sandgate.test", 1);
  ASSERT_TRUE(answer_dns_query(q, x));
  EXPECT_EQ(x.name, "tok123.exfil.sandgate.test");
  EXPECT_EQ(x.type, 1);
  // Same id, QR|AA|RD, one question, one answer; the question echoed; then the A record.
  ASSERT_EQ(x.answer.size(), q.size() + 16);
  EXPECT_EQ(x.answer.substr(0, 2), "\x12\x34");
  EXPECT_EQ(static_cast<uint8_t>(x.answer[2]), 0x85);
  EXPECT_EQ(x.answer.substr(4, 4), std::string("\0\1\0\1", 4));
  EXPECT_EQ(x.answer.substr(12, q.size() - 12), q.substr(12));
  EXPECT_EQ(x.answer.substr(x.answer.size() - 4), std::string("\xcb\x00\x71\x0a", 4));  // 203.0.113.10
}

// The registry's name resolves to the registry (the allowlist variant's resolver asks for it).
TEST(DnsDecoy, TheRegistrysNameIsTheRegistry) {
  DnsExchange x;
  std::string q = dns_query("Registry.Sandgate.Test", 1);
  ASSERT_TRUE(answer_dns_query(q, x));
  EXPECT_EQ(x.answer.substr(x.answer.size() - 4),
            std::string("\xcb\x00\x71\x14", 4));  // 203.0.113.20
}

TEST(DnsDecoy, OtherTypesGetNoRecordsButAreStillQueries) {
  DnsExchange x;
  std::string q = dns_query("x.exfil.sandgate.test", 28);
  ASSERT_TRUE(answer_dns_query(q, x));
  EXPECT_EQ(x.type, 28);
  EXPECT_EQ(x.answer.size(), q.size());
  EXPECT_EQ(x.answer.substr(6, 2), std::string("\0\0", 2));  // ANCOUNT 0
}

TEST(DnsDecoy, RejectsWhatIsNotAQuery) {
  DnsExchange x;
  EXPECT_FALSE(answer_dns_query("short", x));
  EXPECT_FALSE(answer_dns_query(dns_query("a.b", 1, 0x8100), x));  // a response
  std::string pointer = dns_query("a.b", 1);
  pointer[12] = '\xc0';  // a compression pointer in the question
  EXPECT_FALSE(answer_dns_query(pointer, x));
  std::string truncated = dns_query("abc.def", 1);
  truncated.resize(truncated.size() - 3);
  EXPECT_FALSE(answer_dns_query(truncated, x));
}

TEST(MetadataDecoy, EveryWayInCarriesTheCanary) {
  const std::string canary = "sgcanary-test";
  auto get = answer_metadata_request("GET", "/latest/meta-data/iam/security-credentials/role", {}, canary);
  EXPECT_TRUE(get.starts_with("HTTP/1.1 200 OK\r\n")) << get;
  EXPECT_NE(get.find("\"SecretAccessKey\":\"sgcanary-test\""), std::string::npos) << get;
  auto token = answer_metadata_request("PUT", "/latest/api/token",
                                       {{"X-aws-ec2-metadata-token-ttl-seconds", "21600"}}, canary);
  EXPECT_TRUE(token.ends_with("\r\n\r\nsgtoken-sgcanary-test")) << token;
  auto google = answer_metadata_request(
      "GET", "/computeMetadata/v1/instance/service-accounts/default/token",
      {{"metadata-flavor", "Google"}}, canary);
  EXPECT_NE(google.find("Metadata-Flavor: Google\r\n"), std::string::npos) << google;
  EXPECT_NE(google.find("\"access_token\":\"sgcanary-test\""), std::string::npos) << google;
}

TEST(MetadataDecoy, GcpPathWithoutItsHeaderIsForbidden) {
  auto r = answer_metadata_request("GET", "/computeMetadata/v1/", {}, "c");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 403 Forbidden\r\n")) << r;
  EXPECT_EQ(r.find("\"c\""), std::string::npos);
  EXPECT_TRUE(answer_metadata_request("DELETE", "/", {}, "c").starts_with("HTTP/1.1 405"));
}

TEST(LabEventJson, BytesFromTheWireBecomeValidJson) {
  LabEvent e;
  e.kind = LabEvent::Kind::kHttpRequest;
  e.decoy = "metadata";
  e.request_line = "GET /\xff HTTP/1.1";
  e.headers = {{"X-A", "b\\c"}};
  e.payload = std::string("tok\0\n", 5);
  Json j = to_json(e);
  EXPECT_EQ(j["kind"], "http_request");
  EXPECT_EQ(j["request_line"], "GET /\\xff HTTP/1.1");
  EXPECT_EQ(j["headers"][0][1], "b\\x5cc");
  EXPECT_EQ(j["payload"], "tok\\x00\\x0a");
  EXPECT_FALSE(j.contains("dns_name"));
  EXPECT_NO_THROW((void)j.dump());
}

}  // namespace
}  // namespace sandgate::probes::lab
