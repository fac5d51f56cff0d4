// The test-only weakenings of the namespace jail: each one observably does what it says, next
// to its hardened twin, and none is reachable without ProviderOptions::self_test_weakenings.
#include "providers/weakening.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "core/defer.h"
#include "core/fd.h"
#include "core/state.h"
#include "tests/support/provider_fixture.h"

namespace sandgate::testing {
namespace {

using providers::Weakening;

TEST(WeakeningNames, RoundTripAndUnknownNamesAreListed) {
  for (auto w : providers::all_weakenings()) {
    auto back = providers::weakening_from_string(providers::to_string(w));
    ASSERT_TRUE(back.ok()) << providers::to_string(w);
    EXPECT_EQ(*back, w);
  }
  EXPECT_EQ(providers::all_weakenings().size(), 10u);
  auto bad = providers::weakening_from_string("mount_everything");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("known: mount_home, pass_host_env"), std::string::npos)
      << bad.error().message();
}

class WeakeningTest : public ProviderTest {
 protected:
  void SetUp() override {
    ProviderTest::SetUp();
    if (!is_root()) return;
    hardened_ = provider("namespaces");
    providers::ProviderOptions weak_options = options_;
    weak_options.self_test_weakenings = true;
    auto p = registry_.create("namespaces", weak_options);
    ASSERT_TRUE(p.ok()) << p.error().message();
    weakened_ = std::move(p).value();
  }
  void TearDown() override {
    // The sharing weakenings leave their directories on purpose; the self-test removes them.
    EXPECT_TRUE(providers::remove_shared_dirs(options_.paths).ok());
    ProviderTest::TearDown();
  }

  std::unique_ptr<providers::Environment> weak_env(std::vector<Weakening> w) {
    providers::EnvSpec spec;
    spec.weakenings = std::move(w);
    return make_env(*weakened_, spec);
  }
  // One line of /proc/self/status as a call sees it: "Seccomp:\t2" -> "2".
  std::string status_field(providers::Environment& env, const std::string& field) {
    auto r = sh(env, "sed -n 's/^" + field + ":[[:space:]]*//p' /proc/self/status");
    EXPECT_EQ(r.status.shell_code(), 0) << r.stderr_data;
    return r.stdout_data;
  }

  std::unique_ptr<providers::Provider> hardened_, weakened_;
};

TEST_F(WeakeningTest, EachIsRefusedWithoutTheSelfTestOption) {
  SANDGATE_REQUIRE_ROOT();
  for (auto w : providers::all_weakenings()) {
    providers::EnvSpec spec;
    spec.weakenings = {w};
    auto env = hardened_->create(spec);
    ASSERT_FALSE(env.ok()) << providers::to_string(w);
    EXPECT_NE(env.error().message().find("refuses the test-only weakenings " + providers::to_string(w)),
              std::string::npos)
        << env.error().message();
  }
  // Nothing was made for a refused spec, not even a shared directory.
  EXPECT_EQ(count_entries(options_.paths.work_dir), 0u);
}

TEST_F(WeakeningTest, HostDirRefusesThemEvenWithTheOption) {
  providers::ProviderOptions o = options_;
  o.self_test_weakenings = true;
  auto host = registry_.create("host_dir", o);
  ASSERT_TRUE(host.ok());
  providers::EnvSpec spec;
  spec.weakenings = {Weakening::kNoSeccomp};
  auto env = (*host)->create(spec);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.error().message().find("no isolation to weaken"), std::string::npos);
}

TEST_F(WeakeningTest, MountHomeBindsTheLaunchersHomeReadWrite) {
  SANDGATE_REQUIRE_ROOT();
  // A canary home owned by the sandbox user's host id, as a user's home belongs to its user:
  // the fixed id of shared_uid, known before the run exists.
  std::string home = tmp_ + "/canary-home";
  ASSERT_EQ(::mkdir(home.c_str(), 0700), 0);
  std::ofstream(home + "/.netrc") << "machine example login canary-netrc\n";
  ASSERT_EQ(::chown(home.c_str(), options_.id_map_base + 10001, options_.id_map_base + 10001), 0);
  ASSERT_EQ(::chown((home + "/.netrc").c_str(), options_.id_map_base + 10001, options_.id_map_base + 10001), 0);
  const char* old_home = std::getenv("HOME");
  std::string saved = old_home ? old_home : "";
  ::setenv("HOME", home.c_str(), 1);
  Defer restore([&] {
    if (saved.empty()) ::unsetenv("HOME");
    else ::setenv("HOME", saved.c_str(), 1);
  });

  auto weak = weak_env({Weakening::kMountHome, Weakening::kSharedUid});
  ASSERT_TRUE(weak);
  auto r = sh(*weak, "echo $HOME; cat $HOME/.netrc; echo planted > $HOME/.bashrc");
  EXPECT_EQ(r.stdout_data, home + "\nmachine example login canary-netrc\n") << r.stderr_data;
  auto planted = read_file(home + "/.bashrc");
  ASSERT_TRUE(planted.ok()) << "the write did not reach the host's home";
  EXPECT_EQ(*planted, "planted\n");

  // The hardened twin: the same path does not exist inside, and HOME is the jail's.
  auto hard = make_env(*hardened_);
  ASSERT_TRUE(hard);
  auto h = sh(*hard, "echo $HOME; cat " + home + "/.netrc 2>&1");
  EXPECT_NE(h.stdout_data.find("/home/sandbox\n"), std::string::npos) << h.stdout_data;
  EXPECT_NE(h.stdout_data.find("No such file"), std::string::npos) << h.stdout_data;
}

TEST_F(WeakeningTest, PassHostEnvPassesTheWholeEnvironment) {
  SANDGATE_REQUIRE_ROOT();
  ::setenv("SANDGATE_WEAKENING_CANARY", "canary-env-51c2", 1);
  Defer unset([] { ::unsetenv("SANDGATE_WEAKENING_CANARY"); });
  auto weak = weak_env({Weakening::kPassHostEnv});
  ASSERT_TRUE(weak);
  auto r = sh(*weak, "env");
  EXPECT_NE(r.stdout_data.find("SANDGATE_WEAKENING_CANARY=canary-env-51c2\n"), std::string::npos)
      << r.stdout_data;
  // The jail's own essentials still win over the host's.
  EXPECT_NE(r.stdout_data.find("HOME=/home/sandbox\n"), std::string::npos) << r.stdout_data;
  auto hard = make_env(*hardened_);
  ASSERT_TRUE(hard);
  EXPECT_EQ(sh(*hard, "env").stdout_data.find("canary-env-51c2"), std::string::npos);
}

TEST_F(WeakeningTest, ShareHostNetworkKeepsTheLaunchersNamespace) {
  SANDGATE_REQUIRE_ROOT();
  // Read only: which namespace, which interfaces. Nothing is sent.
  char self[64] = {};
  ASSERT_GT(::readlink("/proc/thread-self/ns/net", self, sizeof self - 1), 0);
  auto host_dev = read_file("/proc/net/dev");
  ASSERT_TRUE(host_dev.ok());
  std::string host_ifaces;
  for (size_t pos = 0; (pos = host_dev->find(':', pos)) != std::string::npos; ++pos) {
    size_t start = host_dev->rfind('\n', pos) + 1;
    std::string name = host_dev->substr(start, pos - start);
    name.erase(0, name.find_first_not_of(' '));
    host_ifaces += name + "\n";
  }
  ASSERT_NE(host_ifaces, "lo\n") << "the host has no interface but lo: this test proves nothing";

  auto weak = weak_env({Weakening::kShareHostNetwork});
  ASSERT_TRUE(weak);
  std::string list_ifaces = "readlink /proc/self/ns/net; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '";
  EXPECT_EQ(sh(*weak, list_ifaces).stdout_data, std::string(self) + "\n" + host_ifaces);

  auto hard = make_env(*hardened_);
  ASSERT_TRUE(hard);
  auto h = sh(*hard, list_ifaces).stdout_data;
  EXPECT_EQ(h.find(self), std::string::npos) << h;
  EXPECT_TRUE(h.ends_with("]\nlo\n")) << h;
}

TEST_F(WeakeningTest, RootWithCapsRunsAsRootWithEveryCapability) {
  SANDGATE_REQUIRE_ROOT();
  auto last_cap = read_file("/proc/sys/kernel/cap_last_cap");
  ASSERT_TRUE(last_cap.ok());
  char full[32];
  std::snprintf(full, sizeof full, "%016llx\n", (1ULL << (std::atoi(last_cap->c_str()) + 1)) - 1);

  auto weak = weak_env({Weakening::kRootWithCaps});
  ASSERT_TRUE(weak);
  EXPECT_EQ(sh(*weak, "id -u; id -g").stdout_data, "0\n0\n");
  EXPECT_EQ(status_field(*weak, "CapEff"), full);
  EXPECT_EQ(status_field(*weak, "CapPrm"), full);
  EXPECT_EQ(status_field(*weak, "CapBnd"), full);
  EXPECT_EQ(status_field(*weak, "NoNewPrivs"), "0\n");
  // Still inside its user namespace: uid 0 there is the mapped base id here.
  EXPECT_EQ(sh(*weak, "cat /proc/self/uid_map | tr -s ' '").stdout_data,
            " 0 " + std::to_string(weak->host_id_base()) + " 65536\n");

  auto hard = make_env(*hardened_);
  ASSERT_TRUE(hard);
  EXPECT_EQ(sh(*hard, "id -u").stdout_data, "10001\n");
  EXPECT_EQ(status_field(*hard, "CapEff"), "0000000000000000\n");
  EXPECT_EQ(status_field(*hard, "CapBnd"), "0000000000000000\n");
  EXPECT_EQ(status_field(*hard, "NoNewPrivs"), "1\n");
}

TEST_F(WeakeningTest, NoSeccompInstallsNoFilter) {
  SANDGATE_REQUIRE_ROOT();
  auto weak = weak_env({Weakening::kNoSeccomp});
  ASSERT_TRUE(weak);
  EXPECT_EQ(status_field(*weak, "Seccomp"), "0\n");
  // Privileges are still dropped: only the filter is gone.
  EXPECT_EQ(status_field(*weak, "NoNewPrivs"), "1\n");
  auto hard = make_env(*hardened_);
  ASSERT_TRUE(hard);
  EXPECT_EQ(status_field(*hard, "Seccomp"), "2\n");
}

TEST_F(WeakeningTest, SeccompFullWidthCompareLetsTheHighBitVsockSocketThrough) {
  SANDGATE_REQUIRE_ROOT();
  // socket(AF_VSOCK) with a bit above the 32 the kernel reads, through libc's syscall() with
  // 64-bit arguments; the socket is only created, never connected (the hypervisor's side).
  const std::string script =
      "python3 -c 'import ctypes, os\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "L = ctypes.c_long\n"
      "for family in (40, (1 << 32) | 40):\n"
      "    fd = libc.syscall(L(41), L(family), L(1), L(0))\n"
      "    print(\"socket\" if fd >= 0 else os.strerror(ctypes.get_errno()))\n'";
  auto weak = weak_env({Weakening::kSeccompFullWidthCompare});
  ASSERT_TRUE(weak);
  auto w = sh(*weak, script);
  EXPECT_EQ(w.stdout_data, "Operation not permitted\nsocket\n") << w.stderr_data;
  // The filter is still there; only its comparisons are weakened.
  EXPECT_EQ(status_field(*weak, "Seccomp"), "2\n");
  auto hard = make_env(*hardened_);
  ASSERT_TRUE(hard);
  auto h = sh(*hard, script);
  EXPECT_EQ(h.stdout_data, "Operation not permitted\nOperation not permitted\n") << h.stderr_data;
}

TEST_F(WeakeningTest, ReuseWorkspaceSharesOneWorkspaceThatOutlivesRuns) {
  SANDGATE_REQUIRE_ROOT();
  std::string shared = options_.paths.work_dir + "/" + providers::kSharedWorkspaceDir;
  {
    auto a = weak_env({Weakening::kReuseWorkspace});
    ASSERT_TRUE(a);
    EXPECT_EQ(a->workspace_host_path(), shared);
    EXPECT_EQ(sh(*a, "echo from-a > /workspace/marker; echo ok").stdout_data, "ok\n");
    ASSERT_TRUE(a->destroy().ok());
  }
  EXPECT_EQ(::access((shared + "/marker").c_str(), F_OK), 0) << "destroy removed the shared workspace";
  auto b = weak_env({Weakening::kReuseWorkspace});
  ASSERT_TRUE(b);
  EXPECT_EQ(sh(*b, "cat /workspace/marker").stdout_data, "from-a\n");
  // The hardened twin gets a fresh, empty one.
  auto hard = make_env(*hardened_);
  ASSERT_TRUE(hard);
  EXPECT_NE(hard->workspace_host_path(), shared);
  EXPECT_EQ(sh(*hard, "ls -A /workspace | wc -l").stdout_data, "0\n");
  ASSERT_TRUE(b->destroy().ok());
  // While this process lives, gc leaves the shared workspace alone.
  auto report = collect_garbage(options_.paths);
  EXPECT_TRUE(report.errors.empty());
  EXPECT_EQ(::access(shared.c_str(), F_OK), 0);
}

TEST_F(WeakeningTest, ShareTmpSharesOneHostDirectory) {
  SANDGATE_REQUIRE_ROOT();
  auto a = weak_env({Weakening::kShareTmp});
  auto b = weak_env({Weakening::kShareTmp});
  ASSERT_TRUE(a && b);
  EXPECT_EQ(sh(*a, "echo from-a > /tmp/marker; echo ok").stdout_data, "ok\n");
  EXPECT_EQ(sh(*b, "cat /tmp/marker").stdout_data, "from-a\n");
  auto on_host = read_file(options_.paths.work_dir + "/" + providers::kSharedTmpDir + "/marker");
  ASSERT_TRUE(on_host.ok());
  EXPECT_EQ(*on_host, "from-a\n");
  auto hard = make_env(*hardened_);
  ASSERT_TRUE(hard);
  EXPECT_EQ(sh(*hard, "ls -A /tmp | wc -l").stdout_data, "0\n");
}

TEST_F(WeakeningTest, GcRemovesSharedDirectoriesOnceTheirOwnerIsGone) {
  SANDGATE_REQUIRE_ROOT();
  // A child makes both shared directories and dies without cleaning up.
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    bool ok = providers::prepare_shared_dir(options_.paths, providers::kSharedTmpDir, "", 0, 0, 01777).ok() &&
              providers::prepare_shared_dir(options_.paths, providers::kSharedWorkspaceDir, "", 0, 0, 0700).ok();
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_EQ(count_entries(options_.paths.work_dir), 2u);
  ASSERT_EQ(count_entries(options_.paths.state_dir + "/runs"), 2u);
  auto report = collect_garbage(options_.paths);
  EXPECT_TRUE(report.errors.empty());
  EXPECT_EQ(report.runs_removed, 2);
  EXPECT_EQ(count_entries(options_.paths.work_dir), 0u);
  EXPECT_EQ(count_entries(options_.paths.state_dir + "/runs"), 0u);
}

}  // namespace
}  // namespace sandgate::testing
