// What one process run to completion in a sandbox gives back, and the per-process limits it
// runs under: the vocabulary a provider returns and the controller and the orchestration layer
// read (an outcome contains the ExecResult of its call).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "core/json.h"
#include "core/process.h"
#include "core/units.h"

namespace sandgate {

// Per-process resource limits for a call (setrlimit(2)), applied to its first process before
// it execs, soft and hard alike so the call cannot raise them back (raising a hard limit needs
// CAP_SYS_RESOURCE in the initial user namespace); everything it forks inherits them. A value
// above the supervisor's own hard limit is lowered to it: a limit is never raised.
struct ProcessLimits {
  std::optional<uint64_t> open_files;  // RLIMIT_NOFILE: descriptors per process
  std::optional<uint64_t> file_size;   // RLIMIT_FSIZE: bytes per file written (EFBIG, SIGXFSZ)
  bool empty() const { return !open_files && !file_size; }
  bool operator==(const ProcessLimits&) const = default;
};

// Why a command could not be started inside the sandbox: the step of the child that failed
// before exec, and its errno. The call's status is then what a shell gives: 127 when the
// command does not exist, 126 when it cannot be executed (or an earlier step failed).
struct StartFailure {
  int err = 0;
  std::string step;              // "execve", "chdir", "drop privileges", ...
  std::string describe() const;  // "execve: No such file or directory (ENOENT)"
};

// What a run holds outside its calls, as its kernel counts it: the memory of its supervisor and
// resident processes (the agent's own memory, a hold), and the OOM kills among the residents.
struct ResidentUsage {
  uint64_t memory_bytes = 0;
  uint64_t oom_kills = 0;
};

struct ExecResult {
  ExitStatus status;
  Duration wall{0};
  std::string stdout_data, stderr_data;
  uint64_t stdout_bytes = 0, stderr_bytes = 0;  // as written by the call, kept or not
  bool stdout_truncated = false, stderr_truncated = false;
  bool timed_out = false;
  bool cancelled = false;
  std::optional<StartFailure> start_failure;  // set: the command never ran (status 126/127)
  pid_t host_pid = 0;                         // the call's first process, as the host sees it
  // Call::park_next: the host pid of the process parked for the next call (made while this
  // one ran, or parked before and still waiting); 0: none parked.
  pid_t parked_next_pid = 0;
  // A call run under a kernel of its own (Call::guest_control): what the controller's part
  // inside the guest observed of its cgroup (core/guest_call_control.h), as the guest sent it:
  // hostile data, decoded and bounded by controller/guest_control.h. Null: nothing came.
  Json guest_observation;
  // A call under a kernel of its own: what the run held outside its calls when it ended.
  std::optional<ResidentUsage> guest_resident;
};

// The status a shell gives a command that could not be started (ENOENT: 127, else 126).
ExitStatus start_failure_status(const StartFailure& f);

}  // namespace sandgate
