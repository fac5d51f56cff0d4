// Capacity planner: how many concurrent agent runs fit one host, from traces alone (nothing is
// executed), under three ways of sizing them. `sandgate plan`; README.md, "Capacity planner".
//
// The model. A host holds N runs at once. Each run is a trace picked at random (uniformly, with
// replacement) and looped, started at a random offset, so at any instant each run is at an
// independent uniform phase of its trace. One Monte Carlo trial draws N such (trace, phase)
// pairs and adds up what they hold; the probability of exceeding the host is the share of
// trials that do. Trial k draws its runs from a generator seeded by (seed, k), so run i of a
// trial is the same whatever N is and the sums grow with N: one pass per trial finds the first
// N that exceeds the host, and "N fits" for a risk r means that at most r of the trials
// exceed the host with N runs. A trace's value at a phase is its nearest sample's (each sample
// stands for half an interval either side; one period is last - first sample + one interval).
//
// What a run holds, per policy (memory; CPU the same way in millicores against --host-cpus):
// - static-peak: each run reserves its own peak for its whole life (admission by reservation;
//   use never exceeds the reservation, so the host is never exhausted by the runs).
// - static-average: each run reserves, and is limited to, its own average. N is what fits by
//   reservation. The price is shown two ways: with the limit enforced, the share of runs that
//   cross it (and would be OOM-killed), the share of run time spent above it and the share of
//   run time lost after the first crossing; with the limit not enforced, the probability that
//   the N runs' actual memory exceeds the host.
// - per-call: the controller holds each call to its grant. While calls are active a run may
//   hold its baseline (the median of its samples outside calls) plus the grant of each active
//   call's intent (grant_for(policy, intent): memory_max, cpu cores): its envelope; outside
//   calls it holds what it holds. What it really holds is its actual use, capped at the
//   envelope during calls (a burst past the grant is throttled or killed by the controller, not
//   taken from the host). Two admission rules, two rows:
//   - "per-call": N with P(sum of capped actual use > host) <= risk: overcommit on what runs
//     really hold, each call's grant bounding how far one burst can reach;
//   - "per-call-grant": N with P(sum of envelopes > host) <= risk: holds even if every active
//     call used its whole grant at once. Nested calls add their grant to their parent's.
//   Call time whose actual use is above the envelope is reported ("over grant"). An intent
//   whose grant has no memory_max is taken at its actual use.
// - actual (reference, no policy can do better): N with P(sum of actual memory > host) <= risk.
//
// CPU counts too. Each row has two answers from the same trials: N by memory (its admission
// rule above) and N by CPU: the largest N with P(sum of CPU demand > host cpus x 1000 x
// overcommit) <= risk, where the demand is what the runs really ask of the CPU under the row
// (per-call rows: actual use held to the envelope during calls, the rest: actual use). The
// headline N ("fits") is the smaller; the resource that decides it is "binding" (memory, cpu,
// both when equal, none when neither binds within max_runs). CPU is not compressible by default
// (overcommit 1: demand past the cores counts as exceeding the host, like memory); with
// cpu_overcommit X >= 1 the user accepts demand up to X times the cores, the excess served by
// slowing every runnable thread down. What that costs, at the headline N:
// - the slow-down of a trial is s = max(1, D / (host cpus x 1000)), D its runs' CPU demand
//   (millicores): the factor by which CPU work running at that instant is stretched when the
//   cores are shared fairly;
// - cpu_slowdown_mean is the mean of s over the trials. Each trial is one instant at which
//   every run is at an independent uniform phase, so this is the time-weighted mean of the
//   stretch over the host's life; cpu_slowdown_p95 is its 95th percentile (nearest rank, over
//   trials: the stretch exceeded 5% of the time at most). 1 means no slow-down. On per-call
//   rows the demand is already held to the grants: the controller's throttling of a call past
//   its own CPU grant is a further slow-down this figure does not include.
// fits_by_cpu (schema 1) is kept as it was: the N the row's CPU reservation alone would allow
// (static-peak: peaks, static-average: averages, per-call-grant: envelopes), without overcommit.
// Schema 2: "fits" was memory's N; it is now the headline (the smaller of the two).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "controller/policy.h"
#include "core/json.h"
#include "core/result.h"
#include "replay/call_use.h"
#include "replay/trace.h"

namespace sandgate::replay {

// 2: "fits" is the smaller of N by memory and N by CPU (1: N by memory alone); added
// fits_by_memory, fits_by_cpu_demand, binding, cpu_slowdown_mean, cpu_slowdown_p95,
// cpu_risk_curve and cpu_overcommit.
inline constexpr int kPlanSchemaVersion = 2;

// --cpu-overcommit: a ratio >= 1 ("1", "1.5"); a percentage ("150%") is refused with the
// ratio to write instead. The error says what was expected, not which flag (the caller's).
Result<double> parse_cpu_overcommit(std::string_view text);

struct PlanOptions {
  uint64_t host_memory_bytes = 0;
  double host_cpus = 0;
  double risk = 0.01;  // (0, 1)
  size_t trials = 10000;
  uint64_t seed = 1;
  size_t max_runs = 20000;    // N is searched up to here ("at least" when reached)
  double cpu_overcommit = 1;  // >= 1: CPU demand accepted up to this many times the cores
};

// One trace as the planner sees it: piecewise-constant columns over one period.
struct TraceProfile {
  std::string name;
  int64_t period_ms = 0;
  std::vector<int64_t> starts;     // segment starts in [0, period_ms), ascending
  std::vector<double> mem;         // actual memory, bytes
  std::vector<double> mem_env;     // per-call envelope, bytes
  std::vector<double> mem_capped;  // actual, held to the envelope during calls
  std::vector<double> cpu_capped;
  std::vector<double> cpu;      // actual cpu, millicores
  std::vector<double> cpu_env;  // per-call cpu envelope, millicores
  std::vector<bool> in_call;
  double peak_mem = 0, avg_mem = 0;  // avg: mean of samples (as `trace stats`)
  double peak_cpu = 0, avg_cpu = 0;
  double baseline_mem = 0, baseline_cpu = 0;
  // Time-weighted over one period:
  double mean_mem = 0, mean_mem_env = 0, mean_mem_capped = 0, mean_cpu = 0, mean_cpu_env = 0;
  double over_avg_share = 0;        // time above avg_mem
  double first_over_avg_share = 1;  // when it first goes above avg_mem, as a share of the period
  double call_ms = 0, over_grant_ms = 0;  // time in calls; of it, actual above the envelope
  std::vector<CallUse> call_uses;  // replay/call_use.h: each call's use above the baseline
};

// Preconditions: the trace has at least one sample.
TraceProfile profile_trace(const Trace& trace, const std::string& name,
                           const controller::Policy& policy);

struct PolicyFit {
  std::string policy;             // static-peak, static-average, per-call, per-call-grant, actual
  size_t fits = 0;                // the headline: min(fits_by_memory, fits_by_cpu_demand)
  bool at_least = false;          // fits reached max_runs
  size_t fits_by_memory = 0;      // largest N at the risk by the row's memory admission rule
  size_t fits_by_cpu_demand = 0;  // largest N with P(CPU demand > cores x overcommit) <= risk
  std::string binding;            // memory, cpu, both, none (neither within max_runs)
  double p_memory_exceeded = 0;   // P(what `fits` runs really hold > host): per-call capped
  double p_cpu_exceeded = 0;      // the same for CPU demand against host cpus (no overcommit)
  size_t fits_by_cpu = 0;         // N by this policy's CPU reservation alone
  double reserved_bytes = 0;      // mean reserved by `fits` runs (per-call: the envelope)
  double used_bytes = 0;          // mean really held by `fits` runs (per-call: capped)
  // The CPU slow-down at `fits`, mean and 95th percentile over time (the header comment).
  double cpu_slowdown_mean = 1, cpu_slowdown_p95 = 1;
  std::string note;
  Json extra = Json::object();  // policy-specific figures
  // The risk curves behind the two answers: P(the admission sum of N runs > host memory), and
  // P(the CPU demand of N runs > host cpus x overcommit), against N, on the same trials (so
  // they cross `risk` at fits_by_memory and fits_by_cpu_demand). At most kCurvePoints points,
  // N ascending from 1 to the plan's curve_max_runs, shared by every row and both resources.
  struct RiskPoint {
    size_t runs = 0;
    double risk = 0;
  };
  std::vector<RiskPoint> curve, cpu_curve;
};
inline constexpr size_t kCurvePoints = 200;

// How the calls of one intent used memory against the policy's grant: the figures to size a
// grant on.
struct IntentUse {
  std::string intent;
  size_t calls = 0;
  double seconds = 0;
  std::optional<double> grant_bytes;  // memory_max of grant_for(policy, intent)
  double p50 = 0, p99 = 0, max = 0;   // peak above the run's baseline, bytes
  size_t calls_over_grant = 0;
};

struct Plan {
  PlanOptions options;
  std::string policy_name;
  size_t traces = 0;
  std::vector<PolicyFit> fits;  // static-peak, static-average, per-call, per-call-grant, actual
  std::vector<IntentUse> intents;
  // Where the risk curves end: the largest N at which some trial of some row first exceeded
  // the host, in memory or CPU (every curve's risk is 1 there or close), at most max_runs.
  size_t curve_max_runs = 0;
};

Result<Plan> plan_capacity(const std::vector<TraceProfile>& profiles, const PlanOptions& options,
                           const controller::Policy& policy);
Json to_json(const Plan& plan);

}  // namespace sandgate::replay
