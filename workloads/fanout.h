// Process fan-out: children that only wait, so a segment's pids target is met without adding
// memory or CPU the curve did not ask for.
//
// Each child is a clone(CLONE_VM) of this process on a small stack of its own: it shares the
// address space (no private pages, no page-table copy of a large heap, nothing charged twice),
// sets PR_SET_PDEATHSIG(SIGKILL) and pauses. It makes raw system calls only. The pids
// controller counts it as one task, like a compiler the trace saw.
//
// Preconditions: grow() is called from one thread that outlives the children (the parent-death
// signal fires when the *thread* that cloned them exits); children are SIGKILLed and reaped by
// shrink() and by the destructor.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/result.h"

namespace sandgate::workloads {

class Fanout {
 public:
  Fanout() = default;
  ~Fanout();
  Fanout(const Fanout&) = delete;
  Fanout& operator=(const Fanout&) = delete;

  // Starts or stops children until `n` are alive. A refused clone (EAGAIN at pids.max) is an
  // error carrying how many are alive; those stay.
  Status set(size_t n);
  size_t alive() const { return children_.size(); }
  std::vector<pid_t> pids() const;

 private:
  struct Child {
    pid_t pid;
    void* stack;
  };
  void stop_last();

  std::vector<Child> children_;
};

}  // namespace sandgate::workloads
