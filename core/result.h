// Result<T> and Error: the one way expected failures travel through sandgate.
//
// An Error carries the errno (0 when the failure is not a system call's), the name of the
// step that failed, the path it acted on, and a chain of context added as it rises. Kernel
// failures are data, not exceptions (oomd SystemMaybe, gVisor PosixErrorOr).
#pragma once

#include <cerrno>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace sandgate {

struct Error {
  int err = 0;            // errno, or 0 for a logical failure
  std::string step;       // what was being done: "pivot_root", "parse policy"
  std::string path;       // the object acted on, may be empty
  std::string detail;     // free text for logical failures
  std::vector<std::string> context;  // outermost last, added by Result::context()

  // Adds a line of context as the error rises.
  Error&& context_add(std::string what) && {
    context.push_back(std::move(what));
    return std::move(*this);
  }
  // "step path: strerror (context <- context)" in one line.
  std::string message() const;
  // The symbolic errno name ("EPERM"), or "" when err == 0.
  std::string errno_name() const;
};

// An Error from a failed system call; reads errno at the call.
Error sys_error(std::string step, std::string path = {});
Error sys_error(int err, std::string step, std::string path = {});
// An Error with no errno: bad input, protocol violation.
Error logic_error(std::string step, std::string detail, std::string path = {});

// errno name for any value ("ENOENT"); "E<number>" when unknown.
std::string errno_name(int err);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const& { return std::get<1>(v_); }
  Error&& error() && { return std::get<1>(std::move(v_)); }

  // Adds a line of context to an error as it rises; no-op on success.
  Result&& context(std::string what) && {
    if (!ok()) std::get<1>(v_).context.push_back(std::move(what));
    return std::move(*this);
  }

 private:
  std::variant<T, Error> v_;
};

// Result<void>.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), failed_(true) {}  // NOLINT

  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const& { return error_; }
  Error&& error() && { return std::move(error_); }
  Result&& context(std::string what) && {
    if (failed_) error_.context.push_back(std::move(what));
    return std::move(*this);
  }

 private:
  Error error_;
  bool failed_ = false;
};

using Status = Result<void>;
inline Status ok_status() { return {}; }

}  // namespace sandgate

// Propagates the error of an expression that yields a Result; evaluates to nothing.
#define SG_TRY(expr)                                   \
  do {                                                 \
    auto sg_try_result_ = (expr);                      \
    if (!sg_try_result_.ok()) return std::move(sg_try_result_).error(); \
  } while (0)

#define SG_CONCAT_INNER(a, b) a##b
#define SG_CONCAT(a, b) SG_CONCAT_INNER(a, b)
// Declares `lhs` from the value of a Result, or returns its error.
#define SG_ASSIGN_OR_RETURN(lhs, expr) \
  SG_ASSIGN_OR_RETURN_IMPL(SG_CONCAT(sg_result_, __LINE__), lhs, expr)
#define SG_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return std::move(tmp).error();  \
  lhs = std::move(tmp).value()
