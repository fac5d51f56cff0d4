#include "replay/trace_stats.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/privileged.h"

namespace sandgate::replay {
namespace {

constexpr uint64_t GiB1 = uint64_t{1} << 30;

Trace testdata(const std::string& name) {
  auto t = read_trace(sandgate::testing::source_dir() + "/replay/testdata/" + name);
  EXPECT_TRUE(t.ok()) << t.error().message();
  return t.ok() ? *t : Trace{};
}

// spiky.jsonl: 10 samples 1 s apart at 1 GiB, 4 GiB at 5 s, inside a compile call 4.5-5.5 s.
TEST(TraceStats, SpikyTraceFiguresByHand) {
  TraceStats s = compute_stats(testdata("spiky.jsonl"), "spiky");
  EXPECT_EQ(s.samples, 10u);
  EXPECT_EQ(s.calls, 1u);
  EXPECT_EQ(s.peak_mem_bytes, 4 * GiB1);
  EXPECT_DOUBLE_EQ(s.avg_mem_bytes, 1.3 * GiB1);
  EXPECT_NEAR(s.peak_to_avg, 4 / 1.3, 1e-12);
  EXPECT_DOUBLE_EQ(s.max_rise_bytes_per_s, 3.0 * GiB1);  // 1 -> 4 GiB in 1 s
  EXPECT_DOUBLE_EQ(s.max_drop_bytes_per_s, -3.0 * GiB1);
  EXPECT_DOUBLE_EQ(s.max_change_bytes_per_s, 3.0 * GiB1);
  EXPECT_DOUBLE_EQ(s.sampled_s, 9.0);
  EXPECT_DOUBLE_EQ(s.in_calls_s, 1.0);
  EXPECT_DOUBLE_EQ(s.time_in_calls_share, 1.0 / 9);
  EXPECT_EQ(s.by_intent.at("compile").calls, 1u);
  EXPECT_DOUBLE_EQ(s.by_intent.at("compile").seconds, 1.0);
  EXPECT_EQ(s.peak_cpu_millicores, 2000u);
  EXPECT_DOUBLE_EQ(s.avg_cpu_millicores, (9 * 100 + 2000) / 10.0);
  // Every sample is above 300 MB; one of ten is inside the call.
  EXPECT_EQ(s.peak_samples, 10u);
  EXPECT_EQ(s.peak_samples_in_calls, 1u);
  EXPECT_DOUBLE_EQ(s.peak_samples_in_calls_share, 0.1);
}

TEST(TraceStats, PeakThresholdSelectsTheBurst) {
  TraceStats s = compute_stats(testdata("spiky.jsonl"), "spiky", 2 * GiB1);
  EXPECT_EQ(s.peak_samples, 1u);
  EXPECT_EQ(s.peak_samples_in_calls, 1u);
  EXPECT_DOUBLE_EQ(s.peak_samples_in_calls_share, 1.0);
  // Positive twin of "strictly above": a threshold equal to the peak counts nothing.
  EXPECT_EQ(compute_stats(testdata("spiky.jsonl"), "spiky", 4 * GiB1).peak_samples, 0u);
}

TEST(TraceStats, FlatTraceHasNoChangeAndRatioOne) {
  TraceStats s = compute_stats(testdata("flat.jsonl"), "flat");
  EXPECT_EQ(s.samples, 11u);
  EXPECT_DOUBLE_EQ(s.peak_to_avg, 1.0);
  EXPECT_DOUBLE_EQ(s.max_change_bytes_per_s, 0.0);
  EXPECT_DOUBLE_EQ(s.time_in_calls_share, 0.2);  // edit call 2-4 s of 10 s
  EXPECT_EQ(s.peak_samples_in_calls, 3u);        // samples at 2, 3, 4 s (bounds inclusive)
}

TEST(TraceStats, OverlappingCallsCountOnceInTimeButInEachIntent) {
  Trace t;
  t.samples = {{0, 1, 0, 0, 0, std::nullopt}, {10'000, 1, 0, 0, 0, std::nullopt}};
  t.calls = {{"task", "default", "Task", "explore", 1000, 5000},
             {"sub", "search", "Grep", "x", 2000, 3000, true},
             {"late", "test", "Bash", "pytest", 4000, 12'000}};  // clipped at the last sample
  TraceStats s = compute_stats(t, "overlap");
  EXPECT_DOUBLE_EQ(s.in_calls_s, 9.0);  // [1, 10] s
  EXPECT_DOUBLE_EQ(s.time_in_calls_share, 0.9);
  EXPECT_DOUBLE_EQ(s.by_intent.at("default").seconds, 4.0);
  EXPECT_DOUBLE_EQ(s.by_intent.at("search").seconds, 1.0);
  EXPECT_DOUBLE_EQ(s.by_intent.at("test").seconds, 8.0);
  EXPECT_DOUBLE_EQ(s.duration_s, 12.0);
}

TEST(TraceStats, UnionOfIntervals) {
  EXPECT_EQ(union_ms({}, 0, 100), 0);
  EXPECT_EQ(union_ms({{10, 20}, {15, 30}, {40, 50}}, 0, 100), 30);
  EXPECT_EQ(union_ms({{10, 20}, {20, 30}}, 0, 100), 20);    // touching
  EXPECT_EQ(union_ms({{-10, 20}, {90, 200}}, 0, 100), 30);  // clipped both ends
}

TEST(TraceStats, SummaryPoolsSharesAndTakesMedianOfRatios) {
  std::vector<TraceStats> each = {compute_stats(testdata("spiky.jsonl"), "spiky", 2 * GiB1),
                                  compute_stats(testdata("flat.jsonl"), "flat", 2 * GiB1)};
  StatsSummary sum = summarize(each);
  EXPECT_EQ(sum.traces, 2u);
  EXPECT_EQ(sum.pooled.samples, 21u);
  EXPECT_EQ(sum.pooled.peak_mem_bytes, 4 * GiB1);
  EXPECT_DOUBLE_EQ(sum.peak_to_avg_max, 4 / 1.3);
  EXPECT_EQ(sum.peak_to_avg_max_trace, "spiky");
  EXPECT_DOUBLE_EQ(sum.peak_to_avg_median, (4 / 1.3 + 1.0) / 2);
  EXPECT_DOUBLE_EQ(sum.pooled.time_in_calls_share, (1.0 + 2.0) / (9.0 + 10.0));
  EXPECT_DOUBLE_EQ(sum.pooled.avg_mem_bytes, (13.0 + 11.0) * GiB1 / 21);
  Json j = to_json(sum);
  EXPECT_EQ(j["traces"], 2);
  EXPECT_FALSE(j.contains("peak_to_avg"));
  EXPECT_EQ(j["calls_by_intent"]["compile"]["calls"], 1);
}

}  // namespace
}  // namespace sandgate::replay
