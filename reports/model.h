// The report model: what one sandgate job found, in one self-contained document that every
// writer (JSON, HTML, JUnit XML, SARIF, Markdown) renders and that `sandgate report render`
// reads back. It is filled from a qualify run today (reports/from_qualify.h); probe, replay,
// plan and bench fill the same model later, each adding the sections it owns (a section a job
// did not run is absent, never an empty placeholder that reads as "nothing found").
//
// Versioned by kSchemaVersion: a reader refuses a newer version, and every field a reader
// does not know is refused too (a typo in a hand-edited baseline must not read as "absent").
// The README documents each field.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/result.h"
#include "probes/judge.h"
#include "reports/bench_model.h"
#include "reports/plan_model.h"
#include "reports/replay_model.h"

namespace sandgate::reports {

inline constexpr int kSchemaVersion = 2;  // 2: the in-run spawn baseline and the call samples
// The value of the top-level "type" field: what tells a report from a qualify.json.
inline constexpr const char* kReportType = "sandgate-report";

// One probe's verdict on one provider, with its evidence.
struct ProbeVerdict {
  std::string id;        // "creds.env_tokens": <boundary>.<name>
  std::string boundary;  // "creds"
  std::string attempt;   // what was tried, in words (from the probe: attacker-controlled)
  probes::Verdict verdict = probes::Verdict::kInconclusive;
  std::string layer;    // what blocked it ("seccomp", "mount", ...); "" unless blocked
  std::string why;      // the evidence (exposed), the reason (inconclusive), the refusal
  std::string witness;  // the second witness the judge asked for ("canary", "decoy", "self", ...)
  // The judgement as the judge wrote it (probes/judge.h Judgement::to_json): the native
  // baseline's and the sandbox's reports, the host's evidence. Kept whole so nothing the judge
  // saw is lost; the writers show `why` and the host evidence from it.
  Json judgement = Json::object();
};

// What a provider costs, measured in the same run as every other provider.
// Samples are taken interleaved, so that sample i of two series saw the same moment of the
// machine: the run samples round-robin with every other provider's and with the report's spawn
// baseline (Report::spawn_samples_ms), the exec and call samples alternately in one live run.
// A ratio of paired samples cancels what the machine was doing at that moment.
struct Costs {
  std::vector<double> run_samples_ms;   // each create + exec(true) + destroy
  std::optional<double> run_ms;         // their median
  std::vector<double> exec_samples_ms;  // each call of true through the provider alone
  std::vector<double> call_samples_ms;  // each call of true through the controller
  std::optional<double> exec_ms;        // median of exec_samples_ms
  std::optional<double> call_ms;        // median of call_samples_ms
};

// Costs as ratios to the baseline measured in the same run: these machines are noisy, and a
// ratio to a baseline taken side by side travels between runs where milliseconds do not.
struct CostRatios {
  // Against the baseline provider (Report::baseline_provider: no isolation, the cost of doing
  // nothing); absent when the run has none or it was not measured.
  std::optional<double> run, exec, call;
  // The controller's share of a call: call_ms / exec_ms of this same provider.
  std::optional<double> controller;
  // Against the spawn baseline: the median of run_samples_ms[i] / spawn_samples_ms[i] (how many
  // bare spawns of /bin/true one run costs); absent without paired samples.
  std::optional<double> spawn;
};

// a[i] / b[i] for every i both have (b[i] > 0): ratios of samples taken side by side.
std::vector<double> paired_ratios(const std::vector<double>& a, const std::vector<double>& b);

// The short replay of a recorded burst through the built-in per-call policy.
struct ReplaySummary {
  uint64_t calls = 0, completed = 0, killed = 0, cancelled = 0, timed_out = 0, failed_exit = 0;
  double mem_error_median = 0;  // relative error of the replayed memory peaks (host side)
  double end_error_p95_ms = 0;  // p95 of |replayed call end - recorded end|
  double wall_s = 0;
  Json scores = Json::object();  // replay::to_json(PolicyScores): every score, whole
};
// As qualify.json and the model carry it.
Json to_json(const ReplaySummary& s);

// The job's policy against what the provider delivers: its declared capabilities less those
// the probes contradicted.
struct PolicyCheck {
  std::string name;                       // the policy's name ("default")
  std::vector<std::string> required;      // capabilities the policy requires
  std::vector<std::string> missing;       // required and not delivered
  std::vector<std::string> contradicted;  // of those, the ones it declared
  bool qualified = true;                  // nothing missing
};

// A declared capability an exposed probe showed it does not deliver.
struct Contradiction {
  std::string capability;
  std::vector<std::string> probes;  // the exposed probes that test it
};

struct ProviderReport {
  std::string name;          // registry name ("namespaces", "external:/opt/x")
  std::string display_name;  // as printed ("host_dir (UNSAFE: no isolation)")
  bool unsafe = false;       // the bypass cable: never a default, marked in every report
  std::vector<std::string> capabilities;  // what it declares (core/capability.h names)
  bool qualified = false;
  // Why it is not qualified, one reason each ("the escape probes found it exposed"); empty
  // when qualified.
  std::vector<std::string> disqualifications;
  std::optional<std::string> unavailable;  // why this host cannot run it; absent: it ran
  Costs costs;
  // The escape probes, in the suite's order; absent when they did not run for this provider.
  std::optional<std::vector<ProbeVerdict>> probes;
  std::optional<double> probes_wall_ms;
  std::vector<Contradiction> contradicted_capabilities;  // from the probes; empty without them
  std::optional<PolicyCheck> policy;                     // absent: the job checked none
  std::optional<ReplaySummary> replay;
};

// A probe's rule: what it tries, how it is witnessed and what to do when it is exposed. One
// per probe id in the report, so that a re-render needs nothing but the report.
struct ProbeRule {
  std::string id, boundary;
  std::string description;  // the probe's attempt
  std::string witness;
  std::string remediation;  // probes/plan.h remediation()
};

struct Report {
  int schema_version = kSchemaVersion;
  std::string job = "qualify";  // which command filled it
  std::string created;          // UTC, ISO 8601 ("2026-12-01T18:09:12Z"); "" unknown
  std::string sandgate_version;
  Json host = Json::object();  // the doctor's findings (`sandgate doctor --json`), whole
  std::vector<ProviderReport> providers;
  // The provider whose costs are the ratios' denominator: the first unsafe provider in the
  // run whose costs were measured (host_dir: no isolation at all); "" when there is none.
  std::string baseline_provider;
  // The cost of doing nothing, measured in the same run: a bare spawn + wait of /bin/true on
  // the host, one before each round of the providers' run samples (Costs). Empty when the job
  // measured no costs (or the report is schema_version 1).
  std::vector<double> spawn_samples_ms;
  std::map<std::string, ProbeRule> rules;  // by probe id
  // `sandgate bench`'s figures (reports/bench_model.h); absent when the job ran no benchmarks.
  std::optional<std::vector<BenchFigure>> bench;
  std::optional<ReplaySection> replay;  // `sandgate replay`; absent: the job replayed nothing
  std::optional<PlanSection> plan;      // `sandgate plan`; absent: the job planned nothing
};

// The ratios of `p`'s costs (see CostRatios).
CostRatios cost_ratios(const Report& r, const ProviderReport& p);
// The provider baseline_provider names; nullptr when none.
const ProviderReport* baseline_of(const Report& r);
// The first unsafe provider whose run cost was measured: what baseline_provider is set to.
std::string choose_baseline(const std::vector<ProviderReport>& providers);

// Every probe whose verdict (with its layer) differs between the providers that ran it, or
// that some provider did not run; each provider's verdict ("exposed", "blocked (seccomp)",
// "not run"). Empty with fewer than two providers with probes.
struct ProbeDifference {
  struct Cell {
    std::string verdict;  // verdict_cell(), or "not run"
    std::string why;      // the provider's evidence for it ("" when not run)
  };
  std::string id;
  std::map<std::string, Cell> verdicts;  // provider name -> its verdict and evidence
};
std::vector<ProbeDifference> probe_differences(const Report& r);
// "blocked (seccomp)", "exposed", ...
std::string verdict_cell(const ProbeVerdict& v);

Result<probes::Verdict> parse_verdict(const std::string& s);

Json to_json(const Report& r);
// Strict: an unknown or missing field, a wrong type, a newer schema_version is an error that
// names the field's path ("providers[1].probes[3].verdict: expected one of ...").
Result<Report> report_from_json(const Json& j);

}  // namespace sandgate::reports
