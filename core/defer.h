// Defer: runs a callable at scope exit unless cancelled. A template, not std::function, so it
// costs nothing and cannot allocate (nsjail `defer`, gVisor `Cleanup`).
#pragma once

#include <utility>

namespace sandgate {

template <typename F>
class [[nodiscard]] Defer {
 public:
  explicit Defer(F f) : f_(std::move(f)) {}
  ~Defer() {
    if (armed_) f_();
  }
  Defer(const Defer&) = delete;
  Defer& operator=(const Defer&) = delete;

  void cancel() { armed_ = false; }

 private:
  F f_;
  bool armed_ = true;
};

}  // namespace sandgate
