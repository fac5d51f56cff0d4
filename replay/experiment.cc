#include "replay/experiment.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "core/log.h"
#include "core/meminfo.h"
#include "core/state.h"
#include "core/stats.h"
#include "core/table.h"
#include "core/units.h"

namespace sandgate::replay {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

bool completed(const ReplayedCall& c) {
  return c.error.empty() && c.outcome.termination == controller::Termination::kExited &&
         c.outcome.exec.status.exited && c.outcome.exec.status.code == 0;
}

bool has_action(const ReplayedCall& c, const std::string& what) {
  for (const auto& a : c.outcome.observed.actions)
    if (a.action == what) return true;
  return false;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

Json opt(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }

// Agents alive at the end of a pass: neither killed nor lost before they started.
size_t agents_alive(const PolicyScores& s) {
  size_t lost = s.agents_killed + s.agents_not_started;
  return s.runs > lost ? s.runs - lost : 0;
}

Json to_json(const ErrorSummary& e) {
  return {{"n", e.n},
          {"median", e.median},
          {"p95", e.p95},
          {"max", e.max},
          {"within_target", e.within}};
}

}  // namespace

std::string to_string(PolicyKind k) {
  switch (k) {
    case PolicyKind::kNone:
      return "none";
    case PolicyKind::kStatic:
      return "static";
    case PolicyKind::kStaticPeak:
      return "static-peak";
    case PolicyKind::kPerCall:
      return "per-call";
  }
  return "?";
}

Result<PolicyChoice> resolve_policy(const std::string& arg, uint64_t avg_bytes,
                                    uint64_t peak_bytes) {
  PolicyChoice c;
  c.label = arg;
  auto static_sized = [&](uint64_t bytes) {
    controller::Grant run = controller::default_policy().run;
    // At least 1MiB: the policy's own floor for a size.
    run.memory_max = Bytes{std::max<uint64_t>(bytes, 1ull << 20)};
    run.memory_high.reset();
    c.run_limit_bytes = run.memory_max->value;
    c.policy = controller::static_policy(run);
  };
  if (arg == "none") {
    c.kind = PolicyKind::kNone;
    c.policy = controller::static_policy(controller::Grant{});
    c.policy.name = "none";
    // No limits means no tenant weights or budgets either: the built-in policy's tenants
    // (an interactive one weighted above the agents) would otherwise protect the victim here.
    c.policy.tenants = {{"default", controller::TenantPolicy{}}};
    c.policy.ladder.enabled = false;
    for (auto& [name, g] : c.policy.intents) g.timeout = Duration(0);
  } else if (arg == "static") {
    c.kind = PolicyKind::kStatic;
    static_sized(avg_bytes);
    c.policy.name = "static (average)";
  } else if (arg == "static-peak") {
    c.kind = PolicyKind::kStaticPeak;
    static_sized(peak_bytes + peak_bytes / 10);
    c.policy.name = "static (peak)";
  } else if (arg == "default") {
    c.policy = controller::default_policy();
    c.kind = PolicyKind::kPerCall;
  } else {
    SG_ASSIGN_OR_RETURN(c.policy, controller::load_policy_file(arg));
    c.kind = c.policy.mode == controller::PolicyMode::kStatic ? PolicyKind::kStatic
                                                              : PolicyKind::kPerCall;
    if (c.kind == PolicyKind::kStatic && c.policy.run.memory_max)
      c.run_limit_bytes = c.policy.run.memory_max->value;
  }
  return c;
}

controller::Policy with_victim_tenant(controller::Policy policy, const std::string& tenant) {
  if (!policy.tenants.count(tenant)) {
    auto d = policy.tenants.find("default");
    policy.tenants[tenant] = d != policy.tenants.end() ? d->second : controller::TenantPolicy{};
  }
  return policy;
}

Result<VictimLatency> parse_victim(const Json& j) {
  if (!j.is_object()) return logic_error("victim report", "expected a JSON object");
  VictimLatency v;
  auto num = [&](const char* key, double& out) -> Status {
    if (!j.contains(key) || !j[key].is_number())
      return logic_error("victim report", std::string("field '") + key + "': expected a number");
    out = j[key].get<double>();
    return {};
  };
  double count = 0, missed = 0;
  SG_TRY(num("count", count));
  SG_TRY(num("p50_us", v.p50_us));
  SG_TRY(num("p90_us", v.p90_us));
  SG_TRY(num("p99_us", v.p99_us));
  SG_TRY(num("max_us", v.max_us));
  SG_TRY(num("missed_deadlines", missed));
  v.count = static_cast<uint64_t>(count);
  v.missed_deadlines = static_cast<uint64_t>(missed);
  if (j.contains("alloc_count")) {
    double alloc_count = 0;
    SG_TRY(num("alloc_count", alloc_count));
    SG_TRY(num("alloc_p50_us", v.alloc_p50_us));
    SG_TRY(num("alloc_p95_us", v.alloc_p95_us));
    SG_TRY(num("alloc_p99_us", v.alloc_p99_us));
    v.alloc_count = static_cast<uint64_t>(alloc_count);
  }
  return v;
}

ErrorSummary summarize_errors(std::vector<double> values, double target) {
  stats::Distribution<double> d(std::move(values));
  ErrorSummary e;
  e.n = d.size();
  e.median = d.median();
  e.p95 = d.percentile(95);
  e.max = d.max();
  e.within = d.count_at_most(target);
  return e;
}

double gib_seconds(uint64_t bytes, double seconds) {
  return static_cast<double>(bytes) / kGiB * seconds;
}

PolicyScores score_policy(const PolicyChoice& policy, const std::vector<ReplayedRun>& runs,
                          const std::vector<RunUsage>& usage, uint64_t host_peak_bytes,
                          uint64_t host_budget_bytes, const std::optional<VictimLatency>& victim,
                          const std::optional<VictimLatency>& solo) {
  PolicyScores s;
  s.label = policy.label;
  s.kind = policy.kind;
  s.run_limit_bytes = policy.run_limit_bytes;
  s.runs = runs.size();
  s.host_peak_bytes = host_peak_bytes;
  s.host_budget_bytes = host_budget_bytes;
  s.victim = victim;
  if (victim && solo) {
    if (solo->p50_us > 0) s.victim_p50_inflation = victim->p50_us / solo->p50_us;
    if (solo->p99_us > 0) s.victim_p99_inflation = victim->p99_us / solo->p99_us;
  }

  double granted_call_gib_s = 0;
  std::vector<double> burst_to_action, mem_host, mem_self, start_err, end_err;
  for (const auto& r : runs) {
    if (!r.error.empty()) ++s.run_errors;
    if (r.agent_killed) ++s.agents_killed;
    if (r.start_failed) ++s.agents_not_started;
    if (r.planned_calls > r.calls.size()) s.never_made += r.planned_calls - r.calls.size();
    for (const auto& c : r.calls) {
      ++s.calls;
      double wall_s = to_seconds(c.outcome.exec.wall);
      if (!c.error.empty()) {
        ++s.not_run;
        continue;
      }
      using controller::Termination;
      switch (c.outcome.termination) {
        case Termination::kExited:
          if (completed(c))
            ++s.completed;
          else
            ++s.failed_exit;
          break;
        case Termination::kTimeout:
          ++s.timed_out;
          break;
        case Termination::kCancelled:
          ++s.cancelled;
          break;
        case Termination::kMemoryLimit:
        case Termination::kPidsLimit:
        case Termination::kKilled:
          ++s.killed;
          break;
        // The command could not be started (a shell's 127/126): nothing ran, as with an error.
        case Termination::kNotStarted:
          ++s.not_run;
          break;
      }
      if (has_action(c, "throttle")) ++s.throttled;
      if (has_action(c, "freeze") || c.outcome.observed.frozen_for.count() > 0) ++s.frozen;
      if (!completed(c)) s.work_lost_call_s += wall_s;
      if (c.outcome.grant.memory_max)
        granted_call_gib_s += gib_seconds(c.outcome.grant.memory_max->value, wall_s);
      // The first thing the ladder did, measured from the burst onset in the call.
      for (const auto& a : c.outcome.observed.actions) {
        if (a.action == "unthrottle" || a.action == "thaw") continue;
        ++s.calls_with_action;
        burst_to_action.push_back(to_millis(a.at) - static_cast<double>(c.burst_onset_ms));
        break;
      }
      start_err.push_back(std::abs(c.actual_start_ms - c.planned_start_ms));
      // A call that was stopped ends early by design: its end says nothing about fidelity.
      if (!completed(c)) continue;
      end_err.push_back(std::abs(c.actual_end_ms - c.planned_end_ms));
      if (c.target_peak_bytes < kFidelityFloorBytes) {
        ++s.fidelity.calls_below_floor;
        continue;
      }
      ++s.fidelity.calls_scored;
      double target = static_cast<double>(c.target_peak_bytes);
      mem_host.push_back(
          std::abs(static_cast<double>(c.outcome.observed.peaks.memory_bytes) - target) / target);
      if (c.achieved)
        mem_self.push_back(std::abs(static_cast<double>(c.achieved->achieved_peak_mem) - target) /
                           target);
    }
  }
  s.started = s.calls - s.not_run;
  if (s.started) s.survival = static_cast<double>(s.completed) / static_cast<double>(s.started);
  s.fidelity.mem_host = summarize_errors(mem_host, kMemoryFidelityTarget);
  s.fidelity.mem_self = summarize_errors(mem_self, kMemoryFidelityTarget);
  s.fidelity.start_ms = summarize_errors(start_err, kTimingFidelityTargetMs);
  s.fidelity.end_ms = summarize_errors(end_err, kTimingFidelityTargetMs);
  if (!burst_to_action.empty()) {
    stats::Distribution<double> d(std::move(burst_to_action));
    s.burst_to_action_median_ms = d.median();
    s.burst_to_action_max_ms = d.max();
  }

  double main_gib_s = 0, run_limit_gib_s = 0;
  for (const auto& u : usage) {
    s.used_gib_s += u.used_gib_s;
    main_gib_s += u.main_gib_s;
    if (policy.run_limit_bytes)
      run_limit_gib_s += gib_seconds(*policy.run_limit_bytes, u.duration_s);
  }
  if (policy.kind == PolicyKind::kStatic || policy.kind == PolicyKind::kStaticPeak) {
    if (policy.run_limit_bytes) s.reserved_gib_s = run_limit_gib_s;
  } else if (policy.kind == PolicyKind::kPerCall) {
    s.reserved_gib_s = granted_call_gib_s + main_gib_s;
  }
  if (s.reserved_gib_s && s.used_gib_s > 0) s.reserved_over_used = *s.reserved_gib_s / s.used_gib_s;
  return s;
}

Json to_json(const PolicyScores& s) {
  Json j = {
      {"policy", s.label},
      {"kind", to_string(s.kind)},
      {"run_limit_bytes", s.run_limit_bytes ? Json(*s.run_limit_bytes) : Json(nullptr)},
      {"runs", s.runs},
      {"run_errors", s.run_errors},
      {"agents_killed", s.agents_killed},
      {"agents_not_started", s.agents_not_started},
      {"calls",
       {{"total", s.calls},
        {"completed", s.completed},
        {"throttled", s.throttled},
        {"frozen", s.frozen},
        {"cancelled", s.cancelled},
        {"killed", s.killed},
        {"timed_out", s.timed_out},
        {"failed_exit", s.failed_exit},
        {"not_run", s.not_run},
        {"never_made", s.never_made}}},
      {"work_lost_call_s", s.work_lost_call_s},
      {"started", s.started},
      {"survival", opt(s.survival)},
      {"budget_oom_kills", s.budget_oom_kills ? Json(*s.budget_oom_kills) : Json(nullptr)},
      {"budget_peak_bytes", s.budget_peak_bytes ? Json(*s.budget_peak_bytes) : Json(nullptr)},
      {"victim", s.victim ? to_json(*s.victim) : Json(nullptr)},
      {"victim_lost", s.victim_lost.empty() ? Json(nullptr) : Json(s.victim_lost)},
      {"victim_p50_inflation", opt(s.victim_p50_inflation)},
      {"victim_p99_inflation", opt(s.victim_p99_inflation)},
      {"host_peak_bytes", s.host_peak_bytes},
      {"host_budget_bytes", s.host_budget_bytes},
      {"host_peak_over_budget", s.host_budget_bytes ? Json(static_cast<double>(s.host_peak_bytes) /
                                                           static_cast<double>(s.host_budget_bytes))
                                                    : Json(nullptr)},
      {"reserved_gib_s", opt(s.reserved_gib_s)},
      {"used_gib_s", s.used_gib_s},
      {"reserved_over_used", opt(s.reserved_over_used)},
      {"calls_with_action", s.calls_with_action},
      {"burst_to_first_action_ms",
       {{"median", opt(s.burst_to_action_median_ms)}, {"max", opt(s.burst_to_action_max_ms)}}},
      {"fidelity",
       {{"calls_scored", s.fidelity.calls_scored},
        {"calls_below_floor", s.fidelity.calls_below_floor},
        {"floor_bytes", kFidelityFloorBytes},
        {"memory_peak_rel_error_host", to_json(s.fidelity.mem_host)},
        {"memory_peak_rel_error_self", to_json(s.fidelity.mem_self)},
        {"memory_target", kMemoryFidelityTarget},
        {"start_abs_error_ms", to_json(s.fidelity.start_ms)},
        {"end_abs_error_ms", to_json(s.fidelity.end_ms)},
        {"timing_target_ms", kTimingFidelityTargetMs}}},
      {"wall_s", s.wall_s},
  };
  return j;
}

Json to_json(const VictimLatency& v) {
  return {{"count", v.count},
          {"p50_us", v.p50_us},
          {"p90_us", v.p90_us},
          {"p99_us", v.p99_us},
          {"max_us", v.max_us},
          {"missed_deadlines", v.missed_deadlines},
          {"alloc_count", v.alloc_count},
          {"alloc_p50_us", v.alloc_p50_us},
          {"alloc_p95_us", v.alloc_p95_us},
          {"alloc_p99_us", v.alloc_p99_us},
          {"psi_ms",
           {{"cpu_some", opt(v.psi_cpu_some_ms)},
            {"cpu_full", opt(v.psi_cpu_full_ms)},
            {"memory_some", opt(v.psi_memory_some_ms)},
            {"memory_full", opt(v.psi_memory_full_ms)}}},
          {"runq_delay_ms", opt(v.runq_delay_ms)},
          {"runq_waits", v.runq_waits}};
}

Json to_json(const ReplayedRun& r) {
  Json calls = Json::array();
  for (const auto& c : r.calls) {
    Json j = {{"id", c.id},
              {"intent", c.intent},
              {"planned_start_ms", c.planned_start_ms},
              {"planned_end_ms", c.planned_end_ms},
              {"actual_start_ms", c.actual_start_ms},
              {"actual_end_ms", c.actual_end_ms},
              {"target_peak_bytes", c.target_peak_bytes},
              {"burst_onset_ms", c.burst_onset_ms}};
    if (!c.error.empty())
      j["error"] = c.error;
    else
      j["outcome"] = controller::to_json(c.outcome, /*with_output=*/false);
    j["achieved"] = c.achieved ? c.achieved->to_json() : Json(nullptr);
    calls.push_back(std::move(j));
  }
  Json j = {{"trace", r.name}, {"run_id", r.run_id}, {"wall_s", r.wall_s}, {"calls", calls}};
  if (!r.error.empty()) j["error"] = r.error;
  return j;
}

std::string format_table(const std::vector<PolicyScores>& scores,
                         const std::optional<VictimLatency>& solo) {
  std::vector<std::pair<std::string, std::vector<std::string>>> rows;
  auto row = [&](const std::string& name, auto cell) {
    std::vector<std::string> cells;
    for (const auto& s : scores) cells.push_back(cell(s));
    rows.emplace_back(name, std::move(cells));
  };
  auto mib = [](uint64_t b) { return human_bytes(Bytes{b}); };
  auto ratio = [](const std::optional<double>& v) {
    return v ? fmt("%.2fx", *v) : std::string("-");
  };
  row("policy kind", [](const PolicyScores& s) { return to_string(s.kind); });
  row("run limit", [&](const PolicyScores& s) {
    return s.run_limit_bytes ? mib(*s.run_limit_bytes) : std::string("per call");
  });
  if (solo) {
    row("victim p50 (solo " + fmt("%.0fus", solo->p50_us) + ")", [&](const PolicyScores& s) {
      return s.victim ? fmt("%.0fus", s.victim->p50_us) + " " + ratio(s.victim_p50_inflation)
                      : std::string("-");
    });
    row("victim p99 (solo " + fmt("%.0fus", solo->p99_us) + ")", [&](const PolicyScores& s) {
      return s.victim ? fmt("%.0fus", s.victim->p99_us) + " " + ratio(s.victim_p99_inflation)
                      : std::string("-");
    });
  }
  auto victim_cell = [](const PolicyScores& s, auto get) {
    if (!s.victim) return std::string("-");
    std::optional<double> v = get(*s.victim);
    return v ? fmt("%.1f", *v) : std::string("-");
  };
  bool any_victim = false, any_victim_lost = false;
  for (const auto& s : scores) {
    any_victim = any_victim || s.victim.has_value();
    any_victim_lost = any_victim_lost || !s.victim_lost.empty();
  }
  // Its figures are "-" where it died; this row says so (the reason is in the JSON).
  if (any_victim_lost)
    row("victim alive at the end", [](const PolicyScores& s) {
      return !s.victim_lost.empty() ? std::string("no") : s.victim ? "yes" : "-";
    });
  if (any_victim) {
    row("victim alloc P95 (us)", [&](const PolicyScores& s) {
      return victim_cell(s, [](const VictimLatency& v) -> std::optional<double> {
        return v.alloc_count ? std::optional<double>(v.alloc_p95_us) : std::nullopt;
      });
    });
    row("victim PSI cpu some/full ms", [&](const PolicyScores& s) {
      return victim_cell(s, [](const VictimLatency& v) { return v.psi_cpu_some_ms; }) + "/" +
             victim_cell(s, [](const VictimLatency& v) { return v.psi_cpu_full_ms; });
    });
    row("victim PSI mem some/full ms", [&](const PolicyScores& s) {
      return victim_cell(s, [](const VictimLatency& v) { return v.psi_memory_some_ms; }) + "/" +
             victim_cell(s, [](const VictimLatency& v) { return v.psi_memory_full_ms; });
    });
    row("victim run-queue delay ms", [&](const PolicyScores& s) {
      return victim_cell(s, [](const VictimLatency& v) { return v.runq_delay_ms; });
    });
  }
  row("calls", [](const PolicyScores& s) { return std::to_string(s.calls); });
  row("  completed", [](const PolicyScores& s) { return std::to_string(s.completed); });
  row("  throttled (any)", [](const PolicyScores& s) { return std::to_string(s.throttled); });
  row("  frozen (any)", [](const PolicyScores& s) { return std::to_string(s.frozen); });
  row("  cancelled", [](const PolicyScores& s) { return std::to_string(s.cancelled); });
  row("  killed / OOM", [](const PolicyScores& s) { return std::to_string(s.killed); });
  row("  timed out", [](const PolicyScores& s) { return std::to_string(s.timed_out); });
  row("  failed exit / not run", [](const PolicyScores& s) {
    return std::to_string(s.failed_exit) + " / " + std::to_string(s.not_run);
  });
  row("  never made (agent lost)",
      [](const PolicyScores& s) { return std::to_string(s.never_made); });
  row("work lost (call-s)", [](const PolicyScores& s) { return fmt("%.1f", s.work_lost_call_s); });
  row("survival (done/started)", [](const PolicyScores& s) {
    return s.survival ? fmt("%.0f%%", *s.survival * 100) + " (" + std::to_string(s.completed) +
                            "/" + std::to_string(s.started) + ")"
                      : std::string("-");
  });
  row("agents surviving (runs)", [](const PolicyScores& s) {
    std::string cell = std::to_string(agents_alive(s)) + "/" + std::to_string(s.runs);
    if (s.agents_not_started)
      cell += " (" + std::to_string(s.agents_not_started) + " never started)";
    return cell;
  });
  row("budget OOM kills", [](const PolicyScores& s) {
    return s.budget_oom_kills ? std::to_string(*s.budget_oom_kills)
                              : std::string("- (not enforced)");
  });
  row("host peak / budget", [&](const PolicyScores& s) {
    return mib(s.host_peak_bytes) + " / " + mib(s.host_budget_bytes);
  });
  row("budget cgroup peak", [&](const PolicyScores& s) {
    return s.budget_peak_bytes ? mib(*s.budget_peak_bytes) : std::string("-");
  });
  row("reserved GiB-s", [](const PolicyScores& s) {
    return s.reserved_gib_s ? fmt("%.2f", *s.reserved_gib_s) : std::string("-");
  });
  row("used GiB-s", [](const PolicyScores& s) { return fmt("%.2f", s.used_gib_s); });
  row("reserved / used", [&](const PolicyScores& s) { return ratio(s.reserved_over_used); });
  row("burst->1st action med/max", [](const PolicyScores& s) {
    if (!s.burst_to_action_median_ms)
      return std::string("- (") + std::to_string(s.calls_with_action) + " calls)";
    return fmt("%.0f", *s.burst_to_action_median_ms) + "/" +
           fmt("%.0fms", *s.burst_to_action_max_ms) + " (" + std::to_string(s.calls_with_action) +
           ")";
  });
  // "median/max within/n<=target", the target and the floor written from the constants the
  // scores use, so the table cannot say another target than the one applied.
  auto within = [](const ErrorSummary& e, const std::string& target) {
    return " " + std::to_string(e.within) + "/" + std::to_string(e.n) + "<=" + target;
  };
  auto memory_error = [&](const ErrorSummary& e, const std::string& none) {
    if (!e.n) return none;
    return fmt("%.1f%%", e.median * 100) + "/" + fmt("%.1f%%", e.max * 100) +
           within(e, fmt("%.0f%%", kMemoryFidelityTarget * 100));
  };
  auto timing_error = [&](const ErrorSummary& e) {
    return fmt("%.0f", e.median) + "/" + fmt("%.0fms", e.max) +
           within(e, fmt("%.0fms", kTimingFidelityTargetMs));
  };
  row("mem peak err host med/max", [&](const PolicyScores& s) {
    return memory_error(s.fidelity.mem_host,
                        "- (no call >= " + format_bytes(Bytes{kFidelityFloorBytes}) + ")");
  });
  row("mem peak err self med/max",
      [&](const PolicyScores& s) { return memory_error(s.fidelity.mem_self, "-"); });
  row("start err med/max",
      [&](const PolicyScores& s) { return timing_error(s.fidelity.start_ms); });
  row("end err med/max", [&](const PolicyScores& s) { return timing_error(s.fidelity.end_ms); });
  row("wall", [](const PolicyScores& s) { return fmt("%.1fs", s.wall_s); });

  std::vector<TextTable::Column> columns = {{""}};
  for (const auto& s : scores) columns.push_back({s.label});
  TextTable table(std::move(columns));
  for (auto& [name, cells] : rows) {
    cells.insert(cells.begin(), name);
    table.row(std::move(cells));
  }
  return table.render();
}

std::string order_by_intervals(const std::vector<std::string>& names,
                               const std::vector<stats::BootstrapInterval>& intervals,
                               std::vector<std::string>* significant) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < names.size() && i < intervals.size(); ++i)
    if (intervals[i].n) idx.push_back(i);
  // With fewer trials, two samples of one distribution fall apart too often (n = 2: a third of
  // the time) for a claim; at 5 the bootstrap's interval is the whole range, and two ranges of
  // 5 from one distribution are apart 2 / C(10, 5) = 0.8% of the time.
  for (size_t i : idx)
    if (intervals[i].n < kMinTrialsToRank)
      return "no significant difference (fewer than " + std::to_string(kMinTrialsToRank) +
             " trials)";
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    return intervals[a].estimate < intervals[b].estimate;
  });
  bool any = false;
  for (size_t i = 0; i < idx.size(); ++i)
    for (size_t k = i + 1; k < idx.size(); ++k) {
      auto o = stats::compare_intervals(intervals[idx[i]], intervals[idx[k]]);
      if (o == stats::IntervalOrder::kNoDifference) continue;
      any = true;
      size_t lo = o == stats::IntervalOrder::kLower ? idx[i] : idx[k];
      size_t hi = lo == idx[i] ? idx[k] : idx[i];
      if (significant) significant->push_back(names[lo] + " < " + names[hi]);
    }
  if (!any) return "no significant difference";
  std::string out = names[idx[0]];
  for (size_t i = 1; i < idx.size(); ++i) {
    bool apart = stats::compare_intervals(intervals[idx[i - 1]], intervals[idx[i]]) ==
                 stats::IntervalOrder::kLower;
    out += (apart ? " < " : " ~ ") + names[idx[i]];
  }
  return out;
}

std::vector<MetricSummary> summarize_trials(const std::vector<TrialFigures>& figures) {
  using Get = std::function<std::optional<double>(const PolicyScores&,
                                                  const std::optional<VictimLatency>& solo)>;
  auto victim = [](auto f) -> Get {
    return
        [f](const PolicyScores& s, const std::optional<VictimLatency>&) -> std::optional<double> {
          if (!s.victim) return std::nullopt;
          return f(*s.victim);
        };
  };
  struct Def {
    const char* metric;
    const char* unit;
    Get get;
  };
  const std::vector<Def> defs = {
      {"victim_p50", "us",
       victim([](const VictimLatency& v) -> std::optional<double> { return v.p50_us; })},
      {"victim_p99", "us",
       victim([](const VictimLatency& v) -> std::optional<double> { return v.p99_us; })},
      // Each trial's p99 over the solo p99 of the same trial (the machine drifts between trials).
      {"victim_p99_inflation", "x",
       [](const PolicyScores& s,
          const std::optional<VictimLatency>& solo) -> std::optional<double> {
         if (!s.victim || !solo || solo->p99_us <= 0) return std::nullopt;
         return s.victim->p99_us / solo->p99_us;
       }},
      {"victim_alloc_p95", "us", victim([](const VictimLatency& v) -> std::optional<double> {
         return v.alloc_count ? std::optional<double>(v.alloc_p95_us) : std::nullopt;
       })},
      {"victim_psi_cpu_some", "ms",
       victim([](const VictimLatency& v) { return v.psi_cpu_some_ms; })},
      {"victim_psi_cpu_full", "ms",
       victim([](const VictimLatency& v) { return v.psi_cpu_full_ms; })},
      {"victim_psi_memory_some", "ms",
       victim([](const VictimLatency& v) { return v.psi_memory_some_ms; })},
      {"victim_psi_memory_full", "ms",
       victim([](const VictimLatency& v) { return v.psi_memory_full_ms; })},
      {"victim_runq_delay", "ms", victim([](const VictimLatency& v) { return v.runq_delay_ms; })},
      {"survival", "",
       [](const PolicyScores& s, const std::optional<VictimLatency>&) { return s.survival; }},
      {"work_lost", "call-s",
       [](const PolicyScores& s, const std::optional<VictimLatency>&) -> std::optional<double> {
         return s.work_lost_call_s;
       }},
      {"agents_surviving", "",
       [](const PolicyScores& s, const std::optional<VictimLatency>&) -> std::optional<double> {
         if (!s.runs) return std::nullopt;
         return static_cast<double>(agents_alive(s)) / static_cast<double>(s.runs);
       }},
      {"budget_oom_kills", "",
       [](const PolicyScores& s, const std::optional<VictimLatency>&) -> std::optional<double> {
         if (!s.budget_oom_kills) return std::nullopt;
         return static_cast<double>(*s.budget_oom_kills);
       }},
  };
  std::vector<MetricSummary> out;
  for (const auto& d : defs) {
    MetricSummary m;
    m.metric = d.metric;
    m.unit = d.unit;
    for (const auto& f : figures) {
      std::vector<double> values;
      for (size_t t = 0; t < f.trials.size(); ++t) {
        std::optional<VictimLatency> solo = t < f.solo.size() ? f.solo[t] : std::nullopt;
        if (auto v = d.get(f.trials[t], solo)) values.push_back(*v);
      }
      if (values.empty()) continue;
      m.policies.push_back(f.policy);
      m.intervals.push_back(stats::bootstrap_median(std::move(values)));
    }
    if (m.policies.empty()) continue;
    m.ordering = order_by_intervals(m.policies, m.intervals, &m.significant);
    out.push_back(std::move(m));
  }
  return out;
}

Json to_json(const MetricSummary& m) {
  Json by = Json::object();
  for (size_t i = 0; i < m.policies.size(); ++i) {
    const auto& b = m.intervals[i];
    by[m.policies[i]] = {
        {"median", b.estimate}, {"ci_low", b.low}, {"ci_high", b.high}, {"n", b.n}};
  }
  return {{"metric", m.metric},
          {"unit", m.unit},
          {"confidence", m.intervals.empty() ? 0.0 : m.intervals.front().confidence},
          {"by_policy", by},
          {"ordering", m.ordering},
          {"significant", m.significant}};
}

std::string format_summary(const std::vector<MetricSummary>& summary) {
  if (summary.empty()) return "";
  std::vector<std::string> policies;
  for (const auto& m : summary)
    for (const auto& p : m.policies)
      if (std::find(policies.begin(), policies.end(), p) == policies.end()) policies.push_back(p);
  std::vector<TextTable::Column> columns = {{"median [95% CI] over trials"}};
  for (const auto& p : policies) columns.push_back({p});
  TextTable table(std::move(columns));
  auto number = [](double v) {
    return std::abs(v) >= 100 || v == std::floor(v) ? fmt("%.0f", v) : fmt("%.2f", v);
  };
  for (const auto& m : summary) {
    std::vector<std::string> cells = {m.metric + (m.unit.empty() ? "" : " (" + m.unit + ")")};
    for (const auto& p : policies) {
      auto it = std::find(m.policies.begin(), m.policies.end(), p);
      if (it == m.policies.end()) {
        cells.push_back("-");
        continue;
      }
      const auto& b = m.intervals[static_cast<size_t>(it - m.policies.begin())];
      cells.push_back(number(b.estimate) + " [" + number(b.low) + ", " + number(b.high) + "]");
    }
    table.row(std::move(cells));
  }
  std::string out = table.render();
  out += "Ordering (lowest first; '<' only where the 95% intervals do not overlap):\n";
  for (const auto& m : summary) out += "  " + m.metric + ": " + m.ordering + "\n";
  return out;
}

void UsageSeries::add(double t_ms, uint64_t memory_bytes, double cpu_cores) {
  if (in_bucket_ == 0) bucket_ = {t_ms, memory_bytes, 0};
  bucket_.memory_bytes = std::max(bucket_.memory_bytes, memory_bytes);
  bucket_.cpu_cores += cpu_cores;
  if (++in_bucket_ < stride_) return;
  bucket_.cpu_cores /= static_cast<double>(in_bucket_);
  points_.push_back(bucket_);
  in_bucket_ = 0;
  if (points_.size() < kMaxUsagePoints) return;
  // Full: merge neighbours, so the series covers the same time with half the points.
  std::vector<UsagePoint> merged;
  for (size_t i = 0; i + 1 < points_.size(); i += 2)
    merged.push_back({points_[i].t_ms,
                      std::max(points_[i].memory_bytes, points_[i + 1].memory_bytes),
                      (points_[i].cpu_cores + points_[i + 1].cpu_cores) / 2});
  points_ = std::move(merged);
  stride_ *= 2;
}

namespace {

// Host memory and each open run's memory, every interval, on a thread of its own.
class HostSampler {
 public:
  HostSampler(controller::CgroupBackend& backend, HostPaths paths, Duration interval)
      : backend_(backend), paths_(std::move(paths)), interval_(interval) {
    thread_ = std::thread([this] { loop(); });
  }
  ~HostSampler() { stop(); }
  void opened(const std::string& run, const controller::Cgroup& run_cg,
              const controller::Cgroup& main_cg) {
    std::lock_guard lock(mu_);
    auto& w = watched_[run];
    w.run_cg = run_cg;
    w.main_cg = main_cg;
    w.usage.run = run;
    w.open = true;
    w.started = Clock::now();
    w.origin = w.started;
    w.last = w.started;
  }
  void ready(const std::string& run) {
    std::lock_guard lock(mu_);
    if (auto it = watched_.find(run); it != watched_.end()) it->second.origin = Clock::now();
  }
  void closed(const std::string& run) {
    std::lock_guard lock(mu_);
    auto it = watched_.find(run);
    if (it == watched_.end()) return;
    it->second.open = false;
    it->second.usage.duration_s =
        std::chrono::duration<double>(Clock::now() - it->second.started).count();
    // The last word on the kills of the run's resident processes (its hold), before the run's
    // cgroups go.
    if (auto u = backend_.read_usage(it->second.main_cg); u.ok())
      it->second.main_oom_kills = std::max(it->second.main_oom_kills, u->memory_events.oom_kill);
  }
  // OOM kills of processes in the runs' main cgroups (their own counters).
  uint64_t main_oom_kills() const {
    std::lock_guard lock(mu_);
    uint64_t n = 0;
    for (const auto& [name, w] : watched_) n += w.main_oom_kills;
    return n;
  }
  void stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  uint64_t host_peak() const { return host_peak_; }
  std::vector<RunUsage> usage() const {
    std::vector<RunUsage> out;
    std::lock_guard lock(mu_);
    for (const auto& [name, w] : watched_) {
      out.push_back(w.usage);
      // On the replay clock: samples taken before the run was ready are dropped.
      double shift = std::chrono::duration<double, std::milli>(w.origin - w.started).count();
      for (auto p : w.series.points())
        if (p.t_ms >= shift)
          out.back().series.push_back({p.t_ms - shift, p.memory_bytes, p.cpu_cores});
    }
    return out;
  }

 private:
  struct Watched {
    controller::Cgroup run_cg, main_cg;
    RunUsage usage;
    UsageSeries series;  // ms since started
    std::optional<uint64_t> last_cpu_us;
    uint64_t main_oom_kills = 0;
    bool open = false;
    Clock::time_point started, origin, last;
  };
  void loop() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      lock.unlock();
      if (auto m = read_meminfo(paths_); m.ok() && m->used_bytes())
        host_peak_ = std::max(host_peak_, *m->used_bytes());
      lock.lock();
      for (auto& [name, w] : watched_) {
        if (!w.open) continue;
        auto now = Clock::now();
        double dt = std::chrono::duration<double>(now - w.last).count();
        w.last = now;
        if (auto u = backend_.read_usage(w.run_cg); u.ok()) {
          w.usage.used_gib_s += gib_seconds(u->memory_current, dt);
          double cores = w.last_cpu_us && dt > 0 && u->cpu_usage_us >= *w.last_cpu_us
                             ? static_cast<double>(u->cpu_usage_us - *w.last_cpu_us) / 1e6 / dt
                             : 0;
          w.last_cpu_us = u->cpu_usage_us;
          w.series.add(std::chrono::duration<double, std::milli>(now - w.started).count(),
                       u->memory_current, cores);
        }
        if (auto u = backend_.read_usage(w.main_cg); u.ok()) {
          w.usage.main_gib_s += gib_seconds(u->memory_current, dt);
          w.main_oom_kills = std::max(w.main_oom_kills, u->memory_events.oom_kill);
        }
      }
      cv_.wait_for(lock, interval_, [this] { return stop_; });
    }
  }
  controller::CgroupBackend& backend_;
  HostPaths paths_;
  Duration interval_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::map<std::string, Watched> watched_;
  uint64_t host_peak_ = 0;
  std::thread thread_;
};

uint64_t mem_total(const HostPaths& paths) {
  auto m = read_meminfo(paths);
  return m.ok() ? m->total_bytes : 0;
}

// The growth of a pressure total between two reads, in ms.
std::optional<double> stall_ms(const std::optional<PressureLine>& before,
                               const std::optional<PressureLine>& after) {
  if (!before || !after || after->total_us < before->total_us) return std::nullopt;
  return static_cast<double>(after->total_us - before->total_us) / 1000.0;
}
std::optional<PressureLine> some_of(const std::optional<Pressure>& p) {
  return p ? std::optional<PressureLine>(p->some) : std::nullopt;
}
std::optional<PressureLine> full_of(const std::optional<Pressure>& p) {
  return p ? p->full : std::nullopt;
}

// What became of the victim in a pass: its figures, or why it has none.
struct VictimOutcome {
  std::optional<VictimLatency> latency;
  std::string lost;  // set when it died: its run could not start, or it was killed
};

// The victim in a run of its own, in its own tenant (options.victim_tenant), in that run's main
// cgroup (not a call: no call timeout applies to it, and its limits are the run's and its
// tenant's). Its run cgroup's pressure totals are read around it, and its run-queue delay is
// collected when a tracer is given. Made in two steps, open() then run(), so that a pass can
// make the victim's run and see its process start before any agent loads the budget.
class VictimRun {
 public:
  static Result<VictimRun> open(controller::Controller& controller, providers::Provider& provider,
                                const ExperimentOptions& options) {
    providers::EnvSpec spec;
    spec.tenant = options.victim_tenant;
    spec.readonly_mounts.push_back({options.load_binary, kLoadInside});
    session::RunOptions run_options;
    run_options.tracer = options.tracer;
    // The victim makes no calls: a process parked ahead for a first call would only take room
    // in the budget the victim shares (a fork of the supervisor: tens of MiB under ASan).
    run_options.park_ahead = false;
    SG_ASSIGN_OR_RETURN(auto run,
                        session::RunSession::open(controller, provider, spec, run_options));
    return VictimRun(controller, options, std::move(run));
  }

  // Runs `sandgate-load victim` for `duration`, then closes the run. `started` is called once
  // the victim's process exists in its cgroups, just before it execs (where the provider says
  // so: providers::Call::on_started). The victim killed, or its run failing under it, is an
  // outcome (`lost`); an error is the victim's own failure (an exit status of its own, an
  // unreadable report), which no budget explains.
  Result<VictimOutcome> run(Duration duration, const std::function<void()>& started) {
    providers::Call call;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(duration).count();
    auto iv =
        std::chrono::duration_cast<std::chrono::milliseconds>(options_->victim_interval).count();
    call.argv = {kLoadInside,  "victim",
                 "--duration", std::to_string(ms) + "ms",
                 "--interval", std::to_string(iv) + "ms",
                 "--json"};
    if (started) call.on_started = [&](pid_t) { started(); };
    const controller::Cgroup run_cg = run_->run().cgroup();
    auto& backend = controller_->backend();
    // The victim's process lives in <run>/main: its run-queue delay is that cgroup's.
    uint64_t main_id = 0;
    if (options_->tracer) {
      auto main = main_cgroup_of(run_cg);
      if (auto dir = main.dirs.find("unified"); dir != main.dirs.end()) {
        if (auto id = ebpf::cgroup_id_of(dir->second); id.ok()) {
          main_id = *id;
          options_->tracer->begin(main_id);
        } else {
          spdlog::debug("victim run-queue delay: {}", id.error().message());
        }
      }
    }
    auto before = backend.read_usage(run_cg);
    auto r = run_->run_resident(call);
    auto after = backend.read_usage(run_cg);
    TracedActivity traced;
    if (main_id) traced = options_->tracer->end(main_id);
    (void)run_->close();
    // Under a budget the kernel may kill the victim, or its run's supervisor (which ends the
    // call with an error): the victim died, and that is what the pass reports.
    if (!r.ok())
      return VictimOutcome{std::nullopt, "its run failed while it ran: " + r.error().message()};
    if (!r->status.exited)
      return VictimOutcome{std::nullopt, "killed while it ran (" + r->status.describe() + ")"};
    if (r->status.code != 0)
      return logic_error("victim", "sandgate-load victim ended with " + r->status.describe() +
                                       ": " + r->stderr_data);
    SG_ASSIGN_OR_RETURN(Json j, parse_json(r->stdout_data, "victim report"));
    SG_ASSIGN_OR_RETURN(VictimLatency v, parse_victim(j));
    if (before.ok() && after.ok()) {
      v.psi_cpu_some_ms = stall_ms(some_of(before->cpu_pressure), some_of(after->cpu_pressure));
      v.psi_cpu_full_ms = stall_ms(full_of(before->cpu_pressure), full_of(after->cpu_pressure));
      v.psi_memory_some_ms =
          stall_ms(some_of(before->memory_pressure), some_of(after->memory_pressure));
      v.psi_memory_full_ms =
          stall_ms(full_of(before->memory_pressure), full_of(after->memory_pressure));
    }
    if (main_id) {
      v.runq_delay_ms = static_cast<double>(traced.runq_delay_ns) / 1e6;
      v.runq_waits = traced.runq_waits;
    }
    return VictimOutcome{v, ""};
  }

 private:
  VictimRun(controller::Controller& controller, const ExperimentOptions& options,
            std::unique_ptr<session::RunSession> run)
      : controller_(&controller), options_(&options), run_(std::move(run)) {}
  controller::Controller* controller_;
  const ExperimentOptions* options_;  // the caller's; outlives the run
  std::unique_ptr<session::RunSession> run_;
};

// Opens once (the victim's process started, or its attempt over); waited on with a bound.
class StartSignal {
 public:
  void notify() {
    {
      std::lock_guard lock(mu_);
      started_ = true;
    }
    cv_.notify_all();
  }
  void wait_for(Duration limit) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, limit, [this] { return started_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
};

// The host budget as a cgroup: <root>, limited to the budget, holding every tenant of the pass
// (the controller's root), with an empty child <root>/keep so that the controller, which removes
// its root when its last run ends, leaves it (and its OOM counter) to be read after the pass.
// Both are recorded in a run record of their own, so `sandgate gc` removes them after a crash.
class BudgetCgroup {
 public:
  static Result<BudgetCgroup> make(controller::CgroupBackend& backend, const HostPaths& paths,
                                   const std::string& root, uint64_t bytes) {
    std::string id = root.substr(root.rfind('/') + 1);
    SG_ASSIGN_OR_RETURN(RunState state, RunState::create(paths, "replay-" + id, "replay"));
    BudgetCgroup b(backend, std::move(state));
    // The parent (sandgate's cgroup root) is shared with other runs and processes: made if
    // absent but recorded as a parent, removed only when empty, never killed (as the
    // controller does with its root and tenants).
    SG_ASSIGN_OR_RETURN(b.parent_, backend.create(root.substr(0, root.rfind('/')), nullptr));
    for (const auto& [h, dir] : b.parent_.dirs) {
      Resource r{Resource::Kind::kCgroupParent, dir};
      if (std::find(b.state_->resources().begin(), b.state_->resources().end(), r) ==
          b.state_->resources().end())
        SG_TRY(b.state_->record(r));
    }
    SG_ASSIGN_OR_RETURN(b.cg_, backend.create(root, &*b.state_));
    SG_ASSIGN_OR_RETURN(b.keep_, backend.create(root + "/keep", &*b.state_));
    controller::Limits limits;
    limits.memory_max = Bytes{bytes};
    SG_TRY(std::move(backend.set_limits(b.cg_, limits))
               .context("memory limit " + format_bytes(Bytes{bytes})));
    if (auto u = backend.read_usage(b.cg_); u.ok()) b.kills_before_ = u->memory_events.oom_kill;
    return b;
  }
  BudgetCgroup(BudgetCgroup&& o) noexcept
      : backend_(o.backend_),
        state_(std::move(o.state_)),
        parent_(std::move(o.parent_)),
        cg_(std::move(o.cg_)),
        keep_(std::move(o.keep_)),
        kills_before_(o.kills_before_) {
    o.state_.reset();  // the moved-from one removes nothing
  }
  BudgetCgroup& operator=(BudgetCgroup&&) = delete;
  ~BudgetCgroup() { (void)remove(); }
  // The budget cgroup's high-water mark (v2 memory.peak, v1 memory.max_usage_in_bytes).
  std::optional<uint64_t> peak() const {
    auto u = backend_->read_usage(cg_);
    return u.ok() ? u->memory_peak : std::nullopt;
  }
  uint64_t oom_kills() const {
    auto u = backend_->read_usage(cg_);
    if (!u.ok()) return 0;
    return u->memory_events.oom_kill >= kills_before_ ? u->memory_events.oom_kill - kills_before_
                                                      : 0;
  }
  Status remove() {
    if (!state_) return {};
    Status first = backend_->remove(keep_);
    if (auto s = backend_->remove(cg_); !s.ok() && first.ok()) first = s;
    // The root, if nothing else uses it (the controller's runs could not remove it while the
    // budget cgroup was in it). Busy means another run or process still uses it.
    for (const auto& [h, dir] : parent_.dirs)
      if (::rmdir(dir.c_str()) != 0 && errno != ENOENT && errno != EBUSY && errno != ENOTEMPTY &&
          first.ok())
        first = sys_error("rmdir cgroup", dir);
    // All gone: the record goes too; otherwise it stays, for gc to retry once this process ends.
    if (first.ok()) (void)state_->finish();
    state_.reset();
    return first;
  }

 private:
  BudgetCgroup(controller::CgroupBackend& backend, RunState state)
      : backend_(&backend), state_(std::move(state)) {}
  controller::CgroupBackend* backend_;
  std::optional<RunState> state_;
  controller::Cgroup parent_, cg_, keep_;
  uint64_t kills_before_ = 0;
};

// What one pass runs on: a controller with the pass's policy and the chosen provider, made the
// same way for the victim's solo run and for each policy's pass.
struct Stack {
  std::unique_ptr<controller::Controller> controller;
  std::unique_ptr<providers::Provider> provider;
};

// `root_budget`: the limit the pass set on `root` (an enforced host budget), which the
// per-call policy's ladder then watches.
Result<Stack> make_stack(const providers::Registry& registry, const controller::Policy& policy,
                         const ExperimentOptions& options, const std::string& root,
                         std::optional<Bytes> root_budget = std::nullopt) {
  controller::ControllerOptions copts;
  copts.paths = options.provider_options.paths;
  copts.root = root;
  copts.root_memory_budget = root_budget;
  copts.policy = with_victim_tenant(policy, options.victim_tenant);
  if (options.cgroup_backend) copts.backend = options.cgroup_backend();
  Stack s;
  SG_ASSIGN_OR_RETURN(s.controller, controller::Controller::create(std::move(copts)));
  // A provider the policy disqualifies is refused by every run's RunSession::open.
  SG_ASSIGN_OR_RETURN(s.provider, registry.create(options.provider, options.provider_options));
  return s;
}

}  // namespace

Result<VictimLatency> measure_victim_solo(const providers::Registry& registry, Duration duration,
                                          const ExperimentOptions& options) {
  SG_ASSIGN_OR_RETURN(PolicyChoice none, resolve_policy("none", 0, 0));
  SG_ASSIGN_OR_RETURN(Stack stack, make_stack(registry, none.policy, options, options.cgroup_root));
  SG_ASSIGN_OR_RETURN(VictimRun run, VictimRun::open(*stack.controller, *stack.provider, options));
  SG_ASSIGN_OR_RETURN(VictimOutcome v, run.run(duration, nullptr));
  // Alone and under no limits nothing should kill it: a death here says the host is broken.
  if (!v.latency) return logic_error("victim alone", "the victim died: " + v.lost);
  return *v.latency;
}

Result<PolicyPass> run_policy_pass(const providers::Registry& registry, const PolicyChoice& policy,
                                   const std::vector<ReplayPlan>& plans,
                                   const ExperimentOptions& options,
                                   const std::optional<VictimLatency>& solo) {
  if (plans.empty()) return logic_error("replay", "no traces to replay");
  uint64_t budget = options.host_budget_bytes ? options.host_budget_bytes
                                              : mem_total(options.provider_options.paths);
  std::string root = options.cgroup_root;
  if (options.enforce_budget) {
    if (!options.host_budget_bytes)
      return logic_error("replay", "an enforced budget needs --host-budget");
    static std::atomic<unsigned> serial{0};
    root = options.cgroup_root + "/budget-" + std::to_string(::getpid()) + "-" +
           std::to_string(serial++);
  }
  SG_ASSIGN_OR_RETURN(Stack stack,
                      make_stack(registry, policy.policy, options, root,
                                 options.enforce_budget ? std::optional(Bytes{budget})
                                                        : std::nullopt));
  // Checked once here, so that a provider the policy disqualifies ends the pass with its
  // reasons instead of being scored as runs that could not start.
  SG_TRY(providers::check_requirements(*stack.provider,
                                       stack.controller->policy().required_capabilities));
  // After the stack: it uses the stack's backend, so it must go first on every return.
  std::optional<BudgetCgroup> budget_cg;
  if (options.enforce_budget) {
    auto b = BudgetCgroup::make(stack.controller->backend(), options.provider_options.paths, root,
                                budget);
    if (!b.ok()) return std::move(b).error().context_add("the host budget's cgroup");
    budget_cg.emplace(std::move(b).value());
  }
  auto& ctl = stack.controller;
  auto& provider = stack.provider;

  size_t concurrency = options.concurrency ? options.concurrency : plans.size();
  size_t total = std::max(concurrency, plans.size());
  int64_t longest = 0;
  for (const auto& p : plans) longest = std::max(longest, p.duration_ms);

  HostSampler sampler(ctl->backend(), options.provider_options.paths, options.sample_interval);
  std::mutex mu;
  size_t next = 0, done_calls = 0, all_calls = 0;
  for (size_t i = 0; i < total; ++i) all_calls += plans[i % plans.size()].calls.size();
  std::vector<ReplayedRun> runs(total);
  RunObserver observer;
  observer.opened = [&](const std::string& run, const controller::Cgroup& r,
                        const controller::Cgroup& m) { sampler.opened(run, r, m); };
  observer.closed = [&](const std::string& run) { sampler.closed(run); };
  observer.ready = [&](const std::string& run) { sampler.ready(run); };
  observer.call_done = [&](const ReplayedCall& c) {
    std::lock_guard lock(mu);
    ++done_calls;
    if (options.progress) {
      std::string how = !c.error.empty() ? "not run" : controller::to_string(c.outcome.termination);
      options.progress("[" + policy.label + "] " + std::to_string(done_calls) + "/" +
                       std::to_string(all_calls) + " calls; " + c.run + " " + c.id + " (" +
                       c.intent + ") " + how + ", peak " +
                       human_bytes(Bytes{c.outcome.observed.peaks.memory_bytes}));
    }
  };

  auto began = Clock::now();
  // The victim first. Once the agents fill the budget, the kernel kills the largest process
  // in it, and the one starting a run is, for a moment, about the largest (a fork of this
  // process, counting the pages it shares with it): a victim started beside loaded agents was
  // often killed before it ran. So its run is made, and its process started, before any agent
  // exists; the agents wait for that (at most victim_start_wait). Should it die anyway, that
  // is scored (victim_lost), not an error.
  std::string victim_lost;
  std::optional<VictimRun> victim_run;
  if (options.victim) {
    auto opened = VictimRun::open(*ctl, *provider, options);
    if (opened.ok())
      victim_run.emplace(std::move(opened).value());
    else
      victim_lost = "its run could not start: " + opened.error().message();
  }
  std::optional<Result<VictimOutcome>> victim_result;
  StartSignal victim_started;
  std::thread victim_thread;
  if (victim_run) {
    victim_thread = std::thread([&] {
      victim_result = victim_run->run(std::chrono::milliseconds(longest + 1000),
                                      [&] { victim_started.notify(); });
      victim_started.notify();  // over without a start: nothing more to wait for
    });
    victim_started.wait_for(options.victim_start_wait);
  }
  std::vector<std::thread> workers;
  for (size_t w = 0; w < std::min(concurrency, total); ++w) {
    workers.emplace_back([&] {
      for (;;) {
        size_t i;
        {
          std::lock_guard lock(mu);
          if (next >= total) return;
          i = next++;
        }
        if (options.stop && options.stop->load()) return;
        ReplayPlan plan = plans[i % plans.size()];
        if (total > plans.size()) plan.name += "#" + std::to_string(i / plans.size() + 1);
        RunReplayOptions ro;
        ro.load_binary = options.load_binary;
        ro.stop = options.stop;
        runs[i] = replay_run(*ctl, *provider, plan, ro, observer);
      }
    });
  }
  for (auto& t : workers) t.join();
  if (victim_thread.joinable()) victim_thread.join();
  sampler.stop();
  double wall = std::chrono::duration<double>(Clock::now() - began).count();

  std::optional<VictimLatency> victim;
  if (victim_result) {
    if (!victim_result->ok())
      return std::move(*victim_result).error().context_add("victim under " + policy.label);
    victim = (*victim_result)->latency;
    victim_lost = (*victim_result)->lost;
  }
  PolicyPass pass;
  pass.scores =
      score_policy(policy, runs, sampler.usage(), sampler.host_peak(), budget, victim, solo);
  pass.scores.victim_lost = victim_lost;
  if (budget_cg) {
    // A v2 memory controller counts a kill in every ancestor, so the budget's own counter has
    // them all; v1 counts it only in the cgroup of the process killed (mm/memcontrol.c,
    // memcg_memory_event: no propagation off the default hierarchy), so there the kills are
    // summed over the cgroups they happened in: each call's, and each run's main (its hold).
    // The larger of the two is the count on either layout.
    uint64_t leaves = sampler.main_oom_kills();
    for (const auto& r : runs)
      for (const auto& c : r.calls) leaves += c.outcome.observed.oom_kills;
    pass.scores.budget_oom_kills = std::max(budget_cg->oom_kills(), leaves);
    pass.scores.budget_peak_bytes = budget_cg->peak();
    if (auto s = budget_cg->remove(); !s.ok())
      spdlog::warn("removing the budget cgroup: {}", s.error().message());
  }
  pass.scores.wall_s = wall;
  pass.runs = std::move(runs);
  pass.usage = sampler.usage();
  return pass;
}

}  // namespace sandgate::replay
