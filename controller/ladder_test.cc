// The ladder's decisions against a recording actuator (oomd BaseKillPluginMock): no kernel,
// every sample scripted, every side effect checked by what the actuator was asked to do.
#include "controller/ladder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <memory>
#include <optional>
#include <string>

#include "controller/fake_actuator.h"

namespace sandgate::controller {
namespace {

using testing::ActuatorCall;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::RecordingActuator;
using Op = ActuatorCall::Op;

constexpr Duration ms(int64_t n) { return std::chrono::milliseconds(n); }

constexpr uint64_t kGiB = 1ULL << 30;
constexpr uint64_t kMiB = 1ULL << 20;

Usage memory(uint64_t current) {
  Usage u;
  u.memory_current = current;
  u.pids_current = 1;
  return u;
}

Usage pids(uint64_t current, uint64_t refused) {
  Usage u;
  u.memory_current = 10 * kMiB;
  u.pids_current = current;
  u.pids_max_events = refused;
  return u;
}

class LadderTest : public ::testing::Test {
 protected:
  LadderTest() {
    grant_.memory_max = GiB(1);
    grant_.cpu_cores = 2.0;
    grant_.pids_max = 64;
    features_.freeze = true;
  }

  Ladder& ladder() {
    if (!ladder_) ladder_ = std::make_unique<Ladder>(settings_, grant_, features_, cg_, actuator_);
    return *ladder_;
  }

  void step(int64_t at_ms, Usage u, std::optional<double> host_psi = std::nullopt,
            bool largest = true) {
    LadderInput in;
    in.now = ms(at_ms);
    in.usage = u;
    in.host_memory_psi = host_psi;
    in.largest_active_call = largest;
    ladder().step(in);
  }

  const CallObservation& obs() { return ladder().observation(); }

  std::vector<std::string> action_names() {
    std::vector<std::string> names;
    for (const auto& a : obs().actions) names.push_back(a.action);
    return names;
  }

  // Freezes the call at `at_ms` (host pressure 50%, the largest call).
  void freeze_at(int64_t at_ms) {
    step(at_ms, memory(100 * kMiB), 50.0);
    ASSERT_EQ(actuator_.count(Op::kFreeze), 1u);
    ASSERT_EQ(obs().actions.back().action, "freeze");
  }

  LadderSettings settings_;
  Grant grant_;
  CgroupFeatures features_;
  Cgroup cg_{"sgtest/default/r1/call-1", {{"unified", "/nonexistent/sgtest/default/r1/call-1"}}};
  RecordingActuator actuator_;
  std::unique_ptr<Ladder> ladder_;
};

// --- throttle ----------------------------------------------------------------------------

TEST_F(LadderTest, NoActionBelowThrottleAt) {
  // 0.89 of the grant, just under throttle_at = 0.9.
  for (int i = 0; i < 10; ++i) step(i * 20, memory(static_cast<uint64_t>(0.89 * kGiB)));
  EXPECT_EQ(actuator_.size(), 0u);
  EXPECT_TRUE(obs().actions.empty());
  EXPECT_EQ(obs().samples, 10);
  EXPECT_FALSE(ladder().done());
}

TEST_F(LadderTest, ThrottlesWhenMemoryCrossesThrottleAt) {
  step(0, memory(100 * kMiB));
  step(20, memory(950 * kMiB));  // 0.93 of 1GiB
  ASSERT_EQ(obs().actions.size(), 1u);
  const LadderAction& a = obs().actions[0];
  EXPECT_EQ(a.action, "throttle");
  EXPECT_EQ(a.at, ms(20));
  // The reason names the numbers: what was used, the threshold, the grant, the squeeze.
  EXPECT_THAT(a.reason, HasSubstr("950MiB"));
  EXPECT_THAT(a.reason, HasSubstr("90%"));
  EXPECT_THAT(a.reason, HasSubstr("1GiB"));
  EXPECT_THAT(a.reason, HasSubstr("0.50 cores"));

  auto calls = actuator_.calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].op, Op::kSetLimits);
  EXPECT_EQ(calls[0].cgroup, cg_.rel);
  // Only the CPU is squeezed (grant cores * throttle_cpu_fraction); memory is left alone.
  Limits want;
  want.cpu_cores = 2.0 * 0.25;
  EXPECT_EQ(calls[0].limits, want);

  // Still above: no second throttle.
  step(40, memory(1000 * kMiB));
  EXPECT_EQ(actuator_.count(Op::kSetLimits), 1u);
  EXPECT_EQ(action_names(), std::vector<std::string>{"throttle"});
}

TEST_F(LadderTest, ThrottleThresholdIsInclusiveAndFollowsSettings) {
  settings_.throttle_at = 0.5;
  settings_.throttle_cpu_fraction = 0.1;
  step(0, memory(kGiB / 2 - 1));
  EXPECT_EQ(actuator_.size(), 0u);
  step(20, memory(kGiB / 2));
  ASSERT_EQ(actuator_.count(Op::kSetLimits), 1u);
  EXPECT_DOUBLE_EQ(*actuator_.calls(Op::kSetLimits)[0].limits.cpu_cores, 0.2);
  EXPECT_THAT(obs().actions[0].reason, HasSubstr("50%"));
}

TEST_F(LadderTest, ThrottleReasonRoundsThePercentage) {
  settings_.throttle_at = 0.29;  // 0.29 * 100 is 28.999999999999996 in binary floating point
  step(0, memory(300 * kMiB));
  ASSERT_EQ(action_names(), std::vector<std::string>{"throttle"});
  EXPECT_THAT(obs().actions[0].reason, HasSubstr("29%"));
}

TEST_F(LadderTest, ThrottleWithoutGrantedCoresSqueezesOneCore) {
  grant_.cpu_cores.reset();
  step(0, memory(kGiB));
  auto calls = actuator_.calls(Op::kSetLimits);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_DOUBLE_EQ(*calls[0].limits.cpu_cores, 0.25);
}

TEST_F(LadderTest, NoMemoryGrantNeverThrottles) {
  grant_.memory_max.reset();
  step(0, memory(64 * kGiB));
  EXPECT_EQ(actuator_.size(), 0u);
}

TEST_F(LadderTest, UnthrottlesOnlyBelowEightyPercentOfThreshold) {
  step(0, memory(950 * kMiB));
  ASSERT_EQ(action_names(), std::vector<std::string>{"throttle"});
  // threshold = 0.9 GiB; unthrottle below 0.72 GiB. 0.75 GiB stays throttled.
  step(100, memory(static_cast<uint64_t>(0.75 * kGiB)));
  EXPECT_EQ(action_names(), std::vector<std::string>{"throttle"});
  step(300, memory(static_cast<uint64_t>(0.70 * kGiB)));
  ASSERT_EQ(action_names(), (std::vector<std::string>{"throttle", "unthrottle"}));
  EXPECT_EQ(obs().actions[1].at, ms(300));

  auto calls = actuator_.calls(Op::kSetLimits);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_DOUBLE_EQ(*calls[1].limits.cpu_cores, 2.0);  // the grant's cores back
  EXPECT_FALSE(calls[1].limits.memory_max.has_value());
  EXPECT_EQ(obs().throttled_for, ms(300));
}

TEST_F(LadderTest, ThrottledTimeAccumulatesAndFinishClosesTheOpenInterval) {
  step(0, memory(950 * kMiB));    // throttle at 0
  step(100, memory(100 * kMiB));  // unthrottle at 100: 100ms
  step(200, memory(950 * kMiB));  // throttle at 200
  step(250, memory(100 * kMiB));  // unthrottle at 250: +50ms
  step(400, memory(950 * kMiB));  // throttle at 400, still throttled at the end
  EXPECT_EQ(obs().throttled_for, ms(150));
  ladder().finish(ms(1000));  // +600ms
  EXPECT_EQ(obs().throttled_for, ms(750));
  EXPECT_EQ(actuator_.count(Op::kSetLimits), 5u);
}

TEST_F(LadderTest, ActuatorFailureOnThrottleIsSurvived) {
  actuator_.fail(Op::kSetLimits);
  step(0, memory(950 * kMiB));
  step(20, memory(960 * kMiB));
  // Asked (and refused) each time; nothing recorded as done, nothing counted as throttled.
  EXPECT_EQ(actuator_.count(Op::kSetLimits), 2u);
  EXPECT_TRUE(obs().actions.empty());
  ladder().finish(ms(100));
  EXPECT_EQ(obs().throttled_for, Duration(0));

  // Once the actuator works again the next sample throttles.
  actuator_.fail(Op::kSetLimits, false);
  step(40, memory(960 * kMiB));
  EXPECT_EQ(action_names(), std::vector<std::string>{"throttle"});
}

// --- freeze / thaw / cancel --------------------------------------------------------------

TEST_F(LadderTest, FreezesTheLargestCallUnderHostPressure) {
  step(0, memory(100 * kMiB), 40.0);  // exactly freeze_host_psi
  auto calls = actuator_.calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].op, Op::kFreeze);
  EXPECT_TRUE(calls[0].frozen);
  EXPECT_EQ(calls[0].cgroup, cg_.rel);
  ASSERT_EQ(action_names(), std::vector<std::string>{"freeze"});
  EXPECT_THAT(obs().actions[0].reason, HasSubstr("40"));
  EXPECT_THAT(obs().actions[0].reason, HasSubstr("largest"));
}

TEST_F(LadderTest, NoFreezeBelowFreezeHostPsi) {
  step(0, memory(100 * kMiB), 39.9);
  EXPECT_EQ(actuator_.size(), 0u);
}

TEST_F(LadderTest, NoFreezeWhenNotTheLargestCall) {
  step(0, memory(100 * kMiB), 90.0, /*largest=*/false);
  EXPECT_EQ(actuator_.size(), 0u);
}

TEST_F(LadderTest, NoFreezeWhenTheLayoutCannotFreeze) {
  features_.freeze = false;
  step(0, memory(100 * kMiB), 90.0);
  EXPECT_EQ(actuator_.size(), 0u);
}

TEST_F(LadderTest, NoFreezeWithoutHostPsi) {
  step(0, memory(100 * kMiB), std::nullopt);
  EXPECT_EQ(actuator_.size(), 0u);
}

TEST_F(LadderTest, FailedFreezeChangesNothingAndIsRetried) {
  actuator_.fail(Op::kFreeze);
  step(0, memory(100 * kMiB), 50.0);
  EXPECT_TRUE(obs().actions.empty());
  actuator_.fail(Op::kFreeze, false);
  step(20, memory(100 * kMiB), 50.0);
  EXPECT_EQ(action_names(), std::vector<std::string>{"freeze"});
  EXPECT_EQ(actuator_.count(Op::kFreeze), 2u);
}

TEST_F(LadderTest, ThawsWhenHostPressureFallsBelowThawPsi) {
  freeze_at(100);
  step(200, memory(100 * kMiB), 20.0);  // between thaw (10) and freeze (40): stays frozen
  EXPECT_EQ(actuator_.count(Op::kFreeze), 1u);
  step(400, memory(100 * kMiB), 9.5);
  auto freezes = actuator_.calls(Op::kFreeze);
  ASSERT_EQ(freezes.size(), 2u);
  EXPECT_FALSE(freezes[1].frozen);
  ASSERT_EQ(action_names(), (std::vector<std::string>{"freeze", "thaw"}));
  EXPECT_EQ(obs().actions[1].at, ms(400));
  EXPECT_EQ(obs().frozen_for, ms(300));
  EXPECT_FALSE(obs().cancelled_by_ladder);
}

TEST_F(LadderTest, FrozenCallIsNotThrottledOrUnthrottled) {
  freeze_at(0);
  step(20, memory(kGiB), 50.0);
  EXPECT_EQ(actuator_.count(Op::kSetLimits), 0u);
}

TEST_F(LadderTest, ThawReturnsToThrottledWhenThrottledBefore) {
  step(0, memory(950 * kMiB));         // throttle
  step(20, memory(950 * kMiB), 60.0);  // freeze
  step(40, memory(950 * kMiB), 5.0);   // thaw
  ASSERT_EQ(action_names(), (std::vector<std::string>{"throttle", "freeze", "thaw"}));
  // Still throttled: memory dropping unthrottles, and no second throttle happened.
  step(60, memory(100 * kMiB));
  EXPECT_EQ(action_names(), (std::vector<std::string>{"throttle", "freeze", "thaw", "unthrottle"}));
  EXPECT_EQ(obs().throttled_for, ms(60));
  EXPECT_EQ(obs().frozen_for, ms(20));
}

TEST_F(LadderTest, CancelsAfterThawingWhenFrozenLongerThanFreezeMax) {
  freeze_at(100);
  step(2099, memory(100 * kMiB), 50.0);  // 1999ms frozen: not yet
  EXPECT_FALSE(obs().cancelled_by_ladder);
  EXPECT_EQ(actuator_.count(Op::kSignal), 0u);

  step(2100, memory(100 * kMiB), 50.0);  // freeze_max = 2s
  auto calls = actuator_.calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[1].op, Op::kFreeze);  // thaw first: a frozen task cannot handle SIGTERM
  EXPECT_FALSE(calls[1].frozen);
  EXPECT_EQ(calls[2].op, Op::kSignal);
  EXPECT_EQ(calls[2].sig, SIGTERM);
  EXPECT_EQ(calls[2].cgroup, cg_.rel);

  EXPECT_TRUE(obs().cancelled_by_ladder);
  EXPECT_FALSE(obs().killed_by_ladder);
  EXPECT_EQ(obs().ladder_termination, Termination::kCancelled);
  EXPECT_THAT(obs().ladder_reason, HasSubstr("pressure"));
  ASSERT_EQ(action_names(), (std::vector<std::string>{"freeze", "cancel"}));
  EXPECT_EQ(obs().actions[1].at, ms(2100));
  EXPECT_EQ(obs().frozen_for, ms(2000));
  // The interval is closed once: finish adds nothing more.
  ladder().finish(ms(2500));
  EXPECT_EQ(obs().frozen_for, ms(2000));
  EXPECT_EQ(actuator_.count(Op::kFreeze), 2u);
}

TEST_F(LadderTest, FinishThawsAFrozenCallAndClosesFrozenTime) {
  freeze_at(100);
  ladder().finish(ms(400));
  EXPECT_EQ(obs().frozen_for, ms(300));
  auto freezes = actuator_.calls(Op::kFreeze);
  ASSERT_EQ(freezes.size(), 2u);
  EXPECT_FALSE(freezes[1].frozen);
}

// --- kill after cancel -------------------------------------------------------------------

class LadderKillTest : public LadderTest {
 protected:
  // Cancelled (frozen since 0, cancelled at 2000ms).
  void cancel() {
    freeze_at(0);
    step(2000, memory(100 * kMiB), 50.0);
    ASSERT_TRUE(obs().cancelled_by_ladder);
  }
};

TEST_F(LadderKillTest, KillsAfterCancelGraceWhenProcessesRemain) {
  cancel();
  Usage still = memory(100 * kMiB);
  still.pids_current = 3;
  step(2499, still, 50.0);  // cancel_grace = 500ms
  EXPECT_EQ(actuator_.count(Op::kKill), 0u);
  EXPECT_FALSE(ladder().done());
  step(2500, still, 50.0);
  auto kills = actuator_.calls(Op::kKill);
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0].cgroup, cg_.rel);
  EXPECT_TRUE(ladder().done());
  EXPECT_TRUE(obs().killed_by_ladder);
  EXPECT_EQ(action_names().back(), "kill");
  EXPECT_EQ(obs().actions.back().at, ms(2500));
  // The cancel's reason stays the reason; termination stays what the cancel was for.
  EXPECT_THAT(obs().ladder_reason, HasSubstr("pressure"));
  EXPECT_EQ(obs().ladder_termination, Termination::kCancelled);
  // Done: nothing more happens.
  step(3000, still, 50.0);
  EXPECT_EQ(actuator_.count(Op::kKill), 1u);
  EXPECT_EQ(obs().samples, 5);
}

TEST_F(LadderKillTest, NoKillWhenTheCallAlreadyExited) {
  cancel();
  Usage gone = memory(0);
  gone.pids_current = 0;
  step(2600, gone, 50.0);
  step(5000, gone, 50.0);
  EXPECT_EQ(actuator_.count(Op::kKill), 0u);
  EXPECT_FALSE(obs().killed_by_ladder);
  EXPECT_FALSE(ladder().done());
}

TEST_F(LadderKillTest, CancellingCallIsNotFrozenOrThrottledAgain) {
  cancel();
  size_t before = actuator_.size();
  step(2100, memory(kGiB), 90.0);
  EXPECT_EQ(actuator_.size(), before);
}

// --- fork bomb ---------------------------------------------------------------------------

TEST_F(LadderTest, ForkBombPinnedAtPidsMaxIsCancelledAfter500ms) {
  // pids_max = 64; pinned, and the kernel refuses more forks at every sample.
  for (int t = 0; t < 500; t += 100) {
    step(t, pids(64, 10 + static_cast<uint64_t>(t)));
    ASSERT_FALSE(obs().cancelled_by_ladder) << "at " << t << "ms";
  }
  EXPECT_EQ(actuator_.count(Op::kSignal), 0u);
  step(500, pids(64, 600));
  ASSERT_TRUE(obs().cancelled_by_ladder);
  EXPECT_EQ(obs().ladder_termination, Termination::kPidsLimit);
  EXPECT_THAT(obs().ladder_reason, HasSubstr("64 processes"));
  auto signals = actuator_.calls(Op::kSignal);
  ASSERT_EQ(signals.size(), 1u);
  EXPECT_EQ(signals[0].sig, SIGTERM);
  EXPECT_EQ(actuator_.count(Op::kFreeze), 0u);  // not frozen: nothing to thaw
  ASSERT_EQ(action_names(), std::vector<std::string>{"cancel"});
  EXPECT_EQ(obs().actions[0].at, ms(500));
  EXPECT_EQ(obs().pids_refused, 600u);
}

TEST_F(LadderTest, ForkBombTimerResetsWhenTheCallDipsBelowPidsMax) {
  step(0, pids(64, 10));
  step(100, pids(64, 20));
  step(200, pids(64, 30));
  step(300, pids(63, 30));  // dipped: the pinned timer starts again
  step(400, pids(64, 40));  // pinned since 400
  step(600, pids(64, 50));
  step(800, pids(64, 60));
  EXPECT_FALSE(obs().cancelled_by_ladder);
  step(899, pids(64, 70));
  EXPECT_FALSE(obs().cancelled_by_ladder);
  step(900, pids(64, 80));
  EXPECT_TRUE(obs().cancelled_by_ladder);
  EXPECT_EQ(obs().ladder_termination, Termination::kPidsLimit);
}

TEST_F(LadderTest, HoldingPidsMaxWithoutRefusedForksIsNotAForkBomb) {
  // A call that holds exactly pids_max tasks and tries no more is within its grant.
  for (int t = 0; t <= 2000; t += 100) step(t, pids(64, 0));
  EXPECT_FALSE(obs().cancelled_by_ladder);
  EXPECT_EQ(actuator_.size(), 0u);
}

TEST_F(LadderTest, ForkBombWithQuietSamplesBetweenRefusalsIsStillCancelled) {
  // bash backs off between failed forks (1s, 2s, ...): a sample without a new refusal while
  // the call stays pinned does not restart the clock; only dipping below pids_max does.
  step(0, pids(64, 10));
  step(100, pids(64, 10));
  step(300, pids(64, 10));
  EXPECT_FALSE(obs().cancelled_by_ladder);
  step(500, pids(64, 20));
  EXPECT_TRUE(obs().cancelled_by_ladder);
  EXPECT_EQ(obs().ladder_termination, Termination::kPidsLimit);
}

TEST_F(LadderTest, NoPidsGrantNoForkBombCancel) {
  grant_.pids_max.reset();
  for (int t = 0; t <= 2000; t += 100) step(t, pids(4096, static_cast<uint64_t>(t)));
  EXPECT_FALSE(obs().cancelled_by_ladder);
}

// --- observation -------------------------------------------------------------------------

TEST_F(LadderTest, KernelOomKillIsRecorded) {
  Usage u = memory(100 * kMiB);
  step(0, u);
  u.memory_events.oom_kill = 1;
  step(20, u);
  ASSERT_EQ(action_names(), std::vector<std::string>{"oom_kill"});
  EXPECT_EQ(obs().actions[0].at, ms(20));
  EXPECT_FALSE(obs().actions[0].reason.empty());
  EXPECT_EQ(obs().oom_kills, 1u);
  step(40, u);  // the same total: no new event
  EXPECT_EQ(obs().actions.size(), 1u);
  u.memory_events.oom_kill = 3;
  step(60, u);
  EXPECT_EQ(action_names(), (std::vector<std::string>{"oom_kill", "oom_kill"}));
  EXPECT_EQ(obs().oom_kills, 3u);
  // Observed, not acted on.
  EXPECT_EQ(actuator_.size(), 0u);
}

TEST_F(LadderTest, PeaksFromMemoryPeakPidsAndCpuDeltas) {
  Usage u;
  u.memory_current = 100 * kMiB;
  u.memory_peak = 300 * kMiB;  // the kernel saw more between samples
  u.pids_current = 3;
  u.cpu_usage_us = 0;
  step(0, u);
  EXPECT_EQ(obs().peaks.memory_bytes, 300 * kMiB);
  EXPECT_EQ(obs().peaks.cpu_cores, 0.0);  // one sample: no rate yet

  u.memory_current = 400 * kMiB;
  u.memory_peak.reset();  // v1 without max_usage: current only
  u.pids_current = 9;
  u.cpu_usage_us = 50'000;  // 50ms of CPU in 100ms
  step(100, u);
  EXPECT_EQ(obs().peaks.memory_bytes, 400 * kMiB);
  EXPECT_EQ(obs().peaks.pids, 9u);
  EXPECT_DOUBLE_EQ(obs().peaks.cpu_cores, 0.5);

  u.memory_current = 50 * kMiB;
  u.pids_current = 2;
  u.cpu_usage_us = 250'000;  // 200ms in 100ms: 2 cores
  step(200, u);
  u.cpu_usage_us = 260'000;  // 10ms in 100ms
  u.cpu_throttled_us = 1234;
  step(300, u);
  EXPECT_EQ(obs().peaks.memory_bytes, 400 * kMiB);
  EXPECT_EQ(obs().peaks.pids, 9u);
  EXPECT_DOUBLE_EQ(obs().peaks.cpu_cores, 2.0);
  EXPECT_EQ(obs().cpu_usage_us, 260'000u);
  EXPECT_EQ(obs().cpu_throttled_us, 1234u);
  EXPECT_EQ(obs().samples, 4);
}

TEST_F(LadderTest, ObserveRecordsWithoutActing) {
  LadderInput in;
  in.now = ms(5);
  in.usage = memory(kGiB);
  in.host_memory_psi = 99.0;
  ladder().observe(in);
  EXPECT_EQ(actuator_.size(), 0u);
  EXPECT_EQ(obs().samples, 1);
  EXPECT_EQ(obs().peaks.memory_bytes, kGiB);
}

TEST_F(LadderTest, DisabledLadderObservesButNeverActs) {
  settings_.enabled = false;
  step(0, memory(kGiB), 90.0);  // over throttle_at, host under pressure
  for (int t = 100; t <= 3000; t += 100) step(t, pids(64, static_cast<uint64_t>(t)), 90.0);
  Usage oom = memory(kGiB);
  oom.memory_events.oom_kill = 1;
  step(3100, oom, 90.0);
  ladder().finish(ms(4000));
  EXPECT_EQ(actuator_.size(), 0u);
  EXPECT_FALSE(obs().cancelled_by_ladder);
  EXPECT_FALSE(obs().killed_by_ladder);
  EXPECT_EQ(obs().throttled_for, Duration(0));
  EXPECT_EQ(obs().frozen_for, Duration(0));
  // Still observed: peaks and the kernel's OOM kill.
  EXPECT_EQ(obs().peaks.memory_bytes, kGiB);
  EXPECT_EQ(obs().peaks.pids, 64u);
  EXPECT_EQ(obs().oom_kills, 1u);
  EXPECT_EQ(action_names(), std::vector<std::string>{"oom_kill"});
  EXPECT_EQ(obs().samples, 32);
}

// --- run-queue delay ---------------------------------------------------------------------

class LadderRunqTest : public LadderTest {
 protected:
  LadderRunqTest() {
    settings_.runq_throttle_ms_per_s = 200;
    settings_.runq_window = ms(1000);
  }
  // One step with the monitor's run-queue view: the others' worst rate, this call's CPU.
  void runq_step(int64_t at_ms, double others_ms_per_s, double cores, bool most_cpu = true) {
    LadderInput in;
    in.now = ms(at_ms);
    in.usage = memory(100 * kMiB);
    RunqSignal r;
    r.others_ms_per_s = others_ms_per_s;
    r.worst_call = others_ms_per_s > 0 ? "sgtest/default/r2/call-1" : "";
    r.cpu_cores = cores;
    r.most_cpu = most_cpu;
    in.runq = r;
    ladder().step(in);
  }
};

TEST_F(LadderRunqTest, ThrottlesTheCallUsingTheMostCpuWhenOthersWait) {
  runq_step(0, 50, 1.8);     // below the threshold: nothing
  runq_step(100, 350, 1.8);  // another call waits 350 ms/s
  ASSERT_EQ(action_names(), std::vector<std::string>{"throttle"});
  const LadderAction& a = obs().actions[0];
  EXPECT_EQ(a.at, ms(100));
  // The reason names the signal, the victim, the numbers and the squeeze.
  EXPECT_THAT(a.reason, HasSubstr("run-queue delay"));
  EXPECT_THAT(a.reason, HasSubstr("sgtest/default/r2/call-1"));
  EXPECT_THAT(a.reason, HasSubstr("350 ms per second"));
  EXPECT_THAT(a.reason, HasSubstr("threshold 200 ms/s"));
  EXPECT_THAT(a.reason, HasSubstr("1.80 cores"));
  EXPECT_THAT(a.reason, HasSubstr("squeezed to 0.50 cores"));
  auto calls = actuator_.calls(Op::kSetLimits);
  ASSERT_EQ(calls.size(), 1u);
  Limits want;
  want.cpu_cores = 2.0 * settings_.throttle_cpu_fraction;
  EXPECT_EQ(calls[0].limits, want);  // cpu only: memory untouched
}

TEST_F(LadderRunqTest, ReleasesOnceTheOthersWaitLessThanHalfForAWindow) {
  runq_step(0, 400, 1.5);
  ASSERT_EQ(action_names(), std::vector<std::string>{"throttle"});
  runq_step(500, 50, 0.5, true);  // subsided, but not a whole window since the throttle
  EXPECT_EQ(action_names(), std::vector<std::string>{"throttle"});
  runq_step(900, 150, 0.5, true);  // a window later, still above half (100): held
  runq_step(1000, 150, 0.5, true);
  EXPECT_EQ(action_names(), std::vector<std::string>{"throttle"});
  runq_step(1200, 99, 0.5, true);
  ASSERT_EQ(action_names(), (std::vector<std::string>{"throttle", "unthrottle"}));
  EXPECT_THAT(obs().actions[1].reason, HasSubstr("run-queue delay of the other calls down to 99"));
  auto calls = actuator_.calls(Op::kSetLimits);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_DOUBLE_EQ(*calls[1].limits.cpu_cores, 2.0);  // the grant's cores back
  ladder().finish(ms(2000));
  EXPECT_EQ(obs().throttled_for, ms(1200));
}

// The negative twins: each condition alone is not enough.
TEST_F(LadderRunqTest, NotTheCallUsingTheMostCpuIsLeftAlone) {
  for (int t = 0; t <= 2000; t += 100) runq_step(t, 900, 1.0, /*most_cpu=*/false);
  EXPECT_TRUE(obs().actions.empty());
  EXPECT_EQ(actuator_.size(), 0u);
}

TEST_F(LadderRunqTest, ACallUsingLittleCpuIsLeftAlone) {
  // Others wait because of load outside sandgate: squeezing a call at 0.1 cores helps nobody.
  for (int t = 0; t <= 2000; t += 100) runq_step(t, 900, 0.1);
  EXPECT_TRUE(obs().actions.empty());
}

TEST_F(LadderRunqTest, ACallUsingLessThanTheSqueezeIsLeftAlone) {
  // The squeeze would leave it 0.5 cores (2 granted x 0.25): at 0.45 it would change nothing.
  for (int t = 0; t <= 2000; t += 100) runq_step(t, 900, 0.45);
  EXPECT_TRUE(obs().actions.empty());
  runq_step(2100, 900, 0.55);  // above it: squeezed
  EXPECT_EQ(action_names(), std::vector<std::string>{"throttle"});
}

TEST_F(LadderRunqTest, NoSignalOrRuleOffMeansNoAction) {
  for (int t = 0; t <= 1000; t += 100) step(t, memory(100 * kMiB));  // no runq view at all
  EXPECT_TRUE(obs().actions.empty());
  settings_.runq_throttle_ms_per_s = 0;  // off
  ladder_.reset();
  for (int t = 0; t <= 1000; t += 100) runq_step(t, 5000, 2.0);
  EXPECT_TRUE(obs().actions.empty());
  EXPECT_EQ(actuator_.size(), 0u);
}

TEST_F(LadderRunqTest, MemoryAndRunqShareOneSqueeze) {
  runq_step(0, 400, 1.5);  // squeezed for the run queue
  ASSERT_EQ(actuator_.count(Op::kSetLimits), 1u);
  // Memory crosses throttle_at: recorded, but the squeeze is already on.
  LadderInput in;
  in.now = ms(100);
  in.usage = memory(950 * kMiB);
  ladder().step(in);
  EXPECT_EQ(action_names(), (std::vector<std::string>{"throttle", "throttle"}));
  EXPECT_THAT(obs().actions[1].reason, HasSubstr("memory"));
  EXPECT_EQ(actuator_.count(Op::kSetLimits), 1u);
  // The run queue subsides: the squeeze stays for memory.
  in.now = ms(1500);
  RunqSignal calm;
  calm.cpu_cores = 0.5;
  calm.most_cpu = true;
  in.runq = calm;
  ladder().step(in);
  EXPECT_EQ(actuator_.count(Op::kSetLimits), 1u);
  ASSERT_EQ(obs().actions.size(), 3u);
  EXPECT_EQ(obs().actions[2].action, "unthrottle");
  EXPECT_THAT(obs().actions[2].reason, HasSubstr("stays for memory"));
  // Memory falls back: now the squeeze is given back.
  in.now = ms(1600);
  in.usage = memory(100 * kMiB);
  ladder().step(in);
  EXPECT_EQ(actuator_.count(Op::kSetLimits), 2u);
  EXPECT_EQ(obs().actions.back().action, "unthrottle");
}

TEST_F(LadderRunqTest, AFailedSqueezeIsNotRecordedAsAThrottle) {
  actuator_.fail(Op::kSetLimits);
  runq_step(0, 400, 1.5);
  EXPECT_TRUE(obs().actions.empty());
  actuator_.fail(Op::kSetLimits, false);
  runq_step(100, 400, 1.5);  // tried again at the next step
  EXPECT_EQ(action_names(), std::vector<std::string>{"throttle"});
}

// --- network bytes -----------------------------------------------------------------------

class LadderNetTest : public LadderTest {
 protected:
  LadderNetTest() {
    settings_.net_throttle_bytes_per_s = 4 * kMiB;
    settings_.net_window = ms(1000);
  }
  // One step with the monitor's network view of this call: its rates out and in (MiB/s) and
  // its CPU over the same window.
  void net_step(int64_t at_ms, double out_mib, double in_mib = 0, double cores = 1.0) {
    LadderInput in;
    in.now = ms(at_ms);
    in.usage = memory(100 * kMiB);
    in.net = NetSignal{out_mib * kMiB, in_mib * kMiB, cores};
    ladder().step(in);
  }
};

TEST_F(LadderNetTest, ThrottlesACallWhoseOwnNetworkRateExceedsTheThreshold) {
  net_step(0, 3);    // below: nothing
  net_step(100, 4);  // at the threshold is not above it
  EXPECT_TRUE(obs().actions.empty());
  net_step(200, 5, 1);  // 6 MiB/s in all
  ASSERT_EQ(action_names(), std::vector<std::string>{"throttle"});
  const LadderAction& a = obs().actions[0];
  EXPECT_EQ(a.at, ms(200));
  // The reason names the signal, the figures, the window and the squeeze.
  EXPECT_THAT(a.reason, HasSubstr("network burst 6.00MiB/s over 1s"));
  EXPECT_THAT(a.reason, HasSubstr("out 5.00MiB/s, in 1.00MiB/s"));
  EXPECT_THAT(a.reason, HasSubstr("threshold 4.00MiB/s"));
  EXPECT_THAT(a.reason, HasSubstr("squeezed to 0.50 cores"));
  auto calls = actuator_.calls(Op::kSetLimits);
  ASSERT_EQ(calls.size(), 1u);
  Limits want;
  want.cpu_cores = 2.0 * settings_.throttle_cpu_fraction;
  EXPECT_EQ(calls[0].limits, want);  // the CPU squeeze, nothing else
  // Held while the burst goes on: no second squeeze, no second action.
  for (int t = 300; t <= 2000; t += 100) net_step(t, 5, 1);
  EXPECT_EQ(action_names(), std::vector<std::string>{"throttle"});
  EXPECT_EQ(actuator_.count(Op::kSetLimits), 1u);
}

TEST_F(LadderNetTest, OutAndInCountTogether) {
  net_step(0, 2.5, 2.5);  // neither alone is above 4 MiB/s; the sum is
  EXPECT_EQ(action_names(), std::vector<std::string>{"throttle"});
}

TEST_F(LadderNetTest, ReleasesOnceBelowHalfTheThresholdForAWholeWindow) {
  net_step(0, 8);
  ASSERT_EQ(action_names(), std::vector<std::string>{"throttle"});
  net_step(500, 0);  // quiet, but not a whole window since the throttle
  EXPECT_EQ(action_names(), std::vector<std::string>{"throttle"});
  net_step(1000, 2.5);  // a window later, still above half (2 MiB/s): held
  EXPECT_EQ(action_names(), std::vector<std::string>{"throttle"});
  net_step(1100, 1.5);
  ASSERT_EQ(action_names(), (std::vector<std::string>{"throttle", "unthrottle"}));
  EXPECT_THAT(obs().actions[1].reason, HasSubstr("network rate down to 1.50MiB/s"));
  EXPECT_THAT(obs().actions[1].reason, HasSubstr("below half the 4.00MiB/s threshold"));
  auto calls = actuator_.calls(Op::kSetLimits);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_DOUBLE_EQ(*calls[1].limits.cpu_cores, 2.0);  // the grant's cores back
  ladder().finish(ms(2000));
  EXPECT_EQ(obs().throttled_for, ms(1100));
}

TEST_F(LadderNetTest, ASecondBurstIsThrottledAgain) {
  net_step(0, 8);
  net_step(1000, 0);
  ASSERT_EQ(action_names(), (std::vector<std::string>{"throttle", "unthrottle"}));
  net_step(1500, 9);
  EXPECT_EQ(action_names(), (std::vector<std::string>{"throttle", "unthrottle", "throttle"}));
  EXPECT_EQ(actuator_.count(Op::kSetLimits), 3u);
}

// The squeeze cannot slow traffic that costs the call less CPU than it would leave it.
TEST_F(LadderNetTest, ACallUsingLessCpuThanTheSqueezeIsLeftAlone) {
  for (int t = 0; t <= 2000; t += 100) net_step(t, 50, 0, /*cores=*/0.4);  // squeeze: 0.5
  EXPECT_TRUE(obs().actions.empty());
  EXPECT_EQ(actuator_.size(), 0u);
  ASSERT_TRUE(obs().peaks.net_bytes_per_s);  // still seen
  EXPECT_DOUBLE_EQ(*obs().peaks.net_bytes_per_s, 50.0 * kMiB);
}

TEST_F(LadderNetTest, RuleOffOrNoNetworkViewMeansNoActionButThePeakIsKept) {
  for (int t = 0; t <= 1000; t += 100) step(t, memory(100 * kMiB));  // no meter: no view
  EXPECT_TRUE(obs().actions.empty());
  EXPECT_FALSE(obs().peaks.net_bytes_per_s);
  settings_.net_throttle_bytes_per_s = 0;  // off
  ladder_.reset();
  net_step(0, 1);
  net_step(100, 100, 20);
  net_step(200, 3);
  EXPECT_TRUE(obs().actions.empty());
  EXPECT_EQ(actuator_.size(), 0u);
  ASSERT_TRUE(obs().peaks.net_bytes_per_s);
  EXPECT_DOUBLE_EQ(*obs().peaks.net_bytes_per_s, 120.0 * kMiB);
}

TEST_F(LadderNetTest, NetworkAndRunqShareOneSqueeze) {
  settings_.runq_throttle_ms_per_s = 200;
  settings_.runq_window = ms(1000);
  LadderInput in;
  in.now = ms(0);
  in.usage = memory(100 * kMiB);
  RunqSignal r;
  r.others_ms_per_s = 400;
  r.cpu_cores = 1.5;
  r.most_cpu = true;
  in.runq = r;
  in.net = NetSignal{8.0 * kMiB, 0, 1.5};
  ladder().step(in);  // both rules fire on one step: one squeeze, two reasons
  EXPECT_EQ(action_names(), (std::vector<std::string>{"throttle", "throttle"}));
  EXPECT_THAT(obs().actions[0].reason, HasSubstr("run-queue delay"));
  EXPECT_THAT(obs().actions[1].reason, HasSubstr("network burst"));
  EXPECT_EQ(actuator_.count(Op::kSetLimits), 1u);
  // The run queue clears; the burst goes on: the squeeze stays for it.
  in.now = ms(1200);
  in.runq->others_ms_per_s = 10;
  ladder().step(in);
  ASSERT_EQ(obs().actions.size(), 3u);
  EXPECT_EQ(obs().actions[2].action, "unthrottle");
  EXPECT_THAT(obs().actions[2].reason, HasSubstr("stays for the network burst"));
  EXPECT_EQ(actuator_.count(Op::kSetLimits), 1u);
  // The burst ends: now the cores are given back.
  in.now = ms(1300);
  in.net = NetSignal{0, 0, 0.2};
  ladder().step(in);
  ASSERT_EQ(obs().actions.size(), 4u);
  EXPECT_EQ(obs().actions[3].action, "unthrottle");
  EXPECT_THAT(obs().actions[3].reason, Not(HasSubstr("stays")));
  EXPECT_EQ(actuator_.count(Op::kSetLimits), 2u);
}

TEST_F(LadderNetTest, DisabledLadderNeverThrottlesForTheNetwork) {
  settings_.enabled = false;
  for (int t = 0; t <= 1000; t += 100) net_step(t, 100);
  EXPECT_TRUE(obs().actions.empty());
  EXPECT_EQ(actuator_.size(), 0u);
}

// --- the memory budget -----------------------------------------------------------------------

class LadderBudgetTest : public LadderTest {
 protected:
  static constexpr uint64_t kBudget = 1000 * kMiB;
  // One step with the monitor's view of the budget: `used_mib` of 1000 MiB charged to it.
  void budget_step(int64_t at_ms, uint64_t used_mib, bool largest, bool growing,
                   std::optional<double> host_psi = std::nullopt) {
    LadderInput in;
    in.now = ms(at_ms);
    in.usage = memory(100 * kMiB);
    in.host_memory_psi = host_psi;
    in.largest_active_call = largest;
    in.budget = BudgetSignal{"sgtest", used_mib * kMiB, kBudget, largest, growing};
    ladder().step(in);
  }
};

TEST_F(LadderBudgetTest, FreezesAGrowingCallThatIsNotTheLargestWhenTheBudgetIsNearlyFull) {
  budget_step(0, 899, false, true);  // below 90%: nothing
  EXPECT_TRUE(obs().actions.empty());
  budget_step(20, 900, false, true);  // at 90%
  ASSERT_EQ(action_names(), std::vector<std::string>{"freeze"});
  auto freezes = actuator_.calls(Op::kFreeze);
  ASSERT_EQ(freezes.size(), 1u);
  EXPECT_TRUE(freezes[0].frozen);
  EXPECT_EQ(freezes[0].cgroup, cg_.rel);
  EXPECT_THAT(obs().actions[0].reason, HasSubstr("memory budget sgtest at 900MiB of 1000MiB (90%)"));
  EXPECT_THAT(obs().actions[0].reason, HasSubstr("not the largest"));
}

TEST_F(LadderBudgetTest, TheLargestCallAndACallNotGrowingRunOn) {
  budget_step(0, 990, true, true);    // the largest: it runs on and finishes
  budget_step(20, 990, false, false);  // not growing: not what fills the budget
  EXPECT_TRUE(obs().actions.empty());
  EXPECT_EQ(actuator_.count(Op::kFreeze), 0u);
}

TEST_F(LadderBudgetTest, RuleOffLayoutWithoutFreezeOrNoBudgetViewMeansNoAction) {
  settings_.freeze_budget_at = 0;
  budget_step(0, 999, false, true);
  EXPECT_TRUE(obs().actions.empty());
  ladder_.reset();
  settings_ = LadderSettings{};
  features_.freeze = false;
  budget_step(0, 999, false, true);
  EXPECT_TRUE(obs().actions.empty());
  ladder_.reset();
  features_.freeze = true;
  step(0, memory(100 * kMiB), std::nullopt, false);  // no budget signal at all
  EXPECT_TRUE(obs().actions.empty());
  EXPECT_EQ(actuator_.count(Op::kFreeze), 0u);
}

TEST_F(LadderBudgetTest, ThawsOnceTheBudgetFallsBelowThawBudgetAt) {
  budget_step(0, 950, false, true);
  budget_step(500, 751, false, false);  // 75.1%: still frozen
  EXPECT_EQ(action_names(), std::vector<std::string>{"freeze"});
  budget_step(1000, 749, false, false);
  ASSERT_EQ(action_names(), (std::vector<std::string>{"freeze", "thaw"}));
  EXPECT_THAT(obs().actions[1].reason, HasSubstr("down to 749MiB"));
  auto freezes = actuator_.calls(Op::kFreeze);
  ASSERT_EQ(freezes.size(), 2u);
  EXPECT_FALSE(freezes[1].frozen);
  EXPECT_EQ(obs().frozen_for, ms(1000));
  // Frozen by the budget, not by host pressure: high host pressure alone does not thaw or
  // cancel it, and once thawed it may be frozen again.
  budget_step(1100, 950, false, true);
  EXPECT_EQ(action_names(), (std::vector<std::string>{"freeze", "thaw", "freeze"}));
}

TEST_F(LadderBudgetTest, ThawsOnceItIsTheLargestInTheBudget) {
  budget_step(0, 950, false, true);
  budget_step(300, 950, true, false);  // the largest ended its burst elsewhere: this one is now
  ASSERT_EQ(action_names(), (std::vector<std::string>{"freeze", "thaw"}));
  EXPECT_THAT(obs().actions[1].reason, HasSubstr("now the largest call"));
}

TEST_F(LadderBudgetTest, HostPressureDoesNotEndABudgetFreezeAndFreezeMaxDoesNotApply) {
  budget_step(0, 950, false, true);
  // Host pressure gone (it would thaw a host-pressure freeze) and well past freeze_max (2s).
  budget_step(5000, 950, false, false, 0.0);
  EXPECT_EQ(action_names(), std::vector<std::string>{"freeze"});
  EXPECT_FALSE(obs().cancelled_by_ladder);
}

TEST_F(LadderBudgetTest, CancelsWhenStillFrozenAfterBudgetFreezeMax) {
  settings_.budget_freeze_max = ms(3000);
  budget_step(100, 950, false, true);
  budget_step(3099, 950, false, false);
  EXPECT_FALSE(obs().cancelled_by_ladder);
  budget_step(3100, 950, false, false);
  EXPECT_TRUE(obs().cancelled_by_ladder);
  EXPECT_EQ(obs().ladder_termination, Termination::kCancelled);
  EXPECT_THAT(obs().ladder_reason, HasSubstr("memory budget stayed full for 3s"));
  ASSERT_EQ(action_names(), (std::vector<std::string>{"freeze", "cancel"}));
  auto calls = actuator_.calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[1].op, Op::kFreeze);  // thawed before SIGTERM
  EXPECT_FALSE(calls[1].frozen);
  EXPECT_EQ(calls[2].op, Op::kSignal);
  EXPECT_EQ(obs().frozen_for, ms(3000));
}

TEST_F(LadderBudgetTest, AMissingBudgetSampleKeepsTheFreeze) {
  budget_step(0, 950, false, true);
  step(200, memory(100 * kMiB), std::nullopt, false);  // the budget could not be read
  EXPECT_EQ(action_names(), std::vector<std::string>{"freeze"});
  ladder().finish(ms(400));
  EXPECT_EQ(obs().frozen_for, ms(400));
  EXPECT_EQ(actuator_.count(Op::kFreeze), 2u);  // finish thaws
}

}  // namespace
}  // namespace sandgate::controller
