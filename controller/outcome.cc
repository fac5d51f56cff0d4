#include "controller/outcome.h"

#include <signal.h>

#include <cerrno>
#include <cmath>

namespace sandgate::controller {

void classify(CallOutcome& o) {
  const CallObservation& seen = o.observed;
  const ExitStatus& exit = o.exec.status;
  if (o.exec.start_failure) {
    // Nothing ran, so nothing else can have happened to it.
    const StartFailure& f = *o.exec.start_failure;
    o.termination = Termination::kNotStarted;
    o.reason = "could not start " +
               (o.argv.empty() ? std::string("the command") : "'" + o.argv[0] + "'") +
               " in the sandbox: " + f.describe();
    o.retry = RetryAdvice::kNoRetry;
    o.advice =
        f.step == "execve" && f.err == ENOENT
            ? "the command is not installed in the sandbox (or not on its PATH): use one that is"
            : "the command cannot be run there as it is; fix the command line or the file's mode";
    return;
  }
  std::string limit = o.grant.memory_max ? format_bytes(*o.grant.memory_max) : "the run's limit";
  if (seen.oom_kills > 0) {
    // The kernel killed inside this call's cgroup: whatever the exit status says, this is it.
    o.termination = Termination::kMemoryLimit;
    o.retry = RetryAdvice::kRetryWithSmallerScope;
    const std::string peak = human_bytes({seen.peaks.memory_bytes});
    if (const auto& l = o.memory_lowered) {  // its limit was the room a shared limit had left
      o.reason = "the call used all of the " + format_bytes(l->limit) + " left in " + l->within +
                 "'s shared memory limit when it started (its grant: " + limit + "; peak " + peak +
                 ") and the kernel OOM-killed it";
      o.advice =
          "the memory it shares with other work was nearly used up: do less in one call, or "
          "retry once the run's or tenant's other work holds less";
    } else {
      o.reason = "the call used all of its " + limit + " memory grant (peak " + peak +
                 ") and the kernel OOM-killed it";
      o.advice =
          "do less in one call (fewer parallel jobs, a smaller input, one test file at a "
          "time) or declare an intent with a larger memory grant";
    }
    return;
  }
  if (seen.run_oom_kills > 0 && !exit.exited && exit.signal == SIGKILL) {
    o.termination = Termination::kMemoryLimit;
    o.reason = "the run hit its shared memory limit while this call ran (call peak " +
               human_bytes({seen.peaks.memory_bytes}) + ") and the kernel OOM-killed it";
    o.retry = RetryAdvice::kRetryWithSmallerScope;
    o.advice =
        "the whole run shares one memory limit: do less in one call, or stop other "
        "memory-hungry work in the run first";
    return;
  }
  if (seen.killed_by_ladder || seen.cancelled_by_ladder) {
    o.termination = seen.ladder_termination;
    o.reason = seen.ladder_reason;
    if (o.termination == Termination::kPidsLimit) {
      o.retry = RetryAdvice::kRetryWithSmallerScope;
      o.advice = "the call kept hitting its limit of " +
                 (o.grant.pids_max ? std::to_string(*o.grant.pids_max) : std::string("?")) +
                 " processes: run fewer processes at once (lower -j, no fork loops)";
    } else if (o.termination == Termination::kMemoryLimit) {
      o.retry = RetryAdvice::kRetryWithSmallerScope;
      o.advice = "use less memory in one call, or declare an intent with a larger grant";
    } else {
      // Cancelled or killed for host pressure: not the call's fault, it may go again.
      o.retry = RetryAdvice::kRetry;
      o.advice = "the host was under pressure; retry the same call shortly";
    }
    return;
  }
  if (o.exec.timed_out) {
    o.termination = Termination::kTimeout;
    // Ended before its own limit (or with none): the run's deadline came first.
    o.reason =
        o.grant.timeout > Duration(0) && o.exec.wall >= o.grant.timeout
            ? "the call ran past its " + format_duration(o.grant.timeout) + " wall-clock limit"
            : std::string("the call ran past the run's wall-clock limit");
    o.retry = RetryAdvice::kRetryWithSmallerScope;
    o.advice = "split the work or run it in the background with a narrower scope";
    return;
  }
  if (o.exec.cancelled) {
    o.termination = Termination::kCancelled;
    o.reason = "the caller cancelled the call";
    o.retry = RetryAdvice::kRetry;
    o.advice = "cancelled on request; run it again if it is still wanted";
    return;
  }
  if (seen.pids_refused > 0 && !(exit.exited && exit.code == 0)) {
    o.termination = Termination::kPidsLimit;
    o.reason = std::to_string(seen.pids_refused) + " fork(s) were refused at the call's limit of " +
               (o.grant.pids_max ? std::to_string(*o.grant.pids_max) : std::string("?")) +
               " processes";
    o.retry = RetryAdvice::kRetryWithSmallerScope;
    o.advice = "run fewer processes at once (lower -j, fewer workers)";
    return;
  }
  o.termination = Termination::kExited;
  if (exit.exited) {
    o.reason = "exited with status " + std::to_string(exit.code);
    o.retry = RetryAdvice::kNoRetry;
    o.advice = exit.code == 0 ? "done" : "the command itself failed; read its output";
  } else if (exit.signal == SIGXFSZ && o.grant.file_size) {
    // The kernel's signal for a write past RLIMIT_FSIZE: the grant's doing, not a crash.
    o.reason = "terminated by " + exit.describe() + ": it wrote a file past its " +
               format_bytes(*o.grant.file_size) + " file_size grant";
    o.retry = RetryAdvice::kRetryWithSmallerScope;
    o.advice =
        "write smaller files (split the output, stream it elsewhere) or declare an intent "
        "with a larger file_size grant";
  } else {
    o.reason = "terminated by " + exit.describe();
    o.retry = RetryAdvice::kNoRetry;
    o.advice = "the command was killed by a signal it did not get from sandgate; read its output";
  }
}

Json to_json(const CallOutcome& o, bool with_output) {
  Json actions = Json::array();
  for (const auto& a : o.observed.actions)
    actions.push_back({{"action", a.action}, {"at_ms", to_millis(a.at)}, {"reason", a.reason}});
  Json j = {
      {"call_id", o.call_id},
      {"argv", o.argv},
      {"intent",
       {{"name", o.intent.intent}, {"inferred", o.intent.inferred}, {"because", o.intent.because}}},
      {"grant", to_json(o.grant)},
      {"observed",
       {{"memory_peak_bytes", o.observed.peaks.memory_bytes},
        {"pids_peak", o.observed.peaks.pids},
        {"cpu_peak_cores", o.observed.peaks.cpu_cores},
        {"cpu_usage_ms", o.observed.cpu_usage_us / 1000.0},
        {"cpu_throttled_ms", o.observed.cpu_throttled_us / 1000.0},
        {"oom_kills", o.observed.oom_kills},
        {"run_oom_kills", o.observed.run_oom_kills},
        {"pids_refused", o.observed.pids_refused},
        {"throttled_ms", to_millis(o.observed.throttled_for)},
        {"frozen_ms", to_millis(o.observed.frozen_for)},
        {"samples", o.observed.samples}}},
      {"actions", actions},
      {"exit",
       {{"code", o.exec.status.exited ? Json(o.exec.status.code) : Json(nullptr)},
        {"signal", o.exec.status.exited ? Json(nullptr) : Json(o.exec.status.signal)}}},
      {"wall_ms", to_millis(o.exec.wall)},
      {"termination", to_string(o.termination)},
      {"reason", o.reason},
      {"retry", to_string(o.retry)},
      {"advice", o.advice},
  };
  if (const auto& l = o.memory_lowered)
    j["memory_lowered"] = {{"limit_bytes", l->limit.value}, {"within", l->within}};
  if (o.observed.traced) j["observed"].update(to_json(*o.observed.traced));
  if (!o.observed.egress.empty() || o.observed.egress_not_kept) {
    Json egress = Json::array();
    for (const auto& v : o.observed.egress) egress.push_back(to_json(v));
    j["observed"]["egress"] = std::move(egress);
    if (o.observed.egress_not_kept) j["observed"]["egress_not_kept"] = o.observed.egress_not_kept;
  }
  if (o.observed.net) {
    const auto& n = *o.observed.net;
    j["observed"]["net"] = {{"bytes_out", n.bytes_out},
                            {"bytes_in", n.bytes_in},
                            {"packets_out", n.packets_out},
                            {"packets_in", n.packets_in}};
    // Over the policy's net_window; absent when the call ended before half a window.
    if (const auto& peak = o.observed.peaks.net_bytes_per_s)
      j["observed"]["net"]["peak_bytes_per_s"] = std::llround(*peak);
  }
  if (const auto& f = o.exec.start_failure)
    j["start_failure"] = {
        {"step", f->step}, {"errno", errno_name(f->err)}, {"message", f->describe()}};
  if (with_output) {
    set_text_field(j, "stdout", o.exec.stdout_data);
    set_text_field(j, "stderr", o.exec.stderr_data);
    j["stdout_bytes"] = o.exec.stdout_bytes;
    j["stderr_bytes"] = o.exec.stderr_bytes;
    j["stdout_truncated"] = o.exec.stdout_truncated;
    j["stderr_truncated"] = o.exec.stderr_truncated;
  }
  return j;
}

}  // namespace sandgate::controller
