#include "providers/seccomp_policy.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/defer.h"
#include "core/fd.h"
#include "core/log.h"

namespace sandgate::providers {

const std::vector<SeccompRule>& seccomp_denied_syscalls() {
  static const std::vector<SeccompRule> rules = {
      {"mount", "no new mounts"},
      {"umount2", "no unmounting the jail's view"},
      {"pivot_root", "no changing the root"},
      {"chroot", "no changing the root"},
      {"move_mount", "new mount API"},
      {"open_tree", "new mount API"},
      // Linux 6.15; unknown to libseccomp 2.5, which leaves it to ENOSYS (and says so).
      {"open_tree_attr", "new mount API"},
      {"fsopen", "new mount API"},
      {"fsmount", "new mount API"},
      {"fsconfig", "new mount API"},
      {"fspick", "new mount API"},
      {"mount_setattr", "new mount API"},
      {"ptrace", "no tracing other processes"},
      {"process_vm_readv", "no reading another process's memory"},
      {"process_vm_writev", "no writing another process's memory"},
      {"process_madvise", "no advising on another process's memory"},
      {"pidfd_getfd", "no taking another process's file descriptors"},
      {"kcmp", "no comparing another process's kernel objects"},
      {"bpf", "no BPF programs"},
      {"perf_event_open", "no perf events (kernel surface, side channels)"},
      {"keyctl", "no kernel keyrings"},
      {"add_key", "no kernel keyrings"},
      {"request_key", "no kernel keyrings"},
      {"kexec_load", "no kernel replacement"},
      {"kexec_file_load", "no kernel replacement"},
      {"init_module", "no kernel modules"},
      {"finit_module", "no kernel modules"},
      {"delete_module", "no kernel modules"},
      {"open_by_handle_at", "no opening files by handle (escapes bind mounts)"},
      {"name_to_handle_at", "no file handles"},
      {"userfaultfd", "no userfaultfd (exploit primitive)"},
      {"io_uring_setup", "no io_uring (bypasses the syscall filter)"},
      {"io_uring_enter", "no io_uring"},
      {"io_uring_register", "no io_uring"},
      {"unshare", "no new namespaces"},
      {"setns", "no joining namespaces"},
      {"clone", "only without namespace flags"},
      {"clone3", "ENOSYS, so libc falls back to clone, whose flags can be checked"},
      {"socket", "no AF_VSOCK or AF_PACKET sockets"},
      {"ioctl", "no TIOCSTI (typing into a terminal)"},
      {"reboot", "no reboot"},
      {"swapon", "no swap changes"},
      {"swapoff", "no swap changes"},
      {"acct", "no process accounting"},
      {"quotactl", "no quota changes"},
      {"quotactl_fd", "no quota changes"},
      {"syslog", "no kernel log"},
      {"lookup_dcookie", "kernel surface"},
      {"vhangup", "no terminal hangup"},
      {"sethostname", "no renaming the host"},
      {"setdomainname", "no renaming the host"},
      {"settimeofday", "no setting the clock"},
      {"clock_settime", "no setting the clock"},
      {"iopl", "no raw I/O port access"},
      {"ioperm", "no raw I/O port access"},
  };
  return rules;
}

// What ordinary programs (shells, coreutils, python3, compilers, static binaries) need: the
// allow list of Docker's and containers/common's default profiles for x86_64 and the generic
// 64-bit table, minus what needs a capability a call never has (those answer EPERM above or
// ENOSYS below) and minus the deny list. Names another 64-bit architecture lacks (open, stat,
// arch_prctl on arm64) resolve to libseccomp pseudo-numbers there and add nothing.
const std::vector<std::string>& seccomp_allowed_syscalls() {
  // Grouped by what they are for, several to a line.
  // clang-format off
  static const std::vector<std::string> names = {
      // Files and directories.
      "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev",
      "preadv2", "pwritev2", "open", "openat", "openat2", "creat", "close", "close_range",
      "lseek", "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "access",
      "faccessat", "faccessat2", "readlink", "readlinkat", "getdents", "getdents64", "getcwd",
      "chdir", "fchdir", "mkdir", "mkdirat", "rmdir", "rename", "renameat", "renameat2", "link",
      "linkat", "symlink", "symlinkat", "unlink", "unlinkat", "chmod", "fchmod", "fchmodat",
      "fchmodat2", "chown", "fchown", "lchown", "fchownat", "umask", "truncate", "ftruncate",
      "fallocate", "fsync", "fdatasync", "sync", "syncfs", "sync_file_range", "fadvise64",
      "readahead", "flock", "fcntl", "dup", "dup2", "dup3", "pipe", "pipe2", "mknod", "mknodat",
      "utime", "utimes", "utimensat", "futimesat", "copy_file_range", "sendfile", "splice",
      "tee", "vmsplice", "cachestat", "getxattr", "lgetxattr", "fgetxattr", "setxattr",
      "lsetxattr", "fsetxattr", "listxattr", "llistxattr", "flistxattr", "removexattr",
      "lremovexattr", "fremovexattr", "getxattrat", "setxattrat", "listxattrat",
      "removexattrat", "inotify_init", "inotify_init1", "inotify_add_watch",
      "inotify_rm_watch",
      // ioctl: TIOCSTI is refused by the argument rules.
      "ioctl",
      // Memory.
      "brk", "mmap", "munmap", "mprotect", "mremap", "madvise", "mincore", "msync", "mlock",
      "mlock2", "munlock", "mlockall", "munlockall", "membarrier", "memfd_create", "pkey_alloc",
      "pkey_free", "pkey_mprotect", "remap_file_pages", "map_shadow_stack",
      // Processes and threads. clone: namespace flags are refused by the argument rules.
      "clone", "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid",
      "kill", "tkill", "tgkill", "getpid", "getppid", "gettid", "getpgid", "setpgid", "getpgrp",
      "getsid", "setsid", "set_tid_address", "set_robust_list", "get_robust_list", "rseq",
      "arch_prctl", "get_thread_area", "set_thread_area", "prctl", "process_mrelease",
      // pidfds act only on processes the caller can already see and signal (its own pid
      // namespace), with kill()'s permission checks; pidfd_getfd is denied above.
      "pidfd_open", "pidfd_send_signal",
      // Credentials: inside the user namespace, without capabilities, the kernel refuses what
      // is not the caller's to change.
      "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups",
      "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups",
      "setfsuid", "setfsgid", "capget", "capset",
      // Limits and scheduling.
      "getrlimit", "setrlimit", "prlimit64", "getrusage", "getpriority", "setpriority",
      "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam",
      "sched_setparam", "sched_getscheduler", "sched_setscheduler", "sched_get_priority_max",
      "sched_get_priority_min", "sched_rr_get_interval", "sched_getattr", "sched_setattr",
      "ioprio_get", "ioprio_set", "getcpu",
      // Self-restriction: a program may narrow itself further. Landlock is unprivileged
      // self-sandboxing (a ruleset only ever removes access); seccomp filters only add.
      "seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
      // Signals.
      "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigsuspend",
      "rt_sigtimedwait", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack", "signalfd",
      "signalfd4", "pause", "restart_syscall",
      // Time (reading; adjtimex/clock_adjtime change the clock only with CAP_SYS_TIME).
      "alarm", "nanosleep", "clock_nanosleep", "clock_gettime", "clock_getres", "gettimeofday",
      "time", "times", "getitimer", "setitimer", "timer_create", "timer_settime",
      "timer_gettime", "timer_getoverrun", "timer_delete", "timerfd_create", "timerfd_settime",
      "timerfd_gettime", "adjtimex", "clock_adjtime",
      // Waiting and events.
      "futex", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue", "poll", "ppoll",
      "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
      "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2",
      // Asynchronous I/O (the old AIO interface; io_uring is denied above).
      "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
      // Sockets: socket is narrowed by the argument rules.
      "socket", "socketpair", "bind", "listen", "accept", "accept4", "connect", "getsockname",
      "getpeername", "getsockopt", "setsockopt", "sendto", "recvfrom", "sendmsg", "recvmsg",
      "sendmmsg", "recvmmsg", "shutdown",
      // System V and POSIX IPC (the run's own ipc namespace).
      "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl",
      "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend",
      "mq_timedreceive", "mq_notify", "mq_getsetattr",
      // The system, read-only.
      "uname", "sysinfo", "getrandom",
  };
  // clang-format on
  return names;
}

const std::vector<SeccompRule>& seccomp_absent_syscalls() {
  static const std::vector<SeccompRule> rules = {
      // x86 only: a local descriptor table is for 16-bit and Wine code, and the syscall has a
      // history of kernel bugs (CVE-2015-5157, CVE-2017-17053). ENOSYS is what a kernel built
      // without CONFIG_MODIFY_LDT_SYSCALL answers. (Docker allows it; a tool call needs none.)
      {"modify_ldt", "no local descriptor tables (as CONFIG_MODIFY_LDT_SYSCALL=n)"},
      // Memory removed from the kernel's direct map: unreadable by the host's own inspection
      // of the run, unswappable, and needed by nothing ordinary. A kernel without
      // CONFIG_SECRETMEM (or booted with secretmem.enable=0) answers ENOSYS too.
      {"memfd_secret", "no secret memory (as CONFIG_SECRETMEM=n)"},
      // Linux 6.10: seals a process's own mappings. Harmless to the host, but new mm surface
      // that nothing here needs; callers (Chromium, glibc's tunable) treat ENOSYS as "older
      // kernel". Unknown to libseccomp 2.5, so it could not be allowed by name anyway.
      {"mseal", "new memory-sealing call: callers fall back on ENOSYS"},
      // Linux 6.8: enumerate mounts by id, across mount namespaces the caller can name.
      // /proc/self/mountinfo covers what programs need; util-linux falls back to it on ENOSYS
      // (an EPERM would be an error there). Same family as the denied new mount API.
      {"listmount", "mount enumeration by id: /proc/self/mountinfo instead"},
      {"statmount", "mount enumeration by id: /proc/self/mountinfo instead"},
      // Linux 6.8: LSM attributes of the caller; nothing ordinary reads them this way.
      {"lsm_get_self_attr", "new LSM interface"},
      {"lsm_set_self_attr", "new LSM interface"},
      {"lsm_list_modules", "new LSM interface"},
      // NUMA placement: set_mempolicy/mbind/migrate_pages need CAP_SYS_NICE for what matters
      // and move pages of other processes; libnuma reads ENOSYS as "no NUMA".
      {"get_mempolicy", "no NUMA policy (libnuma reads ENOSYS as no NUMA)"},
      {"set_mempolicy", "no NUMA policy"},
      {"set_mempolicy_home_node", "no NUMA policy"},
      {"mbind", "no NUMA policy"},
      {"migrate_pages", "no moving another process's pages"},
      {"move_pages", "no moving another process's pages"},
      // fanotify needs CAP_SYS_ADMIN for all but a reduced mode nothing here uses.
      {"fanotify_init", "no filesystem-wide notification"},
      {"fanotify_mark", "no filesystem-wide notification"},
      // Obsolete interfaces the kernel keeps for old binaries.
      {"uselib", "obsolete"},
      {"ustat", "obsolete"},
      {"sysfs", "obsolete"},
      {"_sysctl", "obsolete"},
  };
  return rules;
}

namespace {

// personality(2) takes an unsigned int. Allowed: the query (0xffffffff) and the values
// programs set in earnest: PER_LINUX (0), PER_LINUX32 (8, setarch linux32) and UNAME26
// (0x20000), alone and together. Refused (ENOSYS) is every flag that weakens the programs a
// call execs: ADDR_NO_RANDOMIZE (no ASLR), READ_IMPLIES_EXEC, MMAP_PAGE_ZERO, ADDR_LIMIT_*
// (Docker's default profile allows the same five values).
constexpr scmp_datum_t kPersonalities[] = {0x0, 0x8, 0x20000, 0x20008, 0xffffffff};

// The kernel reads these arguments as 32-bit integers: compare the low half only.
constexpr scmp_datum_t kLow32 = 0xffffffffu;
constexpr scmp_datum_t kHigh32 = ~kLow32;

// Namespace flags clone(2) may not carry. CLONE_NEWTIME (0x80) is not among them: clone()
// reads the low byte as the exit signal (kernel/fork.c: exit_signal = lower_32_bits(flags) &
// CSIGNAL), so only clone3 and unshare can make a time namespace, and both are refused.
constexpr scmp_datum_t kNamespaceFlags[] = {CLONE_NEWNS,    CLONE_NEWUTS, CLONE_NEWIPC,
                                            CLONE_NEWUSER,  CLONE_NEWPID, CLONE_NEWNET,
                                            CLONE_NEWCGROUP};

// One libseccomp filter being built; names it cannot resolve are collected, not dropped.
class FilterBuilder {
 public:
  FilterBuilder(uint32_t default_action, std::vector<std::string>& unknown)
      : ctx_(seccomp_init(default_action)), unknown_(unknown) {}
  ~FilterBuilder() {
    if (ctx_) seccomp_release(ctx_);
  }
  FilterBuilder(const FilterBuilder&) = delete;
  FilterBuilder& operator=(const FilterBuilder&) = delete;

  Status start() {
    if (!ctx_) return logic_error("seccomp_init", "libseccomp could not allocate a filter");
    // Another ABI's syscall (i386 via int $0x80, x32) kills the whole process: its numbers
    // match none of these rules, and a thread-only kill would leave the rest running.
    int rc = seccomp_attr_set(ctx_, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    if (rc != 0) return sys_error(-rc, "seccomp bad-architecture action");
    // A binary tree of syscall numbers rather than a chain: a few comparisons per call.
    rc = seccomp_attr_set(ctx_, SCMP_FLTATR_CTL_OPTIMIZE, 2);
    if (rc != 0) return sys_error(-rc, "seccomp filter optimization");
    return {};
  }

  Status add(uint32_t action, const std::string& name,
             const std::vector<struct scmp_arg_cmp>& args = {}) {
    int nr = seccomp_syscall_resolve_name(name.c_str());
    if (nr == __NR_SCMP_ERROR) {
      // Newer than this libseccomp: it has no number for it, so no rule. The call falls to
      // the allow list's default (ENOSYS): refused, whatever the list meant.
      if (std::find(unknown_.begin(), unknown_.end(), name) == unknown_.end())
        unknown_.push_back(name);
      return {};
    }
    int rc = seccomp_rule_add_array(ctx_, action, nr, static_cast<unsigned>(args.size()),
                                    args.empty() ? nullptr : args.data());
    if (rc != 0) return sys_error(-rc, "seccomp rule", name);
    return {};
  }

  // Exports the compiled program through a memfd (libseccomp 2.5 has no in-memory export).
  Result<std::vector<struct sock_filter>> compile() {
    int fd = ::memfd_create("sandgate-seccomp", MFD_CLOEXEC);
    if (fd < 0) return sys_error("memfd_create");
    UniqueFd memfd(fd);
    int rc = seccomp_export_bpf(ctx_, fd);
    if (rc != 0) return sys_error(-rc, "seccomp_export_bpf");
    off_t size = ::lseek(fd, 0, SEEK_END);
    if (size <= 0 || size % sizeof(struct sock_filter) != 0)
      return logic_error("seccomp_export_bpf", "unexpected program size " + std::to_string(size));
    // BPF_MAXINSNS: the kernel refuses a longer classic program.
    if (static_cast<size_t>(size) / sizeof(struct sock_filter) > BPF_MAXINSNS)
      return logic_error("seccomp_export_bpf", "program longer than BPF_MAXINSNS");
    std::vector<struct sock_filter> out(static_cast<size_t>(size) / sizeof(struct sock_filter));
    if (::pread(fd, out.data(), static_cast<size_t>(size), 0) != size)
      return sys_error("read seccomp program");
    return out;
  }

 private:
  scmp_filter_ctx ctx_;
  std::vector<std::string>& unknown_;
};

// A comparison of one 32-bit argument: its low half, or (weakened) the whole register.
struct scmp_arg_cmp equals32(unsigned arg, scmp_datum_t value, bool full_width) {
  return {arg, SCMP_CMP_MASKED_EQ, full_width ? ~scmp_datum_t{0} : kLow32, value};
}

Status add_allow_list(FilterBuilder& f) {
  const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
  for (const auto& name : seccomp_allowed_syscalls()) SG_TRY(f.add(SCMP_ACT_ALLOW, name));
  for (scmp_datum_t value : kPersonalities)
    SG_TRY(f.add(SCMP_ACT_ALLOW, "personality", {equals32(0, value, false)}));
  for (const auto& rule : seccomp_denied_syscalls()) {
    // These three are allowed here and narrowed by the argument rules.
    if (rule.syscall == "socket" || rule.syscall == "ioctl" || rule.syscall == "clone") continue;
    // clone3 passes its flags in memory the filter cannot read: ENOSYS, and glibc falls back
    // to clone (Docker's default profile does the same). That is this program's default, and
    // libseccomp refuses a rule that repeats the default (EACCES), so it gets none.
    if (rule.syscall == "clone3") continue;
    SG_TRY(f.add(eperm, rule.syscall));
  }
  return {};
}

Status add_argument_rules(FilterBuilder& f, bool full_width) {
  const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
  // socket(int family, ...): no vsock (the hypervisor's side is outside every namespace) and
  // no packet sockets (raw frames below the network namespace's filtering).
  for (int family : {AF_VSOCK, AF_PACKET})
    SG_TRY(f.add(eperm, "socket", {equals32(0, static_cast<scmp_datum_t>(family), full_width)}));
  // ioctl(unsigned int fd, unsigned int cmd, ...): no TIOCSTI.
  SG_TRY(f.add(eperm, "ioctl", {equals32(1, TIOCSTI, full_width)}));
  // clone(unsigned long flags, ...), read as lower_32_bits(flags): one rule per namespace
  // flag, (flags & F) == F, since the comparisons of one rule are ANDed. The mask F alone
  // ignores the high half; the weakened rule also demands that it be zero.
  for (scmp_datum_t flag : kNamespaceFlags) {
    scmp_datum_t mask = full_width ? (flag | kHigh32) : flag;
    SG_TRY(f.add(eperm, "clone", {{0, SCMP_CMP_MASKED_EQ, mask, flag}}));
  }
  return {};
}

}  // namespace

int seccomp_highest_known_syscall() {
  // x86_64 numbers stay below 1024 (syscall_64.tbl); a name means libseccomp knows it.
  static const int highest = [] {
    int h = -1;
    for (int nr = 0; nr < 1024; ++nr) {
      char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
      if (name) h = nr;
      std::free(name);
    }
    return h;
  }();
  return highest;
}

Result<SeccompProgram> build_seccomp_program(const SeccompOptions& options) {
  SeccompProgram program;
  {
    FilterBuilder allow(SCMP_ACT_ERRNO(ENOSYS), program.unknown_syscalls);
    SG_TRY(allow.start());
    SG_TRY(std::move(add_allow_list(allow)).context("seccomp allow list"));
    SG_ASSIGN_OR_RETURN(program.allow_list, allow.compile());
  }
  {
    FilterBuilder rules(SCMP_ACT_ALLOW, program.unknown_syscalls);
    SG_TRY(rules.start());
    SG_TRY(std::move(add_argument_rules(rules, options.full_width_compare))
               .context("seccomp argument rules"));
    SG_ASSIGN_OR_RETURN(program.argument_rules, rules.compile());
  }
  {
    FilterBuilder notify(SCMP_ACT_ALLOW, program.unknown_syscalls);
    SG_TRY(notify.start());
    SG_TRY(std::move(notify.add(SCMP_ACT_NOTIFY, "sysinfo")).context("seccomp sysinfo notify"));
    SG_ASSIGN_OR_RETURN(program.sysinfo_notify, notify.compile());
  }
  program.highest_known_syscall = seccomp_highest_known_syscall();
  return program;
}

namespace {

// The layout of a program's bytes: a header, then the three programs' instructions back to back.
struct ProgramHeader {
  uint32_t magic = 0x53474644;  // "SGFD" (three programs)
  uint32_t allow_list = 0;      // instructions in program 1
  uint32_t argument_rules = 0;  // instructions in program 2
  uint32_t sysinfo_notify = 0;  // instructions in program 3
  int32_t highest_known_syscall = -1;
};

}  // namespace

std::string serialize_seccomp_program(const SeccompProgram& p) {
  ProgramHeader h;
  h.allow_list = static_cast<uint32_t>(p.allow_list.size());
  h.argument_rules = static_cast<uint32_t>(p.argument_rules.size());
  h.sysinfo_notify = static_cast<uint32_t>(p.sysinfo_notify.size());
  h.highest_known_syscall = p.highest_known_syscall;
  std::string bytes(reinterpret_cast<const char*>(&h), sizeof h);
  for (const auto* prog : {&p.allow_list, &p.argument_rules, &p.sysinfo_notify})
    bytes.append(reinterpret_cast<const char*>(prog->data()),
                 prog->size() * sizeof(struct sock_filter));
  return bytes;
}

Result<SeccompProgram> parse_seccomp_program(std::string_view bytes) {
  ProgramHeader h;
  if (bytes.size() < sizeof h)
    return logic_error("read seccomp program", "not a sandgate seccomp program");
  std::memcpy(&h, bytes.data(), sizeof h);
  if (h.magic != ProgramHeader{}.magic)
    return logic_error("read seccomp program", "not a sandgate seccomp program");
  // The counts checked against the bytes before anything is sized by them.
  const uint64_t instructions =
      uint64_t{h.allow_list} + uint64_t{h.argument_rules} + uint64_t{h.sysinfo_notify};
  if (instructions * sizeof(struct sock_filter) > bytes.size() - sizeof h)
    return logic_error("read seccomp program", "the program is cut short");
  SeccompProgram p;
  p.allow_list.resize(h.allow_list);
  p.argument_rules.resize(h.argument_rules);
  p.sysinfo_notify.resize(h.sysinfo_notify);
  p.highest_known_syscall = h.highest_known_syscall;
  size_t at = sizeof h;
  for (auto* prog : {&p.allow_list, &p.argument_rules, &p.sysinfo_notify}) {
    size_t n = prog->size() * sizeof(struct sock_filter);
    if (bytes.size() - at < n)
      return logic_error("read seccomp program", "the program is cut short");
    std::memcpy(prog->data(), bytes.data() + at, n);
    at += n;
  }
  if (at != bytes.size())
    return logic_error("read seccomp program", "bytes after the third program");
  return p;
}

Result<SeccompProgram> read_seccomp_program(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return sys_error("read seccomp program: fstat");
  // The sealed memfd's size is fixed; a program is a few kilobytes.
  if (st.st_size < 0 || st.st_size > (1 << 20))
    return logic_error("read seccomp program", "not a sandgate seccomp program");
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  if (::pread(fd, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size()))
    return logic_error("read seccomp program", "the program is cut short");
  return parse_seccomp_program(bytes);
}

}  // namespace sandgate::providers
