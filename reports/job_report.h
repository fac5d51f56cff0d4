// A report model for a job other than qualify (`replay`, `plan`): the header every job fills
// the same way. qualify's comes from its qualify.json (reports/from_qualify.h).
#pragma once

#include <string>

#include "core/json.h"
#include "core/result.h"
#include "reports/model.h"

namespace sandgate::reports {

// job, created (now, UTC), sandgate_version and the doctor's findings; no providers, no rules.
Report job_report(const std::string& job, Json host);

// The strict reading of what `plan --json` writes (replay::to_json(Plan) with trace_files):
// the plan section of the model. Errors name the field ("plan.fits[2].risk_curve[0]: ...").
Result<PlanSection> plan_section_from_json(const Json& j);

}  // namespace sandgate::reports
