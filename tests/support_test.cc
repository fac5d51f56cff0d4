// The test support library's own checks: a leak check must look where this host's layout puts
// a cgroup root, and must fail (never pass) when it cannot tell where that is; eventually()
// returns once its condition holds and fails only after its bound.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "core/fd.h"
#include "tests/support/cgroup_dirs.h"
#include "tests/support/eventually.h"
#include "tests/support/privileged.h"

namespace sandgate::testing {
namespace {

using Dirs = std::vector<std::string>;

Result<controller::CgroupLayout> fixture_layout(const std::string& name) {
  SG_ASSIGN_OR_RETURN(std::string text, read_file(source_dir() + "/controller/testdata/" + name));
  return controller::parse_mountinfo(text);
}

TEST(CgroupDirsOfRoot, PureV2IsTheUnifiedMountAlone) {
  auto layout = fixture_layout("mountinfo_v2.txt");
  ASSERT_TRUE(layout.ok()) << layout.error().message();
  auto dirs = cgroup_dirs_of_root(*layout, "sg-root");
  ASSERT_TRUE(dirs.ok()) << dirs.error().message();
  EXPECT_EQ(*dirs, Dirs{"/sys/fs/cgroup/sg-root"});
}

TEST(CgroupDirsOfRoot, HybridIsEveryV1HierarchyAndTheUnifiedMount) {
  auto layout = fixture_layout("mountinfo_hybrid.txt");
  ASSERT_TRUE(layout.ok()) << layout.error().message();
  auto dirs = cgroup_dirs_of_root(*layout, "sg-root");
  ASSERT_TRUE(dirs.ok()) << dirs.error().message();
  // blkio and cpuacct included: the old hard-coded lists missed them.
  EXPECT_EQ(*dirs, (Dirs{"/sys/fs/cgroup/blkio/sg-root", "/sys/fs/cgroup/cpu/sg-root",
                         "/sys/fs/cgroup/cpuacct/sg-root", "/sys/fs/cgroup/cpuset/sg-root",
                         "/sys/fs/cgroup/devices/sg-root", "/sys/fs/cgroup/freezer/sg-root",
                         "/sys/fs/cgroup/memory/sg-root", "/sys/fs/cgroup/pids/sg-root",
                         "/sys/fs/cgroup/systemd/sg-root", "/sys/fs/cgroup/unified/sg-root"}));
}

TEST(CgroupDirsOfRoot, ComountedV1ControllersShareOneDirectory) {
  auto layout = fixture_layout("mountinfo_v1.txt");
  ASSERT_TRUE(layout.ok()) << layout.error().message();
  auto dirs = cgroup_dirs_of_root(*layout, "sg-root");
  ASSERT_TRUE(dirs.ok()) << dirs.error().message();
  EXPECT_EQ(std::count(dirs->begin(), dirs->end(), "/sys/fs/cgroup/cpu,cpuacct/sg-root"), 1);
  EXPECT_EQ(std::count(dirs->begin(), dirs->end(), "/sys/fs/cgroup/net_cls,net_prio/sg-root"), 1);
  EXPECT_EQ(std::count(dirs->begin(), dirs->end(), "/sys/fs/cgroup/blkio/sg-root"), 1);
}

TEST(CgroupDirsOfRoot, NoCgroupMountIsAnErrorNotAnEmptyList) {
  auto layout = fixture_layout("mountinfo_none.txt");
  ASSERT_TRUE(layout.ok()) << layout.error().message();
  auto dirs = cgroup_dirs_of_root(*layout, "sg-root");
  ASSERT_FALSE(dirs.ok());
  EXPECT_NE(dirs.error().message().find("nothing could be checked"), std::string::npos)
      << dirs.error().message();
  EXPECT_FALSE(cgroup_dirs_of_root(controller::CgroupLayout{}, "sg-root").ok());
}

TEST(CgroupDirsOfRoot, ANestedOrEmptyRootIsRefused) {
  auto layout = fixture_layout("mountinfo_v2.txt");
  ASSERT_TRUE(layout.ok()) << layout.error().message();
  for (const char* bad : {"", "a/b", "..", "."})
    EXPECT_FALSE(cgroup_dirs_of_root(*layout, bad).ok()) << bad;
}

TEST(CgroupDirsOfRoot, AnUnreadableLayoutIsAnError) {
  auto dirs = cgroup_dirs_of_root("sg-root", "/nonexistent/mountinfo");
  ASSERT_FALSE(dirs.ok());
  EXPECT_NE(dirs.error().message().find("cgroup layout"), std::string::npos)
      << dirs.error().message();
}

TEST(CgroupDirsOfRoot, ThisHostHasAtLeastOneHierarchy) {
  auto dirs = cgroup_dirs_of_root("sg-root");
  ASSERT_TRUE(dirs.ok()) << dirs.error().message();
  EXPECT_FALSE(dirs->empty());
}

// The positive twin on the real kernel: a directory left in any one hierarchy of this host is
// reported, by name; with none left the check is silent.
TEST(ExpectNoCgroupLeft, CatchesARootLeftInAnyHierarchyOfThisHost) {
  SANDGATE_REQUIRE_ROOT();
  std::string root = "sgtest-leakcheck-" + std::to_string(::getpid());
  auto dirs = cgroup_dirs_of_root(root);
  ASSERT_TRUE(dirs.ok()) << dirs.error().message();
  expect_no_cgroup_left(root);  // nothing there yet: no failure
  for (const auto& dir : *dirs) {
    SCOPED_TRACE(dir);
    ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir << ": " << std::strerror(errno);
    EXPECT_NONFATAL_FAILURE(expect_no_cgroup_left(root), "cgroup left: " + dir);
    EXPECT_EQ(::rmdir(dir.c_str()), 0) << dir << ": " << std::strerror(errno);
  }
  expect_no_cgroup_left(root);
}

TEST(Eventually, ReturnsAtTheFirstPollThatHolds) {
  int polls = 0;
  const auto began = std::chrono::steady_clock::now();
  EXPECT_TRUE(eventually([&] { return ++polls == 3; }, std::chrono::minutes(5)));
  EXPECT_EQ(polls, 3);
  // Two sleeps of 10 ms, not the 5 minutes of the bound (a wide margin for a busy machine).
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::minutes(1));
}

TEST(Eventually, FailsOnlyOnceItsBoundHasPassed) {
  int polls = 0;
  const auto began = std::chrono::steady_clock::now();
  EXPECT_FALSE(eventually([&] { return ++polls < 0; }, std::chrono::milliseconds(200),
                          std::chrono::milliseconds(1)));
  EXPECT_GE(std::chrono::steady_clock::now() - began, std::chrono::milliseconds(200));
  EXPECT_GT(polls, 1) << "it polled again before the bound";
}

}  // namespace
}  // namespace sandgate::testing
