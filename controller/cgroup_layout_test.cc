#include "controller/cgroup_layout.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "core/fd.h"
#include "core/files.h"
#include "tests/support/privileged.h"

namespace sandgate::controller {
namespace {

std::string testdata(const std::string& name) {
  return sandgate::testing::source_dir() + "/controller/testdata/" + name;
}

CgroupLayout parse_testdata(const std::string& name) {
  auto text = read_file(testdata(name));
  EXPECT_TRUE(text.ok()) << text.error().message() << " (is SANDGATE_SOURCE_DIR set?)";
  if (!text.ok()) return {};
  auto layout = parse_mountinfo(*text);
  EXPECT_TRUE(layout.ok()) << layout.error().message();
  return layout.ok() ? *layout : CgroupLayout{};
}

TEST(CgroupLayout, HybridAsOnTheProjectMachines) {
  CgroupLayout l = parse_testdata("mountinfo_hybrid.txt");
  EXPECT_EQ(l.kind, CgroupLayoutKind::kHybrid);
  EXPECT_EQ(l.unified_mount, "/sys/fs/cgroup/unified");
  for (const char* c :
       {"memory", "cpu", "cpuacct", "pids", "freezer", "blkio", "cpuset", "devices"}) {
    EXPECT_EQ(l.v1_mount(c), std::string("/sys/fs/cgroup/") + c) << c;
  }
  EXPECT_EQ(l.v1_mount("name=systemd"), "/sys/fs/cgroup/systemd");
  EXPECT_EQ(l.v1_controllers().size(), 8u);  // name=systemd is not a controller
  EXPECT_TRUE(l.v2_controllers.empty());     // parse only: nothing read from the live mount
}

TEST(CgroupLayout, PureV2) {
  CgroupLayout l = parse_testdata("mountinfo_v2.txt");
  EXPECT_EQ(l.kind, CgroupLayoutKind::kV2);
  EXPECT_EQ(l.unified_mount, "/sys/fs/cgroup");
  EXPECT_TRUE(l.v1_mounts.empty());
}

TEST(CgroupLayout, PureV1WithComountedAndNamedHierarchies) {
  CgroupLayout l = parse_testdata("mountinfo_v1.txt");
  EXPECT_EQ(l.kind, CgroupLayoutKind::kV1);
  EXPECT_TRUE(l.unified_mount.empty());
  EXPECT_EQ(l.v1_mount("cpu"), "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ(l.v1_mount("cpuacct"), "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ(l.v1_mount("net_cls"), "/sys/fs/cgroup/net_cls,net_prio");
  EXPECT_EQ(l.v1_mount("net_prio"), "/sys/fs/cgroup/net_cls,net_prio");
  EXPECT_EQ(l.v1_mount("name=systemd"), "/sys/fs/cgroup/systemd");
  // Mount options are not controllers.
  EXPECT_EQ(l.v1_mount("xattr"), "");
  EXPECT_EQ(l.v1_mount("rw"), "");
  EXPECT_EQ(l.v1_mount("release_agent=/lib/systemd/systemd-cgroups-agent"), "");
  EXPECT_EQ(l.v1_controllers(),
            (std::vector<std::string>{"blkio", "cpu", "cpuacct", "freezer", "memory", "net_cls",
                                      "net_prio", "pids"}));
}

TEST(CgroupLayout, OddMountsEscapedPathsAndDuplicates) {
  CgroupLayout l = parse_testdata("mountinfo_odd.txt");
  EXPECT_EQ(l.kind, CgroupLayoutKind::kHybrid);
  EXPECT_EQ(l.unified_mount, "/mnt/my cgroups/unified");
  EXPECT_EQ(l.v1_mount("cpu"), "/mnt/my cgroups/cpu,cpuacct");
  EXPECT_EQ(l.v1_mount("noprefix"), "");
  EXPECT_EQ(l.v1_mount("clone_children"), "");
  EXPECT_EQ(l.v1_mount("name=systemd"), "/mnt/my cgroups/sys\\temd");
  // memory is mounted twice (a bind of a sub-tree): the first mount wins.
  EXPECT_EQ(l.v1_mount("memory"), "/mnt/my cgroups/memory");
}

TEST(CgroupLayout, NamedHierarchyBesideCgroup2IsV2) {
  CgroupLayout l = parse_testdata("mountinfo_named_v2.txt");
  EXPECT_EQ(l.kind, CgroupLayoutKind::kV2);
  EXPECT_EQ(l.v1_mount("name=systemd"), "/sys/fs/cgroup/systemd");
  EXPECT_TRUE(l.v1_controllers().empty());
}

TEST(CgroupLayout, NoCgroupMounts) {
  CgroupLayout l = parse_testdata("mountinfo_none.txt");
  EXPECT_EQ(l.kind, CgroupLayoutKind::kNone);
  EXPECT_EQ(describe(l), "none: no cgroup filesystem is mounted");
}

class FakeTree : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sandgate-layout-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { (void)remove_tree(root_); }
  std::string root_;
};

TEST_F(FakeTree, DetectReadsV2ControllersFromTheUnifiedMount) {
  ASSERT_TRUE(make_dirs(root_ + "/cg").ok());
  ASSERT_TRUE(write_file(root_ + "/cg/cgroup.controllers", "cpuset cpu io memory pids\n",
                         O_WRONLY | O_CREAT | O_TRUNC)
                  .ok());
  ASSERT_TRUE(write_file(root_ + "/mountinfo",
                         "30 23 0:26 / " + root_ + "/cg rw - cgroup2 cgroup2 rw\n",
                         O_WRONLY | O_CREAT | O_TRUNC)
                  .ok());
  auto l = detect_cgroup_layout(root_ + "/mountinfo");
  ASSERT_TRUE(l.ok()) << l.error().message();
  EXPECT_EQ(l->kind, CgroupLayoutKind::kV2);
  EXPECT_EQ(l->v2_controllers, (std::vector<std::string>{"cpuset", "cpu", "io", "memory", "pids"}));
  EXPECT_TRUE(l->has_v2_controller("io"));
  EXPECT_FALSE(l->has_v2_controller("hugetlb"));
  EXPECT_EQ(describe(*l),
            "v2: cgroup2 at " + root_ + "/cg (controllers: cpuset cpu io memory pids)");
}

TEST_F(FakeTree, DetectFailsWhenTheUnifiedMountHasNoControllersFile) {
  ASSERT_TRUE(make_dirs(root_ + "/cg").ok());
  ASSERT_TRUE(write_file(root_ + "/mountinfo",
                         "30 23 0:26 / " + root_ + "/cg rw - cgroup2 cgroup2 rw\n",
                         O_WRONLY | O_CREAT | O_TRUNC)
                  .ok());
  auto l = detect_cgroup_layout(root_ + "/mountinfo");
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().err, ENOENT) << l.error().message();
}

TEST_F(FakeTree, DetectFailsOnAMissingMountinfo) {
  auto l = detect_cgroup_layout(root_ + "/no-such-mountinfo");
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().err, ENOENT);
}

// The same code once more against the real kernel.
TEST(CgroupLayoutReal, ParsesThisHostsMountinfo) {
  auto l = detect_cgroup_layout("/proc/self/mountinfo");
  ASSERT_TRUE(l.ok()) << l.error().message();
  EXPECT_NE(l->kind, CgroupLayoutKind::kNone) << describe(*l);
  EXPECT_TRUE(!l->v1_controllers().empty() || !l->v2_controllers.empty()) << describe(*l);
  if (l->kind == CgroupLayoutKind::kHybrid || l->kind == CgroupLayoutKind::kV2) {
    EXPECT_EQ(::access((l->unified_mount + "/cgroup.procs").c_str(), F_OK), 0) << describe(*l);
  }
  for (const auto& [name, path] : l->v1_mounts) {
    EXPECT_EQ(::access((path + "/cgroup.procs").c_str(), F_OK), 0) << name << " at " << path;
  }
}

}  // namespace
}  // namespace sandgate::controller
