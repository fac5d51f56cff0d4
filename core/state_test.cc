#include "core/state.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/loop.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <regex>
#include <set>
#include <string>

#include "core/defer.h"
#include "core/fd.h"
#include "core/files.h"
#include "core/process.h"
#include "core/test_temp_dir.h"
#include "tests/support/privileged.h"

namespace sandgate {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// True while pid is a live (not zombie) process.
bool alive(pid_t pid) {
  auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return false;
  auto close = stat->rfind(')');
  return close != std::string::npos && (*stat)[close + 2] != 'Z';
}

class StateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    paths_.state_dir = tmp_ / "state";
    paths_.id_range_dir = tmp_ / "id-ranges";  // gc looks there: this test's own
    paths_.work_dir = tmp_ / "work";
    ASSERT_TRUE(make_dirs(paths_.work_dir).ok());
  }
  std::string record_path(const std::string& id) const {
    return paths_.state_dir + "/runs/" + id + ".json";
  }
  Json read_record(const std::string& id) {
    auto j = read_json_file(record_path(id));
    EXPECT_TRUE(j.ok()) << j.error().message();
    return j.ok() ? *j : Json();
  }
  // A record as a crashed sandgate would have left it, owned by `owner`.
  void write_record(const std::string& id, pid_t owner, unsigned long long owner_start,
                    const std::vector<Resource>& resources) {
    Json res = Json::array();
    for (const auto& r : resources) res.push_back(to_json(r));
    Json j = {{"schema_version", 1},        {"run_id", id},
              {"provider", "test"},         {"owner_pid", owner},
              {"owner_start", owner_start}, {"resources", res}};
    ASSERT_TRUE(make_dirs(paths_.state_dir + "/runs").ok());
    ASSERT_TRUE(write_json_file_atomic(record_path(id), j).ok());
  }
  // The pid of a process that has exited and been reaped.
  static pid_t dead_pid() {
    auto c = spawn({"true"});
    EXPECT_TRUE(c.ok());
    if (!c.ok()) return 0;
    pid_t pid = c->pid();
    EXPECT_TRUE(c->wait().ok());
    return pid;
  }
  ChildProcess spawn_sleep() {
    auto c = spawn({"sleep", "60"});
    EXPECT_TRUE(c.ok()) << c.error().message();
    return c.ok() ? std::move(c).value() : ChildProcess();
  }

  testing::TempDir tmp_;
  HostPaths paths_;
};

// --- Resource <-> JSON ---

TEST(ResourceJson, RoundTripsEveryKind) {
  std::vector<Resource> all = {
      {Resource::Kind::kDirectory, "/var/tmp/sandgate/r1", 0, 0},
      {Resource::Kind::kProcess, "", 4242, 987654321ULL},
      {Resource::Kind::kMount, "/var/tmp/sandgate/r1/root", 0, 0},
      {Resource::Kind::kCgroup, "/sys/fs/cgroup/sandgate/r1", 0, 0},
      {Resource::Kind::kNetns, "/run/netns/sg-r1", 0, 0},
      {Resource::Kind::kMarkedFile, "/usr/sandgate-base-canary-m1", 0, 0, "m1"},
      {Resource::Kind::kLoopDevice, "/dev/loop7", 0, 0, "/var/tmp/sandgate/r1/workspace.img"},
  };
  for (const auto& r : all) {
    Json j = to_json(r);
    EXPECT_EQ(j["kind"], to_string(r.kind));
    auto back = resource_from_json(j);
    ASSERT_TRUE(back.ok()) << back.error().message();
    EXPECT_EQ(*back, r) << j.dump();
  }
  EXPECT_EQ(to_json(all[1])["pid"], 4242);
  EXPECT_EQ(to_json(all[1])["start_time"], 987654321ULL);
  EXPECT_FALSE(to_json(all[0]).contains("pid"));
}

TEST(ResourceJson, RejectsUnknownKindAndWrongTypes) {
  auto unknown = resource_from_json(Json{{"kind", "volcano"}, {"path", "/x"}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.error().message(), HasSubstr("volcano"));
  EXPECT_FALSE(resource_from_json(Json{{"path", "/x"}}).ok());
  EXPECT_FALSE(resource_from_json(Json{{"kind", 3}}).ok());
  EXPECT_FALSE(resource_from_json(Json{{"kind", "process"}, {"pid", "many"}}).ok());
  EXPECT_FALSE(resource_from_json(Json::array()).ok());
  EXPECT_FALSE(resource_from_json(Json(7)).ok());
}

// --- RunState ---

TEST_F(StateTest, CreateRecordForgetFinish) {
  auto s = RunState::create(paths_, "rtest1", "host_dir");
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(s->run_id(), "rtest1");
  ASSERT_TRUE(exists(record_path("rtest1")));
  struct stat st;
  ASSERT_EQ(::stat((paths_.state_dir + "/runs").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0711u);

  Json j = read_record("rtest1");
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["run_id"], "rtest1");
  EXPECT_EQ(j["provider"], "host_dir");
  EXPECT_EQ(j["owner_pid"], ::getpid());
  EXPECT_EQ(j["owner_start"], process_start_time("/proc", ::getpid()).value());
  EXPECT_EQ(j["resources"], Json::array());

  Resource dir{Resource::Kind::kDirectory, paths_.work_dir + "/rtest1", 0, 0};
  Resource proc{Resource::Kind::kProcess, "", 77, 88};
  ASSERT_TRUE(s->record(dir).ok());
  ASSERT_TRUE(s->record(proc).ok());
  EXPECT_EQ(s->resources(), (std::vector<Resource>{dir, proc}));
  j = read_record("rtest1");
  ASSERT_EQ(j["resources"].size(), 2u);
  EXPECT_EQ(j["resources"][0], to_json(dir));
  EXPECT_EQ(j["resources"][1], to_json(proc));

  ASSERT_TRUE(s->forget(dir).ok());
  EXPECT_EQ(s->resources(), (std::vector<Resource>{proc}));
  j = read_record("rtest1");
  ASSERT_EQ(j["resources"].size(), 1u);
  EXPECT_EQ(j["resources"][0], to_json(proc));

  ASSERT_TRUE(s->finish().ok());
  EXPECT_FALSE(exists(record_path("rtest1")));
  EXPECT_TRUE(s->resources().empty());
  EXPECT_TRUE(s->finish().ok()) << "finishing twice is harmless";
}

TEST_F(StateTest, CreateFailsWhenTheStateDirCannotBeMade) {
  ASSERT_TRUE(write_file(tmp_ / "file", "x", O_WRONLY | O_CREAT).ok());
  paths_.state_dir = tmp_ / "file";
  auto s = RunState::create(paths_, "r1", "p");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().err, ENOTDIR);
}

TEST_F(StateTest, MovedRunStateKeepsTheRecord) {
  auto s = RunState::create(paths_, "rmove", "p");
  ASSERT_TRUE(s.ok());
  RunState moved = std::move(s).value();
  ASSERT_TRUE(moved.record({Resource::Kind::kDirectory, "/x", 0, 0}).ok());
  EXPECT_EQ(read_record("rmove")["resources"].size(), 1u);
  ASSERT_TRUE(moved.finish().ok());
  EXPECT_FALSE(exists(record_path("rmove")));
}

// --- release_resources ---

TEST_F(StateTest, ReleaseResourcesRemovesDirectoriesAndKillsProcesses) {
  std::string dir = paths_.work_dir + "/r1";
  ASSERT_TRUE(make_dirs(dir + "/a/b").ok());
  ASSERT_TRUE(write_file(dir + "/a/b/f", "x", O_WRONLY | O_CREAT).ok());
  ChildProcess child = spawn_sleep();
  ASSERT_TRUE(child.running());
  auto start = process_start_time("/proc", child.pid());
  ASSERT_TRUE(start.has_value());

  Status s = release_resources(paths_, {{Resource::Kind::kDirectory, dir, 0, 0},
                                        {Resource::Kind::kProcess, "", child.pid(), *start},
                                        {Resource::Kind::kDirectory, dir + "/a", 0, 0}});
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_FALSE(exists(dir));
  EXPECT_FALSE(alive(child.pid()));
}

// A recorded child that exited before the release (stopped early by signal_recorded_process,
// or dead by itself) is reaped, not left a zombie of the long-lived launcher (`serve`).
TEST_F(StateTest, ReleaseResourcesReapsARecordedChildThatAlreadyExited) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::pause();
    ::_exit(0);
  }
  auto start = process_start_time("/proc", pid);
  ASSERT_TRUE(start.has_value());
  const Resource r{Resource::Kind::kProcess, "", pid, *start};
  signal_recorded_process(paths_, r, SIGTERM);
  siginfo_t info = {};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT), 0);  // a zombie now
  EXPECT_EQ(info.si_status, SIGTERM);
  signal_recorded_process(paths_, r, SIGKILL);  // a zombie is not signalled: nothing happens
  ASSERT_TRUE(release_resources(paths_, {r}).ok());
  errno = 0;
  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), -1) << "the zombie was not reaped";
  EXPECT_EQ(errno, ECHILD);
}

TEST_F(StateTest, ReleaseResourcesUnmountsBeforeRemovingDirectories) {
  SANDGATE_REQUIRE_ROOT();
  // Recorded in creation order: the directory, then a mount inside it. Removing the
  // directory first would meet the mount point (EBUSY); unmounting first must make it clean.
  std::string dir = paths_.work_dir + "/r2";
  std::string mnt = dir + "/root";
  ASSERT_TRUE(make_dirs(mnt).ok());
  ASSERT_EQ(::mount("sandgate-test", mnt.c_str(), "tmpfs", 0, "size=1m"), 0) << strerror(errno);
  Defer unmount([&] { ::umount2(mnt.c_str(), MNT_DETACH); });
  ASSERT_TRUE(write_file(mnt + "/inside-tmpfs", "x", O_WRONLY | O_CREAT).ok());

  Status s = release_resources(
      paths_, {{Resource::Kind::kDirectory, dir, 0, 0}, {Resource::Kind::kMount, mnt, 0, 0}});
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_FALSE(exists(dir));
}

TEST_F(StateTest, ReleaseResourcesOfMissingThingsIsSuccess) {
  Status s =
      release_resources(paths_, {{Resource::Kind::kDirectory, paths_.work_dir + "/gone", 0, 0},
                                 {Resource::Kind::kMount, paths_.work_dir + "/gone-mnt", 0, 0},
                                 {Resource::Kind::kNetns, paths_.work_dir + "/gone-netns", 0, 0},
                                 {Resource::Kind::kCgroup, paths_.work_dir + "/gone-cgroup", 0, 0},
                                 {Resource::Kind::kProcess, "", dead_pid(), 1}});
  EXPECT_TRUE(s.ok()) << s.error().message();
}

// A loop device record is acted on only while the kernel names the run's image as the
// device's backing file (a fake /sys here): a free device, or one another user attached since
// the record was written, is left alone; a name that is not a loop device is refused.
TEST_F(StateTest, LoopDeviceIsDetachedOnlyWhileBackedByTheRunsImage) {
  HostPaths fake = paths_;
  fake.sys = tmp_ / "sys";
  ASSERT_TRUE(make_dirs(fake.sys + "/block/loop5/loop").ok());
  ASSERT_TRUE(make_dirs(fake.sys + "/block/loop6").ok());
  ASSERT_TRUE(write_file(fake.sys + "/block/loop5/loop/backing_file", "/somebody/else.img\n",
                         O_WRONLY | O_CREAT)
                  .ok());
  // Another user's image: untouched (a real detach would need the device node, and fail).
  EXPECT_TRUE(detach_loop_device(fake, tmp_ / "no-dev/loop5", "/var/tmp/r1/workspace.img").ok());
  // A free device (no backing_file).
  EXPECT_TRUE(detach_loop_device(fake, tmp_ / "no-dev/loop6", "/var/tmp/r1/workspace.img").ok());
  auto bad = detach_loop_device(fake, "/dev/sda", "/var/tmp/r1/workspace.img");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message(), HasSubstr("not a loop device"));
  EXPECT_FALSE(detach_loop_device(fake, "/dev/loop5", "").ok());
  // The run's image, by the name d_path gives it once unlinked: acted on (the device node
  // does not exist here: that is a device gone, not an error).
  ASSERT_TRUE(write_file(fake.sys + "/block/loop5/loop/backing_file",
                         "/var/tmp/r1/workspace.img (deleted)\n", O_WRONLY | O_TRUNC)
                  .ok());
  EXPECT_TRUE(detach_loop_device(fake, tmp_ / "no-dev/loop5", "/var/tmp/r1/workspace.img").ok());
}

// The real kernel: a device attached without autoclear (as a crash between LOOP_CONFIGURE and
// anything else could leave one if autoclear were not set) is detached by release_resources,
// before the directory holding its image is removed.
TEST_F(StateTest, ReleaseResourcesDetachesALoopDeviceBeforeRemovingItsImage) {
  SANDGATE_REQUIRE_ROOT();
  std::string dir = paths_.work_dir + "/r-loop";
  std::string image = dir + "/workspace.img";
  ASSERT_TRUE(make_dirs(dir).ok());
  {
    UniqueFd f(::open(image.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    ASSERT_TRUE(f);
    ASSERT_EQ(::ftruncate(f.get(), 1 << 20), 0);
  }
  UniqueFd control(::open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(control) << strerror(errno);
  int n = ::ioctl(control.get(), LOOP_CTL_GET_FREE);
  ASSERT_GE(n, 0) << strerror(errno);
  std::string device = "/dev/loop" + std::to_string(n);
  std::string backing = "/sys/block/loop" + std::to_string(n) + "/loop/backing_file";
  {
    UniqueFd loop(::open(device.c_str(), O_RDWR | O_CLOEXEC));
    UniqueFd file(::open(image.c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_TRUE(loop && file);
    struct loop_config config = {};
    config.fd = static_cast<uint32_t>(file.get());
    ASSERT_EQ(::ioctl(loop.get(), LOOP_CONFIGURE, &config), 0) << strerror(errno);
  }
  Defer detach_anyway([&] {
    UniqueFd loop(::open(device.c_str(), O_RDONLY | O_CLOEXEC));
    if (loop) ::ioctl(loop.get(), LOOP_CLR_FD, 0);
  });
  auto attached = read_file(backing);
  ASSERT_TRUE(attached.ok() && attached->find(image) != std::string::npos);
  Status s = release_resources(paths_, {{Resource::Kind::kDirectory, dir},
                                        {Resource::Kind::kLoopDevice, device, 0, 0, image}});
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_FALSE(exists(dir));
  bool detached = false;
  for (int i = 0; i < 300 && !detached; ++i) {
    detached = !read_file(backing).ok();
    if (!detached) ::usleep(10000);
  }
  EXPECT_TRUE(detached) << device << " is still attached";
}

// --- collect_garbage ---

TEST_F(StateTest, GcWithoutAStateDirIsEmpty) {
  GcReport r = collect_garbage(paths_);
  EXPECT_EQ(r.runs_seen, 0);
  EXPECT_THAT(r.errors, IsEmpty());
}

// A record is rewritten through <record>.tmp.<writer pid> and a rename; a writer killed in
// between left the temporary file for ever (the chaos test found one after kill -9 of serve).
// gc removes it once its writer is gone, and leaves a live writer's alone.
TEST_F(StateTest, GcRemovesARecordTemporaryWhoseWriterIsGone) {
  ASSERT_TRUE(make_dirs(paths_.state_dir + "/runs").ok());
  std::string dead = record_path("rdead") + ".tmp." + std::to_string(dead_pid());
  std::string live = record_path("rlive") + ".tmp." + std::to_string(::getpid());
  const int create = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  ASSERT_TRUE(write_file(dead, "{\"run_id\": \"rdead\"", create).ok());
  ASSERT_TRUE(write_file(live, "{\"run_id\": \"rlive\"", create).ok());

  GcReport r = collect_garbage(paths_);
  EXPECT_THAT(r.errors, IsEmpty());
  EXPECT_EQ(r.runs_seen, 0) << "a temporary file is not a record";
  EXPECT_FALSE(exists(dead)) << "left by a dead writer: gc must remove it";
  EXPECT_TRUE(exists(live)) << "its writer is alive (this test): it may still be renamed";
}

// Records are not synced: after a power loss one may be empty. gc removes it (its processes,
// mounts and cgroups went with the machine), and with it gone the run's directory is an orphan
// and goes too. Before, the empty record was an error for ever, and it kept the directory.
TEST_F(StateTest, GcRemovesAnEmptyRecordLeftByAPowerLossAndThenItsDirectory) {
  ASSERT_TRUE(make_dirs(paths_.state_dir + "/runs").ok());
  ASSERT_TRUE(write_file(record_path("rpower"), "", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC).ok());
  std::string dir = paths_.work_dir + "/rpower";
  ASSERT_TRUE(make_dirs(dir + "/workspace").ok());

  GcReport r = collect_garbage(paths_);
  EXPECT_THAT(r.errors, IsEmpty());
  EXPECT_EQ(r.runs_removed, 1);
  EXPECT_FALSE(exists(record_path("rpower")));
  EXPECT_EQ(r.orphans_removed, 1);
  EXPECT_FALSE(exists(dir));
}

TEST_F(StateTest, GcLeavesALiveRunAlone) {
  std::string dir = paths_.work_dir + "/rlive";
  ASSERT_TRUE(make_dirs(dir).ok());
  auto s = RunState::create(paths_, "rlive", "test");
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->record({Resource::Kind::kDirectory, dir, 0, 0}).ok());

  GcReport r = collect_garbage(paths_);
  EXPECT_EQ(r.runs_seen, 1);
  EXPECT_EQ(r.runs_live, 1);
  EXPECT_EQ(r.runs_removed, 0);
  EXPECT_THAT(r.errors, IsEmpty());
  EXPECT_TRUE(exists(record_path("rlive")));
  EXPECT_TRUE(exists(dir));
  ASSERT_TRUE(s->finish().ok());
}

TEST_F(StateTest, GcCleansARunWhoseOwnerIsGone) {
  std::string dir = paths_.work_dir + "/rdead";
  ASSERT_TRUE(make_dirs(dir + "/root/etc").ok());
  ASSERT_TRUE(write_file(dir + "/root/etc/hosts", "x", O_WRONLY | O_CREAT).ok());
  ASSERT_EQ(::symlink("/etc", (dir + "/root/link").c_str()), 0);
  ChildProcess child = spawn_sleep();
  ASSERT_TRUE(child.running());
  pid_t pid = child.pid();
  auto start = process_start_time("/proc", pid);
  ASSERT_TRUE(start.has_value());
  write_record(
      "rdead", dead_pid(), 1,
      {{Resource::Kind::kDirectory, dir, 0, 0}, {Resource::Kind::kProcess, "", pid, *start}});

  GcReport r = collect_garbage(paths_);
  EXPECT_EQ(r.runs_seen, 1);
  EXPECT_EQ(r.runs_live, 0);
  EXPECT_EQ(r.runs_removed, 1);
  EXPECT_THAT(r.errors, IsEmpty());
  EXPECT_FALSE(exists(record_path("rdead")));
  EXPECT_FALSE(exists(dir));
  EXPECT_TRUE(exists("/etc/hosts"));

  // The sleep was killed (SIGTERM first): gc either reaped it (it is our child) or left the
  // zombie for us.
  EXPECT_FALSE(alive(pid));
  int status = 0;
  pid_t w = ::waitpid(pid, &status, WNOHANG);
  if (w == pid) {
    EXPECT_TRUE(WIFSIGNALED(status)) << status;
    EXPECT_TRUE(WTERMSIG(status) == SIGTERM || WTERMSIG(status) == SIGKILL) << status;
  } else {
    EXPECT_EQ(w, -1);
    EXPECT_EQ(errno, ECHILD);
  }
  (void)child.release();  // reaped above (or by gc): nothing left to kill
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST_F(StateTest, GcEscalatesToSigkillWhenSigtermIsIgnored) {
  // SIG_IGN survives execve: the sleep starts with SIGTERM ignored.
  struct sigaction ign = {}, old = {};
  ign.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGTERM, &ign, &old), 0);
  ChildProcess child = spawn_sleep();
  ::sigaction(SIGTERM, &old, nullptr);
  ASSERT_TRUE(child.running());
  pid_t pid = child.pid();
  auto start = process_start_time("/proc", pid);
  ASSERT_TRUE(start.has_value());
  write_record("rstubborn", dead_pid(), 1, {{Resource::Kind::kProcess, "", pid, *start}});

  GcReport r = collect_garbage(paths_);
  EXPECT_EQ(r.runs_removed, 1);
  EXPECT_THAT(r.errors, IsEmpty());
  EXPECT_FALSE(alive(pid));
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) == pid) {
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  }
  (void)child.release();
}

TEST_F(StateTest, GcDoesNotKillAProcessWhoseStartTimeDiffers) {
  ChildProcess child = spawn_sleep();
  ASSERT_TRUE(child.running());
  pid_t pid = child.pid();
  auto start = process_start_time("/proc", pid);
  ASSERT_TRUE(start.has_value());
  // The pid was recycled since the record was written: it names another process now.
  write_record("rrecycled", dead_pid(), 1, {{Resource::Kind::kProcess, "", pid, *start + 1}});

  GcReport r = collect_garbage(paths_);
  EXPECT_EQ(r.runs_removed, 1);
  EXPECT_THAT(r.errors, IsEmpty());
  EXPECT_TRUE(alive(pid)) << "gc killed a process that was not the recorded one";
  int status;
  EXPECT_EQ(::waitpid(pid, &status, WNOHANG), 0);
  child.kill_and_reap();
}

TEST_F(StateTest, GcReportsMalformedRecordsAndCarriesOn) {
  ASSERT_TRUE(make_dirs(paths_.state_dir + "/runs").ok());
  std::string runs = paths_.state_dir + "/runs/";
  ASSERT_TRUE(
      write_file(runs + "syntax.json", "{\"owner_pid\": 1,\n  oops", O_WRONLY | O_CREAT).ok());
  ASSERT_TRUE(write_file(runs + "array.json", "[1, 2, 3]", O_WRONLY | O_CREAT).ok());
  ASSERT_TRUE(
      write_file(runs + "types.json", R"({"owner_pid": "abc", "resources": 5})", O_WRONLY | O_CREAT)
          .ok());
  ASSERT_TRUE(write_file(runs + "badres.json",
                         R"({"owner_pid": 0, "run_id": 7, "resources": [{"kind": "volcano"}]})",
                         O_WRONLY | O_CREAT)
                  .ok());
  ASSERT_TRUE(write_file(runs + "notes.txt", "ignored", O_WRONLY | O_CREAT).ok());
  std::string dir = paths_.work_dir + "/rgood";
  ASSERT_TRUE(make_dirs(dir).ok());
  write_record("rgood", dead_pid(), 1, {{Resource::Kind::kDirectory, dir, 0, 0}});

  GcReport r = collect_garbage(paths_);
  EXPECT_EQ(r.runs_seen, 5);
  EXPECT_GE(r.errors.size(), 4u);
  bool named_syntax = false;
  for (const auto& e : r.errors) named_syntax |= e.find("syntax.json") != std::string::npos;
  EXPECT_TRUE(named_syntax) << ::testing::PrintToString(r.errors);
  // The good record beside them is still cleaned; the malformed ones are kept for a person.
  EXPECT_FALSE(exists(dir));
  EXPECT_FALSE(exists(record_path("rgood")));
  EXPECT_TRUE(exists(runs + "syntax.json"));
  EXPECT_TRUE(exists(runs + "array.json"));
  EXPECT_TRUE(exists(runs + "types.json"));
  EXPECT_TRUE(exists(runs + "badres.json")) << "a resource gc cannot read is not released";
  EXPECT_TRUE(exists(runs + "notes.txt"));
}

TEST_F(StateTest, GcKeepsARecordWhoseResourcesCannotBeReleasedAndRetries) {
  SANDGATE_REQUIRE_ROOT();
  // A bind mount left inside the run's directory makes its removal fail with EBUSY.
  ASSERT_TRUE(make_dirs(tmp_ / "host").ok());
  ASSERT_TRUE(write_file(tmp_ / "host/precious", "x", O_WRONLY | O_CREAT).ok());
  std::string dir = paths_.work_dir + "/rstuck";
  ASSERT_TRUE(make_dirs(dir + "/mnt").ok());
  ASSERT_EQ(::mount((tmp_ / "host").c_str(), (dir + "/mnt").c_str(), nullptr, MS_BIND, nullptr), 0)
      << strerror(errno);
  Defer unmount([&] { ::umount2((dir + "/mnt").c_str(), MNT_DETACH); });
  write_record("rstuck", dead_pid(), 1, {{Resource::Kind::kDirectory, dir, 0, 0}});

  GcReport r = collect_garbage(paths_);
  EXPECT_EQ(r.runs_removed, 0);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0], HasSubstr("EBUSY"));
  EXPECT_TRUE(exists(record_path("rstuck")));
  EXPECT_TRUE(exists(tmp_ / "host/precious"));

  ASSERT_EQ(::umount2((dir + "/mnt").c_str(), MNT_DETACH), 0);
  GcReport again = collect_garbage(paths_);
  EXPECT_EQ(again.runs_removed, 1);
  EXPECT_THAT(again.errors, IsEmpty());
  EXPECT_FALSE(exists(dir));
  EXPECT_FALSE(exists(record_path("rstuck")));
}

// --- marked files (a canary in a directory sandgate does not own) ---

TEST_F(StateTest, MarkedFileIsRemovedOnlyWhileItCarriesTheMarker) {
  const std::string marked = tmp_ / "canary-m1", other = tmp_ / "not-ours";
  ASSERT_TRUE(write_file(marked, "sandgate base canary m1\n", O_WRONLY | O_CREAT).ok());
  ASSERT_TRUE(write_file(other, "someone's config\n", O_WRONLY | O_CREAT).ok());
  EXPECT_TRUE(remove_marked_file(marked, "m1").ok());
  EXPECT_FALSE(exists(marked));
  EXPECT_TRUE(remove_marked_file(marked, "m1").ok()) << "gone already is done";
  auto refused = remove_marked_file(other, "m1");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error().message(), HasSubstr("does not carry the marker"));
  EXPECT_TRUE(exists(other));
  // A link put where the canary was is not followed, nor removed: its target is not ours.
  const std::string link = tmp_ / "link-m1";
  ASSERT_EQ(::symlink(other.c_str(), link.c_str()), 0);
  EXPECT_FALSE(remove_marked_file(link, "m1").ok());
  EXPECT_TRUE(exists(link));
  EXPECT_TRUE(exists(other));
  EXPECT_FALSE(remove_marked_file(other, "").ok()) << "a record without a marker removes nothing";
}

TEST_F(StateTest, GcRemovesMarkedFilesOfACrashedRunAndKeepsAnImpostor) {
  const std::string marked = tmp_ / "canary-m2", replaced = tmp_ / "canary-m3";
  ASSERT_TRUE(write_file(marked, "sandgate base canary m2\n", O_WRONLY | O_CREAT).ok());
  // Recorded, then replaced by a file that is not sandgate's: gc keeps it and the record.
  ASSERT_TRUE(write_file(replaced, "precious\n", O_WRONLY | O_CREAT).ok());
  write_record("rmarked", dead_pid(), 1,
               {{Resource::Kind::kMarkedFile, marked, 0, 0, "m2"},
                {Resource::Kind::kMarkedFile, tmp_ / "never-planted-m2", 0, 0, "m2"}});
  write_record("rimpostor", dead_pid(), 1, {{Resource::Kind::kMarkedFile, replaced, 0, 0, "m3"}});
  GcReport r = collect_garbage(paths_);
  EXPECT_EQ(r.runs_removed, 1);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0], HasSubstr("does not carry the marker"));
  EXPECT_FALSE(exists(marked));
  EXPECT_FALSE(exists(record_path("rmarked")));
  EXPECT_TRUE(exists(replaced));
  EXPECT_TRUE(exists(record_path("rimpostor")));
}

// --- new_run_id ---

TEST(NewRunId, UniqueAndLowercaseAlphanumeric) {
  std::set<std::string> seen;
  const std::regex shape("r[a-z0-9]+");
  for (int i = 0; i < 1000; ++i) {
    std::string id = new_run_id();
    EXPECT_TRUE(std::regex_match(id, shape)) << id;
    EXPECT_LE(id.size(), 64u);
    EXPECT_TRUE(seen.insert(id).second) << "duplicate id " << id << " after " << i << " calls";
  }
}

TEST_F(StateTest, SharedCgroupParentIsRemovedOnlyWhenEmpty) {
  // A shared parent (sandgate's root, a tenant) in use by another run stays, and that is not
  // an error; an empty one goes. Nothing in it is killed (plain directories stand in here).
  std::string busy = paths_.work_dir + "/tenant-busy", empty = paths_.work_dir + "/tenant-empty";
  ASSERT_TRUE(make_dirs(busy + "/other-run").ok());
  ASSERT_TRUE(make_dirs(empty).ok());
  auto s = release_resources(paths_, {{Resource::Kind::kCgroupParent, busy, 0, 0},
                                      {Resource::Kind::kCgroupParent, empty, 0, 0}});
  EXPECT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(::access((busy + "/other-run").c_str(), F_OK), 0);
  EXPECT_NE(::access(empty.c_str(), F_OK), 0);
  auto back = resource_from_json(to_json(Resource{Resource::Kind::kCgroupParent, busy, 0, 0}));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->kind, Resource::Kind::kCgroupParent);
}

}  // namespace
}  // namespace sandgate
