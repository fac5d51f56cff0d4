// The wire between a provider's host side and its supervisor process: one JSON object per
// SOCK_SEQPACKET message, with file descriptors (SCM_RIGHTS) and a process id
// (SCM_CREDENTIALS) attached where a message needs them.
//
// SCM_CREDENTIALS is how the host learns a call's pid: the call's parked child sends `started`
// itself on the inherited control socket with its own pid, as its pid namespace sees it, and
// the kernel translates it into the receiver's namespace (unix(7)). No /proc scanning, no race
// with pid reuse, and no privilege: sending another process's pid would need CAP_SYS_ADMIN,
// which a supervisor inside a container (an unprivileged user) lacks.
//
//   host -> supervisor            supervisor -> host
//   config {SupervisorConfig,     ready | error {step, path, errno, detail}
//           fds: [names]}
//         + [seccomp_program(, sysinfo_channel)]
//   exec {id, argv, env, cwd,     started {id} + SCM_CREDENTIALS(its own pid), sent by
//         wait_for_go, rlimits,     the call once its rlimits are in place
//         stdin?, [parked,
//         go_if_parked, park_next]}
//         + [out,err(,in)]
//   go {id}                       exec_failed {id, step, errno}
//   kill {id, signal}             exited {id, wait_status}
//   shutdown
//
// `parked` names the process parked ahead (park / park_next) that the call starts in; the host
// has placed it in the call's cgroups already. With `go_if_parked` the supervisor releases the
// call there without waiting for `go` (the host still checks the `started` that follows).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "core/fd.h"
#include "core/json.h"
#include "core/result.h"

namespace sandgate::providers {

// The largest message: argv and environment of one call must fit.
inline constexpr size_t kMaxMessage = 256 << 10;

struct Message {
  Json body;
  std::vector<UniqueFd> fds;
  pid_t sender_pid = 0;  // from SCM_CREDENTIALS, translated to our pid namespace; 0 if none
};

// Sends body with optional fds, and with `cred_pid` as SCM_CREDENTIALS when non-zero.
Status send_message(int sock, const Json& body, const std::vector<int>& fds = {},
                    pid_t cred_pid = 0);
// Receives one message. An orderly shutdown of the peer is an Error with err == EPIPE.
Result<Message> recv_message(int sock);

// A socketpair with SO_PASSCRED on both ends.
Result<std::pair<UniqueFd, UniqueFd>> make_control_pair();

// An Error as a message body and back, so setup failures inside the sandbox keep their step,
// path and errno on the host.
Json error_to_json(const Error& e);
// Never throws: a field that is absent or of another type is left empty (the message comes from
// the sandbox's side of the socket, and may be anything).
Error error_from_json(const Json& j);

// A message from the supervisor to the host, read strictly. The supervisor runs inside the
// sandbox (and its parked call child sends `started` itself), so the body may be anything: a
// field of the wrong type is an Error naming it, never an exception out of nlohmann's value().
struct SupervisorEvent {
  std::string op;                // ready, error, started, exec_failed, exited, parked,
                                 // park_failed; others are ignored
  uint64_t id = 0;               // the call a started/exec_failed/exited is about; 0 if absent
  int wait_status = 0;           // exited
  bool in_child = false;         // exec_failed: the call's own failure to start
  bool in_parked = false;        // started: in the process parked ahead (Supervisor::park)
  std::string landlock_missing;  // ready: why the jail has no Landlock ("" when it has)
  int landlock_abi = 0;          // ready: the Landlock ABI the calls' ruleset was built for
  Error error;                   // error, exec_failed, park_failed
};
Result<SupervisorEvent> read_supervisor_event(const Json& body);

}  // namespace sandgate::providers
