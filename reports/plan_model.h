// The capacity planner's section of the report model (`sandgate plan --report DIR`): the
// table `plan` prints and, per model, the risk of exceeding the host against the number of
// runs. Its JSON is what `plan --json` writes (replay::to_json(Plan)) plus the trace files, so
// the reader below is also the strict reading of that file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"

namespace sandgate::reports {

struct RiskPoint {
  uint64_t runs = 0;
  double risk = 0;  // P(the model's admission sum of `runs` runs > host), in [0, 1]
};

// One row of the plan's table: a sizing model (static-peak, static-average, per-call,
// per-call-grant, actual).
struct PlanFit {
  std::string policy;
  uint64_t fits = 0;                 // largest N at the plan's risk
  bool fits_is_lower_bound = false;  // fits reached max_runs
  double p_memory_exceeded = 0, p_cpu_exceeded = 0;
  uint64_t fits_by_cpu = 0;
  double reserved_bytes = 0, used_bytes = 0;
  std::string note;
  // The model's own figures (static-average: runs_crossing_limit_share, ...; per-call:
  // over_grant_call_time_share): numbers by name.
  std::vector<std::pair<std::string, double>> extra;
  std::vector<RiskPoint> risk_curve;  // N ascending
};

// How one intent's calls used memory against the policy's grant.
struct PlanIntent {
  std::string intent;
  uint64_t calls = 0;
  double seconds = 0;
  std::optional<double> grant_memory_bytes;
  double above_baseline_p50_bytes = 0, above_baseline_p99_bytes = 0, above_baseline_max_bytes = 0;
  uint64_t calls_over_grant = 0;
};

struct PlanSection {
  int schema_version = 1;  // the planner's (replay::kPlanSchemaVersion)
  std::string policy;      // the policy whose grants the per-call rows use
  uint64_t traces = 0;
  std::vector<std::string> trace_files;
  uint64_t host_memory_bytes = 0;
  double host_cpus = 0;
  double risk = 0;
  uint64_t trials = 0, seed = 0, max_runs = 0, curve_max_runs = 0;
  std::vector<PlanFit> fits;
  std::vector<PlanIntent> intents;
};

Json to_json(const PlanSection& p);
// Strict; a fault is a detail::FieldError naming the path under `path` (reports/field_reader.h).
PlanSection plan_from(const Json& j, const std::string& path);

}  // namespace sandgate::reports
