#include "controller/cgroup_features.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>

#include "core/defer.h"
#include "core/fd.h"
#include "core/files.h"
#include "core/mounts.h"
#include "core/strings.h"

namespace sandgate::controller {
namespace {

bool file_exists(const Result<ChildFiles>& probe, const std::string& file) {
  if (!probe.ok()) return false;
  auto it = probe->find(file);
  return it != probe->end() && it->second.exists;
}

bool file_readable(const Result<ChildFiles>& probe, const std::string& file) {
  if (!probe.ok()) return false;
  auto it = probe->find(file);
  return it != probe->end() && it->second.readable;
}

// Why `file` is not usable in the probe: the probe's error, or what is wrong with the file.
std::string why_not(const Result<ChildFiles>& probe, const std::string& file) {
  if (!probe.ok()) return probe.error().message();
  auto it = probe->find(file);
  if (it == probe->end() || !it->second.exists) return "a child cgroup has no " + file;
  return file + " cannot be read: " + errno_name(it->second.read_errno);
}

}  // namespace

Result<ChildFiles> probe_child_cgroup(const std::string& parent, const std::string& name,
                                      const std::vector<std::string>& files, RunState* state) {
  std::string dir = parent + "/" + name;
  Resource resource{Resource::Kind::kCgroup, dir};
  if (state) SG_TRY(std::move(state->record(resource)).context("recording " + dir));
  if (::mkdir(dir.c_str(), 0755) != 0) {
    Error e = sys_error("mkdir", dir);
    if (state) (void)state->forget(resource);
    return e;
  }
  // From here on the child exists: every return removes it.
  Defer remove_on_error([&] {
    ::rmdir(dir.c_str());
    if (state) (void)state->forget(resource);
  });
  SG_ASSIGN_OR_RETURN(DirFd child, DirFd::open(dir));
  ChildFiles found;
  for (const auto& f : files) {
    FileProbe p;
    p.exists = child.exists(f);
    if (p.exists) {
      auto text = child.read(f, 4096);
      p.readable = text.ok();
      if (!text.ok()) p.read_errno = text.error().err;
    }
    found[f] = p;
  }
  remove_on_error.cancel();
  if (::rmdir(dir.c_str()) != 0) return sys_error("rmdir", dir);
  if (state) SG_TRY(state->forget(resource));
  return found;
}

std::vector<Check> attach_checks(const CgroupLayout& layout, const std::string& mountinfo_text,
                                 const std::string& name, RunState* state) {
  std::vector<Check> out;
  // favordynmods: a super option of cgroup2 (Linux 6.0) and of v1 hierarchies (6.1).
  if (auto table = parse_mount_table(mountinfo_text); table.ok()) {
    std::vector<std::string> with, without;
    for (const auto& m : *table) {
      if (m.fstype != "cgroup" && m.fstype != "cgroup2") continue;
      bool has = std::find(m.super_options.begin(), m.super_options.end(), "favordynmods") !=
                 m.super_options.end();
      (has ? with : without).push_back(m.mount_point);
    }
    std::string detail;
    if (!with.empty()) detail += "on at " + join(with, ", ");
    if (!without.empty())
      detail += std::string(detail.empty() ? "" : "; ") + "off at " + join(without, ", ") +
                " (moving a process waits for an RCU grace period; the host's mount option, "
                "sandgate does not change it)";
    out.push_back(check_ok("favordynmods", detail.empty() ? "no cgroup mount" : detail));
  } else {
    out.push_back(check_failed("favordynmods", table.error().message()));
  }

  std::string mount = !layout.unified_mount.empty() ? layout.unified_mount
                      : !layout.v1_mounts.empty()   ? layout.v1_mounts.begin()->second
                                                    : std::string();
  const char* what = "cgroup attach cost";
  if (mount.empty()) {
    out.push_back(check_failed(what, "no cgroup mount to measure in"));
    return out;
  }
  std::vector<std::string> dirs = {mount + "/" + name + "-attach-a",
                                   mount + "/" + name + "-attach-b"};
  std::vector<Resource> made;
  Defer cleanup([&] {
    for (const auto& r : made) ::rmdir(r.path.c_str());
    if (state && !made.empty()) (void)state->forget_all(made);
  });
  for (const auto& d : dirs) {
    Resource r{Resource::Kind::kCgroup, d};
    if (state) {
      if (auto st = state->record(r); !st.ok()) {
        out.push_back(check_failed(what, st.error().message()));
        return out;
      }
    }
    made.push_back(r);
    if (::mkdir(d.c_str(), 0755) != 0) {
      out.push_back(check_failed(what, sys_error("mkdir", d).message()));
      return out;
    }
  }
  pid_t child = ::fork();
  if (child < 0) {
    out.push_back(check_failed(what, sys_error("fork").message()));
    return out;
  }
  if (child == 0) {
    for (;;) ::pause();  // async-signal-safe only; killed below
  }
  Defer reap([&] {
    ::kill(child, SIGKILL);
    int status;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
  });
  // A quiet spell first, as between an agent's calls: long past any grace period in flight.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto move = [&](const std::string& dir) -> Result<double> {
    auto t0 = std::chrono::steady_clock::now();
    SG_TRY(write_file(dir + "/cgroup.procs", std::to_string(child)));
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  auto first = move(dirs[0]);
  auto next = first.ok() ? move(dirs[1]) : Result<double>(first.error());
  if (!next.ok()) {
    out.push_back(check_failed(what, next.error().message()));
    return out;
  }
  char line[256];
  std::snprintf(line, sizeof line,
                "first move after a pause %.2f ms, a move right after it %.2f ms (in %s; each "
                "call's first process is moved once per hierarchy before it execs)",
                *first, *next, mount.c_str());
  out.push_back(check_ok(what, line));
  return out;
}

std::string doctor_probe_name() { return "sandgate-doctor-" + std::to_string(::getpid()); }

CgroupFeatureProbe probe_cgroup_features(const CgroupLayout& layout, const std::string& name,
                                         RunState* state) {
  CgroupFeatureProbe probe;
  if (!layout.unified_mount.empty()) {
    probe.unified = probe_child_cgroup(
        layout.unified_mount, name,
        {"memory.pressure", "cpu.pressure", "io.pressure", "cgroup.freeze", "cgroup.kill"}, state);
  }
  if (auto freezer = layout.v1_mount("freezer"); !freezer.empty()) {
    probe.v1_freezer = probe_child_cgroup(freezer, name, {"freezer.state"}, state);
  }
  return probe;
}

std::vector<Check> layout_checks(const Result<CgroupLayout>& layout) {
  if (!layout.ok()) return {check_failed("layout", layout.error().message())};
  std::vector<Check> out;
  const CgroupLayout& l = *layout;
  if (l.kind == CgroupLayoutKind::kNone) {
    out.push_back(check_failed("layout",
                               "no cgroup filesystem is mounted: mount cgroup2 with "
                               "`mount -t cgroup2 none /sys/fs/cgroup`"));
    return out;
  }
  out.push_back(check_ok("layout", describe(l)));
  // The controllers a call's grant is written to (docs/DESIGN.md, "Hosts the controller must
  // handle"): v1 names its io controller blkio.
  struct Need {
    const char* v2;
    const char* v1;
  };
  for (Need n :
       {Need{"memory", "memory"}, Need{"cpu", "cpu"}, Need{"pids", "pids"}, Need{"io", "blkio"}}) {
    std::string name = std::string(n.v2) + " controller";
    if (l.has_v2_controller(n.v2)) {
      out.push_back(check_ok(name, "cgroup2 at " + l.unified_mount));
    } else if (auto m = l.v1_mount(n.v1); !m.empty()) {
      out.push_back(check_ok(name, std::string("v1 ") + n.v1 + " at " + m));
    } else {
      out.push_back(check_failed(name, std::string("neither cgroup2 nor a v1 hierarchy offers ") +
                                           n.v2 + ": per-call " + n.v2 +
                                           " limits are unavailable"));
    }
  }
  return out;
}

std::vector<Check> pressure_checks(const CgroupLayout& layout, const CgroupFeatureProbe& probe) {
  const char* name = "per-cgroup PSI";
  if (layout.unified_mount.empty()) {
    return {check_failed(name,
                         "no cgroup2 mount: per-cgroup pressure files exist only on "
                         "cgroup2 (v1 offers memory.pressure_level notifications only); "
                         "mount one with `mount -t cgroup2 none /sys/fs/cgroup/unified`")};
  }
  std::vector<std::string> have, missing;
  for (const char* f : {"memory.pressure", "cpu.pressure", "io.pressure"}) {
    (file_readable(probe.unified, f) ? have : missing).push_back(f);
  }
  if (!file_readable(probe.unified, "memory.pressure")) {
    return {check_failed(name, why_not(probe.unified, "memory.pressure") +
                                   " (kernel without CONFIG_PSI, or booted with psi=0)")};
  }
  std::string detail = join(have, " ") + " in a child of " + layout.unified_mount;
  if (!missing.empty()) detail += "; missing: " + join(missing, " ");
  return {check_ok(name, detail)};
}

std::vector<Check> freeze_kill_checks(const CgroupLayout& layout, const CgroupFeatureProbe& probe) {
  std::vector<Check> out;
  bool v2_freeze = file_exists(probe.unified, "cgroup.freeze");
  bool v2_kill = file_exists(probe.unified, "cgroup.kill");
  bool v1_freeze = file_exists(probe.v1_freezer, "freezer.state");
  std::string v1_where = layout.v1_mount("freezer");

  if (v2_freeze) {
    out.push_back(check_ok("freeze", "cgroup.freeze in a child of " + layout.unified_mount));
  } else if (v1_freeze) {
    out.push_back(check_ok("freeze", "v1 freezer.state in a child of " + v1_where));
  } else {
    std::string why =
        layout.unified_mount.empty() ? "no cgroup2 mount" : why_not(probe.unified, "cgroup.freeze");
    why += v1_where.empty() ? "; no v1 freezer hierarchy"
                            : "; " + why_not(probe.v1_freezer, "freezer.state");
    out.push_back(check_failed("freeze", why + " (cgroup.freeze needs Linux 5.2)"));
  }

  if (v2_kill) {
    out.push_back(check_ok("kill", "cgroup.kill in a child of " + layout.unified_mount));
  } else if (v2_freeze || v1_freeze) {
    // Without cgroup.kill (Linux 5.14) a cgroup is killed atomically by freezing it, sending
    // SIGKILL to every member and thawing, so nothing forks in between.
    out.push_back(check_ok(
        "kill", "emulated as freeze + SIGKILL + thaw (" +
                    (layout.unified_mount.empty() ? std::string("no cgroup2 mount")
                                                  : why_not(probe.unified, "cgroup.kill")) +
                    ")"));
  } else {
    out.push_back(check_failed("kill",
                               "neither cgroup.kill nor a freezer: a call's processes "
                               "cannot be killed atomically"));
  }
  return out;
}

}  // namespace sandgate::controller
