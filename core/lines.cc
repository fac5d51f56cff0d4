#include "core/lines.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace sandgate {

Result<std::optional<std::string>> LineReader::next(int stop_fd) {
  for (;;) {
    size_t nl = buffer_.find('\n', scanned_);
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      scanned_ = 0;
      return std::optional<std::string>(std::move(line));
    }
    scanned_ = buffer_.size();
    if (buffer_.size() > max_line_)
      return logic_error("read a line", "a line longer than " + std::to_string(max_line_) + " bytes");
    if (eof_) {
      if (buffer_.empty()) return std::optional<std::string>();
      std::string last = std::move(buffer_);
      buffer_.clear();
      scanned_ = 0;
      return std::optional<std::string>(std::move(last));
    }
    struct pollfd fds[2] = {{fd_, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (::poll(fds, stop_fd >= 0 ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      return sys_error("poll");
    }
    if (stop_fd >= 0 && fds[1].revents) {
      stopped_ = true;
      return std::optional<std::string>();
    }
    char chunk[65536];
    ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      // A peer that reset the connection has ended its input.
      if (errno == ECONNRESET) {
        eof_ = true;
        continue;
      }
      return sys_error("read");
    }
    if (n == 0) eof_ = true;
    else buffer_.append(chunk, static_cast<size_t>(n));
  }
}

}  // namespace sandgate
