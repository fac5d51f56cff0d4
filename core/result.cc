#include "core/result.h"

#include <cstring>

namespace sandgate {

std::string errno_name(int err) {
  if (err == 0) return "";
  // strerrorname_np is glibc >= 2.32 (Debian 12 ships 2.36).
  if (const char* n = strerrorname_np(err)) return n;
  return "E" + std::to_string(err);
}

std::string Error::errno_name() const { return sandgate::errno_name(err); }

std::string Error::message() const {
  std::string m = step;
  if (!path.empty()) m += " " + path;
  if (err != 0) m += ": " + std::string(strerror(err)) + " (" + sandgate::errno_name(err) + ")";
  if (!detail.empty()) m += ": " + detail;
  for (auto it = context.begin(); it != context.end(); ++it) m += " <- " + *it;
  return m;
}

Error sys_error(std::string step, std::string path) {
  return sys_error(errno, std::move(step), std::move(path));
}

Error sys_error(int err, std::string step, std::string path) {
  Error e;
  e.err = err;
  e.step = std::move(step);
  e.path = std::move(path);
  return e;
}

Error logic_error(std::string step, std::string detail, std::string path) {
  Error e;
  e.step = std::move(step);
  e.detail = std::move(detail);
  e.path = std::move(path);
  return e;
}

}  // namespace sandgate
