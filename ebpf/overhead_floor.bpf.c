// SPDX-License-Identifier: GPL-2.0
// The floor under the activity tracer's cost, for bench/ebpf_bench only: the same tracepoints
// the tracer attaches to, each with a program that does nothing. What a workload pays with
// these attached is what the kernel charges for running any program there at all (for
// sys_enter/sys_exit: every syscall of every task takes the slow, traced entry path); only the
// rest is the tracer's own work and can be optimised away.
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "ebpf/overhead_floor.h"

char LICENSE[] SEC("license") = "GPL";

SEC("tp_btf/sched_wakeup")
int BPF_PROG(floor_wakeup, struct task_struct *p) { return 0; }
SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(floor_wakeup_new, struct task_struct *p) { return 0; }
SEC("tp_btf/sched_switch")
int BPF_PROG(floor_switch, bool preempt, struct task_struct *prev, struct task_struct *next) { return 0; }
SEC("tp_btf/sched_process_exec")
int BPF_PROG(floor_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm) { return 0; }
SEC("tp_btf/sched_process_fork")
int BPF_PROG(floor_fork, struct task_struct *parent, struct task_struct *child) { return 0; }
SEC("tp_btf/sched_process_exit")
int BPF_PROG(floor_exit, struct task_struct *p) { return 0; }
SEC("tp_btf/sys_enter")
int BPF_PROG(floor_sys_enter, struct pt_regs *regs, long id) { return 0; }
SEC("tp_btf/sys_exit")
int BPF_PROG(floor_sys_exit, struct pt_regs *regs, long ret) { return 0; }
