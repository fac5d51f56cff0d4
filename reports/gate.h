// The gate: a current report against a baseline report (both reports/model.h), for a pre-merge
// check on a change to a sandbox. It lists what changed, the differences that matter first, and
// says whether anything regressed:
//   1. a probe that was blocked and is now exposed (or anything now exposed);
//   2. a probe that was blocked and now proves nothing (inconclusive), only warns, or no longer
//      runs;
//   3. a capability the provider no longer declares;
//   4. a provider newly disqualified, or gone from the report;
//   5. containment worse in the short replay: fewer calls completed, more killed, cancelled or
//      timed out, more work lost;
//   6. the latency victim's inflation worse;
//   7. costs worse.
// Costs are never compared in milliseconds between two reports (two days, maybe two machines)
// but as ratios of paired samples taken side by side in the same run (reports/model.h Costs):
// a run against the bare spawn measured in the same round, a call through the controller
// against the provider's own exec right before it. A ratio is worse only when its median's
// confidence interval (core/stats.h median_interval) lies wholly above the baseline's and the
// median rose by more than the tolerance: one slow sample never fails a merge.
// `sandgate bench`'s figures (reports/bench_model.h) in both reports go by the same rule, key
// "bench/<name>": a paired figure on its ratios, an absolute one on its own samples (then the
// two reports must come from the same machine for the comparison to mean anything).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/result.h"
#include "reports/model.h"

namespace sandgate::reports {

// What the gate lets pass. Read from --tolerance FILE (JSON, strict: an unknown field is an
// error naming it); every field is optional and defaults to the value here.
struct GateTolerance {
  // A cost ratio is worse when its interval clears the baseline's and its median rose by more
  // than this fraction.
  double cost_relative = 0.10;
  // The same for a benchmark figure with no baseline in its own run (`sandgate bench`'s
  // monitor CPU, probe time, ...): it moves with everything else the machine does between two
  // runs, so only a doubling (by default) is called a change.
  double absolute_relative = 1.0;
  double confidence = 0.95;  // of the cost intervals
  // More work lost in the replay (call-seconds) than the baseline by more than this.
  double work_lost_s = 0.5;
  // The victim's p99 inflation higher than the baseline's by more than this fraction (one
  // figure per report, no interval: the default is wide on purpose).
  double victim_relative = 0.5;
  // Findings accepted by a reviewer, by key ("podman/net.vsock", "podman/capability:net.none",
  // "podman/qualified", "podman/cost:run", ...; `sandgate gate` prints each finding's key):
  // shown, never failing the gate. A key that matches nothing is reported, so a stale
  // acceptance does not linger unseen.
  std::set<std::string> accept;
};
Result<GateTolerance> tolerance_from_json(const Json& j);
Result<GateTolerance> load_tolerance(const std::string& path);

struct GateFinding {
  enum class Change { kRegression, kImprovement, kNote };
  // In the order of importance (the header's list); the output is sorted by it.
  enum class Kind {
    kExposed,
    kProbeLost,
    kCapability,
    kQualification,
    kContainment,
    kVictim,
    kCost,
    kHost
  };
  Change change = Change::kNote;
  Kind kind = Kind::kHost;
  std::string key;        // "PROVIDER/SUBJECT": what --tolerance's accept names
  std::string text;       // one line, for people (probe text already cleaned, not escaped)
  bool accepted = false;  // a regression the tolerance accepts
};

struct GateResult {
  std::vector<GateFinding> findings;        // regressions, then improvements, then notes; by kind
  std::vector<std::string> unused_accepts;  // accept keys that matched no finding
  // Regressions not accepted: what makes the gate fail.
  size_t failing() const;
  size_t count(GateFinding::Change c) const;
  // One line per regression and improvement (accepted ones marked): Markdown's "What changed".
  std::vector<std::string> what_changed() const;
};

GateResult run_gate(const Report& baseline, const Report& current, const GateTolerance& tolerance);

// The plain-text listing `sandgate gate` prints: a summary line, then one line per finding.
std::string render_gate_text(const GateResult& result, const std::string& baseline_name,
                             const std::string& current_name);
Json to_json(const GateResult& result);

}  // namespace sandgate::reports
