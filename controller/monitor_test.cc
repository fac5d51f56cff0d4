// The monitor's run triggers, against an in-memory backend: made only once a call of the run
// has been active for the trigger's stall (not at all for a run of shorter calls), a trigger
// wakes it at once (not at the end of its interval), a removed trigger wakes it no more, and a
// trigger whose file hangs up is dropped rather than waking it in a loop. No kernel, no root.
#include "controller/monitor.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "controller/fake_backend.h"
#include "tests/support/eventually.h"

namespace sandgate::controller {
namespace {

using sandgate::testing::eventually;
using testing::FakeBackend;
using namespace std::chrono_literals;

class MonitorTest : public ::testing::Test {
 protected:
  static CgroupFeatures eventfd_triggers() {
    CgroupFeatures f = FakeBackend::all_features();
    f.psi_triggers = false;  // a v1 pressure_level notification: readable when it fires
    return f;
  }
  void SetUp() override { backend_.set_pressure_triggers(true); }

  // Watches call `id` of the run whose trigger is `key`, started now. Its cgroup does not exist
  // on the fake mount: every read of it fails, so no ladder is stepped.
  void watch(uint64_t id, uint64_t key) {
    monitor_.watch(id, Cgroup{"run/call" + std::to_string(id), {}}, nullptr,
                   std::chrono::steady_clock::now(), std::nullopt, nullptr, key);
  }

  FakeBackend backend_{eventfd_triggers(), "/no-such-cgroupfs"};
  // An hour between samples: only a trigger makes one within a test.
  Monitor monitor_{backend_, HostPaths{}, std::chrono::hours(1)};
  const Cgroup run_{"run", {}};
};

TEST_F(MonitorTest, ARunTriggerIsMadeOnceACallHasRunForItsStallThenWakesItAtOnce) {
  constexpr auto kStall = 1s;
  monitor_.want_trigger(1, run_, kStall, 2s);
  const auto start = std::chrono::steady_clock::now();
  watch(10, 1);
  // Made when it falls due, though the next sample is an hour away; never before.
  ASSERT_TRUE(eventually([&] { return monitor_.triggers_made() == 1; }))
      << "no trigger was made for a call active past its stall";
  EXPECT_GE(std::chrono::steady_clock::now() - start, kStall);
  EXPECT_EQ(backend_.triggers_made(), std::vector<std::string>{"run"}) << "not the run's cgroup";

  ASSERT_TRUE(backend_.fire_trigger("run"));
  ASSERT_TRUE(eventually([&] { return monitor_.trigger_wakeups() == 1; }))
      << "the trigger did not wake the monitor; wake-ups: " << monitor_.trigger_wakeups();
  // Drained: it does not fire again by itself.
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(monitor_.trigger_wakeups(), 1u);
  // A second call of the run does not make a second trigger.
  watch(11, 1);
  std::this_thread::sleep_for(kStall + 200ms);
  EXPECT_EQ(monitor_.triggers_made(), 1u);

  monitor_.remove_trigger(1);
  auto cpu0 = monitor_.cpu_time();
  ASSERT_TRUE(cpu0.has_value());
  ASSERT_TRUE(backend_.fire_trigger("run"));
  std::this_thread::sleep_for(500ms);
  auto cpu1 = monitor_.cpu_time();
  ASSERT_TRUE(cpu1.has_value());
  EXPECT_EQ(monitor_.trigger_wakeups(), 1u) << "a removed trigger still woke the monitor";
  // Left registered, the unread pipe would wake it in a loop (see the last test).
  EXPECT_LT(*cpu1 - *cpu0, std::chrono::milliseconds(50));
  monitor_.unwatch(10);
  monitor_.unwatch(11);
}

TEST_F(MonitorTest, ARunWhoseCallsEndBeforeTheStallMakesNoTrigger) {
  // The teardown of a PSI trigger waits for an RCU grace period: a run of short calls (a
  // cold `sandgate exec` of one) must not make one only to pay that at its end.
  constexpr auto kStall = 1s;
  monitor_.want_trigger(2, run_, kStall, 2s);
  watch(20, 2);
  monitor_.unwatch(20);
  watch(21, 2);
  monitor_.unwatch(21);
  std::this_thread::sleep_for(kStall + 500ms);
  EXPECT_EQ(monitor_.triggers_made(), 0u);
  EXPECT_TRUE(backend_.triggers_made().empty());
  // A call of another run that runs past its stall makes that run's trigger only.
  monitor_.want_trigger(3, Cgroup{"other", {}}, 100ms, 2s);
  watch(30, 3);
  ASSERT_TRUE(eventually([&] { return monitor_.triggers_made() == 1; }));
  EXPECT_EQ(backend_.triggers_made(), std::vector<std::string>{"other"});
  monitor_.unwatch(30);
  monitor_.remove_trigger(2);
  monitor_.remove_trigger(3);
}

TEST_F(MonitorTest, ATriggerThatHangsUpIsDroppedNotPolledInALoop) {
  monitor_.want_trigger(7, run_, 100ms, 2s);
  watch(70, 7);
  ASSERT_TRUE(eventually([&] { return monitor_.triggers_made() == 1; }));
  auto cpu0 = monitor_.cpu_time();
  ASSERT_TRUE(cpu0.has_value());
  // The read end now reports EPOLLHUP, level-triggered, for good.
  ASSERT_TRUE(backend_.hang_up_trigger("run"));
  std::this_thread::sleep_for(500ms);
  auto cpu1 = monitor_.cpu_time();
  ASSERT_TRUE(cpu1.has_value());
  // Polled in a loop it would take most of a core (a third of one beside stress-ng): over
  // 150 ms of the 500. Dropped, it takes almost nothing.
  EXPECT_LT(*cpu1 - *cpu0, std::chrono::milliseconds(50));
  EXPECT_EQ(monitor_.trigger_wakeups(), 0u) << "a hang-up is not a pressure event";
  monitor_.unwatch(70);
}

}  // namespace
}  // namespace sandgate::controller
