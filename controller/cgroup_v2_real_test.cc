// The v2 backend against a pure cgroup2 kernel: the shared suite (cgroup_real_suite.h) plus
// what only v2 has. Needs root and a cgroup2-only host, nothing else (no network, no
// providers): it is built as a plain executable, not registered with CTest, and run by the
// guest-VM lane. On any other host every test fails under SANDGATE_MUST_WORK=1 (skips
// otherwise) saying why.
#include "controller/cgroup_real_suite.h"

namespace sandgate::controller::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(Cgroup, RealCgroupTest, ::testing::Values(Backend::kV2), backend_name);

class RealV2Test : public RealCgroupTest {};

TEST_P(RealV2Test, ControllersAreEnabledDownToTheParentOnly) {
  Cgroup call = make("r1/call-1");
  std::string root = layout_.unified_mount;
  std::string top = top_.dirs.at("unified");
  std::string r1 = top + "/r1";
  for (const std::string& dir : {root, top, r1}) {
    std::string enabled = trimmed(dir, "cgroup.subtree_control");
    for (const char* c : {"memory", "cpu", "pids"}) {
      if (layout_.has_v2_controller(c)) {
        EXPECT_THAT(enabled, HasSubstr(c)) << dir;
      }
    }
  }
  EXPECT_EQ(trimmed(call.dirs.at("unified"), "cgroup.subtree_control"), "");
  SANDGATE_REQUIRE(layout_.has_v2_controller("memory"), "the guest offers no memory controller");
  EXPECT_THAT(trimmed(call.dirs.at("unified"), "cgroup.controllers"), HasSubstr("memory"));
}

TEST_P(RealV2Test, NoInternalProcessesTheKernelRefusesAProcessInAnInnerCgroup) {
  // Why runs keep their processes in <run>/main: r1 has children with controllers enabled.
  Cgroup run = make("r1");
  make("r1/call-1");
  auto c = BlockedChild::fork_blocked();
  ASSERT_NE(c, nullptr);
  auto placed = c->place(backend_->placement(run));
  ASSERT_FALSE(placed.ok());
  EXPECT_EQ(placed.error().err, EBUSY) << placed.error().message();
  children_.push_back(std::move(c));
}

TEST_P(RealV2Test, MemoryHighThrottlesWithoutKilling) {
  Cgroup cg = make("call-1");
  Limits l;
  l.memory_high = MiB(32);
  ASSERT_TRUE(backend_->set_limits(cg, l).ok());
  BlockedChild* c = spawn_in(cg, Action::kTouch, 64);
  ASSERT_NE(c, nullptr);
  // Over memory.high the kernel reclaims and throttles the child: it is counted as "high"
  // and slowed, never OOM-killed (memory.high is not a hard limit).
  Usage u = usage_until(cg, [](const Usage& u) { return u.memory_events.high > 0; });
  EXPECT_GT(u.memory_events.high, 0u);
  EXPECT_EQ(u.memory_events.oom_kill, 0u);
  EXPECT_TRUE(u.memory_pressure.has_value());
}

INSTANTIATE_TEST_SUITE_P(Cgroup, RealV2Test, ::testing::Values(Backend::kV2), backend_name);

}  // namespace
}  // namespace sandgate::controller::testing
