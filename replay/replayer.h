// The replayer behind `sandgate replay`: a trace becomes a run, each of its calls a controller
// call with the call's intent that executes `sandgate-load run --segment` for that call's slice
// of the trace, and the memory the run keeps between calls is held by a run-level
// `sandgate-load hold --follow` process in the run's main cgroup.
//
// Two halves. plan_replay() is pure: it turns a trace into a schedule (when each call starts
// on the replay clock, its Segment, the held level over time). RunReplayer executes one plan
// through a provider and the controller and reports what happened, host-side (the outcome,
// timestamps) and as sandgate-load saw it (its Achieved report).
//
// Modelling choices (README.md, "Replay"):
// - A sample is the level over the interval that ends at it, so each sample's targets start at
//   the previous sample's time (the first sample of a call starts at the call's start).
// - A call's memory target is what the trace shows above the level held when it began
//   (the run's baseline stays in the hold process throughout the call).
// - Calls of one run are sequential (an environment runs one call at a time): a call that
//   starts inside an earlier one (a sub-agent's calls inside its Task) is absorbed into it;
//   its samples are already part of the outer call's slice.
// - --time-scale X divides every time by X (levels, CPU rates included, are kept);
//   --compress-silence shortens every gap between calls longer than max_silence to
//   max_silence (the held level's changes in the gap are squeezed proportionally).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "replay/trace.h"
#include "session/run_session.h"
#include "workloads/segment.h"

namespace sandgate::replay {

struct ReplayTiming {
  double time_scale = 1.0;  // > 0; 2 = twice as fast
  bool compress_silence = false;
  Duration max_silence = std::chrono::seconds(1);
};

struct PlannedCall {
  std::string id;  // the trace's call id (the first, when calls were absorbed)
  std::string intent;
  std::string command;
  size_t absorbed = 0;  // later trace calls that started inside this one
  int64_t trace_start_ms = 0, trace_end_ms = 0;
  int64_t start_ms = 0, end_ms = 0;    // replay clock (scaled, compressed)
  uint64_t baseline_bytes = 0;         // held by the run while this call runs
  uint64_t trace_peak_bytes = 0;       // the trace's peak during the call (run total)
  workloads::Segment segment;          // targets above the baseline, replay-clock times
  uint64_t target_peak_bytes() const;  // the segment's largest memory target
  // When the segment first reaches half of its memory peak, ms from the call's start: the
  // burst onset "time to first ladder action" is measured from.
  int64_t burst_onset_ms() const;
};

struct HoldStep {
  int64_t at_ms = 0;  // replay clock
  uint64_t bytes = 0;
};

struct ReplayPlan {
  std::string name;
  std::vector<PlannedCall> calls;
  std::vector<HoldStep> hold;  // the run's level between calls, in time order
  int64_t trace_duration_ms = 0;
  int64_t duration_ms = 0;  // replay clock
  size_t trace_calls = 0;
  size_t absorbed_calls = 0;
  double speedup() const;  // trace_duration_ms / duration_ms
};

// Pure. Errors: an empty trace (no samples), a time scale that is not positive.
Result<ReplayPlan> plan_replay(const Trace& trace, const std::string& name,
                               const ReplayTiming& timing);

// What one replayed call did.
struct ReplayedCall {
  std::string run;  // the plan's name
  std::string id, intent;
  double planned_start_ms = 0, planned_end_ms = 0;  // replay clock
  double actual_start_ms = 0, actual_end_ms = 0;    // replay clock, host side
  uint64_t target_peak_bytes = 0;
  int64_t burst_onset_ms = 0;
  controller::CallOutcome outcome;              // without its output
  std::optional<workloads::Achieved> achieved;  // sandgate-load's report, when it printed one
  std::string error;                            // the call could not run at all
};

struct ReplayedRun {
  std::string name;
  std::string run_id;
  double wall_s = 0;
  std::vector<ReplayedCall> calls;  // the calls it made (attempted), in order
  size_t planned_calls = 0;         // the plan's: those it would have made had its agent lived
  std::string error;          // set when the run could not be made or failed midway
  bool agent_killed = false;  // its hold (the agent's resident memory) was OOM-killed
  // The run could not be made, or its hold (the agent) not started: the agent never ran, and
  // `error` says why. Under a memory budget the kernel often kills the process that is
  // starting a run (for a moment the largest in the budget), so this is an outcome of the
  // experiment, an agent lost, like agent_killed; it does not end the experiment.
  bool start_failed = false;
};

// Where the replayer learns what runs exist (the host sampler follows their cgroups).
struct RunObserver {
  std::function<void(const std::string& run, const controller::Cgroup& run_cg,
                     const controller::Cgroup& main_cg)>
      opened;
  std::function<void(const std::string& run)> closed;
  // The run's replay clock starts now (its hold process is running).
  std::function<void(const std::string& run)> ready;
  std::function<void(const ReplayedCall&)> call_done;  // progress
};

struct RunReplayOptions {
  std::string load_binary;            // sandgate-load on the host, bound into the environment
  providers::EnvSpec spec;            // tenant etc.; the load binary's mount is added
  std::atomic<bool>* stop = nullptr;  // set: stop before the next call
};

// The path sandgate-load has inside environments.
inline constexpr char kLoadInside[] = "/opt/sandgate-load";

// Executes `plan` as one run (RunSession) and closes it. The replay clock's zero is when the
// run is ready (environment made, hold process running), so set-up time is not call lateness.
ReplayedRun replay_run(controller::Controller& controller, providers::Provider& provider,
                       const ReplayPlan& plan, const RunReplayOptions& options,
                       const RunObserver& observer);

// The segment squeezed into its duration minus `overhead_ms` (times scaled, levels kept; the
// later of points that land on one millisecond wins). Pure.
workloads::Segment fit_segment(const workloads::Segment& segment, double overhead_ms);

// The main cgroup of a run (<run>/main): where the run's long-lived processes are.
controller::Cgroup main_cgroup_of(const controller::Cgroup& run);

}  // namespace sandgate::replay
