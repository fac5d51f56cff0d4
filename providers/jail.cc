#include "providers/jail.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <grp.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/fd.h"
#include "core/files.h"
#include "core/mounts.h"
#include "providers/base_root.h"
#include "providers/proc_views.h"

namespace sandgate::providers {
namespace {

// Device nodes bound from the host's /dev (a user namespace cannot mknod).
constexpr const char* kDevices[] = {"null", "zero", "full", "random", "urandom", "tty"};

Status do_mount(const std::string& step, const char* source, const std::string& target,
                const char* fstype, unsigned long flags, const char* data = nullptr) {
  if (::mount(source, target.c_str(), fstype, flags, data) != 0) return sys_error(step, target);
  return {};
}

// A read-only remount of one mount keeps the flags the kernel locked on it when it crossed into
// our user namespace (nosuid, nodev, noexec, atime): dropping one is EPERM (mount_namespaces(7)).
Status remount_readonly(const std::string& target) {
  struct statvfs sv;
  if (::statvfs(target.c_str(), &sv) != 0) return sys_error("statvfs", target);
  unsigned long flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV;
  if (sv.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (sv.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (sv.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (sv.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  return do_mount("remount read-only", nullptr, target, nullptr, flags);
}

// A bind of `source` at `target` that is read-only all the way down. MS_BIND | MS_REC brings
// the submounts under the source along, and a remount changes one mount only: a submount under
// a bound directory would stay writable. mount_setattr(2) with AT_RECURSIVE (Linux 5.12) sets
// read-only, nosuid and nodev on the whole tree at once and leaves every other flag (the locked
// ones included) as it is; where the kernel lacks it, each mount of the tree is remounted.
Status bind_readonly(const std::string& source, const std::string& target) {
  SG_TRY(do_mount("bind " + source, source.c_str(), target, nullptr, MS_BIND | MS_REC));
  struct mount_attr attr = {};
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (::mount_setattr(AT_FDCWD, target.c_str(), AT_RECURSIVE, &attr, sizeof attr) == 0) return {};
  if (errno != ENOSYS) return sys_error("mount_setattr read-only, recursive", target);
  SG_ASSIGN_OR_RETURN(auto mounts, read_mount_table("/proc/self/mountinfo"));
  auto points = mount_points_under(mounts, target);  // parents first
  if (points.empty()) points.push_back(target);
  for (const auto& p : points) SG_TRY(remount_readonly(p));
  return {};
}

Status make_mount_point(const std::string& host_source, const std::string& target) {
  struct stat st;
  if (::stat(host_source.c_str(), &st) != 0) return sys_error("stat bind source", host_source);
  if (S_ISDIR(st.st_mode)) return make_dirs(target, 0755);
  auto slash = target.rfind('/');
  SG_TRY(make_dirs(target.substr(0, slash), 0755));
  SG_ASSIGN_OR_RETURN(UniqueFd f, open_fd(target, O_CREAT | O_WRONLY, 0644));
  return {};
}

// The run's own mount namespace (not made at clone: Supervisor::start's kCloneNamespaces say
// why). Made from the run's user namespace, which then owns it: the host's mounts copied into
// it are locked together with their flags (mount_namespaces(7)).
Status step_mount_namespace() {
  if (::unshare(CLONE_NEWNS) != 0) return sys_error("unshare the mount namespace");
  return {};
}

Status step_private_mounts() {
  // Nothing we mount may propagate back to the host, and nothing of the host's mounts later.
  return do_mount("make mounts private", nullptr, "/", nullptr, MS_REC | MS_PRIVATE);
}

Status step_root_tmpfs(const std::string& root) {
  return do_mount("mount root tmpfs", "sandgate-root", root, "tmpfs", MS_NOSUID | MS_NODEV,
                  "mode=0755,size=16m");
}

// The read-only base (providers/base_root.h), bound read-only.
Status step_base(const std::string& root, const std::vector<std::string>& base_paths) {
  SG_ASSIGN_OR_RETURN(auto dirs, make_base_tree(root, base_paths));
  for (const auto& dir : dirs) SG_TRY(bind_readonly(dir, root + dir));
  return {};
}

Status step_etc(const std::string& root, const JailConfig& c, int alternatives) {
  SG_ASSIGN_OR_RETURN(auto files, make_base_etc(root, c.uid, c.gid, c.home,
                                                alternatives >= 0 ? Alternatives::kLeaveEmpty
                                                                  : Alternatives::kCopy));
  // The same links either way; the copy only where the shared mount cannot be attached.
  if (alternatives >= 0 && !attach_shared_alternatives(alternatives, root).ok())
    SG_TRY(copy_alternatives(root));
  for (const auto& file : files) SG_TRY(bind_readonly(file, root + file));
  std::string etc = root + "/etc";
  SG_TRY(write_file(etc + "/hosts", "127.0.0.1 localhost " + c.hostname + "\n::1 localhost\n",
                    O_WRONLY | O_CREAT | O_TRUNC));
  SG_TRY(write_file(etc + "/hostname", c.hostname + "\n", O_WRONLY | O_CREAT | O_TRUNC));
  if (!c.resolv_conf_host.empty()) {
    // The run's resolver: the file is the run's own on the host, filled in once the run's
    // link is wired; the bind sees what is written there later (same inode).
    SG_TRY(make_mount_point(c.resolv_conf_host, etc + "/resolv.conf"));
    SG_TRY(bind_readonly(c.resolv_conf_host, etc + "/resolv.conf"));
    SG_TRY(write_file(etc + "/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n",
                      O_WRONLY | O_CREAT | O_TRUNC));
  }
  return {};
}

Status step_dev(const std::string& root) {
  std::string dev = root + "/dev";
  SG_TRY(make_dirs(dev, 0755));
  SG_TRY(do_mount("mount /dev tmpfs", "sandgate-dev", dev, "tmpfs", MS_NOSUID | MS_NOEXEC,
                  "mode=0755,size=64k"));
  for (const char* name : kDevices) {
    std::string host = std::string("/dev/") + name, target = dev + "/" + name;
    if (::access(host.c_str(), F_OK) != 0) continue;
    SG_TRY(make_mount_point(host, target));
    SG_TRY(do_mount("bind device", host.c_str(), target, nullptr, MS_BIND));
  }
  const std::pair<const char*, const char*> links[] = {
      {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
      {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}};
  for (auto [from, name] : links)
    if (::symlink(from, (dev + "/" + name).c_str()) != 0) return sys_error("symlink", dev + "/" + name);
  SG_TRY(make_dirs(dev + "/shm", 01777));
  SG_TRY(do_mount("mount /dev/shm tmpfs", "sandgate-shm", dev + "/shm", "tmpfs",
                  MS_NOSUID | MS_NODEV, "mode=1777"));
  return {};
}

Status step_proc(const std::string& root) {
  SG_TRY(make_dirs(root + "/proc", 0555));
  // This process is pid 1 of the new pid namespace, so the mount shows only the run's processes.
  return do_mount("mount /proc", "proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC);
}

// What /proc tells about the host that a build has no use for, masked as container runtimes
// mask /proc/kcore and friends: the kernel's command line (it can carry boot secrets, and names
// the host's root device), its build string, the host's block devices and their I/O counters
// (an empty file each), and the boot id (a random one of the run's own: a tool that keys a
// cache on it still gets a well-formed id). Each is a read-only bind of a file on the jail's
// root tmpfs, made before the root is frozen read-only. What the kernel answers itself
// (uname(2), mountinfo's sources) stays: only a separate kernel hides that. sysinfo(2) is
// answered by the run's views server instead (sysinfo_notify.h).
// /proc/interrupts and /proc/softirqs are empty too, not replaced by a view: their per-CPU
// counts are the whole machine's (every tenant's network packets, disk completions, timers,
// IPIs move them: a side channel between runs, as /proc/stat's intr and softirq lines were,
// which the stat view zeroes), and interrupts names the host's devices and their drivers. No
// cgroup counts interrupts, so there is nothing of the run's own to show in their place.
constexpr const char* kMaskedEmpty[] = {"cmdline",   "version",    "partitions",
                                        "diskstats", "interrupts", "softirqs"};
constexpr char kMaskDir[] = "/.sandgate-masks";

std::string random_boot_id() {
  unsigned char b[16] = {};
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    (void)!::read(fd, b, sizeof b);
    ::close(fd);
  }
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);  // version 4 (RFC 4122)
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
  char out[40];
  std::snprintf(out, sizeof out,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return out;
}

Status mask_with(const std::string& file, const std::string& target) {
  if (::access(target.c_str(), F_OK) != 0) return {};  // this kernel has none
  SG_TRY(do_mount("mask " + target, file.c_str(), target, nullptr, MS_BIND));
  return do_mount("mask " + target + " read-only", nullptr, target, nullptr,
                  MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC);
}

Status step_proc_masks(const std::string& root) {
  std::string dir = root + kMaskDir;
  SG_TRY(make_dirs(dir, 0555));
  SG_TRY(write_file(dir + "/empty", "", O_WRONLY | O_CREAT | O_TRUNC));
  SG_TRY(write_file(dir + "/boot_id", random_boot_id(), O_WRONLY | O_CREAT | O_TRUNC));
  for (const char* name : kMaskedEmpty) SG_TRY(mask_with(dir + "/empty", root + "/proc/" + name));
  return mask_with(dir + "/boot_id", root + "/proc/sys/kernel/random/boot_id");
}

// The run's /proc views (proc_views.h): each file the views server serves, bound read-only
// over the jail's own, before the root is frozen. A file this kernel's /proc lacks (no PSI:
// no /proc/pressure) is left out, as the masks above are.
// No remount: the views filesystem is mounted read-only, nosuid, nodev and noexec on the host,
// and a bind carries its source mount's flags (fs/namespace.c, clone_mnt), so each bind is
// already all of those (a test reads them back), at one mount call per file instead of two.
Status step_proc_views(const std::string& root, const JailConfig& c) {
  if (c.proc_views_host.empty()) return {};
  for (const char* name : kProcViewFiles) {
    std::string target = root + "/proc/" + name;
    if (::access(target.c_str(), F_OK) != 0) continue;  // this kernel has none (no PSI)
    SG_TRY(do_mount("bind the run's view of " + target, (c.proc_views_host + "/" + name).c_str(),
                    target, nullptr, MS_BIND));
  }
  return {};
}

// A read-write bind that cannot carry setuid binaries or device nodes in; the flags the kernel
// locked on the source (noexec, atime) are kept, or the remount is EPERM.
Status bind_readwrite(const std::string& step, const std::string& source, const std::string& target) {
  SG_TRY(do_mount(step, source.c_str(), target, nullptr, MS_BIND));
  struct statvfs sv;
  if (::statvfs(target.c_str(), &sv) != 0) return sys_error("statvfs", target);
  unsigned long flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV;
  if (sv.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (sv.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (sv.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  return do_mount("remount " + target + " nosuid", nullptr, target, nullptr, flags);
}

Status step_tmp(const std::string& root, const JailConfig& c) {
  SG_TRY(make_dirs(root + "/tmp", 01777));
  if (!c.tmp_host.empty()) {
    // share_tmp (test-only weakening): one host directory shared by every such run.
    SG_TRY(bind_readwrite("bind shared /tmp", c.tmp_host, root + "/tmp"));
  } else {
    SG_TRY(do_mount("mount /tmp tmpfs", "sandgate-tmp", root + "/tmp", "tmpfs",
                    MS_NOSUID | MS_NODEV, "mode=1777"));
  }
  SG_TRY(make_dirs(root + "/var/tmp", 0755));
  return do_mount("mount /var/tmp tmpfs", "sandgate-vartmp", root + "/var/tmp", "tmpfs",
                  MS_NOSUID | MS_NODEV, "mode=1777");
}

Status step_home(const std::string& root, const JailConfig& c) {
  std::string home = root + c.home;
  SG_TRY(make_dirs(home, 0700));
  std::string opts = "mode=0700,uid=" + std::to_string(c.uid) + ",gid=" + std::to_string(c.gid);
  return do_mount("mount home tmpfs", "sandgate-home", home, "tmpfs", MS_NOSUID | MS_NODEV,
                  opts.c_str());
}

Status step_workspace(const std::string& root, const JailConfig& c) {
  std::string target = root + c.workspace;
  SG_TRY(make_dirs(target, 0755));
  return bind_readwrite("bind workspace", c.workspace_host, target);
}

// The run's secrets, read-only: a call reads its credential and cannot replace it for the
// calls after it. The tmpfs itself is the run's (SupervisedEnvironment), mode 0500, files 0400.
Status step_secrets(const std::string& root, const JailConfig& c) {
  if (c.secrets_host.empty()) return {};
  std::string target = root + c.secrets;
  SG_TRY(make_dirs(target, 0755));
  return bind_readonly(c.secrets_host, target);
}

Status check_mount_target(const std::string& step, const BindMount& m) {
  if (m.target.empty() || m.target[0] != '/' || m.target.find("..") != std::string::npos)
    return logic_error(step, "target must be an absolute path without '..'", m.target);
  return {};
}

Status step_extra_mounts(const std::string& root, const JailConfig& c) {
  for (const auto& m : c.readonly_mounts) {
    SG_TRY(check_mount_target("read-only mount", m));
    std::string target = root + m.target;
    SG_TRY(make_mount_point(m.source, target));
    SG_TRY(bind_readonly(m.source, target));
  }
  // mount_home (test-only weakening).
  for (const auto& m : c.readwrite_mounts) {
    SG_TRY(check_mount_target("read-write mount", m));
    std::string target = root + m.target;
    SG_TRY(make_mount_point(m.source, target));
    SG_TRY(bind_readwrite("bind " + m.source, m.source, target));
  }
  return {};
}

Status step_pivot(const std::string& root) {
  // pivot_root(".", "."): the old root ends up stacked on the new one and is detached at once,
  // so no path of the host stays reachable (pivot_root(2), "pivot_root(".", ".")").
  if (::chdir(root.c_str()) != 0) return sys_error("chdir new root", root);
  if (syscall(SYS_pivot_root, ".", ".") != 0) return sys_error("pivot_root", root);
  if (::umount2(".", MNT_DETACH) != 0) return sys_error("detach old root", "/");
  if (::chdir("/") != 0) return sys_error("chdir", "/");
  // The root tmpfs holds only what we generated: freeze it read-only.
  return do_mount("remount root read-only", nullptr, "/", nullptr,
                  MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV);
}

Status step_uts(const JailConfig& c) {
  if (::sethostname(c.hostname.data(), c.hostname.size()) != 0) return sys_error("sethostname");
  if (::setdomainname("", 0) != 0) return sys_error("setdomainname");
  return {};
}

Status step_loopback() {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return sys_error("socket for loopback");
  UniqueFd sock(fd);
  struct ifreq ifr = {};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) return sys_error("SIOCGIFFLAGS", "lo");
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (::ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) return sys_error("bring up loopback", "lo");
  return {};
}

}  // namespace

Status assemble_jail(const JailConfig& c, int alternatives,
                     const std::function<void(const char* step)>& lap) {
  const std::string& root = c.root_dir;
  auto done = [&](const char* step) {
    if (lap) lap(step);
  };
  SG_TRY(step_mount_namespace());
  SG_TRY(step_private_mounts());
  SG_TRY(step_root_tmpfs(root));
  done("root");
  SG_TRY(step_base(root, c.base_paths));
  done("base");
  SG_TRY(step_etc(root, c, alternatives));
  done("etc");
  SG_TRY(step_dev(root));
  done("dev");
  SG_TRY(step_proc(root));
  SG_TRY(step_proc_masks(root));
  SG_TRY(step_proc_views(root, c));
  done("proc");
  SG_TRY(step_tmp(root, c));
  SG_TRY(step_home(root, c));
  SG_TRY(step_workspace(root, c));
  SG_TRY(step_secrets(root, c));
  SG_TRY(step_extra_mounts(root, c));
  done("binds");
  SG_TRY(step_pivot(root));
  done("pivot");
  SG_TRY(step_uts(c));
  // A shared network (share_host_network) is the launcher's to configure, and not ours to
  // change: its loopback is whatever the launcher made it.
  if (c.new_network) {
    SG_TRY(step_loopback());
  }
  done("uts-net");
  return {};
}

std::vector<std::string> call_writable_paths(const JailConfig& c) {
  std::vector<std::string> out = {c.workspace, "/tmp", "/var/tmp", "/dev/shm", c.home};
  for (const auto& m : c.readwrite_mounts) out.push_back(m.target);
  return out;
}

landlock::RulesetSpec call_landlock_rules(const JailConfig& c) {
  namespace fs = landlock::fs;
  namespace net = landlock::net;
  const landlock::Rights all = landlock::known_rights(1 << 20);  // the newest ABI known here
  landlock::RulesetSpec spec;
  // Landlock checks an operation by walking from its target up to the rule that grants it, so
  // each mkdir, rmdir or unlink at depth d costs d steps: a tree 100,000 levels deep (hostile
  // code makes one in seconds; `rm -rf` of any deep tree) would cost quadratic time. Those
  // three are left to the mount layer (the base is read-only there); creating and writing
  // files stays with Landlock.
  spec.handled.fs = all.fs & ~(fs::kMakeDir | fs::kRemoveDir | fs::kRemoveFile);
  // TCP by port only where the call shares a network namespace with others (the test-only
  // share_host_network). In the run's own namespace the namespace already bounds it (--net
  // none: loopback alone; an allowlist: one link, and the kernel's egress guard judging each
  // connect by address and port), and Landlock, which knows ports but not addresses, would only
  // refuse the run its own loopback servers: a test suite's HTTP server, a local database.
  if (!c.new_network) {
    spec.handled.net = all.net;
    if (c.tcp_connect_any) spec.handled.net &= ~net::kConnectTcp;
  }
  const uint64_t read = fs::kReadFile | fs::kReadDir | fs::kExecute;
  // Writable: everything but making device nodes (the mounts are nodev too) and device ioctls.
  const uint64_t write = all.fs & ~(fs::kMakeChar | fs::kMakeBlock | fs::kIoctlDev);
  spec.paths.push_back({"/", read});
  // The device nodes the jail binds (null, zero, tty, ...): read, write, truncate (a shell's
  // "> /dev/null" opens with O_TRUNC) and their ioctls (a terminal's); nothing made or removed.
  spec.paths.push_back({"/dev", read | fs::kWriteFile | fs::kTruncate | fs::kIoctlDev});
  for (const auto& path : call_writable_paths(c)) spec.paths.push_back({path, write});
  if (spec.handled.net & net::kConnectTcp)
    for (uint16_t port : c.tcp_connect_ports) spec.ports.push_back({port, net::kConnectTcp});
  return spec;
}

landlock::RulesetSpec run_landlock_scope() {
  landlock::RulesetSpec spec;
  spec.handled.scoped = landlock::scope::kAbstractUnixSocket | landlock::scope::kSignal;
  return spec;
}

}  // namespace sandgate::providers
