#include "reports/model.h"

#include <set>

#include "core/stats.h"
#include "reports/field_reader.h"

namespace sandgate::reports {

Json to_json(const ReplaySummary& s) {
  return {{"calls", s.calls},
          {"completed", s.completed},
          {"killed", s.killed},
          {"cancelled", s.cancelled},
          {"timed_out", s.timed_out},
          {"failed_exit", s.failed_exit},
          {"mem_error_median", s.mem_error_median},
          {"end_error_p95_ms", s.end_error_p95_ms},
          {"wall_s", s.wall_s},
          {"scores", s.scores}};
}

ReplaySummary replay_from(const Json& j, const std::string& path) {
  detail::Reader r(j, path);
  ReplaySummary s;
  s.calls = r.count("calls");
  s.completed = r.count("completed");
  s.killed = r.count("killed");
  s.cancelled = r.count("cancelled");
  s.timed_out = r.count("timed_out");
  s.failed_exit = r.count("failed_exit");
  s.mem_error_median = r.number("mem_error_median");
  s.end_error_p95_ms = r.number("end_error_p95_ms");
  s.wall_s = r.number("wall_s");
  s.scores = r.object("scores");
  r.done();
  if (s.completed > s.calls) r.fail("completed", "more than calls");
  return s;
}

namespace {

using detail::FieldError;
using detail::Reader;

constexpr probes::Verdict kVerdicts[] = {probes::Verdict::kBlocked, probes::Verdict::kExposed,
                                         probes::Verdict::kInconclusive, probes::Verdict::kWarning};

Json opt(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }

Json verdict_json(const ProbeVerdict& v) {
  Json j = {{"id", v.id},
            {"boundary", v.boundary},
            {"attempt", v.attempt},
            {"verdict", probes::to_string(v.verdict)},
            {"why", v.why},
            {"witness", v.witness},
            {"judgement", v.judgement}};
  if (!v.layer.empty()) j["layer"] = v.layer;
  return j;
}

ProbeVerdict verdict_from(const Json& j, const std::string& path) {
  Reader r(j, path);
  ProbeVerdict v;
  v.id = r.str("id");
  v.boundary = r.str("boundary");
  v.attempt = r.str("attempt");
  auto verdict = parse_verdict(r.str("verdict"));
  if (!verdict.ok()) r.fail("verdict", verdict.error().detail);
  v.verdict = *verdict;
  v.layer = r.opt_str("layer").value_or("");
  v.why = r.str("why");
  v.witness = r.str("witness");
  v.judgement = r.object("judgement");
  r.done();
  return v;
}

Json provider_json(const Report& report, const ProviderReport& p) {
  CostRatios ratios = cost_ratios(report, p);
  Json j = {{"name", p.name},
            {"display_name", p.display_name},
            {"unsafe", p.unsafe},
            {"capabilities", p.capabilities},
            {"qualified", p.qualified},
            {"disqualifications", p.disqualifications},
            {"costs",
             {{"run_samples_ms", p.costs.run_samples_ms},
              {"run_ms", opt(p.costs.run_ms)},
              {"exec_samples_ms", p.costs.exec_samples_ms},
              {"call_samples_ms", p.costs.call_samples_ms},
              {"exec_ms", opt(p.costs.exec_ms)},
              {"call_ms", opt(p.costs.call_ms)},
              {"ratios",
               {{"run", opt(ratios.run)},
                {"exec", opt(ratios.exec)},
                {"call", opt(ratios.call)},
                {"controller", opt(ratios.controller)},
                {"spawn", opt(ratios.spawn)}}}}}};
  if (p.unavailable) j["unavailable"] = *p.unavailable;
  if (p.probes) {
    Json verdicts = Json::array();
    for (const auto& v : *p.probes) verdicts.push_back(verdict_json(v));
    Json contradicted = Json::array();
    for (const auto& c : p.contradicted_capabilities)
      contradicted.push_back({{"capability", c.capability}, {"probes", c.probes}});
    j["probes"] = {{"wall_ms", opt(p.probes_wall_ms)},
                   {"verdicts", verdicts},
                   {"contradicted_capabilities", contradicted}};
  }
  if (p.policy)
    j["policy"] = {{"name", p.policy->name},
                   {"required", p.policy->required},
                   {"missing", p.policy->missing},
                   {"contradicted", p.policy->contradicted},
                   {"qualified", p.policy->qualified}};
  if (p.replay) j["replay"] = to_json(*p.replay);
  return j;
}

std::optional<double> nullable_number(Reader& r, const std::string& key) {
  const Json& v = r.raw(key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_number()) r.fail(key, "expected a number or null, got " + describe_json(v));
  return v.get<double>();
}

// Version 1 had no call samples and no spawn ratio: they are read when the version has them.
Costs costs_from(const Json& j, const std::string& path, int version) {
  Reader r(j, path);
  Costs c;
  c.run_samples_ms = r.numbers("run_samples_ms");
  c.run_ms = nullable_number(r, "run_ms");
  if (version >= 2) {
    c.exec_samples_ms = r.numbers("exec_samples_ms");
    c.call_samples_ms = r.numbers("call_samples_ms");
  }
  c.exec_ms = nullable_number(r, "exec_ms");
  c.call_ms = nullable_number(r, "call_ms");
  // Derived from the costs: recomputed by every reader, read here only to be checked as known.
  Reader ratios(r.object("ratios"), r.at("ratios"));
  for (const char* key : {"run", "exec", "call", "controller"}) nullable_number(ratios, key);
  if (version >= 2) nullable_number(ratios, "spawn");
  ratios.done();
  r.done();
  return c;
}

}  // namespace

std::vector<Contradiction> contradictions_from(detail::Reader& r, const std::string& key) {
  std::vector<Contradiction> out;
  const Json& list = r.array(key);
  for (size_t i = 0; i < list.size(); ++i) {
    Reader c(list[i], r.at(key, i));
    out.push_back({c.str("capability"), c.strings("probes")});
    c.done();
  }
  return out;
}

PolicyCheck policy_from(const Json& j, const std::string& path) {
  Reader r(j, path);
  PolicyCheck p;
  p.name = r.str("name");
  p.required = r.strings("required");
  p.missing = r.strings("missing");
  p.contradicted = r.strings("contradicted");
  p.qualified = r.boolean("qualified");
  r.done();
  if (p.qualified != p.missing.empty()) r.fail("qualified", "says the opposite of missing");
  return p;
}

namespace {

ProviderReport provider_from(const Json& j, const std::string& path, int version) {
  Reader r(j, path);
  ProviderReport p;
  p.name = r.str("name");
  if (p.name.empty()) r.fail("name", "empty");
  p.display_name = r.str("display_name");
  p.unsafe = r.boolean("unsafe");
  p.capabilities = r.strings("capabilities");
  p.qualified = r.boolean("qualified");
  p.disqualifications = r.strings("disqualifications");
  if (p.qualified && !p.disqualifications.empty())
    r.fail("disqualifications", "a qualified provider has none");
  if (!p.qualified && p.disqualifications.empty())
    r.fail("disqualifications", "a provider that is not qualified says why");
  p.unavailable = r.opt_str("unavailable");
  p.costs = costs_from(r.object("costs"), r.at("costs"), version);
  if (r.has("probes")) {
    Reader pr(r.object("probes"), r.at("probes"));
    p.probes_wall_ms = nullable_number(pr, "wall_ms");
    const Json& verdicts = pr.array("verdicts");
    p.probes.emplace();
    for (size_t i = 0; i < verdicts.size(); ++i)
      p.probes->push_back(verdict_from(verdicts[i], pr.at("verdicts", i)));
    p.contradicted_capabilities = contradictions_from(pr, "contradicted_capabilities");
    pr.done();
  }
  if (r.has("policy")) p.policy = policy_from(r.object("policy"), r.at("policy"));
  if (r.has("replay")) p.replay = replay_from(r.object("replay"), r.at("replay"));
  r.done();
  return p;
}

ProbeRule rule_from(const Json& j, const std::string& path) {
  Reader r(j, path);
  ProbeRule rule;
  rule.id = r.str("id");
  rule.boundary = r.str("boundary");
  rule.description = r.str("description");
  rule.witness = r.str("witness");
  rule.remediation = r.str("remediation");
  r.done();
  return rule;
}

}  // namespace

Result<probes::Verdict> parse_verdict(const std::string& s) {
  for (auto v : kVerdicts)
    if (probes::to_string(v) == s) return v;
  return logic_error("verdict", "expected one of blocked, exposed, inconclusive, warning; got \"" +
                                    s.substr(0, 60) + "\"");
}

std::string verdict_cell(const ProbeVerdict& v) {
  std::string cell = probes::to_string(v.verdict);
  if (v.verdict == probes::Verdict::kBlocked && !v.layer.empty()) cell += " (" + v.layer + ")";
  return cell;
}

const ProviderReport* baseline_of(const Report& r) {
  if (r.baseline_provider.empty()) return nullptr;
  for (const auto& p : r.providers)
    if (p.name == r.baseline_provider) return &p;
  return nullptr;
}

std::string choose_baseline(const std::vector<ProviderReport>& providers) {
  for (const auto& p : providers)
    if (p.unsafe && p.costs.run_ms) return p.name;
  return "";
}

CostRatios cost_ratios(const Report& r, const ProviderReport& p) {
  CostRatios out;
  auto ratio = [](const std::optional<double>& a, const std::optional<double>& b) {
    return a && b && *b > 0 ? std::optional<double>(*a / *b) : std::nullopt;
  };
  if (const ProviderReport* base = baseline_of(r)) {
    out.run = ratio(p.costs.run_ms, base->costs.run_ms);
    out.exec = ratio(p.costs.exec_ms, base->costs.exec_ms);
    out.call = ratio(p.costs.call_ms, base->costs.call_ms);
  }
  out.controller = ratio(p.costs.call_ms, p.costs.exec_ms);
  auto spawn = paired_ratios(p.costs.run_samples_ms, r.spawn_samples_ms);
  if (!spawn.empty()) out.spawn = stats::median(spawn);
  return out;
}

std::vector<double> paired_ratios(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> out;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (b[i] > 0) out.push_back(a[i] / b[i]);
  return out;
}

std::vector<ProbeDifference> probe_differences(const Report& r) {
  std::vector<const ProviderReport*> ran;
  for (const auto& p : r.providers)
    if (p.probes) ran.push_back(&p);
  std::vector<ProbeDifference> out;
  if (ran.size() < 2) return out;
  // In the order the first provider ran them, then any only later ones ran.
  std::vector<std::string> ids;
  std::set<std::string> known;
  for (const auto* p : ran)
    for (const auto& v : *p->probes)
      if (known.insert(v.id).second) ids.push_back(v.id);
  for (const auto& id : ids) {
    ProbeDifference d{id, {}};
    std::set<std::string> cells;
    for (const auto* p : ran) {
      ProbeDifference::Cell cell{"not run", ""};
      for (const auto& v : *p->probes)
        if (v.id == id) cell = {verdict_cell(v), v.why};
      cells.insert(cell.verdict);
      d.verdicts[p->name] = std::move(cell);
    }
    if (cells.size() > 1) out.push_back(std::move(d));
  }
  return out;
}

Json to_json(const Report& r) {
  Json providers = Json::array();
  for (const auto& p : r.providers) providers.push_back(provider_json(r, p));
  Json rules = Json::object();
  for (const auto& [id, rule] : r.rules)
    rules[id] = {{"id", rule.id},
                 {"boundary", rule.boundary},
                 {"description", rule.description},
                 {"witness", rule.witness},
                 {"remediation", rule.remediation}};
  Json js{{"type", kReportType},
          {"schema_version", r.schema_version},
          {"job", r.job},
          {"created", r.created},
          {"sandgate_version", r.sandgate_version},
          {"host", r.host},
          {"baseline_provider", r.baseline_provider},
          {"spawn_samples_ms", r.spawn_samples_ms},
          {"providers", providers},
          {"rules", rules}};
  if (r.replay) js["replay"] = to_json(*r.replay);
  if (r.plan) js["plan"] = to_json(*r.plan);
  if (r.bench) js["bench"] = bench_json(*r.bench);
  return js;
}

Result<Report> report_from_json(const Json& j) {
  try {
    Reader r(j, "");
    Report report;
    if (r.str("type") != kReportType)
      r.fail("type", std::string("expected \"") + kReportType + "\"");
    report.schema_version = r.integer("schema_version");
    if (report.schema_version < 1 || report.schema_version > kSchemaVersion)
      r.fail("schema_version", "this sandgate reads versions 1 to " +
                                   std::to_string(kSchemaVersion) + ", got " +
                                   std::to_string(report.schema_version));
    report.job = r.str("job");
    report.created = r.str("created");
    report.sandgate_version = r.str("sandgate_version");
    report.host = r.object("host");
    report.baseline_provider = r.str("baseline_provider");
    if (report.schema_version >= 2) report.spawn_samples_ms = r.numbers("spawn_samples_ms");
    const Json& providers = r.array("providers");
    std::set<std::string> names;
    for (size_t i = 0; i < providers.size(); ++i) {
      std::string path = "providers[" + std::to_string(i) + "]";
      report.providers.push_back(provider_from(providers[i], path, report.schema_version));
      if (!names.insert(report.providers.back().name).second)
        throw FieldError{path + ".name",
                         "a second provider named \"" + report.providers.back().name + "\""};
    }
    if (!report.baseline_provider.empty() && !names.count(report.baseline_provider))
      r.fail("baseline_provider", "names no provider of the report");
    const Json& rules = r.object("rules");
    for (const auto& [id, rule] : rules.items()) {
      ProbeRule parsed = rule_from(rule, "rules." + id);
      if (parsed.id != id) throw FieldError{"rules." + id + ".id", "differs from its key"};
      report.rules[id] = std::move(parsed);
    }
    if (r.has("bench")) report.bench = bench_from(r, "bench");
    if (r.has("replay")) report.replay = replay_section_from(r.object("replay"), "replay");
    if (r.has("plan")) report.plan = plan_from(r.object("plan"), "plan");
    r.done();
    return report;
  } catch (const FieldError& e) {
    return logic_error("read report", e.path + ": " + e.message);
  }
}

}  // namespace sandgate::reports
