#include "reports/from_qualify.h"

#include <set>

#include "core/fd.h"
#include "core/strings.h"
#include "probes/plan.h"
#include "reports/field_reader.h"

#ifndef SANDGATE_VERSION
#define SANDGATE_VERSION "unknown"
#endif

namespace sandgate::reports {
namespace {

using detail::FieldError;
using detail::Reader;

// One judgement of a probe file (probes/judge.h Judgement::to_json), whole.
ProbeVerdict verdict_of(const Json& j, const std::string& path) {
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
  v.judgement = j;
  return v;
}

// The provider's run in its probe file: {"schema_version", "runs": [{"provider", ...}]}.
void read_probes(const Json& file, const std::string& path, ProviderReport& p) {
  Reader top(file, path);
  int version = top.integer("schema_version");
  if (version != 1) top.fail("schema_version", "this sandgate reads probe reports of version 1");
  const Json& runs = top.array("runs");
  for (size_t i = 0; i < runs.size(); ++i) {
    Reader run(runs[i], top.at("runs", i));
    // qualify writes one run per file; a provider's own name for itself may differ from the
    // name it was asked for by (external:/opt/x), so a lone run is the provider's.
    if (run.str("provider") != p.name && runs.size() > 1) continue;
    p.probes_wall_ms = run.opt_number("wall_ms");
    const Json& judgements = run.array("judgements");
    p.probes.emplace();
    for (size_t k = 0; k < judgements.size(); ++k)
      p.probes->push_back(verdict_of(judgements[k], run.at("judgements", k)));
    return;
  }
  top.fail("runs", "no run of provider \"" + p.name + "\"");
}

ProviderReport provider_of(const Json& j, const std::string& path, const ProbeFiles& files) {
  Reader r(j, path);
  ProviderReport p;
  p.name = r.str("name");
  p.display_name = r.opt_str("display_name").value_or(p.name);
  p.unsafe = r.has("unsafe") && r.boolean("unsafe");
  if (r.has("capabilities")) p.capabilities = r.strings("capabilities");
  p.qualified = r.boolean("ok");
  // "errors" (one entry per reason) is newer than "error" (the same, joined with "; ").
  if (r.has("errors")) {
    p.disqualifications = r.strings("errors");
  } else if (r.has("error")) {
    p.disqualifications = {r.str("error")};
  }
  if (!p.qualified && p.disqualifications.empty())
    r.fail("ok", "false, but neither error nor errors says why");
  if (p.qualified) p.disqualifications.clear();
  p.unavailable = r.opt_str("unavailable");
  if (r.has("cycles_ms")) p.costs.run_samples_ms = r.numbers("cycles_ms");
  p.costs.run_ms = r.opt_number("median_ms");
  if (r.has("exec_samples_ms")) p.costs.exec_samples_ms = r.numbers("exec_samples_ms");
  if (r.has("call_samples_ms")) p.costs.call_samples_ms = r.numbers("call_samples_ms");
  p.costs.exec_ms = r.opt_number("exec_ms");
  p.costs.call_ms = r.opt_number("call_ms");
  if (r.has("probes")) {
    auto it = files.find(p.name);
    if (it == files.end()) r.fail("probes.report", "the probe report of this provider is missing");
    read_probes(it->second, "probe report of " + p.name, p);
    Reader summary(r.object("probes"), r.at("probes"));
    if (summary.has("contradicted_capabilities"))  // newer than the first schema 2 files
      p.contradicted_capabilities = contradictions_from(summary, "contradicted_capabilities");
  }
  if (r.has("policy")) {
    // qualify.json's policy check: the model's shape, read strictly on its own.
    p.policy = policy_from(r.object("policy"), r.at("policy"));
  }
  if (r.has("replay")) p.replay = replay_from(r.object("replay"), r.at("replay"));
  return p;
}

// Each probe's rule, from the first verdict that names it: the native baseline's attempt when
// there is one (the host's own run, not the sandbox's words), else the sandbox's.
void add_rules(Report& report) {
  for (const auto& p : report.providers) {
    if (!p.probes) continue;
    for (const auto& v : *p.probes) {
      if (report.rules.count(v.id)) continue;
      ProbeRule rule;
      rule.id = v.id;
      rule.boundary = v.boundary;
      rule.description = v.attempt;
      const Json& base = v.judgement.contains("baseline") ? v.judgement["baseline"] : Json();
      if (base.is_object() && base.contains("attempt") && base["attempt"].is_string())
        rule.description = base["attempt"].get<std::string>();
      rule.witness = v.witness;
      rule.remediation = probes::remediation(v.id);
      report.rules[v.id] = std::move(rule);
    }
  }
}

// Copying, comparing and printing a JSON value recurse once per level of nesting, and a probe's
// evidence is the sandbox's to shape: 100,000 nested arrays would overflow the stack of every
// writer. Containers nested deeper than this are never built; the container at this depth that
// held them becomes a string saying so.
constexpr int kMaxDepth = 64;
constexpr const char* kTooDeep = "[cut: nested deeper than 64 levels]";

}  // namespace

Result<Json> parse_bounded_json(std::string_view text, const std::string& source) {
  std::vector<bool> cut(kMaxDepth + 2, false);  // per depth: something under it was dropped
  auto bound = [&](int depth, Json::parse_event_t event, Json& parsed) {
    using E = Json::parse_event_t;
    if (event == E::object_start || event == E::array_start) {
      if (depth > kMaxDepth) {
        cut[kMaxDepth] = true;
        return false;  // not built, nor anything inside it
      }
      if (depth == kMaxDepth) cut[kMaxDepth] = false;
    } else if ((event == E::object_end || event == E::array_end) && depth == kMaxDepth &&
               cut[kMaxDepth]) {
      parsed = kTooDeep;
    }
    return true;
  };
  try {
    return Json::parse(text, bound);
  } catch (const Json::exception&) {
    return parse_json(text, source);  // the same fault, said with its line and column
  }
}

namespace {

Result<Json> read_bounded_json(const std::string& path) {
  SG_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_bounded_json(text, path);
}

std::string dirname_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
}

std::string basename_of(const std::string& path) { return path.substr(path.rfind('/') + 1); }

}  // namespace

Result<Report> from_qualify(const Json& qualify, const ProbeFiles& probe_files) {
  try {
    Reader r(qualify, "");
    int version = r.integer("schema_version");
    if (version != kQualifySchemaVersion)
      r.fail("schema_version", "this sandgate reads qualify.json version " +
                                   std::to_string(kQualifySchemaVersion) + ", got " +
                                   std::to_string(version));
    Report report;
    report.job = "qualify";
    report.created = r.opt_str("created").value_or("");
    report.sandgate_version = SANDGATE_VERSION;
    report.host = r.object("doctor");
    const Json& providers = r.array("providers");
    for (size_t i = 0; i < providers.size(); ++i)
      report.providers.push_back(
          provider_of(providers[i], detail::item_path("providers", i), probe_files));
    report.baseline_provider = choose_baseline(report.providers);
    if (r.has("spawn_samples_ms")) report.spawn_samples_ms = r.numbers("spawn_samples_ms");
    add_rules(report);
    return report;
  } catch (const FieldError& e) {
    return logic_error("read qualify.json", e.path + ": " + e.message);
  }
}

Result<Report> from_probe_report(const Json& probe_report, Json host) {
  try {
    Reader top(probe_report, "");
    int version = top.integer("schema_version");
    if (version != 1) top.fail("schema_version", "this sandgate reads probe reports of version 1");
    Report report;
    report.job = "probe";
    report.sandgate_version = SANDGATE_VERSION;
    report.host = std::move(host);
    const Json& runs = top.array("runs");
    std::set<std::string> names;
    for (size_t i = 0; i < runs.size(); ++i) {
      Reader run(runs[i], detail::item_path("runs", i));
      ProviderReport p;
      p.name = run.str("provider");
      for (const auto& w : run.strings("weakenings")) p.name += " +" + w;
      if (!names.insert(p.name).second) run.fail("provider", "a second run of " + p.name);
      p.unsafe = run.boolean("unsafe");
      p.display_name = p.name + (p.unsafe ? " (UNSAFE: no isolation)" : "");
      // Newer than the first probe reports (and than this test fixture): read when present.
      if (run.has("declared_capabilities")) p.capabilities = run.strings("declared_capabilities");
      if (run.has("contradicted_capabilities"))
        p.contradicted_capabilities = contradictions_from(run, "contradicted_capabilities");
      // The verdicts, read as qualify's probe files are (this run alone).
      Json one = {{"schema_version", 1}, {"runs", Json::array({runs[i]})}};
      read_probes(one, "", p);
      bool exposed = false;
      for (const auto& v : *p.probes) exposed |= v.verdict == probes::Verdict::kExposed;
      p.qualified = !exposed;
      if (exposed) p.disqualifications = {"the escape probes found it exposed"};
      report.providers.push_back(std::move(p));
    }
    add_rules(report);
    return report;
  } catch (const FieldError& e) {
    return logic_error("read probe report", e.path + ": " + e.message);
  }
}

Result<Report> load_report(const std::string& path) {
  SG_ASSIGN_OR_RETURN(Json j, read_bounded_json(path));
  if (j.is_object() && j.contains("type")) {
    auto report = report_from_json(j);
    if (!report.ok()) return std::move(report).error().context_add(path);
    return report;
  }
  if (j.is_object() && j.contains("runs") && !j.contains("providers")) {  // sandgate probe --json
    auto report = from_probe_report(j, Json::object());
    if (!report.ok()) return std::move(report).error().context_add(path);
    return report;
  }
  if (!j.is_object() || !j.contains("providers") || !j.contains("doctor"))
    return logic_error("read report",
                       "neither a sandgate report (no \"type\"), a probe report (no \"runs\") nor "
                       "a qualify.json (no "
                       "\"providers\" and \"doctor\")",
                       path);
  ProbeFiles files;
  if (j["providers"].is_array()) {
    for (const auto& p : j["providers"]) {
      if (!p.is_object() || !p.contains("probes") || !p["probes"].is_object()) continue;
      const Json& file = p["probes"].value("report", Json());
      if (!file.is_string() || !p.value("name", Json()).is_string())
        return logic_error("read qualify.json", "providers[].probes.report: expected a path", path);
      std::string written = file.get<std::string>();
      std::string beside = dirname_of(path) + "/" + basename_of(written);
      auto read = read_bounded_json(beside);
      if (!read.ok() && beside != written) read = read_bounded_json(written);
      if (!read.ok())
        return std::move(read).error().context_add("the probe report " + path + " names");
      files[p["name"].get<std::string>()] = std::move(read).value();
    }
  }
  auto report = from_qualify(j, files);
  if (!report.ok()) return std::move(report).error().context_add(path);
  return report;
}

}  // namespace sandgate::reports
