// Logging: spdlog to stderr. Level from --log-level or SANDGATE_LOG (trace..off).
// Never log between clone() and execve(): the child may only make async-signal-safe calls.
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <string>
#include <string_view>
#include <utility>

namespace sandgate {

// Sets up the stderr logger; unknown level names fall back to "warn".
void init_logging(std::string_view level);

// Where a piece of work spends its time, step by step, logged at debug level when it ends
// (SANDGATE_LOG=debug): "run r1: create (ms): record 0.40 workspace 1.20 ...; total 6.10".
// The breakdown behind the create+exec+destroy and per-call benchmarks; free when debug is off.
class StepClock {
 public:
  // `subject`: whose steps ("run r1"); `what`: a string literal ("create").
  StepClock(std::string subject, const char* what) : subject_(std::move(subject)), what_(what) {}
  ~StepClock();
  StepClock(const StepClock&) = delete;
  StepClock& operator=(const StepClock&) = delete;
  void lap(const char* step);  // the time since the previous lap (or the start), named `step`

 private:
  std::string subject_;
  const char* what_;
  std::string steps_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_ = start_;
};

}  // namespace sandgate
