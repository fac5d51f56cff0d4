#include "reports/job_report.h"

#include <ctime>

#include "reports/field_reader.h"

#ifndef SANDGATE_VERSION
#define SANDGATE_VERSION "unknown"
#endif

namespace sandgate::reports {

Report job_report(const std::string& job, Json host) {
  Report r;
  r.job = job;
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  r.created = buf;
  r.sandgate_version = SANDGATE_VERSION;
  r.host = std::move(host);
  return r;
}

Result<PlanSection> plan_section_from_json(const Json& j) {
  try {
    return plan_from(j, "plan");
  } catch (const detail::FieldError& e) {
    return logic_error("read plan", e.path + ": " + e.message);
  }
}

}  // namespace sandgate::reports
