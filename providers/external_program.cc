#include "providers/external_program.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/files.h"
#include "core/host_features.h"
#include "core/log.h"
#include "core/strings.h"
#include "providers/external.h"
#include "providers/supervised_environment.h"

extern char** environ;

namespace sandgate::providers {
namespace {

// argv[0] as execve needs it: a path, or the first executable of that name in PATH.
Result<std::string> resolve_program(const std::string& program) {
  if (program.empty()) return logic_error("start external provider", "empty command");
  if (program.find('/') != std::string::npos) {
    if (::access(program.c_str(), X_OK) != 0) return sys_error("start external provider", program);
    return program;
  }
  const char* path = std::getenv("PATH");
  if (auto found = find_on_path(program, path ? path : "/usr/bin:/bin")) return *found;
  return logic_error("start external provider", "not found in PATH", program);
}

// The program's environment: PATH and LANG, and what its configuration adds. Nothing else of
// sandgate's: a provider has no business with the caller's tokens.
Result<std::vector<std::string>> program_env(const ExternalCommand& command) {
  std::vector<std::string> env = {
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"};
  SG_ASSIGN_OR_RETURN(auto extra, resolve_env_allowlist(command.env, environ));
  return merge_env(std::move(env), extra);
}

}  // namespace

Result<ExternalProgram> ExternalProgram::start(const ExternalCommand& command,
                                               const Placement& placement, RunState* state) {
  if (command.argv.empty())
    return logic_error("start external provider", "empty command", command.name);
  SG_ASSIGN_OR_RETURN(std::string exe, resolve_program(command.argv[0]));
  SG_ASSIGN_OR_RETURN(auto env_s, program_env(command));
  std::vector<std::string> argv_s = command.argv;
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return sys_error("socketpair");
  UniqueFd ours(sv[0]), theirs(sv[1]);
  SG_ASSIGN_OR_RETURN(Pipe log, make_pipe(O_CLOEXEC));
  SG_ASSIGN_OR_RETURN(Pipe go, make_pipe(O_CLOEXEC));
  SG_ASSIGN_OR_RETURN(Pipe exec_error, make_pipe(O_CLOEXEC));

  pid_t pid = ::fork();
  if (pid < 0) return sys_error("fork", exe);
  if (pid == 0) {
    // Between fork and exec in a process that may have threads: only async-signal-safe calls
    // on memory prepared before the fork.
    int err = 0;
    char byte;
    if (::read(go.read.get(), &byte, 1) != 1) _exit(126);
    // Its own process group: killing the provider reaches what it started in that group.
    ::setpgid(0, 0);
    if (::dup2(theirs.get(), 0) < 0 || ::dup2(theirs.get(), 1) < 0 ||
        ::dup2(log.write.get(), 2) < 0) {
      err = errno;
    } else {
      ::execve(exe.c_str(), argv.data(), envp.data());
      err = errno;
    }
    (void)!::write(exec_error.write.get(), &err, sizeof err);
    _exit(127);
  }
  auto pidfd = pidfd_open(pid);
  ExternalProgram p;
  p.name_ = command.name;
  p.process_ = ChildProcess(pid, pidfd.ok() ? std::move(pidfd).value() : UniqueFd());
  theirs.reset();
  log.write.reset();
  go.read.reset();
  exec_error.write.reset();
  p.channel_ = std::move(ours);
  p.log_ = std::move(log.read);
  if (::fcntl(p.log_.get(), F_SETFL, O_NONBLOCK) != 0) return sys_error("fcntl O_NONBLOCK");
  if (::fcntl(p.channel_.get(), F_SETFL, O_NONBLOCK) != 0) return sys_error("fcntl O_NONBLOCK");

  if (state) {
    Resource proc{Resource::Kind::kProcess, "", pid, process_start_time("/proc", pid).value_or(0)};
    SG_TRY(std::move(state->record(proc)).context("record the external provider's process"));
  }
  // Parked on the go pipe: placed now, it execs inside the run's cgroups.
  for (const auto& dir : placement.cgroup_dirs)
    SG_TRY(std::move(write_file(dir + "/cgroup.procs", std::to_string(pid)))
               .context("place the external provider in the run's cgroup"));
  SG_TRY(write_all(go.write.get(), "g"));
  go.write.reset();
  // A successful exec closes the error pipe with nothing written.
  int err = 0;
  ssize_t n;
  while ((n = ::read(exec_error.read.get(), &err, sizeof err)) < 0 && errno == EINTR) {
  }
  if (n == static_cast<ssize_t>(sizeof err)) {
    p.process_.kill_and_reap();
    return sys_error(err, "execve external provider", exe);
  }
  return p;
}

Status ExternalProgram::send(const Json& message, const std::string& what) {
  return send_line(dump_json(message), what);
}

Status ExternalProgram::send_line(const std::string& text, const std::string& what) {
  if (!channel_) return failed(logic_error("send " + what, "the provider's channel is closed"));
  std::string line = text + "\n";
  std::string_view rest = line;
  auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!rest.empty()) {
    ssize_t n = ::send(channel_.get(), rest.data(), rest.size(), MSG_NOSIGNAL);
    if (n > 0) {
      rest.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      // The program is not reading its stdin: wait, within bounds, and drain its log meanwhile.
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        kill();
        return failed(logic_error("send " + what,
                                  "the provider did not read its stdin for 30s; it was killed"));
      }
      struct pollfd fds[2] = {{channel_.get(), POLLOUT, 0}, {log_ ? log_.get() : -1, POLLIN, 0}};
      (void)::poll(fds, 2, static_cast<int>(std::min<long long>(left, 1000)));
      if (fds[1].revents) drain_log();
      continue;
    }
    return failed(sys_error("send " + what + " to the provider").context_add(exit_description()));
  }
  return {};
}

void ExternalProgram::drain_log(bool until_eof) {
  if (!log_) return;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(log_.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      log_.reset();
      return;
    }
    if (n < 0) {
      if (errno == EAGAIN && until_eof) {
        struct pollfd fd = {log_.get(), POLLIN, 0};
        if (::poll(&fd, 1, 200) > 0) continue;
      }
      return;
    }
    spdlog::debug("external provider {}: {}", name_, std::string_view(buf, static_cast<size_t>(n)));
    log_buffer_.append(buf, static_cast<size_t>(n));
    if (log_buffer_.size() > 2 * kLogTail) {
      log_buffer_.erase(0, log_buffer_.size() - kLogTail);
      log_truncated_ = true;
    }
  }
}

std::string ExternalProgram::log_tail() {
  drain_log();
  std::string tail = log_buffer_.size() > kLogTail
                         ? log_buffer_.substr(log_buffer_.size() - kLogTail)
                         : log_buffer_;
  if (log_truncated_ || log_buffer_.size() > kLogTail) tail = "..." + tail;
  make_valid_utf8(tail);
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  return tail;
}

Error ExternalProgram::failed(Error e) {
  std::string tail = log_tail();
  e.context.push_back("provider " + name_ +
                      (tail.empty() ? ", which logged nothing" : ", whose log ends: " + tail));
  return e;
}

std::string ExternalProgram::exit_description() {
  if (!exited_ && process_.running()) {
    auto st = process_.wait_for(std::chrono::seconds(2));
    if (st.ok() && st->has_value()) exited_ = **st;
  }
  if (exited_) return "the provider exited (" + exited_->describe() + ")";
  return "the provider closed its stdout";
}

Result<external::Line> ExternalProgram::receive(long long id, const std::string& what,
                                                Clock::time_point deadline, size_t max_line,
                                                int cancel_fd,
                                                const std::function<void()>& on_cancel) {
  bool cancel_done = false;
  for (;;) {
    size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      if (nl > max_line) break;  // reported below
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      auto parsed = external::parse_line(line, id, what);
      if (!parsed.ok()) {
        // A refusal ("ok": false) is the protocol working; anything else is the provider not
        // speaking it, and the conversation cannot go on.
        if (parsed.error().step == external::kRefusedStep) return std::move(parsed).error();
        kill();
        return failed(std::move(parsed).error());
      }
      return parsed;
    }
    if (buffer_.size() > max_line) break;
    if (!channel_) return failed(logic_error(what, "the provider's channel is closed"));
    int timeout_ms = -1;
    if (deadline != Clock::time_point::max()) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        kill();
        return failed(logic_error(what, "no reply from the provider in time; it was killed"));
      }
      timeout_ms = static_cast<int>(std::min<long long>(left + 1, 1'000'000));
    }
    struct pollfd fds[3] = {{channel_.get(), POLLIN, 0},
                            {log_ ? log_.get() : -1, POLLIN, 0},
                            {cancel_done ? -1 : cancel_fd, POLLIN, 0}};
    int r = ::poll(fds, 3, timeout_ms);
    if (r < 0) {
      if (errno == EINTR) continue;
      return sys_error("poll");
    }
    if (fds[1].revents) drain_log();
    if (fds[2].revents && !cancel_done) {
      cancel_done = true;
      if (on_cancel) on_cancel();
    }
    if (fds[0].revents) {
      char chunk[65536];
      ssize_t n = ::read(channel_.get(), chunk, sizeof chunk);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        std::string why = exit_description();
        drain_log(true);
        kill();
        std::string partial = buffer_.empty() ? ""
                                              : " (after " + std::to_string(buffer_.size()) +
                                                    " bytes of an unfinished line)";
        return failed(logic_error(what, why + " before replying" + partial));
      }
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }
  kill();
  return failed(logic_error(what, "a reply line longer than " + std::to_string(max_line) +
                                      " bytes (the protocol's limit); the provider was killed"));
}

Result<Json> ExternalProgram::request(const Json& message, const std::string& what,
                                      std::chrono::milliseconds timeout) {
  long long id = message.at("id").get<long long>();
  SG_TRY(send(message, what));
  SG_ASSIGN_OR_RETURN(auto line, receive(id, what, Clock::now() + timeout));
  if (line.event) {
    kill();
    return failed(logic_error(
        what, "an event " + describe_json(line.json.at("event")) + " where a reply was due"));
  }
  return line.json;
}

Result<ExitStatus> ExternalProgram::finish(Duration timeout) {
  if (channel_) ::shutdown(channel_.get(), SHUT_WR);
  if (exited_) return *exited_;
  if (!process_.running()) return logic_error("end external provider", "not running");
  auto deadline = Clock::now() + timeout;
  // Drain its log while waiting: a program blocked writing stderr would never exit.
  while (Clock::now() < deadline) {
    drain_log();
    auto st = process_.wait_for(std::chrono::milliseconds(50));
    if (st.ok() && st->has_value()) {
      exited_ = **st;
      drain_log(true);
      return *exited_;
    }
  }
  kill();
  return failed(logic_error("end external provider", "it did not exit within " +
                                                         format_duration(timeout) +
                                                         " of its stdin closing; it was killed"));
}

void ExternalProgram::kill() {
  if (process_.running()) {
    // The group it leads (it made it before exec); a program that left the group is still
    // killed itself.
    ::kill(-process_.pid(), SIGKILL);
    process_.kill_and_reap();
  }
  channel_.reset();
}

bool descends_from(const std::string& proc, pid_t pid, pid_t ancestor) {
  for (int depth = 0; depth < 64 && pid > 1; ++depth) {
    if (pid == ancestor) return true;
    auto stat = read_file(proc + "/" + std::to_string(pid) + "/stat");
    if (!stat.ok()) return false;
    // "pid (comm) state ppid ...": comm may hold anything, so parse after the last ')'.
    auto close = stat->rfind(')');
    if (close == std::string::npos) return false;
    pid_t ppid = 0;
    if (std::sscanf(stat->c_str() + close + 1, " %*c %d", &ppid) != 1) return false;
    pid = ppid;
  }
  return false;
}

Result<bool> in_cgroup(const std::string& proc, pid_t pid, const std::string& dir) {
  SG_ASSIGN_OR_RETURN(std::string table, read_file(proc + "/" + std::to_string(pid) + "/cgroup"));
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) != 0) return sys_error("statfs", dir);
  const bool v2 = fs.f_type == CGROUP2_SUPER_MAGIC;
  for (std::string_view line : split(table, '\n')) {
    // "hierarchy-id:controllers:path"; cgroup v2 is "0::path".
    auto first = line.find(':');
    auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::string controllers(line.substr(first + 1, second - first - 1));
    std::string path(line.substr(second + 1));
    if (path == "/" || path.empty() || !dir.ends_with(path)) continue;
    std::string mount = dir.substr(0, dir.size() - path.size());
    if (v2 != controllers.empty()) continue;
    if (!v2) {
      // A v1 hierarchy is mounted at a directory named after its controllers ("cpu,cpuacct",
      // "memory", "systemd" for name=systemd): the line must share one with it.
      std::string base = mount.substr(mount.rfind('/') + 1);
      bool shares = false;
      for (const auto& c : split(controllers, ','))
        for (const auto& m : split(base, ','))
          shares = shares || c == m || std::string(c) == "name=" + std::string(m);
      if (!shares) continue;
    }
    return true;
  }
  return false;
}

}  // namespace sandgate::providers
