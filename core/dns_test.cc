#include "core/dns.h"

#include <gtest/gtest.h>

namespace sandgate::dns {
namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s += static_cast<char>(c);
  return s;
}

// A reply header: id 0x1234, QR RD RA, the given counts.
std::string header(int qd, int an, int rcode = 0) {
  return bytes({0x12, 0x34, 0x81, 0x80 | rcode, 0, qd, 0, an, 0, 0, 0, 0});
}

TEST(Dns, QueryRoundTrips) {
  auto q = encode_query(0xbeef, "Registry.Sandgate.Test.", kTypeA);
  ASSERT_TRUE(q.ok()) << q.error().message();
  auto m = parse_message(*q);
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_EQ(m->id, 0xbeef);
  EXPECT_FALSE(m->response);
  EXPECT_TRUE(m->recursion_desired);
  ASSERT_EQ(m->questions.size(), 1u);
  EXPECT_EQ(m->questions[0].name, "registry.sandgate.test");
  EXPECT_EQ(m->questions[0].type, kTypeA);
  EXPECT_EQ(m->questions[0].klass, kClassIn);
  // The reply echoes the question as sent and says REFUSED.
  auto reply = parse_message(encode_reply(*m, kRefused));
  ASSERT_TRUE(reply.ok()) << reply.error().message();
  EXPECT_TRUE(reply->response);
  EXPECT_EQ(reply->id, 0xbeef);
  EXPECT_EQ(reply->rcode, kRefused);
  ASSERT_EQ(reply->questions.size(), 1u);
  EXPECT_EQ(reply->questions[0].name, "registry.sandgate.test");
  EXPECT_TRUE(reply->answers.empty());
}

TEST(Dns, AnswersFollowCompressionAndCnames) {
  // registry.sandgate.test A? -> CNAME mirror.sandgate.test (compressed), A 203.0.113.20
  std::string m = header(1, 3);
  m += bytes({8}) + "registry" + bytes({8}) + "sandgate" + bytes({4}) + "test" + bytes({0});
  m += bytes({0, 1, 0, 1});
  // answer 1: name -> pointer to 12; CNAME; rdata: "mirror" + pointer to "sandgate.test" (21)
  m += bytes({0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 60, 0, 9}) + bytes({6}) + "mirror" + bytes({0xc0, 21});
  size_t mirror = m.size() - 9;
  // answer 2: mirror.sandgate.test A 203.0.113.20
  m += bytes({0xc0, static_cast<int>(mirror), 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 203, 0, 113, 20});
  // answer 3: an A record for an unrelated name: never an address of the question's
  m += bytes({1}) + "x" + bytes({0, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 203, 0, 113, 10});
  auto parsed = parse_message(m);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  ASSERT_EQ(parsed->answers.size(), 3u);
  EXPECT_EQ(parsed->answers[0].target, "mirror.sandgate.test");
  std::vector<Record> chain;
  auto addrs = addresses_for(*parsed, "registry.sandgate.test", &chain);
  ASSERT_EQ(addrs.size(), 1u);
  EXPECT_EQ(addrs[0], (std::array<uint8_t, 4>{203, 0, 113, 20}));
  ASSERT_EQ(chain.size(), 2u);
  // The rebuilt reply carries the chain, uncompressed, and reads back the same.
  Message q;
  q.id = 7;
  q.recursion_desired = true;
  q.questions = parsed->questions;
  q.question_wire = parsed->question_wire;
  auto rebuilt = parse_message(encode_reply(q, kNoError, chain));
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.error().message();
  EXPECT_EQ(addresses_for(*rebuilt, "registry.sandgate.test"), addrs);
}

TEST(Dns, MalformedMessagesAreErrorsNeverLoops) {
  const std::string q = "\x08registry\x04test";
  struct Case {
    std::string wire;
    const char* says;
  } cases[] = {
      {"", "shorter than the 12-byte header"},
      {bytes({1, 2, 3}), "shorter than the 12-byte header"},
      {header(1, 0), "more questions than the message holds"},
      {header(1, 0) + "\x08regis", "label runs past the message"},
      {header(1, 0) + "\x08registry\x04te" + bytes({0, 0, 0}), "question cut short"},
      {header(1, 0) + q + bytes({0, 0, 1}), "question cut short"},
      {header(1, 0) + q, "name cut short"},
      {header(1, 0) + q + bytes({0x40, 0, 1, 0, 1}), "reserved label type"},
      // A pointer to itself, and two pointers to each other: loops a naive reader never leaves.
      {header(1, 0) + bytes({0xc0, 12, 0, 1, 0, 1}), "does not point backwards"},
      {header(1, 0) + bytes({1, 'a', 0xc0, 12, 0, 1, 0, 1}), "does not point backwards"},
      {header(1, 0) + bytes({0xc0, 14, 1, 'a', 0xc0, 12, 0, 1}), "does not point backwards"},
      // A pointer forward, past the end.
      {header(1, 0) + bytes({0xc0, 200, 0, 1, 0, 1}), "does not point backwards"},
      {header(1, 0) + bytes({0xc0}), "more questions"},
      {header(0, 1) + bytes({0, 0, 1, 0, 1, 0, 0, 0, 60, 0, 8, 1, 2, 3, 4}),
       "record data runs past the message"},
      {header(0, 1) + bytes({0, 0, 1, 0, 1, 0, 0, 0, 60}), "more answers"},
      {header(0, 1) + bytes({0, 0, 5, 0, 1, 0, 0, 0, 60, 0, 2, 0xc0, 40}),
       "does not point backwards"},
      {header(0, 1) + bytes({0, 0, 5, 0, 1, 0, 0, 0, 60, 0, 3, 0, 0, 0}),
       "CNAME data is not one name"},
      {bytes({0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0}) + std::string(100, '\0'),
       "more questions than the message holds"},
  };
  for (const auto& c : cases) {
    auto m = parse_message(c.wire);
    ASSERT_FALSE(m.ok()) << ::testing::PrintToString(c.wire);
    EXPECT_NE(m.error().message().find(c.says), std::string::npos)
        << ::testing::PrintToString(c.wire) << ": " << m.error().message();
  }
}

TEST(Dns, OversizedNamesAreRefused) {
  // 5 labels of 63: 320 octets on the wire, past the 255 of RFC 1035.
  std::string name;
  for (int i = 0; i < 5; ++i) name += static_cast<char>(63) + std::string(63, 'a');
  auto m = parse_message(header(1, 0) + name + bytes({0, 0, 1, 0, 1}));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message().find("longer than 255"), std::string::npos) << m.error().message();
  // The same length through a chain of pointers, each one backwards, each label read once.
  std::string chained = header(1, 0);
  size_t prev = 0;
  for (int i = 0; i < 5; ++i) {
    size_t here = chained.size();
    chained += static_cast<char>(63) + std::string(63, 'b');
    if (i == 0)
      chained += '\0';
    else
      chained += bytes({0xc0 | static_cast<int>(prev >> 8), static_cast<int>(prev & 0xff)});
    prev = here;
  }
  size_t pos = prev;
  auto n = read_name(chained, pos);
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.error().message().find("longer than 255"), std::string::npos) << n.error().message();
  EXPECT_FALSE(encode_name(std::string(64, 'a') + ".test").ok());
  std::string long_name;
  for (int i = 0; i < 4; ++i) long_name += std::string(63, 'c') + ".";
  long_name += "dd";
  EXPECT_FALSE(encode_name(long_name).ok());
}

TEST(Dns, TooManyPointersAreRefused) {
  // 40 pointers, each to the one before it (strictly backwards, so only the count stops it).
  std::string m = header(1, 0) + bytes({1, 'a', 0});
  std::vector<size_t> at = {12};
  for (int i = 0; i < 40; ++i) {
    at.push_back(m.size());
    m += bytes({0xc0, static_cast<int>(at[at.size() - 2])});
  }
  size_t pos = at.back();
  auto n = read_name(m, pos);
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.error().message().find("too many compression pointers"), std::string::npos)
      << n.error().message();
}

TEST(Dns, OddLabelBytesAreEscapedSoTheyNeverMatchAName) {
  // One label "registry.sandgate" then "test": not the name registry.sandgate.test.
  std::string m = header(1, 0) + bytes({17}) + "registry.sandgate" + bytes({4}) + "test" +
                  bytes({0, 0, 1, 0, 1});
  auto parsed = parse_message(m);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  EXPECT_EQ(parsed->questions[0].name, "registry\\046sandgate.test");
  std::string ctl = header(1, 0) + bytes({3, 'a', 0x1b, 'Z', 0, 0, 1, 0, 1});
  parsed = parse_message(ctl);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->questions[0].name, "a\\027z");
  EXPECT_FALSE(encode_name(parsed->questions[0].name).ok());
}

TEST(Dns, HostNamesForTheAllowlist) {
  EXPECT_TRUE(check_host_name("registry.sandgate.test").ok());
  EXPECT_TRUE(check_host_name("localhost").ok());
  EXPECT_TRUE(check_host_name("a-b.c.").ok());
  EXPECT_FALSE(check_host_name("").ok());
  EXPECT_FALSE(check_host_name("1.2.3.4").ok());
  EXPECT_FALSE(check_host_name("a..b").ok());
  EXPECT_FALSE(check_host_name("*.b").ok());
  EXPECT_FALSE(check_host_name(std::string(254, 'a')).ok());
  EXPECT_EQ(normalize_name("Reg.Example."), "reg.example");
  EXPECT_EQ(type_name(kTypeAaaa), "AAAA");
  EXPECT_EQ(type_name(999), "TYPE999");
  EXPECT_EQ(rcode_name(kRefused), "REFUSED");
}

}  // namespace
}  // namespace sandgate::dns
