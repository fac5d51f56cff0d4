#include "core/fd.h"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
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

Status write_file(const std::string& path, std::string_view data, int flags, mode_t mode) {
  SG_ASSIGN_OR_RETURN(UniqueFd fd, open_fd(path, flags, mode));
  return std::move(write_all(fd.get(), data)).context("writing " + path);
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
    return logic_error("unix socket", "path longer than " + std::to_string(sizeof addr.sun_path - 1) + " bytes", path);
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  return addr;
}

}  // namespace

Result<UniqueFd> listen_unix(const std::string& path, int backlog) {
  SG_ASSIGN_OR_RETURN(sockaddr_un addr, unix_address(path));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return sys_error("socket");
  ::unlink(path.c_str());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return sys_error("bind", path);
  if (::chmod(path.c_str(), 0600) != 0) return sys_error("chmod", path);
  if (::listen(fd.get(), backlog) != 0) return sys_error("listen", path);
  return fd;
}

Result<UniqueFd> connect_unix(const std::string& path) {
  SG_ASSIGN_OR_RETURN(sockaddr_un addr, unix_address(path));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return sys_error("socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return sys_error("connect", path);
  return fd;
}

}  // namespace sandgate
