#include "probes/probe_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "core/result.h"

namespace sandgate::probes::util {

ProbeResult result_for_errno(int err) {
  switch (err) {
    case 0:
      return ProbeResult::kReached;
    case EPERM:
    case EACCES:
    case EROFS:
    case ENOSYS:
    case ENETUNREACH:
    case EHOSTUNREACH:
    case ECONNREFUSED:
    case ECONNRESET:
    case ETIMEDOUT:
    case EXDEV:
      return ProbeResult::kDenied;
    case ENOENT:
    case ESRCH:
    case ENXIO:
    case ENODEV:
    case ENOTDIR:
    case EAFNOSUPPORT:
      return ProbeResult::kNotFound;
    default:
      return ProbeResult::kError;
  }
}

ProbeReport make(std::string attempt) {
  ProbeReport r;
  r.attempt = std::move(attempt);
  return r;
}

ProbeReport reached(std::string attempt, Json evidence) {
  ProbeReport r = make(std::move(attempt));
  r.result = ProbeResult::kReached;
  r.evidence = std::move(evidence);
  return r;
}

ProbeReport held(std::string attempt, Json evidence, std::string detail) {
  ProbeReport r = make(std::move(attempt));
  r.result = ProbeResult::kDenied;
  r.evidence = std::move(evidence);
  r.detail = std::move(detail);
  return r;
}

ProbeReport failed(std::string attempt, int err, Json evidence, std::string detail) {
  ProbeReport r = make(std::move(attempt));
  r.result = result_for_errno(err);
  r.errno_name = errno_name(err);
  r.evidence = std::move(evidence);
  r.detail = std::move(detail);
  if (r.detail.empty() && err != 0) r.detail = strerror(err);
  return r;
}

ProbeReport combine(std::string attempt, const std::vector<int>& errs, Json evidence) {
  int denied = 0, other = 0;
  bool all_absent = !errs.empty();
  for (int e : errs) {
    if (e == 0) return reached(std::move(attempt), std::move(evidence));
    ProbeResult r = result_for_errno(e);
    if (r == ProbeResult::kDenied && denied == 0) denied = e;
    if (r != ProbeResult::kNotFound) {
      all_absent = false;
      if (r != ProbeResult::kDenied && other == 0) other = e;
    }
  }
  if (denied) return failed(std::move(attempt), denied, std::move(evidence));
  if (all_absent) return failed(std::move(attempt), errs.front(), std::move(evidence));
  if (errs.empty()) {
    ProbeReport r = failed(std::move(attempt), ENOENT, std::move(evidence), "no target found");
    return r;
  }
  return failed(std::move(attempt), other, std::move(evidence));
}

std::string outcome(int err) { return err == 0 ? "ok" : errno_name(err); }

ProbeReport missing_param(std::string attempt, const std::string& name) {
  return precondition_failed(std::move(attempt),
                             "needs --param " + name + " (absent or malformed); nothing attempted");
}

ProbeReport precondition_failed(std::string attempt, std::string detail, Json evidence) {
  ProbeReport r = make(std::move(attempt));
  r.result = ProbeResult::kError;
  r.preconditions = false;
  r.detail = std::move(detail);
  r.evidence = std::move(evidence);
  return r;
}

std::string printable(std::string_view data, size_t max) {
  std::string out;
  for (size_t i = 0; i < data.size() && i < max; ++i) {
    unsigned char c = static_cast<unsigned char>(data[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else if (c == '\\') {
      out += "\\\\";
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

FileRead read_prefix(const std::string& path, size_t max) {
  FileRead r;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    r.err = errno;
    return r;
  }
  r.data.resize(max);
  size_t got = 0;
  while (got < max) {
    ssize_t n = ::read(fd, r.data.data() + got, max - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      r.err = errno;
      break;
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  r.data.resize(got);
  r.bytes = got;
  return r;
}

int try_open(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return errno;
  ::close(fd);
  return 0;
}

std::string write_access(const std::string& path) {
  if (::faccessat(AT_FDCWD, path.c_str(), W_OK, AT_EACCESS) == 0) return "ok";
  if (errno != ENOENT) return outcome(errno);
  auto slash = path.rfind('/');
  std::string dir = slash == 0 ? "/" : path.substr(0, slash);
  return outcome(::faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) == 0 ? 0 : errno);
}

std::optional<std::string> marker(const Params& p) {
  auto m = p.get("marker");
  if (!m || m->empty() || m->size() > 40) return std::nullopt;
  for (char c : *m)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return std::nullopt;
  return m;
}

std::string workspace(const Params& p) {
  if (auto w = p.get("workspace"); w && !w->empty()) return *w;
  char buf[4096];
  return ::getcwd(buf, sizeof buf) ? std::string(buf) : std::string(".");
}

std::string tag(const Params& p) {
  if (auto m = marker(p)) return *m;
  return "p" + std::to_string(::getpid());
}

namespace {
std::vector<int>& inherited_store() {
  static std::vector<int> fds;
  return fds;
}
}  // namespace

void note_inherited_fds() {
  // fcntl, not /proc/self/fd: it works before /proc is known to be there, and opens nothing.
  auto& fds = inherited_store();
  fds.clear();
  for (int fd = 3; fd < 4096; ++fd)
    if (::fcntl(fd, F_GETFD) != -1) fds.push_back(fd);
}

const std::vector<int>& inherited_fds() { return inherited_store(); }

std::vector<pid_t> proc_pids() {
  std::vector<pid_t> pids;
  DIR* d = ::opendir("/proc");
  if (!d) return pids;
  while (struct dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long v = std::strtol(e->d_name, &end, 10);
    if (v > 0 && end && *end == 0) pids.push_back(static_cast<pid_t>(v));
  }
  ::closedir(d);
  return pids;
}

std::string proc_file(pid_t pid, const char* name, size_t max) {
  FileRead r = read_prefix("/proc/" + std::to_string(pid) + "/" + name, max);
  if (r.err != 0) return "";
  for (char& c : r.data)
    if (c == 0) c = ' ';
  return r.data;
}

unsigned long long ns_inode(const char* ns) {
  struct stat st;
  if (::stat((std::string("/proc/self/ns/") + ns).c_str(), &st) != 0) return 0;
  return st.st_ino;
}

long long now_ms() {
  struct timespec t;
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

void sleep_ms(long long ms) {
  if (ms <= 0) return;
  struct timespec t = {static_cast<time_t>(ms / 1000), static_cast<long>((ms % 1000) * 1000000)};
  while (::nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

ChildResult run_child_impl(int (*trampoline)(void*, int), void* fn, int timeout_ms) {
  ChildResult out;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    out.fork_errno = errno;
    return out;
  }
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    out.fork_errno = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return out;
  }
  if (pid == 0) {
    ::close(fds[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before the line above
    ::_exit(trampoline(fn, fds[1]));
  }
  out.started = true;
  ::close(fds[1]);
  long long deadline = now_ms() + timeout_ms;
  char buf[4096];
  bool eof = false;
  while (!eof) {
    long long left = deadline - now_ms();
    if (left <= 0) {
      out.timed_out = true;
      break;
    }
    struct pollfd pfd = {fds[0], POLLIN, 0};
    int n = ::poll(&pfd, 1, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    ssize_t got = ::read(fds[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      eof = true;
    } else if (out.output.size() < (1u << 20)) {
      out.output.append(buf, static_cast<size_t>(got));
    }
  }
  ::close(fds[0]);
  // EOF does not mean exit (the child may have closed its end): wait for it up to the deadline.
  int status = 0;
  while (true) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (now_ms() >= deadline) {
      out.timed_out = true;
      ::kill(pid, SIGKILL);  // our own child, reaped below
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    sleep_ms(2);
  }
  if (WIFEXITED(status)) {
    out.exited = true;
    out.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    out.signal = WTERMSIG(status);
  }
  return out;
}

namespace {

int finish_connect(int fd, const sockaddr* addr, socklen_t len, int timeout_ms) {
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  if (::connect(fd, addr, len) != 0) {
    if (errno != EINPROGRESS) {
      int err = errno;
      ::close(fd);
      return -err;
    }
    struct pollfd pfd = {fd, POLLOUT, 0};
    int n;
    do {
      n = ::poll(&pfd, 1, timeout_ms);
    } while (n < 0 && errno == EINTR);
    if (n == 0) {
      ::close(fd);
      return -ETIMEDOUT;
    }
    int err = 0;
    socklen_t elen = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen);
    if (err != 0) {
      ::close(fd);
      return -err;
    }
  }
  ::fcntl(fd, F_SETFL, flags);
  return fd;
}

}  // namespace

int connect_tcp(int family, const std::string& address, uint16_t port, int timeout_ms) {
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  if (family == AF_INET6) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(port);
    if (::inet_pton(AF_INET6, address.c_str(), &a.sin6_addr) != 1) {
      ::close(fd);
      return -EINVAL;
    }
    return finish_connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a, timeout_ms);
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (::inet_pton(AF_INET, address.c_str(), &a.sin_addr) != 1) {
    ::close(fd);
    return -EINVAL;
  }
  return finish_connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a, timeout_ms);
}

int connect_unix(const std::string& name, bool abstract, int timeout_ms) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  size_t offset = abstract ? 1 : 0;  // abstract names start with a NUL byte
  if (name.size() + offset >= sizeof a.sun_path) return -ENAMETOOLONG;
  std::memcpy(a.sun_path + offset, name.data(), name.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + offset + name.size() +
                                         (abstract ? 0 : 1));
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  return finish_connect(fd, reinterpret_cast<sockaddr*>(&a), len, timeout_ms);
}

std::string recv_some(int fd, int timeout_ms, size_t max) {
  std::string out;
  long long deadline = now_ms() + timeout_ms;
  char buf[4096];
  while (out.size() < max) {
    long long left = deadline - now_ms();
    if (left <= 0) break;
    struct pollfd pfd = {fd, POLLIN, 0};
    int n = ::poll(&pfd, 1, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    ssize_t got = ::recv(fd, buf, std::min(sizeof buf, max - out.size()), 0);
    if (got <= 0) break;
    out.append(buf, static_cast<size_t>(got));
    // One reply is enough evidence; stop at the end of the first line's headers.
    if (out.find("\r\n\r\n") != std::string::npos || out.find('\n') != std::string::npos) break;
  }
  return out;
}

int send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

std::string first_line(const std::string& text) {
  auto end = text.find_first_of("\r\n");
  return text.substr(0, end);
}

ProbeReport read_other_secret(const Params& p, const std::string& attempt_what) {
  std::string attempt = "read " + attempt_what;
  auto m = marker(p);
  if (!m) return missing_param(attempt, "marker");
  auto dir = p.get("other_secrets");
  if (!dir) return missing_param(attempt, "other_secrets");
  std::string path = *dir + "/" + kProbeSecretName;
  attempt += " " + path;
  FileRead r = read_prefix(path);
  if (r.err) return failed(attempt, r.err, {{"path", path}});
  return reached(attempt, {{"path", path},
                           {"first_bytes", printable(r.data)},
                           {"marker_found", r.data.find(*m) != std::string::npos}});
}

}  // namespace sandgate::probes::util
