// A call's process from its start to its exec, in raw system calls on memory prepared for it.
//
// A call that needs nothing of the host before its exec (no placement: Call::on_started unset,
// no cgroups) starts with clone(CLONE_VM | CLONE_VFORK): a fork copied the supervisor's page
// tables and made every page written before the exec a copy-on-write fault, about 1 ms a call on
// a VM (measured: fork + exit 0.8-1.7 ms against 0.03-0.1 ms sharing the memory). CLONE_VFORK,
// not CLONE_VM alone: the supervisor waits, suspended, until the child has exec'd or exited, and
// the kernel gives a vfork child an oom_score_adj of its own and never takes it as an OOM victim
// (a CLONE_VM child without it shares one value with the supervisor: the call's 1000 would be
// the supervisor's, and a victim's memory sharers die with it, the run). So the child must wait
// for nothing that needs the supervisor (no go from the host) and may use nothing the supervisor
// would keep: no allocation (it would stay in the supervisor's heap), no glibc wrapper that
// keeps state. Everything it needs is in a CallLaunch the supervisor fills before the clone and
// frees when the clone returns. A call the host places first is a fork (its process waits for
// the host's go), and so is a process parked for a later call; both run the same code.
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

// Why a restriction or a start failed: errno and the step, and whether the process had said
// "started" (a failure after it is the command's, a shell's 127; before it, the supervisor's).
// The error pipe carries it.
struct ChildError {
  int err;
  char step[48];
  bool started;
};

// One call's start: what the child does with it, in order (call_child.cc says each step).
struct CallLaunch {
  int out = -1, err = -1, in = -1;  // the call's stdout, stderr, stdin (-1: /dev/null)
  int go = -1;                // read end: one byte when the host lets it run; -1: it runs at once
  int error = -1;             // write end of the close-on-exec error pipe
  int control = -1;           // the supervisor's socket, for "started"
  bool oom_score_adj = true;  // a call's (not a resident process's): 1000
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
// Raw system calls only; callable in a vfork child or in a forked one.
[[noreturn]] void run_call_child(CallLaunch& launch);

// The restriction alone, for a parked process preparing ahead. True on success; else `error`
// says why.
bool restrict_call(const CallRestriction& r, ChildError& error);

// A vfork child's stack, mapped apart from the heap. The supervisor keeps one and lends it to
// every such call: the child is done with it when clone_call_child returns.
class ChildStack {
 public:
  static constexpr size_t kSize = 128 * 1024;
  ChildStack();
  ~ChildStack();
  ChildStack(const ChildStack&) = delete;
  ChildStack& operator=(const ChildStack&) = delete;
  bool valid() const { return base_ != nullptr; }
  char* top() const { return base_ + kSize; }

 private:
  char* base_ = nullptr;
};

// Runs `launch` (whose go must be -1) in a process that shares this one's memory until it
// execs, and returns once it has exec'd or exited: the launch and the stack are free again.
// The pid, or -errno. Only from a single-threaded process (the supervisor).
pid_t clone_call_child(CallLaunch& launch, ChildStack& stack);

}  // namespace sandgate::providers
