// A recording Actuator for the ladder and controller unit tests (oomd BaseKillPluginMock):
// every call is recorded with its arguments instead of reaching a cgroup, and each kind of
// call can be told to fail. Thread-safe: the controller's monitor thread drives the ladder
// while a test reads the record. Test-only.
#pragma once

#include <cerrno>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "controller/cgroup.h"
#include "controller/ladder.h"

namespace sandgate::controller::testing {

struct ActuatorCall {
  enum class Op { kSetLimits, kFreeze, kSignal, kKill };
  Op op = Op::kSetLimits;
  std::string cgroup;  // Cgroup::rel
  Limits limits;       // kSetLimits
  bool frozen = false;  // kFreeze
  int sig = 0;          // kSignal
  bool failed = false;  // the fake answered with an error
};

inline const char* to_string(ActuatorCall::Op op) {
  switch (op) {
    case ActuatorCall::Op::kSetLimits: return "set_limits";
    case ActuatorCall::Op::kFreeze: return "freeze";
    case ActuatorCall::Op::kSignal: return "signal";
    case ActuatorCall::Op::kKill: return "kill";
  }
  return "?";
}

class RecordingActuator : public Actuator {
 public:
  using Op = ActuatorCall::Op;

  Status set_limits(const Cgroup& cg, const Limits& limits) override {
    ActuatorCall c{Op::kSetLimits, cg.rel, limits, false, 0, false};
    return add(std::move(c));
  }
  Status freeze(const Cgroup& cg, bool frozen) override {
    return add(ActuatorCall{Op::kFreeze, cg.rel, {}, frozen, 0, false});
  }
  Status signal(const Cgroup& cg, int sig) override {
    return add(ActuatorCall{Op::kSignal, cg.rel, {}, false, sig, false});
  }
  Status kill(const Cgroup& cg) override {
    return add(ActuatorCall{Op::kKill, cg.rel, {}, false, 0, false});
  }

  // From now on, calls of `op` are recorded and answered with EIO (or succeed again).
  void fail(Op op, bool failing = true) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failing) {
      failing_.insert(op);
    } else {
      failing_.erase(op);
    }
  }

  std::vector<ActuatorCall> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  std::vector<ActuatorCall> calls(Op op) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<ActuatorCall> out;
    for (const auto& c : calls_)
      if (c.op == op) out.push_back(c);
    return out;
  }
  size_t count(Op op) const { return calls(op).size(); }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_.size();
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.clear();
  }

 private:
  Status add(ActuatorCall c) {
    std::lock_guard<std::mutex> lock(mu_);
    c.failed = failing_.contains(c.op);
    calls_.push_back(c);
    if (c.failed) return sys_error(EIO, std::string("fake ") + to_string(c.op), c.cgroup);
    return ok_status();
  }

  mutable std::mutex mu_;
  std::vector<ActuatorCall> calls_;
  std::set<Op> failing_;
};

}  // namespace sandgate::controller::testing
