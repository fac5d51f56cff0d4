#include "providers/provider.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>

#include "providers/host_dir.h"
#include "providers/microvm.h"
#include "providers/namespaces.h"
#include "providers/podman.h"
#include "providers/registry.h"
#include "providers/supervised_environment.h"

namespace sandgate::providers {
namespace {

TEST(CapabilityTest, NamesRoundTrip) {
  for (auto c : all_capabilities()) {
    auto back = capability_from_string(to_string(c));
    ASSERT_TRUE(back.ok()) << to_string(c);
    EXPECT_EQ(*back, c);
  }
  auto bad = capability_from_string("fs.isolatd");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("unknown capability 'fs.isolatd'"), std::string::npos);
  EXPECT_NE(bad.error().message().find("fs.isolated"), std::string::npos) << "lists the known ones";
}

// WarmUp runs the provider's warm_up beside its caller and has it done once destroyed. A
// warm_up run in the caller's own thread would wait out its 10 s for the caller's word, and
// say it never came.
TEST(WarmUpTest, RunsBesideTheCallerAndIsDoneWhenDestroyed) {
  struct Slow : Provider {
    const ProviderInfo& info() const override { return HostDirProvider::static_info(); }
    Status available() const override { return {}; }
    Result<std::unique_ptr<Environment>> create(const EnvSpec&) override {
      return logic_error("create", "not this test's");
    }
    void warm_up() override {
      std::unique_lock lock(mu);
      heard = cv.wait_for(lock, std::chrono::seconds(10), [&] { return told; });
      done = true;
    }
    std::mutex mu;
    std::condition_variable cv;
    bool told = false, heard = false, done = false;
  };
  Slow provider;
  {
    WarmUp warm(provider);
    std::lock_guard lock(provider.mu);
    provider.told = true;
    provider.cv.notify_all();
  }
  std::lock_guard lock(provider.mu);
  EXPECT_TRUE(provider.done) << "WarmUp returned before warm_up did";
  EXPECT_TRUE(provider.heard) << "warm_up ran in the caller's thread";
}

TEST(RequirementsTest, ProviderLackingCapabilitiesIsRefusedWithTheList) {
  ProviderOptions options;
  options.allow_unsafe_host = true;
  auto host = HostDirProvider::make(options);
  ASSERT_TRUE(host.ok());
  auto s = check_requirements(
      **host, {Capability::kFsIsolated, Capability::kNetNone, Capability::kFsIsolated});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("disqualified: it lacks fs.isolated, net.none"),
            std::string::npos)
      << s.error().message();
  EXPECT_NE(s.error().message().find("UNSAFE"), std::string::npos);
}

TEST(RequirementsTest, NamespacesMeetsJailRequirements) {
  auto ns = NamespacesProvider::make({});
  ASSERT_TRUE(ns.ok());
  EXPECT_TRUE(check_requirements(**ns, {Capability::kFsIsolated, Capability::kProcSeccomp,
                                        Capability::kCredsScrubbedEnv})
                  .ok());
  auto s = check_requirements(**ns, {Capability::kKernelSeparate});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("kernel.separate"), std::string::npos);
}

// Issue 13: Podman and the microVM do not enforce an egress allowlist (sandgate wires it only
// into the namespace jail), so they do not declare net.egress_policy: a policy that requires it
// disqualifies them by name, and asking either for `--net allowlist` is refused outright rather
// than run with no network or an open one.
TEST(RequirementsTest, PodmanAndMicrovmAreDisqualifiedForAnEgressPolicy) {
  auto podman = PodmanProvider::make({});
  auto microvm = MicrovmProvider::make({});
  ASSERT_TRUE(podman.ok());
  ASSERT_TRUE(microvm.ok());
  for (Provider* p : {podman->get(), microvm->get()}) {
    auto s = check_requirements(*p, {Capability::kNetEgressPolicy});
    ASSERT_FALSE(s.ok()) << p->name();
    EXPECT_NE(s.error().message().find(p->name() + " is disqualified: it lacks net.egress_policy"),
              std::string::npos)
        << s.error().message();
    EnvSpec spec;
    spec.network = NetworkMode::kAllowlist;
    auto env = p->create(spec);
    ASSERT_FALSE(env.ok()) << p->name() << " made an allowlisted environment it cannot enforce";
    EXPECT_EQ(env.error().err, ENOTSUP) << env.error().message();
    EXPECT_NE(env.error().message().find("--net allowlist is not supported"), std::string::npos);
  }
  auto ns = NamespacesProvider::make({});
  ASSERT_TRUE(ns.ok());
  EXPECT_TRUE(check_requirements(**ns, {Capability::kNetEgressPolicy}).ok());
}

TEST(RegistryTest, BuiltinsAreRegisteredExplicitly) {
  Registry r;
  EXPECT_TRUE(r.entries().empty());
  register_builtin_providers(r);
  ASSERT_NE(r.find("namespaces"), nullptr);
  ASSERT_NE(r.find("host_dir"), nullptr);
  EXPECT_TRUE(r.find("host_dir")->info.unsafe);
  EXPECT_FALSE(r.find("namespaces")->info.unsafe);
  EXPECT_TRUE(r.find("host_dir")->info.capabilities.empty());
  auto unknown = r.create("qemu", {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message().find("known: host_dir, namespaces"), std::string::npos);
}

TEST(HostDirTest, RefusedWithoutTheUnsafeFlag) {
  Registry r;
  register_builtin_providers(r);
  auto refused = r.create("host_dir", {});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("--allow-unsafe-host"), std::string::npos);
  ProviderOptions options;
  options.allow_unsafe_host = true;
  EXPECT_TRUE(r.create("host_dir", options).ok());
}

TEST(HostDirTest, DisplayNameIsMarkedUnsafe) {
  EXPECT_EQ(display_name(HostDirProvider::static_info()), "host_dir (UNSAFE: no isolation)");
  EXPECT_EQ(display_name(NamespacesProvider::static_info()), "namespaces");
}

TEST(EnvAllowlistTest, PassesOnlyWhatIsNamed) {
  char a[] = "HOME=/root", b[] = "SECRET=x", c[] = "TERM=xterm", d[] = "TERMINAL=no";
  char* host[] = {a, b, c, d, nullptr};
  auto env = resolve_env_allowlist({"TERM", "MISSING", "SET=1"}, host);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(*env, (std::vector<std::string>{"TERM=xterm", "SET=1"}));
  for (const char* bad : {"1X", "A-B", "", "=x"}) {
    auto e = resolve_env_allowlist({bad}, host);
    EXPECT_FALSE(e.ok()) << bad;
  }
}

// Environment::put_file's default, on a directory standing for a workspace: the sandbox owns
// the workspace, so a link it planted must never make the host write through it.
class DirEnvironment : public Environment {
 public:
  explicit DirEnvironment(std::string dir) : dir_(std::move(dir)) {}
  const std::string& run_id() const override { return id_; }
  std::string workspace_host_path() const override { return dir_; }
  std::string workspace_path() const override { return "/workspace"; }
  Result<ExecResult> exec(const Call&, const Placement&) override { return ExecResult{}; }
  Status destroy() override { return {}; }

 private:
  std::string dir_, id_ = "r-test";
};

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (auto* e = ::readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") out.push_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

class PutFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sandgate-put-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    ws_ = root_ + "/ws";
    ASSERT_EQ(::mkdir(ws_.c_str(), 0755), 0);
  }
  void TearDown() override { (void)remove_tree(root_); }
  std::string root_, ws_;
};

TEST_F(PutFileTest, ReplacesTheFileWholeAndLeavesNoTemporary) {
  DirEnvironment env(ws_);
  ASSERT_TRUE(env.put_file("level", "1\n").ok());
  ASSERT_TRUE(env.put_file("level", "22\n").ok());
  auto text = read_file(ws_ + "/level");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "22\n");
  struct stat st {};
  ASSERT_EQ(::stat((ws_ + "/level").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u) << "readable by the sandbox user";
  EXPECT_EQ(entries(ws_), std::vector<std::string>{"level"}) << "only the file itself";
}

TEST_F(PutFileTest, ALinkPlantedAtTheNameIsReplacedNotFollowed) {
  DirEnvironment env(ws_);
  const std::string outside = root_ + "/outside";
  ASSERT_TRUE(write_file(outside, "host's\n", O_WRONLY | O_CREAT | O_CLOEXEC, 0644).ok());
  ASSERT_EQ(::symlink(outside.c_str(), (ws_ + "/level").c_str()), 0);
  ASSERT_TRUE(env.put_file("level", "7\n").ok());
  EXPECT_EQ(*read_file(outside), "host's\n") << "the host wrote through the sandbox's link";
  struct stat st {};
  ASSERT_EQ(::lstat((ws_ + "/level").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(*read_file(ws_ + "/level"), "7\n");
}

TEST_F(PutFileTest, AWorkspaceThatIsALinkIsRefused) {
  const std::string elsewhere = root_ + "/elsewhere";
  ASSERT_EQ(::mkdir(elsewhere.c_str(), 0755), 0);
  ASSERT_EQ(::rmdir(ws_.c_str()), 0);
  ASSERT_EQ(::symlink(elsewhere.c_str(), ws_.c_str()), 0);
  DirEnvironment env(ws_);
  EXPECT_FALSE(env.put_file("level", "1\n").ok());
  EXPECT_TRUE(entries(elsewhere).empty());
}

TEST_F(PutFileTest, NamesThatAreNotOneFileNameAreRefused) {
  DirEnvironment env(ws_);
  for (const std::string bad : {"", ".", "..", "a/b", "../x", "/etc/passwd"}) {
    auto s = env.put_file(bad, "x");
    ASSERT_FALSE(s.ok()) << "accepted '" << bad << "'";
    EXPECT_NE(s.error().message().find("one file name"), std::string::npos) << s.error().message();
  }
  EXPECT_FALSE(::access((root_ + "/x").c_str(), F_OK) == 0);
}

// get_file's default reads what the run wrote, and never through what it planted: a link (to a
// host file root may read), a FIFO (an open that would wait for ever), a file too big.
TEST_F(PutFileTest, GetFileReadsTheRunsFileAndNothingItPlanted) {
  DirEnvironment env(ws_);
  auto none = env.get_file("ready.json", 1024);
  ASSERT_TRUE(none.ok()) << none.error().message();
  EXPECT_FALSE(none->has_value()) << "no file yet is not an error";
  ASSERT_TRUE(env.put_file("ready.json", "{\"port\": 1}").ok());
  auto got = env.get_file("ready.json", 1024);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, "{\"port\": 1}");
  EXPECT_FALSE(env.get_file("ready.json", 4).ok()) << "more than max_bytes is an error, not cut";

  const std::string secret = root_ + "/host-secret";
  ASSERT_TRUE(write_file(secret, "host's\n", O_WRONLY | O_CREAT | O_CLOEXEC, 0600).ok());
  ASSERT_EQ(::symlink(secret.c_str(), (ws_ + "/linked").c_str()), 0);
  auto linked = env.get_file("linked", 1024);
  ASSERT_FALSE(linked.ok()) << "read through the run's link";
  EXPECT_NE(linked.error().message().find("symbolic link"), std::string::npos)
      << linked.error().message();
  ASSERT_EQ(::mkfifo((ws_ + "/fifo").c_str(), 0644), 0);
  auto fifo = env.get_file("fifo", 1024);
  ASSERT_FALSE(fifo.ok());
  EXPECT_NE(fifo.error().message().find("FIFO"), std::string::npos) << fifo.error().message();
  EXPECT_FALSE(env.get_file("../host-secret", 1024).ok());
}

}  // namespace
}  // namespace sandgate::providers
