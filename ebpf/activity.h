/* The event the activity tracer (activity.bpf.c) writes into its ring buffer, shared with user
 * space (activity_tracer.cc). Plain C with fixed-width types: the same layout on both sides.
 * Every event carries the cgroup id (cgroup2, the unified mount on hybrid hosts) of the process
 * that caused it: what maps it to its run and call. */
#ifndef SANDGATE_EBPF_ACTIVITY_H
#define SANDGATE_EBPF_ACTIVITY_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define SG_PATH_MAX 160     /* exec filename, open path; longer ones are cut (flag below) */
#define SG_ARGS_MAX 128     /* exec argv, NUL-separated, cut */
#define SG_ADDR_MAX 28      /* sizeof(struct sockaddr_in6) */
#define SG_MAX_PREFIXES 8   /* sensitive path prefixes matched in the kernel */
#define SG_PREFIX_MAX 48
#define SG_MAX_DEPTH 8      /* cgroup levels searched for a watched ancestor */

enum sg_event_kind {
  SG_EV_EXEC = 1,  /* path: filename; args: argv; ppid: parent's pid */
  SG_EV_FORK = 2,  /* a new process (not a thread): ppid = the parent's pid, pid = the child's */
  SG_EV_EXIT = 3,  /* the process (its last thread) exited; ret = wait status */
  SG_EV_CONNECT = 4, /* connect(2); addr; ret = 0 or -errno (-EINPROGRESS for non-blocking) */
  SG_EV_SENDTO = 5,  /* sendto/sendmsg with a destination address (UDP, DNS) */
  SG_EV_OPEN = 6,    /* open/openat/openat2 of a path under a sensitive prefix; ret = fd or -errno */
};

enum sg_event_flags {
  SG_EVF_PATH_CUT = 1, /* path was longer than SG_PATH_MAX - 1 */
  SG_EVF_ARGS_CUT = 2,
};

struct sg_event {
  __u64 cgroup_id;
  __u64 ts_ns; /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
  __u32 kind;
  __u32 pid;  /* process (tgid) */
  __u32 tid;
  __u32 ppid;
  __s32 ret;
  __u32 flags;       /* sg_event_flags */
  __u32 open_flags;  /* O_* of an open */
  __u16 sock_type;   /* SOCK_STREAM, SOCK_DGRAM... of a connect/send (0: unknown) */
  __u16 protocol;    /* IPPROTO_* */
  __u32 addr_len;
  __u8 addr[SG_ADDR_MAX]; /* the sockaddr as the process passed it */
  __u32 args_len;
  char comm[16];
  char path[SG_PATH_MAX];
  char args[SG_ARGS_MAX];
};

/* Run-queue delay of one cgroup's tasks: waits from runnable to running. */
struct sg_runq {
  __u64 total_ns;
  __u64 waits;
  __u64 max_ns;
};

#endif
