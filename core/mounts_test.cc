#include "core/mounts.h"

#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include <string>

#include "core/defer.h"
#include "core/fd.h"
#include "core/test_temp_dir.h"
#include "tests/support/privileged.h"

namespace sandgate {
namespace {

TEST(MountTable, ParsesFieldsAndOptionalFields) {
  auto mounts = parse_mount_table(
      "36 23 0:12 / /sys/kernel/tracing rw,nosuid,relatime shared:15 master:2 - tracefs "
      "tracefs rw,mode=700\n");
  ASSERT_TRUE(mounts.ok()) << mounts.error().message();
  ASSERT_EQ(mounts->size(), 1u);
  const MountEntry& m = (*mounts)[0];
  EXPECT_EQ(m.mount_id, 36);
  EXPECT_EQ(m.parent_id, 23);
  EXPECT_EQ(m.root, "/");
  EXPECT_EQ(m.mount_point, "/sys/kernel/tracing");
  EXPECT_EQ(m.mount_options, (std::vector<std::string>{"rw", "nosuid", "relatime"}));
  EXPECT_EQ(m.fstype, "tracefs");
  EXPECT_EQ(m.source, "tracefs");
  EXPECT_EQ(m.super_options, (std::vector<std::string>{"rw", "mode=700"}));
}

TEST(MountTable, DecodesOctalEscapes) {
  auto mounts = parse_mount_table(
      "23 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
      "24 23 0:20 / /mnt/my\\040cgroups rw,nosuid master:3 - tmpfs cg\\040root rw,mode=755\n"
      "25 24 0:21 / /mnt/my\\040cgroups/sys\\134temd rw - cgroup none rw,name=systemd\n"
      "29 23 0:24 / /- rw,relatime - tmpfs dash rw\n");
  ASSERT_TRUE(mounts.ok()) << mounts.error().message();
  EXPECT_EQ((*mounts)[1].mount_point, "/mnt/my cgroups");
  EXPECT_EQ((*mounts)[1].source, "cg root");
  EXPECT_EQ((*mounts)[2].mount_point, "/mnt/my cgroups/sys\\temd");
  // A mount point literally named "-" is not the separator.
  EXPECT_EQ((*mounts)[3].mount_point, "/-");
  EXPECT_EQ((*mounts)[3].fstype, "tmpfs");
}

TEST(MountTable, MalformedLineIsAnErrorNamingTheLine) {
  auto text = read_file(testing::source_dir() + "/core/testdata/mountinfo_malformed.txt");
  ASSERT_TRUE(text.ok()) << text.error().message() << " (is SANDGATE_SOURCE_DIR set?)";
  auto mounts = parse_mount_table(*text);
  ASSERT_FALSE(mounts.ok());
  EXPECT_NE(mounts.error().detail.find("line 2"), std::string::npos) << mounts.error().message();
  EXPECT_FALSE(parse_mount_table("1 2 0:1 / /x rw - \n").ok());
  EXPECT_FALSE(parse_mount_table("a b 0:1 / /x rw - tmpfs t rw\n").ok());
}

TEST(MountTable, MountPointsUnderAPathParentsFirst) {
  auto mounts = parse_mount_table(
      "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
      "2 1 0:2 / /opt/base rw - tmpfs a rw\n"
      "3 2 0:3 / /opt/base/sub rw - tmpfs b rw\n"
      "4 1 0:4 / /opt/based rw - tmpfs c rw\n"
      "5 3 0:5 / /opt/base/sub/deeper rw - tmpfs d rw\n");
  ASSERT_TRUE(mounts.ok()) << mounts.error().message();
  EXPECT_EQ(mount_points_under(*mounts, "/opt/base"),
            (std::vector<std::string>{"/opt/base", "/opt/base/sub", "/opt/base/sub/deeper"}))
      << "a sibling that only shares the prefix (/opt/based) is not below";
  EXPECT_TRUE(mount_points_under(*mounts, "/srv").empty());
}

TEST(MountTable, ReadsThisProcessesTableAndFindsAFreshMount) {
  SANDGATE_REQUIRE_ROOT();
  testing::TempDir tmp;
  std::string mnt = tmp / "m";
  ASSERT_EQ(::mkdir(mnt.c_str(), 0755), 0);
  ASSERT_EQ(::mount("sandgate-test", mnt.c_str(), "tmpfs", 0, "size=4k"), 0);
  Defer unmount([&] { ::umount2(mnt.c_str(), MNT_DETACH); });
  auto mounts = read_mount_table("/proc/self/mountinfo");
  ASSERT_TRUE(mounts.ok()) << mounts.error().message();
  EXPECT_EQ(mount_points_under(*mounts, mnt), (std::vector<std::string>{mnt}));
}

// The hierarchy ebpf/ and its tests attach to: a real cgroup2 filesystem (statfs says so), not
// a v1 controller mount or a directory that merely is called "unified".
TEST(MountTable, FindsTheCgroup2Hierarchy) {
  std::string at = cgroup2_mount_point();
  SANDGATE_REQUIRE(!at.empty(), "this host mounts no cgroup2 hierarchy");
  struct statfs fs {};
  ASSERT_EQ(::statfs(at.c_str(), &fs), 0) << at;
  EXPECT_EQ(fs.f_type, CGROUP2_SUPER_MAGIC) << at;
}

}  // namespace
}  // namespace sandgate
