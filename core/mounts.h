// The mount table: /proc/<pid>/mountinfo parsed (proc(5)). The cgroup layout detection, the
// jail's read-only binds, the BPF support check and the doctor all read it through this one
// parser.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "core/strings.h"

namespace sandgate {

// One line of /proc/<pid>/mountinfo, octal escapes (\040 for a space) decoded.
struct MountEntry {
  int mount_id = 0;
  int parent_id = 0;
  std::string root;  // the part of the filesystem mounted here ("/" usually)
  std::string mount_point;
  std::vector<std::string> mount_options;  // per-mount: rw, nosuid, relatime ...
  std::string fstype;                      // "cgroup", "cgroup2", "tracefs" ...
  std::string source;
  std::vector<std::string> super_options;  // per-superblock: for cgroup v1 the controllers
};

// Parses the whole text of a mountinfo file. A malformed line is an error naming its number.
Result<std::vector<MountEntry>> parse_mount_table(std::string_view text);
// parse_mount_table of a file (normally <proc>/self/mountinfo).
Result<std::vector<MountEntry>> read_mount_table(const std::string& mountinfo_path);

// The mount points at `path` or below it, in table order (a mount is listed after the one it
// sits on, so parents come first). `path` has no trailing slash.
std::vector<std::string> mount_points_under(const std::vector<MountEntry>& mounts,
                                            const std::string& path);

// Where this process sees the cgroup2 hierarchy (the first cgroup2 mount of
// /proc/self/mountinfo: /sys/fs/cgroup on a pure v2 host, /sys/fs/cgroup/unified on a hybrid
// one), or "" when there is none. For tools and tests that need a cgroup2 directory without the
// controller's layout detection (ebpf/ sits beside the controller, not above it).
std::string cgroup2_mount_point();

}  // namespace sandgate
