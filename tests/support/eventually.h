// Waiting in a test for what finishes after the call that started it has returned: a killed
// process's exit (the kernel's, asynchronous), a network namespace's cleanup (after an RCU grace
// period), a pool that a server's thread refills, a process placed in its cgroup by another.
//
// eventually(done) asks done() until it holds, and is false only once `bound` has passed on the
// clock. The bound is a deadline, not a count of polls: a poll that reads /proc or asks a server
// takes time of its own, more beside stress-ng, and a count of polls then stretches into
// minutes or, with a short sleep, shrinks below what a busy machine needs. It bounds a failure,
// never a success (it returns as soon as done() holds), so it is generous: 10 s, where the
// waits it serves take a few milliseconds on an idle 2-core machine.
//
// Not for checking that something does *not* happen: a condition that must stay false is
// checked once, after whatever would have made it true has been waited for.
#pragma once

#include <chrono>
#include <thread>

namespace sandgate::testing {

inline constexpr std::chrono::milliseconds kEventuallyBound{10'000};
inline constexpr std::chrono::milliseconds kEventuallyPoll{10};

template <typename F>
bool eventually(F&& done, std::chrono::milliseconds bound = kEventuallyBound,
                std::chrono::milliseconds poll = kEventuallyPoll) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(poll);
  }
}

}  // namespace sandgate::testing
