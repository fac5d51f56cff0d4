#include "core/exec_result.h"

#include <cerrno>
#include <cstring>

#include "core/result.h"

namespace sandgate {

std::string StartFailure::describe() const {
  return step + ": " + std::strerror(err) + " (" + errno_name(err) + ")";
}

ExitStatus start_failure_status(const StartFailure& f) {
  ExitStatus s;
  s.exited = true;
  // What sh(1) gives: "command not found" is 127, "found but cannot be run" 126.
  s.code = f.step == "execve" && (f.err == ENOENT || f.err == ENOTDIR) ? 127 : 126;
  return s;
}

}  // namespace sandgate
