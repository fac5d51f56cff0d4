// The neighbour experiment behind `sandgate replay`: the same traces replayed once per policy,
// side by side, with a victim beside the aggressors, and scored.
//
// Scores (README.md, "Replay"), per policy:
// - victim p50/p99 latency over its solo run in the same invocation (inflation ratio); its
//   allocation latency (P95 of its timed allocations, workloads/victim.h); its run cgroup's
//   pressure stall (cpu and memory, some and full: the growth of the totals over the trial);
//   its run-queue delay (eBPF activity tracer, when one is given);
// - survival: calls completed / calls started (every call that ran: not "not run");
// - aggressor calls completed / throttled / frozen / cancelled / killed (CallOutcome);
// - work lost: the wall seconds of every call that did not complete (killed, cancelled,
//   timed out, memory or pids limit, non-zero exit);
// - host peak memory (MemTotal - MemAvailable, sampled) against the host budget; with the budget
//   enforced (ExperimentOptions::enforce_budget) every run and the victim live under one budget
//   cgroup limited to it, and its OOM kills (memory.oom_control / memory.events oom_kill) are
//   the host-level OOM kills; a per-call policy's ladder watches that cgroup (the budget
//   rule, LadderSettings::freeze_budget_at) and freezes the calls filling it in turn;
// - reserved vs used memory in GiB-seconds: used = the integral of each run's cgroup memory;
//   reserved = static: the run limit for the run's whole life; per-call: each call's memory
//   grant for its wall time plus what the run's main cgroup (its resident baseline) used;
//   none: nothing is reserved (not reported);
// - burst to first action: from a call's burst onset (its segment first reaching half of its
//   memory peak) to the ladder's first action on it, median and maximum over the calls;
// - fidelity: per call, replayed memory peak vs the trace's (host: the call cgroup's peak;
//   self: sandgate-load's Achieved report), for calls that completed with a target of at least
//   kFidelityFloorBytes; call start vs the plan for every call that ran, end for completed
//   ones (host side, request to outcome).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "controller/controller.h"
#include "core/json.h"
#include "core/stats.h"
#include "ebpf/activity_tracer.h"
#include "providers/registry.h"
#include "replay/replayer.h"

namespace sandgate::replay {

// Below this a call's memory target is mostly sandgate-load's own process (a few MiB of
// binary and stacks), so a relative error says nothing; such calls are counted, not scored.
inline constexpr uint64_t kFidelityFloorBytes = 32ull << 20;
inline constexpr double kMemoryFidelityTarget = 0.05;  // 5% at time scale 1 (issue 5)
inline constexpr double kTimingFidelityTargetMs = 50;

enum class PolicyKind { kNone, kStatic, kStaticPeak, kPerCall };
std::string to_string(PolicyKind k);  // "none", "static", "static-peak", "per-call"

struct PolicyChoice {
  std::string label;  // as given: "none", "static", "static-peak", "default", a file name
  PolicyKind kind = PolicyKind::kPerCall;
  controller::Policy policy;
  std::optional<uint64_t> run_limit_bytes;  // static kinds
};

// "none": no limits, no ladder, no timeouts, no tenant weights (only the default tenant).
// "static": one run limit sized on the traces' average memory (the largest of their averages);
// "static-peak": on their peak plus 10% headroom for the generator's own process; both keep the
// built-in policy's tenants. "default": the built-in per-call policy; anything else: a policy
// file.
Result<PolicyChoice> resolve_policy(const std::string& arg, uint64_t avg_bytes,
                                    uint64_t peak_bytes);

// The policy a pass runs under, with the victim's tenant: the policy's own tenant of that name
// when it has one (the built-in policy's "interactive", weighted above the agents' "default"),
// else one with the default tenant's settings, so a policy that says nothing gives the victim
// no protection of its own. Pure.
controller::Policy with_victim_tenant(controller::Policy policy, const std::string& tenant);

struct VictimLatency {
  uint64_t count = 0;
  double p50_us = 0, p90_us = 0, p99_us = 0, max_us = 0;
  uint64_t missed_deadlines = 0;
  // Its timed allocations (map + a write to every page), when it made any.
  uint64_t alloc_count = 0;
  double alloc_p50_us = 0, alloc_p95_us = 0, alloc_p99_us = 0;
  // Kernel side, filled by the experiment, not by the victim's report: the growth of its run
  // cgroup's pressure-stall totals over the run (ms; absent where the layout has no per-cgroup
  // PSI, and "full" absent where the kernel has no cpu full line), and its run-queue delay (ms,
  // summed over its waits; absent without an eBPF tracer).
  std::optional<double> psi_cpu_some_ms, psi_cpu_full_ms, psi_memory_some_ms, psi_memory_full_ms;
  std::optional<double> runq_delay_ms;
  uint64_t runq_waits = 0;
};
// From `sandgate-load victim --json`; errors name the field. The alloc_* fields are read when
// present (a victim run with --alloc-bytes 0 made none).
Result<VictimLatency> parse_victim(const Json& j);

// The distribution of absolute errors (median and nearest-rank p95, core/stats.h), and how many
// are within a target.
struct ErrorSummary {
  size_t n = 0;
  double median = 0, p95 = 0, max = 0;
  size_t within = 0;  // <= target
};
ErrorSummary summarize_errors(std::vector<double> values, double target);

struct FidelityScores {
  size_t calls_scored = 0;  // completed, target >= floor
  size_t calls_below_floor = 0;
  ErrorSummary mem_host;  // |call cgroup peak - target| / target
  ErrorSummary mem_self;  // |Achieved peak - target| / target
  ErrorSummary start_ms;  // |actual - planned|
  ErrorSummary end_ms;
};

// One point of a run's usage over time, on its replay clock (0: the run was ready).
struct UsagePoint {
  double t_ms = 0;
  uint64_t memory_bytes = 0;  // the run cgroup's memory.current (the largest in the bucket)
  double cpu_cores = 0;       // its CPU rate over the bucket
};
// A report draws a run's timeline from at most this many points: a long replay sampled every
// 100 ms is bucketed (each bucket's largest memory, mean CPU) so its memory stays bounded.
inline constexpr size_t kMaxUsagePoints = 2000;

// What the host sampler measured for one run.
struct RunUsage {
  std::string run;
  double used_gib_s = 0;  // integral of the run cgroup's memory
  double main_gib_s = 0;  // integral of its main cgroup's memory (the resident baseline)
  double duration_s = 0;
  std::vector<UsagePoint> series;  // at most kMaxUsagePoints, in time order
};

// Appends samples to a series of at most kMaxUsagePoints: when full, neighbouring points are
// merged pairwise and every later point stands for twice as many samples. Pure.
class UsageSeries {
 public:
  void add(double t_ms, uint64_t memory_bytes, double cpu_cores);
  const std::vector<UsagePoint>& points() const { return points_; }

 private:
  std::vector<UsagePoint> points_;
  size_t stride_ = 1, in_bucket_ = 0;
  UsagePoint bucket_;
};

struct PolicyScores {
  std::string label;
  PolicyKind kind = PolicyKind::kPerCall;
  std::optional<uint64_t> run_limit_bytes;
  size_t runs = 0, run_errors = 0;
  size_t agents_killed = 0;  // runs whose hold was OOM-killed (ReplayedRun::agent_killed)
  size_t agents_not_started = 0;  // runs whose start failed (ReplayedRun::start_failed)
  size_t calls = 0, started = 0, completed = 0, throttled = 0, frozen = 0, cancelled = 0,
         killed = 0, timed_out = 0, failed_exit = 0, not_run = 0;
  // Calls planned but never made: their agent was lost first (killed, or never started), or
  // the replay was stopped. Not in `calls`, and not work lost: nothing of them ran.
  size_t never_made = 0;
  double work_lost_call_s = 0;
  std::optional<double> survival;  // completed / started; absent when no call started
  // OOM kills inside the budget cgroup over the pass (ExperimentOptions::enforce_budget).
  std::optional<uint64_t> budget_oom_kills;
  std::optional<uint64_t> budget_peak_bytes;  // its high-water mark over the pass
  std::optional<VictimLatency> victim;
  // Why a victim that was run has no figures in this pass: its run could not start, or it was
  // killed while it ran (under a budget, mostly the kernel's OOM killer). Empty: it has them,
  // or no victim was run. A scored outcome (the victim died), not an error of the pass.
  std::string victim_lost;
  std::optional<double> victim_p50_inflation, victim_p99_inflation;
  uint64_t host_peak_bytes = 0, host_budget_bytes = 0;
  std::optional<double> reserved_gib_s;
  double used_gib_s = 0;
  std::optional<double> reserved_over_used;
  size_t calls_with_action = 0;
  std::optional<double> burst_to_action_median_ms, burst_to_action_max_ms;
  FidelityScores fidelity;
  double wall_s = 0;
};

// GiB-seconds of `bytes` held for `seconds`.
double gib_seconds(uint64_t bytes, double seconds);

// Pure: the scores of one policy from what happened (unit-tested on fabricated outcomes).
PolicyScores score_policy(const PolicyChoice& policy, const std::vector<ReplayedRun>& runs,
                          const std::vector<RunUsage>& usage, uint64_t host_peak_bytes,
                          uint64_t host_budget_bytes, const std::optional<VictimLatency>& victim,
                          const std::optional<VictimLatency>& solo);

Json to_json(const PolicyScores& s);
Json to_json(const VictimLatency& v);
Json to_json(const ReplayedRun& r);
// Metrics as rows, policies as columns.
std::string format_table(const std::vector<PolicyScores>& scores,
                         const std::optional<VictimLatency>& solo);

// The neighbour score over repeated trials: every figure a median over the trials with a 95%
// bootstrap interval (core/stats.h bootstrap_median), and an order between two policies claimed
// only where their intervals do not overlap.
struct TrialFigures {
  std::string policy;
  std::vector<PolicyScores> trials;                // in trial order
  std::vector<std::optional<VictimLatency>> solo;  // the victim alone in the same trial
};
struct MetricSummary {
  std::string metric;                 // "victim_p99_inflation", ...
  std::string unit;                   // "x", "us", "ms", "call-s", "" (a fraction or a count)
  std::vector<std::string> policies;  // those with a value in some trial
  std::vector<stats::BootstrapInterval> intervals;  // one per policy, over its trials
  // Policies by median, lowest first, joined by " < " where the two neighbours' intervals do
  // not overlap and " ~ " where they do; "no significant difference" when no two policies'
  // intervals are apart (or fewer than two policies have the figure).
  std::string ordering;
  // Every pair whose intervals do not overlap, as "a < b".
  std::vector<std::string> significant;
};
// Pure: one summary per figure (victim p50/p99/p99 inflation, its allocation P95, its PSI, its
// run-queue delay, survival, work lost, budget OOM kills), each over the trials where the
// figure exists.
std::vector<MetricSummary> summarize_trials(const std::vector<TrialFigures>& figures);
// The ordering rule above, on given intervals (names[i] has intervals[i]). No order at all is
// claimed while a policy has fewer than kMinTrialsToRank values.
inline constexpr size_t kMinTrialsToRank = 5;
std::string order_by_intervals(const std::vector<std::string>& names,
                               const std::vector<stats::BootstrapInterval>& intervals,
                               std::vector<std::string>* significant = nullptr);
Json to_json(const MetricSummary& m);
// Figures as rows ("median [low, high]"), policies as columns, then one ordering line per figure.
std::string format_summary(const std::vector<MetricSummary>& summary);

struct ExperimentOptions {
  std::string provider = "namespaces";
  providers::ProviderOptions provider_options;
  std::string cgroup_root = "sandgate";
  std::string load_binary;
  size_t concurrency = 0;  // runs at once (0: one per trace); more than traces: repeated
  bool victim = false;
  Duration victim_interval = std::chrono::milliseconds(10);
  Duration solo_max = std::chrono::seconds(30);
  uint64_t host_budget_bytes = 0;  // 0: MemTotal
  // Every run of a pass and the victim under one cgroup limited to host_budget_bytes (made and
  // removed by the pass, recorded for gc); its OOM kills are counted. Needs host_budget_bytes.
  bool enforce_budget = false;
  // The victim's own tenant (with_victim_tenant): the policy's tenant of this name when it has
  // one (its cpu weight, its memory budget), else the default tenant's settings (no protection
  // of its own). The built-in policy's tenant for a person's interactive work.
  std::string victim_tenant = "interactive";
  // Run-queue delay of the victim (optional): the victim's run is watched by this tracer.
  ebpf::ActivityTracer* tracer = nullptr;
  // The agents wait at most this long for the victim's process to start (see run_policy_pass):
  // a provider that does not report a call's start (providers::Call::on_started) costs this.
  Duration victim_start_wait = std::chrono::seconds(10);
  // Makes the cgroup backend of each pass's controller; null: the host's, detected. Tests give
  // an in-memory one (controller/fake_backend.h) to run a pass against a fake provider.
  std::function<std::unique_ptr<controller::CgroupBackend>()> cgroup_backend;
  Duration sample_interval = std::chrono::milliseconds(100);
  std::function<void(const std::string&)> progress;  // one line at a time
  std::atomic<bool>* stop = nullptr;
};

struct PolicyPass {
  PolicyScores scores;
  std::vector<ReplayedRun> runs;
  std::vector<RunUsage> usage;  // by run name; series for the report's timelines
};

// The victim alone, before any aggressor (in its own run, under no limits).
Result<VictimLatency> measure_victim_solo(const providers::Registry& registry, Duration duration,
                                          const ExperimentOptions& options);
// Replays every plan under one policy, the victim beside them when asked. The victim's run is
// made, and its process started, before any agent's run: once agents fill the budget, the
// process that starts a run is the kernel's likeliest OOM victim. A run whose start fails
// anyway, or a victim killed while it runs, is scored (PolicyScores::agents_not_started,
// victim_lost) and the pass goes on. Errors: the provider cannot honour the policy, or the
// victim ended on its own with an error or an unreadable report (a defect, not a result).
Result<PolicyPass> run_policy_pass(const providers::Registry& registry, const PolicyChoice& policy,
                                   const std::vector<ReplayPlan>& plans,
                                   const ExperimentOptions& options,
                                   const std::optional<VictimLatency>& solo);

}  // namespace sandgate::replay
