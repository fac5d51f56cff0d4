// How a grant becomes cgroup limits (to_limits) and per-process rlimits (to_process_limits).
// Apart from grant.cc, whose grant_for reaches the built-in policy and with it the policy
// parser (std::regex): the microVM's guest agent links these (controller/guest_control.h) and
// nothing of the parser, which doubled its binary and so the guest's initramfs.
#include "controller/policy.h"

namespace sandgate::controller {

Limits Grant::to_limits() const {
  Limits l;
  l.memory_max = memory_max;
  l.memory_high = memory_high;
  l.cpu_cores = cpu_cores;
  l.pids_max = pids_max;
  if (io_read_bps) l.io_read_bps = io_read_bps->value;
  if (io_write_bps) l.io_write_bps = io_write_bps->value;
  return l;  // io_device: the controller's to fill in
}

ProcessLimits Grant::to_process_limits() const {
  ProcessLimits l;
  l.open_files = open_files;
  if (file_size) l.file_size = file_size->value;
  return l;
}

}  // namespace sandgate::controller
