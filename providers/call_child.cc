// Compiled without sanitizers (providers/CMakeLists.txt): the child runs it on a stack the
// sanitizer does not know, sharing the supervisor's memory, and must call nothing of theirs.
#include "providers/call_child.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

namespace sandgate::providers {
namespace {

// A system call that leaves errno alone: the result, or -errno. errno is thread-local, and a
// vfork child has no thread-local storage of its own: glibc's wrappers would write the
// supervisor's errno (harmless while it waits, but nothing here needs them), and some keep
// state a child must not touch in memory it shares.
long sys(long n, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0) {
#if defined(__x86_64__)
  long ret;
  register long r10 __asm__("r10") = a4;
  register long r8 __asm__("r8") = a5;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(n), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8)
                   : "rcx", "r11", "memory");
  return ret;
#elif defined(__aarch64__)
  register long x8 __asm__("x8") = n;
  register long x0 __asm__("x0") = a1;
  register long x1 __asm__("x1") = a2;
  register long x2 __asm__("x2") = a3;
  register long x3 __asm__("x3") = a4;
  register long x4 __asm__("x4") = a5;
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4) : "memory");
  return x0;
#else
#error "call_child.cc: raw system calls are written for x86_64 and aarch64"
#endif
}

template <typename P>
long arg(P* p) {
  return reinterpret_cast<long>(p);
}

[[noreturn]] void exit_now(int code) {
  sys(SYS_exit_group, code);
  __builtin_unreachable();
}

size_t length(const char* s) {
  size_t n = 0;
  while (s[n]) ++n;
  return n;
}

// `step`, then `more` (a name) or the decimal `number` if it is not negative.
void set_error(ChildError& e, long err, const char* step, long number = -1,
               const char* more = nullptr) {
  e.err = static_cast<int>(err);
  size_t i = 0;
  for (; step[i] && i + 1 < sizeof e.step; ++i) e.step[i] = step[i];
  for (; more && *more && i + 1 < sizeof e.step; ++more) e.step[i++] = *more;
  if (number >= 0 && i + 12 < sizeof e.step) {
    char digits[12];
    size_t n = 0;
    do {
      digits[n++] = static_cast<char>('0' + number % 10);
      number /= 10;
    } while (number > 0);
    while (n > 0) e.step[i++] = digits[--n];
  }
  for (; i < sizeof e.step; ++i) e.step[i] = 0;
  e.started = false;
}

[[noreturn]] void fail(int error_fd, bool started, long err, const char* step,
                       const char* more = nullptr) {
  ChildError e;
  set_error(e, err, step, -1, more);
  e.started = started;
  sys(SYS_write, error_fd, arg(&e), sizeof e);
  exit_now(127);
}

// One datagram on `sock`: `data` and, as ancillary data, either our own credentials or `fd`.
// 0, or -errno.
long send_with(int sock, const char* data, size_t size, int fd, int flags = 0) {
  struct iovec iov = {const_cast<char*>(data), size};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(struct ucred))];
  for (char& c : control) c = 0;
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  struct cmsghdr* c = reinterpret_cast<struct cmsghdr*>(control);
  c->cmsg_level = SOL_SOCKET;
  if (fd < 0) {
    // Our own pid as the sender's: the kernel translates it for the receiver (unix(7)), which
    // so learns the call's host pid without /proc scanning.
    c->cmsg_type = SCM_CREDENTIALS;
    c->cmsg_len = CMSG_LEN(sizeof(struct ucred));
    auto* cred = reinterpret_cast<struct ucred*>(CMSG_DATA(c));
    cred->pid = static_cast<pid_t>(sys(SYS_getpid));
    cred->uid = static_cast<uid_t>(sys(SYS_getuid));
    cred->gid = static_cast<gid_t>(sys(SYS_getgid));
    msg.msg_controllen = CMSG_SPACE(sizeof(struct ucred));
  } else {
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    *reinterpret_cast<int*>(CMSG_DATA(c)) = fd;
    msg.msg_controllen = CMSG_SPACE(sizeof(int));
  }
  for (;;) {
    long n = sys(SYS_sendmsg, sock, arg(&msg), MSG_NOSIGNAL | flags);
    if (n >= 0) return 0;
    if (n != -EINTR) return n;
  }
}

// fd `from` as `to`, inherited by the exec.
bool move_fd(int from, int to) {
  if (from == to) return sys(SYS_fcntl, to, F_SETFD, 0) == 0;
  return sys(SYS_dup3, from, to, 0) == to;
}

long exec_with_shell(CallLaunch& l, const char* path) {
  l.sh_argv.data()[1] = const_cast<char*>(path);
  return sys(SYS_execve, arg("/bin/sh"), arg(l.sh_argv.data()), arg(l.envp.data()));
}

// execvp's search, on the call's PATH (an empty entry is the working directory): the first
// entry where exec does not say the file is absent; a file exec refuses as no executable
// format (a script without #!) runs under /bin/sh. Returns errno: EACCES if some entry had it
// but it was not executable, else ENOENT, or the error of an entry that failed otherwise.
long exec_search(CallLaunch& l) {
  const char* file = l.argv.empty() ? nullptr : l.argv[0];
  if (!file || !*file) return ENOENT;
  bool has_slash = false;
  for (const char* p = file; *p; ++p) has_slash |= *p == '/';
  auto attempt = [&](const char* path) {
    long r = sys(SYS_execve, arg(path), arg(l.argv.data()), arg(l.envp.data()));
    return r == -ENOEXEC ? exec_with_shell(l, path) : r;
  };
  if (has_slash) return -attempt(file);
  char buf[4096];
  const size_t file_len = length(file);
  bool denied = false;
  for (const char* p = l.path.c_str();;) {
    const char* end = p;
    while (*end && *end != ':') ++end;
    const size_t dir_len = static_cast<size_t>(end - p);
    if (dir_len + 3 + file_len <= sizeof buf) {
      size_t n = 0;
      if (dir_len == 0) buf[n++] = '.';
      for (size_t i = 0; i < dir_len; ++i) buf[n++] = p[i];
      buf[n++] = '/';
      for (size_t i = 0; i <= file_len; ++i) buf[n++] = file[i];  // with its NUL
      switch (long err = -attempt(buf)) {
        case EACCES:
          denied = true;
          break;
        case ENOENT:
        case ENOTDIR:
        case ESTALE:
        case ENODEV:
        case ETIMEDOUT:
          break;
        default:
          return err;
      }
    }
    if (!*end) break;
    p = end + 1;
  }
  return denied ? EACCES : ENOENT;
}

int clone_entry(void* launch) { run_call_child(*static_cast<CallLaunch*>(launch)); }

}  // namespace

bool restrict_call(const CallRestriction& r, ChildError& error) {
  long ret = 0;
  auto failed = [&](const char* step, long number = -1) {
    set_error(error, -ret, step, number);
    return false;
  };
  if (r.drop_privileges) {
    // The bounding set first (needs CAP_SETPCAP, which we still have), then ambient. Beyond the
    // kernel's last capability the drop says EINVAL, which ends nothing.
    for (int cap = 0; cap <= CAP_LAST_CAP + 8; ++cap)
      if ((ret = sys(SYS_prctl, PR_CAPBSET_DROP, cap)) != 0 && ret != -EINVAL)
        return failed("drop bounding capability ", cap);
    if ((ret = sys(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)) != 0)
      return failed("clear ambient capabilities");
    gid_t groups[1] = {r.gid};
    if ((ret = sys(SYS_setgroups, 1, arg(groups))) != 0) return failed("setgroups");
    if ((ret = sys(SYS_setresgid, r.gid, r.gid, r.gid)) != 0) return failed("setresgid");
    // Leaving uid 0 clears permitted and effective (no SECBIT_KEEP_CAPS); inheritable is
    // cleared explicitly below.
    if ((ret = sys(SYS_setresuid, r.uid, r.uid, r.uid)) != 0) return failed("setresuid");
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2] = {};
    if ((ret = sys(SYS_capset, arg(&header), arg(data))) != 0) return failed("capset to empty");
    if ((ret = sys(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1)) != 0) return failed("set no_new_privs");
  }
  if (r.no_new_privs && (ret = sys(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1)) != 0)
    return failed("prctl PR_SET_NO_NEW_PRIVS");
  // Before the seccomp filter (which need not allow landlock_restrict_self for this). From here
  // the oom_score_adj written before sticks: the process cannot open procfs files for writing.
  if (r.landlock >= 0 && (ret = sys(SYS_landlock_restrict_self, r.landlock, 0)) != 0)
    return failed("landlock_restrict_self");
  // The allow list first: prctl is on it, so the second install is allowed.
  for (int i = 0; i < r.program_count; ++i)
    if ((ret = sys(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, arg(&r.programs[i]))) != 0)
      return failed("install seccomp filter");
  // The third program, last: from here this process's sysinfo(2) waits for the views server,
  // which holds the listener once it is sent. A call never starts with a sysinfo that nobody
  // would answer (an unsent listener closes at exec, and sysinfo would then be ENOSYS). seccomp(2),
  // not prctl: only it takes flags; the listener is close-on-exec.
  if (r.sysinfo_channel >= 0) {
    long listener = ret = sys(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                              SECCOMP_FILTER_FLAG_NEW_LISTENER, arg(&r.sysinfo_program));
    if (listener < 0) return failed("install sysinfo notify filter");
    // Without waiting: a views server hundreds of listeners behind is broken, and a vfork
    // child that waited for it would hold the supervisor too.
    ret = send_with(r.sysinfo_channel, "s", 1, static_cast<int>(listener), MSG_DONTWAIT);
    sys(SYS_close, listener);
    if (ret != 0) return failed("send the sysinfo listener");
  }
  return true;
}

void run_call_child(CallLaunch& l) {
  // Default dispositions (an ignored signal would stay ignored across the exec), then nothing
  // blocked: the supervisor blocks the signals its signalfd reads.
  struct {
    void* handler;
    unsigned long flags;
    void* restorer;
    uint64_t mask;
  } default_action = {};
  for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGPIPE})
    sys(SYS_rt_sigaction, sig, arg(&default_action), 0, sizeof(uint64_t));
  uint64_t none = 0;
  sys(SYS_rt_sigprocmask, SIG_SETMASK, arg(&none), 0, sizeof none);
  sys(SYS_prctl, PR_SET_PDEATHSIG, 0);  // a parked process had one
  bool started = false;                 // said "started": a failure from here is the command's
  long ret;
  if ((ret = sys(SYS_setsid)) < 0) fail(l.error, started, -ret, "setsid");
  long null_fd = sys(SYS_openat, AT_FDCWD, arg("/dev/null"), O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) fail(l.error, started, -null_fd, "open /dev/null");
  if (!move_fd(l.in >= 0 ? l.in : static_cast<int>(null_fd), 0) || !move_fd(l.out, 1) ||
      !move_fd(l.err, 2))
    fail(l.error, started, EBADF, "dup2");

  // When memory runs out above the call (a run's or tenant's shared limit, the host), the kernel
  // must pick the call, not the supervisor nor the run's resident processes, which keep the
  // supervisor's value. Raising one's own oom_score_adj needs no privilege. A parked process
  // wrote it as it parked (a resident process never starts in one).
  if (l.oom_score_adj && !l.restricted) {
    long fd = sys(SYS_openat, AT_FDCWD, arg("/proc/self/oom_score_adj"), O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      sys(SYS_write, fd, arg(kCallOomScoreAdj), sizeof kCallOomScoreAdj - 1);
      sys(SYS_close, fd);
    }
  }
  // The call's rlimits before it says "started": the host can then read them back from
  // /proc/<pid>/limits before the call execs. Lowering one's own limit needs no privilege (no
  // CAP_SYS_RESOURCE, which even root lacks on some hosts). Soft and hard alike, so the call
  // cannot raise them back; never above the hard limit it inherited (that would be a raise).
  for (int i = 0; i < l.limit_count; ++i) {
    struct {
      uint64_t cur, max;
    } old = {}, lim = {};
    if ((ret = sys(SYS_prlimit64, 0, l.limits[i].resource, 0, arg(&old))) != 0)
      fail(l.error, started, -ret, "getrlimit ", l.limits[i].name);
    lim.cur = lim.max = l.limits[i].value < old.max ? l.limits[i].value : old.max;
    if ((ret = sys(SYS_prlimit64, 0, l.limits[i].resource, arg(&lim), 0)) != 0)
      fail(l.error, started, -ret, "setrlimit ", l.limits[i].name);
  }
  // Its own "started", with its own pid: any process may send its own pid, where sending
  // another's needs CAP_SYS_ADMIN over its pid namespace, which the supervisor in a container
  // (an unprivileged user) does not have.
  if (send_with(l.control, l.started.data(), l.started.size(), -1) != 0) exit_now(127);
  started = true;
  if (l.go >= 0) {
    char byte;
    while ((ret = sys(SYS_read, l.go, arg(&byte), 1)) == -EINTR) {
    }
    if (ret != 1) exit_now(127);  // the host never released us
    sys(SYS_close, l.go);
  }

  if ((ret = sys(SYS_chdir, arg(l.cwd.c_str()))) != 0) fail(l.error, started, -ret, "chdir");
  // No descriptor of the supervisor's may reach the call (the error pipe closes at exec).
  if ((ret = sys(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC)) != 0)
    fail(l.error, started, -ret, "close_range");
  if (!l.restricted && l.restriction) {
    ChildError e;
    if (!restrict_call(*l.restriction, e)) {
      e.started = started;
      sys(SYS_write, l.error, arg(&e), sizeof e);
      exit_now(127);
    }
  }
  fail(l.error, started, exec_search(l), "execve");
}

void CallLaunch::set_command(std::vector<std::string> argv_in, std::vector<std::string> env_in) {
  static char shell[] = "/bin/sh";
  argv_strings = std::move(argv_in);
  env_strings = std::move(env_in);
  argv.clear();
  envp.clear();
  sh_argv = {shell, nullptr};
  for (auto& a : argv_strings) argv.push_back(a.data());
  for (size_t i = 1; i < argv_strings.size(); ++i) sh_argv.push_back(argv_strings[i].data());
  argv.push_back(nullptr);
  sh_argv.push_back(nullptr);
  path = "/bin:/usr/bin";  // glibc's default, where the call's environment has no PATH
  bool have_path = false;
  for (auto& e : env_strings) {
    envp.push_back(e.data());
    if (!have_path && e.starts_with("PATH=")) {
      path = e.substr(5);
      have_path = true;
    }
  }
  envp.push_back(nullptr);
}

CallRestriction restriction_for(const SeccompProgram& program, int sysinfo_channel) {
  CallRestriction r;
  for (auto* p : {&program.allow_list, &program.argument_rules})
    r.programs[r.program_count++] = {static_cast<unsigned short>(p->size()),
                                     const_cast<struct sock_filter*>(p->data())};
  if (sysinfo_channel >= 0 && !program.sysinfo_notify.empty()) {
    r.sysinfo_program = {static_cast<unsigned short>(program.sysinfo_notify.size()),
                         const_cast<struct sock_filter*>(program.sysinfo_notify.data())};
    r.sysinfo_channel = sysinfo_channel;
  }
  return r;
}

ChildStack::ChildStack() {
  void* m = ::mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
                   -1, 0);
  base_ = m == MAP_FAILED ? nullptr : static_cast<char*>(m);
}

ChildStack::~ChildStack() {
  if (base_) ::munmap(base_, kSize);
}

pid_t clone_call_child(CallLaunch& launch, ChildStack& stack) {
  if (!stack.valid()) return -ENOMEM;
  if (launch.go >= 0) return -EINVAL;  // it would hold the supervisor until the host's go
  int pid = ::clone(clone_entry, stack.top(), CLONE_VM | CLONE_VFORK | SIGCHLD, &launch);
  return pid < 0 ? -errno : pid;
}

}  // namespace sandgate::providers
