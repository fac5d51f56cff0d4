// Small helpers the boundary files share: building reports from errno, reading a bounded
// prefix of a file, scanning /proc, forked children with a deadline, and connections with a
// timeout. Raw syscalls and libc only: sandgate-probe is static and runs in any root.
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"
#include "probes/catalogue.h"
#include "probes/probe_report.h"

namespace sandgate::probes::util {

// How one errno reads as a probe result: EPERM/EACCES/EROFS/ENOSYS and network refusals are
// "denied", ENOENT/ESRCH/ENXIO/ENODEV/ENOTDIR/EAFNOSUPPORT "not_found", anything else "error".
ProbeResult result_for_errno(int err);

ProbeReport make(std::string attempt);
// The action worked.
ProbeReport reached(std::string attempt, Json evidence = Json::object());
// The boundary held without an errno (a state probe: no capabilities, a filter in place).
ProbeReport held(std::string attempt, Json evidence, std::string detail);
// The action failed with err; the result follows result_for_errno.
ProbeReport failed(std::string attempt, int err, Json evidence = Json::object(),
                   std::string detail = "");
// A parameter the probe needs is absent or malformed: preconditions=false, result error.
ProbeReport missing_param(std::string attempt, const std::string& name);
ProbeReport precondition_failed(std::string attempt, std::string detail,
                                Json evidence = Json::object());

// Several attempts at one thing (each errno, 0 for success): reached if any worked, else denied
// if any was refused, else not_found if every target was absent, else error.
ProbeReport combine(std::string attempt, const std::vector<int>& errs, Json evidence);
// A JSON value for one attempt: "ok" or the errno name.
std::string outcome(int err);

// Bytes as a JSON-safe string: printable ASCII kept, everything else \xNN; at most max bytes.
std::string printable(std::string_view data, size_t max = 64);

struct FileRead {
  int err = 0;       // 0: opened and read
  std::string data;  // at most max bytes
  size_t bytes = 0;  // bytes read (bounded by max)
};
FileRead read_prefix(const std::string& path, size_t max = 4096);
// Opens with flags and closes at once without reading or writing: the open is the evidence.
// Returns 0 or the errno.
int try_open(const std::string& path, int flags);

// What access(2) says of writing `path` (or, where it does not exist, of creating in its
// directory): "ok" or the errno name. It checks the mount and the file modes, and no Landlock
// right, so "ok" beside an EACCES from the write itself names Landlock (judge.h, rule 4).
std::string write_access(const std::string& path);

// The marker parameter when it is well formed (see catalogue.h).
std::optional<std::string> marker(const Params& p);

// Reads another run's secret at `dir`/kProbeSecretName: reached (with marker_found) if it could.
ProbeReport read_other_secret(const Params& p, const std::string& attempt_what);
// The workspace parameter, or the current directory.
std::string workspace(const Params& p);
// A name tag for what a probe makes: the marker, or "p<pid>" when there is none.
std::string tag(const Params& p);

// The file descriptors the process had when main() began (0, 1, 2 excluded): what was leaked
// into it. Recorded once by note_inherited_fds() before anything else opens a file.
void note_inherited_fds();
const std::vector<int>& inherited_fds();

// Numeric entries of /proc.
std::vector<pid_t> proc_pids();
// /proc/<pid>/<name> with NULs turned into spaces for cmdline and environ; "" when unreadable.
std::string proc_file(pid_t pid, const char* name, size_t max = 65536);
// The inode of /proc/self/ns/<ns>; 0 when unreadable.
unsigned long long ns_inode(const char* ns);

long long now_ms();  // CLOCK_MONOTONIC
void sleep_ms(long long ms);

// A child that ran to completion (or was killed at the deadline).
struct ChildResult {
  bool started = false;
  int fork_errno = 0;
  bool exited = false;
  int code = 0;    // exit code when exited
  int signal = 0;  // terminating signal when not exited
  bool timed_out = false;
  std::string output;  // what the child wrote to its out fd (bounded)
};
// Forks; the child (with PR_SET_PDEATHSIG SIGKILL) runs fn(out_fd) and _exits with its int
// return value. The parent collects out_fd's bytes until EOF, kills the child at the deadline,
// and always reaps it. fn must not return through the caller's stack: it may not throw.
template <typename F>
ChildResult run_child(F fn, int timeout_ms);
ChildResult run_child_impl(int (*trampoline)(void*, int), void* fn, int timeout_ms);

template <typename F>
ChildResult run_child(F fn, int timeout_ms) {
  auto trampoline = [](void* f, int fd) -> int { return (*static_cast<F*>(f))(fd); };
  return run_child_impl(trampoline, &fn, timeout_ms);
}

// Connects a TCP socket (family AF_INET or AF_INET6) with a timeout. Returns the fd (>= 0) or
// -errno. Only ever called with the lab's decoy addresses or loopback.
int connect_tcp(int family, const std::string& address, uint16_t port, int timeout_ms);
// Connects a unix stream socket to a path, or to an abstract name when abstract is true.
int connect_unix(const std::string& name, bool abstract, int timeout_ms);
// Waits up to timeout_ms for data and reads at most max bytes; "" on timeout or error.
std::string recv_some(int fd, int timeout_ms, size_t max = 4096);
// Sends all of data; 0 or the errno.
int send_all(int fd, std::string_view data);
// The first line of text (without CR/LF).
std::string first_line(const std::string& text);

}  // namespace sandgate::probes::util
