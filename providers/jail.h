// The namespace jail's setup, as a list of named steps (nsjail containProc): each runs inside
// the new namespaces as uid 0 of the new user namespace, and a failure names its step, path
// and errno.
#pragma once

#include <sys/types.h>

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

}  // namespace sandgate::providers
