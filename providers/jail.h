// The namespace jail's setup, as a list of named steps (nsjail containProc): each runs inside
// the new namespaces as uid 0 of the new user namespace, and a failure names its step, path
// and errno.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "core/fd.h"
#include "core/result.h"
#include "providers/supervisor.h"

namespace sandgate::providers {

// Assembles the root filesystem and pivots into it, sets the host name, brings up loopback.
// Runs in the supervisor (pid 1 of the run's namespaces) once, before any call.
Status assemble_jail(const JailConfig& config);

// In a call's child, just before exec: drops every capability (bounding, ambient, inheritable,
// permitted, effective), switches to uid/gid, sets no_new_privs. Async-signal-safety is not
// needed: the supervisor is single-threaded, so its forked child may allocate.
Status drop_privileges(uid_t uid, gid_t gid);

// The paths beneath which a call may open files for writing: the workspace, /tmp, /var/tmp,
// /dev (its null, zero, tty and shm), home, and the read-write binds of a weakening. Everything
// else a call can reach is already read-only by its mount, except procfs: this list is what
// keeps a call from writing /proc/self/oom_score_adj (lowering the OOM priority it was given),
// /proc/self/attr/* and the like.
std::vector<std::string> call_writable_paths(const JailConfig& config);

// A Landlock ruleset (Linux 5.13, ABI 1) that handles one right, opening a file for writing,
// and grants it beneath `writable` (paths as the jail sees them, after the pivot). Built once
// per run in the supervisor; `abi` receives the kernel's Landlock ABI. ENOSYS / EOPNOTSUPP:
// this kernel has no Landlock (the caller decides what that means).
Result<UniqueFd> build_call_ruleset(const std::vector<std::string>& writable, int* abi);

// In a call's child, after no_new_privs (or with CAP_SYS_ADMIN in the jail's user namespace)
// and before the seccomp filter: the call and everything it forks are held to the ruleset.
Status restrict_call_to_ruleset(int ruleset_fd);

}  // namespace sandgate::providers
