#include "ebpf/bpf_support.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/btf.h>
#include <linux/bpf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "core/fd.h"
#include "ebpf/activity_tracer.h"
#include "ebpf/egress.h"

namespace sandgate::ebpf {

Check btf_check(const HostPaths& paths) {
  struct stat st;
  if (::stat(paths.btf_vmlinux.c_str(), &st) != 0) {
    return check_failed("BTF", sys_error("stat", paths.btf_vmlinux).message() +
                                   " (kernel without CONFIG_DEBUG_INFO_BTF: CO-RE tracers "
                                   "cannot relocate)");
  }
  if (st.st_size == 0) return check_failed("BTF", paths.btf_vmlinux + " is empty");
  return check_ok("BTF", paths.btf_vmlinux + " (" + std::to_string(st.st_size >> 10) + " KiB)");
}

Status try_load_trivial_program() {
  // r0 = 0; exit: a socket filter that accepts nothing. Two instructions, always verifiable.
  const struct bpf_insn insns[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  int fd = bpf_prog_load(BPF_PROG_TYPE_SOCKET_FILTER, "sg_doctor", "GPL", insns,
                         sizeof insns / sizeof insns[0], nullptr);
  // libbpf 1.x returns -errno and also sets errno.
  if (fd < 0) return sys_error(-fd, "bpf(BPF_PROG_LOAD)", "socket filter r0=0; exit");
  UniqueFd owned(fd);
  return {};
}

Check bpf_load_check(const HostPaths& paths) {
  if (auto s = try_load_trivial_program(); !s.ok()) {
    std::string why = s.error().message();
    if (s.error().err == EPERM) {
      auto unpriv = read_file(paths.proc + "/sys/kernel/unprivileged_bpf_disabled", 16);
      why += " (needs CAP_BPF or root";
      if (unpriv.ok() && !unpriv->empty())
        why += "; kernel.unprivileged_bpf_disabled=" + unpriv->substr(0, 1);
      why += ")";
    }
    if (s.error().err == ENOSYS) why += " (kernel without CONFIG_BPF_SYSCALL)";
    return check_failed("BPF program load", why);
  }
  return check_ok("BPF program load",
                  "loaded and closed a socket filter (libbpf " + libbpf_version() + ")");
}

std::string find_tracefs(const std::vector<MountEntry>& mounts,
                         const std::string& expected) {
  std::string other;
  for (const auto& m : mounts) {
    if (m.fstype != "tracefs") continue;
    if (m.mount_point == expected) return expected;
    if (other.empty()) other = m.mount_point;
  }
  return other;
}

Check tracefs_check(const HostPaths& paths) {
  const char* name = "tracefs";
  std::string how = "mount it with `mount -t tracefs nodev " + paths.tracefs + "`";
  std::string mountinfo = paths.proc + "/self/mountinfo";
  auto text = read_file(mountinfo);
  if (!text.ok()) return check_failed(name, text.error().message());
  auto mounts = parse_mount_table(*text);
  if (!mounts.ok()) return check_failed(name, mounts.error().message());
  std::string where = find_tracefs(*mounts, paths.tracefs);
  if (where == paths.tracefs) return check_ok(name, "mounted at " + where);
  if (!where.empty()) {
    return check_ok(name, "mounted at " + where + ", not at " + paths.tracefs +
                              " (tracers look there first: " + how + ")");
  }
  return check_failed(name, "not mounted (tracepoints attached by name need it; sandgate's tracers attach "
                                 "through BTF (tp_btf) and do not): " + how);
}

Status try_load_trampoline_program(bool lsm, const std::string& func) {
  struct btf* vmlinux = btf__load_vmlinux_btf();
  if (!vmlinux) return sys_error(errno, "load vmlinux BTF");
  int id = btf__find_by_name_kind(vmlinux, func.c_str(), BTF_KIND_FUNC);
  btf__free(vmlinux);
  if (id < 0) return Error{ENOENT, "find BTF function", func, "not in the kernel's BTF"};
  const struct bpf_insn insns[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = lsm ? BPF_LSM_MAC : BPF_TRACE_FENTRY,
              .attach_btf_id = static_cast<__u32>(id));
  int fd = bpf_prog_load(lsm ? BPF_PROG_TYPE_LSM : BPF_PROG_TYPE_TRACING, "sg_doctor", "GPL", insns,
                         sizeof insns / sizeof insns[0], &opts);
  if (fd < 0) return sys_error(-fd, "bpf(BPF_PROG_LOAD)", (lsm ? "lsm/" : "fentry/") + func);
  UniqueFd owned(fd);
  return {};
}

Check fentry_check() {
  if (auto s = try_load_trampoline_program(false, "__sys_connect"); !s.ok())
    return check_failed("fentry/fexit", s.error().message() + " (the tracers use tp_btf tracepoints instead)");
  return check_ok("fentry/fexit", "loaded fentry/__sys_connect");
}

Check bpf_lsm_check() {
  if (auto s = try_load_trampoline_program(true, "bpf_lsm_file_open"); !s.ok())
    return check_failed("BPF LSM", s.error().message() +
                                       " (no bpf-lsm layer: the egress guard uses cgroup/connect hooks)");
  return check_ok("BPF LSM", "loaded lsm/file_open");
}

Check activity_tracer_check() {
  auto t = ActivityTracer::open();
  if (!t.ok()) return check_failed("activity tracer", t.error().message());
  return check_ok("activity tracer",
                  "loaded and attached (tp_btf sched_process_exec/fork/exit, sys_enter/sys_exit): "
                  "exec --trace works");
}

Check egress_guard_check() {
  auto g = EgressGuard::open();
  if (!g.ok()) return check_failed("egress guard", g.error().message());
  return check_ok("egress guard", "loaded (cgroup/connect4|6, sendmsg4|6; attached per run to its cgroup2 "
                                  "directory)");
}

std::string libbpf_version() {
  return std::to_string(libbpf_major_version()) + "." + std::to_string(libbpf_minor_version());
}

}  // namespace sandgate::ebpf
