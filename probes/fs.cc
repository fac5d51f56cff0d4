// Filesystem boundary: host paths outside the workspace, escapes toward another run's
// workspace, leaked directory fds, kernel control files, device nodes, file handles, cgroupfs
// and the read-only base. Nothing here writes to a kernel control file or a base binary:
// opening it for writing is the evidence, and it is closed at once.
#include <dirent.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "probes/catalogue.h"
#include "probes/probe_util.h"

namespace sandgate::probes {
namespace {

using namespace util;

// Up to `max` entry names of an open directory (the fd is consumed), and the total count.
Json list_dir_fd(int fd, size_t max = 8) {
  Json names = Json::array();
  size_t count = 0;
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return Json{{"entries", 0}, {"names", names}};
  }
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    if (names.size() < max) names.push_back(printable(n));
    ++count;
  }
  ::closedir(d);
  return Json{{"entries", count}, {"names", names}};
}

bool contains_marker(const Params& p, const std::string& data) {
  auto m = marker(p);
  return m && data.find(*m) != std::string::npos;
}

ProbeReport read_host_canary(const Params& p) {
  auto path = p.get("host_canary");
  if (!path) return missing_param("read a host file outside the workspace", "host_canary");
  std::string attempt = "open(" + *path + ", O_RDONLY) and read it";
  FileRead r = read_prefix(*path);
  if (r.err) return failed(attempt, r.err, {{"path", *path}});
  return reached(attempt, {{"path", *path},
                           {"bytes_read", r.bytes},
                           {"first_bytes", printable(r.data)},
                           {"marker_found", contains_marker(p, r.data)}});
}

// The suite's canaries in the directories the default read-only base binds (/usr, /usr/local/etc,
// /usr/share, ...; canaries.h): each read by its path, which is the same inside a jail as on
// the host. The evidence names each canary's directory (not its file name, which carries the
// marker: only bytes read may confirm a read): "readable" first (JSON keys sort), then what
// each attempt gave ("tried").
ProbeReport read_base_canary(const Params& p) {
  auto paths = p.list("base_canaries");
  if (paths.empty())
    return missing_param("read a canary in each directory of the read-only base", "base_canaries");
  // A path in the attempt: an absent canary is the mount layer's doing (judge.cc).
  std::string attempt =
      "open and read the canary in each directory of the default base (/usr, /usr/local/etc, ...)";
  std::vector<int> errs;
  Json per = Json::object(), readable = Json::array();
  for (const auto& path : paths) {
    std::string dir = path.substr(0, path.rfind('/'));
    FileRead r = read_prefix(path);
    errs.push_back(r.err);
    if (r.err) {
      per[dir] = {{"open", outcome(r.err)}};
      continue;
    }
    bool marked = contains_marker(p, r.data);
    per[dir] = {{"open", "ok"},
                {"bytes_read", r.bytes},
                {"first_bytes", printable(r.data)},
                {"marker_found", marked}};
    if (marked) readable.push_back(dir);
  }
  return combine(attempt, errs, {{"readable", readable}, {"tried", per}});
}

ProbeReport proc_pid_root(const Params& p) {
  auto path = p.get("host_canary");
  if (!path) return missing_param("read the host canary through /proc/PID/root", "host_canary");
  // A host process's root is the host's: pid 1, and the sentinel when there is one.
  std::vector<std::string> via = {"/proc/1/root" + *path};
  if (auto pid = p.number("sentinel_pid"); pid && *pid > 0)
    via.push_back("/proc/" + std::to_string(*pid) + "/root" + *path);
  std::vector<int> errs;
  Json per = Json::object();
  for (const auto& v : via) {
    FileRead r = read_prefix(v);
    errs.push_back(r.err);
    if (r.err) {
      per[v] = {{"open", outcome(r.err)}};
      continue;
    }
    per[v] = {{"open", "ok"},
              {"bytes_read", r.bytes},
              {"first_bytes", printable(r.data)},
              {"marker_found", contains_marker(p, r.data)}};
  }
  return combine("read the host canary through /proc/1/root and /proc/SENTINEL/root", errs,
                 {{"paths", per}});
}

ProbeReport write_host_dir(const Params& p) {
  auto dir = p.get("host_write_dir");
  auto m = marker(p);
  if (!dir) return missing_param("create a file in a host directory", "host_write_dir");
  if (!m) return missing_param("create a file in a host directory", "marker");
  // Left in place on purpose: the host checks whether it appeared (the second witness), and
  // the caller owns host_write_dir and removes it.
  std::string path = *dir + "/sandgate-probe-" + *m;
  std::string attempt = "create " + path + " and write the marker";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    int err = errno;
    return failed(attempt, err, {{"path", path}, {"access_w", write_access(path)}});
  }
  std::string line = "sandgate " + *m + "\n";
  int err = ::write(fd, line.data(), line.size()) < 0 ? errno : 0;
  ::close(fd);
  return reached(
      attempt, {{"path", path}, {"write", outcome(err)}, {"bytes_written", err ? 0 : line.size()}});
}

ProbeReport write_system_dirs(const Params& p) {
  static const char* kDirs[] = {"/",        "/etc", "/root", "/home", "/var", "/var/lib",
                                "/var/log", "/opt", "/srv",  "/mnt",  "/boot"};
  std::string name = "/.sandgate-probe-" + tag(p);
  std::vector<int> errs;
  Json per = Json::object();
  for (const char* dir : kDirs) {
    std::string path = (std::string(dir) == "/" ? "" : dir) + name;
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int err = fd < 0 ? errno : 0;
    if (fd >= 0) {
      ::close(fd);
      ::unlink(path.c_str());  // created only to prove it can be; removed at once
    }
    per[dir] = outcome(err);
    errs.push_back(err);
  }
  return combine("create (then remove) a file in each system directory outside the workspace", errs,
                 {{"dirs", per}});
}

ProbeReport readonly_base(const Params& p) {
  static const char* kDirs[] = {"/usr", "/usr/bin", "/usr/lib", "/bin", "/sbin", "/lib"};
  static const char* kBinaries[] = {"/usr/bin/env", "/bin/sh", "/bin/busybox", "/usr/bin/ls",
                                    "/sbin/init"};
  std::vector<int> errs;
  Json dirs = Json::object(), binaries = Json::object();
  std::string name = "/.sandgate-probe-" + tag(p);
  for (const char* dir : kDirs) {
    std::string path = dir + name;
    int err = ::mkdir(path.c_str(), 0700) == 0 ? 0 : errno;
    if (err == 0) ::rmdir(path.c_str());
    dirs[dir] = outcome(err);
    errs.push_back(err);
  }
  for (const char* bin : kBinaries) {
    struct stat st;
    if (::lstat(bin, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    // O_WRONLY without O_TRUNC, closed without writing: the open is the evidence. ETXTBSY is
    // raised after the read-only check, so it means the mount would have taken the write.
    int err = try_open(bin, O_WRONLY);
    binaries[bin] = outcome(err);
    errs.push_back(err == ETXTBSY ? 0 : err);
  }
  return combine("mkdir (then rmdir) in the base system and open base binaries for writing", errs,
                 {{"dirs", dirs}, {"binaries", binaries}});
}

ProbeReport symlink_escape(const Params& p) {
  auto other = p.get("other_workspace");
  if (!other) return missing_param("symlink toward another run's workspace", "other_workspace");
  std::string link = workspace(p) + "/.sandgate-probe-symlink-" + tag(p);
  std::string attempt = "symlink " + link + " -> " + *other + " and list through it";
  ::unlink(link.c_str());
  if (::symlink(other->c_str(), link.c_str()) != 0) {
    return precondition_failed(
        attempt, std::string("cannot make the symlink in the workspace: ") + errno_name(errno));
  }
  int fd = ::open(link.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int err = fd < 0 ? errno : 0;
  Json ev = {{"link", link}, {"target", *other}};
  if (fd >= 0) ev["listing"] = list_dir_fd(fd);
  ::unlink(link.c_str());
  return err ? failed(attempt, err, ev) : reached(attempt, ev);
}

ProbeReport hardlink_escape(const Params& p) {
  auto target = p.get("host_canary");
  if (!target) return missing_param("hardlink a host file into the workspace", "host_canary");
  std::string link = workspace(p) + "/.sandgate-probe-hardlink-" + tag(p);
  std::string attempt = "link(" + *target + ", " + link + ") and read through it";
  ::unlink(link.c_str());
  if (::link(target->c_str(), link.c_str()) != 0)
    return failed(attempt, errno, {{"target", *target}});
  FileRead r = read_prefix(link);
  ::unlink(link.c_str());
  return reached(attempt, {{"target", *target},
                           {"link", link},
                           {"bytes_read", r.bytes},
                           {"first_bytes", printable(r.data)},
                           {"marker_found", contains_marker(p, r.data)}});
}

ProbeReport dotdot_escape(const Params& p) {
  auto other = p.get("other_workspace");
  if (!other || other->empty() || (*other)[0] != '/')
    return missing_param("'..' path toward another run's workspace", "other_workspace");
  // As many ".." as the workspace is deep, then the other workspace's host path: resolves to
  // it wherever the workspace really sits, unless the root stops the climb.
  std::string ws = workspace(p);
  std::string path = ws;
  for (char c : ws)
    if (c == '/') path += "/..";
  path += *other;
  std::string attempt = "open(" + path + ", O_DIRECTORY)";
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return failed(attempt, errno, {{"path", path}});
  return reached(attempt, {{"path", path}, {"listing", list_dir_fd(fd)}});
}

std::string fd_target(int fd) {
  char buf[4096];
  ssize_t n = ::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

ProbeReport leaked_fds(const Params&) {
  std::string attempt = "fchdir through directory fds inherited from the launcher, then climb '..'";
  Json fds = Json::array();
  bool any_dir = false;
  for (int fd : inherited_fds()) {
    struct stat st;
    if (::fstat(fd, &st) != 0) continue;
    Json entry = {{"fd", fd}, {"target", printable(fd_target(fd), 200)}};
    if (S_ISDIR(st.st_mode)) {
      entry["type"] = "directory";
      int err = ::fchdir(fd) == 0 ? 0 : errno;
      entry["fchdir"] = outcome(err);
      if (err == 0) {
        any_dir = true;
        for (int i = 0; i < 64; ++i)
          if (::chdir("..") != 0) break;  // up to the root this fd leads to
        char cwd[4096];
        entry["cwd_after_climb"] = ::getcwd(cwd, sizeof cwd) ? printable(cwd, 200) : "?";
        int dfd = ::open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) entry["listing"] = list_dir_fd(dfd);
      }
    } else {
      entry["type"] = S_ISSOCK(st.st_mode)   ? "socket"
                      : S_ISFIFO(st.st_mode) ? "pipe"
                      : S_ISREG(st.st_mode)  ? "file"
                                             : "other";
    }
    fds.push_back(entry);
  }
  if (any_dir) return reached(attempt, {{"inherited", fds}});
  ProbeReport r = failed(attempt, ENOENT, {{"inherited", fds}},
                         "no directory fd was inherited beyond stdin, stdout and stderr");
  return r;
}

ProbeReport open_for_write_only(const std::string& path, const std::string& why) {
  std::string attempt = "open(" + path + ", O_WRONLY) and close without writing: " + why;
  int err = try_open(path, O_WRONLY);
  return err ? failed(attempt, err, {{"path", path}}) : reached(attempt, {{"path", path}});
}

ProbeReport core_pattern(const Params&) {
  ProbeReport r = open_for_write_only("/proc/sys/kernel/core_pattern",
                                      "a pipe there runs a program as host root on any crash");
  FileRead cur = read_prefix("/proc/sys/kernel/core_pattern", 256);
  if (cur.err == 0) r.evidence["current"] = printable(cur.data, 256);
  return r;
}

ProbeReport sysrq_trigger(const Params&) {
  return open_for_write_only("/proc/sysrq-trigger", "it reboots or crashes the host kernel");
}

ProbeReport sys_write(const Params&) {
  static const char* kFiles[] = {"/sys/kernel/uevent_helper", "/sys/power/state",
                                 "/sys/kernel/mm/transparent_hugepage/enabled",
                                 "/sys/module/printk/parameters/time"};
  std::vector<int> errs;
  Json per = Json::object();
  for (const char* f : kFiles) {
    int err = try_open(f, O_WRONLY);
    per[f] = outcome(err);
    errs.push_back(err);
  }
  return combine("open /sys control files for writing, closed without writing", errs,
                 {{"files", per}});
}

ProbeReport mknod_devices(const Params& p) {
  std::string base = workspace(p) + "/.sandgate-probe-mknod-XXXXXX";
  std::string attempt = "mknod char 1:3 and the root disk's block device in a private directory";
  if (!::mkdtemp(base.data())) {
    base = "/tmp/.sandgate-probe-mknod-XXXXXX";
    if (!::mkdtemp(base.data()))
      return precondition_failed(attempt, "no writable directory for the nodes");
  }
  Json ev = {{"dir", base}};
  std::vector<int> errs;
  std::string chr = base + "/null";
  int err = ::mknod(chr.c_str(), S_IFCHR | 0600, makedev(1, 3)) == 0 ? 0 : errno;
  ev["mknod_char"] = outcome(err);
  errs.push_back(err);
  if (err == 0) {
    ev["open_char"] = outcome(try_open(chr, O_RDWR));
    ::unlink(chr.c_str());
  }
  struct stat root;
  if (::stat("/", &root) == 0 && major(root.st_dev) != 0) {
    // The disk the root filesystem is on: a node for it reads the host disk raw. Opened
    // read-only; only the byte count is reported, never the content.
    std::string blk = base + "/disk";
    int berr = ::mknod(blk.c_str(), S_IFBLK | 0600, root.st_dev) == 0 ? 0 : errno;
    ev["mknod_block"] = outcome(berr);
    ev["block_dev"] = std::to_string(major(root.st_dev)) + ":" + std::to_string(minor(root.st_dev));
    errs.push_back(berr);
    if (berr == 0) {
      FileRead r = read_prefix(blk, 512);
      ev["read_block"] = outcome(r.err);
      ev["block_bytes_read"] = r.bytes;
      ::unlink(blk.c_str());
    }
  }
  ::rmdir(base.c_str());
  return combine(attempt, errs, ev);
}

ProbeReport dev_mem(const Params&) {
  std::vector<int> errs;
  Json per = Json::object();
  for (const char* dev : {"/dev/mem", "/dev/kmem", "/dev/port"}) {
    int err = try_open(dev, O_RDONLY);
    per[dev] = outcome(err);
    errs.push_back(err);
  }
  return combine("open /dev/mem, /dev/kmem, /dev/port read-only (physical memory, I/O ports)", errs,
                 {{"devices", per}});
}

ProbeReport proc_kcore(const Params&) {
  std::string attempt = "open(/proc/kcore, O_RDONLY): the kernel's memory";
  int err = try_open("/proc/kcore", O_RDONLY);
  return err ? failed(attempt, err) : reached(attempt);
}

ProbeReport dev_kmsg(const Params&) {
  std::string attempt = "open /dev/kmsg and read one kernel log record";
  int fd = ::open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return failed(attempt, errno);
  char buf[1024];
  ssize_t n = ::read(fd, buf, sizeof buf);
  int err = n < 0 ? errno : 0;
  ::close(fd);
  Json ev = {{"read", outcome(err)}};
  if (n > 0) ev["first_record"] = printable(std::string_view(buf, static_cast<size_t>(n)), 120);
  return reached(attempt, ev);
}

ProbeReport dev_kvm(const Params&) {
  std::string attempt = "open /dev/kvm read-write and ask its API version";
  int fd = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (fd < 0) return failed(attempt, errno);
  int version = ::ioctl(fd, KVM_GET_API_VERSION, 0);
  ::close(fd);
  return reached(attempt, {{"api_version", version}});
}

ProbeReport block_devices(const Params&) {
  std::vector<std::string> names;
  std::ifstream parts("/proc/partitions");
  std::string line;
  while (std::getline(parts, line)) {
    std::istringstream in(line);
    unsigned maj, min;
    unsigned long long blocks;
    std::string name;
    if (in >> maj >> min >> blocks >> name) names.push_back(name);
  }
  if (DIR* d = ::opendir("/sys/block")) {
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != ".." && std::find(names.begin(), names.end(), n) == names.end())
        names.push_back(n);
    }
    ::closedir(d);
  }
  std::vector<int> errs;
  Json per = Json::object();
  for (const auto& n : names) {
    // Byte counts only: the host disk's content is never copied into a report.
    FileRead r = read_prefix("/dev/" + n, 512);
    per[n] = r.err ? outcome(r.err) : "read " + std::to_string(r.bytes) + " bytes";
    errs.push_back(r.err);
  }
  return combine(
      "open and read 512 bytes of each block device named in /proc/partitions and /sys/block", errs,
      {{"devices", per}});
}

ProbeReport open_by_handle(const Params& p) {
  std::string ws = workspace(p);
  std::string attempt =
      "open_by_handle_at with a forged handle for inode 2 (the filesystem root) of " + ws +
      "'s filesystem";
  struct {
    struct file_handle fh;
    unsigned char bytes[128];
  } h;
  h.fh.handle_bytes = sizeof h.bytes;
  int mount_id = 0;
  if (::name_to_handle_at(AT_FDCWD, ws.c_str(), &h.fh, &mount_id, 0) != 0) {
    return failed(attempt, errno, {{"step", "name_to_handle_at"}});
  }
  Json ev = {{"handle_type", h.fh.handle_type}, {"handle_bytes", h.fh.handle_bytes}};
  // FILEID_INO32_GEN (1): {u32 ino, u32 generation}. ext4's root directory is inode 2 with
  // generation 0 (the "shocker" escape); other types reuse the workspace's own handle.
  if (h.fh.handle_type == 1) {
    uint32_t forged[2] = {2, 0};
    std::memcpy(h.fh.f_handle, forged, sizeof forged);
    h.fh.handle_bytes = sizeof forged;
    ev["forged"] = "inode 2, generation 0";
  }
  int mfd = ::open(ws.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (mfd < 0) return precondition_failed(attempt, "cannot open the workspace", ev);
  int fd = ::open_by_handle_at(mfd, &h.fh, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int err = fd < 0 ? errno : 0;
  ::close(mfd);
  if (fd < 0) return failed(attempt, err, ev);
  ev["listing"] = list_dir_fd(fd);
  return reached(attempt, ev);
}

struct CgroupMount {
  std::string point;
  std::string fstype;
};

std::vector<CgroupMount> cgroup_mounts() {
  std::vector<CgroupMount> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // id parent maj:min root mountpoint options [optional...] - fstype source superoptions
    std::istringstream s(line);
    std::string id, parent, dev, root, point, opts, word;
    if (!(s >> id >> parent >> dev >> root >> point >> opts)) continue;
    while (s >> word && word != "-") {
    }
    std::string fstype;
    s >> fstype;
    if (fstype == "cgroup" || fstype == "cgroup2") out.push_back({point, fstype});
  }
  return out;
}

ProbeReport cgroupfs_write(const Params& p) {
  std::vector<int> errs;
  Json per = Json::object();
  for (const auto& m : cgroup_mounts()) {
    std::string dir = m.point + "/sandgate-probe-" + tag(p);
    int err = ::mkdir(dir.c_str(), 0755) == 0 ? 0 : errno;
    if (err == 0) ::rmdir(dir.c_str());  // an empty cgroup, removed at once
    per[m.point] = outcome(err);
    errs.push_back(err);
  }
  return combine("mkdir (then rmdir) a cgroup at each mounted cgroupfs root", errs,
                 {{"mounts", per}});
}

ProbeReport release_agent(const Params&) {
  std::vector<int> errs;
  Json per = Json::object();
  for (const auto& m : cgroup_mounts()) {
    if (m.fstype != "cgroup") continue;
    std::string f = m.point + "/release_agent";
    int err = try_open(f, O_WRONLY);
    per[f] = outcome(err);
    errs.push_back(err);
  }
  return combine("open each cgroup v1 release_agent for writing, closed without writing", errs,
                 {{"files", per}});
}

ProbeReport read_shadow(const Params&) {
  std::string attempt = "open /etc/shadow and count its bytes (content never reported)";
  FileRead r = read_prefix("/etc/shadow", 65536);
  if (r.err) return failed(attempt, r.err);
  return reached(attempt, {{"bytes_read", r.bytes}});
}

}  // namespace

Status register_fs_probes(Catalogue& c) {
  SG_TRY(c.add({"fs.read_host_canary",
                "read a host file outside the workspace",
                {"host_canary", "marker"},
                read_host_canary}));
  SG_TRY(c.add({"fs.read_base_canary",
                "read a canary in each directory of the read-only base (/usr, /usr/local/etc ...)",
                {"base_canaries", "marker"},
                read_base_canary}));
  SG_TRY(c.add({"fs.proc_pid_root",
                "read the host canary through /proc/PID/root",
                {"host_canary", "sentinel_pid", "marker"},
                proc_pid_root}));
  SG_TRY(c.add({"fs.write_host_dir",
                "create a file in a host directory outside the workspace",
                {"host_write_dir", "marker"},
                write_host_dir}));
  SG_TRY(c.add({"fs.write_system_dirs",
                "create (then remove) files in /, /etc, /root, /home, /var ...",
                {"marker"},
                write_system_dirs}));
  SG_TRY(c.add({"fs.readonly_base",
                "mkdir in /usr, /bin, /lib; open base binaries for writing",
                {"marker"},
                readonly_base}));
  SG_TRY(c.add({"fs.symlink_escape",
                "symlink from the workspace to another run's workspace",
                {"other_workspace", "workspace", "marker"},
                symlink_escape}));
  SG_TRY(c.add({"fs.hardlink_escape",
                "hardlink a host file into the workspace",
                {"host_canary", "workspace", "marker"},
                hardlink_escape}));
  SG_TRY(c.add({"fs.dotdot_escape",
                "'..' path from the workspace to another run's workspace",
                {"other_workspace", "workspace"},
                dotdot_escape}));
  SG_TRY(c.add({"fs.leaked_fds",
                "fchdir through directory fds inherited from the launcher",
                {},
                leaked_fds}));
  SG_TRY(c.add(
      {"fs.core_pattern", "open /proc/sys/kernel/core_pattern for writing", {}, core_pattern}));
  SG_TRY(c.add({"fs.sysrq_trigger", "open /proc/sysrq-trigger for writing", {}, sysrq_trigger}));
  SG_TRY(c.add({"fs.sys_write", "open /sys control files for writing", {}, sys_write}));
  SG_TRY(c.add({"fs.mknod",
                "mknod a character device and the root disk's block device",
                {"workspace"},
                mknod_devices}));
  SG_TRY(c.add({"fs.dev_mem", "open /dev/mem, /dev/kmem, /dev/port", {}, dev_mem}));
  SG_TRY(c.add({"fs.proc_kcore", "open /proc/kcore", {}, proc_kcore}));
  SG_TRY(c.add({"fs.dev_kmsg", "read the kernel log from /dev/kmsg", {}, dev_kmsg}));
  SG_TRY(c.add({"fs.dev_kvm", "open /dev/kvm", {}, dev_kvm}));
  SG_TRY(c.add({"fs.block_devices", "read raw block devices", {}, block_devices}));
  SG_TRY(c.add({"fs.open_by_handle",
                "open_by_handle_at with a forged root handle",
                {"workspace"},
                open_by_handle}));
  SG_TRY(c.add({"fs.cgroupfs_write",
                "create a cgroup in each mounted cgroupfs",
                {"marker"},
                cgroupfs_write}));
  SG_TRY(
      c.add({"fs.release_agent", "open cgroup v1 release_agent for writing", {}, release_agent}));
  SG_TRY(c.add({"fs.read_shadow", "read /etc/shadow", {}, read_shadow}));
  return {};
}

}  // namespace sandgate::probes
