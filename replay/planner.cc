#include "replay/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <random>

#include "core/stats.h"

namespace sandgate::replay {
namespace {

constexpr std::string_view kPlanStep = "plan capacity";

// The columns one trial adds up, each against its own capacity.
enum Column {
  kMemActual,
  kMemCapped,
  kMemEnvelope,
  kMemPeak,
  kMemAverage,
  kCpuActual,
  kCpuCapped,
  kCpuEnvelope,
  kCpuPeak,
  kCpuAverage,
  // CPU demand against the cores times the overcommit (the CPU answer); the plain columns above
  // are against the cores (P(cpu>host), the reservation answer).
  kCpuActualOvercommit,
  kCpuCappedOvercommit,
  kColumns
};

bool is_memory(int c) { return c <= kMemAverage; }
bool is_overcommit(int c) { return c >= kCpuActualOvercommit; }

// One run of a trial: a trace picked uniformly and a uniform phase in it, as the segment the
// phase falls in. Both passes over the trials draw through here, so they see the same runs.
struct Draw {
  const TraceProfile* p;
  size_t seg;
};
Draw draw_run(const std::vector<TraceProfile>& profiles, std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> pick(0, profiles.size() - 1);
  const TraceProfile& p = profiles[pick(rng)];
  std::uniform_int_distribution<int64_t> phase_of(0, p.period_ms - 1);
  int64_t phase = phase_of(rng);
  size_t seg = std::upper_bound(p.starts.begin(), p.starts.end(), phase) - p.starts.begin() - 1;
  return {&p, seg};
}

// Trial k's generator: seeded by (seed, k) so trial k draws the same runs whatever N is.
std::mt19937_64 trial_rng(uint64_t seed, size_t k) {
  std::seed_seq seq{seed, static_cast<uint64_t>(k)};
  return std::mt19937_64(seq);
}

}  // namespace

Result<double> parse_cpu_overcommit(std::string_view text) {
  std::string t(text);
  auto refuse = [&](const std::string& why) -> Result<double> {
    return logic_error("read cpu overcommit",
                       "expected a ratio >= 1 such as 1 or 1.5, got '" + t + "'" + why);
  };
  if (!t.empty() && t.back() == '%') {
    // One spelling: the ratio. Say which ratio the percentage meant.
    char* end = nullptr;
    double pct = std::strtod(t.c_str(), &end);
    if (end == t.c_str() + t.size() - 1 && std::isfinite(pct))
      return refuse(fmt::format(" (write the ratio: {:g} for {})", pct / 100, t));
    return refuse("");
  }
  if (t.empty() || std::isspace(static_cast<unsigned char>(t.front()))) return refuse("");
  char* end = nullptr;
  double x = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || !std::isfinite(x)) return refuse("");
  if (x < 1) return refuse(" (below 1 would leave cores idle: lower --host-cpus instead)");
  return x;
}

TraceProfile profile_trace(const Trace& trace, const std::string& name,
                           const controller::Policy& policy) {
  TraceProfile p;
  p.name = name;
  const auto& samples = trace.samples;
  const int64_t t0 = samples.front().t_ms;
  int64_t interval = trace.header.interval_ms;
  if (interval <= 0) {
    std::vector<double> gaps;
    for (size_t i = 1; i < samples.size(); ++i)
      gaps.push_back(samples[i].t_ms - samples[i - 1].t_ms);
    interval = gaps.empty() ? 1000 : std::max<int64_t>(1, std::llround(stats::median(gaps)));
  }
  p.period_ms = samples.back().t_ms - t0 + interval;
  // Each sample stands for the time nearest to it: from half way after the previous sample to
  // half way to the next (half an interval at the ends). Positions within the period are
  // shifted by half an interval so that the first sample's share starts at 0.
  const int64_t half = interval / 2;
  auto pos = [&](int64_t t_ms) { return std::clamp<int64_t>(t_ms - t0 + half, 0, p.period_ms); };

  struct Active {
    int64_t from, to;                // [from, to) positions in the period
    std::optional<double> mem, cpu;  // the grant; none = take the actual use
  };
  std::vector<Active> calls;
  for (const auto& c : trace.calls) {
    controller::Grant g = controller::grant_for(policy, c.intent);
    Active a{pos(c.start_ms), pos(c.end_ms), std::nullopt, std::nullopt};
    if (g.memory_max) a.mem = static_cast<double>(g.memory_max->value);
    if (g.cpu_cores) a.cpu = *g.cpu_cores * 1000;
    if (a.to > a.from) calls.push_back(a);
  }

  double mem_sum = 0, cpu_sum = 0;
  for (const auto& s : samples) {
    p.peak_mem = std::max(p.peak_mem, static_cast<double>(s.mem_bytes));
    p.peak_cpu = std::max(p.peak_cpu, static_cast<double>(s.cpu_millicores));
    mem_sum += s.mem_bytes;
    cpu_sum += s.cpu_millicores;
  }
  p.avg_mem = mem_sum / samples.size();
  p.avg_cpu = cpu_sum / samples.size();
  // Baseline: what the run holds between calls (replay/call_use.h, shared with policy suggest).
  const RunBaseline baseline = run_baseline(trace);
  p.baseline_mem = baseline.mem;
  p.baseline_cpu = baseline.cpu;

  // Sample i holds from `bounds[i]` (0 for the first) to the next bound.
  std::vector<int64_t> bounds = {0};
  for (size_t i = 1; i < samples.size(); ++i)
    bounds.push_back(pos(samples[i - 1].t_ms + (samples[i].t_ms - samples[i - 1].t_ms) / 2));
  p.call_uses = call_uses(trace, baseline);

  std::vector<int64_t> cuts = bounds;
  for (const auto& a : calls) {
    cuts.push_back(a.from);
    if (a.to < p.period_ms) cuts.push_back(a.to);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());

  size_t si = 0;
  bool crossed = false;
  for (size_t i = 0; i < cuts.size(); ++i) {
    int64_t at = cuts[i];
    int64_t len = (i + 1 < cuts.size() ? cuts[i + 1] : p.period_ms) - at;
    while (si + 1 < samples.size() && bounds[si + 1] <= at) ++si;
    double mem = samples[si].mem_bytes, cpu = samples[si].cpu_millicores;
    double mem_env = mem, cpu_env = cpu;
    double mem_capped = mem, cpu_capped = cpu;
    bool active = false, mem_unbounded = false, cpu_unbounded = false;
    double grant_mem = 0, grant_cpu = 0;
    for (const auto& a : calls) {
      if (a.from > at || at >= a.to) continue;
      active = true;
      if (a.mem)
        grant_mem += *a.mem;
      else
        mem_unbounded = true;
      if (a.cpu)
        grant_cpu += *a.cpu;
      else
        cpu_unbounded = true;
    }
    if (active) {
      mem_env = p.baseline_mem + grant_mem;
      cpu_env = p.baseline_cpu + grant_cpu;
      p.call_ms += len;
      if (!mem_unbounded && mem > mem_env) p.over_grant_ms += len;
      if (mem_unbounded) mem_env = std::max(mem_env, mem);
      if (cpu_unbounded) cpu_env = std::max(cpu_env, cpu);
      mem_capped = std::min(mem, mem_env);
      cpu_capped = std::min(cpu, cpu_env);
    }
    p.starts.push_back(at);
    p.mem.push_back(mem);
    p.mem_env.push_back(mem_env);
    p.mem_capped.push_back(mem_capped);
    p.cpu_capped.push_back(cpu_capped);
    p.cpu.push_back(cpu);
    p.cpu_env.push_back(cpu_env);
    p.in_call.push_back(active);
    double w = static_cast<double>(len) / p.period_ms;
    p.mean_mem += mem * w;
    p.mean_mem_env += mem_env * w;
    p.mean_mem_capped += mem_capped * w;
    p.mean_cpu += cpu * w;
    p.mean_cpu_env += cpu_env * w;
    if (mem > p.avg_mem) {
      p.over_avg_share += w;
      if (!crossed) p.first_over_avg_share = static_cast<double>(at) / p.period_ms;
      crossed = true;
    }
  }
  return p;
}

namespace {

std::vector<IntentUse> intent_uses(const std::vector<TraceProfile>& profiles,
                                   const controller::Policy& policy) {
  std::vector<CallUse> all;
  for (const auto& p : profiles) all.insert(all.end(), p.call_uses.begin(), p.call_uses.end());
  std::vector<IntentUse> out;
  for (auto& [intent, calls] : calls_by_intent(all)) {
    IntentUse u;
    u.intent = intent;
    u.calls = calls.calls;
    u.seconds = calls.seconds;
    stats::Distribution<double> use(std::move(calls.mem));
    u.p50 = use.percentile(50);
    u.p99 = use.percentile(99);
    u.max = use.max();
    controller::Grant g = controller::grant_for(policy, intent);
    if (g.memory_max) {
      u.grant_bytes = double(g.memory_max->value);
      u.calls_over_grant = use.count_above(*u.grant_bytes);
    }
    out.push_back(u);
  }
  return out;
}

}  // namespace

Result<Plan> plan_capacity(const std::vector<TraceProfile>& profiles, const PlanOptions& o,
                           const controller::Policy& policy) {
  const std::string& policy_name = policy.name;
  if (profiles.empty()) return logic_error(std::string(kPlanStep), "no traces");
  if (o.host_memory_bytes == 0)
    return logic_error(std::string(kPlanStep), "host memory must be > 0");
  if (!(o.host_cpus > 0)) return logic_error(std::string(kPlanStep), "host cpus must be > 0");
  if (!(o.risk > 0 && o.risk < 1))
    return logic_error(std::string(kPlanStep), "risk must be between 0 and 1 (exclusive)");
  // The fit is the risk-quantile of the first N that exceeds the host: below ~10 trials past
  // the quantile it is mostly noise.
  if (o.trials * o.risk < 10) {
    return logic_error(std::string(kPlanStep),
                       "too few trials for risk " + std::to_string(o.risk) + ": use at least " +
                           std::to_string(static_cast<size_t>(std::ceil(10 / o.risk))));
  }
  if (o.max_runs == 0) return logic_error(std::string(kPlanStep), "max runs must be > 0");
  if (!(o.cpu_overcommit >= 1) || !std::isfinite(o.cpu_overcommit))
    return logic_error(std::string(kPlanStep), "cpu overcommit must be a finite ratio >= 1");

  const double mem_cap = static_cast<double>(o.host_memory_bytes);
  const double cpu_cap = o.host_cpus * 1000;
  // first[c][k]: the first N at which column c of trial k exceeds its capacity (max_runs + 1:
  // never within the search).
  std::array<std::vector<size_t>, kColumns> first;
  for (auto& f : first) f.assign(o.trials, o.max_runs + 1);

  for (size_t k = 0; k < o.trials; ++k) {
    std::mt19937_64 rng = trial_rng(o.seed, k);
    std::array<double, kColumns> sum{};
    int open = kColumns;
    for (size_t n = 1; n <= o.max_runs && open > 0; ++n) {
      auto [pp, seg] = draw_run(profiles, rng);
      const TraceProfile& p = *pp;
      std::array<double, kColumns> v = {p.mem[seg],        p.mem_capped[seg], p.mem_env[seg],
                                        p.peak_mem,        p.avg_mem,         p.cpu[seg],
                                        p.cpu_capped[seg], p.cpu_env[seg],    p.peak_cpu,
                                        p.avg_cpu,         p.cpu[seg],        p.cpu_capped[seg]};
      for (int c = 0; c < kColumns; ++c) {
        if (first[c][k] <= o.max_runs) continue;
        sum[c] += v[c];
        double cap = is_memory(c)       ? mem_cap
                     : is_overcommit(c) ? cpu_cap * o.cpu_overcommit
                                        : cpu_cap;
        if (sum[c] > cap) {
          first[c][k] = n;
          --open;
        }
      }
    }
  }

  // N fits column c when at most floor(risk * trials) trials exceeded with N runs.
  auto fits = [&](int c) {
    std::vector<size_t> f = first[c];
    size_t m = static_cast<size_t>(std::floor(o.risk * o.trials));
    std::nth_element(f.begin(), f.begin() + m, f.end());
    return f[m] - 1;
  };
  auto p_exceeded = [&](int c, size_t n) {
    size_t count =
        std::count_if(first[c].begin(), first[c].end(), [&](size_t f) { return f <= n; });
    return static_cast<double>(count) / o.trials;
  };
  auto mean_of = [&](auto field) {
    double s = 0;
    for (const auto& p : profiles) s += field(p);
    return s / profiles.size();
  };
  const double used_per_run = mean_of([](const TraceProfile& p) { return p.mean_mem; });

  Plan plan;
  plan.options = o;
  plan.policy_name = policy_name;
  plan.traces = profiles.size();
  plan.intents = intent_uses(profiles, policy);
  // fit_col decides N by memory; use_col is what the host really holds under the model (for
  // P(>host)); cpu_use_col is the row's CPU demand (P(cpu>host) and, against the overcommitted
  // cores, N by CPU).
  auto make = [&](std::string name, int fit_col, int use_col, int cpu_fit_col, int cpu_use_col,
                  double reserved_per_run, double used_per_run) {
    PolicyFit f;
    f.policy = std::move(name);
    f.fits_by_memory = fits(fit_col);
    f.fits_by_cpu_demand =
        fits(cpu_use_col == kCpuCapped ? kCpuCappedOvercommit : kCpuActualOvercommit);
    f.fits = std::min(f.fits_by_memory, f.fits_by_cpu_demand);
    f.at_least = f.fits >= o.max_runs;
    f.binding = f.at_least                                 ? "none"
                : f.fits_by_memory == f.fits_by_cpu_demand ? "both"
                : f.fits_by_memory < f.fits_by_cpu_demand  ? "memory"
                                                           : "cpu";
    f.p_memory_exceeded = p_exceeded(use_col, f.fits);
    f.p_cpu_exceeded = p_exceeded(cpu_use_col, f.fits);
    f.fits_by_cpu = fits(cpu_fit_col);
    f.reserved_bytes = reserved_per_run * f.fits;
    f.used_bytes = used_per_run * f.fits;
    return f;
  };

  PolicyFit peak = make("static-peak", kMemPeak, kMemActual, kCpuPeak, kCpuActual,
                        mean_of([](const TraceProfile& p) { return p.peak_mem; }), used_per_run);
  peak.note = "each run reserves its own peak; use never exceeds it";
  plan.fits.push_back(peak);

  PolicyFit avg = make("static-average", kMemAverage, kMemActual, kCpuAverage, kCpuActual,
                       mean_of([](const TraceProfile& p) { return p.avg_mem; }), used_per_run);
  double killed = mean_of([](const TraceProfile& p) { return p.peak_mem > p.avg_mem ? 1.0 : 0.0; });
  double over = mean_of([](const TraceProfile& p) { return p.over_avg_share; });
  double lost = mean_of([](const TraceProfile& p) {
    return p.peak_mem > p.avg_mem ? 1 - p.first_over_avg_share : 0.0;
  });
  avg.extra = {{"runs_crossing_limit_share", killed},
               {"time_over_limit_share", over},
               {"run_time_lost_share", lost},
               {"p_memory_exceeded_unenforced", avg.p_memory_exceeded}};
  avg.note = fmt::format(
      "limit = the run's average; enforced: {:.0f}% of runs OOM-killed, {:.0f}% of run time "
      "lost; unenforced: P(host memory exceeded) as shown",
      killed * 100, lost * 100);
  plan.fits.push_back(avg);

  double call_ms = 0, over_ms = 0;
  for (const auto& p : profiles) call_ms += p.call_ms, over_ms += p.over_grant_ms;
  double over_grant = call_ms > 0 ? over_ms / call_ms : 0;
  const double envelope_per_run = mean_of([](const TraceProfile& p) { return p.mean_mem_env; });
  const double capped_per_run = mean_of([](const TraceProfile& p) { return p.mean_mem_capped; });
  // Admission on the distribution of what runs hold under per-call control: their actual use,
  // with each call held to its grant (a burst past it is throttled or killed, not shared).
  PolicyFit per_call = make("per-call", kMemCapped, kMemCapped, kCpuCapped, kCpuCapped,
                            envelope_per_run, capped_per_run);
  per_call.extra = {{"over_grant_call_time_share", over_grant}};
  per_call.note = fmt::format(
      "actual use, each call held to baseline + its grant; admitted on that distribution; "
      "{:.1f}% of call time over grant",
      over_grant * 100);
  plan.fits.push_back(per_call);
  // Admission that holds even if every active call uses its whole grant.
  PolicyFit envelope = make("per-call-grant", kMemEnvelope, kMemCapped, kCpuEnvelope, kCpuCapped,
                            envelope_per_run, capped_per_run);
  envelope.note = "baseline + the whole grant of every active call, admitted on that";
  plan.fits.push_back(envelope);

  PolicyFit actual =
      make("actual", kMemActual, kMemActual, kCpuActual, kCpuActual, used_per_run, used_per_run);
  actual.note = "reference: actual use, no reservation";
  plan.fits.push_back(actual);

  // Rows in plan.fits order: the memory admission column and the CPU demand column.
  const int fit_cols[] = {kMemPeak, kMemAverage, kMemCapped, kMemEnvelope, kMemActual};
  const int cpu_cols[] = {kCpuActual, kCpuActual, kCpuCapped, kCpuCapped, kCpuActual};

  // The slow-down at each row's headline N: a second pass over the same trials (the same
  // draws), summing the row's CPU demand up to its N.
  size_t deepest = 0;
  for (const auto& f : plan.fits) deepest = std::max(deepest, f.fits);
  std::vector<std::vector<double>> slowdowns(plan.fits.size());
  if (deepest > 0) {
    for (auto& s : slowdowns) s.reserve(o.trials);
    for (size_t k = 0; k < o.trials; ++k) {
      std::mt19937_64 rng = trial_rng(o.seed, k);
      double actual = 0, capped = 0;
      for (size_t n = 1; n <= deepest; ++n) {
        auto [p, seg] = draw_run(profiles, rng);
        actual += p->cpu[seg];
        capped += p->cpu_capped[seg];
        for (size_t i = 0; i < plan.fits.size(); ++i) {
          if (plan.fits[i].fits != n) continue;
          double demand = cpu_cols[i] == kCpuCapped ? capped : actual;
          slowdowns[i].push_back(std::max(1.0, demand / cpu_cap));
        }
      }
    }
  }
  for (size_t i = 0; i < plan.fits.size(); ++i) {
    if (slowdowns[i].empty()) continue;  // N = 0: nothing runs, nothing slows
    stats::Distribution<double> d(std::move(slowdowns[i]));
    plan.fits[i].cpu_slowdown_mean = d.mean();
    plan.fits[i].cpu_slowdown_p95 = d.percentile(95);
  }

  // The curves: each row's admission column and CPU demand column, on one N axis up to where
  // the last row's trials have all (or nearly all) exceeded: past it every curve is flat.
  size_t top = 1;
  for (int c : fit_cols)
    for (size_t f : first[c])
      if (f <= o.max_runs) top = std::max(top, f);
  for (int c : {kCpuActualOvercommit, kCpuCappedOvercommit})
    for (size_t f : first[c])
      if (f <= o.max_runs) top = std::max(top, f);
  plan.curve_max_runs = top;
  std::vector<size_t> grid;
  for (size_t i = 0; i < kCurvePoints; ++i) {
    size_t n = 1 + (top - 1) * i / (kCurvePoints - 1);
    if (grid.empty() || n != grid.back()) grid.push_back(n);
  }
  auto curve_of = [&](int c) {
    std::vector<size_t> sorted = first[c];
    std::sort(sorted.begin(), sorted.end());
    std::vector<PolicyFit::RiskPoint> curve;
    for (size_t n : grid) {
      size_t count = std::upper_bound(sorted.begin(), sorted.end(), n) - sorted.begin();
      curve.push_back({n, static_cast<double>(count) / o.trials});
    }
    return curve;
  };
  for (size_t i = 0; i < plan.fits.size(); ++i) {
    plan.fits[i].curve = curve_of(fit_cols[i]);
    plan.fits[i].cpu_curve =
        curve_of(cpu_cols[i] == kCpuCapped ? kCpuCappedOvercommit : kCpuActualOvercommit);
  }
  return plan;
}

Json to_json(const Plan& plan) {
  Json fits = Json::array();
  for (const auto& f : plan.fits) {
    Json j = {{"policy", f.policy},
              {"fits", f.fits},
              {"fits_is_lower_bound", f.at_least},
              {"fits_by_memory", f.fits_by_memory},
              {"fits_by_cpu_demand", f.fits_by_cpu_demand},
              {"binding", f.binding},
              {"cpu_slowdown_mean", f.cpu_slowdown_mean},
              {"cpu_slowdown_p95", f.cpu_slowdown_p95},
              {"p_memory_exceeded", f.p_memory_exceeded},
              {"p_cpu_exceeded", f.p_cpu_exceeded},
              {"fits_by_cpu", f.fits_by_cpu},
              {"reserved_bytes", f.reserved_bytes},
              {"used_bytes", f.used_bytes},
              {"note", f.note}};
    for (const auto& [k, v] : f.extra.items()) j[k] = v;
    Json curve = Json::array();
    for (const auto& p : f.curve) curve.push_back({p.runs, p.risk});
    j["risk_curve"] = curve;  // [runs, P(exceeded)] pairs
    Json cpu_curve = Json::array();
    for (const auto& p : f.cpu_curve) cpu_curve.push_back({p.runs, p.risk});
    j["cpu_risk_curve"] = cpu_curve;
    fits.push_back(j);
  }
  Json intents = Json::array();
  for (const auto& u : plan.intents) {
    intents.push_back({{"intent", u.intent},
                       {"calls", u.calls},
                       {"seconds", u.seconds},
                       {"grant_memory_bytes", u.grant_bytes ? Json(*u.grant_bytes) : Json(nullptr)},
                       {"above_baseline_p50_bytes", u.p50},
                       {"above_baseline_p99_bytes", u.p99},
                       {"above_baseline_max_bytes", u.max},
                       {"calls_over_grant", u.calls_over_grant}});
  }
  const PlanOptions& o = plan.options;
  return {{"schema_version", kPlanSchemaVersion},
          {"intents", intents},
          {"policy", plan.policy_name},
          {"traces", plan.traces},
          {"host_memory_bytes", o.host_memory_bytes},
          {"host_cpus", o.host_cpus},
          {"cpu_overcommit", o.cpu_overcommit},
          {"risk", o.risk},
          {"trials", o.trials},
          {"seed", o.seed},
          {"max_runs", o.max_runs},
          {"curve_max_runs", plan.curve_max_runs},
          {"fits", fits}};
}

}  // namespace sandgate::replay
