// The egress guard against the real kernel: allow/deny twins for IPv4 and IPv6, TCP and UDP,
// inside a network namespace of the test's own (decoy addresses on its loopback, nothing
// routed off the machine).
#include "ebpf/egress.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "core/fd.h"
#include "core/mounts.h"
#include "core/result.h"
#include "tests/support/privileged.h"

namespace sandgate::ebpf {
namespace {

sockaddr_storage addr_of(const char* ip, uint16_t port) {
  sockaddr_storage ss{};
  if (std::strchr(ip, ':')) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(port);
    ::inet_pton(AF_INET6, ip, &s6->sin6_addr);
  } else {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
    s4->sin_family = AF_INET;
    s4->sin_port = htons(port);
    ::inet_pton(AF_INET, ip, &s4->sin_addr);
  }
  return ss;
}
socklen_t len_of(const sockaddr_storage& ss) {
  return ss.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// In the child, inside its own network namespace: a listener (TCP) and a bound socket (UDP) on
// each decoy, then the move into the guarded cgroup, then one attempt per case. The result
// line: "name=0" or "name=ERRNO" per case.
std::string attempts_in_cgroup(const std::string& cgroup_dir) {
  const char* decoys[] = {"203.0.113.20", "203.0.113.30", "2001:db8::20", "2001:db8::30"};
  if (std::system(
          "ip link set lo up && ip addr add 203.0.113.20/32 dev lo && "
          "ip addr add 203.0.113.30/32 dev lo && ip -6 addr add 2001:db8::20/128 dev lo nodad && "
          "ip -6 addr add 2001:db8::30/128 dev lo nodad") != 0)
    return "setup=ip";
  for (const char* ip : decoys) {
    auto a = addr_of(ip, 443);
    int l = ::socket(a.ss_family, SOCK_STREAM, 0);
    if (::bind(l, reinterpret_cast<sockaddr*>(&a), len_of(a)) != 0 || ::listen(l, 8) != 0)
      return std::string("setup=listen ") + ip;
    auto u = addr_of(ip, 53);
    int us = ::socket(u.ss_family, SOCK_DGRAM, 0);
    if (::bind(us, reinterpret_cast<sockaddr*>(&u), len_of(u)) != 0)
      return std::string("setup=udp ") + ip;
  }
  auto lo = addr_of("127.0.0.1", 8080);
  int ll = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::bind(ll, reinterpret_cast<sockaddr*>(&lo), len_of(lo)) != 0 || ::listen(ll, 8) != 0)
    return "setup=lo";
  std::string me = std::to_string(::getpid());
  int fd = ::open((cgroup_dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0 || ::write(fd, me.data(), me.size()) != static_cast<ssize_t>(me.size()))
    return "setup=cgroup";
  ::close(fd);

  std::string out;
  auto record = [&](const std::string& name, int rc) {
    out += name + "=" + (rc == 0 ? "0" : errno_name(errno)) + " ";
  };
  auto tcp = [&](const std::string& name, const char* ip, uint16_t port) {
    auto a = addr_of(ip, port);
    int s = ::socket(a.ss_family, SOCK_STREAM, 0);
    record(name, ::connect(s, reinterpret_cast<sockaddr*>(&a), len_of(a)));
    ::close(s);
  };
  auto udp = [&](const std::string& name, const char* ip, uint16_t port) {
    auto a = addr_of(ip, port);
    int s = ::socket(a.ss_family, SOCK_DGRAM, 0);
    ssize_t n = ::sendto(s, "q", 1, 0, reinterpret_cast<sockaddr*>(&a), len_of(a));
    record(name, n == 1 ? 0 : -1);
    ::close(s);
  };
  tcp("tcp4_allowed", "203.0.113.20", 443);
  tcp("tcp4_denied", "203.0.113.30", 443);
  tcp("tcp6_allowed", "2001:db8::20", 443);
  tcp("tcp6_denied", "2001:db8::30", 443);
  udp("udp4_allowed", "203.0.113.20", 53);
  udp("udp4_denied", "203.0.113.30", 53);
  udp("udp6_allowed", "2001:db8::20", 53);
  udp("udp6_denied", "2001:db8::30", 53);
  udp("udp4_tcp_only_port", "203.0.113.20", 443);  // the rule for :443 is tcp: only
  tcp("loopback", "127.0.0.1", 8080);
  return out;
}

std::map<std::string, std::string> run_child(const std::string& cgroup_dir) {
  int p[2];
  if (::pipe(p) != 0) return {};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    std::string r = ::unshare(CLONE_NEWNET) == 0 ? attempts_in_cgroup(cgroup_dir) : "setup=unshare";
    (void)!::write(p[1], r.data(), r.size());
    ::_exit(0);
  }
  ::close(p[1]);
  std::string text;
  char buf[512];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) text.append(buf, n);
  ::close(p[0]);
  int st;
  ::waitpid(pid, &st, 0);
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t sp = text.find(' ', i);
    if (sp == std::string::npos) sp = text.size();
    std::string kv = text.substr(i, sp - i);
    if (auto eq = kv.find('='); eq != std::string::npos) out[kv.substr(0, eq)] = kv.substr(eq + 1);
    i = sp + 1;
  }
  return out;
}

class EgressGuardReal : public ::testing::Test {
 protected:
  void SetUp() override {
    SANDGATE_REQUIRE_ROOT();
    std::string mount = cgroup2_mount_point();
    SANDGATE_REQUIRE(!mount.empty(), "no cgroup2 hierarchy to attach the guard to");
    auto g = EgressGuard::open();
    SANDGATE_REQUIRE(g.ok(), "the egress guard cannot load here: " +
                                 (g.ok() ? std::string() : g.error().message()));
    guard_ = std::move(*g);
    dir_ = mount + "/sandgate-test-egress-" + std::to_string(::getpid());
    ASSERT_EQ(::mkdir(dir_.c_str(), 0755), 0) << std::strerror(errno);
  }
  void TearDown() override {
    guard_.reset();
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }
  std::unique_ptr<EgressGuard> guard_;
  std::string dir_;
};

TEST_F(EgressGuardReal, AllowsTheListAndLoopbackAndDeniesTheRestWithEperm) {
  auto rules =
      parse_egress_rules({"tcp:203.0.113.20:443", "udp:203.0.113.20:53", "[2001:db8::20]:*"});
  ASSERT_TRUE(rules.ok()) << rules.error().message();
  auto run = guard_->guard(dir_, *rules);
  ASSERT_TRUE(run.ok()) << run.error().message();
  auto r = run_child(dir_);
  ASSERT_EQ(r.count("setup"), 0u) << "child setup failed at " << r["setup"];
  EXPECT_EQ(r["tcp4_allowed"], "0");
  EXPECT_EQ(r["tcp4_denied"], "EPERM");
  EXPECT_EQ(r["tcp6_allowed"], "0");
  EXPECT_EQ(r["tcp6_denied"], "EPERM");
  EXPECT_EQ(r["udp4_allowed"], "0");
  EXPECT_EQ(r["udp4_denied"], "EPERM");
  EXPECT_EQ(r["udp6_allowed"], "0");
  EXPECT_EQ(r["udp6_denied"], "EPERM");
  EXPECT_EQ(r["udp4_tcp_only_port"], "EPERM");
  EXPECT_EQ(r["loopback"], "0");

  // Every decision came back, with the cgroup that made it.
  std::vector<EgressDecision> seen;
  guard_->drain([&](const EgressDecision& d) { seen.push_back(d); });
  ASSERT_EQ(seen.size(), 10u);
  EXPECT_EQ(seen[0].address, "203.0.113.20");
  EXPECT_EQ(seen[0].port, 443);
  EXPECT_EQ(seen[0].protocol, "tcp");
  EXPECT_EQ(seen[0].hook, "connect");
  EXPECT_TRUE(seen[0].allowed);
  EXPECT_EQ(seen[1].address, "203.0.113.30");
  EXPECT_FALSE(seen[1].allowed);
  EXPECT_EQ(seen[3].family, "inet6");
  EXPECT_EQ(seen[3].address, "2001:db8::30");
  EXPECT_EQ(seen[5].hook, "sendmsg");
  EXPECT_EQ(seen[5].protocol, "udp");
  EXPECT_FALSE(seen[5].allowed);
  for (const auto& d : seen) EXPECT_EQ(d.cgroup_id, *run);
  EXPECT_EQ(guard_->lost(), 0u);
}

// The negative twin: the same attempts with the guard released pass everywhere (the decoys
// are reachable, so the denials above are the guard's).
TEST_F(EgressGuardReal, ReleasedRunIsNotGuarded) {
  auto run = guard_->guard(dir_, {});
  ASSERT_TRUE(run.ok()) << run.error().message();
  guard_->release(*run);
  auto r = run_child(dir_);
  ASSERT_EQ(r.count("setup"), 0u) << "child setup failed at " << r["setup"];
  for (const char* k :
       {"tcp4_allowed", "tcp4_denied", "tcp6_allowed", "tcp6_denied", "udp4_allowed", "udp4_denied",
        "udp6_allowed", "udp6_denied", "udp4_tcp_only_port", "loopback"})
    EXPECT_EQ(r[k], "0") << k;
}

TEST_F(EgressGuardReal, EmptyListDeniesEverythingButLoopback) {
  auto run = guard_->guard(dir_, {});
  ASSERT_TRUE(run.ok()) << run.error().message();
  auto r = run_child(dir_);
  ASSERT_EQ(r.count("setup"), 0u) << "child setup failed at " << r["setup"];
  for (const char* k :
       {"tcp4_allowed", "tcp4_denied", "tcp6_allowed", "udp4_allowed", "udp6_allowed"})
    EXPECT_EQ(r[k], "EPERM") << k;
  EXPECT_EQ(r["loopback"], "0");
  auto again = guard_->guard(dir_, {});
  EXPECT_FALSE(again.ok());
}

// A name entry allows nothing by itself; the addresses the run's resolver adds later do (and
// adding one twice changes nothing), the rest stays denied.
TEST_F(EgressGuardReal, NamesAllowNothingUntilTheirAddressesAreAdded) {
  auto names = parse_egress_rules({"tcp:registry.sandgate.test:443"});
  ASSERT_TRUE(names.ok());
  auto run = guard_->guard(dir_, *names);
  ASSERT_TRUE(run.ok()) << run.error().message();
  auto before = run_child(dir_);
  ASSERT_EQ(before.count("setup"), 0u) << "child setup failed at " << before["setup"];
  EXPECT_EQ(before["tcp4_allowed"], "EPERM");
  auto resolved = parse_egress_rules({"tcp:203.0.113.20:443"});
  ASSERT_TRUE(resolved.ok());
  ASSERT_TRUE(guard_->add(*run, *resolved).ok());
  ASSERT_TRUE(guard_->add(*run, *resolved).ok());
  auto after = run_child(dir_);
  ASSERT_EQ(after.count("setup"), 0u) << "child setup failed at " << after["setup"];
  EXPECT_EQ(after["tcp4_allowed"], "0");
  EXPECT_EQ(after["tcp4_denied"], "EPERM");
  EXPECT_EQ(after["udp4_allowed"], "EPERM");
  EXPECT_FALSE(guard_->add(*run + 1, *resolved).ok()) << "a run that is not guarded";
}

}  // namespace
}  // namespace sandgate::ebpf
