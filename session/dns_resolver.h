// The allowlisting DNS resolver of a run with --net allowlist (issue 13): one per run, owned
// by its RunSession, answering UDP on port 53 of the upstream side of the run's /30 (the
// address the run's /etc/resolv.conf names), with both of its sockets made inside the
// upstream network namespace (core/netlink.h, socket_in_netns), served by one thread.
//
//   a name of the allowlist (EgressRule::is_name), type A
//        asked of the upstream resolver (--dns-upstream) as a fresh query sandgate writes (the
//        sandbox's bytes are never forwarded), from a socket of its own (a port the kernel
//        picks at random for each query, beside the random id: an answer forged from off the
//        path must guess both, since what it names is admitted to the guard); the A records answering the name (through
//        CNAMEs) are added to the run's guard with the entry's port and protocol BEFORE the
//        answer goes back, so the connect that follows is allowed
//   a name of the allowlist, any other type (AAAA included)
//        an empty answer (NOERROR, no records), not forwarded: the guard and the run's network
//        are IPv4 only, and an empty AAAA makes getaddrinfo use the A record at once
//   any other name
//        REFUSED (rcode 5), never forwarded
//   not a standard query of one question of class IN
//        FORMERR / NOTIMP / REFUSED, never forwarded
//
// Every query is a decision (EgressVerdict, hook "dns") of the call that was open when it
// arrived: a run's calls are sequential, so that is the call that asked. TCP port 53 is not
// served: the guard admits only UDP to the resolver, so a TCP connect to it fails with EPERM
// (or EACCES from Landlock first, port 53 being in no entry). The resolver's thread lives in
// the upstream network namespace (setns at its start), where it makes each query's socket.
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/dns.h"
#include "core/egress.h"
#include "core/fd.h"
#include "core/result.h"
#include "core/units.h"

namespace sandgate::session {

// --dns-upstream ADDR[:PORT]: an IPv4 address (port 53 unless given). An error says what is
// wrong; a name is refused (sandgate would need a resolver to find its resolver).
Result<sockaddr_in> parse_dns_upstream(const std::string& text);
std::string to_string(const sockaddr_in& a);  // "203.0.113.53:53"

struct DnsResolverConfig {
  int netns_fd = -1;     // the upstream network namespace (both sockets are made there);
                         // -1: the caller's own (unit tests, on loopback)
  sockaddr_in listen{};  // the upstream side of the run's /30, port 53 (0: any, tests)
  std::optional<sockaddr_in> upstream;  // where allowlisted names are asked; unset: no names
  std::vector<EgressRule> names;        // the allowlist's NAME entries
  Duration upstream_timeout = std::chrono::seconds(3);
  size_t max_pending = 256;  // forwarded queries awaiting the upstream
};

class DnsResolver {
 public:
  // Adds address entries to the run's guard (EgressGuard::add), called on the resolver's
  // thread before an answer naming them is sent; an error makes the answer SERVFAIL.
  using Admit = std::function<Status(const std::vector<EgressRule>&)>;

  // Makes the sockets (in the upstream namespace) and starts the thread. Needs CAP_SYS_ADMIN
  // (setns) and the listen address to exist there.
  static Result<std::unique_ptr<DnsResolver>> start(DnsResolverConfig config, Admit admit);
  ~DnsResolver();  // stop()
  DnsResolver(const DnsResolver&) = delete;
  DnsResolver& operator=(const DnsResolver&) = delete;

  // Stops and joins the thread and closes both sockets. Idempotent.
  void stop();

  // Queries that arrive from now on belong to `call` (non-zero) until the next begin_call or
  // end_call; end_call returns the decisions of that call (at most kKeep, `not_kept` counts
  // the rest) and drops any left from outside a call.
  static constexpr size_t kKeep = 4096;
  struct Decision {
    uint64_t ts_ns = 0;  // CLOCK_MONOTONIC, as the guard's bpf_ktime_get_ns: the two merge in order
    EgressVerdict verdict;
  };
  void begin_call(uint64_t call);
  // Returns once the thread has handled every query queued when it was called (at most 2 s).
  void settle();
  std::vector<Decision> end_call(uint64_t call, uint64_t* not_kept = nullptr);

  // The resolver's own log: one line per query, as it decided ("refused A x.example from
  // 198.18.0.2:41000"), at most kKeep lines kept. Host-side evidence for the probes.
  std::vector<std::string> log() const;

  const sockaddr_in& listen_address() const { return config_.listen; }  // as bound

 private:
  struct Pending {
    UniqueFd fd;         // connected to the upstream; its own port, the query's only
    dns::Message query;  // the run's question, for the reply
    sockaddr_in client{};
    std::string name;
    uint64_t call = 0;
    std::chrono::steady_clock::time_point deadline;
  };

  DnsResolver(DnsResolverConfig config, Admit admit)
      : config_(std::move(config)), admit_(std::move(admit)) {}
  void serve();
  void on_query(std::string_view wire, const sockaddr_in& client);
  // A datagram that arrived on the socket of the query with id `id`.
  void on_upstream_reply(uint16_t id, std::string_view wire);
  Result<UniqueFd> upstream_socket() const;  // a fresh one, connected (on the thread)
  void expire();
  void reply(const sockaddr_in& client, const std::string& wire);
  void decide(uint64_t call, EgressVerdict v, const sockaddr_in& client);
  uint16_t next_id();

  DnsResolverConfig config_;
  Admit admit_;
  UniqueFd netns_;  // a copy of config_.netns_fd, entered by the thread (invalid: the caller's)
  UniqueFd listen_fd_, wake_;
  bool upstream_ready_ = true;  // false: the thread could not enter the namespace
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> call_{0};
  std::map<uint16_t, Pending> pending_;  // by the id of the query sent upstream (thread only)
  uint64_t id_state_ = 0;

  mutable std::mutex mu_;
  struct Decided {
    uint64_t call;
    Decision decision;
  };
  std::vector<Decided> decisions_;
  uint64_t not_kept_ = 0;
  std::vector<std::string> log_;
  std::condition_variable cv_;
  uint64_t settle_requested_ = 0, settle_done_ = 0;
};

}  // namespace sandgate::session
