#include "replay/planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "tests/support/privileged.h"

namespace sandgate::replay {
namespace {

constexpr double G = double(uint64_t{1} << 30);

// A trace with no calls holding `gib` GiB and `millicores` for 10 s.
Trace flat(double gib, uint64_t millicores = 100) {
  Trace t;
  t.header.source = "synthetic";
  t.header.interval_ms = 1000;
  for (int64_t ms = 0; ms < 10'000; ms += 1000)
    t.samples.push_back({ms, static_cast<uint64_t>(gib * G), millicores, 1, 0, std::nullopt});
  return t;
}

Trace spiky() {
  auto t = read_trace(sandgate::testing::source_dir() + "/replay/testdata/spiky.jsonl");
  EXPECT_TRUE(t.ok()) << t.error().message();
  return t.ok() ? *t : Trace{};
}

const PolicyFit& fit(const Plan& p, const std::string& name) {
  for (const auto& f : p.fits)
    if (f.policy == name) return f;
  ADD_FAILURE() << "no " << name;
  return p.fits.front();
}

PlanOptions options(double host_gib, double cpus, double risk, size_t trials) {
  PlanOptions o;
  o.host_memory_bytes = static_cast<uint64_t>(host_gib * G);
  o.host_cpus = cpus;
  o.risk = risk;
  o.trials = trials;
  o.seed = 7;
  return o;
}

TEST(Planner, IdenticalFlatTracesFitExactlyHostOverSize) {
  const auto& policy = controller::default_policy();
  std::vector<TraceProfile> profiles = {profile_trace(flat(1), "a", policy)};
  auto plan = plan_capacity(profiles, options(10, 100, 0.01, 1000), policy);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  // 10 x 1 GiB = 10 GiB is not more than the host; 11 is. Every model agrees on a flat trace.
  for (const auto& f : plan->fits) {
    EXPECT_EQ(f.fits, 10u) << f.policy;
    EXPECT_EQ(f.p_memory_exceeded, 0.0) << f.policy;
  }
  // CPU: 100 millicores each, 2 cores -> 20 runs by any CPU reservation.
  auto cpu_plan = plan_capacity(profiles, options(10, 2, 0.01, 1000), policy);
  ASSERT_TRUE(cpu_plan.ok());
  EXPECT_EQ(fit(*cpu_plan, "static-peak").fits_by_cpu, 20u);
  EXPECT_EQ(fit(*cpu_plan, "static-peak").p_cpu_exceeded, 0.0);
}

TEST(Planner, TwoFlatTracesPickedAtRandom) {
  // 1 GiB and 3 GiB, host 10 GiB. N runs with b of them 3 GiB hold N + 2b GiB.
  // N=4 exceeds iff b=4: 1/16 = 0.0625. N=5 exceeds iff b>=3: 1/2.
  const auto& policy = controller::default_policy();
  std::vector<TraceProfile> profiles = {profile_trace(flat(1), "one", policy),
                                        profile_trace(flat(3), "three", policy)};
  auto strict = plan_capacity(profiles, options(10, 2, 0.01, 20000), policy);
  ASSERT_TRUE(strict.ok());
  EXPECT_EQ(fit(*strict, "static-peak").fits, 3u);  // 0.0625 > 0.01
  auto loose = plan_capacity(profiles, options(10, 2, 0.1, 20000), policy);
  ASSERT_TRUE(loose.ok());
  EXPECT_EQ(fit(*loose, "static-peak").fits, 4u);  // 0.0625 <= 0.1 < 0.5
  EXPECT_NEAR(fit(*loose, "static-peak").p_memory_exceeded, 0.0625, 0.006);
  // Reserved = used for flat traces: 4 runs x 2 GiB mean.
  EXPECT_NEAR(fit(*loose, "static-peak").reserved_bytes, 8 * G, 1);
  EXPECT_NEAR(fit(*loose, "static-peak").used_bytes, 8 * G, 1);
}

// spiky.jsonl: 1 GiB, 4 GiB for one second of a 10 s period (10% of the time: the 5 s sample
// stands for 4.5-5.5 s), exactly the compile call 4.5-5.5 s; average of the samples 1.3 GiB.
// Host 13.5 GiB, risk 1%.
TEST(Planner, SpikyTraceAnswersByHand) {
  const auto& policy = controller::default_policy();  // compile grant: memory_max 2 GiB, 2 cores
  std::vector<TraceProfile> profiles = {profile_trace(spiky(), "spiky", policy)};
  const TraceProfile& p = profiles[0];
  EXPECT_EQ(p.period_ms, 10'000);
  EXPECT_DOUBLE_EQ(p.baseline_mem, 1 * G);
  EXPECT_DOUBLE_EQ(p.mean_mem, 1.3 * G);
  EXPECT_DOUBLE_EQ(p.mean_mem_env, 1.2 * G);  // 3 GiB for the 1 s call, 1 GiB otherwise
  EXPECT_DOUBLE_EQ(p.call_ms, 1000);
  EXPECT_DOUBLE_EQ(p.over_grant_ms, 1000);  // the whole call: 4 GiB > 1 + 2 GiB
  EXPECT_DOUBLE_EQ(p.over_avg_share, 0.1);
  EXPECT_DOUBLE_EQ(p.first_over_avg_share, 0.5);

  // 2 cores: the CPU columns exceed after ~20 runs, so each trial stops early.
  auto plan = plan_capacity(profiles, options(13.5, 2, 0.01, 100000), policy);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  // static-peak: 3 x 4 = 12 <= 13.5 < 16.
  EXPECT_EQ(fit(*plan, "static-peak").fits, 3u);
  EXPECT_EQ(fit(*plan, "static-peak").p_memory_exceeded, 0.0);
  // static-average: 10 x 1.3 = 13 <= 13.5 < 14.3. Unenforced, 10 runs exceed 13.5 GiB when
  // two or more are in their burst: 1 - 0.9^10 - 10 x 0.1 x 0.9^9 = 0.2639.
  const PolicyFit& avg = fit(*plan, "static-average");
  EXPECT_EQ(avg.fits, 10u);
  EXPECT_NEAR(avg.p_memory_exceeded, 0.2639, 0.005);
  EXPECT_DOUBLE_EQ(avg.extra["runs_crossing_limit_share"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(avg.extra["time_over_limit_share"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(avg.extra["run_time_lost_share"].get<double>(), 0.5);
  // per-call: the burst is held to 1 + 2 GiB, so N + 2k GiB with k ~ Bin(N, 0.1). N=7 exceeds
  // iff k>=4: 0.0027; N=8 iff k>=3: 0.038. Here the envelope is the same curve.
  const PolicyFit& pc = fit(*plan, "per-call");
  EXPECT_EQ(pc.fits, 7u);
  EXPECT_NEAR(pc.p_memory_exceeded, 0.0027, 0.001);
  EXPECT_EQ(fit(*plan, "per-call-grant").fits, 7u);
  EXPECT_NEAR(pc.extra["over_grant_call_time_share"].get<double>(), 1.0, 1e-12);
  // actual: N + 3k. N=5 exceeds iff k>=3: 0.0086; N=6 iff k>=3: 0.0159.
  EXPECT_EQ(fit(*plan, "actual").fits, 5u);
  // Ordering the issue expects on bursty traces: per-call packs more than static-peak and is
  // safer than static-average.
  EXPECT_GT(pc.fits, fit(*plan, "static-peak").fits);
  EXPECT_LT(pc.p_memory_exceeded, avg.p_memory_exceeded);

  // The risk curves behind the fits: every row crosses the risk between its N and N+1 (the
  // grid is every N here: the last first-exceedance is far below kCurvePoints).
  ASSERT_LT(plan->curve_max_runs, kCurvePoints);
  for (const auto& f : plan->fits) {
    ASSERT_EQ(f.curve.size(), plan->curve_max_runs) << f.policy;
    double last = 0;
    for (size_t i = 0; i < f.curve.size(); ++i) {
      EXPECT_EQ(f.curve[i].runs, i + 1) << f.policy;
      EXPECT_GE(f.curve[i].risk, last) << f.policy << " risk falls at N=" << i + 1;
      last = f.curve[i].risk;
    }
    EXPECT_LE(f.curve[f.fits - 1].risk, 0.01) << f.policy;
    EXPECT_GT(f.curve[f.fits].risk, 0.01) << f.policy;
  }
  // per-call at N=8: exceeds iff k>=3, 0.038 (above).
  EXPECT_NEAR(pc.curve[7].risk, 0.038, 0.004);
  // The compile call peaks 3 GiB above the 1 GiB baseline: over its 2 GiB grant.
  ASSERT_EQ(plan->intents.size(), 1u);
  EXPECT_EQ(plan->intents[0].intent, "compile");
  EXPECT_DOUBLE_EQ(plan->intents[0].max, 3 * G);
  EXPECT_DOUBLE_EQ(*plan->intents[0].grant_bytes, 2 * G);
  EXPECT_EQ(plan->intents[0].calls_over_grant, 1u);
}

// 1 GiB throughout, a test call (grant 1.5 GiB) over half of the run that uses nothing extra:
// per-call packs on use, per-call-grant on baseline + grant. Host 10 GiB.
TEST(Planner, GrantEnvelopeReservesWhatCallsDoNotUse) {
  const auto& policy = controller::default_policy();
  Trace t = flat(1);
  t.calls = {{"c1", "test", "Bash", "pytest", 2500, 7500}};  // samples 3..7 s: half the period
  std::vector<TraceProfile> profiles = {profile_trace(t, "idle-test", policy)};
  EXPECT_DOUBLE_EQ(profiles[0].call_ms, 5000);
  EXPECT_DOUBLE_EQ(profiles[0].over_grant_ms, 0);
  auto plan = plan_capacity(profiles, options(10, 8, 0.01, 20000), policy);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  EXPECT_EQ(fit(*plan, "per-call").fits, 10u);
  // N + 1.5k GiB, k ~ Bin(N, 1/2): N=4 never exceeds (at most 10); N=5 does when k>=4: 6/32.
  const PolicyFit& grant = fit(*plan, "per-call-grant");
  EXPECT_EQ(grant.fits, 4u);
  EXPECT_NEAR(grant.reserved_bytes, 4 * 1.75 * G, 1e3);  // mean envelope 1 + 1.5/2 GiB
  EXPECT_NEAR(grant.used_bytes, 4 * G, 1e3);
  EXPECT_EQ(fit(*plan, "static-peak").fits, 10u);
}

TEST(Planner, SameSeedSameAnswerOtherSeedClose) {
  const auto& policy = controller::default_policy();
  std::vector<TraceProfile> profiles = {profile_trace(spiky(), "spiky", policy),
                                        profile_trace(flat(2), "flat", policy)};
  auto o = options(64, 16, 0.01, 5000);
  auto a = plan_capacity(profiles, o, policy);
  auto b = plan_capacity(profiles, o, policy);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(to_json(*a), to_json(*b));
  o.seed = 99;
  auto c = plan_capacity(profiles, o, policy);
  ASSERT_TRUE(c.ok());
  EXPECT_NEAR(double(fit(*c, "per-call").fits), double(fit(*a, "per-call").fits), 2);
}

TEST(Planner, RejectsBadOptions) {
  const auto& policy = controller::default_policy();
  std::vector<TraceProfile> profiles = {profile_trace(flat(1), "a", policy)};
  EXPECT_FALSE(plan_capacity({}, options(10, 1, 0.01, 1000), policy).ok());
  EXPECT_FALSE(plan_capacity(profiles, options(0, 1, 0.01, 1000), policy).ok());
  EXPECT_FALSE(plan_capacity(profiles, options(10, 0, 0.01, 1000), policy).ok());
  EXPECT_FALSE(plan_capacity(profiles, options(10, 1, 1.5, 1000), policy).ok());
  auto few = plan_capacity(profiles, options(10, 1, 0.001, 1000), policy);
  ASSERT_FALSE(few.ok());
  EXPECT_THAT(few.error().message(), ::testing::HasSubstr("at least 10000"));
}

TEST(Planner, NoFitWhenOneRunExceedsTheHost) {
  const auto& policy = controller::default_policy();
  std::vector<TraceProfile> profiles = {profile_trace(flat(5), "big", policy)};
  auto plan = plan_capacity(profiles, options(4, 8, 0.01, 1000), policy);
  ASSERT_TRUE(plan.ok());
  for (const auto& f : plan->fits) EXPECT_EQ(f.fits, 0u) << f.policy;
}

}  // namespace
}  // namespace sandgate::replay
