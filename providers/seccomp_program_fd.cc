// The seccomp program each run's supervisor is sent (seccomp_policy.h,
// compiled_seccomp_program_fd): the default one embedded at build time, kept in a sealed memfd.
#include <fcntl.h>
#include <sys/mman.h>

#include <map>
#include <mutex>

#include "core/fd.h"
#include "core/log.h"
#include "providers/seccomp_policy.h"
// kSeccompProgram and kUnknownSyscalls, written by seccomp_program_gen at build time.
#include "seccomp_default_program.inc"

namespace sandgate::providers {
namespace {

Result<UniqueFd> seal_program(const SeccompProgram& p) {
  UniqueFd fd(::memfd_create("sandgate-seccomp", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return sys_error("memfd_create for the seccomp program");
  SG_TRY(write_all(fd.get(), serialize_seccomp_program(p)));
  // Nobody, not even a holder of the fd, can change it from here on.
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
    return sys_error("seal the seccomp program");
  return fd;
}

}  // namespace

Result<SeccompProgram> built_in_seccomp_program() {
  SG_ASSIGN_OR_RETURN(SeccompProgram p,
                      parse_seccomp_program(
                          std::string_view(reinterpret_cast<const char*>(built_in::kSeccompProgram),
                                           sizeof built_in::kSeccompProgram)));
  for (const char* const* name = built_in::kUnknownSyscalls; *name; ++name)
    p.unknown_syscalls.emplace_back(*name);
  return p;
}

Result<int> compiled_seccomp_program_fd(const SeccompOptions& options) {
  static std::mutex mu;
  static std::map<bool, UniqueFd> programs;  // by full_width_compare
  std::lock_guard lock(mu);
  auto it = programs.find(options.full_width_compare);
  if (it != programs.end()) return it->second.get();
  SG_ASSIGN_OR_RETURN(SeccompProgram p, options.full_width_compare ? build_seccomp_program(options)
                                                                   : built_in_seccomp_program());
  if (!p.unknown_syscalls.empty()) {
    std::string names;
    for (const auto& n : p.unknown_syscalls) names += (names.empty() ? "" : ", ") + n;
    spdlog::info(
        "seccomp: libseccomp knows syscalls up to {} and cannot name {}; those answer "
        "ENOSYS in the jail",
        p.highest_known_syscall, names);
  }
  SG_ASSIGN_OR_RETURN(UniqueFd fd, seal_program(p));
  int raw = fd.get();
  programs.emplace(options.full_width_compare, std::move(fd));
  return raw;
}

}  // namespace sandgate::providers
