#include "probes/probe_report.h"

#include <array>
#include <utility>

namespace sandgate::probes {

namespace {

constexpr std::array<std::pair<ProbeResult, const char*>, 4> kResultNames = {{
    {ProbeResult::kReached, "reached"},
    {ProbeResult::kDenied, "denied"},
    {ProbeResult::kNotFound, "not_found"},
    {ProbeResult::kError, "error"},
}};

// The report's fields as the judge reads them: each is checked for presence and type so a
// malformed line names the field that is wrong, not just "type error".
Result<std::string> string_field(const Json& j, const char* name, bool required) {
  auto it = j.find(name);
  if (it == j.end()) {
    if (!required) return std::string();
    return logic_error("parse probe report", std::string("missing field '") + name + "'");
  }
  if (!it->is_string()) {
    return logic_error("parse probe report", std::string("field '") + name +
                                                 "': expected a string, got " + it->type_name());
  }
  return it->get<std::string>();
}

}  // namespace

std::string to_string(ProbeResult r) {
  for (const auto& [value, name] : kResultNames)
    if (value == r) return name;
  return "error";
}

Result<ProbeResult> probe_result_from_string(const std::string& s) {
  for (const auto& [value, name] : kResultNames)
    if (s == name) return value;
  return logic_error("parse probe result",
                     "'" + s + "' is not one of reached, denied, not_found, error");
}

Json ProbeReport::to_json() const {
  Json j = Json::object();
  j["id"] = id;
  j["boundary"] = boundary;
  j["attempt"] = attempt;
  j["result"] = to_string(result);
  j["errno"] = errno_name;
  j["evidence"] = evidence;
  j["preconditions"] = preconditions;
  j["detail"] = detail;
  return j;
}

Result<ProbeReport> ProbeReport::from_json(const Json& j) {
  if (!j.is_object()) {
    return logic_error("parse probe report",
                       std::string("expected an object, got ") + j.type_name());
  }
  ProbeReport r;
  SG_ASSIGN_OR_RETURN(r.id, string_field(j, "id", true));
  SG_ASSIGN_OR_RETURN(r.boundary, string_field(j, "boundary", true));
  SG_ASSIGN_OR_RETURN(r.attempt, string_field(j, "attempt", true));
  SG_ASSIGN_OR_RETURN(std::string result, string_field(j, "result", true));
  auto parsed = probe_result_from_string(result);
  if (!parsed.ok()) {
    return logic_error("parse probe report", "field 'result': " + parsed.error().detail);
  }
  r.result = *parsed;
  SG_ASSIGN_OR_RETURN(r.errno_name, string_field(j, "errno", false));
  SG_ASSIGN_OR_RETURN(r.detail, string_field(j, "detail", false));
  if (auto it = j.find("evidence"); it != j.end()) {
    if (!it->is_object()) {
      return logic_error(
          "parse probe report",
          std::string("field 'evidence': expected an object, got ") + it->type_name());
    }
    r.evidence = *it;
  }
  if (auto it = j.find("preconditions"); it != j.end()) {
    if (!it->is_boolean()) {
      return logic_error(
          "parse probe report",
          std::string("field 'preconditions': expected true or false, got ") + it->type_name());
    }
    r.preconditions = it->get<bool>();
  }
  if (r.id.empty()) return logic_error("parse probe report", "field 'id': empty");
  if (r.boundary.empty()) return logic_error("parse probe report", "field 'boundary': empty");
  if (!r.id.starts_with(r.boundary + ".")) {
    return logic_error(
        "parse probe report",
        "field 'id': '" + r.id + "' does not start with its boundary '" + r.boundary + ".'");
  }
  return r;
}

}  // namespace sandgate::probes
