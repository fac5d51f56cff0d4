// The wiring of a run with an egress allowlist (--net allowlist): the jail's own network
// namespace gets one interface, eth0, the end of a veth pair whose other end sits in an
// upstream namespace the caller names (the lab for probes and tests; a namespace with a route
// out, prepared by the operator, in production). The run's side has an address and a default
// route via the upstream's side, so whatever the kernel's egress guard (ebpf/egress, attached
// by the run session to the run's cgroup) lets through reaches the upstream; everything else
// is refused there with EPERM before a packet is made.
//
// Addresses come from 198.18.0.0/15 (RFC 2544, benchmarking: never this machine's network
// nor a decoy's), one /30 per run: slot N is 198.18.0.0 + 4N, the upstream's side .1, the
// run's .2. A slot is claimed by making <state_dir>/egress-slots/N (mkdir is atomic across
// sandgate processes), recorded in the run's state first, so `sandgate gc` frees it after a
// crash. The veth needs no record: it dies with the run's namespace.
//
// IPv4 only: the run has no IPv6 address or route beyond loopback.
#pragma once

#include <sys/types.h>

#include <string>

#include "core/fd.h"
#include "core/host_paths.h"
#include "core/result.h"
#include "core/state.h"

namespace sandgate::providers {

inline constexpr int kEgressSlots = 1 << 15;  // /30s in 198.18.0.0/15

struct EgressLink {
  int slot = -1;
  std::string upstream_link;     // "sge<slot>" in the upstream namespace
  std::string upstream_address;  // 198.18.x.y+1: the run's gateway
  std::string run_address;       // 198.18.x.y+2 on the run's eth0
};

// The slot's addresses (no claim): slot in [0, kEgressSlots).
EgressLink egress_link_for_slot(int slot);

// Checks that `path` names a network namespace (an nsfs file: a bind mount made by `ip netns`
// or the lab, or /proc/PID/ns/net) and opens it.
Result<UniqueFd> open_upstream_netns(const std::string& path);

// Claims a slot (first free from a start derived from run_id), makes the veth pair between the
// network namespace of `pid` (the run's supervisor) and `upstream_netns`, addresses both ends,
// brings them up and routes the run's default via the upstream side.
Result<EgressLink> wire_egress_link(const HostPaths& paths, RunState& state, pid_t pid,
                                    const std::string& upstream_netns, const std::string& run_id);

}  // namespace sandgate::providers
