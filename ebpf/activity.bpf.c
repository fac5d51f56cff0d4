// SPDX-License-Identifier: GPL-2.0
// The activity tracer: what the processes of watched cgroups really did, as events in one
// bounded ring buffer (loss counted in `dropped`). Only tracepoints (tp_btf) are used: this
// project's kernels have no kprobes and refuse fentry/LSM programs (doctor shows both).
//   sched_process_exec / fork / exit   every exec (filename, argv), new process and exit
//   sys_enter / sys_exit               connect, sendto/sendmsg with an address, and opens of
//                                      paths under the sensitive prefixes, with their result
//   sched_wakeup / _new / sched_switch run-queue delay: from a watched task's wake-up (or
//                                      preemption) to its running again, summed per cgroup
// A process is watched when its cgroup, or one of its ancestors, is in `watched` (user space
// adds each run's cgroup id): the filter runs before anything is copied.
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "ebpf/activity.h"

char LICENSE[] SEC("license") = "GPL";

// Tunables, set before load (STYLE: tunables at the top as const volatile rodata).
const volatile __u32 n_prefixes = 0;
const volatile __u32 prefix_len[SG_MAX_PREFIXES] = {};
const volatile char prefixes[SG_MAX_PREFIXES][SG_PREFIX_MAX] = {};

// Events the ring buffer had no room for, and enter/exit pairs whose state was lost.
__u64 dropped = 0;

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 4 << 20);  // resized by user space before load
} events SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __type(key, __u64);  // cgroup id
  __type(value, __u8);
} watched SEC(".maps");

// A syscall seen at entry, finished at exit: keyed by thread id.
struct pending {
  __u32 kind;
  __u32 nr;  // the syscall number, checked at exit: a stale entry never completes another call
  __s32 fd;
  __u32 open_flags;
  __u32 addr_len;
  __u32 flags;
  __u64 upath;  // an open's path not yet readable at entry: read at exit (0: read already)
  __u8 addr[SG_ADDR_MAX];
  char path[SG_PATH_MAX];
};

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 8192);
  __type(key, __u32);
  __type(value, struct pending);
} inflight SEC(".maps");

// Run-queue delay: when each watched task became runnable, and the sums per cgroup.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);  // tid
  __type(value, __u64);  // ktime when it became runnable
} runnable_since SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __type(key, __u64);  // cgroup id
  __type(value, struct sg_runq);
} runq SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct pending);
} scratch SEC(".maps");

// x86_64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl).
#define NR_open 2
#define NR_connect 42
#define NR_sendto 44
#define NR_sendmsg 46
#define NR_openat 257
#define NR_openat2 437

static __always_inline int watched_cgroup(__u64 *cgroup_id) {
  __u64 id = bpf_get_current_cgroup_id();
  *cgroup_id = id;
  if (bpf_map_lookup_elem(&watched, &id)) return 1;
  for (int level = 1; level <= SG_MAX_DEPTH; level++) {
    __u64 a = bpf_get_current_ancestor_cgroup_id(level);
    if (a == 0 || a == id) break;  // past the current cgroup's own level
    if (bpf_map_lookup_elem(&watched, &a)) return 1;
  }
  return 0;
}

// watched_cgroup for another task than the current one: its cgroup2 and the ancestors.
static __always_inline int watched_task(struct task_struct *p, __u64 *cgroup_id) {
  // tp_btf arguments are BTF pointers: plain field loads (the verifier makes them fault-safe),
  // no bpf_probe_read helper call per field. These run on every wake-up and context switch.
  struct cgroup *cg = p->cgroups->dfl_cgrp;
  if (!cg) return 0;
  __u64 id = cg->kn->id;
  *cgroup_id = id;
  if (bpf_map_lookup_elem(&watched, &id)) return 1;
  int level = cg->level;
  for (int l = 1; l <= SG_MAX_DEPTH; l++) {
    if (l >= level) break;
    struct cgroup *anc = 0;
    if (bpf_probe_read_kernel(&anc, sizeof(anc), &cg->ancestors[l]) != 0 || !anc) break;
    __u64 a = BPF_CORE_READ(anc, kn, id);
    if (bpf_map_lookup_elem(&watched, &a)) return 1;
  }
  return 0;
}

static __always_inline void mark_runnable(struct task_struct *p) {
  __u64 cg;
  if (!watched_task(p, &cg)) return;
  __u32 tid = p->pid;
  __u64 now = bpf_ktime_get_ns();
  bpf_map_update_elem(&runnable_since, &tid, &now, BPF_ANY);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(on_wakeup, struct task_struct *p) {
  mark_runnable(p);
  return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(on_wakeup_new, struct task_struct *p) {
  mark_runnable(p);
  return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next) {
  // A task preempted while runnable waits in the queue from now on.
  if (prev->__state == 0 /* TASK_RUNNING */) mark_runnable(prev);
  __u32 tid = next->pid;
  __u64 *since = bpf_map_lookup_elem(&runnable_since, &tid);
  if (!since) return 0;
  __u64 delay = bpf_ktime_get_ns() - *since;
  bpf_map_delete_elem(&runnable_since, &tid);
  __u64 cg = next->cgroups->dfl_cgrp->kn->id;
  struct sg_runq *r = bpf_map_lookup_elem(&runq, &cg);
  if (!r) {
    struct sg_runq zero = {};
    bpf_map_update_elem(&runq, &cg, &zero, BPF_NOEXIST);
    r = bpf_map_lookup_elem(&runq, &cg);
    if (!r) return 0;
  }
  __sync_fetch_and_add(&r->total_ns, delay);
  __sync_fetch_and_add(&r->waits, 1);
  if (delay > r->max_ns) r->max_ns = delay;  // racy across CPUs; a maximum, not an account
  return 0;
}

static __always_inline struct sg_event *reserve(__u64 cgroup_id, __u32 kind) {
  struct sg_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    __sync_fetch_and_add(&dropped, 1);
    return 0;
  }
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  e->cgroup_id = cgroup_id;
  e->ts_ns = bpf_ktime_get_ns();
  e->kind = kind;
  e->pid = pid_tgid >> 32;
  e->tid = (__u32)pid_tgid;
  e->ppid = 0;
  e->ret = 0;
  e->flags = 0;
  e->open_flags = 0;
  e->sock_type = 0;
  e->protocol = 0;
  e->addr_len = 0;
  e->args_len = 0;
  e->path[0] = 0;
  e->args[0] = 0;
  bpf_get_current_comm(e->comm, sizeof(e->comm));
  return e;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm) {
  __u64 cg;
  if (!watched_cgroup(&cg)) return 0;
  struct sg_event *e = reserve(cg, SG_EV_EXEC);
  if (!e) return 0;
  e->ppid = BPF_CORE_READ(p, real_parent, tgid);
  long n = bpf_probe_read_kernel_str(e->path, sizeof(e->path), BPF_CORE_READ(bprm, filename));
  if (n == sizeof(e->path)) e->flags |= SG_EVF_PATH_CUT;
  // The new image's argv, as it sits in its stack: NUL-separated strings.
  unsigned long start = BPF_CORE_READ(p, mm, arg_start);
  unsigned long end = BPF_CORE_READ(p, mm, arg_end);
  __u64 len = end > start ? end - start : 0;
  if (len > SG_ARGS_MAX) {
    len = SG_ARGS_MAX;
    e->flags |= SG_EVF_ARGS_CUT;
  }
  if (len > 0 && bpf_probe_read_user(e->args, len & (SG_ARGS_MAX * 2 - 1), (void *)start) == 0)
    e->args_len = len;
  bpf_ringbuf_submit(e, 0);
  return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child) {
  // New processes only: a thread is a clone with the parent's tgid.
  if (BPF_CORE_READ(child, tgid) != BPF_CORE_READ(child, pid)) return 0;
  __u64 cg;
  if (!watched_cgroup(&cg)) return 0;
  struct sg_event *e = reserve(cg, SG_EV_FORK);
  if (!e) return 0;
  e->ppid = e->pid;
  e->pid = BPF_CORE_READ(child, tgid);
  e->tid = e->pid;
  bpf_ringbuf_submit(e, 0);
  return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p) {
  // The whole process: its last thread. signal->live reaches 0 before this tracepoint fires.
  if (BPF_CORE_READ(p, signal, live.counter) != 0) return 0;
  __u64 cg;
  if (!watched_cgroup(&cg)) return 0;
  struct sg_event *e = reserve(cg, SG_EV_EXIT);
  if (!e) return 0;
  e->ret = BPF_CORE_READ(p, exit_code);
  e->ppid = BPF_CORE_READ(p, real_parent, tgid);
  bpf_ringbuf_submit(e, 0);
  return 0;
}

static __always_inline int under_prefix(const char *path) {
  for (__u32 i = 0; i < SG_MAX_PREFIXES; i++) {
    if (i >= n_prefixes) break;
    __u32 len = prefix_len[i];
    int match = 1;
    for (__u32 j = 0; j < SG_PREFIX_MAX; j++) {
      if (j >= len) break;
      if (path[j] != prefixes[i][j]) {
        match = 0;
        break;
      }
    }
    if (match) return 1;
  }
  return 0;
}

static __always_inline void copy_addr(struct pending *pd, const void *uaddr, __u64 len) {
  if (len > SG_ADDR_MAX) len = SG_ADDR_MAX;
  pd->addr_len = 0;
  if (uaddr && len > 0 && bpf_probe_read_user(pd->addr, len & 31, uaddr) == 0) pd->addr_len = len;
}

static __always_inline int traced_syscall(long id) {
  return id == NR_connect || id == NR_sendto || id == NR_sendmsg || id == NR_open ||
         id == NR_openat || id == NR_openat2;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter, struct pt_regs *regs, long id) {
  if (!traced_syscall(id)) return 0;
  __u64 cg;
  if (!watched_cgroup(&cg)) return 0;
  __u32 zero = 0;
  struct pending *pd = bpf_map_lookup_elem(&scratch, &zero);
  if (!pd) return 0;
  unsigned long a0 = regs->di, a1 = regs->si, a2 = regs->dx;
  pd->flags = 0;
  pd->addr_len = 0;
  pd->open_flags = 0;
  pd->path[0] = 0;
  pd->fd = (__s32)a0;
  pd->nr = (__u32)id;
  if (id == NR_connect) {
    pd->kind = SG_EV_CONNECT;
    copy_addr(pd, (const void *)a1, a2);
  } else if (id == NR_sendto) {
    unsigned long dest = regs->r8, dest_len = regs->r9;
    if (!dest) return 0;  // a connected socket: its connect was recorded
    pd->kind = SG_EV_SENDTO;
    copy_addr(pd, (const void *)dest, dest_len);
  } else if (id == NR_sendmsg) {
    struct user_msghdr msg;
    if (bpf_probe_read_user(&msg, sizeof(msg), (const void *)a1) != 0 || !msg.msg_name) return 0;
    pd->kind = SG_EV_SENDTO;
    copy_addr(pd, msg.msg_name, msg.msg_namelen);
  } else {
    const char *upath = (const char *)(id == NR_open ? a0 : a1);
    long n = bpf_probe_read_user_str(pd->path, sizeof(pd->path), upath);
    pd->upath = 0;
    if (n <= 0) {
      // Not faulted in yet (a forked child's first touch of a file-backed page, say): this
      // program cannot fault, so the path is read at exit, after the kernel has read it.
      pd->upath = (__u64)upath;
      pd->path[0] = 0;
    } else {
      if (!under_prefix(pd->path)) return 0;
      if (n == sizeof(pd->path)) pd->flags |= SG_EVF_PATH_CUT;
    }
    pd->kind = SG_EV_OPEN;
    pd->fd = -1;
    if (id == NR_open) pd->open_flags = a1;
    else if (id == NR_openat) pd->open_flags = a2;
    else {
      __u64 how_flags = 0;  // struct open_how's first field
      bpf_probe_read_user(&how_flags, sizeof(how_flags), (const void *)a2);
      pd->open_flags = how_flags;
    }
  }
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  bpf_map_update_elem(&inflight, &tid, pd, BPF_ANY);
  return 0;
}

// The socket behind `fd` of the current task, or 0.
static __always_inline struct sock *sock_of_fd(int fd) {
  struct task_struct *task = bpf_get_current_task_btf();
  struct file **fds = BPF_CORE_READ(task, files, fdt, fd);
  unsigned int max = BPF_CORE_READ(task, files, fdt, max_fds);
  if (fd < 0 || (unsigned int)fd >= max) return 0;
  struct file *f = 0;
  if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) != 0 || !f) return 0;
  struct socket *s = BPF_CORE_READ(f, private_data);
  if (!s) return 0;
  return BPF_CORE_READ(s, sk);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit, struct pt_regs *regs, long ret) {
  // Every syscall of every task on the host passes here: the number first, before any lookup.
  long nr = regs->orig_ax;
  if (!traced_syscall(nr)) return 0;
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  struct pending *pd = bpf_map_lookup_elem(&inflight, &tid);
  if (!pd) return 0;
  if (pd->nr != (__u32)nr) {
    bpf_map_delete_elem(&inflight, &tid);
    return 0;
  }
  if (pd->kind == SG_EV_OPEN && pd->upath) {
    long n = bpf_probe_read_user_str(pd->path, sizeof(pd->path), (const char *)pd->upath);
    if (n <= 0 || !under_prefix(pd->path)) {
      bpf_map_delete_elem(&inflight, &tid);
      return 0;
    }
    if (n == sizeof(pd->path)) pd->flags |= SG_EVF_PATH_CUT;
  }
  __u64 cg = bpf_get_current_cgroup_id();
  struct sg_event *e = reserve(cg, pd->kind);
  if (e) {
    e->ret = ret;
    e->flags = pd->flags;
    e->open_flags = pd->open_flags;
    if (pd->kind == SG_EV_OPEN) {
      __builtin_memcpy(e->path, pd->path, sizeof(e->path));
    } else {
      e->addr_len = pd->addr_len;
      __builtin_memcpy(e->addr, pd->addr, sizeof(e->addr));
      struct sock *sk = sock_of_fd(pd->fd);
      if (sk) {
        e->sock_type = BPF_CORE_READ(sk, sk_type);
        e->protocol = BPF_CORE_READ(sk, sk_protocol);
      }
    }
    bpf_ringbuf_submit(e, 0);
  }
  bpf_map_delete_elem(&inflight, &tid);
  return 0;
}
