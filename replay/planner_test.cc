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
  // CPU: 100 millicores each, 2 cores -> 20 runs by any CPU reservation and by demand; memory
  // (10) binds.
  auto cpu_plan = plan_capacity(profiles, options(10, 2, 0.01, 1000), policy);
  ASSERT_TRUE(cpu_plan.ok());
  for (const auto& f : cpu_plan->fits) {
    EXPECT_EQ(f.fits_by_cpu, 20u) << f.policy;
    EXPECT_EQ(f.fits_by_memory, 10u) << f.policy;
    EXPECT_EQ(f.fits_by_cpu_demand, 20u) << f.policy;
    EXPECT_EQ(f.fits, 10u) << f.policy;
    EXPECT_EQ(f.binding, "memory") << f.policy;
    EXPECT_EQ(f.p_cpu_exceeded, 0.0) << f.policy;
    EXPECT_EQ(f.cpu_slowdown_mean, 1.0) << f.policy;
  }
}

// 1 GiB and 500 millicores throughout, host 64 GiB and 4 cores: memory allows 64 runs, CPU
// 4000 / 500 = 8 (9 x 500 > 4000). The headline is CPU's, on every row.
TEST(Planner, CpuBindsWhenDemandFillsTheCoresFirst) {
  const auto& policy = controller::default_policy();
  std::vector<TraceProfile> profiles = {profile_trace(flat(1, 500), "busy", policy)};
  auto plan = plan_capacity(profiles, options(64, 4, 0.01, 1000), policy);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  for (const auto& f : plan->fits) {
    SCOPED_TRACE(f.policy);
    EXPECT_EQ(f.fits_by_memory, 64u);
    EXPECT_EQ(f.fits_by_cpu_demand, 8u);
    EXPECT_EQ(f.fits, 8u);
    EXPECT_FALSE(f.at_least);
    EXPECT_EQ(f.binding, "cpu");
    EXPECT_EQ(f.p_cpu_exceeded, 0.0);  // 8 x 500 = 4000 is not more than the cores
    EXPECT_EQ(f.p_memory_exceeded, 0.0);
    EXPECT_EQ(f.cpu_slowdown_mean, 1.0);
    EXPECT_EQ(f.cpu_slowdown_p95, 1.0);
    EXPECT_NEAR(f.used_bytes, 8 * G, 1);  // the figures follow the headline N
    // The CPU curve crosses the risk where the CPU answer is: 0 up to 8, 1 from 9.
    ASSERT_GE(f.cpu_curve.size(), 9u);
    EXPECT_EQ(f.cpu_curve[7].runs, 8u);
    EXPECT_EQ(f.cpu_curve[7].risk, 0.0);
    EXPECT_EQ(f.cpu_curve[8].risk, 1.0);
  }
  // The curves run to where memory's last trial exceeded (65), the CPU's included.
  EXPECT_EQ(plan->curve_max_runs, 65u);
  Json j = to_json(*plan);
  EXPECT_EQ(j["schema_version"], 2);
  EXPECT_EQ(j["cpu_overcommit"], 1.0);
  EXPECT_EQ(j["fits"][0]["fits"], 8);
  EXPECT_EQ(j["fits"][0]["fits_by_memory"], 64);
  EXPECT_EQ(j["fits"][0]["fits_by_cpu_demand"], 8);
  EXPECT_EQ(j["fits"][0]["binding"], "cpu");
  EXPECT_EQ(j["fits"][0]["cpu_risk_curve"][8][1], 1.0);
}

// The same runs with CPU declared compressible: --cpu-overcommit 1.5 accepts demand up to
// 6000 millicores on 4 cores, so 12 runs, every trial 12 x 500 / 4000 = 1.5 times slower.
// At 2.0 CPU would allow 16, so memory (10 GiB host: 10 runs) binds, at 5000 / 4000 = 1.25.
TEST(Planner, OvercommitLetsCpuDemandPassTheCoresAndSaysWhatItCosts) {
  const auto& policy = controller::default_policy();
  std::vector<TraceProfile> profiles = {profile_trace(flat(1, 500), "busy", policy)};
  PlanOptions o = options(64, 4, 0.01, 1000);
  o.cpu_overcommit = 1.5;
  auto plan = plan_capacity(profiles, o, policy);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  for (const auto& f : plan->fits) {
    SCOPED_TRACE(f.policy);
    EXPECT_EQ(f.fits_by_cpu_demand, 12u);
    EXPECT_EQ(f.fits, 12u);
    EXPECT_EQ(f.binding, "cpu");
    EXPECT_EQ(f.p_cpu_exceeded, 1.0);  // past the cores every time: that is the overcommit
    EXPECT_DOUBLE_EQ(f.cpu_slowdown_mean, 1.5);
    EXPECT_DOUBLE_EQ(f.cpu_slowdown_p95, 1.5);
    EXPECT_EQ(f.fits_by_cpu, 8u);  // the reservation answer knows no overcommit
  }
  EXPECT_EQ(to_json(*plan)["cpu_overcommit"], 1.5);

  o = options(10, 4, 0.01, 1000);
  o.cpu_overcommit = 2;
  auto mem = plan_capacity(profiles, o, policy);
  ASSERT_TRUE(mem.ok()) << mem.error().message();
  for (const auto& f : mem->fits) {
    SCOPED_TRACE(f.policy);
    EXPECT_EQ(f.fits_by_memory, 10u);
    EXPECT_EQ(f.fits_by_cpu_demand, 16u);
    EXPECT_EQ(f.fits, 10u);
    EXPECT_EQ(f.binding, "memory");
    EXPECT_DOUBLE_EQ(f.cpu_slowdown_mean, 1.25);
    EXPECT_DOUBLE_EQ(f.cpu_slowdown_p95, 1.25);
  }
  // Exactly at the boundary both bind: 8 runs of 500 millicores on 4 cores, 8 GiB host.
  auto both = plan_capacity(profiles, options(8, 4, 0.01, 1000), policy);
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(fit(*both, "actual").binding, "both");
  EXPECT_EQ(fit(*both, "actual").fits, 8u);
}

// Two traces, 1000 and 3000 millicores (1 GiB each), picked at random; 4 cores, overcommit 2
// (8000 millicores), risk 10%. N runs with b heavy ask 1000 N + 2000 b. N=2 never exceeds 8000
// (at most 6000); N=3 exceeds iff b=3: 1/8 > 10%. So N=2, and its slow-down: b=2 (1/4 of the
// instants) asks 6000 = 1.5x the cores, else at most 4000: mean 3/4 + 1/4 x 1.5 = 1.125, and
// the 95th percentile 1.5 (1.5 is a quarter of the instants).
TEST(Planner, SlowDownIsTheTimeMeanAndP95OfTheStretch) {
  const auto& policy = controller::default_policy();
  std::vector<TraceProfile> profiles = {profile_trace(flat(1, 1000), "light", policy),
                                        profile_trace(flat(1, 3000), "heavy", policy)};
  PlanOptions o = options(64, 4, 0.1, 20000);
  o.cpu_overcommit = 2;
  auto plan = plan_capacity(profiles, o, policy);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  const PolicyFit& f = fit(*plan, "actual");
  EXPECT_EQ(f.fits_by_cpu_demand, 2u);
  EXPECT_EQ(f.fits, 2u);
  EXPECT_EQ(f.binding, "cpu");
  EXPECT_NEAR(f.cpu_slowdown_mean, 1.125, 0.01);
  EXPECT_DOUBLE_EQ(f.cpu_slowdown_p95, 1.5);
  EXPECT_NEAR(f.p_cpu_exceeded, 0.25, 0.015);  // b=2: past the cores, within the overcommit
  ASSERT_EQ(f.cpu_curve[2].runs, 3u);
  EXPECT_NEAR(f.cpu_curve[2].risk, 0.125, 0.01);
}

// Per-call rows count the CPU demand the controller lets through: a 4000-millicore burst in a
// compile call (grant 2 cores) is held to the 100-millicore baseline + 2000. Host 2.2 cores,
// risk 5%. actual: one run asks 4000 > 2200 a tenth of the time: N=0. per-call: one run asks
// at most 2100; two exceed only when both burst (200 + 2000 k > 2200 iff k = 2: 1%); three
// when one does (300 + 2000 k > 2200 iff k >= 1: 27.1%). So N=2.
TEST(Planner, PerCallRowsCountTheCpuTheGrantLetsThrough) {
  const auto& policy = controller::default_policy();
  Trace t = spiky();
  t.samples[5].cpu_millicores = 4000;
  std::vector<TraceProfile> profiles = {profile_trace(t, "spiky-cpu", policy)};
  auto plan = plan_capacity(profiles, options(64, 2.2, 0.05, 20000), policy);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  EXPECT_EQ(fit(*plan, "actual").fits_by_cpu_demand, 0u);
  EXPECT_EQ(fit(*plan, "actual").fits, 0u);
  EXPECT_EQ(fit(*plan, "actual").cpu_slowdown_mean, 1.0);  // nothing runs, nothing slows
  EXPECT_EQ(fit(*plan, "per-call").fits_by_cpu_demand, 2u);
  EXPECT_EQ(fit(*plan, "per-call-grant").fits_by_cpu_demand, 2u);
  EXPECT_EQ(fit(*plan, "per-call").binding, "cpu");
}

TEST(Planner, CpuOvercommitIsARatioOfAtLeastOne) {
  EXPECT_EQ(*parse_cpu_overcommit("1"), 1.0);
  EXPECT_EQ(*parse_cpu_overcommit("1.5"), 1.5);
  EXPECT_EQ(*parse_cpu_overcommit("3"), 3.0);
  for (const char* bad : {"", "0.5", "0", "-2", "abc", "1.5x", " 1.5", "nan", "inf", "1e999"}) {
    auto r = parse_cpu_overcommit(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.error().message(), ::testing::HasSubstr("expected a ratio >= 1")) << bad;
  }
  auto pct = parse_cpu_overcommit("150%");
  ASSERT_FALSE(pct.ok());
  EXPECT_THAT(pct.error().message(), ::testing::HasSubstr("write the ratio: 1.5 for 150%"));
  EXPECT_THAT(parse_cpu_overcommit("0.5").error().message(),
              ::testing::HasSubstr("lower --host-cpus"));
  // The planner refuses what the parser would.
  const auto& policy = controller::default_policy();
  std::vector<TraceProfile> profiles = {profile_trace(flat(1), "a", policy)};
  PlanOptions o = options(10, 1, 0.01, 1000);
  o.cpu_overcommit = 0.9;
  EXPECT_FALSE(plan_capacity(profiles, o, policy).ok());
  o.cpu_overcommit = std::nan("");
  EXPECT_FALSE(plan_capacity(profiles, o, policy).ok());
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

  // 10 cores: 10 runs (100 millicores, 2000 in the burst) exceed them only when 5 burst
  // (0.16%), so CPU allows more than memory on every row and memory's answers are the
  // headline; the CPU columns exceed after a few dozen runs, so each trial stops early.
  auto plan = plan_capacity(profiles, options(13.5, 10, 0.01, 100000), policy);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  for (const auto& f : plan->fits) {
    EXPECT_EQ(f.binding, "memory") << f.policy;
    EXPECT_EQ(f.fits, f.fits_by_memory) << f.policy;
    EXPECT_GT(f.fits_by_cpu_demand, f.fits_by_memory) << f.policy;
  }
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
    ASSERT_EQ(f.cpu_curve.size(), plan->curve_max_runs) << f.policy;
    double last = 0;
    for (size_t i = 0; i < f.curve.size(); ++i) {
      EXPECT_EQ(f.curve[i].runs, i + 1) << f.policy;
      EXPECT_GE(f.curve[i].risk, last) << f.policy << " risk falls at N=" << i + 1;
      last = f.curve[i].risk;
    }
    EXPECT_LE(f.curve[f.fits - 1].risk, 0.01) << f.policy;
    EXPECT_GT(f.curve[f.fits].risk, 0.01) << f.policy;
    EXPECT_LE(f.cpu_curve[f.fits_by_cpu_demand - 1].risk, 0.01) << f.policy;
    EXPECT_GT(f.cpu_curve[f.fits_by_cpu_demand].risk, 0.01) << f.policy;
  }

  // 2 cores: two runs ask 2100 > 2000 when either bursts (1 - 0.9^2 = 19%; the burst is within
  // the compile grant's 2 cores, so per-call rows ask the same). One run, on every row: CPU
  // binds, and the memory answers stay what memory alone admits.
  auto cpu = plan_capacity(profiles, options(13.5, 2, 0.01, 10000), policy);
  ASSERT_TRUE(cpu.ok()) << cpu.error().message();
  for (const auto& f : cpu->fits) {
    EXPECT_EQ(f.fits_by_cpu_demand, 1u) << f.policy;
    EXPECT_EQ(f.fits, 1u) << f.policy;
    EXPECT_EQ(f.binding, "cpu") << f.policy;
    EXPECT_EQ(f.fits_by_memory, fit(*plan, f.policy).fits) << f.policy;
    EXPECT_EQ(f.p_memory_exceeded, 0.0) << f.policy;  // one run never exceeds 13.5 GiB
    EXPECT_NEAR(f.cpu_curve[1].risk, 0.19, 0.012) << f.policy;
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
