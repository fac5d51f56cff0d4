// The syscall filter every jailed call runs under: an allow list. What ordinary programs need
// is allowed; the dangerous surface a sandboxed program has no business touching (kernel
// modules, mounts, namespaces, tracing other processes, BPF, keyrings, io_uring, terminal
// injection, vsock/packet sockets, ...) answers EPERM; everything else answers ENOSYS, as an
// older kernel would, so libc and language runtimes fall back cleanly (glibc does for clone3,
// faccessat2, fchmodat2). That includes every syscall newer than the installed libseccomp:
// a name it cannot resolve is refused and reported, never silently allowed.
//
// It is two classic-BPF programs, both installed:
//   1. the allow list: ALLOW, EPERM or ENOSYS per syscall, with no argument conditions except
//      personality's, default ENOSYS;
//   2. the argument rules: EPERM for socket(AF_VSOCK / AF_PACKET), ioctl(TIOCSTI) and clone
//      with a namespace flag, default ALLOW.
// The kernel runs every filter and takes the answer of highest precedence (ERRNO over ALLOW,
// Documentation/userspace-api/seccomp_filter.rst), so a call runs only when both allow it.
// Two programs, not one, because libseccomp does not define how overlapping rules for one
// syscall combine: with 2.5.4 an unconditional ALLOW of socket silently swallows a conditional
// EPERM of socket(AF_VSOCK). By construction no syscall gets ERRNO from both programs.
//
// A third program, installed only where the run has someone to answer it (issue 16: the jail's
// /proc views server, providers/sysinfo_notify.h): sysinfo(2) goes to a user-space listener
// (SECCOMP_RET_USER_NOTIF), default ALLOW. USER_NOTIF outranks ALLOW, so the allow list keeps
// sysinfo as it was (allowed) and the kernel hands the call to the listener instead of running
// it; the call then sees the run's memory, load, uptime and threads instead of the host's. Only
// sysinfo leaves the kernel's per-filter "always allowed" cache (kernel/seccomp.c,
// seccomp_cache_check_allow), so no other syscall runs one more instruction. With the listener
// gone (closed or its process dead) the kernel answers ENOSYS (seccomp_do_user_notification),
// for a waiting call too: nothing hangs. A call under it cannot install a listener of its own
// (EBUSY: one listener per filter chain, kernel/seccomp.c has_duplicate_listener).
//
// Integer arguments are compared on their low 32 bits (SCMP_CMP_MASKED_EQ, mask 0xffffffff):
// the registers are 64 bits wide but the kernel reads socket's family as int, ioctl's cmd as
// unsigned int and clone's flags through lower_32_bits() (kernel/fork.c), so a comparison of
// all 64 bits lets socket((1UL << 32) | AF_VSOCK, ...) through to an AF_VSOCK socket.
//
// Other ABIs: the programs are for the native architecture only. An i386 call from a 64-bit
// process (int $0x80) and an x32 call (nr | __X32_SYSCALL_BIT) match no native rule, so both
// kill the process (libseccomp's bad-architecture action) rather than reaching the kernel.
#pragma once

#include <linux/filter.h>

#include <string>
#include <string_view>
#include <vector>

#include "core/fd.h"
#include "core/result.h"

namespace sandgate::providers {

struct SeccompRule {
  std::string syscall;  // as libseccomp names it
  std::string why;      // one line, printed by `sandgate providers --verbose` and reports
};

// The syscalls that answer EPERM, outright or (socket, ioctl, clone) for the arguments their
// `why` names. clone3 is listed too: it answers ENOSYS, so libc falls back to clone, whose
// flags the filter can read.
const std::vector<SeccompRule>& seccomp_denied_syscalls();
// The syscalls allowed whatever their arguments (socket, ioctl and clone among them: their
// argument rules are in the second program). personality is allowed for the values listed in
// seccomp_policy.cc only.
const std::vector<std::string>& seccomp_allowed_syscalls();
// Syscalls deliberately left off both lists, so they answer ENOSYS, each with the decision.
const std::vector<SeccompRule>& seccomp_absent_syscalls();

struct SeccompOptions {
  // Test-only weakening (weakening.h, seccomp_full_width_compare): the argument rules compare
  // all 64 bits of the register, as the filter did before issue 9.
  bool full_width_compare = false;
};

// The filter compiled to classic BPF (the default one when sandgate is built, see
// built_in_seccomp_program; installing the compiled programs does not allocate).
struct SeccompProgram {
  std::vector<struct sock_filter> allow_list;      // program 1, default ENOSYS
  std::vector<struct sock_filter> argument_rules;  // program 2, default ALLOW
  std::vector<struct sock_filter> sysinfo_notify;  // program 3: sysinfo to the listener
  // Names on the lists that this libseccomp cannot resolve (newer than it): they answer
  // ENOSYS whatever the list said. The host logs them.
  std::vector<std::string> unknown_syscalls;
  // The highest syscall number this libseccomp can name on this architecture: nothing above
  // it can be on the allow list, so every number above it answers ENOSYS.
  int highest_known_syscall = -1;

  size_t instruction_count() const { return allow_list.size() + argument_rules.size(); }
};
Result<SeccompProgram> build_seccomp_program(const SeccompOptions& options = {});

// The highest syscall number this libseccomp can name on this architecture (computed once).
int seccomp_highest_known_syscall();

// A call's process installs the programs as the last part of its restriction
// (call_child.h: restriction_for, restrict_call).

// A program's bytes (a header, then the three programs' instructions), as the sealed memfd
// below holds them and as the build embeds the default one; and back, checked (a wrong magic,
// a short or long text is an error). unknown_syscalls is not part of them.
std::string serialize_seccomp_program(const SeccompProgram& p);
Result<SeccompProgram> parse_seccomp_program(std::string_view bytes);

// The default program (SeccompOptions{}), compiled when sandgate was built: the build runs
// build_seccomp_program in seccomp_program_gen against the libseccomp sandgate links
// statically, and embeds its bytes and unknown names (seccomp_program_fd.cc). The same
// compiler, the same lists and the same architecture give the same program; a test compares it
// with a compile made now. Its compile cost a process 3.5-5.5 ms of CPU at its first run (the
// 1024 numbers resolved for highest_known_syscall, libseccomp's pages faulted in), 1.5 ms at
// the next ones.
Result<SeccompProgram> built_in_seccomp_program();

// The program for `options`, made once per process and kept in a sealed memfd (read-only for
// everyone, its size fixed): the default one is the built-in program, the test-only weakening
// is compiled here; every run with the same options installs the same program, so each run's
// supervisor gets the fd with its config instead of compiling its own. The names libseccomp
// cannot resolve are logged once, here. The fd is owned by this module and lives as long as the
// process.
Result<int> compiled_seccomp_program_fd(const SeccompOptions& options);
// What the supervisor reads back from that fd.
Result<SeccompProgram> read_seccomp_program(int fd);

}  // namespace sandgate::providers
