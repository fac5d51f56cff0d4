// One running external-provider program and the line channel to it: its stdin and stdout are
// one end of a socketpair (so a write to a program that died is EPIPE, not SIGPIPE), its
// stderr a pipe whose last lines are kept as the program's log. Every wait has a deadline;
// on a deadline, an over-long line or a protocol error the program is killed (its process
// group too) and the error names the request, the fault and the log.
//
// Used by ExternalProvider, and directly by `sandgate provider conformance`, which needs to
// send what a well-behaved sandgate never would.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>

#include "core/fd.h"
#include "core/json.h"
#include "core/placement.h"
#include "core/process.h"
#include "core/result.h"
#include "core/state.h"
#include "providers/external_protocol.h"

namespace sandgate::providers {

struct ExternalCommand;

class ExternalProgram {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts the program. With a placement it is parked before it execs until it sits in those
  // cgroups; with `state` its process is recorded there before it is released (gc kills it
  // after a crash of sandgate).
  static Result<ExternalProgram> start(const ExternalCommand& command,
                                       const Placement& placement = {}, RunState* state = nullptr);
  ExternalProgram(ExternalProgram&&) noexcept = default;
  ExternalProgram& operator=(ExternalProgram&&) noexcept = default;
  ~ExternalProgram() { kill(); }

  // One line to the program.
  Status send(const Json& message, const std::string& what);
  // Raw text (a '\n' is added): the conformance suite's bad input.
  Status send_line(const std::string& text, const std::string& what);
  // The next line for request `id` (a reply or an event; id < 0: a reply to a line that had
  // no id, whose "id" must be null), or an error: no line by `deadline`,
  // a line longer than `max_line`, not JSON, another id, the program exited. `cancel_fd`
  // (>= 0): when it becomes readable, `on_cancel` runs once (it sends a cancel message).
  Result<external::Line> receive(long long id, const std::string& what, Clock::time_point deadline,
                                 size_t max_line = external::kMaxReplyLine, int cancel_fd = -1,
                                 const std::function<void()>& on_cancel = {});
  // send + receive a reply (not an event).
  Result<Json> request(const Json& message, const std::string& what,
                       std::chrono::milliseconds timeout);

  // Closes its stdin (end of conversation) and waits for it to exit; kills it at `timeout`.
  // The exit status, or an error saying it had to be killed.
  Result<ExitStatus> finish(Duration timeout);
  // SIGKILL to the program and its process group, and reap. Idempotent.
  void kill();

  pid_t pid() const { return process_.pid(); }
  bool running() const { return process_.running(); }
  const std::string& name() const { return name_; }
  // The program's stderr, last kLogTail bytes, valid UTF-8.
  std::string log_tail();
  static constexpr size_t kLogTail = 4096;

  // An error from talking to the program, with its log attached.
  Error failed(Error e);

 private:
  ExternalProgram() = default;
  void drain_log(bool until_eof = false);
  // Why the program stopped answering: its exit status if it has one by now.
  std::string exit_description();

  std::string name_;
  ChildProcess process_;
  UniqueFd channel_;
  UniqueFd log_;
  std::string buffer_;
  std::string log_buffer_;
  bool log_truncated_ = false;
  std::optional<ExitStatus> exited_;
};

// Whether `pid` is `ancestor` or descends from it (through /proc/<pid>/stat ppid, at most 64
// levels): the pid a provider reports for a call must be its own process before sandgate
// writes it into a cgroup, or a provider could have sandgate move (and later kill) anything.
bool descends_from(const std::string& proc, pid_t pid, pid_t ancestor);

// Whether /proc/<pid>/cgroup places `pid` in the cgroup directory `dir` (a line whose path is
// a suffix of `dir` and not "/"), read from `proc` as the host sees it.
Result<bool> in_cgroup(const std::string& proc, pid_t pid, const std::string& dir);

}  // namespace sandgate::providers
