// The monitor's wake-ups, against an in-memory backend: a run's trigger wakes it at once (not at
// the end of its interval), a removed trigger wakes it no more, and a trigger whose file hangs
// up is dropped rather than waking it in a loop. No kernel, no root.
#include "controller/monitor.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "controller/fake_backend.h"

namespace sandgate::controller {
namespace {

using testing::FakeBackend;
using namespace std::chrono_literals;

// Waits until `done` or a generous bound (a busy 2-core machine); returns done().
template <typename F>
bool eventually(F done, std::chrono::seconds bound = 10s) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

class MonitorTest : public ::testing::Test {
 protected:
  static CgroupFeatures eventfd_triggers() {
    CgroupFeatures f = FakeBackend::all_features();
    f.psi_triggers = false;  // a v1 pressure_level eventfd: readable when it fires
    return f;
  }
  FakeBackend backend_{eventfd_triggers(), "/no-such-cgroupfs"};
  // An hour between samples: only a trigger makes one within a test.
  Monitor monitor_{backend_, HostPaths{}, std::chrono::hours(1)};
};

TEST_F(MonitorTest, ARunTriggerWakesItAtOnceAndARemovedOneNoMore) {
  UniqueFd trigger(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  ASSERT_TRUE(trigger.valid());
  // A second descriptor of the same eventfd: it stays open after the monitor closes its own,
  // so a registration left behind by remove_trigger would still fire.
  UniqueFd same(::dup(trigger.get()));
  ASSERT_TRUE(same.valid());
  monitor_.add_trigger(1, std::move(trigger));
  uint64_t one = 1;
  ASSERT_EQ(::write(same.get(), &one, sizeof one), 8);
  ASSERT_TRUE(eventually([&] { return monitor_.trigger_wakeups() == 1; }))
      << "the trigger did not wake the monitor; wake-ups: " << monitor_.trigger_wakeups();
  // Drained: it does not fire again by itself.
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(monitor_.trigger_wakeups(), 1u);

  monitor_.remove_trigger(1);
  auto cpu0 = monitor_.cpu_time();
  ASSERT_TRUE(cpu0.has_value());
  ASSERT_EQ(::write(same.get(), &one, sizeof one), 8);
  std::this_thread::sleep_for(500ms);
  auto cpu1 = monitor_.cpu_time();
  ASSERT_TRUE(cpu1.has_value());
  EXPECT_EQ(monitor_.trigger_wakeups(), 1u) << "a removed trigger still woke the monitor";
  // Left registered, the undrained eventfd would wake it in a loop (see the next test).
  EXPECT_LT(*cpu1 - *cpu0, std::chrono::milliseconds(50));
}

TEST_F(MonitorTest, ATriggerThatHangsUpIsDroppedNotPolledInALoop) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFd read_end(p[0]), write_end(p[1]);
  monitor_.add_trigger(7, std::move(read_end));
  auto cpu0 = monitor_.cpu_time();
  ASSERT_TRUE(cpu0.has_value());
  write_end.reset();  // the read end now reports EPOLLHUP, level-triggered, for good
  std::this_thread::sleep_for(500ms);
  auto cpu1 = monitor_.cpu_time();
  ASSERT_TRUE(cpu1.has_value());
  // Polled in a loop it would take most of a core (a third of one beside stress-ng): over
  // 150 ms of the 500. Dropped, it takes almost nothing.
  EXPECT_LT(*cpu1 - *cpu0, std::chrono::milliseconds(50));
  EXPECT_EQ(monitor_.trigger_wakeups(), 0u) << "a hang-up is not a pressure event";
}

}  // namespace
}  // namespace sandgate::controller
