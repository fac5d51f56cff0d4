// SIGINT/SIGTERM as a readable fd: blocked for the process (main blocks them before any thread
// starts), delivered through a signalfd that calls poll as their cancel_fd, so an interrupted
// run still tears down everything it made.
#pragma once

#include "core/fd.h"

namespace sandgate::cli {

class InterruptFd {
 public:
  InterruptFd();   // blocks SIGINT, SIGTERM, SIGHUP and opens the signalfd
  ~InterruptFd();  // restores the previous mask
  int fd() const { return fd_.get(); }
  // The signal received so far, or 0 (does not consume it: every poller sees it).
  int pending() const;

 private:
  UniqueFd fd_;
  sigset_t old_;
};

}  // namespace sandgate::cli
