// One owner per file descriptor.
//
// UniqueFd closes on destruction. DirFd is a directory fd through which every control file
// (cgroupfs, procfs) is opened with openat, so a path is resolved once and a racing rename or
// removal shows up as ENOENT on the file, not as a write to the wrong place.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"

namespace sandgate {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);
  // Closes without touching errno or allocating: usable in a child after clone().
  void close_signal_safe();

 private:
  int fd_ = -1;
};

// A pipe with both ends owned; O_CLOEXEC unless flags say otherwise.
struct Pipe {
  UniqueFd read;
  UniqueFd write;
};
Result<Pipe> make_pipe(int flags = O_CLOEXEC);

// open(2) / openat(2) returning an owned fd.
Result<UniqueFd> open_fd(const std::string& path, int flags, mode_t mode = 0);

// Reads a whole file (bounded by max_bytes) / writes a string at offset 0.
Result<std::string> read_file(const std::string& path, size_t max_bytes = 16 << 20);
Status write_file(const std::string& path, std::string_view data, int flags = O_WRONLY | O_CLOEXEC,
                  mode_t mode = 0644);

// Replaces `name` in `dir` with a file holding `data` (mode 0644), where the directory's
// content may be another's doing (a run's workspace, written by root from the host): nothing
// is followed. `dir` is opened O_NOFOLLOW, the data goes to a file created there exclusively
// under a name of its own, and rename(2) replaces `name` itself, a link there included.
// `name` must be one file name (no '/'). A reader sees the old content or the new, never part.
Status replace_file_in(const std::string& dir, const std::string& name, std::string_view data);
// Reads `name` in `dir` where the directory's content may be another's doing, as
// replace_file_in writes there: `dir` is opened O_NOFOLLOW and `name` is opened O_NOFOLLOW and
// O_NONBLOCK below it; anything but a regular file (a link, a FIFO) is an error, as is a file
// of more than max_bytes. nullopt: there is no such file (yet).
Result<std::optional<std::string>> read_file_in(const std::string& dir, const std::string& name,
                                                size_t max_bytes);

// Reads a file a user named as input (a trace, a policy, a data file to import). It must be a
// regular file: a FIFO, a socket or a device would block forever or never end, so each is
// refused with a message saying what it is, before anything is read. A file larger than
// max_bytes is an error, not cut. Every command that reads its inputs from paths goes through
// this one check.
Result<std::string> read_input_file(const std::string& path, size_t max_bytes);
// What kind of file a stat mode is, for messages: "a regular file", "a FIFO", "a socket", ...
std::string file_kind(mode_t mode);

// Reads until EOF or max_bytes from an fd.
Result<std::string> read_all(int fd, size_t max_bytes = 16 << 20);
// Writes all of data, retrying on EINTR and short writes.
Status write_all(int fd, std::string_view data);

// A listening AF_UNIX stream socket at path (an old socket file there is replaced), mode 0600:
// calls served on it run code in root-made sandboxes, so only its owner may connect.
Result<UniqueFd> listen_unix(const std::string& path, int backlog = 16);
// A stream connection to the AF_UNIX socket at path.
Result<UniqueFd> connect_unix(const std::string& path);

// One byte with one descriptor (SCM_RIGHTS) on a unix socket, retrying on EINTR; no SIGPIPE.
// Allocates only on failure (a call's child uses it between fork and exec).
Status send_byte_with_fd(int socket, char byte, int fd);
// One byte and up to max_fds descriptors (close-on-exec) from a unix socket: recvmsg's count
// (1, 0 at end of stream, -1 with errno), retrying on EINTR. Descriptors beyond max_fds are
// closed by the kernel (MSG_CTRUNC); `flags` as recvmsg's (MSG_DONTWAIT).
ssize_t receive_byte_with_fds(int socket, char& byte, std::vector<UniqueFd>& fds, size_t max_fds,
                              int flags = 0);

class DirFd {
 public:
  DirFd() = default;
  explicit DirFd(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}

  static Result<DirFd> open(const std::string& path);
  Result<DirFd> openat_dir(const std::string& name) const;
  Result<UniqueFd> openat(const std::string& name, int flags, mode_t mode = 0) const;
  Result<std::string> read(const std::string& name, size_t max_bytes = 1 << 20) const;
  // A single write(2): cgroupfs and procfs take one value per write.
  Status write(const std::string& name, std::string_view value) const;
  bool exists(const std::string& name) const;

  int get() const { return fd_.get(); }
  const std::string& path() const { return path_; }
  std::string child(const std::string& name) const { return path_ + "/" + name; }

 private:
  UniqueFd fd_;
  std::string path_;
};

}  // namespace sandgate
