// The names of how a call ended and of the retry advice (controller/outcome.h). Apart from
// outcome.cc, whose to_json reaches the policy's writer and parser (std::regex): the microVM's
// guest agent names terminations (controller/guest_control.h) and links nothing of those.
#include "controller/outcome.h"

namespace sandgate::controller {

std::string to_string(Termination t) {
  switch (t) {
    case Termination::kExited:
      return "exited";
    case Termination::kTimeout:
      return "timeout";
    case Termination::kMemoryLimit:
      return "memory_limit";
    case Termination::kPidsLimit:
      return "pids_limit";
    case Termination::kCancelled:
      return "cancelled";
    case Termination::kKilled:
      return "killed";
    case Termination::kNotStarted:
      return "not_started";
  }
  return "unknown";
}

std::string to_string(RetryAdvice r) {
  switch (r) {
    case RetryAdvice::kRetry:
      return "retry";
    case RetryAdvice::kRetryWithSmallerScope:
      return "retry_with_smaller_scope";
    case RetryAdvice::kNoRetry:
      return "no_retry";
  }
  return "unknown";
}

}  // namespace sandgate::controller
