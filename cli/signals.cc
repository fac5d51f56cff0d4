#include "cli/signals.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

namespace sandgate::cli {

InterruptFd::InterruptFd() {
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&mask, sig);
  sigprocmask(SIG_BLOCK, &mask, &old_);
  fd_.reset(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
}

InterruptFd::~InterruptFd() {
  // Consume what arrived, or unblocking would deliver it now and kill us with its default
  // action after the run was already torn down.
  struct signalfd_siginfo si;
  while (fd_.valid() && ::read(fd_.get(), &si, sizeof si) == sizeof si) {
  }
  sigprocmask(SIG_SETMASK, &old_, nullptr);
}

int InterruptFd::pending() const {
  sigset_t set;
  sigpending(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    if (sigismember(&set, sig)) return sig;
  return 0;
}

}  // namespace sandgate::cli
