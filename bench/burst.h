// The burst the controller's reaction is measured on: sandgate-try's ramp, 64 MiB every 10 ms,
// 10 steps (640 MiB), through throttle_at 0.5 x a 1 GiB grant. One definition shared by
// controller_bench (BM_Reaction) and `sandgate bench` (burst.reaction_p95), so both time the
// same burst. Header-only: the CLI does not link the benchmarks.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "controller/policy.h"
#include "core/units.h"

namespace sandgate::bench {

// Where sandgate-try is bound inside the jail.
inline constexpr char kTryInJail[] = "/opt/sandgate-try";
inline constexpr long kStepMiB = 64, kStepIntervalMs = 10, kSteps = 10;
inline constexpr double kThrottleAt = 0.5;
inline constexpr uint64_t kGrantMiB = 1024;

// `policy` with the burst's ladder threshold and its intent's grant.
inline void add_burst_intent(controller::Policy& policy, const std::string& intent) {
  policy.ladder.throttle_at = kThrottleAt;
  controller::Grant grant;
  grant.memory_max = MiB(kGrantMiB);
  grant.cpu_cores = 1.0;
  grant.pids_max = 64;
  grant.timeout = std::chrono::seconds(30);
  policy.intents[intent] = grant;
}

// The memory at which the ladder's first action is due.
inline long burst_threshold_mib() {
  return std::lround(kThrottleAt * static_cast<double>(kGrantMiB));
}

// The steps the burst printed: "ramp <total MiB> <begin ns> <end ns>" (CLOCK_MONOTONIC).
struct RampStep {
  long total_mib = 0;
  int64_t begin_ns = 0, end_ns = 0;
};

inline std::vector<RampStep> parse_ramp(const std::string& out) {
  std::vector<RampStep> steps;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    RampStep s;
    long long b = 0, e = 0;
    if (std::sscanf(line.c_str(), "ramp %ld %lld %lld", &s.total_mib, &b, &e) == 3) {
      s.begin_ns = b;
      s.end_ns = e;
      steps.push_back(s);
    }
  }
  return steps;
}

}  // namespace sandgate::bench
