// Processes sandgate starts on the host: one owner each.
//
// ChildProcess holds a pid and its pidfd (so a signal can never reach a recycled pid) and
// kills and reaps in its destructor (crun cleanup_pid). run_command() is the one helper for
// running a host tool (podman, ip, qemu) with captured output and a deadline.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/fd.h"
#include "core/result.h"
#include "core/units.h"

namespace sandgate {

struct ExitStatus {
  bool exited = false;  // true: code is valid; false: killed by signal
  int code = 0;
  int signal = 0;

  static ExitStatus from_wait_status(int status);
  // "exit 0", "signal 9 (SIGKILL)".
  std::string describe() const;
  // Shell convention: code, or 128 + signal.
  int shell_code() const { return exited ? code : 128 + signal; }
};

class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(pid_t pid, UniqueFd pidfd) : pid_(pid), pidfd_(std::move(pidfd)) {}
  ~ChildProcess() { kill_and_reap(); }
  ChildProcess(ChildProcess&& o) noexcept;
  ChildProcess& operator=(ChildProcess&& o) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_.get(); }
  bool running() const { return pid_ > 0; }

  // Signals through the pidfd; ESRCH after the process exited is not an error.
  Status signal(int sig) const;
  // Blocks until the child exits and reaps it.
  Result<ExitStatus> wait();
  // Waits at most `timeout`; nullopt if still running.
  Result<std::optional<ExitStatus>> wait_for(Duration timeout);
  // SIGKILL and reap; safe to call twice.
  void kill_and_reap();
  // Gives up ownership without killing (the pid is returned).
  pid_t release();

 private:
  pid_t pid_ = -1;
  UniqueFd pidfd_;
};

// NAME=VALUE lists: entries of `overrides` replace same-named entries of `base` (getenv returns
// the first match, so a duplicate would silently lose).
std::vector<std::string> merge_env(std::vector<std::string> base,
                                   const std::vector<std::string>& overrides);

struct SpawnOptions {
  int out_fd = -1;                     // stdout and stderr go here; -1: inherited
  std::vector<std::string> env_set;    // NAME=VALUE, replacing the inherited value of NAME
  // The whole environment instead of sandgate's (env_set then adds to it).
  std::optional<std::vector<std::string>> env;
  bool new_process_group = false;      // its own group, so a signal can reach all it starts
  bool new_session = false;            // its own session: a terminal's ^C is not for it
  // Becomes its fd 3, and no other descriptor above 2 reaches it (not even one a library
  // opened without close-on-exec); -1: none.
  int pass_fd = -1;
};
// Starts argv[0] (PATH is searched) with stdin from /dev/null and sandgate's environment, with
// posix_spawn: no copy of sandgate's page tables (see process.cc).
Result<ChildProcess> spawn(const std::vector<std::string>& argv, const SpawnOptions& options = {});

struct CommandResult {
  ExitStatus status;
  std::string output;  // stdout and stderr together, bounded
  bool timed_out = false;
};
// Runs a host command to completion (killed at `timeout`), capturing stdout+stderr.
Result<CommandResult> run_command(const std::vector<std::string>& argv,
                                  Duration timeout = std::chrono::seconds(30),
                                  size_t max_output = 1 << 20);

// A process's resource limit as the kernel holds it (prlimit(2), read only): {soft, hard},
// RLIM_INFINITY for unlimited. prlimit needs the same uid as the target or CAP_SYS_RESOURCE in
// its user namespace (the namespace's owner has that in it); where it is refused (a run's
// namespace is owned by the run's own host id, and a host's root may lack CAP_SYS_RESOURCE),
// the same numbers are read from <proc>/<pid>/limits, which anyone may read.
Result<std::pair<uint64_t, uint64_t>> read_rlimit(pid_t pid, int resource);

// Opens a pidfd for a pid we started (pidfd_open(2)).
Result<UniqueFd> pidfd_open(pid_t pid);

// The 22nd field of /proc/<pid>/stat: with the pid, it names a process uniquely over time, so
// `gc` never signals a pid that has been recycled. nullopt if the process is gone.
std::optional<unsigned long long> process_start_time(const std::string& proc_root, pid_t pid);

}  // namespace sandgate
