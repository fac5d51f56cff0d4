// What the eBPF tracers need from the host, checked by doing it: BTF for CO-RE relocation,
// the right to load a program, and tracefs for tracepoint and kprobe attachment.
#pragma once

#include <string>
#include <vector>

#include "core/mounts.h"
#include "core/check.h"
#include "core/host_paths.h"
#include "core/result.h"

namespace sandgate::ebpf {

// <paths.btf_vmlinux> exists and is non-empty (CONFIG_DEBUG_INFO_BTF).
Check btf_check(const HostPaths& paths);

// Loads the smallest valid program, `r0 = 0; exit`, as BPF_PROG_TYPE_SOCKET_FILTER and closes
// it. The error carries the errno (EPERM: no CAP_BPF / CAP_SYS_ADMIN).
Status try_load_trivial_program();
Check bpf_load_check(const HostPaths& paths);

// Where tracefs is mounted according to `mounts`: `expected` when it is mounted there, else
// the first other tracefs mount (debugfs's tracing/ counts), else "".
std::string find_tracefs(const std::vector<MountEntry>& mounts,
                         const std::string& expected);
// tracefs at <paths.tracefs> per <paths.proc>/self/mountinfo; says how to mount it if not
// (doctor never mounts anything itself).
Check tracefs_check(const HostPaths& paths);

// Whether the kernel loads a program of `type` attached through a BPF trampoline to the BTF
// function `func` (fentry: "__sys_connect", LSM: "bpf_lsm_file_open"): loads `r0 = 0; exit`
// with that attach target and closes it. Some kernels refuse these with EPERM (no ftrace
// direct calls, a locked-down build); the tracers then use tracepoints only.
Status try_load_trampoline_program(bool lsm, const std::string& func);
Check fentry_check();
Check bpf_lsm_check();
// The activity tracer and the egress guard, loaded (and the tracer attached) for real.
Check activity_tracer_check();
Check egress_guard_check();

// "1.1" of the linked libbpf.
std::string libbpf_version();

}  // namespace sandgate::ebpf
