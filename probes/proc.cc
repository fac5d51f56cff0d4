// Process and kernel boundary: credentials of this process (capabilities, no_new_privs,
// seccomp, uid mapping), setuid, host processes (see, signal, trace, read, steal fds), the
// kernel's privileged surface (modules, BPF, perf, userfaultfd, namespaces, mount, TIOCSTI,
// syslog), and syscalls newer than a filter may know (by raw number, with arguments the kernel
// rejects). Argument-filtered calls (ioctl TIOCSTI, clone namespace flags) are also tried with
// bits set above the 32 the kernel reads. Signals sent here are SIGWINCH only (default action:
// ignore), and kill(-1) only when the pid namespace is provably not the host's.
#include <fcntl.h>
#include <grp.h>
#include <linux/bpf.h>
#include <linux/capability.h>
#include <linux/perf_event.h>
#include <linux/userfaultfd.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/klog.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "probes/catalogue.h"
#include "probes/probe_util.h"

namespace sandgate::probes {
namespace {

using namespace util;

// The value of "Name:\t..." in /proc/self/status, or "" when absent.
std::string status_field(const std::string& status, const std::string& name) {
  std::istringstream in(status);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with(name + ":")) {
      std::string v = line.substr(name.size() + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  }
  return "";
}

std::string self_status() { return read_prefix("/proc/self/status", 1 << 16).data; }

ProbeReport capabilities(const Params&) {
  std::string attempt = "read this process's capability sets (/proc/self/status)";
  std::string st = self_status();
  if (st.empty()) return failed(attempt, ENOENT, {}, "/proc/self/status is unreadable");
  Json ev = Json::object();
  bool holds = false;
  for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
    std::string hex = status_field(st, set);
    ev[set] = hex;
    unsigned long long v = std::strtoull(hex.c_str(), nullptr, 16);
    if (std::string(set) != "CapBnd" && v != 0) holds = true;
  }
  if (holds) return reached(attempt, ev);
  return held(attempt, ev, "the effective, permitted, inheritable and ambient sets are empty");
}

ProbeReport no_new_privs(const Params&) {
  std::string attempt = "read no_new_privs: 0 means an exec can gain privilege";
  int v = ::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
  if (v < 0) return failed(attempt, errno);
  Json ev = {{"no_new_privs", v}};
  if (v == 0) return reached(attempt, ev);
  return held(attempt, ev, "no_new_privs is set");
}

ProbeReport seccomp_mode(const Params&) {
  std::string attempt = "read the seccomp mode: 0 means no syscall filter";
  std::string st = self_status();
  std::string mode = status_field(st, "Seccomp");
  if (mode.empty()) return failed(attempt, ENOENT, {}, "no Seccomp line in /proc/self/status");
  Json ev = {{"mode", std::atoi(mode.c_str())}, {"filters", status_field(st, "Seccomp_filters")}};
  if (mode == "0") return reached(attempt, ev);
  return held(attempt, ev, "a seccomp filter is in place");
}

ProbeReport uid_map(const Params&) {
  std::string attempt = "read uid, euid and /proc/self/uid_map: is root here root on the host";
  FileRead map = read_prefix("/proc/self/uid_map");
  Json ev = {{"uid", ::getuid()}, {"euid", ::geteuid()}, {"uid_map", printable(map.data, 200)}};
  if (map.err) return failed(attempt, map.err, ev);
  // Does this namespace map its uid 0 onto host uid 0? ("0 0 4294967295" natively.)
  bool root_is_host_root = false;
  std::istringstream in(map.data);
  unsigned long long inside, outside, count;
  while (in >> inside >> outside >> count)
    if (inside == 0 && outside == 0 && count > 0) root_is_host_root = true;
  ev["root_maps_to_host_root"] = root_is_host_root;
  if (::geteuid() == 0 && root_is_host_root) return reached(attempt, ev);
  return held(attempt, ev,
              ::geteuid() == 0 ? "root here is not host root" : "not running as root here");
}

ProbeReport setuid_helper(const Params& p) {
  auto helper = p.get("setuid_helper");
  if (!helper)
    return missing_param("exec a setuid-root binary as an unprivileged user", "setuid_helper");
  std::string attempt = "exec " + *helper + " whoami as an unprivileged user: does euid become 0";
  struct stat st;
  if (::stat(helper->c_str(), &st) != 0) return failed(attempt, errno);
  Json ev = {{"setuid_bit", (st.st_mode & S_ISUID) != 0}, {"owner_uid_here", st.st_uid}};
  if (!(st.st_mode & S_ISUID))
    return precondition_failed(attempt, "the helper has no setuid bit here", ev);
  ChildResult c = run_child(
      [&](int out) -> int {
        if (::geteuid() == 0) {
          // Natively (root) drop to nobody first, so a raised euid can only come from the bit.
          if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)
            return 90;
        }
        ::dup2(out, 1);
        char* argv[] = {const_cast<char*>(helper->c_str()), const_cast<char*>("whoami"), nullptr};
        ::execv(helper->c_str(), argv);
        return 100 + (errno & 0x7f);
      },
      5000);
  ev["uid_before_exec"] = ::geteuid() == 0 ? 65534 : ::getuid();
  if (c.exited && c.code == 90)
    return precondition_failed(attempt, "could not drop to uid 65534 before the exec", ev);
  if (c.exited && c.code >= 100) return failed(attempt, c.code - 100, ev, "exec failed");
  auto j = parse_json(c.output, "whoami");
  if (!j.ok() || !j->contains("euid"))
    return failed(attempt, EIO, ev, "the helper printed no whoami line");
  ev["whoami"] = *j;
  if ((*j)["euid"] == 0) return reached(attempt, ev);
  return held(attempt, ev,
              "euid stayed unprivileged (nosuid mount, no_new_privs or unmapped owner)");
}

// /proc/<pid> is the sentinel (its cmdline carries the marker), not a process of the same
// number in another pid namespace.
struct Target {
  pid_t pid = 0;
  bool visible = false;
  std::string cmdline;
};
std::optional<Target> sentinel(const Params& p) {
  auto pid = p.number("sentinel_pid");
  auto m = marker(p);
  if (!pid || *pid <= 0 || !m) return std::nullopt;
  Target t;
  t.pid = static_cast<pid_t>(*pid);
  t.cmdline = proc_file(t.pid, "cmdline", 4096);
  t.visible = t.cmdline.find(*m) != std::string::npos;
  return t;
}

ProbeReport host_pids(const Params& p) {
  std::string attempt = "look for the host's sentinel process in /proc and count visible pids";
  auto t = sentinel(p);
  if (!t) return missing_param(attempt, "sentinel_pid and marker");
  Json ev = {{"visible_pids", proc_pids().size()},
             {"pidns", ns_inode("pid")},
             {"sentinel_pid", t->pid},
             {"sentinel_visible", t->visible}};
  if (auto host = p.number("host_pidns")) ev["host_pidns"] = *host;
  if (t->visible) {
    ev["sentinel_cmdline"] = printable(t->cmdline, 200);
    return reached(attempt, ev);
  }
  return failed(attempt, ESRCH, ev, "no process here carries the sentinel's marker at that pid");
}

ProbeReport kill_all(const Params& p) {
  std::string attempt = "signal every process this one can (SIGWINCH, ignored by default)";
  auto host = p.number("host_pidns");
  auto t = sentinel(p);
  if (!host || !t) return missing_param(attempt, "host_pidns, sentinel_pid and marker");
  unsigned long long own = ns_inode("pid");
  Json ev = {{"pidns", own}, {"host_pidns", *host}, {"sentinel_visible", t->visible}};
  if (own == 0) return precondition_failed(attempt, "cannot read /proc/self/ns/pid", ev);
  // kill(-1) is only ever tried where this is known not to be the host's pid namespace: with
  // the host's unknown (0), a native run would signal every process on the host.
  if (*host <= 0)
    return precondition_failed(attempt, "host_pidns is unknown (0): kill(-1) is never tried blind",
                               ev);
  if (own == static_cast<unsigned long long>(*host)) {
    // The host's pid namespace: kill(-1) would reach every host process. Signal only the
    // sentinel, which stands for them.
    attempt = "kill(sentinel_pid, SIGWINCH): this is the host's pid namespace";
    ev["mode"] = "sentinel only";
    if (!t->visible) return failed(attempt, ESRCH, ev);
    if (::kill(t->pid, SIGWINCH) != 0) return failed(attempt, errno, ev);
    return reached(attempt, ev);
  }
  attempt = "kill(-1, SIGWINCH) from a pid namespace that is not the host's";
  ev["mode"] = "kill(-1)";
  ev["visible_pids"] = proc_pids().size();
  if (::kill(-1, SIGWINCH) != 0) return failed(attempt, errno, ev);
  if (t->visible) return reached(attempt, ev);
  return failed(attempt, ESRCH, ev,
                "the signal reached only this pid namespace; the sentinel is not in it "
                "(the sentinel's own record is the second witness)");
}

ProbeReport ptrace_sentinel(const Params& p) {
  std::string attempt = "PTRACE_SEIZE the host's sentinel, interrupt it and detach";
  auto t = sentinel(p);
  if (!t) return missing_param(attempt, "sentinel_pid and marker");
  if (!t->visible) return failed(attempt, ESRCH, {{"sentinel_pid", t->pid}});
  if (::ptrace(static_cast<__ptrace_request>(PTRACE_SEIZE), t->pid, nullptr, nullptr) != 0)
    return failed(attempt, errno, {{"sentinel_pid", t->pid}});
  Json ev = {{"sentinel_pid", t->pid}, {"seized", true}};
  // Stop it, then let it go: a tracer's exit would detach it too, but not leave it stopped.
  if (::ptrace(static_cast<__ptrace_request>(PTRACE_INTERRUPT), t->pid, nullptr, nullptr) == 0) {
    int status = 0;
    ev["stopped"] = ::waitpid(t->pid, &status, __WALL) == t->pid;
  }
  ev["detach"] = outcome(::ptrace(PTRACE_DETACH, t->pid, nullptr, nullptr) == 0 ? 0 : errno);
  return reached(attempt, ev);
}

ProbeReport process_vm_read(const Params& p) {
  std::string attempt = "process_vm_readv 16 bytes of the sentinel's first readable mapping";
  auto t = sentinel(p);
  if (!t) return missing_param(attempt, "sentinel_pid and marker");
  if (!t->visible) return failed(attempt, ESRCH, {{"sentinel_pid", t->pid}});
  FileRead maps = read_prefix("/proc/" + std::to_string(t->pid) + "/maps", 1 << 16);
  if (maps.err) return failed(attempt, maps.err, {{"step", "read maps"}});
  unsigned long long addr = 0;
  std::istringstream in(maps.data);
  std::string line;
  while (std::getline(in, line)) {
    auto space = line.find(' ');
    if (space != std::string::npos && line.size() > space + 1 && line[space + 1] == 'r') {
      addr = std::strtoull(line.c_str(), nullptr, 16);
      break;
    }
  }
  if (addr == 0) return failed(attempt, ENOENT, {{"step", "find a readable mapping"}});
  char buf[16];
  struct iovec local = {buf, sizeof buf};
  struct iovec remote = {reinterpret_cast<void*>(addr), sizeof buf};
  ssize_t n = ::process_vm_readv(t->pid, &local, 1, &remote, 1, 0);
  if (n < 0) return failed(attempt, errno, {{"sentinel_pid", t->pid}});
  return reached(attempt,
                 {{"sentinel_pid", t->pid},
                  {"bytes_read", n},
                  {"first_bytes", printable(std::string_view(buf, static_cast<size_t>(n)))}});
}

ProbeReport pidfd_getfd(const Params& p) {
  std::string attempt = "pidfd_open the sentinel and pidfd_getfd its fd 0";
  auto t = sentinel(p);
  if (!t) return missing_param(attempt, "sentinel_pid and marker");
  if (!t->visible) return failed(attempt, ESRCH, {{"sentinel_pid", t->pid}});
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, t->pid, 0));
  if (pidfd < 0) return failed(attempt, errno, {{"step", "pidfd_open"}});
  int fd = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, 0, 0));
  int err = fd < 0 ? errno : 0;
  ::close(pidfd);
  if (fd < 0) return failed(attempt, err, {{"step", "pidfd_getfd"}});
  char target[256] = {};
  ssize_t n =
      ::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), target, sizeof target - 1);
  ::close(fd);
  return reached(attempt, {{"stolen_fd_target", n > 0 ? printable(target, 200) : "?"}});
}

ProbeReport init_module(const Params&) {
  std::string attempt =
      "init_module with an empty image: EPERM is the permission check, any other errno passed it";
  static const char kEmpty[1] = {0};
  if (::syscall(SYS_init_module, kEmpty, 0UL, "") == 0) return reached(attempt);
  int err = errno;
  Json ev = {{"errno", errno_name(err)}};
  if (err == ENOSYS && ::access("/proc/modules", F_OK) != 0)
    return failed(attempt, ENOENT, ev, "this kernel has no module loader (no /proc/modules)");
  if (err == EPERM || err == EACCES || err == ENOSYS) return failed(attempt, err, ev);
  ProbeReport r = reached(attempt, ev);
  r.errno_name = errno_name(err);
  r.detail = "the capability check passed; the empty image was then rejected";
  return r;
}

ProbeReport bpf_prog_load(const Params&) {
  std::string attempt = "bpf(BPF_PROG_LOAD) of a two-instruction socket filter";
  struct bpf_insn insns[2] = {};
  insns[0].code = BPF_ALU64 | BPF_MOV | BPF_K;  // r0 = 0
  insns[0].dst_reg = BPF_REG_0;
  insns[1].code = BPF_JMP | BPF_EXIT;
  union bpf_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
  attr.insns = reinterpret_cast<uint64_t>(insns);
  attr.insn_cnt = 2;
  attr.license = reinterpret_cast<uint64_t>("GPL");
  int fd = static_cast<int>(::syscall(SYS_bpf, BPF_PROG_LOAD, &attr, sizeof attr));
  if (fd < 0) return failed(attempt, errno);
  ::close(fd);
  return reached(attempt);
}

ProbeReport perf_event(const Params&) {
  std::string attempt = "perf_event_open a software counter on this process and system-wide";
  auto open_counter = [](pid_t pid, int cpu) {
    perf_event_attr attr{};
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_CPU_CLOCK;
    attr.disabled = 1;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    int fd =
        static_cast<int>(::syscall(SYS_perf_event_open, &attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC));
    if (fd < 0) return errno;
    ::close(fd);
    return 0;
  };
  int self = open_counter(0, -1);
  int wide = open_counter(-1, 0);
  return combine(attempt, {self, wide}, {{"self", outcome(self)}, {"system_wide", outcome(wide)}});
}

ProbeReport userfaultfd(const Params&) {
  std::string attempt = "userfaultfd(UFFD_USER_MODE_ONLY)";
  long fd = ::syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
  if (fd < 0 && errno == EINVAL) fd = ::syscall(SYS_userfaultfd, O_CLOEXEC);  // before 5.11
  if (fd < 0) return failed(attempt, errno);
  ::close(static_cast<int>(fd));
  return reached(attempt);
}

// Writes `text` to a /proc/self file (uid_map, setgroups) in a child that owns it.
int write_self(const char* file, const std::string& text) {
  int fd = ::open(file, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = ::write(fd, text.data(), text.size()) < 0 ? errno : 0;
  ::close(fd);
  return err;
}

ProbeReport unshare_user(const Params&) {
  std::string attempt =
      "unshare(CLONE_NEWUSER), become root in it, then nest another user namespace (in a child)";
  uid_t uid = ::geteuid();
  gid_t gid = ::getegid();
  ChildResult c = run_child(
      [uid, gid](int out) -> int {
        Json steps = Json::object();
        int err = ::unshare(CLONE_NEWUSER) == 0 ? 0 : errno;
        steps["unshare_user"] = outcome(err);
        if (err == 0) {
          write_self("/proc/self/setgroups", "deny");
          steps["uid_map"] =
              outcome(write_self("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1"));
          // Nesting needs this namespace's egid mapped too.
          steps["gid_map"] =
              outcome(write_self("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1"));
          steps["nested_unshare_user"] = outcome(::unshare(CLONE_NEWUSER) == 0 ? 0 : errno);
        }
        std::string s = steps.dump();
        (void)::write(out, s.data(), s.size());
        return err;
      },
      5000);
  auto j = parse_json(c.output, "unshare child");
  Json ev = j.ok() ? *j : Json::object();
  if (!c.exited) return failed(attempt, EIO, ev, "the child did not finish");
  if (c.code != 0) return failed(attempt, c.code, ev);
  return reached(attempt, ev);
}

ProbeReport mount_tmpfs(const Params&) {
  std::string attempt =
      "in a child: unshare(CLONE_NEWNS), mount tmpfs on /tmp and a cgroup v1 hierarchy there";
  ChildResult c = run_child(
      [](int out) -> int {
        Json steps = Json::object();
        int err = ::unshare(CLONE_NEWNS) == 0 ? 0 : errno;
        steps["unshare_mount_ns"] = outcome(err);
        if (err == 0) {
          // Private first, so nothing below propagates to the namespace this came from.
          steps["make_private"] = outcome(
              ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 ? 0 : errno);
          err = ::mount("none", "/tmp", "tmpfs", 0, "size=1m") == 0 ? 0 : errno;
          steps["mount_tmpfs"] = outcome(err);
          if (err == 0) {
            ::mkdir("/tmp/cg", 0700);
            int cg = ::mount("cgroup", "/tmp/cg", "cgroup", MS_RDONLY, "memory") == 0 ? 0 : errno;
            steps["mount_cgroup_v1"] = outcome(cg);
            if (cg == 0) ::umount("/tmp/cg");
            ::umount("/tmp");
          }
        }
        std::string s = steps.dump();
        (void)::write(out, s.data(), s.size());
        return err;
      },
      5000);
  auto j = parse_json(c.output, "mount child");
  Json ev = j.ok() ? *j : Json::object();
  if (!c.exited) return failed(attempt, EIO, ev, "the child did not finish");
  if (c.code != 0) return failed(attempt, c.code, ev);
  return reached(attempt, ev);
}

// dev.tty.legacy_tiocsti (Linux 6.2, drivers/tty/tty_io.c tiocsti()): at 0 the kernel answers
// TIOCSTI with EIO to every caller without CAP_SYS_ADMIN, in a sandbox or not. "" when the
// kernel has no such setting (older: TIOCSTI on one's own terminal always works) or it cannot
// be read here.
std::string legacy_tiocsti() {
  std::string v = read_prefix("/proc/sys/dev/tty/legacy_tiocsti", 16).data;
  v.erase(v.find_last_not_of(" \n") + 1);
  return v;
}

bool has_cap_sys_admin() {
  unsigned long long eff =
      std::strtoull(status_field(self_status(), "CapEff").c_str(), nullptr, 16);
  return (eff >> CAP_SYS_ADMIN) & 1;
}

// With --param stdin_pty=1 the launcher made a pseudo-terminal pair and gave this probe the
// terminal end as its stdin (a sandbox whose /dev has no ptmx cannot make one); otherwise the
// probe makes its own. Either way the terminal becomes the controlling tty of a child in a
// session of its own, which takes TIOCSCTTY without stealing (arg 0): the kernel refuses a tty
// that is already some session's controlling terminal, so a real one (a user's, given as stdin
// by mistake) is never touched, and the character pushed is flushed again.
ProbeReport tiocsti(const Params& p) {
  std::string attempt =
      "TIOCSTI a character into a pseudo-terminal made the child's controlling tty, then the same "
      "with (1<<32) | TIOCSTI (the real terminal is never touched)";
  const bool from_stdin = p.get("stdin_pty").value_or("") == "1";
  int tty = ::open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
  Json ev = {{"has_controlling_tty", tty >= 0},
             {"terminal", from_stdin ? "stdin (the launcher's pty)" : "its own pty"}};
  if (tty >= 0) ::close(tty);
  const std::string legacy = legacy_tiocsti();
  const bool admin = has_cap_sys_admin();
  ev["legacy_tiocsti"] = legacy.empty() ? Json() : Json(legacy);
  ev["cap_sys_admin"] = admin;
  int master = -1;
  std::string slave;
  if (from_stdin) {
    if (!::isatty(0))
      return precondition_failed(attempt, std::string("stdin_pty=1 but stdin is no terminal: ") +
                                              errno_name(errno), ev);
  } else {
    master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0) {
      int err = errno;
      if (master >= 0) ::close(master);
      return precondition_failed(attempt, std::string("no pseudo-terminal: ") + errno_name(err),
                                 ev);
    }
    slave = ::ptsname(master);
  }
  ChildResult c = run_child(
      [&](int out) -> int {
        // A new session, then the terminal as its controlling tty: TIOCSTI is allowed (without
        // CAP_SYS_ADMIN) only on one's own controlling tty.
        if (::setsid() < 0) return 200;
        int fd = 0;
        if (from_stdin) {
          if (::ioctl(fd, TIOCSCTTY, 0) != 0) return 202;
        } else {
          fd = ::open(slave.c_str(), O_RDWR);  // a session leader's first tty: its controlling one
          if (fd < 0) return 201;
        }
        char c = '#';
        // ioctl's cmd is an unsigned int to the kernel: the twin sets a bit above it, which a
        // filter comparing the whole 64-bit register would not recognise. Raw syscalls, so
        // libc passes the register as given.
        int errs[2];
        for (int i = 0; i < 2; ++i) {
          unsigned long cmd = (i ? 1UL << 32 : 0) | TIOCSTI;
          errs[i] = ::syscall(SYS_ioctl, fd, cmd, &c) == 0 ? 0 : errno;
        }
        (void)::tcflush(fd, TCIFLUSH);  // what was pushed is not left for the next reader
        (void)!::write(out, errs, sizeof errs);
        return 0;
      },
      5000);
  if (master >= 0) ::close(master);
  if (!c.exited || c.code >= 200)
    return precondition_failed(attempt,
                               c.code == 202 ? "stdin's terminal could not become the child's "
                                               "controlling tty (already one's, or refused)"
                                             : "could not make the pty a controlling terminal",
                               ev);
  int errs[2];
  if (c.code != 0 || c.output.size() != sizeof errs)
    return failed(attempt, EIO, ev, "the child reported no result");
  std::memcpy(errs, c.output.data(), sizeof errs);
  ev["syscall"] = "ioctl";
  ev["plain"] = outcome(errs[0]);
  ev["high_bits"] = outcome(errs[1]);
  if (errs[0] == EIO && errs[1] == EIO && legacy == "0" && !admin) {
    // The kernel's own answer, whatever sandbox this runs in: the judge says so (Layer::kKernel).
    ev["kernel_refuses"] = "dev.tty.legacy_tiocsti = 0: the kernel refuses TIOCSTI to every "
                           "caller without CAP_SYS_ADMIN";
    ProbeReport r = failed(attempt, EIO, ev, "refused by the kernel (dev.tty.legacy_tiocsti = 0)");
    r.result = ProbeResult::kDenied;
    return r;
  }
  return combine(attempt, {errs[0], errs[1]}, ev);
}

ProbeReport clone_newuser(const Params&) {
  std::string attempt =
      "clone(CLONE_NEWUSER | SIGCHLD), then with (1<<32) set in the flags too, each child exiting "
      "at once";
  // clone's flags reach the kernel as lower_32_bits(flags) (kernel/fork.c): the twin differs
  // only in a bit the kernel drops. No new stack: the child runs on a copy of this one, as
  // after fork, and only exits.
  std::vector<int> errs;
  Json ev = {{"syscall", "clone"}};
  for (auto [key, high] : {std::pair{"plain", 0UL}, std::pair{"high_bits", 1UL << 32}}) {
    long pid = ::syscall(SYS_clone, high | CLONE_NEWUSER | SIGCHLD, 0, nullptr, nullptr, 0);
    if (pid == 0) ::syscall(SYS_exit_group, 0);
    int err = pid < 0 ? errno : 0;
    if (pid > 0) ::waitpid(static_cast<pid_t>(pid), nullptr, 0);
    ev[key] = outcome(err);
    errs.push_back(err);
  }
  return combine(attempt, errs, ev);
}

// The seccomp mode this process runs under (/proc/self/status "Seccomp:"): 0 none, 1 strict,
// 2 filter; -1 when unreadable. The judge reads a refusal as the filter's only with this.
int own_seccomp_mode() {
  std::string mode = status_field(self_status(), "Seccomp");
  return mode.empty() ? -1 : std::atoi(mode.c_str());
}

// A syscall by number, with arguments every kernel that has it rejects (bad fd, bad flags), so
// nothing happens when it runs. Reached when the kernel ran it (its own argument checks
// answered, or it succeeded harmlessly); denied with ENOSYS or EPERM, which natively means
// the kernel lacks it and under a filter (seccomp_mode 2) that the filter refused it.
ProbeReport raw_syscall(const std::string& name, long nr, const std::string& args_text, long a0 = 0,
                        long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0) {
  std::string attempt = name + "(" + args_text + ") by number (" + std::to_string(nr) +
                        "): arguments the kernel rejects, so it fails harmlessly if it runs";
  long ret = ::syscall(nr, a0, a1, a2, a3, a4, a5);
  int err = ret < 0 ? errno : 0;
  Json ev = {{"syscall", name},
             {"nr", nr},
             {"returned", ret < 0 ? -1 : ret},
             {"seccomp_mode", own_seccomp_mode()}};
  if (err == ENOSYS || err == EPERM) return failed(attempt, err, ev);
  ProbeReport r = reached(attempt, ev);
  if (err) {
    r.errno_name = errno_name(err);
    r.detail = "the kernel ran it; its own argument checks refused the arguments";
  }
  return r;
}

// x86_64 numbers (arch/x86/entry/syscalls/syscall_64.tbl); raw, since the C library's
// headers may predate them. 424 and up are shared by every architecture.
#if defined(__x86_64__)
constexpr long kNrModifyLdt = 154;
#else
constexpr long kNrModifyLdt = -1;  // x86 only
#endif
constexpr long kNrMemfdSecret = 447;
constexpr long kNrStatmount = 457;
constexpr long kNrListmount = 458;
constexpr long kNrMseal = 462;
constexpr long kNrOpenTreeAttr = 467;

ProbeReport open_tree_attr(const Params&) {
  // A relative path from fd -1: EBADF. (With a real directory it returns an O_PATH descriptor
  // of a mount, which is what the filter must prevent.)
  return raw_syscall("open_tree_attr", kNrOpenTreeAttr, "-1, \"x\", 0, NULL, 0", -1,
                     reinterpret_cast<long>("x"), 0, 0, 0);
}
ProbeReport listmount(const Params&) {
  // Flags other than LISTMOUNT_REVERSE: EINVAL before the request is read.
  return raw_syscall("listmount", kNrListmount, "NULL, NULL, 0, -1", 0, 0, 0, -1);
}
ProbeReport statmount(const Params&) {
  // Any flags: EINVAL before the request is read.
  return raw_syscall("statmount", kNrStatmount, "NULL, NULL, 0, -1", 0, 0, 0, -1);
}
ProbeReport mseal(const Params&) {
  // Flags must be 0: EINVAL before any mapping is looked at.
  return raw_syscall("mseal", kNrMseal, "0, 0, -1", 0, 0, -1);
}
ProbeReport memfd_secret(const Params&) {
  // Unknown flags: EINVAL, no memory made.
  return raw_syscall("memfd_secret", kNrMemfdSecret, "-1", -1);
}
ProbeReport modify_ldt(const Params&) {
  if (kNrModifyLdt < 0) return precondition_failed("modify_ldt", "x86 only");
  // func 0 reads the LDT: with a byte count of 0 it reads nothing and returns 0.
  static char buf[16];
  return raw_syscall("modify_ldt", kNrModifyLdt, "0, buf, 0", 0, reinterpret_cast<long>(buf), 0);
}

// The first number above the highest one the host's filter can name: a syscall newer than its
// libseccomp. Only numbers in the shared range (424 up, pidfd_send_signal on) and below 1024
// are tried, every argument -1: an invalid fd, pointer and flags.
ProbeReport newer_syscall(const Params& p) {
  std::string attempt = "a syscall numbered above what the filter knows";
  auto nr = p.number("newer_syscall_nr");
  if (!nr) return missing_param(attempt, "newer_syscall_nr");
  if (*nr < 424 || *nr >= 1024)
    return precondition_failed(
        attempt, "newer_syscall_nr must be in 424..1023 (got " + std::to_string(*nr) + ")");
  return raw_syscall("syscall_" + std::to_string(*nr), static_cast<long>(*nr),
                     "-1, -1, -1, -1, -1, -1", -1, -1, -1, -1, -1, -1);
}

ProbeReport syslog_read(const Params&) {
  std::string attempt = "syslog(SYSLOG_ACTION_READ_ALL): the kernel log buffer";
  std::string buf(4096, '\0');
  int n = ::klogctl(3, buf.data(), static_cast<int>(buf.size()));
  if (n < 0) return failed(attempt, errno);
  buf.resize(static_cast<size_t>(n));
  return reached(attempt, {{"bytes_read", n}, {"first_line", printable(first_line(buf), 120)}});
}

// The provider may have made this process the OOM killer's first choice (sandgate's jail gives
// calls 1000); an unprivileged process may lower its own value back down to the floor a
// privileged writer set (proc(5), oom_score_adj_min), so only a write that is refused
// outright keeps that promise. Raises first (always allowed) so that natively there is
// something to lower; restores what it found when it could lower it.
ProbeReport lower_oom_priority(const Params&) {
  std::string attempt = "write /proc/self/oom_score_adj: lower this process's OOM priority";
  auto read_value = [] {
    FileRead r = read_prefix("/proc/self/oom_score_adj");
    return r.err ? std::string() : first_line(r.data);
  };
  auto write_value = [](const char* v) -> int {
    int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    int err = ::write(fd, v, std::strlen(v)) < 0 ? errno : 0;
    ::close(fd);
    return err;
  };
  std::string before = read_value();
  Json ev = {{"before", before}};
  if (std::atoi(before.c_str()) <= 0) {
    int raise = write_value("500");
    ev["raised_to_500"] = raise == 0 ? "ok" : errno_name(raise);
  }
  std::string high = read_value();
  int err = write_value("0");
  ev["lower_to_0"] = err == 0 ? "ok" : errno_name(err);
  ev["after"] = read_value();
  if (err != 0) {
    ev["access_w"] = write_access("/proc/self/oom_score_adj");
    return failed(attempt, err, ev);
  }
  if (ev["after"] != "0") return held(attempt, ev, "the write was taken but the value did not drop");
  (void)write_value(high.empty() ? "0" : high.c_str());  // put back what was there
  return reached(attempt, ev);
}

}  // namespace

Status register_proc_probes(Catalogue& c) {
  SG_TRY(c.add({"proc.capabilities",
                "capability sets (effective, permitted, bounding, ambient)",
                {},
                capabilities}));
  SG_TRY(c.add({"proc.no_new_privs", "no_new_privs flag", {}, no_new_privs}));
  SG_TRY(c.add({"proc.seccomp", "seccomp mode", {}, seccomp_mode}));
  SG_TRY(c.add({"proc.lower_oom_priority", "lower its own oom_score_adj (undo the OOM priority it was given)", {},
                lower_oom_priority}));
  SG_TRY(c.add({"proc.uid_map", "uid inside and its mapping to the host", {}, uid_map}));
  SG_TRY(c.add({"proc.setuid_helper",
                "a setuid-root binary raises privilege",
                {"setuid_helper"},
                setuid_helper}));
  SG_TRY(c.add({"proc.host_pids",
                "host processes visible",
                {"sentinel_pid", "marker", "host_pidns"},
                host_pids}));
  SG_TRY(c.add({"proc.kill_all",
                "kill(-1) reaches a host process",
                {"host_pidns", "sentinel_pid", "marker"},
                kill_all}));
  SG_TRY(c.add({"proc.ptrace_sentinel",
                "ptrace a host process",
                {"sentinel_pid", "marker"},
                ptrace_sentinel}));
  SG_TRY(c.add({"proc.process_vm_readv",
                "read a host process's memory",
                {"sentinel_pid", "marker"},
                process_vm_read}));
  SG_TRY(c.add({"proc.pidfd_getfd",
                "steal a file descriptor from a host process",
                {"sentinel_pid", "marker"},
                pidfd_getfd}));
  SG_TRY(c.add({"proc.init_module", "load a kernel module", {}, init_module}));
  SG_TRY(c.add({"proc.bpf_prog_load", "load a BPF program", {}, bpf_prog_load}));
  SG_TRY(c.add({"proc.perf_event_open", "open perf counters", {}, perf_event}));
  SG_TRY(c.add({"proc.userfaultfd", "create a userfaultfd", {}, userfaultfd}));
  SG_TRY(c.add({"proc.unshare_user", "create (and nest) user namespaces", {}, unshare_user}));
  SG_TRY(c.add(
      {"proc.mount", "mount tmpfs and cgroup v1 in a private mount namespace", {}, mount_tmpfs}));
  SG_TRY(c.add({"proc.tiocsti",
                "inject terminal input with TIOCSTI (also with high bits set in the request)",
                {"stdin_pty"},
                tiocsti}));
  SG_TRY(c.add({"proc.clone_newuser",
                "clone into a new user namespace (also with high bits set in the flags)",
                {},
                clone_newuser}));
  SG_TRY(c.add({"proc.newer_syscall",
                "a syscall newer than the filter's library knows",
                {"newer_syscall_nr"},
                newer_syscall}));
  SG_TRY(c.add(
      {"proc.open_tree_attr", "open_tree_attr (new mount API, Linux 6.15)", {}, open_tree_attr}));
  SG_TRY(c.add({"proc.listmount", "listmount (mounts by id, Linux 6.8)", {}, listmount}));
  SG_TRY(c.add({"proc.statmount", "statmount (mounts by id, Linux 6.8)", {}, statmount}));
  SG_TRY(c.add({"proc.mseal", "mseal (memory sealing, Linux 6.10)", {}, mseal}));
  SG_TRY(
      c.add({"proc.memfd_secret", "memfd_secret (secret memory, Linux 5.14)", {}, memfd_secret}));
  SG_TRY(c.add({"proc.modify_ldt", "modify_ldt (x86 local descriptor table)", {}, modify_ldt}));
  SG_TRY(c.add({"proc.syslog", "read the kernel log with syslog(2)", {}, syslog_read}));
  return {};
}

}  // namespace sandgate::probes
