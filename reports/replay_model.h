// The replay's section of the report model (`sandgate replay --report DIR`): per policy, the
// scores as `replay --json` writes them (replay::to_json(PolicyScores), kept whole) and, per
// replayed trace, what a burst timeline needs: the run's memory and CPU over time, its calls
// with their intents, the ladder's actions. The victim's latency per policy is read out of the
// scores (the victim's percentiles), and its solo baseline is the section's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"

namespace sandgate::reports {

// A latency distribution as `sandgate-load victim --json` summarises it.
struct LatencySummary {
  uint64_t count = 0;
  double p50_us = 0, p90_us = 0, p99_us = 0, max_us = 0;
  uint64_t missed_deadlines = 0;
};

// Everything on one run's replay clock (ms; 0: the run was ready).
struct TimelineSample {
  double t_ms = 0;
  uint64_t memory_bytes = 0;  // the run cgroup's memory.current
  double cpu_cores = 0;       // its CPU rate since the previous sample
};
struct TimelineCall {
  std::string id, intent;
  double start_ms = 0, end_ms = 0;  // host side: requested to outcome
  std::string ended;                // the termination ("exited", "killed", ...) or "not run"
};
struct TimelineAction {
  std::string call_id;
  std::string action;  // throttle, unthrottle, freeze, thaw, cancel, kill, oom_kill
  double at_ms = 0;    // on the run's replay clock (the call's start + the action's time)
  std::string reason;
};
struct TraceTimeline {
  std::string trace;                    // the trace's name ("#2" appended when repeated)
  std::vector<TimelineSample> samples;  // at most replay::kMaxUsagePoints, time ascending
  std::vector<TimelineCall> calls;
  std::vector<TimelineAction> actions;
  std::string error;  // the run could not be made or failed midway; "" when it ran
};

struct ReplayPolicy {
  Json scores = Json::object();  // replay::to_json(PolicyScores), whole
  // Read from the scores:
  std::string label;                     // scores.policy
  std::optional<LatencySummary> victim;  // scores.victim; absent when no victim ran
  std::vector<TraceTimeline> timelines;  // one per replayed run
};

struct ReplaySection {
  std::string provider;
  double time_scale = 1;
  bool compress_silence = false;
  std::optional<LatencySummary> victim_solo;  // the victim alone, before any aggressor
  std::vector<ReplayPolicy> policies;         // in the order replayed
};

Json to_json(const LatencySummary& l);
Json to_json(const ReplaySection& s);
// Strict; a fault is a detail::FieldError naming the path under `path` (reports/field_reader.h).
ReplaySection replay_section_from(const Json& j, const std::string& path);

}  // namespace sandgate::reports
