// The replay plan (pure): segments, baselines, absorbed calls, time scaling and silence
// compression, on small synthetic traces (labelled so in their headers).
#include "replay/replayer.h"

#include <gtest/gtest.h>

namespace sandgate::replay {
namespace {

constexpr uint64_t MB = 1'000'000;

Sample sample(int64_t t, uint64_t mem, uint64_t cpu = 0, std::optional<std::string> call = std::nullopt,
              uint64_t io = 0, uint64_t pids = 2) {
  Sample s;
  s.t_ms = t;
  s.mem_bytes = mem;
  s.cpu_millicores = cpu;
  s.io_bytes = io;
  s.pids = pids;
  s.call = std::move(call);
  return s;
}

// 0..10 s at 1 s: 100 MB resident; a compile call 2-5 s bursting to 600 MB; then a quiet
// stretch; a search call 8-9 s at 150 MB.
Trace burst_trace() {
  Trace t;
  t.header.source = "synthetic (replayer_test)";
  t.header.interval_ms = 1000;
  t.calls = {{"c1", "compile", "exec", "make", 2000, 5000}, {"c2", "search", "exec", "grep", 8000, 9000}};
  t.samples = {sample(1000, 100 * MB), sample(2000, 100 * MB),
               sample(3000, 400 * MB, 1800, "c1", 1000, 5), sample(4000, 600 * MB, 1900, "c1", 5000, 9),
               sample(5000, 300 * MB, 500, "c1", 6000, 3), sample(6000, 120 * MB, 0, {}, 6000),
               sample(7000, 120 * MB, 0, {}, 6000), sample(8000, 120 * MB, 0, {}, 6000),
               sample(9000, 150 * MB, 900, "c2", 6000, 3), sample(10000, 110 * MB, 0, {}, 6000)};
  return t;
}

TEST(PlanReplay, SegmentsAreTheTraceAboveTheHeldBaseline) {
  auto plan = plan_replay(burst_trace(), "t", {});
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  ASSERT_EQ(plan->calls.size(), 2u);
  const PlannedCall& c1 = plan->calls[0];
  EXPECT_EQ(c1.intent, "compile");
  EXPECT_EQ(c1.start_ms, 2000);
  EXPECT_EQ(c1.end_ms, 5000);
  EXPECT_EQ(c1.baseline_bytes, 100 * MB);
  EXPECT_EQ(c1.trace_peak_bytes, 600 * MB);
  EXPECT_EQ(c1.target_peak_bytes(), 500 * MB);
  ASSERT_EQ(c1.segment.points.size(), 3u);
  // Each sample's level starts at the previous sample (the interval it describes).
  EXPECT_EQ(c1.segment.points[0].t_ms, 0);
  EXPECT_EQ(c1.segment.points[0].mem_bytes, 300 * MB);
  EXPECT_EQ(c1.segment.points[1].t_ms, 1000);
  EXPECT_EQ(c1.segment.points[1].mem_bytes, 500 * MB);
  EXPECT_EQ(c1.segment.points[2].t_ms, 2000);
  EXPECT_EQ(c1.segment.points[2].mem_bytes, 200 * MB);
  EXPECT_EQ(c1.segment.points[1].cpu_millicores, 1900u);
  // pids above the run's own (2), io since the call began (the last sample before it: 0).
  EXPECT_EQ(c1.segment.points[1].pids, 7u);
  EXPECT_EQ(c1.segment.points[2].io_bytes, 6000u);
  EXPECT_EQ(c1.segment.end_ms, 3000);
  // Burst onset: the first point at half of the peak or more.
  EXPECT_EQ(c1.burst_onset_ms(), 0);

  const PlannedCall& c2 = plan->calls[1];
  EXPECT_EQ(c2.baseline_bytes, 120 * MB);
  EXPECT_EQ(c2.target_peak_bytes(), 30 * MB);
  EXPECT_EQ(c2.segment.points[0].io_bytes, 0u);  // io 6000 at the call's start already

  // The hold follows the samples outside calls; levels repeat only when they change.
  ASSERT_GE(plan->hold.size(), 3u);
  EXPECT_EQ(plan->hold[0].at_ms, 1000);
  EXPECT_EQ(plan->hold[0].bytes, 100 * MB);
  EXPECT_EQ(plan->hold[1].at_ms, 6000);
  EXPECT_EQ(plan->hold[1].bytes, 120 * MB);
  EXPECT_EQ(plan->hold.back().bytes, 110 * MB);
  EXPECT_EQ(plan->duration_ms, 10000);
  EXPECT_DOUBLE_EQ(plan->speedup(), 1.0);
}

TEST(PlanReplay, TimeScaleDividesTimesAndKeepsLevels) {
  ReplayTiming timing;
  timing.time_scale = 2;
  auto plan = plan_replay(burst_trace(), "t", timing);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->duration_ms, 5000);
  EXPECT_EQ(plan->calls[0].start_ms, 1000);
  EXPECT_EQ(plan->calls[0].end_ms, 2500);
  EXPECT_EQ(plan->calls[0].segment.points[1].t_ms, 500);
  EXPECT_EQ(plan->calls[0].target_peak_bytes(), 500 * MB);
  EXPECT_DOUBLE_EQ(plan->speedup(), 2.0);
}

TEST(PlanReplay, CompressSilenceShortensOnlyLongGaps) {
  ReplayTiming timing;
  timing.compress_silence = true;
  timing.max_silence = std::chrono::seconds(1);
  auto plan = plan_replay(burst_trace(), "t", timing);
  ASSERT_TRUE(plan.ok());
  // Gaps: 0-2 s -> 1 s; call 3 s; 5-8 s -> 1 s; call 1 s; 9-10 s stays 1 s.
  EXPECT_EQ(plan->calls[0].start_ms, 1000);
  EXPECT_EQ(plan->calls[0].end_ms, 4000);
  EXPECT_EQ(plan->calls[1].start_ms, 5000);
  EXPECT_EQ(plan->calls[1].end_ms, 6000);
  EXPECT_EQ(plan->duration_ms, 7000);
  EXPECT_NEAR(plan->speedup(), 10.0 / 7.0, 1e-9);
  // The call keeps its own length and shape.
  EXPECT_EQ(plan->calls[0].segment.points[2].t_ms, 2000);
  // Hold changes inside a squeezed gap are squeezed with it (6 s of 5-8 s -> 1/3 of 4-5 s).
  EXPECT_EQ(plan->hold[1].at_ms, 4333);
}

TEST(PlanReplay, CallsStartingInsideAnotherAreAbsorbed) {
  Trace t = burst_trace();
  t.calls.push_back({"c1a", "search", "Grep", "x", 2500, 5500});  // a sub-agent's call in c1
  t.calls.push_back({"c1b", "edit", "Edit", "y", 3000, 3100});
  auto plan = plan_replay(t, "t", {});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->calls.size(), 2u);
  EXPECT_EQ(plan->absorbed_calls, 2u);
  EXPECT_EQ(plan->trace_calls, 4u);
  EXPECT_EQ(plan->calls[0].absorbed, 2u);
  EXPECT_EQ(plan->calls[0].trace_end_ms, 5500);  // extended to the overlapping call's end
}

TEST(PlanReplay, ACallShorterThanAnIntervalTakesTheSampleAfterIt) {
  Trace t;
  t.header.interval_ms = 100;
  t.calls = {{"c1", "search", "exec", "grep", 120, 150}};
  t.samples = {sample(100, 10 * MB), sample(200, 14 * MB, 300), sample(300, 10 * MB)};
  auto plan = plan_replay(t, "t", {});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->calls[0].segment.points.size(), 1u);
  EXPECT_EQ(plan->calls[0].segment.points[0].mem_bytes, 4 * MB);
  EXPECT_EQ(plan->calls[0].segment.points[0].cpu_millicores, 300u);
  EXPECT_EQ(plan->calls[0].segment.end_ms, 30);
}

TEST(PlanReplay, UnmeasuredFieldsAreNotTargets) {
  Trace t = burst_trace();
  t.header.unmeasured = {"pids", "io_bytes"};
  auto plan = plan_replay(t, "t", {});
  ASSERT_TRUE(plan.ok());
  for (const auto& p : plan->calls[0].segment.points) {
    EXPECT_EQ(p.pids, 0u);
    EXPECT_EQ(p.io_bytes, 0u);
  }
}

TEST(PlanReplay, RefusesWhatCannotBeReplayed) {
  Trace empty;
  EXPECT_FALSE(plan_replay(empty, "e", {}).ok());
  ReplayTiming zero;
  zero.time_scale = 0;
  auto r = plan_replay(burst_trace(), "t", zero);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("time-scale"), std::string::npos);
}

TEST(FitSegment, SqueezesTimesIntoTheRoomLeftAndKeepsLevels) {
  workloads::Segment s;
  s.end_ms = 1000;
  s.points = {{0, 10, 0, 1, 0}, {500, 50, 0, 1, 0}, {900, 20, 0, 1, 0}};
  auto f = fit_segment(s, 100);
  EXPECT_EQ(f.end_ms, 900);
  ASSERT_EQ(f.points.size(), 3u);
  EXPECT_EQ(f.points[1].t_ms, 450);
  EXPECT_EQ(f.points[1].mem_bytes, 50u);
  EXPECT_EQ(f.points[2].t_ms, 810);
  EXPECT_EQ(fit_segment(s, 0), s);
  auto all = fit_segment(s, 5000);  // more overhead than call: an instant segment
  EXPECT_EQ(all.end_ms, 0);
  ASSERT_EQ(all.points.size(), 1u);
  EXPECT_EQ(all.points[0].mem_bytes, 20u);  // the later level wins at one instant
}

}  // namespace
}  // namespace sandgate::replay
