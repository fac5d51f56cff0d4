// The syscall filter every jailed call runs under: allow by default, EPERM for the surface a
// sandboxed program has no business touching (kernel modules, mounts, namespaces, tracing of
// other processes, BPF, keyrings, io_uring, terminal injection, raw/vsock sockets).
#pragma once

#include <linux/filter.h>

#include <string>
#include <vector>

#include "core/result.h"

namespace sandgate::providers {

struct SeccompRule {
  std::string syscall;  // as libseccomp names it
  std::string why;      // one line, printed by `sandgate providers --verbose` and reports
};

// The syscalls denied outright (argument-conditional rules are listed by their syscall name too).
const std::vector<SeccompRule>& seccomp_denied_syscalls();

// The filter compiled to classic BPF, once per run (libseccomp's compile costs ~0.2 ms and
// allocates; installing the compiled program costs ~0.07 ms and does not).
struct SeccompProgram {
  std::vector<struct sock_filter> instructions;
};
Result<SeccompProgram> build_seccomp_program();

// Installs a compiled program into the calling thread. Precondition: no_new_privs is set (or
// the caller has CAP_SYS_ADMIN). Must be the last step before execve.
Status install_seccomp_program(const SeccompProgram& program);

}  // namespace sandgate::providers
