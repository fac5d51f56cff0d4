// The egress guard's user side (egress_guard.bpf.c is the kernel side, egress_guard.h the key
// and event they share): one loaded object per process, attached to each guarded run's cgroup
// with that run's allowlist; every decision it makes comes back with the cgroup that made it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/egress.h"
#include "core/result.h"

struct egress_guard_bpf;
struct ring_buffer;
struct bpf_link;

namespace sandgate::ebpf {

struct EgressDecision {
  uint64_t cgroup_id = 0;  // the process's cgroup: the call
  uint64_t run = 0;        // the guarded run's cgroup id
  pid_t pid = 0;
  std::string hook;        // "connect", "sendmsg"
  std::string family;      // "inet", "inet6"
  std::string address;
  uint16_t port = 0;
  std::string protocol;    // "tcp", "udp", ""
  bool allowed = false;
  uint64_t ts_ns = 0;  // bpf_ktime_get_ns: CLOCK_MONOTONIC
};

class EgressGuard {
 public:
  static Result<std::unique_ptr<EgressGuard>> open();
  ~EgressGuard();
  EgressGuard(const EgressGuard&) = delete;
  EgressGuard& operator=(const EgressGuard&) = delete;

  // From now on, processes in `run_cgroup2_dir` or below may connect (TCP, connected UDP) or
  // send (unconnected UDP) only to what `rules` allow, and to loopback; anything else fails
  // with EPERM. Returns the run's cgroup id (release's key).
  // NAME entries (EgressRule::is_name) allow nothing here: their addresses come through add().
  Result<uint64_t> guard(const std::string& run_cgroup2_dir, const std::vector<EgressRule>& rules);
  // Adds address entries to a guarded run's list (the run's resolver: the addresses of an
  // allowlisted name, before the answer reaches the run). Entries it has already are skipped;
  // they go with the run at release(). Thread-safe.
  Status add(uint64_t run, const std::vector<EgressRule>& rules);
  // Detaches from the run and forgets its rules. Idempotent.
  void release(uint64_t run);

  // Every decision now in the ring buffer, in order. Never blocks.
  void drain(const std::function<void(const EgressDecision&)>& sink);
  // The decisions about `run` since the last take: the ring is drained into per-run lists
  // first, so runs sharing the guard (serve) do not take each other's. At most kKeepPerRun
  // are kept between takes; `not_kept` counts the rest.
  static constexpr size_t kKeepPerRun = 4096;
  std::vector<EgressDecision> take(uint64_t run, uint64_t* not_kept = nullptr);
  uint64_t lost() const;

  // Bytes and packets through the sockets of cgroup `call` (a call below a guarded run), off
  // loopback, since the last take; the entry is removed.
  struct NetBytes {
    uint64_t bytes_out = 0, bytes_in = 0, packets_out = 0, packets_in = 0;
  };
  NetBytes take_net_bytes(uint64_t call);
  // The same counts without removing them (the monitor's meter, at every sample while the call
  // runs): zeros before the call's first packet; nullopt if the map cannot be read. Takes no
  // lock (a map lookup is one syscall, safe beside the kernel's updates and take's delete), so
  // it never waits behind a drain of the ring buffer.
  std::optional<NetBytes> peek_net_bytes(uint64_t call) const;

 private:
  EgressGuard() = default;
  std::mutex mu_;
  egress_guard_bpf* skel_ = nullptr;
  ring_buffer* ring_ = nullptr;
  struct Run {
    std::vector<bpf_link*> links;
    std::vector<EgressRule> rules;
    std::vector<EgressDecision> pending;  // drained, not yet taken
    uint64_t not_kept = 0;
  };
  std::map<uint64_t, Run> runs_;
  const std::function<void(const EgressDecision&)>* sink_ = nullptr;
};

}  // namespace sandgate::ebpf
