// What the cgroup layout can do for a call, learned by trying: a temporary child cgroup is
// made, its control files are looked at and it is removed again (always, also on errors).
// Answers the controller's questions (per-cgroup PSI, freeze, kill) and the doctor's.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "controller/cgroup_layout.h"
#include "core/check.h"
#include "core/result.h"
#include "core/state.h"

namespace sandgate::controller {

// A control file as seen in a freshly made child cgroup.
struct FileProbe {
  bool exists = false;
  bool readable = false;  // opened and read (write-only files such as cgroup.kill are not)
  int read_errno = 0;     // why the read failed, when it exists but is not readable
};
using ChildFiles = std::map<std::string, FileProbe>;

// Looks at `files` in a fresh child cgroup `name` under `parent`. The child is recorded in
// `state` (when not null) before it is made, so `sandgate gc` removes it after a crash, and is
// removed before returning, on every path. An existing directory `name` is never touched:
// that is an EEXIST error.
Result<ChildFiles> probe_child_cgroup(const std::string& parent, const std::string& name,
                                      const std::vector<std::string>& files,
                                      RunState* state = nullptr);

// "sandgate-doctor-<pid>": the child cgroup name the doctor probes with.
std::string doctor_probe_name();

// What one probe of a layout found: a child of the cgroup2 mount, and a child of the v1
// freezer hierarchy (the only v1 way to freeze).
struct CgroupFeatureProbe {
  Result<ChildFiles> unified = logic_error("probe cgroup2", "no cgroup2 mount");
  Result<ChildFiles> v1_freezer = logic_error("probe v1 freezer", "no v1 freezer hierarchy");
};

// Probes every hierarchy of `layout` that can freeze, kill or report pressure per cgroup.
CgroupFeatureProbe probe_cgroup_features(const CgroupLayout& layout, const std::string& name,
                                         RunState* state = nullptr);

// The cgroup section of the doctor: the layout, and where the controllers a call's limits
// need (memory, cpu, pids, io) are, or that they are missing.
std::vector<Check> layout_checks(const Result<CgroupLayout>& layout);

// Per-cgroup PSI: memory/cpu/io.pressure readable in a child of the cgroup2 mount.
std::vector<Check> pressure_checks(const CgroupLayout& layout, const CgroupFeatureProbe& probe);

// Freeze and kill: cgroup.freeze / cgroup.kill in a cgroup2 child; else the v1 freezer, with
// kill emulated as freeze + SIGKILL + thaw.
std::vector<Check> freeze_kill_checks(const CgroupLayout& layout, const CgroupFeatureProbe& probe);

// favordynmods on each cgroup mount (from its super options in `mounts`), and what moving a
// process into a cgroup costs here, measured: a child that waits is written into one fresh
// child cgroup after a pause (the first move after a quiet spell) and at once into a second
// (a move right after another). Without favordynmods a move takes cgroup_threadgroup_rwsem
// for writing, which waits for an RCU grace period unless another move did just before
// (kernel/cgroup/cgroup.c, cgroup_attach_lock; kernel/rcu/sync.c): the one cost on a call's
// critical path sandgate cannot move off it (each call's first process is placed before it
// execs). Reported, never changed: sandgate does not remount host cgroups. Both children are
// recorded in `state` (when not null) before they are made and removed before returning.
std::vector<Check> attach_checks(const CgroupLayout& layout, const std::string& mountinfo_text,
                                 const std::string& name, RunState* state = nullptr);

}  // namespace sandgate::controller
