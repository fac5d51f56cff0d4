#include "core/fd.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace sandgate {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) {
    int saved = errno;
    ::close(fd_);
    errno = saved;
  }
  fd_ = fd;
}

void UniqueFd::close_signal_safe() {
  if (fd_ >= 0) syscall(SYS_close, fd_);
  fd_ = -1;
}

Result<Pipe> make_pipe(int flags) {
  int fds[2];
  if (pipe2(fds, flags) != 0) return sys_error("pipe2");
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

Result<UniqueFd> open_fd(const std::string& path, int flags, mode_t mode) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) return sys_error("open", path);
  return UniqueFd(fd);
}

Result<std::string> read_all(int fd, size_t max_bytes) {
  std::string out;
  char buf[8192];
  while (out.size() < max_bytes) {
    ssize_t n = ::read(fd, buf, std::min(sizeof buf, max_bytes - out.size()));
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error("read");
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Status write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error("write");
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

Result<std::string> read_file(const std::string& path, size_t max_bytes) {
  SG_ASSIGN_OR_RETURN(UniqueFd fd, open_fd(path, O_RDONLY));
  return std::move(read_all(fd.get(), max_bytes)).context("reading " + path);
}

std::string file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

Result<std::string> read_input_file(const std::string& path, size_t max_bytes) {
  constexpr std::string_view kStep = "read input";
  auto refuse = [&](mode_t mode) {
    return logic_error(std::string(kStep),
                       "is " + file_kind(mode) + ", not a regular file (inputs are read whole)",
                       path);
  };
  // stat first, so that a FIFO is never opened (an open for reading waits for a writer); the
  // open is O_NONBLOCK and fstat checks again what was really opened, should the path have been
  // replaced in between.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return sys_error(kStep.data(), path);
  if (!S_ISREG(st.st_mode)) return refuse(st.st_mode);
  SG_ASSIGN_OR_RETURN(UniqueFd fd, open_fd(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (::fstat(fd.get(), &st) != 0) return sys_error("fstat", path);
  if (!S_ISREG(st.st_mode)) return refuse(st.st_mode);
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return logic_error(std::string(kStep),
                       std::to_string(st.st_size) + " bytes, more than the " +
                           std::to_string(max_bytes) + " this reader takes",
                       path);
  }
  SG_ASSIGN_OR_RETURN(std::string text,
                      std::move(read_all(fd.get(), max_bytes + 1)).context("reading " + path));
  if (text.size() > max_bytes) {  // grew while read
    return logic_error(std::string(kStep),
                       "more than the " + std::to_string(max_bytes) + " bytes this reader takes",
                       path);
  }
  return text;
}

Status write_file(const std::string& path, std::string_view data, int flags, mode_t mode) {
  SG_ASSIGN_OR_RETURN(UniqueFd fd, open_fd(path, flags, mode));
  return std::move(write_all(fd.get(), data)).context("writing " + path);
}

Status replace_file_in(const std::string& dir_path, const std::string& name,
                       std::string_view data) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    return logic_error("replace a file", "'" + name + "' is not one file name", dir_path);
  UniqueFd dir(::open(dir_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid()) return sys_error("open the directory", dir_path);
  static std::atomic<unsigned> counter{0};
  const std::string tmp = "." + name + ".sandgate-" + std::to_string(::getpid()) + "-" +
                          std::to_string(counter.fetch_add(1));
  UniqueFd fd(
      ::openat(dir.get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd.valid()) return sys_error("create", dir_path + "/" + tmp);
  Status written = write_all(fd.get(), data);
  if (written.ok() && ::fchmod(fd.get(), 0644) != 0) written = sys_error("chmod", tmp);
  fd.reset();
  if (written.ok() && ::renameat(dir.get(), tmp.c_str(), dir.get(), name.c_str()) != 0)
    written = sys_error("rename into place", dir_path + "/" + name);
  if (!written.ok()) ::unlinkat(dir.get(), tmp.c_str(), 0);
  return written;
}

Result<std::optional<std::string>> read_file_in(const std::string& dir_path,
                                                const std::string& name, size_t max_bytes) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    return logic_error("read a file", "'" + name + "' is not one file name", dir_path);
  const std::string path = dir_path + "/" + name;
  UniqueFd dir(::open(dir_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid()) return sys_error("open the directory", dir_path);
  UniqueFd fd(
      ::openat(dir.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return std::optional<std::string>();
    if (errno == ELOOP) return logic_error("read a file", "is a symbolic link, not followed", path);
    return sys_error("open", path);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return sys_error("fstat", path);
  if (!S_ISREG(st.st_mode))
    return logic_error("read a file", "is " + file_kind(st.st_mode) + ", not a regular file", path);
  SG_ASSIGN_OR_RETURN(std::string text,
                      std::move(read_all(fd.get(), max_bytes + 1)).context("reading " + path));
  if (text.size() > max_bytes)
    return logic_error("read a file", "more than " + std::to_string(max_bytes) + " bytes", path);
  return std::optional<std::string>(std::move(text));
}

Result<DirFd> DirFd::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return sys_error("open directory", path);
  return DirFd(UniqueFd(fd), path);
}

Result<DirFd> DirFd::openat_dir(const std::string& name) const {
  int fd = ::openat(fd_.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return sys_error("open directory", child(name));
  return DirFd(UniqueFd(fd), child(name));
}

Result<UniqueFd> DirFd::openat(const std::string& name, int flags, mode_t mode) const {
  int fd = ::openat(fd_.get(), name.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) return sys_error("open", child(name));
  return UniqueFd(fd);
}

Result<std::string> DirFd::read(const std::string& name, size_t max_bytes) const {
  SG_ASSIGN_OR_RETURN(UniqueFd fd, openat(name, O_RDONLY));
  return std::move(read_all(fd.get(), max_bytes)).context("reading " + child(name));
}

Status DirFd::write(const std::string& name, std::string_view value) const {
  SG_ASSIGN_OR_RETURN(UniqueFd fd, openat(name, O_WRONLY));
  ssize_t n = ::write(fd.get(), value.data(), value.size());
  if (n < 0) return sys_error("write", child(name));
  if (static_cast<size_t>(n) != value.size())
    return logic_error("write", "short write to a control file", child(name));
  return {};
}

bool DirFd::exists(const std::string& name) const {
  struct stat st;
  return ::fstatat(fd_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

namespace {

Result<sockaddr_un> unix_address(const std::string& path) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path)
    return logic_error("unix socket",
                       "path longer than " + std::to_string(sizeof addr.sun_path - 1) + " bytes",
                       path);
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  return addr;
}

}  // namespace

Result<UniqueFd> listen_unix(const std::string& path, int backlog) {
  SG_ASSIGN_OR_RETURN(sockaddr_un addr, unix_address(path));
  // Bound and listening under a temporary name, then renamed into place: a client that waits
  // for the path to appear (as every caller of `serve` does) must never find a socket that is
  // bound but not yet listening, which refuses it (ECONNREFUSED: three of ten runs of the
  // load test, beside stress-ng). Where the temporary name would not fit, the path itself.
  // The temporary name is this call's own (the process and a count): two threads listening in
  // one directory at once must not unlink or rename each other's socket.
  static std::atomic<uint64_t> calls{0};
  const size_t slash = path.rfind('/');
  std::string bound = path.substr(0, slash == std::string::npos ? 0 : slash + 1) + ".sg-" +
                      std::to_string(::getpid()) + "-" + std::to_string(calls++) + ".sock";
  if (bound.size() >= sizeof addr.sun_path) bound = path;
  SG_ASSIGN_OR_RETURN(addr, unix_address(bound));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return sys_error("socket");
  ::unlink(bound.c_str());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return sys_error("bind", bound);
  auto fail = [&](const char* step) {
    Error e = sys_error(step, bound);
    ::unlink(bound.c_str());
    return e;
  };
  if (::chmod(bound.c_str(), 0600) != 0) return fail("chmod");
  if (::listen(fd.get(), backlog) != 0) return fail("listen");
  if (bound != path && ::rename(bound.c_str(), path.c_str()) != 0) return fail("rename");
  return fd;
}

Status send_byte_with_fd(int socket, char byte, int fd) {
  struct iovec iov = {&byte, 1};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  ssize_t n;
  while ((n = ::sendmsg(socket, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
  }
  if (n != 1) return sys_error("sendmsg (a descriptor)");
  return {};
}

ssize_t receive_byte_with_fds(int socket, char& byte, std::vector<UniqueFd>& fds, size_t max_fds,
                              int flags) {
  struct iovec iov = {&byte, 1};
  std::vector<char> control(CMSG_SPACE(max_fds * sizeof(int)));
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  ssize_t n;
  while ((n = ::recvmsg(socket, &msg, flags | MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
  }
  if (n <= 0) return n;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.emplace_back(fd);
    }
  }
  return n;
}

Result<UniqueFd> connect_unix(const std::string& path) {
  SG_ASSIGN_OR_RETURN(sockaddr_un addr, unix_address(path));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return sys_error("socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return sys_error("connect", path);
  return fd;
}

}  // namespace sandgate
