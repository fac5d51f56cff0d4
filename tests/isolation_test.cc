// The namespace jail's isolation, proven by trying to cross each boundary, with its positive
// twin on host_dir: the same action must succeed there, or its failure in the jail proves
// nothing (firecracker test_positive_/test_negative_, bubblewrap try-syscall).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "core/fd.h"
#include "providers/supervised_environment.h"
#include "tests/support/provider_fixture.h"

namespace sandgate::testing {
namespace {

constexpr char kTryInside[] = "/opt/sandgate-try";

class IsolationTest : public ProviderTest {
 protected:
  void SetUp() override {
    ProviderTest::SetUp();
    // A canary outside any workspace, and one in the environment of the launching process.
    canary_ = tmp_ + "/host-canary";
    std::ofstream(canary_) << "host secret\n";
    ::setenv("SANDGATE_TEST_CANARY_TOKEN", "canary-7f3a", 1);
  }
  void TearDown() override {
    ::unsetenv("SANDGATE_TEST_CANARY_TOKEN");
    ProviderTest::TearDown();
  }

  // The jail with sandgate-try bound in; host_dir runs it from the build tree.
  std::unique_ptr<providers::Environment> jail() {
    if (!is_root()) return nullptr;  // every jail test starts with SANDGATE_REQUIRE_ROOT()
    auto p = provider("namespaces");
    providers::EnvSpec spec;
    spec.readonly_mounts.push_back({SANDGATE_TRY_BINARY, kTryInside});
    return p ? make_env(*p, spec) : nullptr;
  }
  std::unique_ptr<providers::Environment> host() {
    auto p = provider("host_dir");
    return p ? make_env(*p) : nullptr;
  }
  std::string try_in(providers::Environment& env, bool jailed, const std::string& action,
                     const std::string& arg = "") {
    std::vector<std::string> argv = {jailed ? kTryInside : SANDGATE_TRY_BINARY, action};
    if (!arg.empty()) argv.push_back(arg);
    auto r = run(env, argv);
    EXPECT_EQ(r.status.shell_code(), 0) << r.stderr_data;
    return r.stdout_data;
  }

  std::string canary_;
};

// Each test starts with this: skip (or fail under SANDGATE_MUST_WORK) without root.
#define JAIL_TEST_PRELUDE() SANDGATE_REQUIRE_ROOT()

TEST_F(IsolationTest, NegativeNamespacesHostCanaryInvisible) {
  JAIL_TEST_PRELUDE();
  auto env = jail();
  ASSERT_TRUE(env);
  EXPECT_EQ(try_in(*env, true, "read-file", canary_), "read-file ENOENT\n");
  auto r = sh(*env, "ls /var/tmp /root /home 2>&1; cat /etc/shadow 2>&1");
  EXPECT_EQ(r.stdout_data.find("sgtest-"), std::string::npos) << r.stdout_data;
  EXPECT_NE(r.stdout_data.find("No such file"), std::string::npos) << r.stdout_data;
}
TEST_F(IsolationTest, PositiveHostDirHostCanaryReadable) {
  auto env = host();
  ASSERT_TRUE(env);
  EXPECT_EQ(try_in(*env, false, "read-file", canary_), "read-file ok\n");
}

TEST_F(IsolationTest, NegativeNamespacesWritesOutsideWorkspaceFail) {
  JAIL_TEST_PRELUDE();
  auto env = jail();
  ASSERT_TRUE(env);
  EXPECT_EQ(try_in(*env, true, "write-file", "/usr/sandgate-escape"), "write-file EROFS\n");
  EXPECT_EQ(try_in(*env, true, "write-file", "/etc/sandgate-escape"), "write-file EROFS\n");
  EXPECT_EQ(try_in(*env, true, "write-file", "/sandgate-escape"), "write-file EROFS\n");
  // /tmp is writable but private: nothing appears on the host.
  EXPECT_EQ(try_in(*env, true, "write-file", "/tmp/sandgate-escape"), "write-file ok\n");
  EXPECT_NE(::access("/usr/sandgate-escape", F_OK), 0);
  EXPECT_NE(::access("/etc/sandgate-escape", F_OK), 0);
  EXPECT_NE(::access("/tmp/sandgate-escape", F_OK), 0);
  // The workspace is the one writable host-backed path: the write shows on the host.
  EXPECT_EQ(try_in(*env, true, "write-file", "/workspace/inside"), "write-file ok\n");
  EXPECT_EQ(::access((env->workspace_host_path() + "/inside").c_str(), F_OK), 0);
}
TEST_F(IsolationTest, PositiveHostDirWritesOutsideWorkspaceLand) {
  auto env = host();
  ASSERT_TRUE(env);
  std::string outside = tmp_ + "/written-from-host-dir";
  EXPECT_EQ(try_in(*env, false, "write-file", outside), "write-file ok\n");
  EXPECT_EQ(::access(outside.c_str(), F_OK), 0);
}

TEST_F(IsolationTest, NegativeNamespacesOnlyLoopback) {
  JAIL_TEST_PRELUDE();
  auto env = jail();
  ASSERT_TRUE(env);
  // Interfaces, read from inside: loopback only, and up.
  auto r = sh(*env, "ls /sys/class/net 2>/dev/null || tail -n +3 /proc/net/dev | cut -d: -f1");
  std::string names = r.stdout_data;
  names.erase(std::remove(names.begin(), names.end(), ' '), names.end());
  EXPECT_EQ(names, "lo\n");
  // No route off the jail: the IPv4 table holds only its header line, and every IPv6 route is
  // on loopback. Nothing is sent to find this out.
  auto route = sh(*env, "wc -l < /proc/net/route; grep -vc ' lo$' /proc/net/ipv6_route");
  EXPECT_EQ(route.stdout_data, "1\n0\n");
}
TEST_F(IsolationTest, PositiveHostDirSeesHostInterfaces) {
  auto env = host();
  ASSERT_TRUE(env);
  auto r = sh(*env, "tail -n +3 /proc/net/dev | wc -l");
  EXPECT_GT(std::atoi(r.stdout_data.c_str()), 1) << "the host has more than loopback";
}

TEST_F(IsolationTest, NegativeNamespacesHostEnvironmentAbsent) {
  JAIL_TEST_PRELUDE();
  auto env = jail();
  ASSERT_TRUE(env);
  auto r = sh(*env, "env");
  EXPECT_EQ(r.stdout_data.find("canary-7f3a"), std::string::npos) << r.stdout_data;
  EXPECT_NE(r.stdout_data.find("HOME=/home/sandbox"), std::string::npos);
  // Only what the spec names passes.
  auto p = provider("namespaces");
  providers::EnvSpec spec;
  spec.env = {"SANDGATE_TEST_CANARY_TOKEN", "EXTRA=1"};
  auto allowed = make_env(*p, spec);
  ASSERT_TRUE(allowed);
  auto a = sh(*allowed, "echo $SANDGATE_TEST_CANARY_TOKEN $EXTRA");
  EXPECT_EQ(a.stdout_data, "canary-7f3a 1\n");
}
TEST_F(IsolationTest, PositiveHostDirHostEnvironmentPresent) {
  auto env = host();
  ASSERT_TRUE(env);
  EXPECT_EQ(sh(*env, "echo $SANDGATE_TEST_CANARY_TOKEN").stdout_data, "canary-7f3a\n");
}

TEST_F(IsolationTest, NegativeNamespacesUnprivileged) {
  JAIL_TEST_PRELUDE();
  auto env = jail();
  ASSERT_TRUE(env);
  EXPECT_EQ(sh(*env, "id -u; id -g").stdout_data, "10001\n10001\n");
  auto status = sh(*env, "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status");
  for (const char* line : {"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000",
                           "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000",
                           "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"})
    EXPECT_NE(status.stdout_data.find(line), std::string::npos) << line << " in\n" << status.stdout_data;
  // From outside: the call runs as an unprivileged host uid (id_map_base + 10001).
  auto r = sh(*env, "cat /proc/self/status > /dev/null; echo");
  EXPECT_GT(r.host_pid, 0);
}
TEST_F(IsolationTest, PositiveHostDirPrivileged) {
  auto env = host();
  ASSERT_TRUE(env);
  auto status = sh(*env, "id -u; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status");
  EXPECT_EQ(status.stdout_data.substr(0, 2), std::to_string(::geteuid()).substr(0, 1) + "\n");
  EXPECT_NE(status.stdout_data.find("NoNewPrivs:\t0"), std::string::npos) << status.stdout_data;
  EXPECT_NE(status.stdout_data.find("Seccomp:\t0"), std::string::npos) << status.stdout_data;
}

TEST_F(IsolationTest, NegativeNamespacesDangerousSyscallsDenied) {
  JAIL_TEST_PRELUDE();
  auto env = jail();
  ASSERT_TRUE(env);
  for (const char* action : {"mount", "ptrace", "unshare-user", "unshare-net", "bpf", "keyctl", "vsock"})
    EXPECT_EQ(try_in(*env, true, action), std::string(action) + " EPERM\n");
}
TEST_F(IsolationTest, PositiveHostDirDangerousSyscallsWork) {
  SANDGATE_REQUIRE_ROOT();
  auto env = host();
  ASSERT_TRUE(env);
  // Natively (root, no filter) each action goes through; mount is left out on purpose: it
  // would mount over the host's /tmp.
  for (const char* action : {"ptrace", "unshare-user", "unshare-net", "bpf", "keyctl"})
    EXPECT_EQ(try_in(*env, false, action), std::string(action) + " ok\n");
}

TEST_F(IsolationTest, NegativeNamespacesBackgroundProcessesDieWithTheRun) {
  JAIL_TEST_PRELUDE();
  auto p = provider("namespaces");
  auto env = make_env(*p);
  ASSERT_TRUE(env);
  auto r = sh(*env, "setsid sleep 300 >/dev/null 2>&1 & (sleep 301 &) ; echo started");
  EXPECT_EQ(r.stdout_data, "started\n");
  // From outside: the run's pid namespace holds the supervisor and the two sleeps.
  auto* supervised = dynamic_cast<providers::SupervisedEnvironment*>(env.get());
  ASSERT_NE(supervised, nullptr);
  std::set<pid_t> pids = pids_in_pidns_of(supervised->supervisor_pid());
  EXPECT_GE(pids.size(), 3u);
  ASSERT_TRUE(env->destroy().ok());
  for (pid_t pid : pids) EXPECT_FALSE(process_exists(pid)) << "pid " << pid << " survived the run";
}
TEST_F(IsolationTest, PositiveHostDirBackgroundProcessOutlivesTheCall) {
  auto p = provider("host_dir");
  auto env = make_env(*p);
  ASSERT_TRUE(env);
  auto r = sh(*env, "setsid sleep 300 >/dev/null 2>&1 & echo $!");
  pid_t bg = std::atoi(r.stdout_data.c_str());
  // On the host the daemon is really running after the call returned...
  EXPECT_TRUE(process_exists(bg));
  // ...and the run still takes it down with it (sandgate cleans up after every provider).
  ASSERT_TRUE(env->destroy().ok());
  EXPECT_FALSE(process_exists(bg));
}

TEST_F(IsolationTest, NegativeNamespacesWorkspaceFreshPerRun) {
  JAIL_TEST_PRELUDE();
  auto p = provider("namespaces");
  {
    auto env = make_env(*p);
    ASSERT_TRUE(env);
    sh(*env, "echo persisted > /workspace/marker");
    // Positive twin within the run: the marker is there for the next call.
    EXPECT_EQ(sh(*env, "cat /workspace/marker").stdout_data, "persisted\n");
  }
  auto env = make_env(*p);
  ASSERT_TRUE(env);
  EXPECT_EQ(sh(*env, "ls -A /workspace").stdout_data, "");
}
TEST_F(IsolationTest, PositiveHostDirWorkspaceKeepsWritesWithinARun) {
  auto p = provider("host_dir");
  auto env = make_env(*p);
  ASSERT_TRUE(env);
  sh(*env, "echo persisted > marker");
  EXPECT_EQ(sh(*env, "cat marker").stdout_data, "persisted\n");
}

}  // namespace
}  // namespace sandgate::testing
