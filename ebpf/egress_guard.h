/* The egress guard's allowlist key and decision event, shared by egress_guard.bpf.c and
 * egress_guard.cc. */
#ifndef SANDGATE_EBPF_EGRESS_GUARD_H
#define SANDGATE_EBPF_EGRESS_GUARD_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* An LPM-trie key: every field before `addr` is matched whole, then `addr` to the rule's prefix.
 * prefixlen counts bits from `pad` on: SG_GUARD_FIXED_BITS + the address prefix. */
struct sg_guard_key {
  __u32 prefixlen;
  __u32 pad;      /* 0 */
  __u64 run;      /* the run's cgroup id */
  __u16 port;     /* host order; 0: any port */
  __u8 protocol;  /* IPPROTO_TCP / IPPROTO_UDP; 0: both */
  __u8 family;    /* AF_INET / AF_INET6 */
  __u8 addr[16];
};
#define SG_GUARD_FIXED_BITS ((4 + 8 + 2 + 1 + 1) * 8)

struct sg_guard_event {
  __u64 cgroup_id; /* the process's own cgroup: the call */
  __u64 run;       /* the run's cgroup id */
  __u64 ts_ns;
  __u32 pid;
  __u16 port;
  __u8 protocol;
  __u8 family;
  __u8 addr[16];
  __u8 allowed;
  __u8 hook;       /* 1 connect, 2 sendmsg */
  __u8 pad[6];
};

/* Bytes and packets through the sockets of one cgroup (a call), off loopback. */
struct sg_net_bytes {
  __u64 bytes_out;
  __u64 bytes_in;
  __u64 packets_out;
  __u64 packets_in;
};

#endif
