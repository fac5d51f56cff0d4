// The measurements `qualify` and `bench` share: a run's create + exec + destroy, a call with
// and without the controller in one live run, the bare spawn baseline, the short replay. One
// definition each, so a figure of `bench` is the same figure as `qualify`'s.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "cli/common.h"
#include "controller/controller.h"
#include "core/process.h"
#include "core/progress.h"
#include "providers/provider.h"
#include "replay/experiment.h"
#include "reports/model.h"

namespace sandgate::cli {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start);

// An error unless /bin/true exited 0.
Status expect_true(const ExitStatus& status, const std::string& what);

// One create + exec(true) + destroy; the wall time in milliseconds.
Result<double> cycle(providers::Provider& p);

// The cost of one call of /bin/true in a live run: through the provider alone
// (Environment::exec), and through the controller (RunSession::call: its own cgroup and grant,
// placed before exec, watched, ended with an outcome). Both live at once and the calls
// alternate, so exec sample i and call sample i saw the same moment of the machine and their
// ratio is the controller's share, whatever else the machine was doing.
struct CallCosts {
  std::vector<double> exec_ms, call_ms;
};
Result<CallCosts> call_costs(providers::Provider& p, controller::Controller& controller, int n);

// The cost of doing nothing, the same moment: a bare spawn and wait of /bin/true on the host.
Result<double> bare_spawn();

// The short replay: every call of the trace run as a real effect under the per-call policy;
// what a provider changes is whether the calls complete and land where they should. One
// progress step, prefixed `prefix` ("qualify: podman", "bench"), each finished call its detail.
Result<replay::PolicyScores> short_replay(Globals& g, const std::string& provider,
                                          const providers::ProviderOptions& options,
                                          const replay::ReplayPlan& plan,
                                          const replay::PolicyChoice& policy, Progress& progress,
                                          const std::string& prefix);

// The replay's scores as the report model keeps them (reports::ReplaySummary).
reports::ReplaySummary replay_summary(const replay::PolicyScores& s);

// Now, UTC, ISO 8601 ("2026-12-01T18:09:12Z"): when a report was made.
std::string utc_now();

}  // namespace sandgate::cli
