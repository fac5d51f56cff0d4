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

// What CPU adds to a row (planner version 2; replay/planner.h has the model): N by memory and
// N by CPU demand from the same trials, the headline `fits` being the smaller.
struct PlanCpuFit {
  uint64_t fits_by_memory = 0;
  uint64_t fits_by_cpu_demand = 0;  // P(CPU demand > host cpus x cpu_overcommit) <= risk
  std::string binding;              // memory, cpu, both, none
  // At `fits`: mean and 95th percentile over time of max(1, CPU demand / host cores).
  double cpu_slowdown_mean = 1, cpu_slowdown_p95 = 1;
  std::vector<RiskPoint> cpu_risk_curve;  // P(CPU demand > cores x overcommit), N ascending
};

// One row of the plan's table: a sizing model (static-peak, static-average, per-call,
// per-call-grant, actual).
struct PlanFit {
  std::string policy;
  uint64_t fits = 0;  // largest N at the plan's risk (version 1: by memory; 2: the smaller)
  bool fits_is_lower_bound = false;  // fits reached max_runs
  double p_memory_exceeded = 0, p_cpu_exceeded = 0;
  uint64_t fits_by_cpu = 0;       // N by the model's CPU reservation alone
  std::optional<PlanCpuFit> cpu;  // version 2 (absent from a version-1 plan)
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
  int schema_version = 2;  // the planner's (replay::kPlanSchemaVersion); 1 is still read
  std::string policy;      // the policy whose grants the per-call rows use
  uint64_t traces = 0;
  std::vector<std::string> trace_files;
  uint64_t host_memory_bytes = 0;
  double host_cpus = 0;
  std::optional<double> cpu_overcommit;  // version 2: >= 1
  double risk = 0;
  uint64_t trials = 0, seed = 0, max_runs = 0, curve_max_runs = 0;
  std::vector<PlanFit> fits;
  std::vector<PlanIntent> intents;
};

Json to_json(const PlanSection& p);
// Strict; a fault is a detail::FieldError naming the path under `path` (reports/field_reader.h).
PlanSection plan_from(const Json& j, const std::string& path);

}  // namespace sandgate::reports
