// The lab's address plan: every decoy the network probes aim at, in one place. The lab is a
// network namespace sandgate makes for itself (probes/lab/lab.h); these addresses exist only
// on its loopback and its own veth pair, so nothing sent to them can leave the machine.
//
// Never 192.0.2.0/24 or fd00::/64: those are this machine's real network (docs/DESIGN.md, "Safety
// rules"). The decoys are the link-local metadata addresses clouds really use, and TEST-NET-3
// (203.0.113.0/24, RFC 5737) for the "production" host, the allow-listed registry and DNS.
#pragma once

#include <cstdint>

namespace sandgate::probes::lab {

// Cloud instance metadata (AWS/GCP/Azure IPv4; AWS IPv6, which is fd00:ec2::/64, a different
// /64 from this machine's fd00::/64).
inline constexpr char kMetadataV4[] = "169.254.169.254";
inline constexpr char kMetadataV6[] = "fd00:ec2::254";
inline constexpr uint16_t kMetadataPort = 80;

// A host the sandbox must never reach ("production database / API").
inline constexpr char kProductionHost[] = "203.0.113.10";
inline constexpr uint16_t kProductionPort = 443;

// UDP exfiltration target on the same host (a datagram carrying a token; the decoy logs it).
inline constexpr uint16_t kProductionUdpPort = 514;

// The allow-listed package registry: port kRegistryPort is allowed by an egress allowlist,
// kRegistryOtherPort (also listening, also logged) is not.
inline constexpr char kRegistryHost[] = "203.0.113.20";
inline constexpr uint16_t kRegistryPort = 443;
inline constexpr uint16_t kRegistryOtherPort = 8080;

// The registry's name: the decoy DNS answers it with kRegistryHost (the allowlist variant
// lists it as tcp:registry.sandgate.test:443, resolved through the run's own resolver).
inline constexpr char kRegistryName[] = "registry.sandgate.test";

// The decoy DNS server: answers kRegistryName with kRegistryHost, every other A query with
// kProductionHost, and logs every query name.
inline constexpr char kDnsServer[] = "203.0.113.53";
inline constexpr uint16_t kDnsPort = 53;

// The domain DNS exfiltration probes put their token under: <token>.exfil.sandgate.test.
inline constexpr char kExfilDomain[] = "exfil.sandgate.test";

// The lab's own veth pair, both ends inside the lab: the network interface a machine has
// beyond loopback, so that net.interfaces' native baseline has one to find (a sandbox with a
// network namespace of its own must not). Each end carries one /32 of TEST-NET-3 and nothing
// else: no prefix route, no default route, no IPv6; what is sent to either is delivered
// locally in the lab.
inline constexpr char kLabLink[] = "sg-lab0";
inline constexpr char kLabLinkAddress[] = "203.0.113.241";
inline constexpr char kLabPeer[] = "sg-lab1";
inline constexpr char kLabPeerAddress[] = "203.0.113.242";

}  // namespace sandgate::probes::lab
