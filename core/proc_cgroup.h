// A process's cgroup table: /proc/<pid>/cgroup (cgroups(7)), one "ID:CONTROLLERS:PATH" line per
// hierarchy it is in: "4:memory:/sandgate/r1" on v1, "5:cpu,cpuacct:/..." where controllers
// share a hierarchy, "1:name=systemd:/..." for a named one, and "0::/..." for the unified (v2)
// hierarchy. The controller's attach prime, the podman provider's read-back and the /proc views
// server read it through this one parser.
#pragma once

#include <string>
#include <string_view>

namespace sandgate {

// The process's path in one hierarchy of `table` (the text of /proc/<pid>/cgroup): the first
// line whose controllers list `controller` ("cpu" finds "cpu,cpuacct"; "name=systemd" a named
// hierarchy), or, when `controller` is empty, the unified hierarchy's line (no controllers:
// "0::"). The path is everything after the second ':' (a cgroup's name may hold one), relative
// to where that hierarchy is mounted ("/" at its root). "" when no line is that hierarchy's.
std::string cgroup_path_in(std::string_view table, std::string_view controller);

}  // namespace sandgate
