// SPDX-License-Identifier: GPL-2.0
// The egress guard: cgroup/connect4|6 and cgroup/sendmsg4|6 programs attached to each guarded
// run's cgroup (unified hierarchy). A connect, or a UDP send with a destination address, from
// any process below it passes only if the run's allowlist (an LPM trie, keyed by the run's
// cgroup id) holds the destination; otherwise the kernel returns EPERM to the caller. Loopback
// stays open: it is the run's own network namespace. Every decision is logged with the cgroup
// (the call) that made it.
#include "vmlinux.h"

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "ebpf/egress_guard.h"

char LICENSE[] SEC("license") = "GPL";

#define AF_INET 2
#define AF_INET6 10

__u64 dropped = 0;  // decisions the ring buffer had no room for (the decision itself stands)

struct {
  __uint(type, BPF_MAP_TYPE_LPM_TRIE);
  __uint(max_entries, 4096);
  __type(key, struct sg_guard_key);
  __type(value, __u8);
  __uint(map_flags, BPF_F_NO_PREALLOC);
} allow SEC(".maps");

// Guarded runs: cgroup id -> 1. A process's run is its nearest ancestor in here.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 1024);
  __type(key, __u64);
  __type(value, __u8);
} runs SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 20);
} decisions SEC(".maps");

static __always_inline __u64 run_of_current(void) {
  __u64 id = bpf_get_current_cgroup_id();
  if (bpf_map_lookup_elem(&runs, &id)) return id;
  for (int level = 8; level >= 1; level--) {
    __u64 a = bpf_get_current_ancestor_cgroup_id(level);
    if (a && bpf_map_lookup_elem(&runs, &a)) return a;
  }
  return 0;
}

static __always_inline int allowed(struct sg_guard_key *k, __u16 port, __u8 proto) {
  __u16 ports[2] = {port, 0};
  __u8 protos[2] = {proto, 0};
  for (int p = 0; p < 2; p++)
    for (int q = 0; q < 2; q++) {
      k->port = ports[p];
      k->protocol = protos[q];
      if (bpf_map_lookup_elem(&allow, k)) return 1;
    }
  return 0;
}

static __always_inline int decide(struct bpf_sock_addr *ctx, __u8 family, __u8 hook) {
  __u64 run = run_of_current();
  if (!run) return 1;  // not a guarded run (the program is attached to guarded runs only)
  struct sg_guard_key k = {};
  k.prefixlen = SG_GUARD_FIXED_BITS + (family == AF_INET ? 32 : 128);
  k.run = run;
  k.family = family;
  int loopback;
  if (family == AF_INET) {
    __u32 ip = ctx->user_ip4;
    __builtin_memcpy(k.addr, &ip, 4);
    loopback = k.addr[0] == 127;
  } else {
    __u32 w0 = ctx->user_ip6[0], w1 = ctx->user_ip6[1], w2 = ctx->user_ip6[2], w3 = ctx->user_ip6[3];
    __builtin_memcpy(k.addr, &w0, 4);
    __builtin_memcpy(k.addr + 4, &w1, 4);
    __builtin_memcpy(k.addr + 8, &w2, 4);
    __builtin_memcpy(k.addr + 12, &w3, 4);
    loopback = !w0 && !w1 && !w2 && w3 == bpf_htonl(1);
  }
  __u16 port = bpf_ntohs((__u16)ctx->user_port);
  __u8 proto = (__u8)ctx->protocol;
  int ok = loopback || allowed(&k, port, proto);
  struct sg_guard_event *e = bpf_ringbuf_reserve(&decisions, sizeof(*e), 0);
  if (e) {
    e->cgroup_id = bpf_get_current_cgroup_id();
    e->run = run;
    e->ts_ns = bpf_ktime_get_ns();
    e->pid = bpf_get_current_pid_tgid() >> 32;
    e->port = port;
    e->protocol = proto;
    e->family = family;
    __builtin_memcpy(e->addr, k.addr, 16);
    e->allowed = ok;
    e->hook = hook;
    bpf_ringbuf_submit(e, 0);
  } else {
    __sync_fetch_and_add(&dropped, 1);
  }
  return ok;  // 0: the kernel fails the syscall with EPERM
}

// The network-byte meter: cgroup_skb programs on the same guarded runs, counting what passes
// through each socket's cgroup (the call that owns it) off loopback. They never drop.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u64);
  __type(value, struct sg_net_bytes);
} net_bytes SEC(".maps");

static __always_inline void meter(struct __sk_buff *skb, int out) {
  if (skb->ifindex == 1) return;  // loopback: the run's own namespace
  __u64 id = bpf_skb_cgroup_id(skb);
  struct sg_net_bytes *b = bpf_map_lookup_elem(&net_bytes, &id);
  if (!b) {
    struct sg_net_bytes zero = {};
    bpf_map_update_elem(&net_bytes, &id, &zero, BPF_NOEXIST);
    b = bpf_map_lookup_elem(&net_bytes, &id);
    if (!b) return;
  }
  if (out) {
    __sync_fetch_and_add(&b->bytes_out, skb->len);
    __sync_fetch_and_add(&b->packets_out, 1);
  } else {
    __sync_fetch_and_add(&b->bytes_in, skb->len);
    __sync_fetch_and_add(&b->packets_in, 1);
  }
}

SEC("cgroup_skb/egress")
int meter_egress(struct __sk_buff *skb) {
  meter(skb, 1);
  return 1;
}

SEC("cgroup_skb/ingress")
int meter_ingress(struct __sk_buff *skb) {
  meter(skb, 0);
  return 1;
}

SEC("cgroup/connect4")
int guard_connect4(struct bpf_sock_addr *ctx) { return decide(ctx, AF_INET, 1); }

SEC("cgroup/connect6")
int guard_connect6(struct bpf_sock_addr *ctx) { return decide(ctx, AF_INET6, 1); }

SEC("cgroup/sendmsg4")
int guard_sendmsg4(struct bpf_sock_addr *ctx) { return decide(ctx, AF_INET, 2); }

SEC("cgroup/sendmsg6")
int guard_sendmsg6(struct bpf_sock_addr *ctx) { return decide(ctx, AF_INET6, 2); }
