// The lab: a network namespace sandgate makes for itself, where every network probe runs and
// every decoy listens (docs/DESIGN.md, "Safety rules for everything that touches the network").
//
// Its interfaces are its own loopback, carrying every decoy address of lab_addresses.h, and a
// veth pair (kLabLink/kLabPeer) with both ends inside it, so that what runs natively in the lab
// sees a network interface as on a real machine; it has no route off the machine (checked by
// asking its routing table before any decoy starts).
// The decoys are threads of this process whose sockets were made inside the lab, so the rest
// of the process stays where it was. Every connection, HTTP request (line and headers),
// datagram and DNS query is logged with a timestamp, in memory and optionally as JSON lines;
// the judge reads them as host-side evidence.
//
// The namespace is recorded in the state directory (a run record "lab-..." holding a kNetns
// resource: the nsfs bind mount at <state_dir>/netns/<id>) before it is made, so `sandgate gc`
// removes it after a crash. The veth pair needs no record of its own: both ends are in the
// lab, and the kernel deletes them with the namespace.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/guards.h"
#include "core/host_paths.h"
#include "core/json.h"
#include "core/result.h"
#include "core/state.h"

namespace sandgate::probes::lab {

class EventLog;
class DecoyServer;

struct LabEvent {
  enum class Kind {
    kTcpConnect,   // a connection was accepted (logged at accept, before any data)
    kHttpRequest,  // a request on a metadata decoy: request_line, headers, payload (body)
    kTcpData,      // what a client sent to a plain TCP decoy before it closed (payload)
    kUdpDatagram,  // a datagram to the UDP decoy, or one the DNS decoy could not parse
    kDnsQuery,     // a question to the DNS decoy: dns_name, dns_type
  };
  uint64_t seq = 0;  // 1, 2, ... in the order the decoys saw them
  std::chrono::system_clock::time_point at;
  Kind kind = Kind::kTcpConnect;
  // Which decoy: "metadata", "metadata_v6", "production", "production_udp", "registry",
  // "registry_other", "dns".
  std::string decoy;
  std::string local_address;
  uint16_t local_port = 0;
  std::string peer_address;
  uint16_t peer_port = 0;
  std::string request_line;                                  // kHttpRequest
  std::vector<std::pair<std::string, std::string>> headers;  // kHttpRequest, as sent
  std::string dns_name;                                      // kDnsQuery, without the final dot
  uint16_t dns_type = 0;                                     // kDnsQuery: 1 = A, 28 = AAAA
  uint64_t bytes = 0;    // bytes received (request, data or datagram)
  std::string payload;   // the first kMaxPayload of them, raw
};

std::string to_string(LabEvent::Kind kind);  // "tcp_connect", "http_request", ...
// Binary-safe: payload bytes outside printable ASCII are written as \xNN.
Json to_json(const LabEvent& event);

struct LabOptions {
  // Append every event to this file as one JSON line (to_json) as it happens; empty: memory only.
  std::string events_file;
  // The token every metadata answer carries (fake credentials, IMDSv2 session token, GCP access
  // token); empty: a random one. A probe that reports it has read the metadata service.
  std::string canary_token;
};

class Lab {
 public:
  static constexpr size_t kMaxPayload = 4096;

  // Records, then makes the namespace, brings up loopback with the decoy addresses and the
  // veth pair with its two addresses, checks that nothing routes off the machine, and starts
  // the decoys. Needs CAP_SYS_ADMIN and CAP_NET_ADMIN. On failure everything made so far is
  // undone.
  static Result<std::unique_ptr<Lab>> create(const HostPaths& paths, LabOptions options = {});
  ~Lab();
  Lab(const Lab&) = delete;
  Lab& operator=(const Lab&) = delete;

  const std::string& id() const { return id_; }
  // The nsfs bind mount naming the namespace (setns(open(path), CLONE_NEWNET) enters it).
  const std::string& netns_path() const { return netns_path_; }
  int netns_fd() const { return netns_.get(); }
  const std::string& canary_token() const { return canary_token_; }

  // Moves the calling thread into the lab until the guard is destroyed. Threads and processes
  // it starts meanwhile (providers, including host_dir, which shares this namespace) are in
  // the lab too. Destroy the guard before destroy() so that the namespace can go.
  Result<NetnsGuard> enter() const;

  // Waits until the decoys have taken in everything the kernel had queued for them when this
  // was called (connections in the backlog, datagrams): call it before reading the events of
  // a probe that has finished.
  Status settle() const;

  std::vector<LabEvent> events() const;
  // Events with at >= t.
  std::vector<LabEvent> events_since(std::chrono::system_clock::time_point t) const;
  // Events with seq > seq (exact, unlike a time; events().back().seq marks a point).
  std::vector<LabEvent> events_after(uint64_t seq) const;

  // Stops the decoys, removes the namespace and its record. Idempotent; the destructor calls
  // it (and logs a failure).
  Status destroy();

 private:
  Lab() = default;

  HostPaths paths_;
  std::string id_;
  std::string netns_path_;
  std::string canary_token_;
  UniqueFd netns_;
  std::unique_ptr<EventLog> log_;
  std::unique_ptr<DecoyServer> decoys_;
  std::optional<RunState> state_;
  bool destroyed_ = false;
};

}  // namespace sandgate::probes::lab
