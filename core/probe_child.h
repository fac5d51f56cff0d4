// Runs a tiny feature probe (unshare a user namespace, load a seccomp filter, run a KVM guest)
// in a forked child with a deadline, so a probe that hangs or crashes cannot take its caller
// along. The child is killed at the deadline and reaped; only that pid is ever signalled.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <optional>

#include "core/process.h"
#include "core/result.h"
#include "core/units.h"

namespace sandgate {

struct ProbeOutcome {
  pid_t pid = -1;                    // the child that ran the probe (for tests: it is reaped)
  std::optional<ExitStatus> status;  // how it ended; nullopt when it had to be killed
  bool timed_out = false;            // still running at the deadline: killed
  bool unreaped = false;             // killed but not gone after a grace period (stuck in the
                                     // kernel); released, so the caller does not hang too
  Duration elapsed{0};
};

// Forks; the child runs `probe()` and _exits with its int result. Precondition: `probe` makes
// only async-signal-safe calls (the caller may have threads) and does not return through the
// caller's stack: it must not throw.
template <typename F>
Result<ProbeOutcome> run_probe_child(F probe, Duration deadline,
                                     Duration kill_grace = std::chrono::seconds(2)) {
  auto start = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid < 0) return sys_error("fork", "feature probe");
  if (pid == 0) ::_exit(probe());
  ProbeOutcome out;
  out.pid = pid;
  auto pidfd = pidfd_open(pid);
  ChildProcess child(pid, pidfd.ok() ? std::move(pidfd).value() : UniqueFd());
  SG_ASSIGN_OR_RETURN(out.status, child.wait_for(deadline));
  if (!out.status) {
    out.timed_out = true;
    SG_TRY(child.signal(SIGKILL));
    SG_ASSIGN_OR_RETURN(auto after_kill, child.wait_for(kill_grace));
    if (!after_kill) {
      out.unreaped = true;
      child.release();
    }
  }
  out.elapsed = std::chrono::steady_clock::now() - start;
  return out;
}

}  // namespace sandgate
