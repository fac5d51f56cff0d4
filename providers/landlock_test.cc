// The Landlock layer: the best-effort masking against fake ABI numbers, the jail's rules, and
// the real kernel in namespaces each test makes for itself (a forked child that unshares its
// own mount and network namespaces, so nothing it mounts or binds is seen outside it).
#include "providers/landlock.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <functional>
#include <string>

#include "core/fd.h"
#include "providers/jail.h"
#include "providers/supervisor.h"
#include "tests/support/provider_fixture.h"

namespace sandgate::testing {
namespace {

// This directory's testdata by absolute path (providers/CMakeLists.txt), so the test passes
// from any working directory, not only under ctest.
std::string testdata_dir() { return SANDGATE_PROVIDERS_TESTDATA; }

namespace ll = providers::landlock;

TEST(LandlockAbi, KnownRightsGrowWithTheAbi) {
  EXPECT_EQ(ll::known_rights(0), ll::Rights{});
  EXPECT_EQ(ll::known_rights(-1), ll::Rights{});
  auto v1 = ll::known_rights(1);
  EXPECT_EQ(v1.fs, 0x1fffULL);  // EXECUTE .. MAKE_SYM
  EXPECT_EQ(v1.net, 0u);
  EXPECT_EQ(v1.scoped, 0u);
  EXPECT_EQ(ll::known_rights(2).fs, v1.fs | ll::fs::kRefer);
  EXPECT_EQ(ll::known_rights(3).fs, v1.fs | ll::fs::kRefer | ll::fs::kTruncate);
  EXPECT_EQ(ll::known_rights(3).net, 0u);
  EXPECT_EQ(ll::known_rights(4).net, ll::net::kBindTcp | ll::net::kConnectTcp);
  EXPECT_EQ(ll::known_rights(4).fs & ll::fs::kIoctlDev, 0u);
  EXPECT_EQ(ll::known_rights(5).fs & ll::fs::kIoctlDev, ll::fs::kIoctlDev);
  EXPECT_EQ(ll::known_rights(5).scoped, 0u);
  EXPECT_EQ(ll::known_rights(6).scoped, ll::scope::kAbstractUnixSocket | ll::scope::kSignal);
  // ABI 7 adds logging flags, no right; a future ABI knows at least what this file knows.
  EXPECT_EQ(ll::known_rights(7), ll::known_rights(6));
  EXPECT_EQ(ll::known_rights(42), ll::known_rights(7));
}

ll::RulesetSpec everything() {
  ll::RulesetSpec spec;
  spec.handled = ll::known_rights(7);
  spec.paths = {{"/", ll::fs::kReadFile | ll::fs::kReadDir},
                {"/w", ll::fs::kRefer},  // only a right ABI 1 lacks
                {"/t", ll::fs::kTruncate | ll::fs::kWriteFile}};
  spec.ports = {{443, ll::net::kConnectTcp}};
  return spec;
}

TEST(LandlockAbi, BestEffortAtAbi1DropsReferAndEveryLaterRight) {
  auto s = ll::best_effort(everything(), 1);
  EXPECT_EQ(s.handled.fs, 0x1fffULL);
  EXPECT_EQ(s.handled.net, 0u);
  EXPECT_EQ(s.handled.scoped, 0u);
  ASSERT_EQ(s.paths.size(), 2u);  // /w had nothing ABI 1 knows
  EXPECT_EQ(s.paths[0].path, "/");
  EXPECT_EQ(s.paths[1].path, "/t");
  EXPECT_EQ(s.paths[1].access, ll::fs::kWriteFile);
  EXPECT_TRUE(s.ports.empty());
}

TEST(LandlockAbi, BestEffortKeepsNetworkFromAbi4AndScopesFromAbi6) {
  auto v3 = ll::best_effort(everything(), 3);
  EXPECT_EQ(v3.handled.fs & ll::fs::kRefer, ll::fs::kRefer);
  EXPECT_TRUE(v3.ports.empty());
  EXPECT_EQ(v3.paths.size(), 3u);
  auto v4 = ll::best_effort(everything(), 4);
  EXPECT_EQ(v4.handled.net, ll::net::kBindTcp | ll::net::kConnectTcp);
  ASSERT_EQ(v4.ports.size(), 1u);
  EXPECT_EQ(v4.ports[0].port, 443);
  EXPECT_EQ(v4.handled.scoped, 0u);
  auto v6 = ll::best_effort(everything(), 6);
  EXPECT_EQ(v6.handled.scoped, ll::scope::kAbstractUnixSocket | ll::scope::kSignal);
  // A rule never grants more than the ruleset handles.
  ll::RulesetSpec narrow;
  narrow.handled.fs = ll::fs::kWriteFile;
  narrow.paths = {{"/x", ll::fs::kWriteFile | ll::fs::kReadFile}, {"/y", ll::fs::kReadFile}};
  narrow.ports = {{80, ll::net::kConnectTcp}};
  auto n = ll::best_effort(narrow, 6);
  ASSERT_EQ(n.paths.size(), 1u);
  EXPECT_EQ(n.paths[0].access, ll::fs::kWriteFile);
  EXPECT_TRUE(n.ports.empty()) << "no network handled: a port rule would be EINVAL";
}

TEST(LandlockAbi, DescribeNamesWhatTheAbiEnforces) {
  EXPECT_EQ(ll::describe(0), "nothing");
  EXPECT_EQ(ll::describe(1), "filesystem");
  EXPECT_NE(ll::describe(4).find("TCP bind/connect"), std::string::npos);
  EXPECT_NE(ll::describe(7).find("scopes (abstract unix sockets, signals)"), std::string::npos);
}

TEST(JailLandlockRules, TheRunsOwnNetworkNamespaceLeavesTcpToTheNamespace) {
  providers::JailConfig c;  // new_network: the default, as for --net none and allowlists
  c.tcp_connect_ports = {443};
  auto spec = providers::call_landlock_rules(c);
  EXPECT_EQ(spec.handled.net, 0u);
  EXPECT_TRUE(spec.ports.empty());
}

TEST(JailLandlockRules, RootReadsWorkspaceWritesPortsFromTheAllowlist) {
  providers::JailConfig c;
  c.readwrite_mounts = {{"/host/home", "/home/me"}};
  c.tcp_connect_ports = {443, 5000};
  c.new_network = false;  // TCP is Landlock's only where the network is shared
  auto spec = providers::call_landlock_rules(c);
  // Everything the newest ABI knows but mkdir, rmdir and unlink, whose per-operation walk
  // would make a deep tree quadratic (jail.cc): those are the mount layer's.
  EXPECT_EQ(spec.handled.fs,
            ll::known_rights(7).fs & ~(ll::fs::kMakeDir | ll::fs::kRemoveDir | ll::fs::kRemoveFile));
  EXPECT_EQ(spec.handled.net, ll::net::kBindTcp | ll::net::kConnectTcp);
  auto access = [&](const std::string& path) {
    for (const auto& r : spec.paths)
      if (r.path == path) return r.access;
    return uint64_t{0};
  };
  EXPECT_EQ(access("/"), ll::fs::kReadFile | ll::fs::kReadDir | ll::fs::kExecute);
  EXPECT_EQ(access("/proc"), 0u) << "procfs is readable through /, never writable";
  for (const char* w :
       {"/workspace", "/tmp", "/var/tmp", "/dev/shm", "/home/sandbox", "/home/me"}) {
    EXPECT_TRUE(access(w) & ll::fs::kWriteFile) << w;
    EXPECT_TRUE(access(w) & ll::fs::kMakeReg) << w;
    EXPECT_FALSE(access(w) & ll::fs::kMakeChar) << w;
  }
  EXPECT_TRUE(access("/dev") & ll::fs::kWriteFile);
  EXPECT_FALSE(access("/dev") & ll::fs::kMakeReg) << "no files made among the device nodes";
  ASSERT_EQ(spec.ports.size(), 2u);
  EXPECT_EQ(spec.ports[0].port, 443);
  EXPECT_EQ(spec.ports[0].access, ll::net::kConnectTcp) << "connect only: bind stays denied";
  EXPECT_EQ(providers::run_landlock_scope().handled.scoped,
            ll::scope::kAbstractUnixSocket | ll::scope::kSignal);
}

TEST(LandlockDoctor, ActiveLsmsFromSecurityfsWhenMounted) {
  HostPaths paths;
  paths.sys = testdata_dir() + "/securityfs";
  auto checks = ll::doctor_checks(paths);
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_EQ(checks[0].name, "landlock");
  EXPECT_EQ(checks[1].name, "active LSMs");
  EXPECT_NE(checks[1].detail.find("lockdown,capability,landlock,bpf"), std::string::npos)
      << checks[1].detail;
  // Listed: consistent with any answer of the kernel's.
  EXPECT_TRUE(checks[1].ok) << checks[1].detail;
  paths.sys = testdata_dir() + "/no-such-sys";
  checks = ll::doctor_checks(paths);
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_NE(checks[1].detail.find("securityfs not mounted"), std::string::npos) << checks[1].detail;
}

// ---- the real kernel ----

int kernel_abi() {
  auto abi = ll::abi_version();
  return abi.ok() ? *abi : 0;
}

#define REQUIRE_LANDLOCK(min_abi)                                                                \
  SANDGATE_REQUIRE_ROOT();                                                                       \
  SANDGATE_REQUIRE(kernel_abi() >= (min_abi), "needs Landlock ABI " #min_abi " (this kernel: " + \
                                                  std::to_string(kernel_abi()) +                 \
                                                  "; see sandgate doctor)")

// Runs `body` in a forked child and returns what it wrote (one line of outcomes), or
// "child died: ..." when it did not exit 0.
std::string in_child(const std::function<std::string()>& body) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return "pipe failed";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    std::string out = body();
    (void)!::write(p[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(p[1]);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return "child died: status " + std::to_string(status) + " after '" + out + "'";
  return out;
}

std::string outcome(int err) { return err == 0 ? "ok" : strerrorname_np(err); }

// Applies `spec` (best effort for this kernel) to the calling process, with no_new_privs as
// the jail's calls have it. "" or the error.
std::string apply(const ll::RulesetSpec& spec) {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return "no_new_privs failed ";
  auto fd = ll::build(ll::best_effort(spec, kernel_abi()));
  if (!fd.ok()) return fd.error().message() + " ";
  if (auto s = ll::restrict_self(fd->get()); !s.ok()) return s.error().message() + " ";
  return "";
}

int create_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  ::close(fd);
  return 0;
}

// A private mount namespace with a tmpfs on /mnt: a workspace and, bound read-write beside
// it, a directory the mounts (and root's file modes) let anyone write.
TEST(LandlockKernel, WriteOutsideTheWorkspaceIsEaccesEvenThroughAWritableBind) {
  REQUIRE_LANDLOCK(1);
  std::string out = in_child([] {
    if (::unshare(CLONE_NEWNS) != 0) return std::string("unshare failed");
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      return std::string("private");
    if (::mount("sgtest", "/mnt", "tmpfs", 0, "mode=0755") != 0) return std::string("tmpfs failed");
    ::mkdir("/mnt/workspace", 0777);
    ::mkdir("/mnt/other", 0777);
    ::mkdir("/mnt/bound", 0777);
    if (::mount("/mnt/other", "/mnt/bound", nullptr, MS_BIND, nullptr) != 0)
      return std::string("bind");
    std::string r = "before=" + outcome(create_file("/mnt/bound/a"));
    providers::JailConfig c;
    c.workspace = "/mnt/workspace";
    c.home = "/mnt/no-home";
    r += " " + apply(providers::call_landlock_rules(c));
    r += "bound=" + outcome(create_file("/mnt/bound/b"));
    r += " workspace=" + outcome(create_file("/mnt/workspace/b"));
    r += " mknod=" + outcome(::mknod("/mnt/bound/f", S_IFIFO | 0600, 0) == 0 ? 0 : errno);
    r += " proc=" + outcome(create_file("/proc/self/oom_score_adj"));
    r += " read=" + outcome(::access("/mnt/bound/a", R_OK) == 0 ? 0 : errno);
    return r;
  });
  EXPECT_EQ(out, "before=ok bound=EACCES workspace=ok mknod=EACCES proc=EACCES read=ok");
}

// A listener on the loopback of a fresh network namespace: connect works before. Where the
// call shares its network (the test-only share_host_network), connect is EACCES after (no port
// allowed) and works again where the allowlist names the port, and bind is EACCES; in the
// run's own network namespace (the default) both stay the namespace's: a test suite's local
// server binds and is reached.
TEST(LandlockKernel, TcpIsDeniedOutsideTheAllowlistOnlyWhereTheNetworkIsShared) {
  REQUIRE_LANDLOCK(4);
  auto run = [](bool allow_port, bool own_network) {
    return in_child([allow_port, own_network] {
      if (::unshare(CLONE_NEWNET) != 0) return std::string("unshare failed");
      int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      struct ifreq ifr = {};
      std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
      ::ioctl(s, SIOCGIFFLAGS, &ifr);
      ifr.ifr_flags |= IFF_UP;
      if (::ioctl(s, SIOCSIFFLAGS, &ifr) != 0) return std::string("loopback");
      ::close(s);
      int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      socklen_t len = sizeof a;
      if (::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(l, 8) != 0 ||
          ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0)
        return std::string("listen");
      auto try_connect = [&] {
        int c = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int err = ::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 ? 0 : errno;
        ::close(c);
        return outcome(err);
      };
      std::string r = "before=" + try_connect();
      providers::JailConfig c;
      c.new_network = own_network;
      if (allow_port) c.tcp_connect_ports = {ntohs(a.sin_port)};
      r += " " + apply(providers::call_landlock_rules(c));
      r += "connect=" + try_connect();
      int b = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in any{};
      any.sin_family = AF_INET;
      any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      r += " bind=" +
           outcome(::bind(b, reinterpret_cast<sockaddr*>(&any), sizeof any) == 0 ? 0 : errno);
      return r;
    });
  };
  EXPECT_EQ(run(false, false), "before=ok connect=EACCES bind=EACCES");
  EXPECT_EQ(run(true, false), "before=ok connect=ok bind=EACCES");
  EXPECT_EQ(run(false, true), "before=ok connect=ok bind=ok");
}

std::string abstract_listen_connect(int* listener, const std::string& name) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (listener) {
    *listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::bind(*listener, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(*listener, 4) != 0)
      return "listen " + outcome(errno);
    return "";
  }
  int c = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int err = ::connect(c, reinterpret_cast<sockaddr*>(&a), len) == 0 ? 0 : errno;
  ::close(c);
  return outcome(err);
}

// Abstract names live in the network namespace: the child makes its own, so the names cannot
// meet anything of the host's. The socket made before the scope is outside the domain.
TEST(LandlockKernel, AbstractSocketOutsideTheDomainIsRefused) {
  REQUIRE_LANDLOCK(6);
  std::string out = in_child([] {
    if (::unshare(CLONE_NEWNET) != 0) return std::string("unshare failed");
    int outside = -1, inside = -1;
    std::string r = abstract_listen_connect(&outside, "sgtest-outside");
    r += "before=" + abstract_listen_connect(nullptr, "sgtest-outside");
    r += " " + apply(providers::run_landlock_scope());
    r += abstract_listen_connect(&inside, "sgtest-inside");
    r += "outside=" + abstract_listen_connect(nullptr, "sgtest-outside");
    r += " inside=" + abstract_listen_connect(nullptr, "sgtest-inside");
    return r;
  });
  EXPECT_EQ(out, "before=ok outside=EPERM inside=ok");
}

// A process forked before the scope is outside the domain: kill() is EPERM; one forked after
// is inside: kill() works. Each sleeper exits when its pipe closes, not by a parent-death
// signal: the scope refuses that signal too, from the domain to a process outside it.
TEST(LandlockKernel, SignalOutsideTheDomainIsRefused) {
  REQUIRE_LANDLOCK(6);
  std::string out = in_child([] {
    struct Sleeper {
      pid_t pid;
      int hold;  // closing it ends the sleeper
    };
    auto sleeper = []() -> Sleeper {
      int hold[2];
      if (::pipe(hold) != 0) return {-1, -1};
      pid_t pid = ::fork();
      if (pid == 0) {
        ::dup2(hold[0], 0);
        ::syscall(SYS_close_range, 1, ~0U, 0);  // nothing of the parent's, the result pipe too
        char b;
        while (::read(0, &b, 1) > 0) {
        }
        ::_exit(0);
      }
      ::close(hold[0]);
      return {pid, hold[1]};
    };
    Sleeper outside = sleeper();
    if (outside.pid < 0) return std::string("fork");
    std::string r = "before=" + outcome(::kill(outside.pid, 0) == 0 ? 0 : errno);
    r += " " + apply(providers::run_landlock_scope());
    Sleeper inside = sleeper();
    r += "outside=" + outcome(::kill(outside.pid, SIGTERM) == 0 ? 0 : errno);
    r += " inside=" + outcome(::kill(inside.pid, SIGKILL) == 0 ? 0 : errno);
    ::close(outside.hold);
    ::close(inside.hold);
    ::waitpid(outside.pid, nullptr, 0);
    ::waitpid(inside.pid, nullptr, 0);
    return r;
  });
  EXPECT_EQ(out, "before=ok outside=EPERM inside=ok");
}

// In a real jail: the layer is there (proc.landlock declared), and holds what the mounts
// leave open (procfs writes), while TCP on the run's own loopback stays the run's.
class JailLandlockTest : public ProviderTest {};

TEST(LandlockDoctorKernel, AbiComesFromTheKernel) {
  SANDGATE_REQUIRE(kernel_abi() >= 1, "this kernel has no Landlock (see sandgate doctor)");
  auto checks = ll::doctor_checks(HostPaths{});
  ASSERT_FALSE(checks.empty());
  EXPECT_TRUE(checks[0].ok) << checks[0].detail;
  EXPECT_NE(checks[0].detail.find("ABI " + std::to_string(kernel_abi())), std::string::npos)
      << checks[0].detail;
}

TEST_F(JailLandlockTest, CallsAreHeldToTheRulesetAndServeTheirOwnLoopback) {
  REQUIRE_LANDLOCK(4);
  auto ns = provider("namespaces");
  ASSERT_TRUE(ns);
  EXPECT_TRUE(ns->capabilities().count(Capability::kProcLandlock));
  auto env = make_env(*ns);
  ASSERT_TRUE(env);
  // A test suite's local server: bind a loopback port, accept, and read what a client sent.
  // Landlock knows ports, not addresses, so it would refuse both; the run's own network
  // namespace is what bounds TCP.
  const char* server =
      "import socket\n"
      "l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen(1)\n"
      "c = socket.create_connection(l.getsockname()); c.sendall(b'hello')\n"
      "print('served', l.accept()[0].recv(5).decode())\n";
  auto r = run(*env, {"/bin/bash", "-c",
                      "echo x > /workspace/f && echo workspace ok; : > /dev/null && echo dev ok; "
                      "echo 0 > /proc/self/oom_score_adj || echo proc denied; "
                      "python3 -c \"$0\"",
                      server});
  EXPECT_EQ(r.stdout_data, "workspace ok\ndev ok\nproc denied\nserved hello\n") << r.stderr_data;
  EXPECT_NE(r.stderr_data.find("Permission denied"), std::string::npos) << r.stderr_data;
  ASSERT_TRUE(env->destroy().ok());
}

TEST_F(JailLandlockTest, NoLandlockWeakeningLeavesTheOtherLayers) {
  REQUIRE_LANDLOCK(4);
  options_.self_test_weakenings = true;
  auto ns = provider("namespaces");
  ASSERT_TRUE(ns);
  providers::EnvSpec spec;
  spec.weakenings = {providers::Weakening::kNoLandlock};
  auto env = make_env(*ns, spec);
  ASSERT_TRUE(env);
  auto r = run(*env, {"/bin/bash", "-c",
                      "exec 3<>/dev/tcp/127.0.0.1/9 || echo tcp refused; "
                      "echo x > /usr/sgtest 2>/dev/null || echo base still read-only"});
  EXPECT_EQ(r.stdout_data, "tcp refused\nbase still read-only\n");
  EXPECT_NE(r.stderr_data.find("Connection refused"), std::string::npos) << r.stderr_data;
  ASSERT_TRUE(env->destroy().ok());
}

}  // namespace
}  // namespace sandgate::testing
