// Line framing over a file descriptor: the one reader behind every JSON-lines stream sandgate
// speaks (the protocol's server and client, stdin of `serve`). Reads in blocks, not a byte per
// read(2), and bounds a line so a peer cannot make it buffer without end.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "core/result.h"

namespace sandgate {

class LineReader {
 public:
  // `max_line`: a longer line is an error (the peer is not speaking the protocol).
  explicit LineReader(int fd, size_t max_line = size_t{64} << 20) : fd_(fd), max_line_(max_line) {}

  // The next line without its '\n' (a trailing '\r' is kept). nullopt at end of input (a last
  // line without '\n' is returned first) or when `stop_fd` (if >= 0) becomes readable.
  Result<std::optional<std::string>> next(int stop_fd = -1);
  // Whether next() returned nullopt because of `stop_fd`.
  bool stopped() const { return stopped_; }

 private:
  int fd_;
  size_t max_line_;
  std::string buffer_;
  size_t scanned_ = 0;  // bytes of buffer_ already searched for '\n'
  bool eof_ = false, stopped_ = false;
};

}  // namespace sandgate
