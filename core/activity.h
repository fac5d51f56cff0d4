// What a call's processes were seen doing by the kernel (the eBPF activity tracer, ebpf/), as
// plain data: the call's outcome carries it (`observed.execs`, `observed.connects`,
// `observed.sensitive_opens`), traces record it and the judge reads it as a witness. Shared
// vocabulary, so that the controller's outcome can hold it without knowing about eBPF.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"

namespace sandgate {

struct TracedExec {
  pid_t pid = 0, ppid = 0;
  std::string path;               // the filename exec was given, as the process saw it
  std::vector<std::string> argv;  // as far as the tracer copied it (args_cut: more followed)
  bool args_cut = false;
  bool operator==(const TracedExec&) const = default;
};

// A connect(2), or a sendto/sendmsg with a destination address (UDP, DNS).
struct TracedConnect {
  pid_t pid = 0;
  std::string syscall;   // "connect", "sendto"
  std::string family;    // "inet", "inet6", "unix", or "af<N>"
  std::string address;   // "203.0.113.20", "fd00:ec2::254", a unix path ("@name": abstract)
  uint16_t port = 0;
  std::string protocol;  // "tcp", "udp", "unix-stream", "unix-dgram", "raw", ""
  int err = 0;           // 0: the kernel let it through; else the errno it returned
  // "allowed" (0, or EINPROGRESS: a non-blocking connect on its way), "denied" (EPERM,
  // EACCES: a policy layer refused it) or "failed" (anything else: ECONNREFUSED, ENETUNREACH).
  std::string verdict() const;
  bool operator==(const TracedConnect&) const = default;
};

// An open of a path under the sensitive prefixes (credentials, /proc/*/environ, container
// runtime sockets...).
struct TracedOpen {
  pid_t pid = 0;
  std::string path;  // as the process passed it
  int flags = 0;     // O_*
  int err = 0;       // 0: opened; else the errno
  bool operator==(const TracedOpen&) const = default;
};

struct TracedActivity {
  std::vector<TracedExec> execs;
  std::vector<TracedConnect> connects;
  std::vector<TracedOpen> sensitive_opens;
  uint64_t forks = 0, exits = 0;
  // Run-queue delay: the time the call's tasks spent runnable but waiting for a CPU (from
  // wake-up or preemption to running), summed, the number of such waits and the longest.
  uint64_t runq_delay_ns = 0, runq_waits = 0, runq_delay_max_ns = 0;
  // Entries beyond the caps below are counted, not kept: a fork storm must not fill memory.
  uint64_t execs_not_kept = 0, connects_not_kept = 0, opens_not_kept = 0;
  // Events the kernel's ring buffer had no room for while the call ran (any call's: the
  // buffer is shared by the runs it watches). Non-zero: the lists above may be incomplete.
  uint64_t lost = 0;
  bool operator==(const TracedActivity&) const = default;
};

inline constexpr size_t kTracedKeep = 256;  // per list

// {"execs": [...], "connects": [...], "sensitive_opens": [...], "forks", "exits", "lost", ...}
// Paths and argv are text a sandbox chose: made valid UTF-8 on the way (dump_json).
Json to_json(const TracedActivity& a);

// One line per exec, connect and sensitive open, then a count line ("2 processes, 1 exec...").
// The text is the sandbox's: a terminal needs terminal_safe() on it.
std::vector<std::string> describe(const TracedActivity& a);

}  // namespace sandgate
