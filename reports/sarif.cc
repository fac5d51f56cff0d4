// SARIF 2.1.0 (OASIS, sarif-v2.1.0-errata01): a run whose tool.driver carries a rule
// (reportingDescriptor) per probe id, and a result per exposed (level "error") and warning
// (level "warning") verdict. Code-scanning views want a location on every result: the report
// file stands in as the artifact, and the provider and probe as logical locations. JSON
// escaping is dump_json's; text is still clean_text'd so that a viewer that prints it raw
// shows no escape sequences, and cut.
#include "core/json.h"
#include "reports/text.h"
#include "reports/writers.h"

namespace sandgate::reports {
namespace {

constexpr const char* kSarifSchema =
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json";

std::string t(std::string_view s, size_t max = 1000) {
  CleanOptions o;
  o.max_bytes = max;
  return clean_text(s, o);
}

Json rule_json(const ProbeRule& rule) {
  std::string help = "Fix: " + rule.remediation;
  return {{"id", t(rule.id, 200)},
          {"name", t(rule.id, 200)},
          {"shortDescription",
           {{"text", t("Escape probe " + rule.id + " (" + rule.boundary + ")", 300)}}},
          {"fullDescription",
           {{"text", t("Tries, from inside the sandbox: " + rule.description +
                       ". Confirmed by a second witness: " + rule.witness + ".")}}},
          {"help", {{"text", t(help)}}},
          {"defaultConfiguration", {{"level", "error"}}},
          {"properties", {{"tags", {"security", "sandbox", t(rule.boundary, 40)}}}}};
}

}  // namespace

std::string render_sarif(const Report& r) {
  Json rules = Json::array();
  std::map<std::string, size_t> index;
  for (const auto& [id, rule] : r.rules) {
    index[id] = rules.size();
    rules.push_back(rule_json(rule));
  }
  Json results = Json::array();
  for (const auto& p : r.providers) {
    if (!p.probes) continue;
    for (const auto& v : *p.probes) {
      if (v.verdict != probes::Verdict::kExposed && v.verdict != probes::Verdict::kWarning)
        continue;
      const bool exposed = v.verdict == probes::Verdict::kExposed;
      Json result = {{"ruleId", t(v.id, 200)},
                     {"level", exposed ? "error" : "warning"},
                     {"message",
                      {{"text", t(p.name + (exposed ? " is exposed: " : " warning: ") + v.id +
                                  ": " + v.why)}}},
                     {"locations",
                      {{{"physicalLocation", {{"artifactLocation", {{"uri", "report.json"}}}}},
                        {"logicalLocations",
                         {{{"name", t(v.id, 200)},
                           {"fullyQualifiedName", t(p.name + "/" + v.id, 400)},
                           {"kind", "member"}}}}}}},
                     {"partialFingerprints", {{"sandgateProbe/v1", t(p.name + "/" + v.id, 400)}}},
                     {"properties",
                      {{"provider", t(p.name, 200)},
                       {"unsafe_provider", p.unsafe},
                       {"boundary", t(v.boundary, 40)},
                       {"witness", t(v.witness, 40)}}}};
      if (auto it = index.find(v.id); it != index.end()) result["ruleIndex"] = it->second;
      results.push_back(std::move(result));
    }
  }
  Json driver = {{"name", "sandgate"}, {"version", t(r.sandgate_version, 40)}, {"rules", rules}};
  Json sarif = {{"$schema", kSarifSchema},
                {"version", "2.1.0"},
                {"runs",
                 {{{"tool", {{"driver", driver}}},
                   {"results", results},
                   {"properties", {{"job", t(r.job, 40)}, {"created", t(r.created, 40)}}}}}}};
  return dump_json(sarif, 2) + "\n";
}

}  // namespace sandgate::reports
