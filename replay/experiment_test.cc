// The neighbour experiment's arithmetic on fabricated outcomes: GiB-seconds reserved and used,
// work lost, victim inflation, burst-to-action, fidelity errors, policy resolution.
#include "replay/experiment.h"

#include <gtest/gtest.h>

#include <sstream>

#include "controller/fake_backend.h"
#include "core/test_temp_dir.h"

namespace sandgate::replay {
namespace {

using controller::Termination;
using namespace std::chrono_literals;

ReplayedCall call(const std::string& id, Termination how, Duration wall,
                  std::optional<uint64_t> grant_bytes, uint64_t target_peak,
                  uint64_t observed_peak) {
  ReplayedCall c;
  c.run = "t";
  c.id = id;
  c.intent = "compile";
  c.outcome.termination = how;
  c.outcome.exec.status.exited = how == Termination::kExited;
  c.outcome.exec.status.code = 0;
  c.outcome.exec.wall = wall;
  if (grant_bytes) c.outcome.grant.memory_max = Bytes{*grant_bytes};
  c.target_peak_bytes = target_peak;
  c.outcome.observed.peaks.memory_bytes = observed_peak;
  return c;
}

TEST(Scoring, GibSecondsIsBytesTimesSeconds) {
  EXPECT_DOUBLE_EQ(gib_seconds(1ull << 30, 2.0), 2.0);
  EXPECT_DOUBLE_EQ(gib_seconds(512ull << 20, 3.0), 1.5);
  EXPECT_DOUBLE_EQ(gib_seconds(0, 100.0), 0.0);
}

TEST(Scoring, PerCallReservesGrantsForTheirWallPlusTheBaselineUsed) {
  PolicyChoice p;
  p.label = "per-call";
  p.kind = PolicyKind::kPerCall;
  ReplayedRun r;
  r.calls.push_back(
      call("c1", Termination::kExited, 2s, 2ull << 30, 1ull << 30, 1ull << 30));  // 4 GiB-s
  r.calls.push_back(call("c2", Termination::kExited, 1s, 256ull << 20, 0, 0));    // 0.25
  std::vector<RunUsage> usage = {{"t", /*used*/ 2.0, /*main*/ 0.5, /*duration*/ 10}};
  auto s = score_policy(p, {r}, usage, 0, 0, std::nullopt, std::nullopt);
  ASSERT_TRUE(s.reserved_gib_s);
  EXPECT_DOUBLE_EQ(*s.reserved_gib_s, 4.0 + 0.25 + 0.5);
  EXPECT_DOUBLE_EQ(s.used_gib_s, 2.0);
  EXPECT_DOUBLE_EQ(*s.reserved_over_used, 4.75 / 2.0);
  EXPECT_EQ(s.completed, 2u);
  EXPECT_DOUBLE_EQ(s.work_lost_call_s, 0.0);
}

TEST(Scoring, StaticReservesTheRunLimitForTheRunsWholeLife) {
  PolicyChoice p;
  p.label = "static";
  p.kind = PolicyKind::kStatic;
  p.run_limit_bytes = 1ull << 30;
  ReplayedRun r;
  r.calls.push_back(call("c1", Termination::kExited, 2s, std::nullopt, 0, 0));
  std::vector<RunUsage> usage = {{"a", 1.0, 0.2, 10}, {"b", 1.0, 0.2, 20}};
  auto s = score_policy(p, {r}, usage, 0, 0, std::nullopt, std::nullopt);
  ASSERT_TRUE(s.reserved_gib_s);
  EXPECT_DOUBLE_EQ(*s.reserved_gib_s, 30.0);  // 1 GiB for 10 s + 20 s
  EXPECT_DOUBLE_EQ(*s.reserved_over_used, 15.0);
}

TEST(Scoring, NoneReservesNothingAndSaysSo) {
  PolicyChoice p;
  p.label = "none";
  p.kind = PolicyKind::kNone;
  auto s = score_policy(p, {}, {{"a", 1.0, 0.2, 10}}, 0, 0, std::nullopt, std::nullopt);
  EXPECT_FALSE(s.reserved_gib_s);
  EXPECT_FALSE(s.reserved_over_used);
  EXPECT_DOUBLE_EQ(s.used_gib_s, 1.0);
}

TEST(Scoring, WorkLostIsTheWallOfEveryCallThatDidNotComplete) {
  PolicyChoice p;
  p.kind = PolicyKind::kStatic;
  ReplayedRun r;
  r.calls.push_back(call("ok", Termination::kExited, 5s, std::nullopt, 0, 0));
  r.calls.push_back(call("oom", Termination::kMemoryLimit, 1500ms, std::nullopt, 0, 0));
  r.calls.push_back(call("killed", Termination::kKilled, 2s, std::nullopt, 0, 0));
  r.calls.push_back(call("cancel", Termination::kCancelled, 500ms, std::nullopt, 0, 0));
  r.calls.push_back(call("late", Termination::kTimeout, 1s, std::nullopt, 0, 0));
  auto bad_exit = call("exit1", Termination::kExited, 250ms, std::nullopt, 0, 0);
  bad_exit.outcome.exec.status.code = 1;
  r.calls.push_back(bad_exit);
  ReplayedCall not_run;
  not_run.error = "no such file";
  r.calls.push_back(not_run);
  auto s = score_policy(p, {r}, {}, 0, 0, std::nullopt, std::nullopt);
  EXPECT_EQ(s.calls, 7u);
  EXPECT_EQ(s.completed, 1u);
  EXPECT_EQ(s.killed, 2u);
  EXPECT_EQ(s.cancelled, 1u);
  EXPECT_EQ(s.timed_out, 1u);
  EXPECT_EQ(s.failed_exit, 1u);
  EXPECT_EQ(s.not_run, 1u);
  EXPECT_DOUBLE_EQ(s.work_lost_call_s, 1.5 + 2 + 0.5 + 1 + 0.25);
}

TEST(Scoring, VictimInflationIsOverSolo) {
  VictimLatency solo{1000, 400, 600, 2000, 9000, 0};
  VictimLatency beside{1000, 600, 900, 5000, 20000, 3};
  PolicyChoice p;
  auto s = score_policy(p, {}, {}, 0, 0, beside, solo);
  ASSERT_TRUE(s.victim_p50_inflation && s.victim_p99_inflation);
  EXPECT_DOUBLE_EQ(*s.victim_p50_inflation, 1.5);
  EXPECT_DOUBLE_EQ(*s.victim_p99_inflation, 2.5);
  auto none = score_policy(p, {}, {}, 0, 0, beside, std::nullopt);
  EXPECT_FALSE(none.victim_p99_inflation);
}

TEST(Scoring, BurstToActionStartsAtTheBurstOnsetAndSkipsReleases) {
  PolicyChoice p;
  ReplayedRun r;
  auto c = call("c1", Termination::kExited, 3s, 1ull << 30, 0, 0);
  c.burst_onset_ms = 1000;
  c.outcome.observed.actions = {
      {"unthrottle", 900ms, ""}, {"throttle", 1040ms, "memory at 90%"}, {"kill", 2000ms, ""}};
  r.calls.push_back(c);
  auto d = call("c2", Termination::kExited, 3s, 1ull << 30, 0, 0);
  d.burst_onset_ms = 0;
  d.outcome.observed.actions = {{"freeze", 100ms, "host pressure"}};
  r.calls.push_back(d);
  r.calls.push_back(call("quiet", Termination::kExited, 1s, 1ull << 30, 0, 0));
  auto s = score_policy(p, {r}, {}, 0, 0, std::nullopt, std::nullopt);
  EXPECT_EQ(s.calls_with_action, 2u);
  EXPECT_EQ(s.throttled, 1u);
  EXPECT_EQ(s.frozen, 1u);
  ASSERT_TRUE(s.burst_to_action_median_ms);
  // The median of {40, 100}: the mean of the two middle values (core/stats.h).
  EXPECT_DOUBLE_EQ(*s.burst_to_action_median_ms, 70.0);
  EXPECT_DOUBLE_EQ(*s.burst_to_action_max_ms, 100.0);
}

TEST(Scoring, FidelityScoresCompletedCallsAboveTheFloor) {
  PolicyChoice p;
  ReplayedRun r;
  auto a = call("a", Termination::kExited, 1s, std::nullopt, 100ull << 20, 103ull << 20);  // 3%
  a.achieved = workloads::Achieved{};
  a.achieved->achieved_peak_mem = 99ull << 20;  // 1%
  a.planned_start_ms = 1000;
  a.actual_start_ms = 1020;
  a.planned_end_ms = 2000;
  a.actual_end_ms = 2090;
  r.calls.push_back(a);
  r.calls.push_back(
      call("b", Termination::kExited, 1s, std::nullopt, 200ull << 20, 180ull << 20));  // 10%
  r.calls.push_back(call("small", Termination::kExited, 1s, std::nullopt, 4ull << 20, 9ull << 20));
  r.calls.push_back(
      call("oom", Termination::kMemoryLimit, 1s, std::nullopt, 500ull << 20, 100ull << 20));
  auto s = score_policy(p, {r}, {}, 0, 0, std::nullopt, std::nullopt);
  EXPECT_EQ(s.fidelity.calls_scored, 2u);
  EXPECT_EQ(s.fidelity.calls_below_floor, 1u);
  EXPECT_EQ(s.fidelity.mem_host.n, 2u);
  EXPECT_EQ(s.fidelity.mem_host.within, 1u);
  EXPECT_NEAR(s.fidelity.mem_host.max, 0.10, 1e-9);
  EXPECT_EQ(s.fidelity.mem_self.n, 1u);
  EXPECT_NEAR(s.fidelity.mem_self.max, 0.01, 1e-9);
  // Starts count every call that ran; ends only completed ones (a killed call ends early).
  EXPECT_EQ(s.fidelity.start_ms.n, 4u);
  EXPECT_DOUBLE_EQ(s.fidelity.start_ms.max, 20.0);
  EXPECT_EQ(s.fidelity.end_ms.n, 3u);
  EXPECT_DOUBLE_EQ(s.fidelity.end_ms.max, 90.0);
  EXPECT_EQ(s.fidelity.end_ms.within, 2u);
}

TEST(Scoring, ErrorSummaryIsMedianAndNearestRankP95) {
  auto e = summarize_errors({5, 1, 3, 2, 4}, 3);
  EXPECT_EQ(e.n, 5u);
  EXPECT_DOUBLE_EQ(e.median, 3);
  EXPECT_DOUBLE_EQ(e.p95, 5);
  EXPECT_DOUBLE_EQ(e.max, 5);
  EXPECT_EQ(e.within, 3u);
  EXPECT_EQ(summarize_errors({}, 1).n, 0u);
  // An even count: the median is the mean of the two middle values (core/stats.h), p95 the
  // value of rank ceil(0.95 * 4) = 4.
  auto even = summarize_errors({4, 1, 3, 2}, 1);
  EXPECT_DOUBLE_EQ(even.median, 2.5);
  EXPECT_DOUBLE_EQ(even.p95, 4);
  EXPECT_EQ(even.within, 1u);
}

TEST(Scoring, TableHasPoliciesAsColumnsAndTheTargetsTheScoresUse) {
  PolicyScores a;
  a.label = "none";
  a.kind = PolicyKind::kNone;
  a.fidelity.start_ms = summarize_errors({10, 30, 70}, kTimingFidelityTargetMs);
  PolicyScores b;
  b.label = "default";
  b.fidelity.mem_host = summarize_errors({0.01, 0.2}, kMemoryFidelityTarget);
  std::string t = format_table({a, b}, std::nullopt);
  std::istringstream lines(t);
  std::string header;
  std::getline(lines, header);
  EXPECT_EQ(header.find_first_not_of(' '), header.find("none"));
  EXPECT_NE(header.find("default"), std::string::npos);
  EXPECT_NE(t.find("- (no call >= 32MiB)  10.5%/20.0% 1/2<=5%"), std::string::npos) << t;
  EXPECT_NE(t.find("30/70ms 2/3<=50ms"), std::string::npos) << t;
  EXPECT_EQ(t.find(" \n"), std::string::npos) << "no line ends in spaces:\n" << t;
}

TEST(Policies, StaticIsSizedOnTheAverageAndPeakOnThePeak) {
  auto none = resolve_policy("none", 0, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->kind, PolicyKind::kNone);
  EXPECT_FALSE(none->policy.ladder.enabled);
  EXPECT_FALSE(none->policy.run.memory_max);
  for (const auto& [name, g] : none->policy.intents) EXPECT_EQ(g.timeout.count(), 0) << name;

  auto avg = resolve_policy("static", 300ull << 20, 2ull << 30);
  ASSERT_TRUE(avg.ok());
  EXPECT_EQ(avg->policy.mode, controller::PolicyMode::kStatic);
  EXPECT_EQ(avg->run_limit_bytes, 300ull << 20);
  EXPECT_EQ(avg->policy.run.memory_max->value, 300ull << 20);

  auto peak = resolve_policy("static-peak", 300ull << 20, 2000ull << 20);
  ASSERT_TRUE(peak.ok());
  EXPECT_EQ(peak->run_limit_bytes, 2200ull << 20);

  auto def = resolve_policy("default", 0, 0);
  ASSERT_TRUE(def.ok());
  EXPECT_EQ(def->kind, PolicyKind::kPerCall);

  auto missing = resolve_policy("/nonexistent/policy.json", 0, 0);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find("/nonexistent/policy.json"), std::string::npos);
}

// The cpu weight the victim's tenant cgroup is given when the pass's controller opens its run,
// against an in-memory cgroup backend; and the agents' tenant's, for comparison.
struct TenantWeights {
  std::optional<uint32_t> victim, agents;
};
TenantWeights tenant_weights(const PolicyChoice& choice) {
  sandgate::testing::TempDir tmp;
  std::string tenant = ExperimentOptions{}.victim_tenant;
  controller::ControllerOptions o;
  o.paths.state_dir = tmp / "state";
  o.paths.id_range_dir = tmp / "id-ranges";
  o.paths.work_dir = tmp / "work";
  o.paths.proc = tmp / "proc";
  o.paths.cgroup = tmp / "cgroup";
  o.root = "sgtest";
  o.policy = with_victim_tenant(choice.policy, tenant);
  auto backend = std::make_unique<controller::testing::FakeBackend>(
      controller::testing::FakeBackend::all_features(), tmp / "no-such-cgroupfs");
  auto* fake = backend.get();
  o.backend = std::move(backend);
  auto c = controller::Controller::create(std::move(o));
  EXPECT_TRUE(c.ok()) << c.error().message();
  TenantWeights w;
  if (!c.ok()) return w;
  const std::pair<std::string, std::optional<uint32_t>*> tenants[] = {{tenant, &w.victim},
                                                                      {"default", &w.agents}};
  for (const auto& [name, out] : tenants) {
    auto run = (*c)->begin_run(name, "r-" + name);
    EXPECT_TRUE(run.ok()) << run.error().message();
    if (!run.ok()) continue;
    auto limits = fake->limits_of("sgtest/" + name);
    if (!limits.empty()) *out = limits.back().cpu_weight;
    EXPECT_TRUE((*c)->end_run(std::move(run).value()).ok());
  }
  return w;
}

TEST(Policies, PerCallPolicyWeightsTheVictimsTenantAboveTheAgents) {
  auto def = resolve_policy("default", 0, 0);
  ASSERT_TRUE(def.ok());
  TenantWeights w = tenant_weights(*def);
  ASSERT_TRUE(w.victim && w.agents);
  EXPECT_EQ(*w.victim, 1000u) << "the built-in policy's interactive tenant";
  EXPECT_EQ(*w.agents, 100u);
}

TEST(Policies, NoneGivesTheVictimNoWeightOfItsOwn) {
  auto none = resolve_policy("none", 0, 0);
  ASSERT_TRUE(none.ok());
  ASSERT_EQ(none->policy.tenants.size(), 1u) << "no tenants but the default one";
  TenantWeights w = tenant_weights(*none);
  ASSERT_TRUE(w.victim && w.agents);
  EXPECT_EQ(*w.victim, *w.agents);
  EXPECT_EQ(*w.victim, 100u);
}

TEST(Policies, AVictimTenantThePolicyLacksGetsTheDefaultTenantsSettings) {
  controller::Policy p = controller::default_policy();
  p.tenants["default"].cpu_weight = 42;
  p.tenants["default"].memory_budget = Bytes{1ull << 30};
  controller::Policy with = with_victim_tenant(p, "someone");
  ASSERT_TRUE(with.tenants.contains("someone"));
  EXPECT_EQ(with.tenants.at("someone").cpu_weight, 42u);
  EXPECT_EQ(with.tenants.at("someone").memory_budget, Bytes{1ull << 30});
  // A tenant the policy has is kept as it is.
  EXPECT_EQ(with_victim_tenant(p, "interactive").tenants.at("interactive").cpu_weight, 1000u);
}

TEST(Victim, ParsesTheReportAndNamesAMissingField) {
  auto v =
      parse_victim(Json::parse(R"({"count":100,"p50_us":400,"p90_us":500,"p99_us":900,"max_us":1200,
                                        "missed_deadlines":2,"mean_us":420})"));
  ASSERT_TRUE(v.ok()) << v.error().message();
  EXPECT_EQ(v->count, 100u);
  EXPECT_DOUBLE_EQ(v->p99_us, 900);
  auto bad = parse_victim(Json::parse(R"({"count":100,"p50_us":400})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("p90_us"), std::string::npos);
}

}  // namespace
}  // namespace sandgate::replay

namespace sandgate::replay {
namespace {

// A long replay's timeline stays bounded: points merge pairwise, memory keeps its peaks, CPU its
// mean, and the series still spans the whole time.
TEST(UsageSeries, StaysBoundedAndKeepsThePeak) {
  UsageSeries s;
  const size_t n = 5 * kMaxUsagePoints + 3;
  for (size_t i = 0; i < n; ++i) s.add(static_cast<double>(i) * 100, i == 7777 ? 9000 : 100, 0.5);
  EXPECT_LE(s.points().size(), kMaxUsagePoints);
  EXPECT_GE(s.points().size(), kMaxUsagePoints / 2);
  EXPECT_EQ(s.points().front().t_ms, 0);
  EXPECT_GT(s.points().back().t_ms, static_cast<double>(n - 20) * 100);
  uint64_t peak = 0;
  for (size_t i = 0; i < s.points().size(); ++i) {
    peak = std::max(peak, s.points()[i].memory_bytes);
    EXPECT_DOUBLE_EQ(s.points()[i].cpu_cores, 0.5);
    if (i) {
      EXPECT_GT(s.points()[i].t_ms, s.points()[i - 1].t_ms);
    }
  }
  EXPECT_EQ(peak, 9000u);
}

TEST(UsageSeries, ShortSeriesIsKeptWhole) {
  UsageSeries s;
  for (int i = 0; i < 10; ++i) s.add(i * 100.0, 1000 + i, i * 0.1);
  ASSERT_EQ(s.points().size(), 10u);
  EXPECT_EQ(s.points()[3].memory_bytes, 1003u);
  EXPECT_DOUBLE_EQ(s.points()[3].cpu_cores, 0.3);
}

// AgentCgroup's accounting on a recorded outcome set: survival is completed over started
// (calls that never ran are not started), work lost is the wall of every started call that
// did not complete.
TEST(Survival, CompletedOverStartedAndTheWallOfTheRestIsLost) {
  PolicyChoice p;
  p.label = "none";
  p.kind = PolicyKind::kNone;
  ReplayedRun a, b;
  a.calls.push_back(call("c1", Termination::kExited, 3s, std::nullopt, 0, 0));
  a.calls.push_back(
      call("c2", Termination::kMemoryLimit, 1500ms, std::nullopt, 0, 0));  // OOM-killed
  a.calls.push_back(call("c3", Termination::kExited, 2s, std::nullopt, 0, 0));
  b.calls.push_back(call("d1", Termination::kKilled, 4s, std::nullopt, 0, 0));
  b.calls.push_back(call("d2", Termination::kExited, 1s, std::nullopt, 0, 0));
  ReplayedCall never = call("d3", Termination::kExited, 0s, std::nullopt, 0, 0);
  never.error = "the environment is gone";
  b.calls.push_back(never);
  ReplayedCall failed = call("d4", Termination::kExited, 500ms, std::nullopt, 0, 0);
  failed.outcome.exec.status.code = 1;  // ran to its end, but did not do its work
  b.calls.push_back(failed);
  b.agent_killed = true;
  b.error = "the run's resident process (its hold) was OOM-killed";
  auto s = score_policy(p, {a, b}, {}, 0, 0, std::nullopt, std::nullopt);
  EXPECT_EQ(s.runs, 2u);
  EXPECT_EQ(s.agents_killed, 1u);
  EXPECT_EQ(s.run_errors, 1u);
  EXPECT_EQ(s.calls, 7u);
  EXPECT_EQ(s.not_run, 1u);
  EXPECT_EQ(s.started, 6u);
  EXPECT_EQ(s.completed, 3u);
  ASSERT_TRUE(s.survival);
  EXPECT_DOUBLE_EQ(*s.survival, 0.5);
  EXPECT_DOUBLE_EQ(s.work_lost_call_s, 1.5 + 4.0 + 0.5);  // the never-run call lost nothing
  EXPECT_FALSE(s.budget_oom_kills);  // set by the pass, only when the budget is enforced
  auto j = to_json(s);
  EXPECT_EQ(j["started"], 6);
  EXPECT_DOUBLE_EQ(j["survival"].get<double>(), 0.5);
  EXPECT_TRUE(j["budget_oom_kills"].is_null());

  auto empty = score_policy(p, {}, {}, 0, 0, std::nullopt, std::nullopt);
  EXPECT_FALSE(empty.survival) << "no call started: no survival figure, not 0% or 100%";
}

// An agent lost (killed midway, or never started) leaves calls it never made: counted apart
// from the calls made, not as work lost (nothing of them ran), and the agent does not survive.
TEST(Survival, CallsOfALostAgentAreNeverMadeAndTheAgentIsNotAlive) {
  PolicyChoice p;
  p.label = "none";
  ReplayedRun killed, never_started, whole;
  killed.planned_calls = 5;
  killed.calls.push_back(call("c1", Termination::kExited, 1s, std::nullopt, 0, 0));
  killed.calls.push_back(call("c2", Termination::kExited, 1s, std::nullopt, 0, 0));
  killed.agent_killed = true;
  killed.error = "the run's resident process (its hold) was OOM-killed";
  never_started.planned_calls = 4;
  never_started.start_failed = true;
  never_started.error = "the run could not start: start supervisor: signal 9 (SIGKILL)";
  whole.planned_calls = 1;
  whole.calls.push_back(call("d1", Termination::kExited, 1s, std::nullopt, 0, 0));
  auto s = score_policy(p, {killed, never_started, whole}, {}, 0, 0, std::nullopt, std::nullopt);
  EXPECT_EQ(s.calls, 3u);
  EXPECT_EQ(s.never_made, 3u + 4u);
  EXPECT_EQ(s.agents_killed, 1u);
  EXPECT_EQ(s.agents_not_started, 1u);
  EXPECT_DOUBLE_EQ(s.work_lost_call_s, 0);
  EXPECT_EQ(to_json(s)["calls"]["never_made"], 7);
  std::string table = format_table({s}, std::nullopt);
  EXPECT_NE(table.find("1/3 (1 never started)"), std::string::npos) << table;
}

PolicyScores trial(double victim_p99, double alloc_p95, double work_lost, double survival) {
  PolicyScores s;
  VictimLatency v;
  v.count = 100;
  v.p50_us = victim_p99 / 2;
  v.p99_us = victim_p99;
  v.alloc_count = 100;
  v.alloc_p95_us = alloc_p95;
  v.psi_cpu_some_ms = victim_p99 / 10;
  s.victim = v;
  s.work_lost_call_s = work_lost;
  s.survival = survival;
  return s;
}

const MetricSummary* find_metric(const std::vector<MetricSummary>& all, const std::string& name) {
  for (const auto& m : all)
    if (m.metric == name) return &m;
  return nullptr;
}

// Five trials each: far-apart figures are ordered, overlapping ones say "no significant
// difference"; inflation is each trial's p99 over the same trial's solo p99.
TEST(NeighbourScore, OrdersOnlyWhereTrialIntervalsDoNotOverlap) {
  std::vector<TrialFigures> f(3);
  f[0].policy = "none";
  f[1].policy = "static";
  f[2].policy = "default";
  VictimLatency solo;
  solo.p99_us = 1000;
  const double none_p99[] = {9000, 9500, 8800, 9900, 9100};
  const double static_p99[] = {9200, 8700, 9800, 9400, 9050};   // overlaps none
  const double default_p99[] = {2000, 2100, 1900, 2300, 2050};  // far below both
  for (int t = 0; t < 5; ++t) {
    f[0].trials.push_back(trial(none_p99[t], 300 + t, 10, 0.6));
    f[1].trials.push_back(trial(static_p99[t], 302 + t, 12, 0.5 + 0.05 * t));
    f[2].trials.push_back(trial(default_p99[t], 301 + t, 0, 1.0));
    for (auto& x : f) x.solo.push_back(solo);
  }
  auto summary = summarize_trials(f);
  const auto* p99 = find_metric(summary, "victim_p99");
  ASSERT_NE(p99, nullptr);
  ASSERT_EQ(p99->policies.size(), 3u);
  EXPECT_EQ(p99->intervals[0].n, 5u);
  EXPECT_DOUBLE_EQ(p99->intervals[0].estimate, 9100);  // the median of the five
  EXPECT_EQ(p99->ordering, "default < none ~ static");
  EXPECT_EQ(p99->significant, (std::vector<std::string>{"default < none", "default < static"}));

  const auto* inflation = find_metric(summary, "victim_p99_inflation");
  ASSERT_NE(inflation, nullptr);
  EXPECT_DOUBLE_EQ(inflation->intervals[0].estimate, 9.1);

  // The allocation P95s interleave: no order is claimed.
  const auto* alloc = find_metric(summary, "victim_alloc_p95");
  ASSERT_NE(alloc, nullptr);
  EXPECT_EQ(alloc->ordering, "no significant difference");
  EXPECT_TRUE(alloc->significant.empty());

  // Figures no trial has are left out, not reported as 0.
  EXPECT_EQ(find_metric(summary, "victim_runq_delay"), nullptr);
  EXPECT_EQ(find_metric(summary, "budget_oom_kills"), nullptr);

  std::string text = format_summary(summary);
  EXPECT_NE(text.find("victim_p99 (us)"), std::string::npos) << text;
  EXPECT_NE(text.find("9100 ["), std::string::npos) << text;
  EXPECT_NE(text.find("victim_alloc_p95: no significant difference"), std::string::npos) << text;
  EXPECT_NE(text.find("victim_p99: default < none ~ static"), std::string::npos) << text;
  auto j = to_json(*p99);
  EXPECT_EQ(j["ordering"], "default < none ~ static");
  EXPECT_DOUBLE_EQ(j["by_policy"]["none"]["median"].get<double>(), 9100);
  EXPECT_DOUBLE_EQ(j["confidence"].get<double>(), 0.95);
}

TEST(NeighbourScore, OrderingRuleOnGivenIntervals) {
  auto ci = [](double est, double low, double high) {
    stats::BootstrapInterval b;
    b.estimate = est;
    b.low = low;
    b.high = high;
    b.n = 5;
    return b;
  };
  // Overlapping everywhere: no claim, whatever the medians.
  EXPECT_EQ(order_by_intervals({"a", "b"}, {ci(2, 1, 3), ci(2.5, 2, 4)}),
            "no significant difference");
  // One policy alone, or none: nothing to compare.
  EXPECT_EQ(order_by_intervals({"a"}, {ci(2, 1, 3)}), "no significant difference");
  EXPECT_EQ(order_by_intervals({}, {}), "no significant difference");
  // a < c apart, b overlaps both: the chain shows ~ between neighbours, the pair list says a < c.
  std::vector<std::string> sig;
  EXPECT_EQ(order_by_intervals({"c", "b", "a"}, {ci(9, 8, 10), ci(5, 2.5, 8.5), ci(2, 1, 3)}, &sig),
            "a ~ b ~ c");
  EXPECT_EQ(sig, (std::vector<std::string>{"a < c"}));
  // Fewer than five trials: no claim, however far apart.
  auto few = ci(2, 1, 3);
  few.n = 4;
  EXPECT_EQ(order_by_intervals({"a", "b"}, {few, ci(9, 8, 10)}),
            "no significant difference (fewer than 5 trials)");
  // A policy without trials (n = 0) takes no part.
  EXPECT_EQ(order_by_intervals({"a", "b"}, {ci(2, 1, 3), stats::BootstrapInterval{}}),
            "no significant difference");
}

TEST(Victim, ParsesAllocationLatencyWhenPresent) {
  auto v =
      parse_victim(Json::parse(R"({"count":100,"p50_us":400,"p90_us":500,"p99_us":900,"max_us":1200,
      "missed_deadlines":0,"alloc_count":100,"alloc_p50_us":80,"alloc_p95_us":120,"alloc_p99_us":300})"));
  ASSERT_TRUE(v.ok()) << v.error().message();
  EXPECT_EQ(v->alloc_count, 100u);
  EXPECT_DOUBLE_EQ(v->alloc_p95_us, 120);
  auto bad =
      parse_victim(Json::parse(R"({"count":100,"p50_us":400,"p90_us":500,"p99_us":900,"max_us":1200,
      "missed_deadlines":0,"alloc_count":100})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("alloc_p50_us"), std::string::npos) << bad.error().message();
}

}  // namespace
}  // namespace sandgate::replay
