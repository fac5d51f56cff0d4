#include "replay/suggest.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>

#include "core/stats.h"
#include "core/strings.h"
#include "replay/call_use.h"

namespace sandgate::replay {
namespace {

constexpr std::string_view kSuggestStep = "suggest policy";

// A decimal number, or a percentage with `%`; nullopt when it is neither, or not finite.
std::optional<double> fraction_or_percent(std::string_view text) {
  std::string s(text);
  bool percent = !s.empty() && s.back() == '%';
  if (percent) s.pop_back();
  if (s.empty() || std::isspace(static_cast<unsigned char>(s.front()))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  return percent ? v / 100 : v;
}

// Nearest rank at a fraction q of a distribution (core/stats.h's percentile at 100q).
double at(const stats::Distribution<double>& d, double q) {
  return d.percentile(std::clamp(q * 100, 0.0, 100.0));
}

// value * (1 + headroom) rounded up to a multiple of unit, at least one unit. A value that is
// a whole number of units already (after headroom) stays as it is.
double round_up(double value, double headroom, double unit) {
  double units = std::ceil(value * (1 + headroom) / unit - 1e-9);
  return std::max(1.0, units) * unit;
}

ResourceEvidence figures(std::vector<double> values, double q) {
  stats::Distribution<double> d(std::move(values));
  ResourceEvidence e;
  e.p50 = d.percentile(50);
  e.p90 = d.percentile(90);
  e.p99 = d.percentile(99);
  e.max = d.max();
  e.at_quantile = at(d, q);
  return e;
}

std::string q_name(double q) { return fmt::format("q{:g}", q); }

}  // namespace

Result<double> parse_quantile(std::string_view text) {
  auto v = fraction_or_percent(text);
  if (!v || !(*v > 0 && *v <= 1))
    return logic_error("--quantile", "expected a quantile in (0, 1] like 0.99 or 99%, got '" +
                                         excerpt(text) + "'");
  return *v;
}

Result<double> parse_headroom(std::string_view text) {
  auto v = fraction_or_percent(text);
  if (!v || !(*v >= 0 && *v <= 10))
    return logic_error("--headroom", "expected headroom from 0 to 1000% like 10% or 0.1, got '" +
                                         excerpt(text) + "'");
  return *v;
}

Result<Suggestion> suggest_policy(const std::vector<std::pair<std::string, Trace>>& traces,
                                  const controller::Policy& base, const SuggestOptions& o) {
  if (traces.empty()) return logic_error(std::string(kSuggestStep), "no traces to size on");
  if (!(o.quantile > 0 && o.quantile <= 1))
    return logic_error(std::string(kSuggestStep), "the quantile must be in (0, 1]");
  if (!(o.headroom >= 0 && o.headroom <= 10))
    return logic_error(std::string(kSuggestStep), "the headroom must be from 0 to 10 (1000%)");
  if (o.min_calls == 0)
    return logic_error(std::string(kSuggestStep), "--min-calls must be at least 1");
  if (base.mode != controller::PolicyMode::kPerCall)
    return logic_error(std::string(kSuggestStep),
                       "the base policy '" + excerpt(base.name) +
                           "' is in static mode: suggest sizes per-call grants; give a "
                           "per_call policy");

  Suggestion s;
  s.options = o;
  s.base_name = base.name;
  s.pids_measured = true;
  size_t pids_unmeasured = 0;
  std::vector<CallUse> all;
  for (const auto& [name, trace] : traces) {
    if (trace.samples.empty())
      return logic_error(std::string(kSuggestStep), "the trace has no samples, nothing to size on",
                         name);
    s.traces.push_back(name);
    const auto& u = trace.header.unmeasured;
    if (std::find(u.begin(), u.end(), "pids") != u.end()) ++pids_unmeasured;
    std::vector<CallUse> uses = call_uses(trace, run_baseline(trace));
    all.insert(all.end(), uses.begin(), uses.end());
  }
  s.pids_measured = pids_unmeasured == 0;
  if (!s.pids_measured)
    s.notes.push_back(fmt::format(
        "pids_max not sized: {} of {} traces do not measure pids (their header's 'unmeasured')",
        pids_unmeasured, traces.size()));
  s.calls = all.size();

  // Calls of an intent the base policy does not define get its `default` grant: size them there.
  std::map<std::string, std::vector<std::string>> pooled;
  for (auto& u : all) {
    if (base.intents.contains(u.intent)) continue;
    auto& p = pooled["default"];
    if (std::find(p.begin(), p.end(), u.intent) == p.end()) p.push_back(u.intent);
    u.intent = "default";
  }
  std::map<std::string, IntentCalls> by = calls_by_intent(all);

  controller::Policy out = base;
  out.name = fmt::format("suggested ({} +{:g}% headroom, {} traces)", q_name(o.quantile),
                         o.headroom * 100, traces.size());
  const std::string rule = fmt::format("{} x (1 + {:g}%)", q_name(o.quantile), o.headroom * 100);
  for (const auto& [intent, grant] : base.intents) {
    IntentEvidence e;
    e.intent = intent;
    e.base = grant;
    e.chosen = grant;
    if (auto it = pooled.find(intent); it != pooled.end()) e.pooled = it->second;
    IntentCalls calls;
    if (auto it = by.find(intent); it != by.end()) calls = it->second;
    e.calls = calls.calls;
    e.seconds = calls.seconds;
    e.memory = figures(calls.mem, o.quantile);
    e.cpu = figures(calls.cpu, o.quantile);
    e.pids = figures(calls.pids, o.quantile);
    if (e.calls < o.min_calls) {
      e.why = fmt::format("{} calls, fewer than {} (--min-calls): the base policy's grant kept",
                          e.calls, o.min_calls);
      for (auto* r : {&e.memory, &e.cpu, &e.pids}) r->why = "too few calls: the base's";
      s.intents.push_back(std::move(e));
      continue;
    }
    controller::Grant& g = e.chosen;
    const uint64_t mem = static_cast<uint64_t>(
        round_up(e.memory.at_quantile, o.headroom, static_cast<double>(kMemoryUnit)));
    g.memory_max = Bytes{mem};
    g.memory_high.reset();
    e.memory.sized = true;
    e.memory.why = fmt::format("{} of {} = {}, rounded up to 16MiB; memory_high dropped", rule,
                               human_bytes(Bytes{static_cast<uint64_t>(e.memory.at_quantile)}),
                               format_bytes(Bytes{mem}));
    // In tenths of a core, as an integer count first, so 0.3 is written as 0.3.
    const double tenths = round_up(e.cpu.at_quantile / 1000, o.headroom, kCpuUnit) / kCpuUnit;
    g.cpu_cores = std::round(tenths) / 10;
    e.cpu.sized = true;
    e.cpu.why = fmt::format("{} of {:g} cores = {:g} cores, rounded up to 0.1", rule,
                            e.cpu.at_quantile / 1000, *g.cpu_cores);
    if (s.pids_measured) {
      g.pids_max =
          static_cast<uint64_t>(round_up(e.pids.at_quantile, o.headroom, double(kPidsUnit)));
      e.pids.sized = true;
      e.pids.why =
          fmt::format("{} of {:g} = {}, rounded up to 8", rule, e.pids.at_quantile, *g.pids_max);
    } else {
      e.pids.why = fmt::format("{} of {} traces do not measure pids: the base's", pids_unmeasured,
                               traces.size());
    }
    e.why = fmt::format("sized on {} calls", e.calls);
    s.intents.push_back(std::move(e));
  }

  // The run ceiling must hold every grant.
  controller::Grant& run = out.run;
  for (const auto& e : s.intents) {
    const controller::Grant& g = e.chosen;
    if (g.memory_max && run.memory_max && *g.memory_max > *run.memory_max) {
      s.notes.push_back(fmt::format("run.memory_max raised from {} to {} for {}",
                                    format_bytes(*run.memory_max), format_bytes(*g.memory_max),
                                    e.intent));
      run.memory_max = g.memory_max;
    }
    if (g.cpu_cores && run.cpu_cores && *g.cpu_cores > *run.cpu_cores) {
      s.notes.push_back(fmt::format("run.cpu raised from {:g} to {:g} for {}", *run.cpu_cores,
                                    *g.cpu_cores, e.intent));
      run.cpu_cores = g.cpu_cores;
    }
    if (g.pids_max && run.pids_max && *g.pids_max > *run.pids_max) {
      s.notes.push_back(fmt::format("run.pids_max raised from {} to {} for {}", *run.pids_max,
                                    *g.pids_max, e.intent));
      run.pids_max = g.pids_max;
    }
  }
  for (const auto& e : s.intents) out.intents[e.intent] = e.chosen;
  s.policy = std::move(out);
  return s;
}

Json to_json(const Suggestion& s) {
  Json intents = Json::array();
  for (const auto& e : s.intents) {
    auto resource = [](const ResourceEvidence& r, const std::string& unit) {
      return Json{{"p50_" + unit, r.p50},
                  {"p90_" + unit, r.p90},
                  {"p99_" + unit, r.p99},
                  {"max_" + unit, r.max},
                  {"at_quantile_" + unit, r.at_quantile},
                  {"sized", r.sized},
                  {"why", r.why}};
    };
    Json pooled = Json::array();
    for (const auto& p : e.pooled) pooled.push_back(p);
    intents.push_back({{"intent", e.intent},
                       {"calls", e.calls},
                       {"seconds", e.seconds},
                       {"pooled_intents", pooled},
                       {"memory", resource(e.memory, "bytes")},
                       {"cpu", resource(e.cpu, "millicores")},
                       {"pids", resource(e.pids, "pids")},
                       {"base_grant", controller::to_json(e.base)},
                       {"grant", controller::to_json(e.chosen)},
                       {"why", e.why}});
  }
  Json traces = Json::array();
  for (const auto& t : s.traces) traces.push_back(t);
  Json notes = Json::array();
  for (const auto& n : s.notes) notes.push_back(n);
  return {{"schema_version", kSuggestEvidenceSchemaVersion},
          {"policy", s.policy.name},
          {"base_policy", s.base_name},
          {"quantile", s.options.quantile},
          {"headroom", s.options.headroom},
          {"min_calls", s.options.min_calls},
          {"units",
           {{"memory", format_bytes(Bytes{kMemoryUnit})},
            {"cpu_cores", kCpuUnit},
            {"pids", kPidsUnit}}},
          {"use",
           "each call's peak above its run's baseline (the median of the run's samples outside "
           "calls); quantiles are nearest rank"},
          {"traces", traces},
          {"calls", s.calls},
          {"pids_measured", s.pids_measured},
          {"intents", intents},
          {"notes", notes}};
}

}  // namespace sandgate::replay
