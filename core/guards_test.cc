#include "core/guards.h"

#include <gtest/gtest.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>

#include "core/defer.h"
#include "core/fd.h"
#include "core/process.h"
#include "core/test_temp_dir.h"
#include "tests/support/privileged.h"

namespace sandgate {
namespace {

// The filesystem type mounted exactly at `path` per /proc/self/mountinfo (the last, topmost
// mount wins), or "" when nothing is mounted there.
std::string mounted_fstype(const std::string& path) {
  auto info = read_file("/proc/self/mountinfo");
  EXPECT_TRUE(info.ok());
  if (!info.ok()) return "";
  std::istringstream lines(*info);
  std::string line, found;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::string id, parent, devno, root, mount_point, field;
    f >> id >> parent >> devno >> root >> mount_point;
    if (mount_point != path) continue;
    while (f >> field && field != "-") {
    }
    f >> field;
    found = field;
  }
  return found;
}

std::string real(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? buf : path;
}

ino_t ns_inode(const std::string& ns_path) {
  struct stat st;
  if (::stat(ns_path.c_str(), &st) != 0) return 0;
  return st.st_ino;
}

class MountGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SANDGATE_REQUIRE_ROOT();
    target_ = real(tmp_ / "mnt");
    ASSERT_EQ(::mkdir(target_.c_str(), 0755), 0);
  }
  void TearDown() override {
    // Safety net if the guard under test failed to unmount: never leave a mount behind.
    if (!target_.empty())
      while (::umount2(target_.c_str(), MNT_DETACH) == 0) {
      }
  }
  testing::TempDir tmp_;
  std::string target_;
};

TEST_F(MountGuardTest, MountsAndUnmountsAtScopeExit) {
  {
    auto g = MountGuard::mount("sandgate-test", target_, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m");
    ASSERT_TRUE(g.ok()) << g.error().message();
    EXPECT_EQ(g->target(), target_);
    EXPECT_EQ(mounted_fstype(target_), "tmpfs");
    ASSERT_TRUE(write_file(target_ + "/on-tmpfs", "x", O_WRONLY | O_CREAT).ok());
  }
  EXPECT_EQ(mounted_fstype(target_), "");
  struct stat st;
  EXPECT_NE(::stat((target_ + "/on-tmpfs").c_str(), &st), 0) << "the file lived on the tmpfs";
}

TEST_F(MountGuardTest, ExplicitUnmountThenDestructorIsANoop) {
  auto g = MountGuard::mount("sandgate-test", target_, "tmpfs", 0, "size=1m");
  ASSERT_TRUE(g.ok()) << g.error().message();
  ASSERT_EQ(mounted_fstype(target_), "tmpfs");
  Status s = g->unmount();
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(mounted_fstype(target_), "");
  EXPECT_TRUE(g->target().empty());
  EXPECT_TRUE(g->unmount().ok());
}

TEST_F(MountGuardTest, MoveTransfersOwnership) {
  auto g = MountGuard::mount("sandgate-test", target_, "tmpfs", 0, "size=1m");
  ASSERT_TRUE(g.ok());
  MountGuard outer;
  {
    MountGuard inner(std::move(g).value());
    EXPECT_EQ(inner.target(), target_);
    outer = std::move(inner);
  }
  EXPECT_EQ(mounted_fstype(target_), "tmpfs") << "the moved-from guard must not unmount";
  EXPECT_EQ(outer.target(), target_);
  outer = MountGuard();  // move-assigning releases the mount it held
  EXPECT_EQ(mounted_fstype(target_), "");
}

TEST_F(MountGuardTest, FailedMountIsAnErrorNamingTheTarget) {
  auto g = MountGuard::mount("sandgate-test", target_ + "/missing", "tmpfs", 0);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().err, ENOENT);
  EXPECT_EQ(g.error().path, target_ + "/missing");
  auto bad = MountGuard::mount("sandgate-test", target_, "no-such-fstype", 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().err, ENODEV);
  EXPECT_EQ(mounted_fstype(target_), "");
}

class NetnsGuardTest : public ::testing::Test {
 protected:
  void TearDown() override {
    holder_.kill_and_reap();  // SIGKILL through the pidfd, then waitpid
    if (holder_pid_ > 0) {
      struct stat st;
      EXPECT_NE(::stat(("/proc/" + std::to_string(holder_pid_)).c_str(), &st), 0);
    }
  }
  // Starts `unshare -n sleep 30` and opens its network namespace once it has one of its own.
  void start_holder() {
    auto c = spawn({"unshare", "-n", "sleep", "30"});
    ASSERT_TRUE(c.ok()) << c.error().message();
    holder_ = std::move(c).value();
    holder_pid_ = holder_.pid();
    std::string ns = "/proc/" + std::to_string(holder_pid_) + "/ns/net";
    ino_t mine = ns_inode("/proc/self/ns/net");
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (ns_inode(ns) == mine || ns_inode(ns) == 0) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "unshare -n never unshared";
      auto st = holder_.wait_for(std::chrono::milliseconds(5));
      ASSERT_TRUE(st.ok());
      ASSERT_FALSE(st->has_value()) << "unshare exited: " << (*st)->describe();
    }
    auto fd = open_fd(ns, O_RDONLY);
    ASSERT_TRUE(fd.ok()) << fd.error().message();
    netns_ = std::move(fd).value();
    netns_inode_ = ns_inode(ns);
  }

  ChildProcess holder_;
  pid_t holder_pid_ = 0;
  UniqueFd netns_;
  ino_t netns_inode_ = 0;
};

TEST_F(NetnsGuardTest, EntersInThisThreadOnlyAndReturns) {
  SANDGATE_REQUIRE_ROOT();
  ASSERT_NO_FATAL_FAILURE(start_holder());
  ino_t original = ns_inode("/proc/thread-self/ns/net");
  ASSERT_NE(original, 0u);
  ASSERT_NE(original, netns_inode_);

  ino_t before = 0, inside = 0, main_thread_inside = 0, after = 0;
  std::string error;
  std::thread t([&] {
    before = ns_inode("/proc/thread-self/ns/net");
    {
      auto g = NetnsGuard::enter(netns_.get());
      if (!g.ok()) {
        error = g.error().message();
        return;
      }
      inside = ns_inode("/proc/thread-self/ns/net");
      main_thread_inside = ns_inode("/proc/" + std::to_string(::getpid()) + "/ns/net");
    }
    after = ns_inode("/proc/thread-self/ns/net");
  });
  t.join();
  ASSERT_EQ(error, "");
  EXPECT_EQ(before, original);
  EXPECT_EQ(inside, netns_inode_);
  EXPECT_EQ(main_thread_inside, original) << "setns must move only the calling thread";
  EXPECT_EQ(after, original);
  EXPECT_EQ(ns_inode("/proc/thread-self/ns/net"), original);
}

TEST_F(NetnsGuardTest, MovedGuardReturnsOnce) {
  SANDGATE_REQUIRE_ROOT();
  ASSERT_NO_FATAL_FAILURE(start_holder());
  ino_t original = ns_inode("/proc/thread-self/ns/net");
  ino_t inside = 0, after = 0;
  std::thread t([&] {
    auto g = NetnsGuard::enter(netns_.get());
    if (!g.ok()) return;
    {
      NetnsGuard moved(std::move(g).value());
      inside = ns_inode("/proc/thread-self/ns/net");
    }
    after = ns_inode("/proc/thread-self/ns/net");
  });
  t.join();
  EXPECT_EQ(inside, netns_inode_);
  EXPECT_EQ(after, original);
}

TEST_F(NetnsGuardTest, EnteringANonNamespaceFdFailsAndStaysPut) {
  SANDGATE_REQUIRE_ROOT();
  ino_t original = ns_inode("/proc/thread-self/ns/net");
  auto devnull = open_fd("/dev/null", O_RDONLY);
  ASSERT_TRUE(devnull.ok());
  int err = 0;
  ino_t after = 0;
  std::thread t([&] {
    auto g = NetnsGuard::enter(devnull->get());
    if (!g.ok()) err = g.error().err;
    after = ns_inode("/proc/thread-self/ns/net");
  });
  t.join();
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(after, original);
}

}  // namespace
}  // namespace sandgate
