#include "providers/seccomp_policy.h"

#include <sys/ioctl.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "core/defer.h"
#include "core/fd.h"

namespace sandgate::providers {

const std::vector<SeccompRule>& seccomp_denied_syscalls() {
  static const std::vector<SeccompRule> rules = {
      {"mount", "no new mounts"},
      {"umount2", "no unmounting the jail's view"},
      {"pivot_root", "no changing the root"},
      {"move_mount", "new mount API"},
      {"open_tree", "new mount API"},
      {"fsopen", "new mount API"},
      {"fsmount", "new mount API"},
      {"fsconfig", "new mount API"},
      {"fspick", "new mount API"},
      {"mount_setattr", "new mount API"},
      {"ptrace", "no tracing other processes"},
      {"process_vm_readv", "no reading another process's memory"},
      {"process_vm_writev", "no writing another process's memory"},
      {"bpf", "no BPF programs"},
      {"perf_event_open", "no perf events (kernel surface, side channels)"},
      {"keyctl", "no kernel keyrings"},
      {"add_key", "no kernel keyrings"},
      {"request_key", "no kernel keyrings"},
      {"kexec_load", "no kernel replacement"},
      {"kexec_file_load", "no kernel replacement"},
      {"init_module", "no kernel modules"},
      {"finit_module", "no kernel modules"},
      {"delete_module", "no kernel modules"},
      {"open_by_handle_at", "no opening files by handle (escapes bind mounts)"},
      {"name_to_handle_at", "no file handles"},
      {"userfaultfd", "no userfaultfd (exploit primitive)"},
      {"io_uring_setup", "no io_uring (bypasses the syscall filter)"},
      {"io_uring_enter", "no io_uring"},
      {"io_uring_register", "no io_uring"},
      {"unshare", "no new namespaces"},
      {"setns", "no joining namespaces"},
      {"clone", "only without namespace flags"},
      {"clone3", "ENOSYS, so libc falls back to clone, whose flags can be checked"},
      {"socket", "no AF_VSOCK or AF_PACKET sockets"},
      {"ioctl", "no TIOCSTI (typing into a terminal)"},
      {"reboot", "no reboot"},
      {"swapon", "no swap changes"},
      {"swapoff", "no swap changes"},
      {"acct", "no process accounting"},
      {"quotactl", "no quota changes"},
      {"syslog", "no kernel log"},
      {"lookup_dcookie", "kernel surface"},
      {"vhangup", "no terminal hangup"},
  };
  return rules;
}

Result<SeccompProgram> build_seccomp_program() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) return logic_error("seccomp_init", "libseccomp could not allocate a filter");
  Defer release([&] { seccomp_release(ctx); });
  const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
  auto add = [&](uint32_t action, const char* name, unsigned count,
                 const struct scmp_arg_cmp* args) -> Status {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) return {};  // not on this architecture
    int rc = seccomp_rule_add_array(ctx, action, nr, count, args);
    if (rc != 0) return sys_error(-rc, "seccomp rule", name);
    return {};
  };

  const char* conditional[] = {"clone", "clone3", "socket", "ioctl"};
  for (const auto& rule : seccomp_denied_syscalls()) {
    bool special = false;
    for (const char* c : conditional) special |= rule.syscall == c;
    if (!special) SG_TRY(add(eperm, rule.syscall.c_str(), 0, nullptr));
  }
  // clone: deny any namespace flag. clone3 passes flags in memory the filter cannot read, so it
  // answers ENOSYS and glibc falls back to clone (the approach of Docker's default profile).
  constexpr uint64_t kNsFlags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
                                CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP | CLONE_NEWTIME;
  // One rule per flag, (flags & F) == F: a filter rule's comparisons are ANDed, so "any of
  // these bits" needs a rule each.
  for (uint64_t f = 1; f; f <<= 1) {
    if (!(kNsFlags & f)) continue;
    struct scmp_arg_cmp has = SCMP_A0(SCMP_CMP_MASKED_EQ, f, f);
    SG_TRY(add(eperm, "clone", 1, &has));
  }
  SG_TRY(add(SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, nullptr));
  for (int family : {AF_VSOCK, AF_PACKET}) {
    struct scmp_arg_cmp fam = SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(family));
    SG_TRY(add(eperm, "socket", 1, &fam));
  }
  // The request is an int: compare the low 32 bits only (a caller may set garbage above).
  struct scmp_arg_cmp tiocsti = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI);
  SG_TRY(add(eperm, "ioctl", 1, &tiocsti));

  // Export the compiled program through a memfd and keep it (libseccomp 2.5 has no in-memory
  // export).
  int fd = ::memfd_create("sandgate-seccomp", MFD_CLOEXEC);
  if (fd < 0) return sys_error("memfd_create");
  UniqueFd memfd(fd);
  int rc = seccomp_export_bpf(ctx, fd);
  if (rc != 0) return sys_error(-rc, "seccomp_export_bpf");
  off_t size = ::lseek(fd, 0, SEEK_END);
  if (size <= 0 || size % sizeof(struct sock_filter) != 0)
    return logic_error("seccomp_export_bpf", "unexpected program size " + std::to_string(size));
  SeccompProgram program;
  program.instructions.resize(static_cast<size_t>(size) / sizeof(struct sock_filter));
  if (::pread(fd, program.instructions.data(), static_cast<size_t>(size), 0) != size)
    return sys_error("read seccomp program");
  return program;
}

Status install_seccomp_program(const SeccompProgram& program) {
  struct sock_fprog prog = {static_cast<unsigned short>(program.instructions.size()),
                            const_cast<struct sock_filter*>(program.instructions.data())};
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0)
    return sys_error("install seccomp filter");
  return {};
}

}  // namespace sandgate::providers
