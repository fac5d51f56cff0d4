// The controller's v2 backend, monitor and ladder inside a microVM's guest (issue 14;
// core/guest_call_control.h says why it runs there and how the libraries meet).
//
// On the host, RunSession encodes each call's grant and the policy's ladder settings
// (guest_control_to_json) into providers::Call::guest_control; the guest agent hands them to
// GuestCalls, which gives the call a cgroup of its own below the agent's calls cgroup, writes the
// grant with V2Backend::set_limits, and watches it with the same Monitor and Ladder as the host
// (throttle, freeze, cancel, kill, acting on the guest's cgroup). When the call ends its
// CallObservation travels back (guest_observation_to_json) and the host decodes it
// (guest_observation_from_json) into the call's outcome, which is then classified as any other:
// an OOM kill in the guest's call cgroup is a memory_limit outcome, the same shape as on the host.
//
// Whose word it is: the observation is the guest kernel's, read by the agent (root in the
// guest). A call that got root in the guest could forge it; the host's own witness of such a
// run is QEMU's cgroup (the run ceiling, its OOM kills in run_oom_kills). The host reads the
// observation as hostile data, so a forged one can lie but cannot break the host.
//
// What stays on the host: the call's timeout (the host's Supervisor kills it), the run's OOM
// kills (QEMU, in the run's cgroup), and the rlimits (sent with the call as for every provider).
// What is not done in the guest: io limits (the guest's disk is not the host's device; the
// host's grant still lists them) and the run-queue and network rules (their meters are eBPF
// programs on the host).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <memory>
#include <string>

#include "controller/cgroup.h"
#include "controller/ladder.h"
#include "controller/monitor.h"
#include "controller/outcome.h"
#include "controller/policy.h"
#include "core/guest_call_control.h"
#include "core/host_paths.h"

namespace sandgate::controller {

// What the guest applies to one call.
struct GuestControl {
  Grant grant;  // memory_max, memory_high, cpu_cores, pids_max (the rest stays on the host)
  LadderSettings ladder;
};

// Exact (bytes, microseconds), not the policy file's human units: the guest applies what the
// host granted, to the byte.
Json guest_control_to_json(const Grant& grant, const LadderSettings& ladder);
// From the host (trusted), still checked: a wrong type is an error naming the field.
Result<GuestControl> guest_control_from_json(const Json& j);

// An observation as the guest sends it back.
Json guest_observation_to_json(const CallObservation& o);
// From the guest: hostile data (docs/DESIGN.md idea 10). Every field is type-checked, counts and
// durations are bounded, at most kMaxGuestActions actions are kept and each text is cut at
// kMaxGuestText bytes (on a character boundary). The host-side fields (run_oom_kills, traced,
// egress, net) are never taken from the guest.
inline constexpr size_t kMaxGuestActions = 256;
inline constexpr size_t kMaxGuestText = 1024;
Result<CallObservation> guest_observation_from_json(const Json& j);

// The in-guest implementation. `calls_rel`: the calls' parent cgroup relative to the cgroup2
// mount ("calls"), made by the agent with the controllers enabled for its children.
class GuestCalls final : public GuestCallControl {
 public:
  GuestCalls(std::unique_ptr<CgroupBackend> backend, HostPaths paths, std::string calls_rel);
  ~GuestCalls() override;

  Status begin(uint64_t call, const Json& control) override;
  Status place(uint64_t call, pid_t pid) override;
  Json end(uint64_t call) override;
  std::string cgroup_of(uint64_t call) const override;
  // Waits until the reaper has removed the cgroups of the calls ended so far (for tests;
  // nothing needs it for correctness).
  void settle();

 private:
  struct Call {
    Cgroup cg;
    std::unique_ptr<Ladder> ladder;
    std::chrono::steady_clock::time_point start;
    bool watched = false;
  };
  std::unique_ptr<CgroupBackend> backend_;
  HostPaths paths_;
  std::string calls_rel_;
  BackendActuator actuator_;
  std::unique_ptr<Monitor> monitor_;  // made with the first call's sample interval
  std::map<uint64_t, Call> calls_;
  // Removes the cgroups of ended calls that nothing is left in, after their end has been sent,
  // as the host's controller does (its reaper): an rmdir waits for the kernel, the call's
  // outcome need not. A call that left processes is killed and removed before its end is sent.
  void reaper_loop();
  std::mutex reap_mu_;
  std::condition_variable reap_cv_;
  std::condition_variable settled_;
  std::deque<Cgroup> to_remove_;
  int pending_ = 0;  // queued or being removed
  bool stopping_ = false;
  std::thread reaper_;
};

// The factory the guest agent is given (cli/supervisor_main.cc): the pure-v2 backend of the
// guest's /sys/fs/cgroup, calls below /calls.
Result<std::unique_ptr<GuestCallControl>> make_guest_calls();

}  // namespace sandgate::controller
