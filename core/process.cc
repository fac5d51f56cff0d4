#include "core/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "core/defer.h"

namespace sandgate {

ExitStatus ExitStatus::from_wait_status(int status) {
  ExitStatus s;
  if (WIFEXITED(status)) {
    s.exited = true;
    s.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    s.signal = WTERMSIG(status);
  }
  return s;
}

std::string ExitStatus::describe() const {
  if (exited) return "exit " + std::to_string(code);
  const char* name = sigabbrev_np(signal);
  return "signal " + std::to_string(signal) + (name ? std::string(" (SIG") + name + ")" : "");
}

ChildProcess::ChildProcess(ChildProcess&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)), pidfd_(std::move(o.pidfd_)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    kill_and_reap();
    pid_ = std::exchange(o.pid_, -1);
    pidfd_ = std::move(o.pidfd_);
  }
  return *this;
}

Status ChildProcess::signal(int sig) const {
  if (pid_ <= 0) return {};
  if (pidfd_.valid()) {
    if (syscall(SYS_pidfd_send_signal, pidfd_.get(), sig, nullptr, 0) != 0 && errno != ESRCH)
      return sys_error("pidfd_send_signal", std::to_string(pid_));
    return {};
  }
  if (::kill(pid_, sig) != 0 && errno != ESRCH) return sys_error("kill", std::to_string(pid_));
  return {};
}

Result<ExitStatus> ChildProcess::wait() {
  if (pid_ <= 0) return logic_error("wait", "no process");
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0) {
    if (errno != EINTR) return sys_error("waitpid", std::to_string(pid_));
  }
  pid_ = -1;
  pidfd_.reset();
  return ExitStatus::from_wait_status(status);
}

Result<std::optional<ExitStatus>> ChildProcess::wait_for(Duration timeout) {
  if (pid_ <= 0) return logic_error("wait", "no process");
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      pidfd_.reset();
      return std::optional<ExitStatus>(ExitStatus::from_wait_status(status));
    }
    if (r < 0 && errno != EINTR) return sys_error("waitpid", std::to_string(pid_));
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::optional<ExitStatus>();
    if (pidfd_.valid()) {
      struct pollfd p = {pidfd_.get(), POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(left.count()));
    } else {
      ::usleep(1000);
    }
  }
}

void ChildProcess::kill_and_reap() {
  if (pid_ <= 0) return;
  (void)signal(SIGKILL);
  int status;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  pidfd_.reset();
}

pid_t ChildProcess::release() {
  pidfd_.reset();
  return std::exchange(pid_, -1);
}

namespace {

// The row of /proc/<pid>/limits for a resource (fs/proc/base.c, lnames[]).
const char* limits_row(int resource) {
  switch (resource) {
    case RLIMIT_CPU: return "Max cpu time";
    case RLIMIT_FSIZE: return "Max file size";
    case RLIMIT_DATA: return "Max data size";
    case RLIMIT_STACK: return "Max stack size";
    case RLIMIT_CORE: return "Max core file size";
    case RLIMIT_RSS: return "Max resident set";
    case RLIMIT_NPROC: return "Max processes";
    case RLIMIT_NOFILE: return "Max open files";
    case RLIMIT_MEMLOCK: return "Max locked memory";
    case RLIMIT_AS: return "Max address space";
    default: return nullptr;
  }
}

Result<std::pair<uint64_t, uint64_t>> read_limits_file(pid_t pid, int resource) {
  std::string path = "/proc/" + std::to_string(pid) + "/limits";
  const char* row = limits_row(resource);
  if (!row) return logic_error("read limits", "no row for resource " + std::to_string(resource), path);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sys_error("open", path);
  char buf[4096];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return sys_error("read", path);
  std::string text(buf, static_cast<size_t>(n));
  size_t at = text.find(row);
  if (at == std::string::npos) return logic_error("read limits", std::string("no row '") + row + "'", path);
  // "Max open files            1024                 1024                 files": the soft and
  // the hard limit start at columns 26 and 47.
  std::string line = text.substr(at, text.find('\n', at) - at);
  auto field = [&](size_t col) -> std::optional<uint64_t> {
    if (line.size() <= col) return std::nullopt;
    std::string v = line.substr(col, line.find(' ', col) - col);
    if (v == "unlimited") return RLIM_INFINITY;
    char* end = nullptr;
    unsigned long long x = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end) return std::nullopt;
    return x;
  };
  auto soft = field(26), hard = field(47);
  if (!soft || !hard) return logic_error("read limits", "cannot read '" + line + "'", path);
  return std::make_pair(*soft, *hard);
}

}  // namespace

Result<std::pair<uint64_t, uint64_t>> read_rlimit(pid_t pid, int resource) {
  struct rlimit lim {};
  if (::prlimit(pid, static_cast<__rlimit_resource>(resource), nullptr, &lim) != 0) {
    if (errno == EPERM) return read_limits_file(pid, resource);
    return sys_error("prlimit", std::to_string(pid));
  }
  return std::make_pair(static_cast<uint64_t>(lim.rlim_cur), static_cast<uint64_t>(lim.rlim_max));
}

Result<UniqueFd> pidfd_open(pid_t pid) {
  int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return sys_error("pidfd_open", std::to_string(pid));
  return UniqueFd(fd);
}

std::vector<std::string> merge_env(std::vector<std::string> base,
                                   const std::vector<std::string>& overrides) {
  for (const auto& x : overrides) {
    std::string_view name = std::string_view(x).substr(0, x.find('=') + 1);
    std::erase_if(base,
                  [&](const std::string& e) { return std::string_view(e).starts_with(name); });
    base.push_back(x);
  }
  return base;
}

namespace {

std::vector<std::string> this_environment() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) out.emplace_back(*e);
  return out;
}

}  // namespace

// posix_spawnp, not fork: a fork of a large, many-threaded sandgate copies the page tables of
// its heap and thread stacks and turns each of its writes into a copy-on-write fault until the
// child execs (~1-1.5 ms each on a small VM; a Podman run's read-back runs several commands).
// glibc's spawn shares the memory until the exec and reports a failed exec itself.
Result<ChildProcess> spawn(const std::vector<std::string>& argv, const SpawnOptions& o) {
  if (argv.empty()) return logic_error("spawn", "empty argv");
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::vector<std::string> env_s;
  std::vector<char*> cenv;
  if (o.env || !o.env_set.empty()) {
    env_s = merge_env(o.env ? *o.env : this_environment(), o.env_set);
    for (auto& e : env_s) cenv.push_back(e.data());
    cenv.push_back(nullptr);
  }
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  if (int e = posix_spawn_file_actions_init(&actions); e != 0)
    return sys_error(e, "spawn", argv[0]);
  Defer free_actions([&] { posix_spawn_file_actions_destroy(&actions); });
  if (int e = posix_spawnattr_init(&attr); e != 0) return sys_error(e, "spawn", argv[0]);
  Defer free_attr([&] { posix_spawnattr_destroy(&attr); });
  sigset_t none;
  sigemptyset(&none);  // sandgate blocks SIGINT/SIGTERM for its signalfd; the child must not
  short flags = POSIX_SPAWN_SETSIGMASK;
  if (o.new_process_group) flags |= POSIX_SPAWN_SETPGROUP;  // group 0: its own
  if (o.new_session) flags |= POSIX_SPAWN_SETSID;
  int e = posix_spawnattr_setflags(&attr, flags);
  if (e == 0) e = posix_spawnattr_setsigmask(&attr, &none);
  if (e == 0) e = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  if (e == 0 && o.out_fd >= 0) e = posix_spawn_file_actions_adddup2(&actions, o.out_fd, 1);
  if (e == 0 && o.out_fd >= 0) e = posix_spawn_file_actions_adddup2(&actions, o.out_fd, 2);
  // A dup2 onto itself clears close-on-exec (glibc >= 2.29), as a passed descriptor needs.
  if (e == 0 && o.pass_fd >= 0) e = posix_spawn_file_actions_adddup2(&actions, o.pass_fd, 3);
  if (e == 0 && o.pass_fd >= 0) e = posix_spawn_file_actions_addclosefrom_np(&actions, 4);
  if (e != 0) return sys_error(e, "spawn", argv[0]);
  pid_t pid = -1;
  if (int err = posix_spawnp(&pid, cargv[0], &actions, &attr, cargv.data(),
                             cenv.empty() ? environ : cenv.data());
      err != 0)
    return sys_error(err, "exec", argv[0]);
  // Also from here: no race with a signal sent to the group before the child ran.
  if (o.new_process_group) ::setpgid(pid, pid);
  auto pidfd = pidfd_open(pid);
  return ChildProcess(pid, pidfd.ok() ? std::move(pidfd).value() : UniqueFd());
}

Result<CommandResult> run_command(const std::vector<std::string>& argv, Duration timeout,
                                  size_t max_output) {
  SG_ASSIGN_OR_RETURN(Pipe out, make_pipe(O_CLOEXEC));
  SG_ASSIGN_OR_RETURN(ChildProcess child, spawn(argv, {.out_fd = out.write.get()}));
  out.write.reset();
  CommandResult result;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      break;
    }
    struct pollfd p = {out.read.get(), POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    ssize_t n = ::read(out.read.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (result.output.size() < max_output)
      result.output.append(buf, std::min(static_cast<size_t>(n), max_output - result.output.size()));
  }
  if (!result.timed_out) {
    // EOF on the output does not mean the command ended (it may have closed or redirected
    // its stdout): the deadline still holds for the wait.
    auto left = std::chrono::duration_cast<Duration>(deadline - std::chrono::steady_clock::now());
    SG_ASSIGN_OR_RETURN(std::optional<ExitStatus> status,
                        child.wait_for(std::max(left, Duration::zero())));
    if (status) {
      result.status = *status;
      return result;
    }
    result.timed_out = true;
  }
  child.kill_and_reap();
  result.status.signal = SIGKILL;
  return result;
}

std::optional<unsigned long long> process_start_time(const std::string& proc_root, pid_t pid) {
  auto stat = read_file(proc_root + "/" + std::to_string(pid) + "/stat", 4096);
  if (!stat.ok()) return std::nullopt;
  // comm (field 2) may contain spaces and parentheses: fields resume after the last ')'.
  auto close = stat->rfind(')');
  if (close == std::string::npos || close + 2 >= stat->size()) return std::nullopt;
  const char* p = stat->c_str() + close + 2;
  // After ')' comes field 3 (state); starttime is field 22, i.e. 19 fields further.
  for (int field = 3; field < 22; ++field) {
    p = std::strchr(p, ' ');
    if (!p) return std::nullopt;
    ++p;
  }
  // A truncated line must not read as start time 0.
  if (*p < '0' || *p > '9') return std::nullopt;
  return std::strtoull(p, nullptr, 10);
}

}  // namespace sandgate
