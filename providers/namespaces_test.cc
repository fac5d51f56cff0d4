// The namespace jail's own behaviour (its isolation twins are in tests/isolation_test.cc).
#include "providers/namespaces.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/kcmp.h>
#include <linux/magic.h>
#include <linux/nsfs.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>

#include "core/defer.h"
#include "core/fd.h"
#include "core/files.h"
#include "core/json.h"
#include "core/state.h"
#include "core/strings.h"
#include "providers/base_root.h"
#include "providers/proc_views.h"
#include "providers/supervised_environment.h"
#include "tests/support/eventually.h"
#include "tests/support/provider_fixture.h"

namespace sandgate::testing {
namespace {

// The directory of this process's memory cgroup, as the run's views find a reader's: the v1
// memory hierarchy's where there is one, else the v2 one. *is_root: it is the hierarchy's root.
std::string memory_cgroup_of_self(bool* is_root) {
  auto text = read_file("/proc/self/cgroup", 1 << 16);
  if (!text.ok()) return "";
  std::string v1, v2;
  std::istringstream lines(*text);
  for (std::string line; std::getline(lines, line);) {
    auto c1 = line.find(':'), c2 = line.find(':', c1 + 1);
    if (c1 == std::string::npos || c2 == std::string::npos) continue;
    std::string ctl = line.substr(c1 + 1, c2 - c1 - 1), path = line.substr(c2 + 1);
    std::string tail = path == "/" ? "" : path;
    std::istringstream names(ctl);
    for (std::string name; std::getline(names, name, ',');)
      if (name == "memory") v1 = "/sys/fs/cgroup/memory" + tail;
    if (ctl.empty())
      v2 = (::access("/sys/fs/cgroup/unified", F_OK) == 0 ? "/sys/fs/cgroup/unified"
                                                           : "/sys/fs/cgroup") + tail;
  }
  std::string dir = !v1.empty() ? v1 : v2;
  *is_root = dir == "/sys/fs/cgroup/memory" || dir == "/sys/fs/cgroup/unified" ||
             dir == "/sys/fs/cgroup";
  return dir;
}

// `cg`: a cgroup2 directory of the test's own, /sys/fs/cgroup/unified/NAME-<pid>, removed when
// the test ends (empty by then: its run is destroyed). Without a writable cgroup2 mount the
// test skips, or fails under SANDGATE_MUST_WORK=1.
#define SANDGATE_TEST_CGROUP(cg, name)                                                    \
  SANDGATE_REQUIRE(::access("/sys/fs/cgroup/unified/cgroup.procs", W_OK) == 0,            \
                   "needs a writable cgroup2 mount at /sys/fs/cgroup/unified");           \
  const std::string cg =                                                                  \
      std::string("/sys/fs/cgroup/unified/") + (name) + "-" + std::to_string(::getpid()); \
  ASSERT_EQ(::mkdir(cg.c_str(), 0755), 0);                                                \
  Defer remove_##cg([&] { ::rmdir(cg.c_str()); })

// The processes in cgroup `cg`, and which of them share this process's memory (a clone child
// before its exec).
std::vector<pid_t> cgroup_members(const std::string& cg) {
  std::vector<pid_t> out;
  auto procs = read_file(cg + "/cgroup.procs");
  EXPECT_TRUE(procs.ok()) << procs.error().message();
  std::istringstream in(procs.ok() ? *procs : "");
  for (pid_t pid; in >> pid;) out.push_back(pid);
  return out;
}
bool shares_our_memory(pid_t pid) {
  return ::syscall(SYS_kcmp, ::getpid(), pid, KCMP_VM, 0, 0) == 0;
}

class NamespacesTest : public ProviderTest {
 protected:
  void SetUp() override {
    ProviderTest::SetUp();
    if (is_root()) ns_ = provider("namespaces");
  }
  std::unique_ptr<providers::Provider> ns_;
};

TEST_F(NamespacesTest, RecipeIsCopiedAndOwnedByTheSandboxUser) {
  SANDGATE_REQUIRE_ROOT();
  std::string recipe = tmp_ + "/recipe";
  ASSERT_TRUE(make_dirs(recipe + "/src").ok());
  std::ofstream(recipe + "/src/main.c") << "int main(){return 0;}\n";
  providers::EnvSpec spec;
  spec.workspace_recipe = recipe;
  auto env = make_env(*ns_, spec);
  ASSERT_TRUE(env);
  auto r =
      sh(*env, "stat -c '%U %a' /workspace /workspace/src/main.c; echo new > /workspace/src/new");
  EXPECT_EQ(r.stdout_data, "sandbox 700\nsandbox 644\n") << r.stderr_data;
  // The recipe itself is untouched by what the run writes.
  EXPECT_NE(::access((recipe + "/src/new").c_str(), F_OK), 0);
  // From outside, the file is owned by the mapped host uid, not by root.
  struct stat st;
  ASSERT_EQ(::stat((env->workspace_host_path() + "/src/new").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, env->host_id_base() + 10001);
  EXPECT_GE(env->host_id_base(), options_.id_pool.first) << "the run's own range, from the pool";
}

// The jail's /etc/alternatives is a clone of the one mount the host process made
// (shared_alternatives_mount), not a copy: a read-only tmpfs of its own in the run, with every
// link of the host's, target for target, and nothing can be added to it.
TEST_F(NamespacesTest, AlternativesAreAReadOnlyCloneOfTheSharedMountWithEveryHostLink) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_REQUIRE(::access("/etc/alternatives", F_OK) == 0, "this host has no /etc/alternatives");
  auto shared = providers::shared_alternatives_mount();
  SANDGATE_REQUIRE(shared.ok(), "no shared alternatives mount on this kernel: " +
                                    (shared.ok() ? std::string() : shared.error().message()));
  const std::string host = host_alternatives();
  ASSERT_NE(host, "");
  auto env = make_env(*ns_, {});
  ASSERT_TRUE(env);
  // Mount point, mount options, filesystem type, superblock options.
  auto r =
      sh(*env, "awk '$5 == \"/etc/alternatives\" {print $6, $(NF-2), $NF}' /proc/self/mountinfo");
  EXPECT_EQ(r.stdout_data.substr(0, r.stdout_data.find(',')), "ro") << r.stdout_data;
  EXPECT_NE(r.stdout_data.find("nosuid,nodev,noexec"), std::string::npos) << r.stdout_data;
  // The shared mount's filesystem: the cached erofs image, or the tmpfs copy without mkfs.erofs
  // (base_root_test checks which one this host must have).
  struct statfs fs;
  ASSERT_EQ(::fstatfs((*shared)->get(), &fs), 0);
  const std::string type = fs.f_type == EROFS_SUPER_MAGIC_V1 ? "erofs" : "tmpfs";
  EXPECT_NE(r.stdout_data.find(" " + type + " ro,"), std::string::npos) << r.stdout_data;
  EXPECT_EQ(sh(*env, kListAlternatives).stdout_data, host);
  auto planted = sh(*env, "ln -s /etc/shadow /etc/alternatives/planted 2>&1");
  EXPECT_NE(planted.stdout_data.find("Read-only"), std::string::npos) << planted.stdout_data;
  ASSERT_TRUE(env->destroy().ok());
}

TEST_F(NamespacesTest, ReadonlyMountIsVisibleAndReadOnly) {
  SANDGATE_REQUIRE_ROOT();
  std::string data = tmp_ + "/data";
  ASSERT_TRUE(make_dirs(data).ok());
  ::chmod(data.c_str(), 0755);
  std::ofstream(data + "/f") << "ro\n";
  ::chmod((data + "/f").c_str(), 0644);
  providers::EnvSpec spec;
  spec.readonly_mounts = {{data, "/opt/data"}};
  auto env = make_env(*ns_, spec);
  ASSERT_TRUE(env);
  auto r = sh(*env, "cat /opt/data/f; touch /opt/data/g 2>&1 | grep -c 'Read-only'");
  EXPECT_EQ(r.stdout_data, "ro\n1\n");
}

// A read-only bind is read-only all the way down: a mount under the bound directory comes
// along (MS_REC) and must not stay writable (a remount changes one mount only).
TEST_F(NamespacesTest, ReadonlyMountIsReadOnlyAllTheWayDown) {
  SANDGATE_REQUIRE_ROOT();
  std::string data = tmp_ + "/data", sub = data + "/sub", deeper = sub + "/deeper";
  ASSERT_TRUE(make_dirs(sub).ok());
  ::chmod(data.c_str(), 0755);
  ASSERT_EQ(::mount("sandgate-test-sub", sub.c_str(), "tmpfs", 0, "mode=1777,size=64k"), 0);
  Defer unmount_sub([&] { ::umount2(sub.c_str(), MNT_DETACH); });
  ASSERT_EQ(::mkdir(deeper.c_str(), 0755), 0);
  ASSERT_EQ(::mount("sandgate-test-deeper", deeper.c_str(), "tmpfs", 0, "mode=1777,size=64k"), 0);
  Defer unmount_deeper([&] { ::umount2(deeper.c_str(), MNT_DETACH); });
  // Writable from the host, and by anyone: only the jail's bind can make it read-only.
  ASSERT_TRUE(write_file(sub + "/host-wrote", "x", O_WRONLY | O_CREAT).ok());
  providers::EnvSpec spec;
  spec.readonly_mounts = {{data, "/opt/data"}};
  auto env = make_env(*ns_, spec);
  ASSERT_TRUE(env);
  auto r = sh(*env,
              "cat /opt/data/sub/host-wrote; echo;"
              "for d in /opt/data /opt/data/sub /opt/data/sub/deeper; do"
              "  touch $d/jail-wrote 2>&1 | grep -c 'Read-only';"
              "done");
  EXPECT_EQ(r.stdout_data, "x\n1\n1\n1\n") << r.stderr_data;
  EXPECT_NE(::access((sub + "/jail-wrote").c_str(), F_OK), 0) << "the jail wrote into the submount";
  EXPECT_NE(::access((deeper + "/jail-wrote").c_str(), F_OK), 0);
}

// Calls are the OOM killer's first choice (oom_score_adj 1000), and cannot make themselves
// less so: an unprivileged process may lower its own value back to 0, so the jail's Landlock
// ruleset keeps calls from opening procfs files for writing at all. Writing where calls work
// (workspace, /tmp, /dev/null) is unaffected.
TEST_F(NamespacesTest, CallCannotLowerItsOomPriority) {
  SANDGATE_REQUIRE_ROOT();
  auto env = make_env(*ns_);
  ASSERT_TRUE(env);
  auto r = sh(*env,
              "cat /proc/self/oom_score_adj;"
              "echo 0 > /proc/self/oom_score_adj && echo lowered;"
              "echo -17 > /proc/self/oom_adj && echo lowered-legacy;"
              "sh -c 'cat /proc/self/oom_score_adj; echo 0 > /proc/self/oom_score_adj && echo "
              "child-lowered';"
              "echo w > /workspace/f && echo w > /tmp/f && echo w > /dev/null && echo writes-ok");
  EXPECT_EQ(r.stdout_data, "1000\n1000\nwrites-ok\n") << r.stderr_data;
  EXPECT_NE(r.stderr_data.find("Permission denied"), std::string::npos) << r.stderr_data;
}

// The twin: a process of the run itself (Call::resident, the agent's own memory) keeps the
// supervisor's OOM priority, which is this test's (inherited), so that under a shared limit
// the kernel takes a running call (1000) before it. Its children inherit it.
TEST_F(NamespacesTest, ResidentProcessKeepsTheSupervisorsOomPriority) {
  SANDGATE_REQUIRE_ROOT();
  auto own = read_file("/proc/self/oom_score_adj");
  ASSERT_TRUE(own.ok()) << own.error().message();
  SANDGATE_REQUIRE(*own != "1000\n", "this test already runs at oom_score_adj 1000");
  auto env = make_env(*ns_);
  ASSERT_TRUE(env);
  providers::Call resident;
  resident.argv = {"/bin/sh", "-c",
                   "cat /proc/self/oom_score_adj; sh -c 'cat /proc/self/oom_score_adj'"};
  resident.resident = true;
  auto r = env->exec(resident, {});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->stdout_data, *own + *own) << r->stderr_data;
  // A call after it still gets 1000.
  EXPECT_EQ(sh(*env, "cat /proc/self/oom_score_adj").stdout_data, "1000\n");
}

TEST_F(NamespacesTest, FailedSetupStepNamesItselfAndLeavesNothing) {
  SANDGATE_REQUIRE_ROOT();
  providers::EnvSpec spec;
  spec.readonly_mounts = {{tmp_ + "/does-not-exist", "/opt/x"}};
  auto env = ns_->create(spec);
  ASSERT_FALSE(env.ok());
  std::string m = env.error().message();
  EXPECT_NE(m.find("stat bind source"), std::string::npos) << m;
  EXPECT_NE(m.find(tmp_ + "/does-not-exist"), std::string::npos) << m;
  EXPECT_NE(m.find("ENOENT"), std::string::npos) << m;
  EXPECT_NE(m.find("assembling the sandbox"), std::string::npos) << m;
  // TearDown asserts that no record and no run directory remain.
}

// A step of the supervisor's own start that fails before its exec (here the exec itself: the
// binary is not a program) comes back by name over the start-error pipe, never as a bare
// exit code 120-126; with a placement too, where the host waits for that exec before placing
// it (nothing is left in the cgroup).
TEST_F(NamespacesTest, SupervisorThatCannotStartNamesTheStep) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_TEST_CGROUP(cg, "sandgate-test-supervisor-fails");
  providers::ProviderOptions o = options_;
  o.supervisor_exe = "/etc/hostname";
  o.proc_views = false;  // their server is the same binary: it would fail first (below)
  auto p = registry_.create("namespaces", o);
  ASSERT_TRUE(p.ok()) << p.error().message();
  for (const auto& placement : {Placement{}, Placement{{cg}}}) {
    SCOPED_TRACE(placement.cgroup_dirs.empty() ? "no placement" : "placed");
    providers::EnvSpec spec;
    spec.placement = placement;
    auto env = (*p)->create(spec);
    ASSERT_FALSE(env.ok());
    std::string m = env.error().message();
    // EACCES or ENOEXEC, depending on the file's mode: the step and the errno are what count.
    EXPECT_TRUE(m.starts_with("execveat the supervisor binary: ") &&
                m.find(" (E") != std::string::npos)
        << m;
    EXPECT_EQ(m.find("exit 12"), std::string::npos) << m;
    EXPECT_TRUE(cgroup_members(cg).empty());
  }
}

// The run's /proc views (proc_views.h) that cannot be set up fail the run, by name and with
// the way out, and leave nothing (TearDown: no record, no run directory); the run never starts
// with the host's /proc files instead. Its twin: the same binary with the views turned off
// gets past them to the supervisor's own start (above).
TEST_F(NamespacesTest, ProcViewsThatCannotStartFailTheRunByName) {
  SANDGATE_REQUIRE_ROOT();
  providers::ProviderOptions o = options_;
  o.supervisor_exe = "/etc/hostname";
  auto p = registry_.create("namespaces", o);
  ASSERT_TRUE(p.ok()) << p.error().message();
  auto env = (*p)->create({});
  ASSERT_FALSE(env.ok());
  std::string m = env.error().message();
  EXPECT_TRUE(m.starts_with("start proc views: exec the server /etc/hostname: ") &&
              m.find(" (E") != std::string::npos)
      << m;
  EXPECT_NE(m.find("--no-proc-views"), std::string::npos) << m;
  EXPECT_NE(m.find("SANDGATE_PROC_VIEWS=0"), std::string::npos) << m;
}

// A jail's supervisor, started by hand (the provider's own start without the provider):
// Supervisor::start with a config for `root` and `workspace` (made here) and `before_config`.
struct HandStartedSupervisor {
  std::optional<RunState> state;
  Result<providers::Supervisor> supervisor = logic_error("start", "not started");
};
HandStartedSupervisor start_jail_supervisor(
    const providers::ProviderOptions& o, const std::string& dir,
    std::function<Status(pid_t)> before_config, const Placement& placement = {},
    const std::vector<providers::BindMount>& readonly_mounts = {}) {
  HandStartedSupervisor out;
  auto state = RunState::create(o.paths, "hand-started", "namespaces");
  EXPECT_TRUE(state.ok()) << state.error().message();
  if (!state.ok()) return out;
  out.state.emplace(std::move(state).value());
  providers::SupervisorConfig c;
  c.isolate = true;
  c.id_map_base = o.id_map_base;
  c.jail.root_dir = dir + "/root";
  c.jail.workspace_host = dir + "/workspace";
  EXPECT_TRUE(make_dirs(c.jail.root_dir, 0755).ok());
  EXPECT_TRUE(make_dirs(c.jail.workspace_host, 0700).ok());
  (void)::chown(c.jail.workspace_host.c_str(), o.id_map_base + c.jail.uid,
                o.id_map_base + c.jail.gid);
  c.base_env = {"PATH=/usr/bin:/bin"};
  c.default_cwd = "/workspace";
  c.before_config = std::move(before_config);
  c.jail.readonly_mounts = readonly_mounts;
  out.supervisor = providers::Supervisor::start(c, placement, *out.state, o.supervisor_exe);
  return out;
}

std::string namespace_of(pid_t pid, const char* kind) {
  char link[256] = {};
  std::string path = "/proc/" + std::to_string(pid) + "/ns/" + kind;
  ssize_t n = ::readlink(path.c_str(), link, sizeof link - 1);
  return n > 0 ? std::string(link, static_cast<size_t>(n)) : "";
}
std::string mount_namespace_of(pid_t pid) { return namespace_of(pid, "mnt"); }

// A placement the test holds: `dir`/cgroup.procs is a FIFO, so the host's write of the
// supervisor's pid (Supervisor::start's placement) waits until release() reads it. Not a
// cgroup: the supervisor stays where it was, and its cgroup namespace is rooted there.
class HeldPlacement {
 public:
  explicit HeldPlacement(const std::string& dir) : dir_(dir) {
    EXPECT_TRUE(make_dirs(dir, 0755).ok());
    EXPECT_EQ(::mkfifo((dir + "/cgroup.procs").c_str(), 0600), 0) << std::strerror(errno);
  }
  Placement placement() const { return Placement{{dir_}}; }
  // Lets the write through and returns what it wrote ("" if nothing came in 10 s). Opened
  // without waiting for a writer (which then need not wait for us).
  std::string release() {
    UniqueFd fifo(::open((dir_ + "/cgroup.procs").c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
    if (!fifo) return "";
    std::string got;
    eventually([&] {
      char buf[64];
      ssize_t n = ::read(fifo.get(), buf, sizeof buf);
      if (n > 0) got.append(buf, static_cast<size_t>(n));
      return n == 0 && !got.empty();  // the writer wrote and closed
    });
    return got;
  }

 private:
  std::string dir_;
};

// The run's supervisor execs while its /proc views start (issue 15: the two starts added up):
// Supervisor::start lets the supervisor go before it waits for them (before_config), and the
// supervisor makes its own mount namespace only when its config comes, so that the views'
// mount, made meanwhile in the host's, is there to bind.
TEST_F(NamespacesTest, SupervisorExecsBeforeItsConfigAndMakesItsMountNamespaceAfter) {
  SANDGATE_REQUIRE_ROOT();
  const std::string ours = mount_namespace_of(::getpid());
  pid_t seen = 0;
  std::string then;
  auto started = start_jail_supervisor(options_, tmp_ + "/hand", [&](pid_t supervisor) {
    seen = supervisor;
    then = mount_namespace_of(supervisor);
    return Status{};
  });
  ASSERT_TRUE(started.supervisor.ok()) << started.supervisor.error().message();
  EXPECT_EQ(seen, started.supervisor->pid()) << "before_config was not called with the supervisor";
  EXPECT_EQ(then, ours) << "the supervisor had its own mount namespace before its config";
  EXPECT_NE(mount_namespace_of(started.supervisor->pid()), ours)
      << "the jail runs in the host's mount namespace";
  EXPECT_TRUE(started.supervisor->stop().ok());
  EXPECT_TRUE(release_resources(options_.paths, started.state->resources()).ok());
  EXPECT_TRUE(started.state->finish().ok());
}

// A jail's set-up overlaps its placement, which waits for an RCU grace period on a hybrid host:
// the supervisor assembles its jail while the host is still placing it, and makes its cgroup
// namespace only when told it is placed, so that the namespace is rooted at the run's cgroup.
TEST_F(NamespacesTest, TheJailIsAssembledWhileItsSupervisorIsPlaced) {
  SANDGATE_REQUIRE_ROOT();
  HeldPlacement held(tmp_ + "/place");
  const std::string our_mounts = mount_namespace_of(::getpid());
  const std::string our_cgroups = namespace_of(::getpid(), "cgroup");
  std::atomic<pid_t> supervisor{0};
  bool assembled_while_placed = false;
  std::string cgroups_while_placed, written;
  std::thread placing([&] {
    assembled_while_placed =
        eventually([&] { return supervisor != 0 && mount_namespace_of(supervisor) != our_mounts; });
    if (supervisor != 0) cgroups_while_placed = namespace_of(supervisor, "cgroup");
    written = held.release();  // always: the start below waits for it
  });
  auto started = start_jail_supervisor(
      options_, tmp_ + "/hand",
      [&](pid_t pid) {
        supervisor = pid;
        return Status{};
      },
      held.placement());
  placing.join();
  ASSERT_TRUE(started.supervisor.ok()) << started.supervisor.error().message();
  EXPECT_EQ(written, std::to_string(started.supervisor->pid()));
  EXPECT_TRUE(assembled_while_placed) << "the jail was not assembled while the host placed it";
  EXPECT_EQ(cgroups_while_placed, our_cgroups) << "its cgroup namespace came before its place";
  EXPECT_NE(namespace_of(started.supervisor->pid(), "cgroup"), our_cgroups)
      << "no cgroup namespace of its own once placed";
  EXPECT_TRUE(started.supervisor->stop().ok());
  EXPECT_TRUE(release_resources(options_.paths, started.state->resources()).ok());
  EXPECT_TRUE(started.state->finish().ok());
}

// Its twin: a set-up step that fails while the host places the supervisor ends the supervisor,
// and the start fails with the step's own error (which the supervisor sent before it exited),
// not with the "placed" the host could no longer send.
TEST_F(NamespacesTest, ASetupThatFailsWhileTheSupervisorIsPlacedNamesItsStep) {
  SANDGATE_REQUIRE_ROOT();
  HeldPlacement held(tmp_ + "/place");
  std::atomic<pid_t> supervisor{0};
  bool exited = false;
  std::thread placing([&] {
    exited = eventually([&] {
      if (supervisor == 0) return false;
      auto stat = read_file("/proc/" + std::to_string(supervisor) + "/stat", 4096);
      return stat.ok() && stat->find(") Z ") != std::string::npos;  // ours to reap
    });
    (void)held.release();
  });
  auto started = start_jail_supervisor(options_, tmp_ + "/hand",
                                       [&](pid_t pid) {
                                         supervisor = pid;
                                         return Status{};
                                       },
                                       held.placement(), {{tmp_ + "/does-not-exist", "/opt/x"}});
  placing.join();
  EXPECT_TRUE(exited) << "the supervisor's set-up did not fail while it was placed";
  ASSERT_FALSE(started.supervisor.ok());
  const std::string m = started.supervisor.error().message();
  EXPECT_NE(m.find("stat bind source"), std::string::npos) << m;
  EXPECT_NE(m.find(tmp_ + "/does-not-exist"), std::string::npos) << m;
  EXPECT_NE(m.find("assembling the sandbox"), std::string::npos) << m;
  ASSERT_TRUE(started.state);
  EXPECT_TRUE(release_resources(options_.paths, started.state->resources()).ok());
  EXPECT_TRUE(started.state->finish().ok());
}

// The supervisor's child shares sandgate's memory until it execs (CLONE_VM), and the kernel's
// OOM killer scores a process by its memory and kills its memory's sharers with it: placed in
// the run's cgroups before its exec, an OOM there (or in its tenant) could pick it and take
// sandgate. So it is placed only once it has exec'd: not yet while its views start
// (before_config, which the exec overlaps), and never with our memory. That it is placed, and
// its cgroup namespace still rooted there: SupervisorIsPlacedAndTheCgroupNamespaceRootedThere.
TEST_F(NamespacesTest, TheSupervisorIsPlacedInTheRunsCgroupsOnlyOnceItHasExeced) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_TEST_CGROUP(cg, "sandgate-test-supervisor-place");
  std::vector<pid_t> members_then;
  auto started = start_jail_supervisor(
      options_, tmp_ + "/hand",
      [&](pid_t) {
        members_then = cgroup_members(cg);
        return Status{};
      },
      Placement{{cg}});
  ASSERT_TRUE(started.supervisor.ok()) << started.supervisor.error().message();
  EXPECT_TRUE(members_then.empty()) << "placed while its exec could still be under way";
  const std::vector<pid_t> members = cgroup_members(cg);
  EXPECT_EQ(members, std::vector<pid_t>{started.supervisor->pid()});
  for (pid_t pid : members) EXPECT_FALSE(shares_our_memory(pid)) << pid;
  EXPECT_TRUE(started.supervisor->stop().ok());
  EXPECT_TRUE(release_resources(options_.paths, started.state->resources()).ok());
  EXPECT_TRUE(started.state->finish().ok());
}

// Its twin: what before_config waits for failed (the views did not mount), so the start fails
// with that error, and the supervisor, already let go, is gone with it.
TEST_F(NamespacesTest, SupervisorStartEndsWhenWhatItWaitsForFails) {
  SANDGATE_REQUIRE_ROOT();
  pid_t seen = 0;
  auto started = start_jail_supervisor(options_, tmp_ + "/hand", [&](pid_t supervisor) {
    seen = supervisor;
    return Status(logic_error("start proc views", "the server exited before mounting"));
  });
  ASSERT_FALSE(started.supervisor.ok());
  EXPECT_NE(started.supervisor.error().message().find("the server exited before mounting"),
            std::string::npos)
      << started.supervisor.error().message();
  ASSERT_GT(seen, 0);
  EXPECT_NE(::kill(seen, 0), 0) << "the supervisor outlived its failed start";
  ASSERT_TRUE(started.state);
  EXPECT_TRUE(release_resources(options_.paths, started.state->resources()).ok());
  EXPECT_TRUE(started.state->finish().ok());
}

// The views server is stopped with SIGTERM at destroy (release_resources) and by gc. sandgate
// blocks SIGTERM in its threads (it reads it from a signalfd, cli/signals.cc), and a blocked
// mask survives fork and exec: the server must start with nothing blocked, or every run's
// teardown waits a second for the SIGKILL that follows. A jailed call reads the view meanwhile.
TEST_F(NamespacesTest, ProcViewsServerTakesSigtermFromALauncherThatBlocksIt) {
  SANDGATE_REQUIRE_ROOT();
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &term, &old), 0);
  Defer restore([&] { ::pthread_sigmask(SIG_SETMASK, &old, nullptr); });
  auto env = make_env(*ns_);
  ASSERT_TRUE(env);
  providers::Call call;
  call.argv = {"head", "-1", "/proc/meminfo"};
  auto r = (*env).exec(call, {});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->stdout_data.rfind("MemTotal:", 0), 0u) << r->stdout_data;
  // Each view is bound read-only, nosuid, nodev, noexec (the flags of the host's mount).
  call.argv = {"grep", " /proc/meminfo ", "/proc/self/mountinfo"};
  auto info = (*env).exec(call, {});
  ASSERT_TRUE(info.ok()) << info.error().message();
  for (const char* flag : {" ro,", "nosuid", "nodev", "noexec"})
    EXPECT_NE(info->stdout_data.find(flag), std::string::npos) << flag << ": " << info->stdout_data;
  // The server, from the run's record: the process named by its mount point.
  const pid_t server = recorded_proc_views_server(options_.paths.state_dir, env->run_id());
  ASSERT_GT(server, 0) << "no views server in run " << env->run_id() << "'s record";
  auto status = read_file("/proc/" + std::to_string(server) + "/status");
  ASSERT_TRUE(status.ok());
  auto at = status->find("SigBlk:");
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(status->substr(at, status->find('\n', at) - at), "SigBlk:\t0000000000000000");
  ASSERT_TRUE(env->destroy().ok());
  EXPECT_FALSE(process_exists(server));
}

// Where a process's stack is (its line of /proc/PID/maps): randomised at each exec, whether the
// program is position-independent or not.
std::string stack_at(pid_t pid) {
  auto maps = read_file("/proc/" + std::to_string(pid) + "/maps", 1 << 20);
  if (!maps.ok()) return "";
  auto at = maps->find("[stack]");
  if (at == std::string::npos) return "";
  auto line = maps->rfind('\n', at);
  line = line == std::string::npos ? 0 : line + 1;
  return maps->substr(line, maps->find('-', line) - line);
}

// From a process's second run on, the next run's views server is started as a run is destroyed
// (proc_views.cc: the spare), so that its exec and loading are not on the next create's path
// nor beside a run's first call: the next run's recorded server is that process, mounted for
// it, and a new spare waits after its destroy. Each is an exec of its own (its own address
// layout), and a spare that died while it waited is not handed to a run: the run gets a fresh
// server and works.
TEST_F(NamespacesTest, NextRunsProcViewsServerIsStartedAheadAndServesOnlyThatRun) {
  SANDGATE_REQUIRE_ROOT();
  auto read_meminfo = [](providers::Environment& env) {
    providers::Call call;
    call.argv = {"sh", "-c",
                 "head -1 /proc/meminfo; grep -c ' /proc/meminfo .* fuse' /proc/self/mountinfo"};
    auto r = env.exec(call, {});
    return r.ok() ? r->stdout_data : r.error().message();
  };
  pid_t spare = -1;
  for (int i = 0; i < 2; ++i) {  // two runs: a spare from the second on, whatever ran before
    auto env = make_env(*ns_);
    ASSERT_TRUE(env);
    ASSERT_TRUE(env->destroy().ok());
    spare = providers::proc_views_spare_pid();
  }
  ASSERT_GT(spare, 0) << "no spare server after two runs";
  EXPECT_EQ(parent_of(spare), ::getpid());
  // Nothing of the host's environment (a token there would outlive the run that started it):
  // PATH, and the sanitizer and log settings a test build passes on.
  auto environ_text = read_file("/proc/" + std::to_string(spare) + "/environ", 1 << 16);
  ASSERT_TRUE(environ_text.ok());
  const std::set<std::string> allowed = {"PATH", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS",
                                         "SANDGATE_LOG"};
  for (std::string_view var : split(*environ_text, '\0'))
    if (!var.empty()) {
      EXPECT_TRUE(allowed.count(std::string(var.substr(0, var.find('='))))) << var;
    }
  EXPECT_NE(environ_text->find("PATH="), std::string::npos) << *environ_text;
  const std::string spare_stack = stack_at(spare);
  ASSERT_NE(spare_stack, "");

  auto env = make_env(*ns_);
  ASSERT_TRUE(env);
  const pid_t server = recorded_proc_views_server(options_.paths.state_dir, env->run_id());
  EXPECT_EQ(server, spare) << "the run's server is not the spare started ahead";
  EXPECT_EQ(providers::proc_views_spare_pid(), -1) << "a spare started beside the run's calls";
  std::string out = read_meminfo(*env);
  EXPECT_TRUE(out.starts_with("MemTotal:") && out.ends_with("\n1\n")) << out;
  ASSERT_TRUE(env->destroy().ok());
  const pid_t next = providers::proc_views_spare_pid();
  ASSERT_GT(next, 0) << "no spare for the run after";
  EXPECT_NE(next, server);
  EXPECT_NE(stack_at(next), spare_stack) << "the spare is not an exec of its own";
  EXPECT_FALSE(process_exists(server));
  EXPECT_TRUE(process_exists(next)) << "a run's destroy stopped the next run's spare";

  // A spare that died while it waited (a zombie of ours until it is dropped): the next run
  // starts a fresh server instead, and the dead one is reaped.
  ASSERT_EQ(::kill(next, SIGKILL), 0);
  auto zombie = [&] {
    auto stat = read_file("/proc/" + std::to_string(next) + "/stat", 4096);
    return stat.ok() && stat->find(") Z ") != std::string::npos;
  };
  for (int i = 0; i < 1000 && !zombie(); ++i) ::usleep(10000);
  ASSERT_TRUE(zombie()) << "the spare outlived SIGKILL";
  auto after = make_env(*ns_);
  ASSERT_TRUE(after);
  const pid_t fresh = recorded_proc_views_server(options_.paths.state_dir, after->run_id());
  EXPECT_GT(fresh, 0);
  EXPECT_NE(fresh, next);
  EXPECT_FALSE(process_exists(next)) << "the dead spare was not reaped";
  out = read_meminfo(*after);
  EXPECT_TRUE(out.starts_with("MemTotal:") && out.ends_with("\n1\n")) << out;
  ASSERT_TRUE(after->destroy().ok());
}

// A number "key=N" of sandgate-try's sysinfo line; -1 when absent.
long long sysinfo_field(const std::string& line, const std::string& key) {
  auto at = line.find(" " + key + "=");
  return at == std::string::npos ? -1 : std::atoll(line.c_str() + at + key.size() + 2);
}

// Issue 16: sysinfo(2) in the jail is answered by the run's views server with what the views
// say to the same caller (providers/sysinfo_notify.h), not by the kernel with the host's
// numbers. The run here has no cgroup of its own, so its memory is the host's (nothing limits
// the test's cgroup) and the memory total cannot tell the two apart: the uptime does (the
// run's age against the host's), and the total must be /proc/meminfo's MemTotal in the jail.
// The grant itself is SessionTest.SysinfoSaysTheCallsGrant.
TEST_F(NamespacesTest, SysinfoIsTheRunsViewNotTheKernels) {
  SANDGATE_REQUIRE_ROOT();
  struct sysinfo host {};
  ASSERT_EQ(::sysinfo(&host), 0);
  ASSERT_GT(host.uptime, 600) << "the host has been up for 10 minutes: the uptimes differ";
  providers::EnvSpec spec;
  spec.readonly_mounts.push_back({SANDGATE_TRY_BINARY, "/opt/sandgate-try"});
  auto env = make_env(*ns_, spec);
  ASSERT_TRUE(env);
  providers::Call call;
  call.argv = {"/bin/sh", "-c", "/opt/sandgate-try sysinfo; grep MemTotal: /proc/meminfo"};
  call.timeout = std::chrono::seconds(60);
  auto r = env->exec(call, {});
  ASSERT_TRUE(r.ok()) << r.error().message();
  const std::string& out = r->stdout_data;
  ASSERT_EQ(out.rfind("sysinfo ok ", 0), 0u) << out << r->stderr_data;
  const long long uptime = sysinfo_field(out, "uptime");
  EXPECT_GE(uptime, 0) << out;
  EXPECT_LT(uptime, 300) << "the run's age, not the host's " << host.uptime << " s: " << out;
  auto mem_total = out.find("MemTotal:");
  ASSERT_NE(mem_total, std::string::npos) << out;
  const long long total_kb = std::atoll(out.c_str() + mem_total + 9);
  EXPECT_EQ(sysinfo_field(out, "totalram"), total_kb * 1024) << out;
  EXPECT_GE(sysinfo_field(out, "procs"), 1) << out;
  ASSERT_TRUE(env->destroy().ok());
}

// With its answerer gone, a call's sysinfo(2) fails (ENOSYS from the kernel) instead of
// waiting for good; and a call that would start with nobody to answer it does not start.
TEST_F(NamespacesTest, SysinfoWithTheViewsServerGoneIsAnErrorNotAHang) {
  SANDGATE_REQUIRE_ROOT();
  providers::EnvSpec spec;
  spec.readonly_mounts.push_back({SANDGATE_TRY_BINARY, "/opt/sandgate-try"});
  auto env = make_env(*ns_, spec);
  ASSERT_TRUE(env);
  const pid_t server = recorded_proc_views_server(options_.paths.state_dir, env->run_id());
  ASSERT_GT(server, 0) << "no views server in run " << env->run_id() << "'s record";
  const std::string ws = env->workspace_host_path();
  // A call that starts with its listener sent, then waits for the file "go" to call sysinfo.
  Result<ExecResult> waiting = logic_error("exec", "not run");
  std::thread t([&] {
    providers::Call call;
    call.argv = {"/bin/sh", "-c",
                 "touch /workspace/started; exec /opt/sandgate-try sysinfo /workspace/go"};
    call.timeout = std::chrono::seconds(120);
    waiting = env->exec(call, {});
  });
  for (int i = 0; i < 3000 && ::access((ws + "/started").c_str(), F_OK) != 0; ++i) ::usleep(20000);
  ASSERT_EQ(::access((ws + "/started").c_str(), F_OK), 0) << "the call did not start in 60 s";
  ASSERT_EQ(::kill(server, SIGKILL), 0);
  ::waitpid(server, nullptr, 0);  // the test process launched it: ours to reap
  std::ofstream(ws + "/go").flush();
  t.join();
  ASSERT_TRUE(waiting.ok()) << waiting.error().message();
  EXPECT_EQ(waiting->stdout_data, "sysinfo ENOSYS\n") << waiting->stderr_data;
  EXPECT_EQ(waiting->status.shell_code(), 1);
  // A new call: its child cannot hand its listener to anyone, so it does not start.
  providers::Call next;
  next.argv = {"/opt/sandgate-try", "sysinfo"};
  next.timeout = std::chrono::seconds(60);
  auto r = env->exec(next, {});
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_TRUE(r->start_failure.has_value()) << r->stdout_data;
  EXPECT_EQ(r->start_failure->step, "send the sysinfo listener");
  EXPECT_EQ(r->stdout_data, "");
  ASSERT_TRUE(env->destroy().ok());
}

// Two more /proc files that move with every tenant's activity: /proc/vmstat is the run's view
// (its own faults; the host-wide counters 0), /proc/interrupts and /proc/softirqs are empty.
// Their twin: the host's own, read here, has the counts the call must not see. This run has
// no cgroup of its own, so the view follows the reader's: the cgroup this test runs in, whose
// count is read before and after the call to bracket the view's (under ctest that cgroup has
// counted every test's faults, at times most of the host's: a fixed fraction of the host's
// count was no bound).
TEST_F(NamespacesTest, ACallSeesItsOwnVmstatAndNoInterrupts) {
  SANDGATE_REQUIRE_ROOT();
  auto host_vmstat = read_file("/proc/vmstat", 1 << 16);
  ASSERT_TRUE(host_vmstat.ok());
  auto host_value = [&](const std::string& text, const std::string& key) -> long long {
    auto at = text.find("\n" + key + " ");
    if (text.rfind(key + " ", 0) == 0)
      at = 0;
    else if (at != std::string::npos)
      ++at;
    return at == std::string::npos ? -1 : std::atoll(text.c_str() + at + key.size() + 1);
  };
  const long long host_faults = host_value(*host_vmstat, "pgfault");
  ASSERT_GT(host_faults, 0) << "natively /proc/vmstat counts the host's faults";
  auto host_interrupts = read_file("/proc/interrupts", 1 << 20);
  ASSERT_TRUE(host_interrupts.ok() && !host_interrupts->empty()) << "natively it lists the CPUs";
  bool own_memory_cgroup_is_root = false;
  const std::string own_memory_cgroup = memory_cgroup_of_self(&own_memory_cgroup_is_root);
  ASSERT_FALSE(own_memory_cgroup.empty()) << "no memory cgroup in /proc/self/cgroup";
  auto own_faults = [&]() -> long long {
    auto m = providers::read_memory(own_memory_cgroup);
    if (!m.ok() || !m->events.count("pgfault")) return -1;
    return static_cast<long long>(m->events.at("pgfault"));
  };
  const long long own_before = own_faults();
  ASSERT_GE(own_before, 0) << own_memory_cgroup << " counts no pgfault";
  auto env = make_env(*ns_);
  ASSERT_TRUE(env);
  providers::Call call;
  call.argv = {"/bin/sh", "-c",
               "cat /proc/vmstat; echo interrupts $(wc -c < /proc/interrupts); "
               "echo softirqs $(wc -c < /proc/softirqs); grep -c ' /proc/vmstat .* "
               "fuse.sandgate-proc-views ' /proc/self/mountinfo"};
  auto r = env->exec(call, {});
  ASSERT_TRUE(r.ok()) << r.error().message();
  const std::string& out = r->stdout_data;
  EXPECT_NE(out.find("\ninterrupts 0\nsoftirqs 0\n1\n"), std::string::npos) << out;
  const long long faults = host_value(out, "pgfault");
  EXPECT_GE(faults, 0) << out;
  const long long own_after = own_faults();
  EXPECT_GE(faults, own_before) << own_memory_cgroup;
  EXPECT_LE(faults, own_after) << own_memory_cgroup;
  auto host_after = read_file("/proc/vmstat", 1 << 16);
  ASSERT_TRUE(host_after.ok());
  if (!own_memory_cgroup_is_root) {  // in the root, the reader's count is the host's
    EXPECT_LT(faults, host_value(*host_after, "pgfault")) << "the run's own faults, not the host's";
  }
  for (const char* host_only : {"numa_hit", "pgalloc_normal", "nr_dirty_threshold"}) {
    if (host_value(*host_vmstat, host_only) <= 0) continue;
    EXPECT_EQ(host_value(out, host_only), 0) << host_only << ": " << out;
  }
  ASSERT_TRUE(env->destroy().ok());
}

// A command that cannot be started is the call's outcome (a shell's 127 / 126, with the step
// and errno), not an error of the provider's.
TEST_F(NamespacesTest, MissingCommandIsAStartFailureWithAShellsStatus) {
  SANDGATE_REQUIRE_ROOT();
  auto env = make_env(*ns_);
  ASSERT_TRUE(env);
  providers::Call call;
  call.argv = {"no-such-tool"};
  auto r = env->exec(call, {});
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_TRUE(r->start_failure.has_value());
  EXPECT_EQ(r->start_failure->err, ENOENT);
  EXPECT_EQ(r->start_failure->step, "execve");
  EXPECT_EQ(r->status.shell_code(), 127);
  // Not executable: 126. /etc/hostname exists but has no execute bit.
  call.argv = {"/etc/hostname"};
  r = env->exec(call, {});
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_TRUE(r->start_failure.has_value());
  EXPECT_EQ(r->start_failure->err, EACCES);
  EXPECT_EQ(r->status.shell_code(), 126);
  // A step before exec (a working directory that does not exist) names itself: 126.
  call.argv = {"true"};
  call.cwd = "/no/such/dir";
  r = env->exec(call, {});
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_TRUE(r->start_failure.has_value());
  EXPECT_EQ(r->start_failure->step, "chdir");
  EXPECT_EQ(r->status.shell_code(), 126);
  EXPECT_EQ(r->start_failure->describe(), "chdir: No such file or directory (ENOENT)");
  // The environment is still usable afterwards.
  EXPECT_EQ(sh(*env, "echo fine").stdout_data, "fine\n");
}

// A call's process searches the call's own PATH as execvp does (call_child.cc): an entry
// whose file is not executable is passed over for a later one (EACCES only if none is), an
// empty entry is the working directory, and a file exec refuses as no executable format (a
// script without #!) runs under /bin/sh.
TEST_F(NamespacesTest, CommandsAreSoughtOnTheCallsPathAndScriptsWithoutAnInterpreterRunInSh) {
  SANDGATE_REQUIRE_ROOT();
  auto env = make_env(*ns_);
  ASSERT_TRUE(env);
  ASSERT_EQ(sh(*env,
               "mkdir -p /workspace/a /workspace/b && "
               "printf 'echo a-tool' > /workspace/a/tool && "
               "printf 'echo \"b-tool $*\"' > /workspace/b/tool && chmod +x /workspace/b/tool")
                .status.code,
            0);
  auto call = [&](std::vector<std::string> argv, std::string path) {
    providers::Call c;
    c.argv = std::move(argv);
    c.env = {"PATH=" + path};
    c.cwd = "/workspace/b";
    auto r = env->exec(c, {});
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.ok() ? std::move(r).value() : ExecResult{};
  };
  auto r = call({"tool", "x", "y"}, "/no/such:/workspace/a:/workspace/b");
  EXPECT_EQ(r.stdout_data, "b-tool x y\n") << "a's tool is not executable; b's is a script";
  EXPECT_FALSE(r.start_failure.has_value());
  r = call({"tool"}, "/workspace/a");
  ASSERT_TRUE(r.start_failure.has_value());
  EXPECT_EQ(r.start_failure->err, EACCES);
  EXPECT_EQ(r.status.shell_code(), 126);
  r = call({"tool", "here"}, "/no/such:");  // the empty entry: the working directory
  EXPECT_EQ(r.stdout_data, "b-tool here\n");
  r = call({"/workspace/b/tool", "direct"}, "/no/such");
  EXPECT_EQ(r.stdout_data, "b-tool direct\n");
  r = call({"tool"}, "/no/such:/neither");
  ASSERT_TRUE(r.start_failure.has_value());
  EXPECT_EQ(r.start_failure->err, ENOENT);
}

// A call's process raises its own oom_score_adj before it starts, and the supervisor keeps
// its own: the kernel keeps one value for processes that share memory (a CLONE_VM child that is
// not a vfork child), so a call started that way would raise the supervisor's too, and the OOM
// killer would take the run with a call. Both ways a call's process starts: forked and held
// for the host (on_started), and sharing the supervisor's memory until its exec (call_child.h),
// where the call reads both values itself (the supervisor is the jail's pid 1).
TEST_F(NamespacesTest, ACallsOomScoreIsItsOwnAndNotTheSupervisors) {
  SANDGATE_REQUIRE_ROOT();
  auto env = make_env(*ns_);
  ASSERT_TRUE(env);
  auto read_value = [](const std::string& path) {
    std::ifstream in(path);
    std::string key, line;
    long value = -100000;
    if (path.ends_with("/status")) {
      while (in >> key)
        if (key == "PPid:" && in >> value) break;
    } else {
      in >> value;
    }
    return value;
  };
  pid_t supervisor = 0;
  long call_adj = 0;
  providers::Call call;
  call.argv = {"true"};
  // Held before its exec: its value is written, its parent is the supervisor.
  call.on_started = [&](pid_t pid) {
    const std::string proc = "/proc/" + std::to_string(pid);
    supervisor = static_cast<pid_t>(read_value(proc + "/status"));
    call_adj = read_value(proc + "/oom_score_adj");
  };
  ASSERT_TRUE(env->exec(call, {}).ok());
  ASSERT_GT(supervisor, 0);
  EXPECT_EQ(call_adj, 1000);
  EXPECT_LT(read_value("/proc/" + std::to_string(supervisor) + "/oom_score_adj"), 1000);

  auto r =
      env->exec(providers::Call{{"cat", "/proc/self/oom_score_adj", "/proc/1/oom_score_adj"}}, {});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->stdout_data, "1000\n0\n") << r->stderr_data;
  EXPECT_EQ(read_value("/proc/" + std::to_string(supervisor) + "/oom_score_adj"), 0);
}

// A call that needs no placement starts in a process sharing the supervisor's memory until it
// execs (call_child.h), on the one stack the supervisor keeps for such calls: a hundred calls
// later the supervisor is no bigger (a stack mapped per call and kept would be 12.5 MiB more).
TEST_F(NamespacesTest, TheSupervisorStaysItsSizeOverAHundredCalls) {
  SANDGATE_REQUIRE_ROOT();
  auto env = make_env(*ns_);
  ASSERT_TRUE(env);
  auto status_field = [](pid_t pid, const std::string& name) {
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    std::string key;
    long value = -1;
    while (status >> key)
      if (key == name + ":" && status >> value) break;
    return value;
  };
  pid_t supervisor = 0;
  providers::Call first;
  first.argv = {"true"};
  // Held before its exec: its parent is the supervisor.
  first.on_started = [&](pid_t pid) { supervisor = static_cast<pid_t>(status_field(pid, "PPid")); };
  ASSERT_TRUE(env->exec(first, {}).ok());
  ASSERT_GT(supervisor, 0);
  // One call of the kind measured first: the supervisor's stack for it is mapped by then.
  ASSERT_TRUE(env->exec(providers::Call{{"true"}}, {}).ok());
  const long before = status_field(supervisor, "VmSize");
  ASSERT_GT(before, 0);
  for (int i = 0; i < 100; ++i) {
    auto r = env->exec(providers::Call{{"true"}}, {});
    ASSERT_TRUE(r.ok()) << r.error().message();
    ASSERT_EQ(r->status.shell_code(), 0);
  }
  // The sanitizer build's allocator maps its own chunks as it goes: a margin for it.
  EXPECT_LT(status_field(supervisor, "VmSize") - before, 4096) << "KiB more after 100 calls";
}

TEST_F(NamespacesTest, RunTimeoutEndsTheRun) {
  SANDGATE_REQUIRE_ROOT();
  providers::EnvSpec spec;
  spec.timeout = std::chrono::milliseconds(300);
  auto env = make_env(*ns_, spec);
  ASSERT_TRUE(env);
  auto r = run(*env, {"sleep", "30"});
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(r.wall, std::chrono::seconds(3));
  auto after = env->exec(providers::Call{{"true"}}, {});
  ASSERT_FALSE(after.ok());
  EXPECT_NE(after.error().message().find("timeout has expired"), std::string::npos);
}

TEST_F(NamespacesTest, CallTimeoutKillsOnlyTheCall) {
  SANDGATE_REQUIRE_ROOT();
  auto env = make_env(*ns_);
  ASSERT_TRUE(env);
  providers::Call call;
  call.argv = {"sleep", "30"};
  call.timeout = std::chrono::milliseconds(200);
  auto r = env->exec(call, {});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->status.signal, SIGKILL);
  EXPECT_EQ(sh(*env, "echo alive").stdout_data, "alive\n");
}

TEST_F(NamespacesTest, ConcurrentRunsDoNotSeeEachOther) {
  SANDGATE_REQUIRE_ROOT();
  auto a = make_env(*ns_);
  auto b = make_env(*ns_);
  ASSERT_TRUE(a && b);
  sh(*a, "echo a > /tmp/a-marker; echo a > /dev/shm/a-marker; sleep 30 >/dev/null 2>&1 &");
  auto r = sh(*b, "ls /tmp /dev/shm; ps -e -o comm= | grep -c sleep; echo $SANDGATE_RUN_ID");
  EXPECT_EQ(r.stdout_data.find("a-marker"), std::string::npos) << r.stdout_data;
  EXPECT_NE(r.stdout_data.find("\n0\n" + b->run_id()), std::string::npos) << r.stdout_data;
  EXPECT_NE(a->run_id(), b->run_id());
}

TEST_F(NamespacesTest, ProcShowsOnlyTheRun) {
  SANDGATE_REQUIRE_ROOT();
  auto env = make_env(*ns_);
  ASSERT_TRUE(env);
  // pid 1 (the supervisor), the shell and ps: nothing of the host.
  auto r = sh(*env, "ps -e -o pid=,comm=; hostname");
  EXPECT_TRUE(r.stdout_data.starts_with("      1 ")) << r.stdout_data;
  EXPECT_TRUE(r.stdout_data.ends_with("\n      2 sh\n      3 ps\nsandgate\n")) << r.stdout_data;
  EXPECT_EQ(std::count(r.stdout_data.begin(), r.stdout_data.end(), '\n'), 4) << r.stdout_data;
}

TEST_F(NamespacesTest, CallsAreParkedUntilPlacedInTheirCgroup) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_TEST_CGROUP(cg, "sandgate-test");
  auto env = make_env(*ns_);
  ASSERT_TRUE(env);
  providers::Call call;
  call.argv = {"cat", "/proc/self/cgroup"};
  auto r = env->exec(call, Placement{{cg}});
  ASSERT_TRUE(r.ok()) << r.error().message();
  // Its first instruction already ran in the cgroup (the path is as the run's cgroup
  // namespace shows it, so only its last component is checked).
  EXPECT_NE(r->stdout_data.find("sandgate-test-" + std::to_string(::getpid()) + "\n"),
            std::string::npos)
      << r->stdout_data;
  // A placement that cannot be written is an error, and the parked call does not run.
  call.argv = {"sh", "-c", "touch /workspace/ran"};
  auto bad = env->exec(call, Placement{{cg + "/missing"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("place call in its cgroup"), std::string::npos);
  EXPECT_NE(::access((env->workspace_host_path() + "/ran").c_str(), F_OK), 0);
  ASSERT_TRUE(env->destroy().ok());
}

// The next call's process, parked ahead (Environment::park) and put in the call's cgroup by
// the host before the call: the call starts in it and nothing is written on its path (the
// placement's directory here does not even exist). A parked process that died, or a call whose
// placement does not name it, starts as before, placed by the provider.
TEST_F(NamespacesTest, AParkedProcessPlacedAheadIsTheCallsAndNeedsNoPlacementWrite) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_TEST_CGROUP(cg, "sandgate-test-park");
  const std::string shown = "sandgate-test-park-" + std::to_string(::getpid()) + "\n";
  auto env = make_env(*ns_);
  ASSERT_TRUE(env);
  auto parked = env->park();
  ASSERT_TRUE(parked.ok()) << parked.error().message();
  ASSERT_GT(*parked, 0);
  auto again = env->park();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *parked) << "one parked process at a time";
  // What the controller's reaper does off the call's path.
  ASSERT_TRUE(write_file(cg + "/cgroup.procs", std::to_string(*parked)).ok());

  providers::Call call;
  // The next call's process is parked while this one runs, and its "parked" may come after a
  // call as short as `cat` has exited (then the next call simply forks: parking is best effort).
  // A second of sleep gives it ample time, so that the test sees the parked process.
  call.argv = {"sh", "-c", "cat /proc/self/cgroup; sleep 1"};
  call.park_next = true;
  pid_t started = 0;
  call.on_started = [&](pid_t pid) { started = pid; };
  auto r = env->exec(call, Placement{{cg + "/missing"}, *parked});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->host_pid, *parked);
  EXPECT_EQ(started, *parked);
  EXPECT_NE(r->stdout_data.find(shown), std::string::npos) << r->stdout_data;
  ASSERT_GT(r->parked_next_pid, 0) << "park_next parks the next call's process";
  EXPECT_NE(r->parked_next_pid, *parked);
  EXPECT_EQ(::kill(r->parked_next_pid, 0), 0) << "the next one waits, parked";

  // Died parked: the call forks as before and is placed by the provider.
  const pid_t dead = r->parked_next_pid;
  ASSERT_EQ(::kill(dead, SIGKILL), 0);  // this test's own run's process, by its recorded pid
  eventually([&] { return ::kill(dead, 0) != 0; });  // reaped by the supervisor
  call.park_next = false;
  auto after = env->exec(call, Placement{{cg}, dead});
  ASSERT_TRUE(after.ok()) << after.error().message();
  EXPECT_NE(after->host_pid, dead);
  EXPECT_NE(after->stdout_data.find(shown), std::string::npos) << after->stdout_data;
  EXPECT_EQ(after->parked_next_pid, 0);

  // A placement that does not name the parked process (a resident process, or a call that
  // came before the process was placed) leaves it parked for the next one.
  auto third = env->park();
  ASSERT_TRUE(third.ok()) << third.error().message();
  auto unnamed = env->exec(call, Placement{{cg}});
  ASSERT_TRUE(unnamed.ok()) << unnamed.error().message();
  EXPECT_NE(unnamed->host_pid, *third);
  auto still = env->park();
  ASSERT_TRUE(still.ok());
  EXPECT_EQ(*still, *third);
  ASSERT_TRUE(env->destroy().ok());
  EXPECT_NE(::kill(*third, 0), 0) << "a parked process outlived its run";
}

// A process parked while no call runs restricts itself at once (sandbox user, no capabilities,
// no_new_privs, Landlock, the seccomp programs), off the next call's path; the call that then
// starts in it is restricted exactly as one the supervisor forks for it.
TEST_F(NamespacesTest, AParkedProcessIsRestrictedAheadAndItsCallAsAForkedOne) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_TEST_CGROUP(cg, "sandgate-test-prepared");
  auto env = make_env(*ns_);
  ASSERT_TRUE(env);
  // The lines of /proc/PID/status that say what a process may do.
  auto restrictions = [](const std::string& status) {
    std::string kept;
    for (const auto& line : split(status, '\n'))
      for (const char* key : {"Uid:", "Gid:", "Groups:", "CapInh:", "CapPrm:", "CapEff:", "CapBnd:",
                              "CapAmb:", "NoNewPrivs:", "Seccomp:", "Seccomp_filters:"})
        if (line.rfind(key, 0) == 0) kept += std::string(line) + "\n";
    return kept;
  };
  auto parked = env->park();
  ASSERT_TRUE(parked.ok()) << parked.error().message();
  const std::string status_path = "/proc/" + std::to_string(*parked) + "/status";
  std::string seen;
  std::string gone;  // why its status could not be read
  eventually([&] {   // it is told at once, and needs about 1 ms
    auto status = read_file(status_path, 1 << 16);
    if (!status.ok()) gone = status.error().message();
    seen = status.ok() ? restrictions(*status) : "";
    return !gone.empty() || seen.find("Seccomp:\t2") != std::string::npos;
  });
  ASSERT_EQ(gone, "") << "the parked process went away";
  EXPECT_NE(seen.find("Seccomp:\t2"), std::string::npos) << "not restricted while parked:\n"
                                                         << seen;
  EXPECT_NE(seen.find("NoNewPrivs:\t1"), std::string::npos) << seen;
  EXPECT_NE(seen.find("CapEff:\t0000000000000000"), std::string::npos) << seen;
  EXPECT_NE(seen.find("CapBnd:\t0000000000000000"), std::string::npos) << seen;
  EXPECT_EQ(seen.find("Uid:\t0\t"), std::string::npos) << "still root:\n" << seen;

  ASSERT_TRUE(write_file(cg + "/cgroup.procs", std::to_string(*parked)).ok());
  providers::Call call;
  call.argv = {"cat", "/proc/self/status"};
  auto in_parked = env->exec(call, Placement{{cg + "/missing"}, *parked});
  ASSERT_TRUE(in_parked.ok()) << in_parked.error().message();
  EXPECT_EQ(in_parked->host_pid, *parked);
  auto forked = env->exec(call, Placement{{cg}});
  ASSERT_TRUE(forked.ok()) << forked.error().message();
  EXPECT_NE(forked->host_pid, *parked);
  const std::string a = restrictions(in_parked->stdout_data), b = restrictions(forked->stdout_data);
  EXPECT_NE(a.find("Seccomp:\t2"), std::string::npos) << a;
  EXPECT_EQ(a, b) << "a call in the parked process is restricted otherwise than a forked one";
  ASSERT_TRUE(env->destroy().ok());
}

// Nothing to look at before it execs (no on_started): the host does not send "go", the
// supervisor releases the call in the process placed ahead (go_if_parked). Were it to wait for
// a "go" anyway, the call would hang until its timeout.
TEST_F(NamespacesTest, ACallPlacedAheadWithNothingWaitingIsReleasedByTheSupervisor) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_TEST_CGROUP(cg, "sandgate-test-goparked");
  auto env = make_env(*ns_);
  ASSERT_TRUE(env);
  auto parked = env->park();
  ASSERT_TRUE(parked.ok()) << parked.error().message();
  ASSERT_TRUE(write_file(cg + "/cgroup.procs", std::to_string(*parked)).ok());

  providers::Call call;
  call.argv = {"cat", "/proc/self/cgroup"};
  call.timeout = std::chrono::seconds(20);
  // A directory that does not exist: a placement write would fail the call.
  auto r = env->exec(call, Placement{{cg + "/missing"}, *parked});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_FALSE(r->timed_out) << "the parked call waited for a go that never came";
  EXPECT_EQ(r->host_pid, *parked);
  EXPECT_TRUE(r->status.exited && r->status.code == 0) << r->stderr_data;
  EXPECT_NE(r->stdout_data.find("sandgate-test-goparked-" + std::to_string(::getpid()) + "\n"),
            std::string::npos)
      << r->stdout_data;
  ASSERT_TRUE(env->destroy().ok());
}

// A call's stdin is /dev/null unless the caller gives a descriptor (Call::stdin_fd), which the
// call then reads: in a process forked for it, and in one parked ahead; host_dir the same.
TEST_F(NamespacesTest, CallReadsTheStdinItIsGivenElseNothing) {
  SANDGATE_REQUIRE_ROOT();
  for (const char* name : {"namespaces", "host_dir"}) {
    SCOPED_TRACE(name);
    auto p = provider(name);
    ASSERT_TRUE(p);
    auto env = make_env(*p);
    ASSERT_TRUE(env);
    providers::Call call;
    call.argv = {"sh", "-c", "echo \"[$(cat)]\""};
    auto none = env->exec(call, {});
    ASSERT_TRUE(none.ok()) << none.error().message();
    EXPECT_EQ(none->stdout_data, "[]\n") << none->stderr_data;
    auto given = [&](const std::string& text, const Placement& placement) {
      Pipe in = make_pipe(O_CLOEXEC).value();
      EXPECT_TRUE(write_all(in.write.get(), text).ok());
      in.write.reset();  // EOF after the text
      call.stdin_fd = in.read.get();
      auto r = env->exec(call, placement);
      EXPECT_TRUE(r.ok()) << r.error().message();
      return r.ok() ? *r : ExecResult{};
    };
    EXPECT_EQ(given("from the host", {}).stdout_data, "[from the host]\n");
    auto parked = env->park();
    ASSERT_TRUE(parked.ok()) << parked.error().message();
    if (*parked > 0) {
      auto r = given("to the parked one", Placement{{}, *parked});
      EXPECT_EQ(r.host_pid, *parked);
      EXPECT_EQ(r.stdout_data, "[to the parked one]\n");
    }
    ASSERT_TRUE(env->destroy().ok());
  }
}

TEST_F(NamespacesTest, SupervisorIsPlacedAndTheCgroupNamespaceRootedThere) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_TEST_CGROUP(cg, "sandgate-test-main");
  providers::EnvSpec spec;
  spec.placement = {{cg}};
  auto env = make_env(*ns_, spec);
  ASSERT_TRUE(env);
  auto* supervised = dynamic_cast<providers::SupervisedEnvironment*>(env.get());
  ASSERT_NE(supervised, nullptr);
  auto procs = read_file(cg + "/cgroup.procs");
  ASSERT_TRUE(procs.ok());
  EXPECT_NE(procs->find(std::to_string(supervised->supervisor_pid()) + "\n"), std::string::npos)
      << *procs;
  // Inside, the run's cgroup is the root of its cgroup namespace: no host path shows.
  EXPECT_EQ(sh(*env, "grep '^0::' /proc/1/cgroup").stdout_data, "0::/\n");
  ASSERT_TRUE(env->destroy().ok());
}

TEST_F(NamespacesTest, DestroyIsIdempotentAndExecAfterItFails) {
  SANDGATE_REQUIRE_ROOT();
  auto env = make_env(*ns_);
  ASSERT_TRUE(env);
  std::string run_dir = options_.paths.work_dir + "/" + env->run_id();
  EXPECT_EQ(::access(run_dir.c_str(), F_OK), 0);
  ASSERT_TRUE(env->destroy().ok());
  ASSERT_TRUE(env->destroy().ok());
  EXPECT_NE(::access(run_dir.c_str(), F_OK), 0);
  EXPECT_FALSE(env->exec(providers::Call{{"true"}}, {}).ok());
}

TEST_F(NamespacesTest, StreamsOutputAsItArrives) {
  SANDGATE_REQUIRE_ROOT();
  auto env = make_env(*ns_);
  ASSERT_TRUE(env);
  std::string streamed;
  providers::Call call;
  call.argv = {"sh", "-c", "echo one; echo two >&2"};
  call.on_output = [&](int stream, std::string_view d) {
    streamed += std::to_string(stream) + std::string(d);
  };
  auto r = env->exec(call, {});
  ASSERT_TRUE(r.ok());
  EXPECT_NE(streamed.find("1one\n"), std::string::npos);
  EXPECT_NE(streamed.find("2two\n"), std::string::npos);
}

TEST_F(NamespacesTest, CaptureLimitNeverSplitsACharacter) {
  SANDGATE_REQUIRE_ROOT();
  auto env = make_env(*ns_);
  ASSERT_TRUE(env);
  providers::Call call;
  // "ab" then a two-byte "é" and a four-byte emoji: limits 3 and 8 fall inside them.
  call.argv = {"printf", "ab\\303\\251cd\\360\\237\\230\\200"};
  for (auto [limit, kept] : {std::pair<size_t, std::string>{3, "ab"},
                             {4, "ab\xC3\xA9"},
                             {8,
                              "ab\xC3\xA9"
                              "cd"},
                             {10,
                              "ab\xC3\xA9"
                              "cd\xF0\x9F\x98\x80"}}) {
    call.output_limit = limit;
    auto r = env->exec(call, {});
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ(r->stdout_data, kept) << "limit " << limit;
    EXPECT_EQ(r->stdout_bytes, 10u);
    EXPECT_EQ(r->stdout_truncated, limit < 10) << "limit " << limit;
  }
}

// A process's limit as the kernel holds it, "soft hard", read from the host with prlimit(2).
std::string host_limit(pid_t pid, int resource) {
  auto l = read_rlimit(pid, resource);
  if (!l.ok()) return "unreadable: " + l.error().message();
  return std::to_string(l->first) + " " + std::to_string(l->second);
}

// Both providers that run calls through the supervisor (host_dir too) apply a call's rlimits
// before it execs, soft and hard, where the host can read them back.
void expect_rlimits_hold(providers::Environment& env, const std::string& try_binary) {
  providers::Call call;
  call.argv = {try_binary, "fds", "200"};
  call.rlimits.open_files = 64;
  std::string seen;
  // on_started parks the call before exec (with or without a placement): it cannot have exited.
  call.on_started = [&](pid_t pid) { seen = host_limit(pid, RLIMIT_NOFILE); };
  auto r = env.exec(call, {});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(seen, "64 64");
  // 0, 1 and 2 are open at exec and nothing else: fds 3..63 and then EMFILE.
  EXPECT_EQ(r->stdout_data, "fds opened 61 EMFILE\n") << r->stderr_data;

  call.argv = {try_binary, "fsize", "2048"};  // 2MiB into the working directory
  call.rlimits = {};
  call.rlimits.file_size = MiB(1).value;
  call.on_started = [&](pid_t pid) { seen = host_limit(pid, RLIMIT_FSIZE); };
  r = env.exec(call, {});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(seen, "1048576 1048576");
  EXPECT_EQ(r->stdout_data, "fsize wrote 1048576 EFBIG\n") << r->stderr_data;

  // The call cannot raise them back: the hard limit is the granted value too.
  call.argv = {"sh", "-c", "ulimit -n 65 2>/dev/null && echo raised || echo refused"};
  call.rlimits = {};
  call.rlimits.open_files = 64;
  call.on_started = nullptr;
  r = env.exec(call, {});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->stdout_data, "refused\n");

  // The positive twins: without the limits the same calls go all the way.
  call.rlimits = {};
  call.argv = {try_binary, "fds", "200"};
  r = env.exec(call, {});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->stdout_data, "fds opened 200 ok\n");
  call.argv = {try_binary, "fsize", "2048"};
  r = env.exec(call, {});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->stdout_data, "fsize wrote 2097152 ok\n");
}

TEST_F(NamespacesTest, CallRlimitsHoldAndAreReadableFromTheHost) {
  SANDGATE_REQUIRE_ROOT();
  providers::EnvSpec spec;
  spec.readonly_mounts.push_back({SANDGATE_TRY_BINARY, "/opt/sandgate-try"});
  auto env = make_env(*ns_, spec);
  ASSERT_TRUE(env);
  expect_rlimits_hold(*env, "/opt/sandgate-try");
}

TEST_F(NamespacesTest, HostDirAppliesCallRlimitsToo) {
  SANDGATE_REQUIRE_ROOT();
  auto host = provider("host_dir");
  ASSERT_TRUE(host);
  auto env = make_env(*host);
  ASSERT_TRUE(env);
  expect_rlimits_hold(*env, SANDGATE_TRY_BINARY);
}

pid_t supervisor_of(providers::Environment& env) {
  return dynamic_cast<providers::SupervisedEnvironment&>(env).supervisor_pid();
}

// Two runs at once: two host id ranges from the pool, each held by a lock the run's record
// names, each user namespace owned by its run's first id (so the kernel's per-user counts are
// the run's own); destroy gives the range back.
TEST_F(NamespacesTest, EachRunHasItsOwnHostIdsAndOwnsItsUserNamespace) {
  SANDGATE_REQUIRE_ROOT();
  auto a = make_env(*ns_);
  auto b = make_env(*ns_);
  ASSERT_TRUE(a && b);
  uid_t base_a = a->host_id_base(), base_b = b->host_id_base();
  EXPECT_NE(base_a, base_b);
  for (uid_t base : {base_a, base_b}) {
    EXPECT_GE(base, options_.id_pool.first);
    EXPECT_EQ((base - options_.id_pool.first) % kIdRangeSize, 0u);
    EXPECT_EQ(::access((options_.paths.id_range_dir + "/" + std::to_string(base) + ".lock").c_str(),
                       F_OK),
              0);
  }
  EXPECT_EQ(userns_owner(supervisor_of(*a)), static_cast<long>(base_a));
  EXPECT_EQ(userns_owner(supervisor_of(*b)), static_cast<long>(base_b));
  EXPECT_EQ(sh(*a, "cat /proc/self/uid_map | tr -s ' '").stdout_data,
            " 0 " + std::to_string(base_a) + " 65536\n");
  // From the host, the call's files belong to its own range.
  sh(*b, "touch /workspace/f");
  struct stat st;
  ASSERT_EQ(::stat((b->workspace_host_path() + "/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, base_b + 10001);
  // The record names the range; destroy releases it, and the next run may take it again.
  auto record = read_file(options_.paths.state_dir + "/runs/" + a->run_id() + ".json");
  ASSERT_TRUE(record.ok());
  EXPECT_NE(record->find("\"id_range\""), std::string::npos) << *record;
  ASSERT_TRUE(a->destroy().ok());
  EXPECT_NE(::access((options_.paths.id_range_dir + "/" + std::to_string(base_a) + ".lock").c_str(),
                     F_OK),
            0);
  ASSERT_TRUE(b->destroy().ok());
}

// The negative twin, the test-only shared_uid weakening: the fixed id_map_base for every run,
// and the user namespace owned by host root (as before per-run ranges).
TEST_F(NamespacesTest, SharedUidWeakeningKeepsTheOldSharedIds) {
  SANDGATE_REQUIRE_ROOT();
  auto options = options_;
  options.self_test_weakenings = true;
  auto weak = registry_.create("namespaces", options);
  ASSERT_TRUE(weak.ok()) << weak.error().message();
  providers::EnvSpec spec;
  spec.weakenings = {providers::Weakening::kSharedUid};
  auto a = (*weak)->create(spec);
  auto b = (*weak)->create(spec);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->host_id_base(), options_.id_map_base);
  EXPECT_EQ((*b)->host_id_base(), options_.id_map_base);
  EXPECT_EQ(userns_owner(supervisor_of(**a)), 0);
  EXPECT_THAT(id_range_locks_of(options_.paths), ::testing::IsEmpty()) << "no range is taken";
  EXPECT_TRUE((*a)->destroy().ok());
  EXPECT_TRUE((*b)->destroy().ok());
}

// The workspace on a filesystem of its own (EnvSpec::workspace_size).

// Every loop device's backing file (/sys/block/loop*/loop/backing_file), attached ones only.
std::vector<std::string> loop_backing_files() {
  std::vector<std::string> out;
  DIR* d = ::opendir("/sys/block");
  if (d == nullptr) return out;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind("loop", 0) != 0) continue;
    auto f = read_file("/sys/block/" + n + "/loop/backing_file");
    if (f.ok()) out.push_back(n + " " + *f);
  }
  ::closedir(d);
  return out;
}

// Loop devices still backed by something under `dir`, waiting a bounded time for autoclear
// (the kernel detaches a device at its last close, which may trail the unmount a little).
std::vector<std::string> loops_under(const std::string& dir) {
  std::vector<std::string> left;
  eventually([&] {
    left.clear();
    for (const auto& l : loop_backing_files())
      if (l.find(dir) != std::string::npos) left.push_back(l);
    return left.empty();
  });
  return left;
}

class WorkspaceFilesystemTest : public NamespacesTest {
 protected:
  // The workspace's line in the run's /proc/self/mountinfo (the last mount at /workspace).
  std::string workspace_mount_line(providers::Environment& env) {
    return sh(env, "awk '$5 == \"/workspace\"' /proc/self/mountinfo | tail -n 1").stdout_data;
  }
  std::string recipe() {
    std::string recipe = tmp_ + "/recipe";
    EXPECT_TRUE(make_dirs(recipe + "/src").ok());
    std::ofstream(recipe + "/src/main.c") << "int main(){return 0;}\n";
    return recipe;
  }
};

// The positive twin first: a bind (or an overlay) of a host directory names that directory in
// the run's mountinfo, so the check below could fail. With a filesystem of its own the line
// shows the loop device's ext4 at "/", for every way the recipe becomes the workspace, and the
// run contract holds: the recipe is there, owned by the sandbox user, and what the run writes
// is in workspace_host_path() (where exports read it) but never in the recipe.
TEST_F(WorkspaceFilesystemTest, MountinfoNamesNoHostPathInEveryRecipeMode) {
  SANDGATE_REQUIRE_ROOT();
  {
    auto env = make_env(*ns_);
    ASSERT_TRUE(env);
    std::string line = workspace_mount_line(*env);
    EXPECT_NE(line.find(options_.paths.work_dir), std::string::npos)
        << "a bind no longer names its host path: this test proves nothing: " << line;
  }
  std::string rec = recipe();
  struct Case {
    std::string recipe;
    providers::RecipeMode mode;
    std::string kind;
  };
  for (const Case& c : {Case{"", providers::RecipeMode::kAuto, "empty"},
                        Case{rec, providers::RecipeMode::kOverlay, "overlay"},
                        Case{rec, providers::RecipeMode::kCopy, "copy"}}) {
    SCOPED_TRACE(c.kind);
    providers::EnvSpec spec;
    spec.workspace_recipe = c.recipe;
    spec.recipe_mode = c.mode;
    spec.workspace_size = 64 << 20;
    auto env = make_env(*ns_, spec);
    ASSERT_TRUE(env);
    EXPECT_EQ(env->workspace_info().kind, c.kind) << env->workspace_info().note;
    EXPECT_NE(env->workspace_info().note.find("64MiB ext4 image"), std::string::npos)
        << env->workspace_info().note;
    std::string line = workspace_mount_line(*env);
    ASSERT_FALSE(line.empty()) << "no mount at /workspace";
    EXPECT_EQ(line.find(options_.paths.work_dir), std::string::npos) << line;
    EXPECT_EQ(line.find(env->workspace_host_path()), std::string::npos) << line;
    EXPECT_EQ(line.find(tmp_), std::string::npos) << line;
    EXPECT_NE(line.find(c.kind == "overlay" ? " - overlay " : " - ext4 /dev/loop"),
              std::string::npos)
        << line;
    // nosuid, nodev on the workspace as the run sees it.
    EXPECT_NE(line.find("nosuid"), std::string::npos) << line;
    EXPECT_NE(line.find("nodev"), std::string::npos) << line;
    std::string expect = c.recipe.empty() ? "sandbox 700\n" : "sandbox 700\nsandbox 644\n";
    auto r = sh(*env, std::string("stat -c '%U %a' /workspace") +
                          (c.recipe.empty() ? "" : " /workspace/src/main.c") +
                          "; ls -A /workspace | grep -c -e lost+found -e upper -e work -e "
                          ".sandgate; echo new > /workspace/new");
    EXPECT_EQ(r.stdout_data, expect + "0\n") << r.stderr_data;
    EXPECT_TRUE(env->settle_workspace().ok());
    auto wrote = read_file(env->workspace_host_path() + "/new");
    EXPECT_TRUE(wrote.ok() && *wrote == "new\n") << "the run's write is not where exports read";
    if (!c.recipe.empty()) {
      EXPECT_NE(::access((rec + "/new").c_str(), F_OK), 0) << "the recipe was written";
      auto src = read_file(env->workspace_host_path() + "/src/main.c");
      EXPECT_TRUE(src.ok() && src->find("main") != std::string::npos);
    }
  }
}

// Writing past the size is ENOSPC inside the run; the host's filesystem gives the image at
// most its size (it is sparse), and the host's free space does not drop by more than that.
TEST_F(WorkspaceFilesystemTest, WritingPastTheSizeIsEnospcAndTheHostDiskIsUntouched) {
  SANDGATE_REQUIRE_ROOT();
  providers::EnvSpec spec;
  spec.workspace_size = 32 << 20;
  auto env = make_env(*ns_, spec);
  ASSERT_TRUE(env);
  std::string image = options_.paths.work_dir + "/" + env->run_id() + "/workspace.img";
  struct statvfs before;
  ASSERT_EQ(::statvfs(options_.paths.work_dir.c_str(), &before), 0);
  auto r = sh(*env,
              "dd if=/dev/zero of=/workspace/fill bs=1M count=128 2>&1; sync;"
              "echo size $(stat -c %s /workspace/fill)");
  EXPECT_NE(r.stdout_data.find("No space left on device"), std::string::npos) << r.stdout_data;
  auto at = r.stdout_data.find("size ");
  ASSERT_NE(at, std::string::npos) << r.stdout_data;
  long long written = std::atoll(r.stdout_data.c_str() + at + 5);
  EXPECT_GT(written, 16LL << 20) << "the run could not even use half of its filesystem";
  EXPECT_LE(written, 32LL << 20);
  struct stat st;
  ASSERT_EQ(::stat(image.c_str(), &st), 0);
  EXPECT_LE(static_cast<long long>(st.st_blocks) * 512, 33LL << 20)
      << "the image took more of the host's disk than its size";
  struct statvfs after;
  ASSERT_EQ(::statvfs(options_.paths.work_dir.c_str(), &after), 0);
  long long dropped =
      (static_cast<long long>(before.f_bavail) - static_cast<long long>(after.f_bavail)) *
      static_cast<long long>(before.f_frsize);
  // Other writers share the host's disk: a wide margin, far below the 128MiB asked for.
  EXPECT_LT(dropped, 64LL << 20) << "the host's free space dropped by " << dropped;
}

// auto mode where no copy-on-write view is possible (a recipe directory of another owner):
// the attempt's layers go with a fresh filesystem, and the copy shows none of them; the first
// filesystem's loop device is detached, one device is left for the run.
TEST_F(WorkspaceFilesystemTest, AFailedViewFallsBackToACopyOnAFreshFilesystem) {
  SANDGATE_REQUIRE_ROOT();
  std::string rec = recipe();
  ASSERT_EQ(::chown((rec + "/src").c_str(), 4242, 4242), 0);
  providers::EnvSpec spec;
  spec.workspace_recipe = rec;
  spec.workspace_size = 32 << 20;
  auto env = make_env(*ns_, spec);
  ASSERT_TRUE(env);
  EXPECT_EQ(env->workspace_info().kind, "copy");
  EXPECT_NE(env->workspace_info().note.find("no copy-on-write view"), std::string::npos)
      << env->workspace_info().note;
  auto r = sh(*env, "ls -A /workspace; cat /workspace/src/main.c");
  EXPECT_EQ(r.stdout_data, "src\nint main(){return 0;}\n") << r.stderr_data;
  std::string image = options_.paths.work_dir + "/" + env->run_id() + "/workspace.img";
  int devices = 0;
  eventually([&] {
    devices = 0;
    for (const auto& l : loop_backing_files()) devices += l.find(image) != std::string::npos;
    return devices <= 1;
  });
  EXPECT_EQ(devices, 1);
  auto record = read_file(options_.paths.state_dir + "/runs/" + env->run_id() + ".json");
  ASSERT_TRUE(record.ok());
  size_t loops = 0;
  for (size_t at = 0; (at = record->find("\"loop_device\"", at)) != std::string::npos; ++at)
    ++loops;
  EXPECT_EQ(loops, 1u) << *record;
}

// destroy leaves no loop device backed by the run's image, no mount, no image; a size out of
// range and a provider without the option are refused by name, leaving nothing.
TEST_F(WorkspaceFilesystemTest, DestroyLeavesNoLoopDeviceMountOrImage) {
  SANDGATE_REQUIRE_ROOT();
  providers::EnvSpec spec;
  spec.workspace_size = 32 << 20;
  spec.workspace_recipe = recipe();
  auto env = make_env(*ns_, spec);
  ASSERT_TRUE(env);
  std::string run_dir = options_.paths.work_dir + "/" + env->run_id();
  std::string image = run_dir + "/workspace.img";
  bool attached = false;
  for (const auto& l : loop_backing_files()) attached |= l.find(image) != std::string::npos;
  ASSERT_TRUE(attached) << "no loop device backed by " << image
                        << ": the check below proves nothing";
  auto mounts = read_file("/proc/self/mountinfo");
  ASSERT_TRUE(mounts.ok());
  ASSERT_NE(mounts->find(run_dir + "/workspace "), std::string::npos);
  ASSERT_TRUE(env->destroy().ok());
  EXPECT_EQ(loops_under(run_dir), std::vector<std::string>{});
  mounts = read_file("/proc/self/mountinfo");
  ASSERT_TRUE(mounts.ok());
  EXPECT_EQ(mounts->find(run_dir), std::string::npos) << *mounts;
  EXPECT_NE(::access(image.c_str(), F_OK), 0);

  spec.workspace_size = 1 << 20;
  auto small = ns_->create(spec);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.error().message().find("--workspace-size must be 16MiB..16TiB"),
            std::string::npos)
      << small.error().message();
  options_.allow_unsafe_host = true;
  auto host = provider("host_dir");
  ASSERT_TRUE(host);
  spec.workspace_size = 32 << 20;
  auto refused = host->create(spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("--workspace-size is for namespaces"), std::string::npos)
      << refused.error().message();
  // TearDown checks that no record and no run directory remain.
}

}  // namespace
}  // namespace sandgate::testing
