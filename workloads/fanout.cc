#include "workloads/fanout.h"

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace sandgate::workloads {
namespace {

// Enough for the raw system calls below and a signal frame: the child shares our signal
// handlers' code (copied dispositions, no CLONE_SIGHAND), and a handler may run on this stack.
constexpr size_t kChildStack = 64 << 10;

// Runs in the child, in our address space but on its own stack and with our thread's TLS, so
// only raw system calls: nothing that takes a lock or writes errno on success.
int child_main(void* arg) {
  auto parent = static_cast<pid_t>(reinterpret_cast<intptr_t>(arg));
  ::syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  // The parent may have died before the signal was armed: then we were reparented.
  if (::syscall(SYS_getppid) != parent) ::syscall(SYS_exit, 0);
  for (;;) ::syscall(SYS_pause);
  return 0;
}

}  // namespace

Fanout::~Fanout() {
  while (!children_.empty()) stop_last();
}

std::vector<pid_t> Fanout::pids() const {
  std::vector<pid_t> out;
  for (const auto& c : children_) out.push_back(c.pid);
  return out;
}

void Fanout::stop_last() {
  Child c = children_.back();
  children_.pop_back();
  // Our own unreaped child: its pid cannot be reused before the waitpid below.
  ::kill(c.pid, SIGKILL);
  while (::waitpid(c.pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  ::munmap(c.stack, kChildStack);
}

Status Fanout::set(size_t n) {
  while (children_.size() > n) stop_last();
  while (children_.size() < n) {
    void* stack = ::mmap(nullptr, kChildStack, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) return sys_error("mmap child stack");
    char* top = static_cast<char*>(stack) + kChildStack;
    pid_t pid = ::clone(child_main, top, CLONE_VM | SIGCHLD,
                        reinterpret_cast<void*>(static_cast<intptr_t>(::getpid())));
    if (pid < 0) {
      int err = errno;
      ::munmap(stack, kChildStack);
      return sys_error(err, "clone fan-out child",
                       std::to_string(children_.size()) + " alive");
    }
    children_.push_back({pid, stack});
  }
  return ok_status();
}

}  // namespace sandgate::workloads
