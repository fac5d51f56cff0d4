#include "reports/plan_model.h"

#include <algorithm>
#include <iterator>

#include "reports/field_reader.h"

namespace sandgate::reports {
namespace {

using detail::Reader;

// The figures a model row may carry beyond the common ones (replay/planner.cc): known by name,
// so a typo is still refused.
constexpr const char* kExtraFigures[] = {"runs_crossing_limit_share", "time_over_limit_share",
                                         "run_time_lost_share", "p_memory_exceeded_unenforced",
                                         "over_grant_call_time_share"};

constexpr const char* kBindings[] = {"memory", "cpu", "both", "none"};

// A [runs, risk] curve, runs ascending.
std::vector<RiskPoint> curve_from(Reader& r, const std::string& key) {
  std::vector<RiskPoint> out;
  const Json& curve = r.array(key);
  for (size_t i = 0; i < curve.size(); ++i) {
    std::string at = r.at(key, i);
    const Json& p = curve[i];
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || p[0].get<int64_t>() < 1 ||
        !p[1].is_number())
      throw detail::FieldError{at, "expected [runs >= 1, risk], got " + describe_json(p)};
    RiskPoint point{p[0].get<uint64_t>(), p[1].get<double>()};
    if (point.risk < 0 || point.risk > 1) throw detail::FieldError{at, "risk outside [0, 1]"};
    if (!out.empty() && point.runs <= out.back().runs)
      throw detail::FieldError{at, "runs not ascending"};
    out.push_back(point);
  }
  return out;
}

Json curve_json(const std::vector<RiskPoint>& curve) {
  Json j = Json::array();
  for (const auto& c : curve) j.push_back({c.runs, c.risk});
  return j;
}

PlanFit fit_from(const Json& j, const std::string& path, int version) {
  Reader r(j, path);
  PlanFit f;
  f.policy = r.str("policy");
  f.fits = r.count("fits");
  f.fits_is_lower_bound = r.boolean("fits_is_lower_bound");
  f.p_memory_exceeded = r.number("p_memory_exceeded");
  f.p_cpu_exceeded = r.number("p_cpu_exceeded");
  f.fits_by_cpu = r.count("fits_by_cpu");
  f.reserved_bytes = r.number("reserved_bytes");
  f.used_bytes = r.number("used_bytes");
  f.note = r.str("note");
  for (const char* key : kExtraFigures)
    if (r.has(key)) f.extra.emplace_back(key, r.number(key));
  f.risk_curve = curve_from(r, "risk_curve");
  if (version >= 2) {
    PlanCpuFit c;
    c.fits_by_memory = r.count("fits_by_memory");
    c.fits_by_cpu_demand = r.count("fits_by_cpu_demand");
    if (f.fits != std::min(c.fits_by_memory, c.fits_by_cpu_demand))
      r.fail("fits", "not the smaller of fits_by_memory and fits_by_cpu_demand");
    c.binding = r.str("binding");
    if (std::find(std::begin(kBindings), std::end(kBindings), c.binding) == std::end(kBindings))
      r.fail("binding", "expected memory, cpu, both or none, got " + describe_json(c.binding));
    c.cpu_slowdown_mean = r.number("cpu_slowdown_mean");
    if (!(c.cpu_slowdown_mean >= 1)) r.fail("cpu_slowdown_mean", "expected a factor >= 1");
    c.cpu_slowdown_p95 = r.number("cpu_slowdown_p95");
    if (!(c.cpu_slowdown_p95 >= 1)) r.fail("cpu_slowdown_p95", "expected a factor >= 1");
    c.cpu_risk_curve = curve_from(r, "cpu_risk_curve");
    f.cpu = std::move(c);
  }
  r.done();
  return f;
}

PlanIntent intent_from(const Json& j, const std::string& path) {
  Reader r(j, path);
  PlanIntent u;
  u.intent = r.str("intent");
  u.calls = r.count("calls");
  u.seconds = r.number("seconds");
  const Json& grant = r.raw("grant_memory_bytes");
  if (!grant.is_null()) {
    if (!grant.is_number())
      r.fail("grant_memory_bytes", "expected a number or null, got " + describe_json(grant));
    u.grant_memory_bytes = grant.get<double>();
  }
  u.above_baseline_p50_bytes = r.number("above_baseline_p50_bytes");
  u.above_baseline_p99_bytes = r.number("above_baseline_p99_bytes");
  u.above_baseline_max_bytes = r.number("above_baseline_max_bytes");
  u.calls_over_grant = r.count("calls_over_grant");
  r.done();
  return u;
}

}  // namespace

Json to_json(const PlanSection& p) {
  Json fits = Json::array();
  for (const auto& f : p.fits) {
    Json j = {{"policy", f.policy},
              {"fits", f.fits},
              {"fits_is_lower_bound", f.fits_is_lower_bound},
              {"p_memory_exceeded", f.p_memory_exceeded},
              {"p_cpu_exceeded", f.p_cpu_exceeded},
              {"fits_by_cpu", f.fits_by_cpu},
              {"reserved_bytes", f.reserved_bytes},
              {"used_bytes", f.used_bytes},
              {"note", f.note}};
    for (const auto& [k, v] : f.extra) j[k] = v;
    j["risk_curve"] = curve_json(f.risk_curve);
    if (f.cpu) {
      j["fits_by_memory"] = f.cpu->fits_by_memory;
      j["fits_by_cpu_demand"] = f.cpu->fits_by_cpu_demand;
      j["binding"] = f.cpu->binding;
      j["cpu_slowdown_mean"] = f.cpu->cpu_slowdown_mean;
      j["cpu_slowdown_p95"] = f.cpu->cpu_slowdown_p95;
      j["cpu_risk_curve"] = curve_json(f.cpu->cpu_risk_curve);
    }
    fits.push_back(j);
  }
  Json intents = Json::array();
  for (const auto& u : p.intents)
    intents.push_back(
        {{"intent", u.intent},
         {"calls", u.calls},
         {"seconds", u.seconds},
         {"grant_memory_bytes", u.grant_memory_bytes ? Json(*u.grant_memory_bytes) : Json(nullptr)},
         {"above_baseline_p50_bytes", u.above_baseline_p50_bytes},
         {"above_baseline_p99_bytes", u.above_baseline_p99_bytes},
         {"above_baseline_max_bytes", u.above_baseline_max_bytes},
         {"calls_over_grant", u.calls_over_grant}});
  Json j = {{"schema_version", p.schema_version},
            {"policy", p.policy},
            {"traces", p.traces},
            {"trace_files", p.trace_files},
            {"host_memory_bytes", p.host_memory_bytes},
            {"host_cpus", p.host_cpus},
            {"risk", p.risk},
            {"trials", p.trials},
            {"seed", p.seed},
            {"max_runs", p.max_runs},
            {"curve_max_runs", p.curve_max_runs},
            {"fits", fits},
            {"intents", intents}};
  if (p.cpu_overcommit) j["cpu_overcommit"] = *p.cpu_overcommit;
  return j;
}

PlanSection plan_from(const Json& j, const std::string& path) {
  Reader r(j, path);
  PlanSection p;
  p.schema_version = r.integer("schema_version");
  // Version 1 (before CPU counted) is read as it was: `fits` is memory's answer, no CPU fields.
  if (p.schema_version != 1 && p.schema_version != 2)
    r.fail("schema_version", "this sandgate reads the planner's versions 1 and 2, got " +
                                 std::to_string(p.schema_version));
  p.policy = r.str("policy");
  p.traces = r.count("traces");
  p.trace_files = r.strings("trace_files");
  p.host_memory_bytes = r.count("host_memory_bytes");
  p.host_cpus = r.number("host_cpus");
  if (p.schema_version >= 2) {
    p.cpu_overcommit = r.number("cpu_overcommit");
    if (!(*p.cpu_overcommit >= 1)) r.fail("cpu_overcommit", "expected a ratio >= 1");
  }
  p.risk = r.number("risk");
  if (!(p.risk > 0 && p.risk < 1)) r.fail("risk", "expected a number in (0, 1)");
  p.trials = r.count("trials");
  p.seed = r.count("seed");
  p.max_runs = r.count("max_runs");
  p.curve_max_runs = r.count("curve_max_runs");
  const Json& fits = r.array("fits");
  for (size_t i = 0; i < fits.size(); ++i)
    p.fits.push_back(fit_from(fits[i], r.at("fits", i), p.schema_version));
  const Json& intents = r.array("intents");
  for (size_t i = 0; i < intents.size(); ++i)
    p.intents.push_back(intent_from(intents[i], r.at("intents", i)));
  r.done();
  return p;
}

}  // namespace sandgate::reports
