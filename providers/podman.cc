// The podman provider (see podman.h for the design and the list of settings).
#include "providers/podman.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <pwd.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>

#include "core/files.h"
#include "core/host_features.h"
#include "core/json.h"
#include "core/log.h"
#include "core/proc_cgroup.h"
#include "core/process.h"
#include "core/strings.h"
#include "providers/base_root.h"
#include "providers/proc_views.h"
#include "providers/seccomp_policy.h"
#include "providers/supervised_environment.h"

extern char** environ;

namespace sandgate::providers {
namespace {

constexpr char kSupervisorInside[] = "/.sandgate/supervisor";
constexpr char kWorkspace[] = "/workspace";
constexpr char kSecretsInside[] = "/run/secrets";
constexpr char kHome[] = "/home/sandbox";
// Where rootless runs keep Podman's --runroot (one directory each).
constexpr char kRootlessRunroots[] = "/run/sandgate-podman";
// Hardened defaults where the spec names no run ceiling.
constexpr uint64_t kDefaultMemory = 4ull << 30;
constexpr uint64_t kDefaultPids = 4096;

std::vector<std::string> split_str(std::string_view text, char sep) {
  std::vector<std::string> out;
  for (auto part : split(text, sep)) out.emplace_back(part);
  return out;
}

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

// Podman and runc where a root shell finds them, whatever sandgate's own PATH.
std::string find_executable(const std::string& name) {
  return find_on_path(name, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
      .value_or("");
}

// One hardening step: its flags on `podman run`, and whether a weakening (self-test only)
// switched it off, in which case it is not read back.
struct Setting {
  std::string name;
  std::vector<std::string> flags;
  bool weakened = false;
};

// "<hierarchy>/<rel>" under the cgroup mount: the relative path every placement dir shares,
// which is what --cgroup-parent names (the same path in every hierarchy).
Result<std::string> cgroup_parent_of(const HostPaths& paths, const Placement& placement) {
  std::string rel;
  for (const auto& dir : placement.cgroup_dirs) {
    std::string prefix = paths.cgroup + "/";
    if (!dir.starts_with(prefix))
      return logic_error("cgroup parent", "not under " + paths.cgroup, dir);
    std::string rest = dir.substr(prefix.size());
    auto slash = rest.find('/');
    if (slash == std::string::npos) return logic_error("cgroup parent", "a hierarchy root", dir);
    std::string r = rest.substr(slash);
    if (!rel.empty() && r != rel)
      return logic_error("cgroup parent", "placement dirs differ below their hierarchies (" + rel +
                                              " vs " + r + ")");
    rel = r;
  }
  return rel;
}

std::vector<std::string> cgroup_hierarchies(const HostPaths& paths) {
  std::vector<std::string> out;
  DIR* d = ::opendir(paths.cgroup.c_str());
  if (!d) return out;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == ".." || e->d_type != DT_DIR) continue;
    out.push_back(paths.cgroup + "/" + n);
  }
  ::closedir(d);
  // A pure v2 host: the mount itself is the one hierarchy.
  if (::access((paths.cgroup + "/cgroup.controllers").c_str(), F_OK) == 0) out = {paths.cgroup};
  return out;
}

// What runc makes under --cgroup-parent beyond the controller's own cgroups: the parent path in
// hierarchies the controller does not use (devices, freezer, ...), and podman's "conmon" group
// beside the container's. Recorded before `podman run` so that destroy and gc remove them.
// `shared_parents` (a run without a placement, under sandgate's own /sandgate-podman): every
// level is recorded even when another run made it, as rootless runs do (a parent is removed
// only once empty). Recording only what was missing left /sandgate-podman behind, empty,
// whenever two runs overlapped: the first out found it busy, the last had not recorded it.
Status record_runtime_cgroups(const HostPaths& paths, const std::string& rel, bool shared_parents,
                              const std::string& container, RunState& state) {
  std::vector<std::string> parts = split_str(rel.substr(1), '/');
  std::vector<Resource> rs;
  for (const auto& h : cgroup_hierarchies(paths)) {
    std::string path = h;
    for (const auto& part : parts) {
      path += "/" + part;
      if (shared_parents || ::access(path.c_str(), F_OK) != 0)
        rs.push_back({Resource::Kind::kCgroupParent, path});
    }
    rs.push_back({Resource::Kind::kCgroup, h + rel + "/conmon"});
  }
  // One write of the record for all of them and the container.
  rs.push_back({Resource::Kind::kContainer, container});
  return state.record_all(std::move(rs));
}

// A run's scratch tmpfs at `dir` (an existing empty directory), recorded before it is mounted:
// what it holds (the assembled root's skeleton, rootless Podman's state) goes with one unmount
// at destroy, where removing it from the disk cost a few ms per directory on this host's ext4
// (40-80 ms for the root, 0.2 s for rootless Podman's storage). Memory only, bounded.
Status mount_scratch_tmpfs(const std::string& dir, uid_t uid, gid_t gid, mode_t mode, uint64_t size,
                           RunState& state) {
  SG_TRY(state.record({Resource::Kind::kMount, dir}));
  std::string opts = fmt::format("size={},nr_inodes={},mode={:04o},uid={},gid={}", size,
                                 size / 4096, mode, uid, gid);
  if (::mount("sandgate-podman", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0)
    return sys_error("mount scratch tmpfs", dir);
  return {};
}

// The root filesystem sandgate assembles when no image is named: empty mount points, a
// generated /etc with the sandbox user, and the host's base as read-only volumes (returned).
// A mount point in the assembled root for each volume's target (a directory or an empty file,
// as its source is): runc, as root of the run's user namespace, cannot make them in
// directories host root owns.
Status make_mount_points(const std::string& root, const std::vector<BindMount>& mounts) {
  for (const auto& m : mounts) {
    struct stat st;
    if (::stat(m.source.c_str(), &st) != 0) return sys_error("stat volume source", m.source);
    std::string target = root + m.target;
    if (S_ISDIR(st.st_mode)) {
      SG_TRY(make_dirs(target, 0755));
    } else {
      auto slash = target.rfind('/');
      SG_TRY(make_dirs(target.substr(0, slash), 0755));
      if (::access(target.c_str(), F_OK) != 0) SG_TRY(write_file(target, "", O_WRONLY | O_CREAT));
    }
  }
  return {};
}

// The alternatives links are left to the launch (ContainedLaunch::while_starting).
Result<std::vector<std::string>> assemble_rootfs(const std::string& root, uid_t uid, gid_t gid,
                                                 const std::vector<std::string>& base_paths) {
  std::vector<std::string> volumes;
  for (const char* dir : {"etc", "tmp", "var/tmp", "proc", "sys", "dev", "run", "home/sandbox",
                          "workspace", ".sandgate"})
    SG_TRY(make_dirs(root + "/" + dir, 0755));
  // The same read-only base as the namespace jail (providers/base_root.h), as read-only volumes.
  SG_ASSIGN_OR_RETURN(auto dirs, make_base_tree(root, base_paths));
  SG_ASSIGN_OR_RETURN(auto files, make_base_etc(root, uid, gid, kHome, Alternatives::kLeaveEmpty));
  for (const auto& list : {dirs, files})
    for (const auto& path : list) volumes.push_back(path + ":" + path + ":ro");
  // Mount points for what Podman binds over them: runc, as root of the run's user namespace,
  // could not create them in a directory host root owns.
  for (const char* file :
       {"/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/run/.containerenv", kSupervisorInside})
    SG_TRY(write_file(root + file, "", O_WRONLY | O_CREAT | O_TRUNC));
  // Podman makes /etc/mtab a link to /proc/mounts when the root has none: rootless, it may not
  // write in a directory host root owns, so the link is made here (for both modes).
  struct stat st;
  if (::lstat((root + "/etc/mtab").c_str(), &st) != 0 &&
      ::symlink("/proc/mounts", (root + "/etc/mtab").c_str()) != 0)
    return sys_error("symlink", root + "/etc/mtab");
  return volumes;
}

// The supervisor's shared libraries and dynamic loader, as `ldd` lists them: an image has its
// own userland, so the supervisor brings its own (bound read-only under /.sandgate/lib and
// named by the loader's --library-path, which the calls it execs do not inherit). None for a
// static supervisor (the release build's): it is the entrypoint itself.
struct SupervisorLibs {
  std::vector<std::string> files;  // host paths
  std::string loader;              // host path of the dynamic loader; empty: static
};
Result<SupervisorLibs> supervisor_libs(const std::string& exe) {
  SG_ASSIGN_OR_RETURN(auto res, run_command({"ldd", exe}));
  // glibc's ldd: "statically linked" (static-pie, exit 0) or "not a dynamic executable" (exit 1).
  if (res.output.find("statically linked") != std::string::npos ||
      res.output.find("not a dynamic executable") != std::string::npos)
    return SupervisorLibs{};
  if (!res.status.exited || res.status.code != 0)
    return logic_error("ldd", "cannot list the supervisor's libraries: " + res.output, exe);
  SupervisorLibs libs;
  for (const auto& line : split_str(res.output, '\n')) {
    std::string l = trim(line);
    auto arrow = l.find("=> ");
    std::string path = arrow != std::string::npos ? l.substr(arrow + 3) : l;
    path = path.substr(0, path.find(' '));
    if (path.empty() || path[0] != '/') continue;  // linux-vdso.so.1 has no file
    if (arrow == std::string::npos) libs.loader = path;
    libs.files.push_back(path);
  }
  if (libs.loader.empty())
    return logic_error("ldd", "no dynamic loader listed (a static binary?)", exe);
  return libs;
}

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

Result<std::string> supervisor_binary(const ProviderOptions& o) {
  std::string exe = o.supervisor_exe.empty() ? "/proc/self/exe" : o.supervisor_exe;
  char buf[PATH_MAX];
  if (!::realpath(exe.c_str(), buf)) return sys_error("realpath supervisor binary", exe);
  return std::string(buf);
}

// ---- Read-back -------------------------------------------------------------------------------

// "Key:\tvalue" of /proc/PID/status.
std::string status_field(const std::string& status, const std::string& key) {
  for (const auto& line : split_str(status, '\n')) {
    if (line.starts_with(key + ":")) {
      std::string v = line.substr(key.size() + 1);
      while (!v.empty() && (v.front() == '\t' || v.front() == ' ')) v.erase(v.begin());
      return v;
    }
  }
  return "";
}

struct MountEntry {
  std::string point, options, fstype;
};
// The /proc files both providers mask (the jail's list, providers/jail.cc).
const std::vector<std::string>& masked_proc_paths() {
  static const std::vector<std::string> kPaths = {"/proc/cmdline",
                                                  "/proc/version",
                                                  "/proc/partitions",
                                                  "/proc/diskstats",
                                                  "/proc/interrupts",
                                                  "/proc/softirqs",
                                                  "/proc/sys/kernel/random/boot_id"};
  return kPaths;
}
std::string masked_proc_list() {
  std::string out;
  for (const auto& p : masked_proc_paths()) out += (out.empty() ? "" : ":") + p;
  return out;
}

std::vector<MountEntry> parse_mountinfo(const std::string& text) {
  std::vector<MountEntry> out;
  for (const auto& line : split_str(text, '\n')) {
    auto f = split_str(line, ' ');
    if (f.size() < 10) continue;
    auto dash = std::find(f.begin(), f.end(), "-");
    if (dash == f.end() || dash + 1 == f.end()) continue;
    out.push_back({f[4], f[5], *(dash + 1)});
  }
  return out;
}
const MountEntry* find_mount(const std::vector<MountEntry>& m, const std::string& point) {
  const MountEntry* last = nullptr;  // the last one at a point is the one on top
  for (const auto& e : m)
    if (e.point == point) last = &e;
  return last;
}
bool option_set(const std::string& options, const std::string& opt) {
  for (const auto& o : split_str(options, ','))
    if (o == opt) return true;
  return false;
}

// One limit file of the container's cgroup, v1 or v2 (whichever this host has).
Result<std::string> read_limit(const HostPaths& paths, const std::string& proc_cgroup,
                               const std::string& v1_controller, const std::string& v1_file,
                               const std::string& v2_file) {
  std::string v1 = cgroup_path_in(proc_cgroup, v1_controller);
  if (!v1.empty()) {
    auto t = read_file(paths.cgroup + "/" + v1_controller + v1 + "/" + v1_file);
    if (t.ok()) return trim(*t);
  }
  std::string v2 = cgroup_path_in(proc_cgroup, "");
  auto t = read_file(paths.cgroup + v2 + "/" + v2_file);
  if (!t.ok()) return std::move(t).error();
  return trim(*t);
}

struct Expected {
  std::string name;
  uid_t uid, gid;
  uint64_t memory, pids;
  double cpus;
  std::string cgroup_rel;  // empty: no parent given
  std::string network_mode;
  std::vector<std::string> writable;  // host-backed mounts that may be writable
  // Rootless: the host uid that must own the container's user namespace (NS_GET_OWNER_UID);
  // 0: not checked (rootful Podman makes it as root).
  uid_t userns_owner = 0;
};

// The host uid owning `pid`'s user namespace.
Result<uid_t> userns_owner_of(const std::string& proc_dir) {
  SG_ASSIGN_OR_RETURN(UniqueFd fd, open_fd(proc_dir + "/ns/user", O_RDONLY | O_CLOEXEC));
  uid_t owner = 0;
  if (::ioctl(fd.get(), NS_GET_OWNER_UID, &owner) != 0)
    return sys_error("ioctl NS_GET_OWNER_UID", proc_dir + "/ns/user");
  return owner;
}

Status verify_settings(const HostPaths& paths, const std::vector<Setting>& settings,
                       const Expected& want, pid_t pid) {
  auto fail = [](const std::string& setting, const std::string& why) {
    return logic_error("read back podman setting '" + setting + "'",
                       "the runtime did not apply it: " + why);
  };
  std::string dir = paths.proc + "/" + std::to_string(pid);
  SG_ASSIGN_OR_RETURN(std::string status, read_file(dir + "/status"));
  SG_ASSIGN_OR_RETURN(std::string mountinfo_text, read_file(dir + "/mountinfo", 1 << 20));
  SG_ASSIGN_OR_RETURN(std::string proc_cgroup, read_file(dir + "/cgroup"));
  auto mounts = parse_mountinfo(mountinfo_text);

  // Where the container is first: a container outside the run's cgroup has none of its
  // limits either, and the error should name the cause.
  std::vector<const Setting*> order;
  for (const auto& s : settings) order.push_back(&s);
  std::stable_partition(order.begin(), order.end(),
                        [](const Setting* s) { return s->name == "cgroup-parent"; });
  for (const Setting* setting : order) {
    const Setting& s = *setting;
    if (s.weakened) continue;
    const std::string& n = s.name;
    if (n == "network") {
      // A namespace of its own with loopback only: no bridge, no host interface.
      SG_ASSIGN_OR_RETURN(std::string dev, read_file(dir + "/net/dev", 1 << 16));
      auto lines = split_str(dev, '\n');
      for (size_t i = 2; i < lines.size(); ++i) {
        std::string ifname = trim(lines[i].substr(0, lines[i].find(':')));
        if (!ifname.empty() && ifname != "lo")
          return fail(n, "the container has interface " + ifname);
      }
      struct stat ours, theirs;
      if (::stat("/proc/self/ns/net", &ours) != 0 ||
          ::stat((dir + "/ns/net").c_str(), &theirs) != 0)
        return sys_error("stat network namespace", dir + "/ns/net");
      if (ours.st_ino == theirs.st_ino)
        return fail(n, "the container shares sandgate's network namespace");
    } else if (n == "cap-drop") {
      for (const char* key : {"CapEff", "CapPrm", "CapBnd", "CapAmb"})
        if (status_field(status, key) != "0000000000000000")
          return fail(n, std::string(key) + " is " + status_field(status, key));
    } else if (n == "no-new-privileges") {
      if (status_field(status, "NoNewPrivs") != "1")
        return fail(n, "NoNewPrivs is " + status_field(status, "NoNewPrivs"));
    } else if (n == "seccomp") {
      if (status_field(status, "Seccomp") != "2")
        return fail(n, "Seccomp is " + status_field(status, "Seccomp"));
    } else if (n == "read-only") {
      const MountEntry* root = find_mount(mounts, "/");
      if (!root || !option_set(root->options, "ro"))
        return fail(n, "the root is mounted read-write");
    } else if (n == "user") {
      // Inside the user namespace the ids are the spec's; /proc shows them as the host sees
      // them, id_map_base higher (checked against uid_map below).
      std::string uids = status_field(status, "Uid"), gids = status_field(status, "Gid");
      auto map = read_file(dir + "/uid_map");
      if (!map.ok()) return fail(n, "no uid_map");
      auto f = split_str(trim(*map), ' ');
      std::vector<std::string> fields;
      for (auto& x : f)
        if (!x.empty()) fields.push_back(x);
      if (fields.size() < 3 || fields[0] != "0")
        return fail(n, "no user namespace (uid_map: " + trim(*map) + ")");
      uint64_t base = std::strtoull(fields[1].c_str(), nullptr, 10);
      std::string u = std::to_string(base + want.uid), g = std::to_string(base + want.gid);
      if (uids != u + "\t" + u + "\t" + u + "\t" + u)
        return fail(n, "Uid is " + uids + ", want " + u);
      if (gids != g + "\t" + g + "\t" + g + "\t" + g)
        return fail(n, "Gid is " + gids + ", want " + g);
      if (base == 0) return fail(n, "uid 0 inside is host root");
      if (want.userns_owner != 0) {
        // Rootless: the namespace belongs to the run's own id, so the kernel charges what it
        // counts per user (inotify instances, RLIMIT_NPROC) to that id, not to host root.
        SG_ASSIGN_OR_RETURN(uid_t owner, userns_owner_of(dir));
        if (owner != want.userns_owner)
          return fail(n, "the user namespace is owned by uid " + std::to_string(owner) +
                             ", not the run's " + std::to_string(want.userns_owner));
      }
    } else if (n == "tmpfs") {
      for (const char* p : {"/tmp", "/var/tmp", kHome}) {
        const MountEntry* m = find_mount(mounts, p);
        if (!m || m->fstype != "tmpfs") return fail(n, std::string(p) + " is not a tmpfs");
      }
    } else if (n == "workspace") {
      // Only the workspace is a writable mount of anything but memory (tmpfs) and the kernel's
      // own pseudo file systems. Those under /sys come with the host's /sys where a run shares
      // the host's network (podman binds it, submounts and all): tracefs where the host mounted
      // it (systemd does at boot), debugfs and the like. No storage among them, and no call can
      // write them: calls are not root there and have no capabilities.
      static const std::set<std::string> kPseudo = {
          "proc",     "devpts",  "mqueue",     "devtmpfs", "sysfs",  "cgroup", "cgroup2",
          "tracefs", "debugfs", "securityfs", "bpf",      "pstore", "configfs", "fusectl"};
      for (const auto& m : mounts) {
        if (!option_set(m.options, "rw")) continue;
        if (m.fstype == "tmpfs" || kPseudo.count(m.fstype)) continue;
        if (std::find(want.writable.begin(), want.writable.end(), m.point) == want.writable.end())
          return fail(n, m.point + " (" + m.fstype + ") is writable");
      }
      const MountEntry* ws = find_mount(mounts, kWorkspace);
      if (!ws || !option_set(ws->options, "rw"))
        return fail(n, "the workspace is not mounted writable");
    } else if (n == "env") {
      // None of the host's NAME=VALUE pairs reached the container's environment.
      SG_ASSIGN_OR_RETURN(std::string environ_text, read_file(dir + "/environ", 1 << 20));
      auto env = split_str(environ_text, '\0');
      for (char** e = environ; e && *e; ++e) {
        std::string h = *e;
        if (h.starts_with("PATH=") || h.starts_with("TERM=") || h.starts_with("HOME=") ||
            h.starts_with("HOSTNAME=") || h.starts_with("container="))
          continue;
        if (std::find(env.begin(), env.end(), h) != env.end())
          return fail(n, "host variable " + h.substr(0, h.find('=')) +
                             " is in the container's environment");
      }
    } else if (n == "pids-limit") {
      auto v = read_limit(paths, proc_cgroup, "pids", "pids.max", "pids.max");
      if (!v.ok()) return fail(n, "no pids.max in the container's cgroup: " + v.error().message());
      if (*v != std::to_string(want.pids)) return fail(n, "pids.max is " + *v);
    } else if (n == "memory") {
      auto v = read_limit(paths, proc_cgroup, "memory", "memory.limit_in_bytes", "memory.max");
      if (!v.ok()) return fail(n, "no memory limit file: " + v.error().message());
      if (*v != std::to_string(want.memory)) return fail(n, "the memory limit is " + *v);
    } else if (n == "cpus") {
      auto quota = read_limit(paths, proc_cgroup, "cpu", "cpu.cfs_quota_us", "cpu.max");
      auto period = read_limit(paths, proc_cgroup, "cpu", "cpu.cfs_period_us", "cpu.max");
      if (!quota.ok() || !period.ok()) return fail(n, "no cpu quota file");
      double q = 0, p = 0;
      if (quota->find(' ') != std::string::npos) {  // v2: "QUOTA PERIOD"
        auto f = split_str(*quota, ' ');
        q = std::atof(f[0].c_str());
        p = std::atof(f[1].c_str());
      } else {
        q = std::atof(quota->c_str());
        p = std::atof(period->c_str());
      }
      if (p <= 0 || q <= 0 || std::fabs(q / p - want.cpus) > 0.01)
        return fail(n, "the cpu quota is " + *quota + " per " + *period);
    } else if (n == "mask") {
      for (const auto& path : masked_proc_paths())
        if (::access(path.c_str(), F_OK) == 0 && !find_mount(mounts, path))
          return fail(n, path + " is not masked (no mount over it)");
    } else if (n == "proc-views") {
      // Each file runc lets the container have is the run's view: a bind of the views server's
      // filesystem (its type names it), not the kernel's procfs file.
      for (const char* name : kPodmanProcViewFiles) {
        const std::string path = std::string("/proc/") + name;
        const MountEntry* m = find_mount(mounts, path);
        if (!m || m->fstype != "fuse.sandgate-proc-views")
          return fail(n, path + " is " + (m ? "a " + m->fstype + " mount" : "the kernel's") +
                             ", not the run's view");
        if (!option_set(m->options, "ro")) return fail(n, path + " is mounted read-write");
      }
    } else if (n == "cgroup-parent") {
      if (want.cgroup_rel.empty()) continue;
      std::string mine = cgroup_path_in(proc_cgroup, "memory");
      if (mine.empty()) mine = cgroup_path_in(proc_cgroup, "");
      if (mine != want.cgroup_rel && !mine.starts_with(want.cgroup_rel + "/"))
        return fail(n, "the container's cgroup is " + mine + ", not under " + want.cgroup_rel);
    }
  }
  return {};
}

// ---- Rootless -------------------------------------------------------------------------------

// The cgroup a rootless run's Podman is written into before it execs (everything it starts,
// conmon and the container, inherits it): `<placement>/podman` in each hierarchy the placement
// names, or `/sandgate-podman/<run>` without one, and the same path in the memory, cpu and
// pids hierarchies (and the unified one) where the placement has none, so that the run
// ceiling can be set on it. Rootless runc cannot make cgroups on this host (it may not write
// in them), so sandgate makes them, as root, recorded before they exist.
struct RootlessCgroups {
  std::vector<std::string> dirs;  // one per hierarchy
  std::string rel;                // their common path below each hierarchy
};
Result<RootlessCgroups> make_rootless_cgroups(const HostPaths& paths, const Placement& placement,
                                              const std::string& placement_rel,
                                              const std::string& run_id, RunState& state) {
  RootlessCgroups out;
  out.rel = placement.empty() ? "/sandgate-podman/" + run_id : placement_rel + "/podman";
  std::vector<std::string> roots;
  for (const auto& dir : placement.cgroup_dirs) {
    std::string rest = dir.substr(paths.cgroup.size() + 1);
    roots.push_back(paths.cgroup + "/" + rest.substr(0, rest.find('/')));
  }
  bool v2 = ::access((paths.cgroup + "/cgroup.controllers").c_str(), F_OK) == 0;
  if (v2) {
    roots = {paths.cgroup};
  } else {
    for (const char* h : {"memory", "cpu", "pids", "unified"}) {
      std::string root = paths.cgroup + "/" + h;
      if (::access(root.c_str(), F_OK) == 0 &&
          std::find(roots.begin(), roots.end(), root) == roots.end())
        roots.push_back(root);
    }
    // A placement in a v1 dir that is a symlink to a comounted hierarchy (cpu -> cpu,cpuacct)
    // names the same directory twice: one of each.
    std::vector<std::string> unique;
    std::vector<std::pair<dev_t, ino_t>> seen;
    for (const auto& r : roots) {
      struct stat st;
      if (::stat(r.c_str(), &st) != 0) continue;
      auto key = std::make_pair(st.st_dev, st.st_ino);
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
      seen.push_back(key);
      unique.push_back(r);
    }
    roots = unique;
  }
  if (roots.empty())
    return logic_error("rootless podman cgroup", "no cgroup hierarchy found", paths.cgroup);
  std::vector<std::string> parts = split_str(out.rel.substr(1), '/');
  std::vector<Resource> rs;
  std::vector<std::string> to_make;
  std::vector<std::string> placed_roots;
  for (const auto& dir : placement.cgroup_dirs) {
    std::string rest = dir.substr(paths.cgroup.size() + 1);
    placed_roots.push_back(paths.cgroup + "/" + rest.substr(0, rest.find('/')));
  }
  for (const auto& root : roots) {
    // Below a placement the parents are the controller's. Elsewhere they are sandgate's own
    // and shared by concurrent runs: each run records them even when another made them (a
    // parent is removed only once empty), or the last run out could leave one behind.
    const bool shared_parents =
        std::find(placed_roots.begin(), placed_roots.end(), root) == placed_roots.end();
    std::string path = root;
    for (size_t i = 0; i < parts.size(); ++i) {
      path += "/" + parts[i];
      bool leaf = i + 1 == parts.size();
      if (leaf) {
        rs.push_back({Resource::Kind::kCgroup, path});
      } else if (shared_parents || ::access(path.c_str(), F_OK) != 0) {
        rs.push_back({Resource::Kind::kCgroupParent, path});
      }
      if (::access(path.c_str(), F_OK) != 0) to_make.push_back(path);
    }
    out.dirs.push_back(path);
  }
  SG_TRY(state.record_all(std::move(rs)));
  for (const auto& dir : to_make) {
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return sys_error("mkdir cgroup", dir);
    if (v2) {
      // The controllers the ceiling needs, for the children of each level (best effort: a
      // ceiling that cannot be set is an error naming it below).
      auto parent = dir.substr(0, dir.rfind('/'));
      (void)write_file(parent + "/cgroup.subtree_control", "+memory +cpu +pids");
    }
  }
  return out;
}

// Writes the run ceiling into the rootless run's own cgroups (what --memory, --memory-swap,
// --cpus and --pids-limit make runc write for a rootful run). A ceiling no hierarchy takes is
// an error naming its setting; `dropped` (the test hook) is left unwritten, for the read-back
// to catch.
Status apply_rootless_ceiling(const std::vector<std::string>& dirs, uint64_t memory, double cpus,
                              uint64_t pids, const std::string& dropped) {
  constexpr uint64_t kPeriod = 100000;  // µs; the CFS default period (and Podman's)
  const uint64_t quota = static_cast<uint64_t>(std::llround(cpus * kPeriod));
  bool set_memory = false, set_cpus = false, set_pids = false;
  auto has = [](const std::string& dir, const char* file) {
    return ::access((dir + "/" + file).c_str(), F_OK) == 0;
  };
  for (const auto& dir : dirs) {
    if (dropped != "memory") {
      if (has(dir, "memory.limit_in_bytes")) {
        SG_TRY(write_file(dir + "/memory.limit_in_bytes", std::to_string(memory)));
        // No swap beyond the limit (--memory-swap equal to --memory); absent without swap
        // accounting.
        if (has(dir, "memory.memsw.limit_in_bytes"))
          SG_TRY(write_file(dir + "/memory.memsw.limit_in_bytes", std::to_string(memory)));
        set_memory = true;
      } else if (has(dir, "memory.max")) {
        SG_TRY(write_file(dir + "/memory.max", std::to_string(memory)));
        if (has(dir, "memory.swap.max")) SG_TRY(write_file(dir + "/memory.swap.max", "0"));
        set_memory = true;
      }
    }
    if (dropped != "cpus") {
      if (has(dir, "cpu.cfs_quota_us")) {
        SG_TRY(write_file(dir + "/cpu.cfs_period_us", std::to_string(kPeriod)));
        SG_TRY(write_file(dir + "/cpu.cfs_quota_us", std::to_string(quota)));
        set_cpus = true;
      } else if (has(dir, "cpu.max")) {
        SG_TRY(write_file(dir + "/cpu.max", std::to_string(quota) + " " + std::to_string(kPeriod)));
        set_cpus = true;
      }
    }
    if (dropped != "pids-limit" && has(dir, "pids.max")) {
      SG_TRY(write_file(dir + "/pids.max", std::to_string(pids)));
      set_pids = true;
    }
  }
  auto missing = [](const char* setting, const char* controller) {
    return logic_error(
        "podman setting '" + std::string(setting) + "'",
        std::string("no ") + controller + " controller in the rootless run's cgroups to set it on");
  };
  if (!set_memory && dropped != "memory") return missing("memory", "memory");
  if (!set_cpus && dropped != "cpus") return missing("cpus", "cpu");
  if (!set_pids && dropped != "pids-limit") return missing("pids-limit", "pids");
  return {};
}

// Rootless Podman opens what it mounts as the run's id, not as root: each directory above
// `path` must let others search it (or belong to that id). An error names the first that
// does not, instead of the runtime's bare EACCES.
Status check_searchable_by(const std::string& path, uid_t uid, const std::string& what) {
  std::string dir = path;
  while (true) {
    auto slash = dir.rfind('/');
    if (slash == std::string::npos) break;
    dir = slash == 0 ? "/" : dir.substr(0, slash);
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0) return sys_error("stat", dir);
    if (st.st_uid != uid && !(st.st_mode & S_IXOTH))
      return logic_error("podman rootless",
                         what + " is below " + dir + ", which the run's own id " +
                             std::to_string(uid) + " may not search (mode " +
                             fmt::format("{:04o}", st.st_mode & 07777) +
                             "): make it searchable (o+x) or use --podman-mode rootful",
                         path);
    if (dir == "/") break;
  }
  return {};
}

// A sysctl that may be absent (then `absent` is what it means).
std::string sysctl_value(const HostPaths& paths, const std::string& name,
                         const std::string& absent) {
  auto v = read_file(paths.proc + "/sys/" + name);
  return v.ok() ? trim(*v) : absent;
}

}  // namespace

std::optional<std::string> podman_rm_incomplete(const RuntimeExit& exit) {
  if (exit.killed) return "was killed";
  // 125-127: Podman's own failure (or the container command's), not the container's status.
  if (!exit.status.exited || (exit.status.code >= 125 && exit.status.code <= 127))
    return "ended with " + exit.status.describe() + ": " + excerpt(exit.output);
  // Podman reports a failed removal on stderr (logrus: level=error) and still exits with the
  // container's status.
  if (exit.output.find("level=error") != std::string::npos ||
      exit.output.find("Error: ") != std::string::npos)
    return "reported an error: " + excerpt(exit.output);
  return std::nullopt;
}

std::vector<std::string> podman_setting_names() {
  return {"network", "cap-drop", "no-new-privileges", "seccomp", "read-only",
          "user",    "tmpfs",    "workspace",         "env",     "pids-limit",
          "memory",  "cpus",     "cgroup-parent",     "mask",    "proc-views"};
}

PodmanModes podman_modes(const HostPaths& paths) {
  PodmanModes m;
  m.podman = find_executable("podman");
  m.runc = find_executable("runc");
  auto missing = [&]() -> Status {
    if (m.podman.empty())
      return logic_error("podman provider", "podman is not installed (ci/bootstrap installs it)");
    if (m.runc.empty())
      return logic_error(
          "podman provider",
          "runc is not installed (crun refuses hybrid cgroup hosts; ci/bootstrap installs runc)");
    return {};
  };
  if (auto s = missing(); !s.ok()) {
    m.rootful = s;
    m.rootless = s;
    return m;
  }
  if (::geteuid() != 0) {
    m.rootful = logic_error(
        "podman rootful", "needs root (sandgate runs as uid " + std::to_string(::geteuid()) + ")");
    m.rootless = logic_error(
        "podman rootless",
        "sandgate runs Podman as each run's own host id, which needs root to set up (the run's "
        "user namespace and its id maps, the run's cgroup); sandgate runs as uid " +
            std::to_string(::geteuid()));
    return m;
  }
  m.rootful = {};
  // Rootless: Podman runs as uid 0 of a user namespace the run's first host id creates and
  // owns, so this host must let an unprivileged id create one.
  std::string max_ns = sysctl_value(paths, "user/max_user_namespaces", "1");
  std::string clone = sysctl_value(paths, "kernel/unprivileged_userns_clone", "1");
  std::string apparmor = sysctl_value(paths, "kernel/apparmor_restrict_unprivileged_userns", "0");
  if (max_ns == "0") {
    m.rootless = logic_error("podman rootless", "user.max_user_namespaces is 0");
  } else if (clone != "1") {
    m.rootless =
        logic_error("podman rootless", "kernel.unprivileged_userns_clone is " + clone +
                                           ": the run's own id may not create its user namespace");
  } else if (apparmor != "0") {
    m.rootless = logic_error("podman rootless",
                             "kernel.apparmor_restrict_unprivileged_userns is " + apparmor +
                                 ": the run's own id may not create its user namespace");
  } else {
    m.rootless = {};
  }
  return m;
}

std::vector<std::string> rootless_podman_env(uid_t id, const std::string& dir) {
  return {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
          "HOME=" + dir + "/home",
          "USER=root",
          "LOGNAME=root",
          "XDG_RUNTIME_DIR=" + dir + "/xdg",
          "XDG_CONFIG_HOME=" + dir + "/home/.config",
          "XDG_DATA_HOME=" + dir + "/home/.local/share",
          "TMPDIR=" + dir + "/tmp",
          "LANG=C.UTF-8",
          "_CONTAINERS_USERNS_CONFIGURED=done",
          "_CONTAINERS_ROOTLESS_UID=" + std::to_string(id),
          "_CONTAINERS_ROOTLESS_GID=" + std::to_string(id)};
}

Result<PodmanMode> resolve_podman_mode(const ProviderOptions& options, const std::string& image) {
  auto modes = podman_modes(options.paths);
  const Error no_image{ENOTSUP, "podman rootless", image,
                       "a rootless run's Podman storage is its own and empty, so it runs no "
                       "container image (--podman-mode rootful, or auto, runs one)"};
  switch (options.podman_mode) {
    case PodmanMode::kRootful:
      if (!modes.rootful.ok()) return modes.rootful.error();
      return PodmanMode::kRootful;
    case PodmanMode::kRootless:
      if (!modes.rootless.ok()) return modes.rootless.error();
      if (!image.empty()) return no_image;
      return PodmanMode::kRootless;
    case PodmanMode::kAuto:
      if (modes.rootless.ok() && image.empty()) return PodmanMode::kRootless;
      if (modes.rootful.ok()) return PodmanMode::kRootful;
      if (modes.rootless.ok()) return no_image;
      return logic_error("podman provider", modes.rootful.error().message() +
                                                "; rootless: " + modes.rootless.error().message());
  }
  return logic_error("podman provider", "unknown mode");
}

const ProviderInfo& PodmanProvider::static_info() {
  static const ProviderInfo info{
      "podman",
      "Podman container (runc): read-only root, no capabilities, user namespace, seccomp, "
      "sandgate's supervisor as pid 1",
      /*unsafe=*/false,
      {Capability::kFsIsolated, Capability::kFsReadonlyBase, Capability::kNetNone,
       Capability::kCredsScrubbedEnv, Capability::kProcPidNs, Capability::kProcUserNs,
       Capability::kProcSeccomp, Capability::kProcNoNewPrivs, Capability::kProcNoCaps,
       Capability::kIpcIsolated, Capability::kEphemeralWorkspace}};
  return info;
}

Result<std::unique_ptr<Provider>> PodmanProvider::make(const ProviderOptions& options) {
  return std::unique_ptr<Provider>(new PodmanProvider(options));
}

Status PodmanProvider::available() const {
  auto mode = resolve_podman_mode(options_, options_.image);
  if (!mode.ok()) return std::move(mode).error();
  return {};
}

void PodmanProvider::warm_up() { (void)compiled_seccomp_program_fd({}); }

Result<std::unique_ptr<Environment>> PodmanProvider::create(const EnvSpec& requested) {
  EnvSpec with_image;
  if (requested.image.empty() && !options_.image.empty()) {
    with_image = requested;
    with_image.image = options_.image;
  }
  const EnvSpec& spec = with_image.image.empty() ? requested : with_image;
  SG_ASSIGN_OR_RETURN(const PodmanMode mode, resolve_podman_mode(options_, spec.image));
  const bool rootless = mode == PodmanMode::kRootless;
  const std::string podman = find_executable("podman");
  SG_TRY(check_weakenings_allowed(spec.weakenings, options_.self_test_weakenings, "podman"));
  SG_TRY(refuse_allowlist("podman", spec.network));
  if (!spec.image.empty() && !spec.base_paths.empty())
    return logic_error("create environment",
                       "an image brings its own root; --base-path narrows the base sandgate "
                       "assembles without one",
                       spec.image);
  // Each container maps its users onto a host id range of its own (as the namespaces jail
  // does). Rootful, Podman creates the user namespace as root: the kernel's per-user counts
  // (inotify instances) are then charged to root in the host's namespace, shared by every
  // container. Rootless, the namespace is created by the range's first id, which owns it.
  const bool shared_ids = weakened(spec.weakenings, Weakening::kSharedUid) ||
                          weakened(spec.weakenings, Weakening::kReuseWorkspace);
  SG_ASSIGN_OR_RETURN(RunIds ids, assign_run_ids(options_, spec, shared_ids));
  EnvSpec with_run_id = spec;
  with_run_id.run_id = ids.run_id;
  const uid_t base = ids.base;
  if (spec.uid == 0 || spec.uid >= 65536 || spec.gid >= 65536)
    return logic_error("create environment",
                       "uid/gid inside must be in 1..65535 (got " + std::to_string(spec.uid) + ")");
  if (!spec.image.empty()) {
    SG_ASSIGN_OR_RETURN(auto exists, run_command({"podman", "image", "exists", "--", spec.image}));
    if (!exists.status.exited || exists.status.code != 0)
      return logic_error("podman image",
                         "no local image of that name (no registry is contacted; "
                         "`podman image ls` lists them)",
                         spec.image);
  }
  SG_ASSIGN_OR_RETURN(std::string exe, supervisor_binary(options_));
  const auto& weak = spec.weakenings;
  std::string home_host, shared_tmp;
  if (weakened(weak, Weakening::kMountHome)) {
    SG_ASSIGN_OR_RETURN(home_host, launcher_home());
  }
  if (weakened(weak, Weakening::kShareTmp)) {
    SG_ASSIGN_OR_RETURN(shared_tmp,
                        prepare_shared_dir(options_.paths, kSharedTmpDir, "", 0, 0, 01777));
  }
  SupervisedEnvironment::Recipe recipe;
  if (weakened(weak, Weakening::kReuseWorkspace)) {
    SG_ASSIGN_OR_RETURN(
        recipe.shared_workspace,
        prepare_shared_dir(options_.paths, kSharedWorkspaceDir, spec.workspace_recipe,
                           base + spec.uid, base + spec.gid, 0700));
  }
  std::string rel;
  if (!spec.placement.empty()) {
    SG_ASSIGN_OR_RETURN(rel, cgroup_parent_of(options_.paths, spec.placement));
  }
  recipe.provider = "podman";
  if (rootless && !spec.image.empty())
    return logic_error("podman rootless", "runs no container image", spec.image);
  recipe.needs_root_dir = spec.image.empty();
  recipe.id_range = ids.lease ? &*ids.lease : nullptr;
  recipe.id_base = base;
  recipe.workspace_uid = base + spec.uid;
  recipe.workspace_gid = base + spec.gid;
  recipe.workspace_inside = kWorkspace;
  recipe.secrets_inside = kSecretsInside;
  recipe.supervisor_exe = exe;

  const bool root_with_caps = weakened(weak, Weakening::kRootWithCaps);
  recipe.configure = [&](const RunLayout& layout) -> Result<SupervisorConfig> {
    SupervisorConfig c;
    c.contained = true;
    c.jail.workspace = kWorkspace;
    c.jail.home = kHome;
    c.jail.uid = spec.uid;
    c.jail.gid = spec.gid;
    c.base_env = {"PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
                  std::string("HOME=") + kHome,
                  "USER=sandbox",
                  "LOGNAME=sandbox",
                  "SHELL=/bin/sh",
                  "TMPDIR=/tmp",
                  "LANG=C.UTF-8",
                  "SANDGATE_RUN_ID=" + layout.run_id};
    if (weakened(weak, Weakening::kPassHostEnv)) {
      std::vector<std::string> host_env;
      for (char** e = environ; e && *e; ++e) host_env.emplace_back(*e);
      c.base_env = merge_env(std::move(host_env), c.base_env);
    }
    SG_ASSIGN_OR_RETURN(auto allowed, resolve_env_allowlist(spec.env, environ));
    c.base_env = merge_env(std::move(c.base_env), allowed);
    c.default_cwd = kWorkspace;
    if (!home_host.empty()) {
      c.jail.readwrite_mounts.push_back({home_host, home_host});
      c.base_env = merge_env(std::move(c.base_env), {"HOME=" + home_host});
    }
    // --network none or the lab's namespace: the container's own; host: shared (Landlock's TCP).
    c.jail.new_network = !weakened(weak, Weakening::kShareHostNetwork);
    c.jail.drop_privileges = !root_with_caps;
    c.jail.seccomp = !weakened(weak, Weakening::kNoSeccomp);
    c.jail.seccomp_full_width_compare = weakened(weak, Weakening::kSeccompFullWidthCompare);
    c.jail.landlock = !weakened(weak, Weakening::kNoLandlock);
    return c;
  };

  // The run's own /proc views (proc_views.h), of the run's cgroup: the container and every call
  // are placed below it. Only the files runc binds (kPodmanProcViewFiles); /proc/pressure/* stay
  // the kernel's. The server (and its mount) is recorded like the jail's, so destroy and gc stop
  // and detach them. Started here and waited for at the end of the launch recipe, just before
  // `podman run` needs the files: the server's exec and mount overlap the root's assembly
  // instead of adding to it.
  auto views_dir = std::make_shared<std::string>();
  auto views_mounted = std::make_shared<std::function<Status()>>();
  if (options_.proc_views && proc_views_enabled_by_environment()) {
    std::vector<std::string> run_cgroup = run_cgroup_dirs(spec.placement.cgroup_dirs);
    recipe.before_start = [this, exe, run_cgroup, views_dir, views_mounted](
                              const RunLayout& layout, SupervisorConfig& c,
                              RunState& state) -> Status {
      SG_ASSIGN_OR_RETURN(
          auto begun, begin_run_proc_views(options_.paths, exe, layout.run_dir, run_cgroup, state));
      *views_dir = begun.views.dir;
      *views_mounted = std::move(begun.wait_mounted);
      // The server answers the calls' sysinfo(2) as for the jail (sysinfo_notify.h): the
      // channel goes to the supervisor with its config, over the control socket runc passes.
      if (options_.answer_sysinfo) c.sysinfo_channel = begun.views.sysinfo_channel;
      return {};
    };
    recipe.stopping = [exe] { start_proc_views_spare(exe); };
  }

  const std::string dropped = dropped_setting_;
  const auto stop_grace = stop_grace_;
  const HostPaths paths = options_.paths;
  auto settings = std::make_shared<std::vector<Setting>>();
  auto expected = std::make_shared<Expected>();
  recipe.launch = [&, settings, expected](const RunLayout& layout,
                                          RunState& state) -> Result<ContainedLaunch> {
    StepClock clock("run " + layout.run_id, "podman launch");
    std::vector<std::string> volumes;
    if (spec.image.empty()) {
      // Read-only in the container, a few KiB: 4 MiB is ample.
      SG_TRY(mount_scratch_tmpfs(layout.root, 0, 0, 0755, 4 << 20, state));
      clock.lap("root-tmpfs");
      SG_ASSIGN_OR_RETURN(volumes,
                          assemble_rootfs(layout.root, spec.uid, spec.gid, spec.base_paths));
      std::vector<BindMount> extra = spec.readonly_mounts;
      if (!home_host.empty()) extra.push_back({home_host, home_host});
      SG_TRY(make_mount_points(layout.root, extra));
      clock.lap("root");
    }
    std::string name = "sandgate-" + layout.run_id;
    // Without a placement (no controller), a parent of the run's own rather than Podman's
    // shared /libpod_parent, whose conmon group would outlive every run.
    if (rel.empty() && spec.placement.empty()) rel = "/sandgate-podman/" + layout.run_id;
    uint64_t memory = spec.ceiling.memory_bytes.value_or(kDefaultMemory);
    uint64_t pids = spec.ceiling.pids.value_or(kDefaultPids);
    double cpus = spec.ceiling.cpus.value_or(
        static_cast<double>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN))));
    char cpus_text[32];
    std::snprintf(cpus_text, sizeof cpus_text, "%.3f", cpus);
    std::string network_mode = "none";
    // share_host_network: no network namespace of its own, so the container is in the one
    // the runtime runs in, sandgate's (in `probe`: the lab's). Not `ns:/proc/PID/ns/net`:
    // Podman then still sets its default net sysctls, which runc refuses outside a new
    // network namespace.
    if (weakened(weak, Weakening::kShareHostNetwork)) network_mode = "host";
    std::string ids = std::to_string(spec.uid) + ":" + std::to_string(spec.gid);
    std::string map = "0:" + std::to_string(base) + ":65536";
    // Rootless: the user namespace Podman runs in is the run's (0..65535 onto base.., made by
    // sandgate, owned by base); the container shares it. The run ceiling is written by sandgate
    // on the cgroup Podman is started in, which conmon and the container inherit.
    std::vector<std::string> user_flags = {"--user", root_with_caps ? "0:0" : ids};
    if (!rootless) user_flags.insert(user_flags.begin(), {"--uidmap", map, "--gidmap", map});
    auto limit_flags = [&](std::vector<std::string> flags) {
      return rootless ? std::vector<std::string>{} : flags;
    };

    auto& s = *settings;
    s = {
        {"network", {"--network", network_mode}, weakened(weak, Weakening::kShareHostNetwork)},
        {"cap-drop",
         root_with_caps ? std::vector<std::string>{"--cap-add", "ALL"}
                        : std::vector<std::string>{"--cap-drop", "ALL"},
         root_with_caps},
        {"no-new-privileges",
         root_with_caps ? std::vector<std::string>{}
                        : std::vector<std::string>{"--security-opt", "no-new-privileges"},
         root_with_caps},
        {"seccomp",
         weakened(weak, Weakening::kNoSeccomp)
             ? std::vector<std::string>{"--security-opt", "seccomp=unconfined"}
             : std::vector<std::string>{},
         weakened(weak, Weakening::kNoSeccomp)},
        {"read-only", {"--read-only"}},
        {"user", user_flags, root_with_caps},
        {"tmpfs",
         {"--tmpfs", "/var/tmp:rw,nosuid,nodev,mode=1777", "--tmpfs",
          // U: owned by the container's user (tmpfs uid= is not among Podman's options).
          std::string(kHome) + ":rw,nosuid,nodev,mode=0700,U"},
         false},
        {"workspace", {"--volume", layout.workspace + ":" + kWorkspace + ":rw"}},
        {"env", {}, weakened(weak, Weakening::kPassHostEnv)},
        {"pids-limit", limit_flags({"--pids-limit", std::to_string(pids)})},
        {"memory", limit_flags({"--memory", std::to_string(memory) + "b", "--memory-swap",
                                std::to_string(memory) + "b"})},
        {"cpus", limit_flags({"--cpus", cpus_text})},
        {"cgroup-parent", rel.empty() || rootless
                              ? std::vector<std::string>{}
                              : std::vector<std::string>{"--cgroup-parent", rel}},
        // What /proc tells of the host that a build has no use for, as the jail masks it
        // (providers/jail.cc): Podman binds /dev/null over each (an empty file).
        {"mask", {"--security-opt", "mask=" + masked_proc_list()}},
    };
    if (!views_dir->empty()) {
      // Read-only; each bind also keeps the nosuid, nodev and noexec of the views' host mount
      // (a bind carries its source mount's flags), in both modes.
      std::vector<std::string> binds;
      for (const char* file : kPodmanProcViewFiles)
        binds.insert(binds.end(), {"--volume", *views_dir + "/" + file + ":/proc/" + file + ":ro"});
      s.push_back({"proc-views", binds});
    }
    // /tmp: a private tmpfs, or (share_tmp) the shared host directory.
    auto& tmpfs = s[6];
    if (shared_tmp.empty()) {
      tmpfs.flags.insert(tmpfs.flags.begin(), {"--tmpfs", "/tmp:rw,nosuid,nodev,mode=1777"});
    } else {
      tmpfs.flags.insert(tmpfs.flags.begin(), {"--volume", shared_tmp + ":/tmp:rw"});
      tmpfs.weakened = true;
    }
    // The weakenings' shared directories are writable besides the workspace (and read back).
    std::vector<std::string> writable = {kWorkspace};
    if (!shared_tmp.empty()) writable.push_back("/tmp");
    if (!home_host.empty()) {
      s[7].flags.insert(s[7].flags.end(), {"--volume", home_host + ":" + home_host + ":rw"});
      writable.push_back(home_host);
    }
    // pass_host_env reaches the calls through the supervisor's base environment (as in the
    // jail), not `--env-host`: that gives the host's environment to the supervisor alone, and
    // under the probe suite's environment runc then failed to exec it (EACCES).

    ContainedLaunch launch;
    std::vector<std::string> argv = {podman.empty() ? "podman" : podman};
    std::string expected_rel = rel;
    if (rootless) {
      // The run's own Podman: storage, run and temporary state, home and XDG_RUNTIME_DIR under
      // the run directory, owned by the run's first id (uid 0 of its namespace), removed with it.
      SG_TRY(check_searchable_by(layout.run_dir, base, "the run directory"));
      SG_TRY(check_searchable_by(exe, base, "the supervisor binary"));
      for (const auto& m : spec.readonly_mounts)
        SG_TRY(check_searchable_by(m.source, base, "--ro-bind source " + m.source));
      // Podman's state for a --rootfs container (its database, the container's config and
      // mount points; no image layers): under 1 MiB, given 64 MiB.
      const std::string dir = layout.run_dir + "/podman";
      if (::mkdir(dir.c_str(), 0700) != 0) return sys_error("mkdir", dir);
      SG_TRY(mount_scratch_tmpfs(dir, base, base, 0700, 64 << 20, state));
      for (const char* sub : {"/root", "/tmp", "/home", "/xdg"}) {
        if (::mkdir((dir + sub).c_str(), 0700) != 0) return sys_error("mkdir", dir + sub);
        if (::chown((dir + sub).c_str(), base, base) != 0) return sys_error("chown", dir + sub);
      }
      // Podman refuses a --runroot longer than 50 characters (its sockets live there): a short
      // directory of the run's own under /run, named by a hash of the run directory (unique
      // among live runs), recorded before it is made.
      const std::string runroot = std::string(kRootlessRunroots) + "/" +
                                  fmt::format("{:016x}", std::hash<std::string>{}(layout.run_dir));
      SG_TRY(make_dirs(kRootlessRunroots, 0711));
      SG_TRY(state.record({Resource::Kind::kDirectory, runroot}));
      // Rootless Podman keeps its locks in shared memory named by the rootless uid (libpod's
      // shm lock, /dev/shm/libpod_rootless_lock_<uid>, 80 KiB) and never removes it: one per
      // run id range would pile up in RAM. Recorded as a path to remove with the run.
      SG_TRY(state.record(
          {Resource::Kind::kDirectory, "/dev/shm/libpod_rootless_lock_" + std::to_string(base)}));
      if (::mkdir(runroot.c_str(), 0700) != 0) return sys_error("mkdir", runroot);
      if (::chown(runroot.c_str(), base, base) != 0) return sys_error("chown", runroot);
      SG_ASSIGN_OR_RETURN(auto cgroups,
                          make_rootless_cgroups(paths, spec.placement, rel, layout.run_id, state));
      expected_rel = cgroups.rel;
      SG_TRY(apply_rootless_ceiling(cgroups.dirs, memory, cpus, pids, dropped));
      if (dropped != "cgroup-parent") launch.cgroup_dirs = cgroups.dirs;
      launch.userns_owner = base;
      launch.env = rootless_podman_env(base, dir);
      argv.insert(argv.end(),
                  {"--root", dir + "/root", "--runroot", runroot, "--tmpdir", dir + "/tmp",
                   "--storage-driver", "vfs", "--events-backend", "file"});
    }
    *expected = Expected{name, spec.uid,     spec.gid,     memory,   pids,
                         cpus, expected_rel, network_mode, writable, rootless ? base : 0};

    // In the foreground with --rm: the one `podman run` process creates, starts, waits for and
    // removes the container (as a bare `podman run --rm` does), where a detached run needs a
    // second Podman process, `podman rm`, at the end (0.1-0.3 s of each run here).
    argv.insert(argv.end(), {"--runtime", "runc", "--cgroup-manager", "cgroupfs", "run", "--rm",
                             "--name", name, "--preserve-fds", "1", "--hostname", "sandgate",
                             "--ipc", "private", "--log-driver", "none", "--pull", "never"});
    // Podman's default ulimits exceed this host's hard limits: ours, explicitly.
    struct rlimit nofile {
    }, nproc{};
    ::getrlimit(RLIMIT_NOFILE, &nofile);
    ::getrlimit(RLIMIT_NPROC, &nproc);
    auto lim = [](rlim_t v) { return v == RLIM_INFINITY ? std::string("-1") : std::to_string(v); };
    // nproc no higher than the run's pids limit: runc sets it from inside the user namespace,
    // where raising it to sandgate's own hard limit was refused (EPERM) on this host.
    rlim_t nproc_max = std::min<rlim_t>(nproc.rlim_max, pids);
    argv.insert(argv.end(),
                {"--ulimit", "nofile=" + lim(nofile.rlim_max) + ":" + lim(nofile.rlim_max),
                 "--ulimit", "nproc=" + lim(nproc_max) + ":" + lim(nproc_max)});
    for (const auto& setting : s) {
      if (setting.name == dropped) {
        // Test hook: the read-back must catch it. Never Podman's default network instead: that
        // is a CNI bridge, which changes the host (a bridge, iptables chains, ip_forward).
        if (setting.name == "network") argv.insert(argv.end(), {"--network", "host"});
        continue;
      }
      argv.insert(argv.end(), setting.flags.begin(), setting.flags.end());
    }
    for (const auto& m : spec.readonly_mounts) volumes.push_back(m.source + ":" + m.target + ":ro");
    // The run's secrets (a tmpfs of its own on the host, the run contract): read-only, where the
    // jail puts them.
    if (!layout.secrets_dir.empty())
      volumes.push_back(layout.secrets_dir + ":" + kSecretsInside + ":ro");
    for (const auto& v : volumes) argv.insert(argv.end(), {"--volume", v});
    argv.insert(argv.end(), {"--volume", exe + ":" + kSupervisorInside + ":ro"});
    if (spec.image.empty()) {
      argv.insert(argv.end(), {"--rootfs", layout.root, kSupervisorInside});
    } else {
      SG_ASSIGN_OR_RETURN(auto libs, supervisor_libs(exe));
      for (const auto& f : libs.files)
        argv.insert(argv.end(), {"--volume", f + ":/.sandgate/lib/" + base_name(f) + ":ro"});
      if (libs.loader.empty())
        argv.insert(argv.end(), {"--entrypoint", kSupervisorInside, spec.image});
      else
        argv.insert(argv.end(),
                    {"--entrypoint", "/.sandgate/lib/" + base_name(libs.loader), spec.image,
                     "--library-path", "/.sandgate/lib", kSupervisorInside});
    }

    // Recorded before they exist: the runtime's cgroups, then the container. Rootless, the
    // cgroups are sandgate's own (recorded above) and the container lives only in the run's
    // own Podman storage: killing its processes and removing the run directory removes it.
    if (!rootless)
      SG_TRY(record_runtime_cgroups(paths, rel, spec.placement.empty(), name, state));
    clock.lap("argv+record");
    // The views must be mounted before Podman looks for them: until then the mount point is an
    // empty directory, and the run would fail on the missing files.
    if (*views_mounted) {
      SG_TRY((*views_mounted)());
      clock.lap("wait-views");
    }
    launch.argv = std::move(argv);
    // The assembled root's alternatives links (490 here, 3-5 ms), copied once Podman is started:
    // it takes a few hundred ms before runc mounts the root, and nothing reads them before the
    // first call. They land in the root's tmpfs on the host, of which the container's root is a
    // bind: there whatever runc has mounted by then.
    if (spec.image.empty())
      launch.while_starting = [root = layout.root] { return copy_alternatives(root); };
    launch.foreground_output = layout.run_dir + "/runtime.log";
    if (stop_grace) launch.stop_grace = *stop_grace;
    return launch;
  };
  // The container removed by its own `podman run --rm` is forgotten, so that destroy does not
  // start a `podman rm` for it; otherwise (killed, Podman's own failure, an error removing
  // it) it stays in the record and is removed with `podman rm`, as gc would.
  recipe.runtime_exited = [rootless](const RuntimeExit& exit, RunState& state) -> Status {
    if (rootless) return {};  // no container record: the run's own storage goes with the run
    std::string name;
    for (const auto& r : state.resources())
      if (r.kind == Resource::Kind::kContainer) name = r.path;
    if (name.empty()) return {};
    if (auto why = podman_rm_incomplete(exit)) {
      spdlog::debug("run {}: podman run --rm {}; removing the container with podman rm",
                    state.run_id(), *why);
      return {};
    }
    return state.forget({Resource::Kind::kContainer, name});
  };
  recipe.verify = [paths, settings, expected](const RunLayout&, pid_t pid) -> Status {
    if (pid <= 0) return logic_error("read back podman settings", "no supervisor pid");
    return verify_settings(paths, *settings, *expected, pid);
  };
  auto env = SupervisedEnvironment::create(options_.paths, with_run_id, recipe);
  if (!env.ok()) return std::move(env).error();
  return std::unique_ptr<Environment>(std::move(env).value());
}

}  // namespace sandgate::providers
