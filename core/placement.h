// Where a process must be before it execs: the seam between the providers, which start
// processes, and the controller, which owns cgroups. The controller hands out Placements; a
// provider guarantees that a call's first process is in every one of these cgroup directories
// before it execs (pipe-synchronised start, a waiting shim, the in-guest agent).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace sandgate {

// The cgroup directories (one per hierarchy on v1/hybrid, one on v2) a process is written
// into before it execs. Empty: it stays where the provider runs it.
struct Placement {
  std::vector<std::string> cgroup_dirs;
  // Not 0: the host pid of the run's parked process (Environment::park), which the controller
  // has already written into every one of cgroup_dirs off the call's path. A provider that
  // starts the call in that very process writes nothing; any other process it places as usual.
  pid_t placed_pid = 0;
  bool empty() const { return cgroup_dirs.empty(); }
};

}  // namespace sandgate
