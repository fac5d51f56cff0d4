// The controller's per-call work where a call's processes live under a kernel of their own (a
// microVM's guest, issue 14): the host's cgroups cannot hold them, so the call's cgroup, its
// grant, the monitor and the ladder run inside the guest, and what they observed comes back to
// the host for the call's outcome.
//
// The seam between the two libraries that must not include each other: the provider's guest
// agent (providers/guest_agent.cc) calls this interface, the controller implements it
// (controller/guest_control.h, the v2 backend, monitor and ladder themselves), and the binary
// that links both hands the agent a factory (cli/supervisor_main.cc). What travels between
// host and guest is JSON the controller encodes and decodes; the provider carries it unread
// (providers::Call::guest_control, ExecResult::guest_observation).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "core/json.h"
#include "core/result.h"

namespace sandgate {

class GuestCallControl {
 public:
  virtual ~GuestCallControl() = default;
  // Makes the call's cgroup and writes the grant `control` carries (null: none; the call is
  // still measured). An error means the call cannot run as granted: the agent refuses it.
  virtual Status begin(uint64_t call, const Json& control) = 0;
  // Moves the call's first process (parked before exec) into the call's cgroup and starts
  // watching it. Precondition: begin(call) succeeded.
  virtual Status place(uint64_t call, pid_t pid) = 0;
  // The call ended: the last reading, its leftovers killed, its cgroup removed; what was
  // observed, encoded for the host (null for a call never begun).
  virtual Json end(uint64_t call) = 0;
  // The call's cgroup relative to the cgroup2 root ("/calls/call-3"), for messages and tests.
  virtual std::string cgroup_of(uint64_t call) const = 0;
};

// Made by the agent once the guest's cgroup2 tree is mounted and its calls' parent exists.
using GuestCallControlFactory = std::function<Result<std::unique_ptr<GuestCallControl>>()>;

}  // namespace sandgate
