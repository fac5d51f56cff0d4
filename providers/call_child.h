// A call's process from its start to its exec, in raw system calls on memory prepared for it.
//
// The supervisor starts a call's process with clone(CLONE_VM): a fork copied the supervisor's
// page tables and made every page it wrote before its exec a copy-on-write fault, about 1 ms a
// call on a VM (measured: fork + exit 0.8-1.7 ms against 0.03-0.1 ms sharing the memory). The
// child then runs beside the supervisor on the same memory, so it may use nothing shared: no
// allocation, no lock, no glibc wrapper (they write errno, and errno is the supervisor's: the
// child has no thread-local storage of its own). Everything it needs is in a CallLaunch the
// supervisor fills before the clone and keeps, unchanged, until the process is reaped. A
// process parked for a later call (a fork, with memory of its own) runs the same code.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "providers/seccomp_policy.h"

namespace sandgate::providers {

// proc(5): -1000..1000. The OOM killer's badness is a task's resident pages plus
// oom_score_adj/1000 of the memory it may use (the limit that ran out, for a cgroup OOM). At
// 1000 a call's score is at least the whole limit, more than any supervisor can hold under
// it, so the kernel takes a call before the process that holds the run together whatever
// their sizes; 500 was not enough: a 100 MB (sanitizer) supervisor lost to a 42 MB call under
// a 96 MiB run limit.
inline constexpr char kCallOomScoreAdj[] = "1000";

// What every call gives up before it execs, in this order: the sandbox user and its
// capabilities, no_new_privs, the run's Landlock ruleset, the seccomp programs (the sysinfo
// listener sent to the views server last). Prepared once by the supervisor; the programs and
// the ruleset descriptor are the supervisor's, alive as long as it is.
struct CallRestriction {
  bool drop_privileges = false;  // to uid/gid with no capability (jail and microVM guest)
  uid_t uid = 0;
  gid_t gid = 0;
  bool no_new_privs = false;  // set again in a container, whatever its runtime did
  int landlock = -1;          // ruleset to restrict to; -1: none
  struct sock_fprog programs[2] = {};
  int program_count = 0;
  struct sock_fprog sysinfo_program = {};  // with a listener, sent on sysinfo_channel
  int sysinfo_channel = -1;                // -1: no sysinfo program
};

// The seccomp part of a restriction: `program`'s allow list and argument rules, and its sysinfo
// program with the listener sent on `sysinfo_channel` (-1: none). Points into `program`.
CallRestriction restriction_for(const SeccompProgram& program, int sysinfo_channel);

// Why a restriction or a start failed: errno and the step. The error pipe carries it.
struct ChildError {
  int err;
  char step[48];
};

// One call's start: what the child does with it, in order (call_child.cc says each step).
struct CallLaunch {
  int out = -1, err = -1, in = -1;  // the call's stdout, stderr, stdin (-1: /dev/null)
  int go = -1;                      // read end: one byte when the host lets it run
  int error = -1;                   // write end of the close-on-exec error pipe
  int control = -1;                 // the supervisor's socket, for "started"
  bool oom_score_adj = true;        // a call's (not a resident process's): 1000
  struct Limit {
    int resource;
    uint64_t value;
    const char* name;  // "RLIMIT_NOFILE": a failure names it
  };
  Limit limits[2] = {};
  int limit_count = 0;
  std::string started;      // the "started" message, sent with the child's own pid
  std::string cwd;          // where it runs
  std::string path;         // PATH for the command's search (the call's own, else /bin:/usr/bin)
  bool restricted = false;  // already restricted (a parked process that prepared ahead)
  const CallRestriction* restriction = nullptr;
  // The command: argv and envp as exec wants them, pointing into the strings below. sh_argv is
  // argv with /bin/sh before it, its slot 1 left for the path found (a file exec refuses with
  // ENOEXEC is a script without #!, run by the shell as execvp does).
  std::vector<std::string> argv_strings, env_strings;
  std::vector<char*> argv, envp, sh_argv;

  void set_command(std::vector<std::string> argv_in, std::vector<std::string> env_in);
};

// Runs the launch: never returns (exec, or {errno, step} on the error pipe and exit 127; a
// missing go or a failed "started" exits 127 without a word, as the supervisor then knows).
// Raw system calls only; callable in a CLONE_VM child or in a forked one.
[[noreturn]] void run_call_child(CallLaunch& launch);

// The restriction alone, for a parked process preparing ahead. True on success; else `error`
// says why.
bool restrict_call(const CallRestriction& r, ChildError& error);

// A clone(CLONE_VM) child's stack, mapped apart from the heap; released with the call.
class ChildStack {
 public:
  static constexpr size_t kSize = 128 * 1024;
  ChildStack();
  ~ChildStack();
  ChildStack(ChildStack&& o) noexcept;
  ChildStack& operator=(ChildStack&& o) noexcept;
  ChildStack(const ChildStack&) = delete;
  ChildStack& operator=(const ChildStack&) = delete;
  bool valid() const { return base_ != nullptr; }
  char* top() const { return base_ + kSize; }

 private:
  char* base_ = nullptr;
};

// Starts `launch` in a process that shares this one's memory until it execs. The launch and
// the stack must stay as they are until the process is reaped. The pid, or -errno.
pid_t clone_call_child(CallLaunch& launch, ChildStack& stack);

}  // namespace sandgate::providers
