#include "controller/cgroup_features.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/files.h"
#include "core/host_paths.h"
#include "tests/support/privileged.h"

namespace sandgate::controller {
namespace {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sandgate-cgfeat-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { (void)remove_tree(root_); }
  std::string root_;
};

TEST_F(TempDir, ProbeOnAPlainDirectoryFindsNoControlFilesAndRemovesTheChild) {
  auto files = probe_child_cgroup(root_, "child", {"memory.pressure", "cgroup.kill"});
  ASSERT_TRUE(files.ok()) << files.error().message();
  EXPECT_FALSE((*files)["memory.pressure"].exists);
  EXPECT_FALSE((*files)["cgroup.kill"].exists);
  EXPECT_FALSE(exists(root_ + "/child"));
}

TEST_F(TempDir, ProbeNeverTouchesAnExistingDirectory) {
  ASSERT_TRUE(make_dirs(root_ + "/taken").ok());
  auto files = probe_child_cgroup(root_, "taken", {"cgroup.kill"});
  ASSERT_FALSE(files.ok());
  EXPECT_EQ(files.error().err, EEXIST);
  EXPECT_TRUE(exists(root_ + "/taken"));
}

TEST_F(TempDir, ProbeRecordsTheChildWhileItExistsAndForgetsItAfter) {
  HostPaths paths;
  paths.state_dir = root_ + "/state";
  ASSERT_TRUE(make_dirs(root_ + "/cg").ok());
  auto state = RunState::create(paths, "doctor-test", "doctor");
  ASSERT_TRUE(state.ok()) << state.error().message();
  auto files = probe_child_cgroup(root_ + "/cg", "child", {"cgroup.kill"}, &*state);
  ASSERT_TRUE(files.ok()) << files.error().message();
  EXPECT_TRUE(state->resources().empty());
  EXPECT_FALSE(exists(root_ + "/cg/child"));
  // A failed mkdir leaves no record behind either.
  auto missing = probe_child_cgroup(root_ + "/no-such-parent", "child", {}, &*state);
  EXPECT_FALSE(missing.ok());
  EXPECT_TRUE(state->resources().empty());
  EXPECT_TRUE(state->finish().ok());
}

TEST(CgroupChecks, LayoutListsWhereEachLimitControllerIs) {
  CgroupLayout l;
  l.kind = CgroupLayoutKind::kHybrid;
  l.unified_mount = "/cg/unified";
  l.v1_mounts = {{"memory", "/cg/memory"}, {"cpu", "/cg/cpu"}, {"pids", "/cg/pids"}};
  auto checks = layout_checks(l);
  ASSERT_EQ(checks.size(), 5u);
  EXPECT_TRUE(checks[0].ok);
  EXPECT_EQ(checks[1].detail, "v1 memory at /cg/memory");
  EXPECT_TRUE(checks[3].ok);
  EXPECT_EQ(checks[4].name, "io controller");
  EXPECT_FALSE(checks[4].ok);  // neither v2 io nor v1 blkio
  l.v2_controllers = {"io"};
  EXPECT_TRUE(layout_checks(l)[4].ok);
  EXPECT_FALSE(layout_checks(Result<CgroupLayout>(logic_error("x", "broken")))[0].ok);
}

TEST(CgroupChecks, PressureNeedsAReadableMemoryPressureInACgroup2Child) {
  CgroupLayout l;
  l.kind = CgroupLayoutKind::kV1;
  CgroupFeatureProbe probe;
  auto no_v2 = pressure_checks(l, probe);
  ASSERT_EQ(no_v2.size(), 1u);
  EXPECT_FALSE(no_v2[0].ok);
  EXPECT_NE(no_v2[0].detail.find("no cgroup2 mount"), std::string::npos);

  l.kind = CgroupLayoutKind::kHybrid;
  l.unified_mount = "/cg/unified";
  probe.unified = ChildFiles{{"memory.pressure", {true, false, EOPNOTSUPP}}};
  auto unreadable = pressure_checks(l, probe);
  EXPECT_FALSE(unreadable[0].ok);
  EXPECT_NE(unreadable[0].detail.find("EOPNOTSUPP"), std::string::npos) << unreadable[0].detail;

  probe.unified =
      ChildFiles{{"memory.pressure", {true, true, 0}}, {"cpu.pressure", {true, true, 0}}};
  auto good = pressure_checks(l, probe);
  EXPECT_TRUE(good[0].ok);
  EXPECT_NE(good[0].detail.find("missing: io.pressure"), std::string::npos) << good[0].detail;
}

TEST(CgroupChecks, FreezeAndKillPreferCgroup2ThenTheV1Freezer) {
  CgroupLayout l;
  l.kind = CgroupLayoutKind::kHybrid;
  l.unified_mount = "/cg/unified";
  l.v1_mounts = {{"freezer", "/cg/freezer"}};
  CgroupFeatureProbe probe;
  probe.unified = ChildFiles{{"cgroup.freeze", {true, true, 0}}, {"cgroup.kill", {true, false, 0}}};
  auto v2 = freeze_kill_checks(l, probe);
  EXPECT_TRUE(v2[0].ok && v2[1].ok);
  EXPECT_NE(v2[1].detail.find("cgroup.kill"), std::string::npos);

  probe.unified = ChildFiles{};
  probe.v1_freezer = ChildFiles{{"freezer.state", {true, true, 0}}};
  auto v1 = freeze_kill_checks(l, probe);
  EXPECT_TRUE(v1[0].ok);
  EXPECT_NE(v1[0].detail.find("freezer.state"), std::string::npos);
  EXPECT_TRUE(v1[1].ok);
  EXPECT_NE(v1[1].detail.find("emulated"), std::string::npos);

  probe.v1_freezer = logic_error("probe v1 freezer", "no v1 freezer hierarchy");
  auto none = freeze_kill_checks(l, probe);
  EXPECT_FALSE(none[0].ok);
  EXPECT_FALSE(none[1].ok);
}

// On the real host: the unified (or v2) mount offers per-cgroup PSI, freeze and kill, and the
// probe child is gone afterwards.
TEST(CgroupFeaturesReal, UnifiedChildHasPressureFreezeAndKillAndIsRemoved) {
  SANDGATE_REQUIRE_ROOT();
  auto layout = detect_cgroup_layout("/proc/self/mountinfo");
  ASSERT_TRUE(layout.ok()) << layout.error().message();
  SANDGATE_REQUIRE(!layout->unified_mount.empty(), "no cgroup2 mount on this host");
  std::string name = doctor_probe_name() + "-test";
  CgroupFeatureProbe probe = probe_cgroup_features(*layout, name);
  ASSERT_TRUE(probe.unified.ok()) << probe.unified.error().message();
  EXPECT_TRUE((*probe.unified)["memory.pressure"].readable);
  EXPECT_TRUE((*probe.unified)["cgroup.freeze"].exists);
  EXPECT_TRUE((*probe.unified)["cgroup.kill"].exists);
  EXPECT_FALSE(exists(layout->unified_mount + "/" + name));
  if (auto freezer = layout->v1_mount("freezer"); !freezer.empty()) {
    ASSERT_TRUE(probe.v1_freezer.ok()) << probe.v1_freezer.error().message();
    EXPECT_TRUE((*probe.v1_freezer)["freezer.state"].exists);
    EXPECT_FALSE(exists(freezer + "/" + name));
  }
  for (const auto& c : pressure_checks(*layout, probe))
    EXPECT_TRUE(c.ok) << c.name << ": " << c.detail;
  for (const auto& c : freeze_kill_checks(*layout, probe))
    EXPECT_TRUE(c.ok) << c.name << ": " << c.detail;
}

}  // namespace
}  // namespace sandgate::controller
