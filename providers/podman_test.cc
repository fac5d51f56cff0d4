// The podman provider against real Podman (runc, cgroupfs), rootful and rootless:
// create/exec/destroy, the read-back of every hardening setting (and that a dropped one is an
// error naming it), calls placed in their own cgroups, cleanup after a crash, weakenings
// refused outside the self-test. PodmanTest pins rootful; PodmanRootlessTest rootless.
#include "providers/podman.h"

#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/nsfs.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "core/defer.h"
#include "core/json.h"
#include "core/process.h"
#include "core/state.h"
#include "core/strings.h"
#include "core/test_temp_dir.h"
#include "providers/supervised_environment.h"
#include "tests/support/eventually.h"
#include "tests/support/privileged.h"
#include "tests/support/provider_fixture.h"

namespace sandgate::testing {
namespace {

// A file's text, or `fallback` when it cannot be read.
std::string text_or(const Result<std::string>& r, const std::string& fallback) {
  return r.ok() ? *r : fallback;
}

// Child cgroups (directories) below `dir`.
size_t child_dirs(const std::string& dir) {
  size_t n = 0;
  DIR* d = ::opendir(dir.c_str());
  while (struct dirent* e = d ? ::readdir(d) : nullptr) {
    std::string name = e->d_name;
    if (e->d_type == DT_DIR && name != "." && name != "..") ++n;
  }
  if (d) ::closedir(d);
  return n;
}

bool container_exists(const std::string& name) {
  auto r = run_command({"podman", "container", "exists", name});
  return r.ok() && r->status.exited && r->status.code == 0;
}

// Processes whose real uid lies in [first, first + 65536): the run's ids.
std::vector<pid_t> processes_with_ids_from(uid_t first) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  while (struct dirent* e = d ? ::readdir(d) : nullptr) {
    pid_t pid = static_cast<pid_t>(std::strtol(e->d_name, nullptr, 10));
    if (pid <= 0) continue;
    struct stat st;
    if (::stat(("/proc/" + std::to_string(pid)).c_str(), &st) != 0) continue;
    auto status = read_file("/proc/" + std::to_string(pid) + "/status");
    if (!status.ok()) continue;
    auto at = status->find("\nUid:\t");
    if (at == std::string::npos) continue;
    uid_t uid = static_cast<uid_t>(std::strtoul(status->c_str() + at + 6, nullptr, 10));
    // A zombie still counts: its parent did not reap it, something of the run is left.
    if (uid >= first && uid - first < 65536) out.push_back(pid);
  }
  if (d) ::closedir(d);
  return out;
}

// Mount points at or below `dir` in this process's mount namespace.
std::vector<std::string> mounts_under(const std::string& dir) {
  std::vector<std::string> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // "ID PARENT MAJ:MIN ROOT MOUNTPOINT ...": the fifth field.
    std::istringstream fields(line);
    std::string f[5];
    for (auto& x : f) fields >> x;
    if (f[4] == dir || f[4].starts_with(dir + "/")) out.push_back(f[4]);
  }
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + " ";
  return out;
}

// When a foreground `podman run --rm` is trusted to have removed its container, and when the
// destroy falls back to `podman rm` (no Podman needed).
TEST(PodmanRmIncomplete, OnlyACleanEndWithoutAnErrorIsTrusted) {
  providers::RuntimeExit clean;
  clean.status.exited = true;
  clean.status.code = 0;
  EXPECT_EQ(providers::podman_rm_incomplete(clean), std::nullopt);
  // The container's own status (pid 1 killed by a signal: 128 + 9) is not Podman's failure.
  providers::RuntimeExit container_killed = clean;
  container_killed.status.code = 137;
  EXPECT_EQ(providers::podman_rm_incomplete(container_killed), std::nullopt);

  providers::RuntimeExit killed = clean;
  killed.killed = true;
  EXPECT_NE(providers::podman_rm_incomplete(killed), std::nullopt);
  providers::RuntimeExit signalled;
  signalled.status.exited = false;
  signalled.status.signal = SIGKILL;
  EXPECT_NE(providers::podman_rm_incomplete(signalled), std::nullopt);
  providers::RuntimeExit podman_failed = clean;
  podman_failed.status.code = 125;
  podman_failed.output = "Error: something";
  auto why = providers::podman_rm_incomplete(podman_failed);
  ASSERT_NE(why, std::nullopt);
  EXPECT_NE(why->find("Error: something"), std::string::npos) << *why;
  providers::RuntimeExit rm_failed = clean;
  rm_failed.output =
      "time=\"2026-12-02T11:00:00Z\" level=error msg=\"Removing container abc: device busy\"";
  EXPECT_NE(providers::podman_rm_incomplete(rm_failed), std::nullopt);
}

class PodmanTest : public ProviderTest {
 protected:
  virtual providers::PodmanMode mode() const { return providers::PodmanMode::kRootful; }
  void SetUp() override {
    ProviderTest::SetUp();
    options_.podman_mode = mode();
    if (!is_root()) return;
    podman_ = std::make_unique<providers::PodmanProvider>(options_);
    auto ok = podman_->available();
    available_ = ok.ok();
    if (!ok.ok()) why_ = ok.error().message();
  }
  std::unique_ptr<providers::PodmanProvider> podman_;
  bool available_ = false;
  std::string why_;

  // The run's own /proc views (proc_views.h) as a call of a run with a 192 MiB ceiling sees
  // them: its MemTotal is that ceiling (the lowest limit from its cgroup up; without a
  // placement the views follow the reader's own cgroup), not the host's; /proc/loadavg counts
  // the run's threads, far fewer than the host's; each file runc binds is the views server's
  // filesystem, read-only, nosuid, nodev and noexec, and /proc/pressure/* stay the kernel's
  // (runc binds nothing there).
  // Destroy stops the server (from the record) and leaves no mount.
  void expect_own_proc_views() {
    providers::EnvSpec spec;
    spec.ceiling.memory_bytes = 192ull << 20;
    auto env = make_env(*podman_, spec);
    ASSERT_TRUE(env);
    auto r =
        sh(*env,
           "head -1 /proc/meminfo; cut -d' ' -f4 /proc/loadavg; "
           "grep -E ' /proc/(meminfo|stat|loadavg|uptime|pressure[^ ]*) ' /proc/self/mountinfo");
    auto lines = split(r.stdout_data, '\n');
    ASSERT_GE(lines.size(), 2u) << r.stdout_data << r.stderr_data;
    auto host = read_file("/proc/meminfo");
    ASSERT_TRUE(host.ok());
    EXPECT_NE(std::string(lines[0]), host->substr(0, host->find('\n')));
    EXPECT_EQ(std::string(lines[0]), "MemTotal:         196608 kB") << r.stdout_data;
    // "running/total": the run's own threads against every thread of the host.
    std::string seen(lines[1]);
    int run_threads = std::atoi(seen.substr(seen.find('/') + 1).c_str());
    auto host_load = read_file("/proc/loadavg");
    ASSERT_TRUE(host_load.ok());
    std::string hl = *host_load;
    hl = hl.substr(hl.find('/') + 1);
    EXPECT_GT(run_threads, 0) << r.stdout_data;
    EXPECT_LT(run_threads, std::atoi(hl.c_str())) << r.stdout_data << " host: " << *host_load;
    for (const char* file : {"meminfo", "stat", "loadavg", "uptime"}) {
      std::string line;
      for (auto l : lines)
        if (l.find(std::string(" /proc/") + file + " ") != std::string_view::npos) line = l;
      EXPECT_NE(line.find(" - fuse.sandgate-proc-views "), std::string::npos)
          << file << ": " << r.stdout_data;
      for (const char* flag : {" ro,", "nosuid", "nodev", "noexec"})
        EXPECT_NE(line.find(flag), std::string::npos) << file << " " << flag << ": " << line;
    }
    EXPECT_EQ(r.stdout_data.find(" /proc/pressure"), std::string::npos)
        << "runc now binds inside /proc/pressure: give podman runs those views too\n"
        << r.stdout_data;
    // The server, from the run's record: the process named by its mount point.
    const pid_t server = recorded_proc_views_server(options_.paths.state_dir, env->run_id());
    ASSERT_GT(server, 0) << "no views server in run " << env->run_id() << "'s record";
    EXPECT_TRUE(process_exists(server));
    ASSERT_TRUE(env->destroy().ok());
    EXPECT_FALSE(process_exists(server)) << "the views server outlived its run";
    EXPECT_EQ(joined(mounts_under(options_.paths.work_dir)), "") << "mounts left";
  }
};

#define REQUIRE_PODMAN()   \
  SANDGATE_REQUIRE_ROOT(); \
  SANDGATE_REQUIRE(available_, "podman provider: " + why_)

TEST_F(PodmanTest, CreateExecDestroyLeavesNothing) {
  REQUIRE_PODMAN();
  auto env = make_env(*podman_);
  ASSERT_TRUE(env);
  std::string name = "sandgate-" + env->run_id();
  EXPECT_TRUE(container_exists(name));
  auto r = sh(*env,
              "id -u; id -g; pwd; echo hi > /workspace/f && cat /workspace/f; "
              "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; "
              "touch /usr/x 2>/dev/null || echo ro-usr; touch /x 2>/dev/null || echo ro-root");
  EXPECT_EQ(r.stdout_data,
            "10001\n10001\n/workspace\nhi\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\n"
            "NoNewPrivs:\t1\nSeccomp:\t2\nro-usr\nro-root\n")
      << r.stderr_data;
  // Written from inside as uid 10001 of the run's user namespace: the mapped host id.
  struct stat st;
  ASSERT_EQ(::stat((env->workspace_host_path() + "/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, env->host_id_base() + 10001);
  EXPECT_GE(env->host_id_base(), options_.id_pool.first) << "the run's own range, from the pool";
  std::string run_id = env->run_id();
  // The assembled root is a tmpfs of the run's (one unmount at destroy).
  EXPECT_EQ(mounts_under(options_.paths.work_dir + "/" + run_id + "/root").size(), 1u);
  ASSERT_TRUE(env->destroy().ok());
  EXPECT_FALSE(container_exists(name)) << "container left: " << name;
  EXPECT_EQ(joined(mounts_under(options_.paths.work_dir)), "") << "mounts left";
  EXPECT_NE(::access((options_.paths.work_dir + "/" + run_id).c_str(), F_OK), 0);
  // Without a placement the run's cgroups are its own (not Podman's shared /libpod_parent,
  // whose conmon group would stay), and they are gone.
  size_t hierarchies = 0;
  // "": the one hierarchy of a pure v2 host (the guest lane), /sys/fs/cgroup itself.
  for (const char* h :
       {"blkio", "cpu", "memory", "pids", "devices", "freezer", "systemd", "unified", ""}) {
    std::string base = std::string("/sys/fs/cgroup/") + h;
    if (!*h && ::access("/sys/fs/cgroup/cgroup.controllers", F_OK) != 0) continue;
    if (::access(base.c_str(), F_OK) != 0) continue;
    ++hierarchies;
    EXPECT_NE(::access((base + "/sandgate-podman/" + run_id).c_str(), F_OK), 0)
        << "left: " << base << "/sandgate-podman/" << run_id;
  }
  EXPECT_GT(hierarchies, 0u) << "no cgroup hierarchy was checked";
}

// The assembled root's alternatives links are copied while Podman starts the container
// (ContainedLaunch::while_starting): the run's first call already sees every one of the host's,
// with its target.
TEST_F(PodmanTest, TheFirstCallSeesEveryAlternativesLink) {
  REQUIRE_PODMAN();
  SANDGATE_REQUIRE(::access("/etc/alternatives", F_OK) == 0, "this host has no /etc/alternatives");
  const std::string host = host_alternatives();
  ASSERT_NE(host, "");
  auto env = make_env(*podman_);
  ASSERT_TRUE(env);
  auto r = sh(*env, kListAlternatives);
  EXPECT_EQ(r.stdout_data, host) << r.stderr_data;
  ASSERT_TRUE(env->destroy().ok());
}

TEST_F(PodmanTest, ACallSeesTheRunsOwnProcViews) {
  REQUIRE_PODMAN();
  expect_own_proc_views();
}

// The twin: with the views turned off (--no-proc-views) a call reads the kernel's own files,
// the host's memory; nothing is bound over them.
TEST_F(PodmanTest, WithoutProcViewsACallSeesTheHostsMeminfo) {
  REQUIRE_PODMAN();
  options_.proc_views = false;
  providers::PodmanProvider p(options_);
  auto env = make_env(p);
  ASSERT_TRUE(env);
  auto r = sh(*env, "head -1 /proc/meminfo; grep -c fuse.sandgate-proc-views /proc/self/mountinfo");
  auto host = read_file("/proc/meminfo");
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(r.stdout_data, host->substr(0, host->find('\n') + 1) + "0\n") << r.stderr_data;
  ASSERT_TRUE(env->destroy().ok());
}

// The foreground `podman run --rm` removes its own container; killed mid-run (so that its
// removal never happens), destroy still removes the container (`podman rm`, from the record).
TEST_F(PodmanTest, AKilledRuntimeStillLeavesNoContainer) {
  REQUIRE_PODMAN();
  auto env = make_env(*podman_);
  ASSERT_TRUE(env);
  auto* supervised = dynamic_cast<providers::SupervisedEnvironment*>(env.get());
  ASSERT_NE(supervised, nullptr);
  pid_t runtime = supervised->runtime_pid();
  ASSERT_GT(runtime, 0) << "no foreground runtime";
  // Its own session: a ^C to sandgate's process group does not reach it.
  EXPECT_EQ(::getsid(runtime), runtime);
  std::string name = "sandgate-" + env->run_id();
  ASSERT_TRUE(container_exists(name));
  ASSERT_EQ(::kill(runtime, SIGKILL), 0);
  auto r = sh(*env, "echo still");
  EXPECT_EQ(r.stdout_data, "still\n") << "the run outlives its runtime process";
  ASSERT_TRUE(env->destroy().ok());
  EXPECT_FALSE(container_exists(name)) << "container left: " << name;
  EXPECT_EQ(joined(mounts_under(options_.paths.work_dir)), "") << "mounts left";
}

// The fallback: a pid 1 that does not end when asked (stopped here, so that it reads nothing)
// keeps `podman run --rm` waiting for its container; after the grace destroy kills that runtime
// and removes the container from the run's record (`podman rm --force`, as gc does), so nothing
// is left even then.
TEST_F(PodmanTest, APid1ThatIgnoresTheShutdownIsStillRemovedAfterTheGrace) {
  REQUIRE_PODMAN();
  constexpr auto kGrace = std::chrono::seconds(2);
  podman_->set_stop_grace_for_test(kGrace);
  auto env = make_env(*podman_);
  ASSERT_TRUE(env);
  auto* supervised = dynamic_cast<providers::SupervisedEnvironment*>(env.get());
  ASSERT_NE(supervised, nullptr);
  const pid_t supervisor = supervised->supervisor_pid();
  ASSERT_GT(supervisor, 0);
  ASSERT_GT(supervised->runtime_pid(), 0) << "no foreground runtime";
  std::string name = "sandgate-" + env->run_id();
  ASSERT_TRUE(container_exists(name));
  ASSERT_EQ(::kill(supervisor, SIGSTOP), 0);
  auto began = std::chrono::steady_clock::now();
  ASSERT_TRUE(env->destroy().ok());
  // A lower bound only (no flaky upper one): destroy waited out the grace, so it was the
  // fallback that removed the container, not the runtime's own --rm.
  EXPECT_GE(std::chrono::steady_clock::now() - began, kGrace);
  EXPECT_FALSE(container_exists(name)) << "container left: " << name;
  EXPECT_FALSE(process_exists(supervisor)) << "the stopped pid 1 outlived its run";
  EXPECT_EQ(joined(mounts_under(options_.paths.work_dir)), "") << "mounts left";
}

// Two runs without a placement share sandgate's /sandgate-podman parent cgroup: whichever ends
// last removes it (another session's run may hold it, then it is not empty).
TEST_F(PodmanTest, TheSharedParentCgroupGoesWithTheLastRun) {
  REQUIRE_PODMAN();
  auto a = make_env(*podman_);
  ASSERT_TRUE(a);
  auto b = make_env(*podman_);
  ASSERT_TRUE(b);
  ASSERT_TRUE(a->destroy().ok());
  ASSERT_TRUE(b->destroy().ok());
  size_t checked = 0;
  DIR* d = ::opendir("/sys/fs/cgroup");
  ASSERT_NE(d, nullptr);
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == ".." || e->d_type != DT_DIR) continue;
    ++checked;
    std::string parent = "/sys/fs/cgroup/" + name + "/sandgate-podman";
    if (::access(parent.c_str(), F_OK) != 0) continue;
    EXPECT_GT(child_dirs(parent), 0u) << "an empty " << parent << " was left";
  }
  ::closedir(d);
  // A pure v2 host: the parent sits in the mount itself.
  if (::access("/sys/fs/cgroup/sandgate-podman", F_OK) == 0) {
    EXPECT_GT(child_dirs("/sys/fs/cgroup/sandgate-podman"), 0u) << "an empty parent was left";
  }
  EXPECT_GT(checked, 0u);
}

TEST_F(PodmanTest, NoHostEnvironmentReachesACall) {
  REQUIRE_PODMAN();
  ::setenv("SANDGATE_PODMAN_TEST_SECRET", "host-only", 1);
  Defer unset([] { ::unsetenv("SANDGATE_PODMAN_TEST_SECRET"); });
  auto env = make_env(*podman_);
  ASSERT_TRUE(env);
  auto r = sh(*env,
              "env | grep -c SANDGATE_PODMAN_TEST_SECRET; cat /proc/1/environ 2>&1 | tr '\\0' "
              "'\\n' | grep -c SANDGATE_PODMAN_TEST_SECRET");
  EXPECT_EQ(r.stdout_data, "0\n0\n") << r.stderr_data;
}

// Each setting the runtime is asked for is read back: left off the command line (the test
// hook), the run is refused with an error naming it, and nothing of it is left.
TEST_F(PodmanTest, ReadBackRefusesADroppedSetting) {
  REQUIRE_PODMAN();
  for (const char* setting : {"cap-drop", "read-only", "no-new-privileges", "network", "pids-limit",
                              "user", "proc-views"}) {
    SCOPED_TRACE(setting);
    providers::PodmanProvider p(options_);
    p.drop_setting_for_test(setting);
    auto env = p.create({});
    ASSERT_FALSE(env.ok()) << setting << " was dropped but the run was accepted";
    EXPECT_NE(env.error().message().find(std::string("'") + setting + "'"), std::string::npos)
        << env.error().message();
    // The refused run was undone: no record is left (its text says what could not be removed).
    std::string runs = options_.paths.state_dir + "/runs", left;
    if (DIR* d = ::opendir(runs.c_str())) {
      while (struct dirent* e = ::readdir(d))
        if (e->d_name[0] != '.') left += read_file(runs + "/" + e->d_name).value() + "\n";
      ::closedir(d);
    }
    EXPECT_EQ(left, "") << "after dropping " << setting;
  }
}

TEST_F(PodmanTest, WeakeningsAreRefusedOutsideTheSelfTest) {
  REQUIRE_PODMAN();
  providers::EnvSpec spec;
  spec.weakenings = {providers::Weakening::kShareHostNetwork};
  auto env = podman_->create(spec);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.error().message().find("share_host_network"), std::string::npos)
      << env.error().message();
}

// With the self-test's permission, every weakening makes a run that works (what each one
// opens is the probe suite's to show: `sandgate probe --self-test --provider podman`).
TEST_F(PodmanTest, EveryWeakeningMakesAWorkingRunUnderTheSelfTest) {
  REQUIRE_PODMAN();
  std::string home = tmp_ + "/home";
  ASSERT_TRUE(make_dirs(home, 0755).ok());
  const char* old_home = std::getenv("HOME");
  std::string saved = old_home ? old_home : "";
  ::setenv("HOME", home.c_str(), 1);
  Defer restore([&] { ::setenv("HOME", saved.c_str(), 1); });
  auto options = options_;
  options.self_test_weakenings = true;
  providers::PodmanProvider p(options);
  for (auto w : providers::all_weakenings()) {
    SCOPED_TRACE(providers::to_string(w));
    providers::EnvSpec spec;
    spec.weakenings = {w};
    auto env = p.create(spec);
    ASSERT_TRUE(env.ok()) << providers::to_string(w) << ": " << env.error().message();
    auto r = sh(**env, "echo ok");
    EXPECT_EQ(r.stdout_data, "ok\n") << r.stderr_data;
    EXPECT_TRUE((*env)->destroy().ok());
  }
  EXPECT_TRUE(providers::remove_shared_dirs(options_.paths).ok());
}

// A local image (no registry): a static busybox and nothing of the host's /usr, imported with
// `podman import` and removed when the returned guard goes. Empty name: it could not be made
// (the failure is recorded).
class PodmanImageTest : public PodmanTest {
 protected:
  std::string import_busybox() {
    std::string image = "localhost/sandgate-test-busybox-" + std::to_string(::getpid());
    std::string tree = tmp_ + "/image";
    if (!make_dirs(tree + "/bin", 0755).ok() || !make_dirs(tree + "/etc", 0755).ok()) return "";
    auto copied = run_command({"cp", "/bin/busybox", tree + "/bin/busybox"});
    EXPECT_TRUE(copied.ok() && copied->status.code == 0);
    for (const char* tool : {"sh", "echo", "id", "cat", "ls", "true"})
      EXPECT_EQ(::symlink("busybox", (tree + "/bin/" + tool).c_str()), 0);
    EXPECT_TRUE(
        write_file(tree + "/etc/passwd", "root:x:0:0::/root:/bin/sh\n", O_WRONLY | O_CREAT).ok());
    auto tar = run_command({"tar", "-C", tree, "-cf", tmp_ + "/image.tar", "."});
    EXPECT_TRUE(tar.ok() && tar->status.code == 0) << (tar.ok() ? tar->output : "");
    auto imported = run_command({"podman", "import", tmp_ + "/image.tar", image});
    EXPECT_TRUE(imported.ok() && imported->status.code == 0)
        << (imported.ok() ? imported->output : "");
    if (::testing::Test::HasFailure()) return "";
    image_ = image;
    return image;
  }
  void TearDown() override {
    if (!image_.empty()) (void)run_command({"podman", "rmi", "--force", image_});
    PodmanTest::TearDown();
  }
  std::string image_;
};

#define REQUIRE_BUSYBOX() \
  SANDGATE_REQUIRE(::access("/bin/busybox", X_OK) == 0, "needs busybox (busybox-static)")

// The calls see the image's userland; the supervisor brings its own libraries.
TEST_F(PodmanImageTest, ALocalImageIsTheRoot) {
  REQUIRE_PODMAN();
  REQUIRE_BUSYBOX();
  std::string image = import_busybox();
  ASSERT_FALSE(image.empty());
  providers::EnvSpec spec;
  spec.image = image;
  auto env = make_env(*podman_, spec);
  ASSERT_TRUE(env);
  auto r = sh(*env, "echo hi; id -u; ls /usr 2>&1 | head -1; readlink /bin/sh");
  EXPECT_EQ(r.stdout_data, "hi\n10001\nls: /usr: No such file or directory\nbusybox\n")
      << r.stderr_data;
}

// ProviderOptions::image (`probe` and `qualify --image`): every run of the provider has the
// image as its root without the spec naming it.
TEST_F(PodmanImageTest, TheProvidersImageIsEveryRunsRoot) {
  REQUIRE_PODMAN();
  REQUIRE_BUSYBOX();
  std::string image = import_busybox();
  ASSERT_FALSE(image.empty());
  providers::ProviderOptions options = options_;
  options.image = image;
  providers::PodmanProvider with_image(options);
  for (int i = 0; i < 2; ++i) {
    auto env = make_env(with_image);
    ASSERT_TRUE(env);
    auto r = sh(*env, "ls /usr 2>&1 | head -1; readlink /bin/sh");
    EXPECT_EQ(r.stdout_data, "ls: /usr: No such file or directory\nbusybox\n") << r.stderr_data;
  }
}

TEST_F(PodmanTest, AnImageThatDoesNotExistIsRefusedByName) {
  REQUIRE_PODMAN();
  providers::EnvSpec spec;
  spec.image = "sandgate-no-such-image:never";
  auto env = podman_->create(spec);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.error().message().find("sandgate-no-such-image:never"), std::string::npos)
      << env.error().message();
}

// A cgroup tree like the controller's (<root>/<tenant>/<run>/main and call-1) in the memory
// and pids hierarchies and the unified one, made by hand: providers know no controller.
class PodmanCgroupTest : public PodmanTest {
 protected:
  void SetUp() override {
    PodmanTest::SetUp();
    root_ = "sgtest-podman-" + std::to_string(::getpid());
  }
  void TearDown() override {
    for (const auto& h : hierarchies_) {
      for (const char* sub : {"/t/run/call-1", "/t/run/main", "/t/run", "/t", ""})
        ::rmdir((h + "/" + root_ + sub).c_str());
    }
    PodmanTest::TearDown();
  }
  std::vector<std::string> all_hierarchies() {
    std::vector<std::string> out;
    for (const char* h : {"blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "memory",
                          "pids", "systemd", "unified"}) {
      std::string p = "/sys/fs/cgroup/" + std::string(h);
      if (::access(p.c_str(), F_OK) == 0) out.push_back(p);
    }
    return out;
  }
  std::string root_;
  std::vector<std::string> hierarchies_;
};

TEST_F(PodmanCgroupTest, CallIsPlacedInItsOwnCgroupAndTheRunLeavesNoCgroup) {
  REQUIRE_PODMAN();
  SANDGATE_REQUIRE(::access("/sys/fs/cgroup/memory", F_OK) == 0,
                   "needs the hybrid layout (v1 memory)");
  Placement main, call;
  for (const char* h : {"memory", "pids", "unified"}) {
    std::string base = "/sys/fs/cgroup/" + std::string(h);
    if (::access(base.c_str(), F_OK) != 0) continue;
    hierarchies_.push_back(base);
    std::string run = base + "/" + root_ + "/t/run";
    ASSERT_TRUE(make_dirs(run + "/main", 0755).ok());
    ASSERT_TRUE(make_dirs(run + "/call-1", 0755).ok());
    main.cgroup_dirs.push_back(run + "/main");
    call.cgroup_dirs.push_back(run + "/call-1");
  }
  providers::EnvSpec spec;
  spec.placement = main;
  spec.ceiling.pids = 321;
  auto env = make_env(*podman_, spec);
  ASSERT_TRUE(env);
  // The container (supervisor) lives under <run>/main, with the ceiling on its own cgroup.
  auto* supervised = dynamic_cast<providers::SupervisedEnvironment*>(env.get());
  ASSERT_NE(supervised, nullptr);
  auto sup_cgroup = read_file("/proc/" + std::to_string(supervised->supervisor_pid()) + "/cgroup");
  ASSERT_TRUE(sup_cgroup.ok());
  EXPECT_NE(sup_cgroup->find(":memory:/" + root_ + "/t/run/main/libpod-"), std::string::npos)
      << *sup_cgroup;

  providers::Call c;
  c.argv = {"/bin/sh", "-c", "cat /proc/self/cgroup"};
  pid_t seen = 0;
  std::string pids_max_seen, cgroup_seen;
  c.on_started = [&](pid_t pid) {
    seen = pid;
    auto text = read_file("/proc/" + std::to_string(pid) + "/cgroup");
    if (text.ok()) cgroup_seen = *text;
  };
  auto r = env->exec(c, call);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_GT(seen, 0);
  EXPECT_EQ(r->host_pid, seen);
  // Placed before it exec'd (seen from the host while parked), and as the call sees itself.
  EXPECT_NE(cgroup_seen.find(":memory:/" + root_ + "/t/run/call-1\n"), std::string::npos)
      << cgroup_seen;
  EXPECT_NE(cgroup_seen.find(":pids:/" + root_ + "/t/run/call-1\n"), std::string::npos)
      << cgroup_seen;
  EXPECT_NE(r->stdout_data.find(":memory:/" + root_ + "/t/run/call-1\n"), std::string::npos)
      << r->stdout_data;
  ASSERT_TRUE(env->destroy().ok());
  // What the runtime made under the run (conmon, libpod-<id>, and the parent path in the
  // hierarchies the "controller" did not use) is gone; the test's own cgroups are empty.
  for (const auto& h : all_hierarchies()) {
    bool ours = std::find(hierarchies_.begin(), hierarchies_.end(), h) != hierarchies_.end();
    std::string main_dir = h + "/" + root_ + "/t/run/main";
    if (ours) {
      EXPECT_EQ(child_dirs(main_dir), 0u) << "a runtime cgroup was left under " << main_dir;
      EXPECT_NE(::access((main_dir + "/conmon").c_str(), F_OK), 0)
          << "left: " << main_dir << "/conmon";
    } else {
      EXPECT_NE(::access((h + "/" + root_).c_str(), F_OK), 0) << "left: " << h << "/" << root_;
    }
  }
}

// kill -9 of the process that made the run, mid-run: `gc` finds the container and the cgroups
// the runtime made from the record, and removes them with the run directory.
TEST_F(PodmanCgroupTest, CrashThenGcLeavesNothing) {
  REQUIRE_PODMAN();
  SANDGATE_REQUIRE(::access("/sys/fs/cgroup/memory", F_OK) == 0,
                   "needs the hybrid layout (v1 memory)");
  Placement main;
  std::string base = "/sys/fs/cgroup/memory";
  hierarchies_.push_back(base);
  ASSERT_TRUE(make_dirs(base + "/" + root_ + "/t/run/main", 0755).ok());
  main.cgroup_dirs.push_back(base + "/" + root_ + "/t/run/main");
  auto pipe = make_pipe(0);
  ASSERT_TRUE(pipe.ok());
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    providers::PodmanProvider p(options_);
    providers::EnvSpec spec;
    spec.placement = main;
    auto env = p.create(spec);
    std::string id = env.ok() ? (*env)->run_id() : "";
    (void)!::write(pipe->write.get(), id.data(), id.size());
    pipe->write.reset();
    if (!env.ok()) ::_exit(1);
    // Never destroyed: this process dies with the run in place.
    std::move(env).value().release();
    for (;;) ::pause();
  }
  pipe->write.reset();
  char buf[128] = {};
  ssize_t n = ::read(pipe->read.get(), buf, sizeof buf - 1);
  ASSERT_GT(n, 0) << "the child could not create a run";
  std::string name = "sandgate-" + std::string(buf, static_cast<size_t>(n));
  EXPECT_TRUE(container_exists(name));
  ::kill(child, SIGKILL);
  int status;
  ::waitpid(child, &status, 0);
  auto report = collect_garbage(options_.paths);
  EXPECT_TRUE(report.errors.empty()) << report.errors.front();
  EXPECT_EQ(report.runs_removed, 1);
  EXPECT_FALSE(container_exists(name)) << "container left after gc: " << name;
  for (const auto& h : all_hierarchies()) {
    if (h == base) {
      EXPECT_EQ(child_dirs(base + "/" + root_ + "/t/run/main"), 0u)
          << "a runtime cgroup was left under main";
      EXPECT_NE(::access((base + "/" + root_ + "/t/run/main/conmon").c_str(), F_OK), 0);
    } else {
      EXPECT_NE(::access((h + "/" + root_).c_str(), F_OK), 0) << "left: " << h << "/" << root_;
    }
  }
}

// The runtime's child whose pid it wrote to `pid_file` is dead within 5 s (gone, or a zombie
// waiting for its reaper); otherwise killed, by that recorded pid, and the test fails.
void expect_runtime_child_dies(const std::string& pid_file, const std::string& after) {
  auto pid_text = read_file(pid_file);
  ASSERT_TRUE(pid_text.ok()) << "the runtime never started its sleeper";
  const pid_t sleeper = std::stoi(*pid_text);
  auto dead = [&] {
    auto stat = read_file("/proc/" + std::to_string(sleeper) + "/stat");
    if (!stat.ok()) return true;
    auto close = stat->rfind(')');
    return close != std::string::npos && stat->substr(close + 2, 1) == "Z";
  };
  eventually(dead);
  EXPECT_TRUE(dead()) << "the runtime's child " << sleeper << " outlived " << after;
  if (!dead()) ::kill(sleeper, SIGKILL);  // this test's own child's child, by recorded pid
}

// A step of the runtime's start that fails before its exec comes back as {errno, step} on the
// start channel, not as a bare exit status (the rootless launch path: an environment, cgroups
// or a namespace owner).
TEST(ContainedLaunchTest, AFailureBeforeTheRuntimesExecIsNamedWithItsErrno) {
  providers::ContainedLaunch launch;
  launch.argv = {"/nonexistent/sandgate-no-such-runtime"};
  launch.env = {"PATH=/usr/bin:/bin"};
  auto s = providers::Supervisor::start_contained(providers::SupervisorConfig{}, launch);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().err, ENOENT) << s.error().message();
  EXPECT_NE(s.error().message().find("execve the runtime"), std::string::npos)
      << s.error().message();
}

// A runtime that never starts the container (stuck on a lock, say) fails the start at
// launch.start_timeout with its own output, and its whole session is killed, not left waiting.
TEST(ContainedLaunchTest, ARuntimeThatNeverStartsTheSupervisorIsKilledAtTheStartTimeout) {
  TempDir dir;
  std::string pid_file = dir / "sleeper.pid";
  std::string helper_file = dir / "helper.pid";
  const std::string name = "sgtest-stuck-" + std::to_string(::getpid());
  providers::ContainedLaunch launch;
  // The sleeper is a child of the runtime's, in its process group. The helper daemonizes, as
  // conmon does, and carries the container's name (`--name`) on its command line.
  launch.argv = {"/bin/sh", "-c",
                 "(setsid sh -c 'echo $$ >" + helper_file + "; sleep 600; :' " + name +
                     " &); sleep 600 & echo $! >" + pid_file +
                     "; echo waiting for the storage lock; wait",
                 "--name", name};
  launch.foreground_output = dir / "runtime.log";
  launch.start_timeout = std::chrono::seconds(2);
  auto began = std::chrono::steady_clock::now();
  auto s = providers::Supervisor::start_contained(providers::SupervisorConfig{}, launch);
  auto took = std::chrono::steady_clock::now() - began;
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("did not start the container's supervisor within 2 s"),
            std::string::npos)
      << s.error().message();
  EXPECT_NE(s.error().message().find("waiting for the storage lock"), std::string::npos)
      << s.error().message();
  // Each of its processes with where it waits: the shell and its sleeper, and the daemonized
  // helper found by the container's name.
  EXPECT_NE(s.error().message().find(" sleep S "), std::string::npos) << s.error().message();
  auto helper_text = read_file(helper_file);
  ASSERT_TRUE(helper_text.ok()) << "the runtime never started its helper";
  const pid_t helper = std::stoi(*helper_text);
  // Daemonized (its own session and group): ended with its sleep by its recorded pid.
  Defer end_helper([&] { ::kill(-helper, SIGKILL); });
  EXPECT_NE(s.error().message().find(std::to_string(helper) + " sh S "), std::string::npos)
      << s.error().message();
  // Not before the timeout; a wide margin after it on a busy machine.
  EXPECT_GE(took, std::chrono::seconds(2));
  EXPECT_LT(took, std::chrono::seconds(30));
  expect_runtime_child_dies(pid_file, "the timeout");
}

// What the launch does while the runtime starts (the assembled root's alternatives links) can
// fail: the start fails with its error at once, and the runtime's whole session is killed.
TEST(ContainedLaunchTest, AFailureWhileTheRuntimeStartsKillsItsSession) {
  TempDir dir;
  std::string pid_file = dir / "sleeper.pid";
  providers::ContainedLaunch launch;
  launch.argv = {"/bin/sh", "-c", "sleep 600 & echo $! >" + pid_file + "; wait"};
  launch.foreground_output = dir / "runtime.log";
  launch.start_timeout = std::chrono::seconds(60);
  launch.while_starting = [&]() -> Status {
    // The runtime has started: its sleeper is there before the failure.
    for (int i = 0; i < 200 && ::access(pid_file.c_str(), F_OK) != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return sys_error(ENOSPC, "symlink", "/root/etc/alternatives/awk");
  };
  auto began = std::chrono::steady_clock::now();
  auto s = providers::Supervisor::start_contained(providers::SupervisorConfig{}, launch);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().err, ENOSPC) << s.error().message();
  EXPECT_NE(s.error().message().find("etc/alternatives/awk"), std::string::npos)
      << s.error().message();
  // Not at the start timeout: at once (a wide margin on a busy machine).
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(30));
  expect_runtime_child_dies(pid_file, "the failed start");
}

// Another thread allocating all the while (as the controller's reaper does when it makes a
// run's first spare cgroup during the provider's create) never leaves the runtime's child stuck
// between clone and exec: the child allocates nothing there. A child that built its argv with
// malloc after a plain fork could wait forever on an allocator lock held by that thread.
TEST(ContainedLaunchTest, ARuntimeStartsWhileAnotherThreadAllocates) {
  std::atomic<bool> stop{false};
  std::thread allocator([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      std::vector<std::string> churn;
      for (int i = 0; i < 64; ++i) churn.emplace_back(std::string(200 + i * 37, 'x'));
    }
  });
  Defer join([&] {
    stop = true;
    allocator.join();
  });
  TempDir dir;
  for (int i = 0; i < 40; ++i) {
    providers::ContainedLaunch launch;
    // A runtime that fails at once (no supervisor): the start ends with its status and output.
    launch.argv = {"/bin/sh", "-c", "echo no container; exit 3"};
    launch.foreground_output = dir / "runtime.log";
    launch.start_timeout = std::chrono::seconds(20);
    auto s = providers::Supervisor::start_contained(providers::SupervisorConfig{}, launch);
    ASSERT_FALSE(s.ok());
    ASSERT_EQ(s.error().message().find("did not start the container's supervisor"),
              std::string::npos)
        << "start " << i << " hung: " << s.error().message();
    EXPECT_NE(s.error().message().find("no container"), std::string::npos) << s.error().message();
  }
}

// ---- Rootless: Podman as the run's own first host id ------------------------------------------

// 4 ranges from 70,000,000 (above the default pool's end, 69,108,863), 4 x 65536 ids per
// test process id modulo 4096: at most 70,000,000 + 4096 x 262,144, far below 2^32 - 1.
IdPool rootless_test_pool() {
  IdPool pool;
  pool.first = 70'000'000 + static_cast<uid_t>(::getpid() % 4096) * 4 * kIdRangeSize;
  pool.ranges = 4;
  return pool;
}

class PodmanRootlessTest : public PodmanTest {
 protected:
  providers::PodmanMode mode() const override { return providers::PodmanMode::kRootless; }
  void SetUp() override {
    PodmanTest::SetUp();
    // A pool of this test process's own, outside the default one: the run's ids are the
    // witness that nothing of it is left, so no other sandgate (with another state directory,
    // hence other range locks) may run processes under them meanwhile.
    options_.id_pool = rootless_test_pool();
    podman_ = std::make_unique<providers::PodmanProvider>(options_);
    subuid_ = text_or(read_file("/etc/subuid"), "<none>");
    subgid_ = text_or(read_file("/etc/subgid"), "<none>");
  }
  void TearDown() override {
    // Nothing of the host's id files changes: the maps are written by sandgate.
    EXPECT_EQ(text_or(read_file("/etc/subuid"), "<none>"), subuid_);
    EXPECT_EQ(text_or(read_file("/etc/subgid"), "<none>"), subgid_);
    PodmanTest::TearDown();
  }
  std::string subuid_, subgid_;
};

TEST_F(PodmanRootlessTest, TheRunsOwnIdOwnsItsNamespaceAndNothingIsLeft) {
  REQUIRE_PODMAN();
  auto env = make_env(*podman_);
  ASSERT_TRUE(env);
  auto* supervised = dynamic_cast<providers::SupervisedEnvironment*>(env.get());
  ASSERT_NE(supervised, nullptr);
  const uid_t base = env->host_id_base();
  EXPECT_GE(base, options_.id_pool.first) << "the run's own range, from the pool";
  // The user namespace belongs to the run's first id, not to root: the kernel's per-user
  // counts of the run are its own.
  EXPECT_EQ(userns_owner(supervised->supervisor_pid()), static_cast<long>(base));
  auto r = sh(*env,
              "id -u; id -g; pwd; echo hi > /workspace/f && cat /workspace/f; "
              "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; "
              "touch /usr/x 2>/dev/null || echo ro-usr; touch /x 2>/dev/null || echo ro-root");
  EXPECT_EQ(r.stdout_data,
            "10001\n10001\n/workspace\nhi\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\n"
            "NoNewPrivs:\t1\nSeccomp:\t2\nro-usr\nro-root\n")
      << r.stderr_data;
  struct stat st;
  ASSERT_EQ(::stat((env->workspace_host_path() + "/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, base + 10001);
  // Podman runs as the run's id: its processes (conmon) carry it, and root's Podman has no
  // such container.
  EXPECT_FALSE(processes_with_ids_from(base).empty());
  std::string name = "sandgate-" + env->run_id();
  EXPECT_FALSE(container_exists(name)) << "a rootless run's container is not root's";
  std::string run_id = env->run_id();
  // The assembled root and Podman's state are tmpfs mounts of the run's, beside its /proc
  // views (mounted by their server while the root is assembled: in either order).
  const std::string run_dir = options_.paths.work_dir + "/" + run_id;
  EXPECT_THAT(mounts_under(run_dir),
              ::testing::UnorderedElementsAre(run_dir + "/proc-views", run_dir + "/root",
                                              run_dir + "/podman"));
  ASSERT_TRUE(env->destroy().ok());
  EXPECT_EQ(joined(mounts_under(options_.paths.work_dir)), "") << "mounts left";
  EXPECT_NE(::access(run_dir.c_str(), F_OK), 0) << "left: " << run_dir;
  for (int i = 0; i < 200 && !processes_with_ids_from(base).empty(); ++i) ::usleep(10000);
  EXPECT_EQ(processes_with_ids_from(base).size(), 0u) << "a process of the run's ids was left";
  for (const char* h : {"cpu", "memory", "pids", "unified"}) {
    std::string dir = std::string("/sys/fs/cgroup/") + h + "/sandgate-podman/" + run_id;
    EXPECT_NE(::access(dir.c_str(), F_OK), 0) << "left: " << dir;
  }
  std::string shm_lock = "/dev/shm/libpod_rootless_lock_" + std::to_string(base);
  EXPECT_NE(::access(shm_lock.c_str(), F_OK), 0)
      << "Podman's shared-memory lock was left: " << shm_lock;
}

// Two runs share /sandgate-podman in each hierarchy; the one that made it may end first. The
// last one out removes it: no empty parent is left (one with children belongs to other runs).
// Rootless Podman reads and binds the views as the run's own id: the server's mount is
// allow_other, and its flags (ro, nosuid, nodev, noexec) are what the runtime's remount keeps.
TEST_F(PodmanRootlessTest, ACallSeesTheRunsOwnProcViews) {
  REQUIRE_PODMAN();
  expect_own_proc_views();
}

TEST_F(PodmanRootlessTest, TheSharedParentCgroupGoesWithTheLastRun) {
  REQUIRE_PODMAN();
  auto a = make_env(*podman_);
  ASSERT_TRUE(a);
  auto b = make_env(*podman_);
  ASSERT_TRUE(b);
  ASSERT_TRUE(a->destroy().ok());
  ASSERT_TRUE(b->destroy().ok());
  for (const char* h : {"cpu", "memory", "pids", "unified"}) {
    std::string parent = std::string("/sys/fs/cgroup/") + h + "/sandgate-podman";
    if (::access(parent.c_str(), F_OK) != 0) continue;
    EXPECT_GT(child_dirs(parent), 0u) << "an empty " << parent << " was left";
  }
}

TEST_F(PodmanRootlessTest, ReadBackRefusesADroppedSetting) {
  REQUIRE_PODMAN();
  for (const char* setting : {"cap-drop", "read-only", "no-new-privileges", "network", "pids-limit",
                              "memory", "cpus", "cgroup-parent"}) {
    SCOPED_TRACE(setting);
    providers::PodmanProvider p(options_);
    p.drop_setting_for_test(setting);
    auto env = p.create({});
    ASSERT_FALSE(env.ok()) << setting << " was dropped but the run was accepted";
    EXPECT_NE(env.error().message().find(std::string("'") + setting + "'"), std::string::npos)
        << env.error().message();
    EXPECT_EQ(count_entries(options_.paths.state_dir + "/runs"), 0u) << "after " << setting;
  }
}

TEST_F(PodmanRootlessTest, AnImageIsRefusedAndAutoRunsItRootful) {
  REQUIRE_PODMAN();
  auto mode = providers::resolve_podman_mode(options_, "localhost/some-image");
  ASSERT_FALSE(mode.ok());
  EXPECT_NE(mode.error().message().find("runs no container image"), std::string::npos)
      << mode.error().message();
  auto options = options_;
  options.podman_mode = providers::PodmanMode::kAuto;
  auto with_image = providers::resolve_podman_mode(options, "localhost/some-image");
  ASSERT_TRUE(with_image.ok()) << with_image.error().message();
  EXPECT_EQ(*with_image, providers::PodmanMode::kRootful);
  auto without = providers::resolve_podman_mode(options, "");
  ASSERT_TRUE(without.ok()) << without.error().message();
  EXPECT_EQ(*without, providers::PodmanMode::kRootless) << "auto prefers rootless where it works";
}

TEST_F(PodmanRootlessTest, EveryWeakeningMakesAWorkingRunUnderTheSelfTest) {
  REQUIRE_PODMAN();
  std::string home = tmp_ + "/home";
  ASSERT_TRUE(make_dirs(home, 0755).ok());
  const char* old_home = std::getenv("HOME");
  std::string saved = old_home ? old_home : "";
  ::setenv("HOME", home.c_str(), 1);
  Defer restore([&] { ::setenv("HOME", saved.c_str(), 1); });
  auto options = options_;
  options.self_test_weakenings = true;
  providers::PodmanProvider p(options);
  for (auto w : providers::all_weakenings()) {
    SCOPED_TRACE(providers::to_string(w));
    providers::EnvSpec spec;
    spec.weakenings = {w};
    auto env = p.create(spec);
    ASSERT_TRUE(env.ok()) << providers::to_string(w) << ": " << env.error().message();
    auto r = sh(**env, "echo ok");
    EXPECT_EQ(r.stdout_data, "ok\n") << r.stderr_data;
    EXPECT_TRUE((*env)->destroy().ok());
  }
  EXPECT_TRUE(providers::remove_shared_dirs(options_.paths).ok());
}

class PodmanRootlessCgroupTest : public PodmanCgroupTest {
 protected:
  providers::PodmanMode mode() const override { return providers::PodmanMode::kRootless; }
  void SetUp() override {
    PodmanCgroupTest::SetUp();
    options_.id_pool = rootless_test_pool();  // as PodmanRootlessTest
    podman_ = std::make_unique<providers::PodmanProvider>(options_);
  }
  void TearDown() override {
    for (const auto& h : hierarchies_) ::rmdir((h + "/" + root_ + "/t/run/main/podman").c_str());
    // The hierarchies the test did not make a tree in, where sandgate made the same path for
    // the ceiling: gone with the run.
    for (const auto& h : all_hierarchies()) {
      if (std::find(hierarchies_.begin(), hierarchies_.end(), h) != hierarchies_.end()) continue;
      EXPECT_NE(::access((h + "/" + root_).c_str(), F_OK), 0) << "left: " << h << "/" << root_;
    }
    PodmanCgroupTest::TearDown();
  }
};

// Podman (and so conmon and the container) in <run>/main/podman with the run ceiling written
// there by sandgate and read back from the kernel; each call in its own call cgroup.
TEST_F(PodmanRootlessCgroupTest, TheCeilingIsOnTheRunsCgroupAndEachCallIsPlacedInItsOwn) {
  REQUIRE_PODMAN();
  SANDGATE_REQUIRE(::access("/sys/fs/cgroup/memory", F_OK) == 0,
                   "needs the hybrid layout (v1 memory)");
  Placement main, call;
  for (const char* h : {"memory", "pids", "unified"}) {
    std::string base = "/sys/fs/cgroup/" + std::string(h);
    if (::access(base.c_str(), F_OK) != 0) continue;
    hierarchies_.push_back(base);
    std::string run = base + "/" + root_ + "/t/run";
    ASSERT_TRUE(make_dirs(run + "/main", 0755).ok());
    ASSERT_TRUE(make_dirs(run + "/call-1", 0755).ok());
    main.cgroup_dirs.push_back(run + "/main");
    call.cgroup_dirs.push_back(run + "/call-1");
  }
  providers::EnvSpec spec;
  spec.placement = main;
  spec.ceiling.pids = 321;
  spec.ceiling.memory_bytes = 512ull << 20;
  spec.ceiling.cpus = 1.5;
  auto env = make_env(*podman_, spec);
  ASSERT_TRUE(env);
  auto* supervised = dynamic_cast<providers::SupervisedEnvironment*>(env.get());
  ASSERT_NE(supervised, nullptr);
  auto sup_cgroup = read_file("/proc/" + std::to_string(supervised->supervisor_pid()) + "/cgroup");
  ASSERT_TRUE(sup_cgroup.ok());
  std::string podman_rel = "/" + root_ + "/t/run/main/podman";
  EXPECT_NE(sup_cgroup->find(":memory:" + podman_rel + "\n"), std::string::npos) << *sup_cgroup;
  EXPECT_NE(sup_cgroup->find(":pids:" + podman_rel + "\n"), std::string::npos) << *sup_cgroup;
  EXPECT_NE(sup_cgroup->find(":cpu:" + podman_rel + "\n"), std::string::npos)
      << "the cpu hierarchy, which the placement lacks, has the same path: " << *sup_cgroup;
  EXPECT_EQ(text_or(read_file("/sys/fs/cgroup/pids" + podman_rel + "/pids.max"), ""), "321\n");
  EXPECT_EQ(text_or(read_file("/sys/fs/cgroup/memory" + podman_rel + "/memory.limit_in_bytes"), ""),
            std::to_string(512ull << 20) + "\n");
  EXPECT_EQ(text_or(read_file("/sys/fs/cgroup/cpu" + podman_rel + "/cpu.cfs_quota_us"), ""),
            "150000\n");

  providers::Call c;
  c.argv = {"/bin/sh", "-c", "cat /proc/self/cgroup"};
  std::string cgroup_seen;
  c.on_started = [&](pid_t pid) {
    auto text = read_file("/proc/" + std::to_string(pid) + "/cgroup");
    if (text.ok()) cgroup_seen = *text;
  };
  auto r = env->exec(c, call);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_NE(cgroup_seen.find(":memory:/" + root_ + "/t/run/call-1\n"), std::string::npos)
      << cgroup_seen;
  EXPECT_NE(r->stdout_data.find(":pids:/" + root_ + "/t/run/call-1\n"), std::string::npos)
      << r->stdout_data;
  ASSERT_TRUE(env->destroy().ok());
  for (const auto& h : hierarchies_)
    EXPECT_EQ(child_dirs(h + "/" + root_ + "/t/run/main"), 0u) << "left under " << h;
}

// kill -9 of the process that made a rootless run: gc kills what is in the run's cgroup (conmon,
// the container) and removes the run's Podman storage with the run directory.
TEST_F(PodmanRootlessCgroupTest, CrashThenGcLeavesNothing) {
  REQUIRE_PODMAN();
  SANDGATE_REQUIRE(::access("/sys/fs/cgroup/memory", F_OK) == 0,
                   "needs the hybrid layout (v1 memory)");
  Placement main;
  std::string base = "/sys/fs/cgroup/memory";
  hierarchies_.push_back(base);
  ASSERT_TRUE(make_dirs(base + "/" + root_ + "/t/run/main", 0755).ok());
  main.cgroup_dirs.push_back(base + "/" + root_ + "/t/run/main");
  auto pipe = make_pipe(0);
  ASSERT_TRUE(pipe.ok());
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    providers::PodmanProvider p(options_);
    providers::EnvSpec spec;
    spec.placement = main;
    auto env = p.create(spec);
    std::string ids = env.ok() ? std::to_string((*env)->host_id_base()) : "";
    (void)!::write(pipe->write.get(), ids.data(), ids.size());
    pipe->write.reset();
    if (!env.ok()) ::_exit(1);
    std::move(env).value().release();
    for (;;) ::pause();
  }
  pipe->write.reset();
  char buf[64] = {};
  ssize_t n = ::read(pipe->read.get(), buf, sizeof buf - 1);
  ASSERT_GT(n, 0) << "the child could not create a run";
  uid_t first = static_cast<uid_t>(std::strtoul(buf, nullptr, 10));
  EXPECT_FALSE(processes_with_ids_from(first).empty()) << "the run's processes are not there";
  ::kill(child, SIGKILL);
  int status;
  ::waitpid(child, &status, 0);
  auto report = collect_garbage(options_.paths);
  EXPECT_TRUE(report.errors.empty()) << report.errors.front();
  EXPECT_EQ(report.runs_removed, 1);
  for (int i = 0; i < 200 && !processes_with_ids_from(first).empty(); ++i) ::usleep(10000);
  EXPECT_EQ(processes_with_ids_from(first).size(), 0u) << "a process of the run's ids survived gc";
  EXPECT_EQ(child_dirs(base + "/" + root_ + "/t/run/main"), 0u) << "a cgroup was left under main";
}

}  // namespace
}  // namespace sandgate::testing
