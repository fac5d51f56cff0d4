// The run's resolver on loopback, unprivileged: a fake upstream socket is the witness of what
// was forwarded, a recording admit callback of what the guard was told, and in what order.
#include "session/dns_resolver.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mutex>

namespace sandgate::session {
namespace {

sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

UniqueFd udp_bound() {
  UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in a = loopback(0);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

sockaddr_in bound_address(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return a;
}

// One datagram within `ms`, with its sender; "" when none came.
std::string receive(int fd, int ms, sockaddr_in* from = nullptr) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, ms) <= 0) return "";
  char buf[4096];
  sockaddr_in f{};
  socklen_t len = sizeof f;
  ssize_t n = ::recvfrom(fd, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&f), &len);
  if (from) *from = f;
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

class DnsResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    upstream_ = udp_bound();
    auto rules = parse_egress_rules({"registry.sandgate.test:443", "udp:ntp.sandgate.test:123"});
    ASSERT_TRUE(rules.ok()) << rules.error().message();
    DnsResolverConfig c;
    c.listen = loopback(0);
    c.upstream = bound_address(upstream_.get());
    c.names = *rules;
    c.upstream_timeout = std::chrono::milliseconds(300);
    auto r = DnsResolver::start(std::move(c), [this](const std::vector<EgressRule>& admitted) {
      std::lock_guard lock(mu_);
      for (const auto& a : admitted) admitted_.push_back(a);
      // The answer must not have left yet: nothing is readable on the client socket.
      pollfd p{client_.get(), POLLIN, 0};
      answered_before_admit_ = ::poll(&p, 1, 0) > 0;
      return Status{};
    });
    ASSERT_TRUE(r.ok()) << r.error().message();
    resolver_ = std::move(r).value();
    client_ = udp_bound();
    to_resolver_ = resolver_->listen_address();
  }

  void ask(const std::string& wire) {
    ASSERT_EQ(::sendto(client_.get(), wire.data(), wire.size(), 0,
                       reinterpret_cast<const sockaddr*>(&to_resolver_), sizeof to_resolver_),
              static_cast<ssize_t>(wire.size()));
  }
  dns::Message answer() {
    std::string r = receive(client_.get(), 5000);
    auto m = dns::parse_message(r);
    EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message());
    return m.ok() ? *m : dns::Message{};
  }

  UniqueFd upstream_, client_;
  sockaddr_in to_resolver_{};
  std::unique_ptr<DnsResolver> resolver_;
  std::mutex mu_;
  std::vector<EgressRule> admitted_;
  bool answered_before_admit_ = false;
};

TEST_F(DnsResolverTest, UnlistedNameIsRefusedAndNeverForwarded) {
  resolver_->begin_call(1);
  ask(*dns::encode_query(0x4242, "MARKER123.exfil.sandgate.test", dns::kTypeA));
  auto m = answer();
  EXPECT_EQ(m.id, 0x4242);
  EXPECT_TRUE(m.response);
  EXPECT_EQ(m.rcode, dns::kRefused);
  ASSERT_EQ(m.questions.size(), 1u);
  EXPECT_EQ(m.questions[0].name, "marker123.exfil.sandgate.test");
  // The upstream's witness: nothing arrived.
  EXPECT_EQ(receive(upstream_.get(), 200), "");
  auto d = resolver_->end_call(1);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].verdict.hook, "dns");
  EXPECT_FALSE(d[0].verdict.allowed);
  EXPECT_EQ(d[0].verdict.name, "marker123.exfil.sandgate.test");
  EXPECT_EQ(d[0].verdict.answer, "REFUSED");
  EXPECT_EQ(d[0].verdict.port, 53);
  ASSERT_EQ(resolver_->log().size(), 1u);
  EXPECT_EQ(resolver_->log()[0].rfind("refused A marker123.exfil.sandgate.test REFUSED", 0), 0u)
      << resolver_->log()[0];
  std::lock_guard lock(mu_);
  EXPECT_TRUE(admitted_.empty());
}

TEST_F(DnsResolverTest, ListedNameIsForwardedAndItsAddressesAdmittedBeforeTheAnswer) {
  resolver_->begin_call(7);
  ask(*dns::encode_query(0x1111, "Registry.Sandgate.Test", dns::kTypeA));
  sockaddr_in from{};
  std::string asked = receive(upstream_.get(), 5000, &from);
  auto q = dns::parse_message(asked);
  ASSERT_TRUE(q.ok()) << "the upstream got no query";
  // A fresh query of sandgate's own: another id, the normalized name, type A.
  EXPECT_NE(q->id, 0x1111);
  ASSERT_EQ(q->questions.size(), 1u);
  EXPECT_EQ(q->questions[0].name, "registry.sandgate.test");
  // The upstream answers 203.0.113.20 (and a record for another name, never admitted).
  dns::Record a{"registry.sandgate.test",           dns::kTypeA, dns::kClassIn, 60,
                std::string("\xcb\x00\x71\x14", 4), ""};
  dns::Record other{"production.sandgate.test",         dns::kTypeA, dns::kClassIn, 60,
                    std::string("\xcb\x00\x71\x0a", 4), ""};
  std::string reply = dns::encode_reply(*q, dns::kNoError, {a, other});
  ASSERT_GT(::sendto(upstream_.get(), reply.data(), reply.size(), 0,
                     reinterpret_cast<sockaddr*>(&from), sizeof from),
            0);
  auto m = answer();
  EXPECT_EQ(m.id, 0x1111);
  EXPECT_EQ(m.rcode, dns::kNoError);
  auto addrs = dns::addresses_for(m, "registry.sandgate.test");
  ASSERT_EQ(addrs.size(), 1u);
  EXPECT_EQ(addrs[0], (std::array<uint8_t, 4>{203, 0, 113, 20}));
  EXPECT_EQ(m.answers.size(), 1u) << "the other name's record was passed on";
  {
    std::lock_guard lock(mu_);
    ASSERT_EQ(admitted_.size(), 1u);
    EXPECT_EQ(admitted_[0].family, AF_INET);
    EXPECT_EQ(admitted_[0].port, 443);
    EXPECT_EQ(admitted_[0].prefix_len, 32);
    EXPECT_EQ(admitted_[0].addr[0], 203);
    EXPECT_EQ(admitted_[0].addr[3], 20);
    EXPECT_FALSE(answered_before_admit_);
  }
  auto d = resolver_->end_call(7);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_TRUE(d[0].verdict.allowed);
  EXPECT_EQ(d[0].verdict.address, "203.0.113.20");
  EXPECT_EQ(d[0].verdict.answer, "NOERROR");
}

// What an answer names is admitted to the guard, so an answer forged from off the path must not
// be easy: each query leaves from a port of its own, and an answer counts only on the socket of
// the query it answers (the right id on another query's port is ignored).
TEST_F(DnsResolverTest, EachQueryAsksFromAPortOfItsOwnAndItsAnswerCountsOnlyThere) {
  resolver_->begin_call(8);
  ask(*dns::encode_query(0x21, "registry.sandgate.test", dns::kTypeA));
  ask(*dns::encode_query(0x22, "ntp.sandgate.test", dns::kTypeA));
  sockaddr_in from1{}, from2{};
  auto q1 = dns::parse_message(receive(upstream_.get(), 5000, &from1));
  auto q2 = dns::parse_message(receive(upstream_.get(), 5000, &from2));
  ASSERT_TRUE(q1.ok() && q2.ok()) << "the upstream did not get both queries";
  EXPECT_NE(from1.sin_port, from2.sin_port) << "two queries from one port";
  if (q1->questions[0].name != "registry.sandgate.test") {
    std::swap(q1, q2);
    std::swap(from1, from2);
  }
  dns::Record a{"registry.sandgate.test", dns::kTypeA, dns::kClassIn, 60,
                std::string("\xcb\x00\x71\x14", 4), ""};
  std::string reply = dns::encode_reply(*q1, dns::kNoError, {a});
  // To the other query's port: ignored, nothing admitted, no answer to the run.
  ASSERT_GT(::sendto(upstream_.get(), reply.data(), reply.size(), 0,
                     reinterpret_cast<sockaddr*>(&from2), sizeof from2),
            0);
  EXPECT_EQ(receive(client_.get(), 150), "");
  {
    std::lock_guard lock(mu_);
    EXPECT_TRUE(admitted_.empty());
  }
  // To its own port: answered.
  ASSERT_GT(::sendto(upstream_.get(), reply.data(), reply.size(), 0,
                     reinterpret_cast<sockaddr*>(&from1), sizeof from1),
            0);
  dns::Message m;
  for (int i = 0; i < 3 && m.id != 0x21; ++i) m = answer();  // the other may time out first
  EXPECT_EQ(m.id, 0x21);
  EXPECT_EQ(m.rcode, dns::kNoError);
  std::lock_guard lock(mu_);
  ASSERT_EQ(admitted_.size(), 1u);
  EXPECT_EQ(admitted_[0].addr[3], 20);
}

TEST_F(DnsResolverTest, AaaaOfAListedNameIsAnEmptyAnswerNotForwarded) {
  resolver_->begin_call(2);
  ask(*dns::encode_query(9, "registry.sandgate.test", dns::kTypeAaaa));
  auto m = answer();
  EXPECT_EQ(m.rcode, dns::kNoError);
  EXPECT_TRUE(m.answers.empty());
  EXPECT_EQ(receive(upstream_.get(), 200), "");
  auto d = resolver_->end_call(2);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_TRUE(d[0].verdict.allowed);
  EXPECT_EQ(d[0].verdict.query_type, "AAAA");
}

TEST_F(DnsResolverTest, MalformedAndOddQueriesAreAnsweredLocally) {
  resolver_->begin_call(3);
  // A compression loop in the question: FORMERR, no question echoed.
  ask(std::string("\x00\x05\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x0c\x00\x01\x00\x01", 18));
  auto m = answer();
  EXPECT_EQ(m.id, 5);
  EXPECT_EQ(m.rcode, dns::kFormErr);
  EXPECT_TRUE(m.questions.empty());
  // Two questions: FORMERR. An inverse query (opcode 1): NOTIMP.
  std::string two = *dns::encode_query(6, "registry.sandgate.test", dns::kTypeA);
  two[5] = 2;
  two += two.substr(12);
  ask(two);
  EXPECT_EQ(answer().rcode, dns::kFormErr);
  std::string iquery = *dns::encode_query(7, "registry.sandgate.test", dns::kTypeA);
  iquery[2] = static_cast<char>(0x08 | 0x01);
  ask(iquery);
  EXPECT_EQ(answer().rcode, dns::kNotImp);
  // Too short for a header: dropped, no answer; a response: dropped.
  ask("abc");
  std::string resp = *dns::encode_query(8, "registry.sandgate.test", dns::kTypeA);
  resp[2] = static_cast<char>(0x81);
  ask(resp);
  EXPECT_EQ(receive(client_.get(), 200), "");
  EXPECT_EQ(receive(upstream_.get(), 100), "");
  auto d = resolver_->end_call(3);
  ASSERT_EQ(d.size(), 3u);
  for (const auto& x : d) EXPECT_FALSE(x.verdict.allowed);
  EXPECT_NE(d[0].verdict.name.find("malformed"), std::string::npos) << d[0].verdict.name;
}

TEST_F(DnsResolverTest, AnUpstreamThatDoesNotAnswerIsServfailAndDecisionsStayWithTheirCall) {
  resolver_->begin_call(4);
  ask(*dns::encode_query(10, "registry.sandgate.test", dns::kTypeA));
  EXPECT_NE(receive(upstream_.get(), 5000), "");  // asked, never answered
  auto m = answer();
  EXPECT_EQ(m.rcode, dns::kServFail);
  auto d = resolver_->end_call(4);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NE(d[0].verdict.answer.find("did not answer"), std::string::npos) << d[0].verdict.answer;
  // Outside any call: answered and logged, attributed to none.
  ask(*dns::encode_query(11, "elsewhere.example", dns::kTypeA));
  EXPECT_EQ(answer().rcode, dns::kRefused);
  resolver_->begin_call(5);
  EXPECT_TRUE(resolver_->end_call(5).empty());
  EXPECT_EQ(resolver_->log().size(), 2u);
  std::lock_guard lock(mu_);
  EXPECT_TRUE(admitted_.empty());
}

TEST(DnsUpstream, ParsesAddressAndPortWithClearErrors) {
  auto a = parse_dns_upstream("203.0.113.53");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(to_string(*a), "203.0.113.53:53");
  a = parse_dns_upstream("10.0.0.2:5353");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(ntohs(a->sin_port), 5353);
  for (auto [text, says] :
       {std::pair{"dns.example", "a name would need a resolver"},
        std::pair{"1.2.3", "not an IPv4 address"}, std::pair{"1.2.3.4:0", "port \"0\""},
        std::pair{"1.2.3.4:x", "port \"x\""}, std::pair{"", "no address"}}) {
    auto r = parse_dns_upstream(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.error().message().find(says), std::string::npos) << r.error().message();
    EXPECT_NE(r.error().message().find("--dns-upstream"), std::string::npos) << r.error().message();
  }
}

}  // namespace
}  // namespace sandgate::session
