// Which cgroup hierarchies this host mounts and where: pure v1, hybrid (v1 controllers plus an
// unified cgroup2 mount) or pure v2. Read from /proc/self/mountinfo (proc(5)), never guessed
// from well-known paths, so a controller mounted somewhere unusual is still found.
//
// The per-call controller picks its backend from this; `sandgate doctor` prints it.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/mounts.h"
#include "core/result.h"

namespace sandgate::controller {

enum class CgroupLayoutKind {
  kNone,    // no cgroup filesystem mounted
  kV1,      // only v1 hierarchies
  kHybrid,  // v1 controller hierarchies and a cgroup2 mount (often empty, at .../unified)
  kV2,      // only cgroup2 (v1 named hierarchies without controllers may sit beside it)
};
std::string to_string(CgroupLayoutKind kind);  // "none", "v1", "hybrid", "v2"

struct CgroupLayout {
  CgroupLayoutKind kind = CgroupLayoutKind::kNone;
  // The cgroup2 mount; empty when there is none. On hybrid hosts it is where per-cgroup PSI,
  // cgroup.freeze and cgroup.kill live and where BPF programs attach.
  std::string unified_mount;
  // v1 hierarchy name -> mount point: one entry per controller ("cpu" and "cpuacct" both map to
  // a comounted "/sys/fs/cgroup/cpu,cpuacct"), and "name=systemd" for named hierarchies.
  std::map<std::string, std::string> v1_mounts;
  // Controllers the cgroup2 root offers (<unified_mount>/cgroup.controllers); empty on a
  // hybrid host where every controller is bound to v1.
  std::vector<std::string> v2_controllers;

  // The v1 mount of `controller`, or "" when it is not mounted as v1.
  std::string v1_mount(const std::string& controller) const;
  bool has_v2_controller(const std::string& controller) const;
  // v1 controllers (named hierarchies excluded), sorted.
  std::vector<std::string> v1_controllers() const;
};

// Classifies the cgroup mounts of a parsed mount table. v2_controllers stays empty: it needs
// a read of the live mount. When a hierarchy is mounted twice, the first mount wins.
CgroupLayout classify_cgroup_mounts(const std::vector<MountEntry>& mounts);

// parse_mount_table + classify_cgroup_mounts on the text of a mountinfo file; pure.
Result<CgroupLayout> parse_mountinfo(std::string_view text);

// Reads the mountinfo file (normally <proc>/self/mountinfo), classifies it and reads the v2
// controllers from the cgroup2 mount it names.
Result<CgroupLayout> detect_cgroup_layout(const std::string& mountinfo_path);

// "hybrid: v1 blkio cpu ... ; cgroup2 at /sys/fs/cgroup/unified (controllers: hugetlb)".
std::string describe(const CgroupLayout& layout);

}  // namespace sandgate::controller
