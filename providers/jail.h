// The namespace jail's setup, as a list of named steps (nsjail containProc): each runs inside
// the new namespaces as uid 0 of the new user namespace, and a failure names its step, path
// and errno.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "core/fd.h"
#include "core/result.h"
#include "providers/landlock.h"
#include "providers/supervisor.h"

namespace sandgate::providers {

// Assembles the root filesystem and pivots into it, sets the host name, brings up loopback.
// Runs in the supervisor (pid 1 of the run's namespaces) once, before any call.
// `alternatives`: the host's shared_alternatives_mount (base_root.h), which the host sent with
// the config; a clone of it is attached at /etc/alternatives (should that fail, and where there
// is none, -1, the links are copied). `lap`, if given, is called after each step with its name
// (the supervisor times its set-up with it).
Status assemble_jail(const JailConfig& config, int alternatives = -1,
                     const std::function<void(const char* step)>& lap = {});

// The paths beneath which a call may write (create, remove, rename, truncate, open for writing):
// the workspace, /tmp, /var/tmp, /dev/shm, home, and the read-write binds of a weakening.
// Everything else a call can reach is already read-only by its mount, except procfs and the
// device nodes: Landlock is what keeps a call from writing /proc/self/oom_score_adj (lowering
// the OOM priority it was given), /proc/self/attr/* and the like.
std::vector<std::string> call_writable_paths(const JailConfig& config);

// A call's Landlock rules (landlock.h), before landlock::best_effort: every filesystem right
// handled; the root (the read-only base, /etc, /proc, /run/secrets) readable and executable;
// the device nodes of /dev readable and writable (no creation); call_writable_paths() fully
// writable (no device nodes); where the call shares a network namespace (!new_network), TCP
// bind denied and TCP connect only to tcp_connect_ports; in its own, TCP is the namespace's.
// Paths as the jail sees them, after the pivot (or as the container sees them).
landlock::RulesetSpec call_landlock_rules(const JailConfig& config);

// The run's Landlock scope (ABI 6), applied once to the supervisor after the jail is
// assembled: the run is one Landlock domain, so its processes (every call's own, nested
// domain included) may reach abstract unix sockets and signal processes of the run only.
landlock::RulesetSpec run_landlock_scope();

}  // namespace sandgate::providers
