#include "core/proc_cgroup.h"

#include <gtest/gtest.h>

namespace sandgate {
namespace {

// A hybrid host's table, as a process in a run's call cgroup reads it.
constexpr std::string_view kHybrid =
    "12:pids:/sandgate/default/r1/call-2\n"
    "5:cpu,cpuacct:/sandgate/default/r1/call-2\n"
    "4:memory:/sandgate/default/r1/call-2\n"
    "1:name=systemd:/init.scope\n"
    "0::/sandgate/default/r1/main\n";

TEST(CgroupPathIn, FindsAV1HierarchyByAnyOfItsControllers) {
  EXPECT_EQ(cgroup_path_in(kHybrid, "memory"), "/sandgate/default/r1/call-2");
  EXPECT_EQ(cgroup_path_in(kHybrid, "cpu"), "/sandgate/default/r1/call-2");
  EXPECT_EQ(cgroup_path_in(kHybrid, "cpuacct"), "/sandgate/default/r1/call-2");
  EXPECT_EQ(cgroup_path_in(kHybrid, "name=systemd"), "/init.scope");
}

TEST(CgroupPathIn, AnEmptyControllerIsTheUnifiedHierarchysLine) {
  EXPECT_EQ(cgroup_path_in(kHybrid, ""), "/sandgate/default/r1/main");
  EXPECT_EQ(cgroup_path_in("0::/\n", ""), "/");
  EXPECT_EQ(cgroup_path_in("0::/a\n", "memory"), "") << "v2 lists no controllers by name";
}

TEST(CgroupPathIn, ControllerNamesMatchWholeNotAsPrefixes) {
  EXPECT_EQ(cgroup_path_in("3:cpuset:/x\n", "cpu"), "");
  EXPECT_EQ(cgroup_path_in("3:cpuset:/x\n5:cpu,cpuacct:/y\n", "cpu"), "/y");
  EXPECT_EQ(cgroup_path_in("1:name=systemd:/s\n", "systemd"), "");
}

TEST(CgroupPathIn, ThePathIsEverythingAfterTheSecondColon) {
  EXPECT_EQ(cgroup_path_in("4:memory:/a:b/c\n", "memory"), "/a:b/c");
  EXPECT_EQ(cgroup_path_in("0::/x", ""), "/x") << "a last line without its newline";
}

TEST(CgroupPathIn, NoSuchHierarchyOrAMalformedTableIsEmpty) {
  EXPECT_EQ(cgroup_path_in(kHybrid, "io"), "");
  EXPECT_EQ(cgroup_path_in("", ""), "");
  EXPECT_EQ(cgroup_path_in("garbage\nno:colon-pair\n", ""), "");
  EXPECT_EQ(cgroup_path_in("4:memory:/a\n", ""), "") << "a v1 line is not the unified one";
}

}  // namespace
}  // namespace sandgate
