// Is KVM usable, or only TCG? Decided by running a guest, not by looking for /dev/kvm: on some
// hosts /dev/kvm opens and VMs get created, yet guests never make progress (a nested or
// paravirtual KVM that emulates instructions one by one, so a kernel boot never finishes).
//
// The probe runs, in a forked child with a deadline, a 16-bit real-mode guest that signals its
// start on port 0x11, counts down a loop of ~8M instructions, writes 0x42 to port 0x10 and
// halts. Without hardware-assisted execution that loop alone takes seconds; with it,
// milliseconds. Hung or slow, the child is killed at the deadline and reaped.
#pragma once

#include <sys/types.h>

#include <string>

#include "core/host_paths.h"
#include "core/units.h"

namespace sandgate {

enum class KvmVerdict {
  kUsable,    // the guest ran to its hlt within the deadline
  kTimedOut,  // /dev/kvm works but the guest did not finish in time: TCG only
  kAbsent,    // no /dev/kvm
  kBroken,    // /dev/kvm is there but an ioctl failed or the guest exited unexpectedly
};

struct KvmCheckResult {
  KvmVerdict verdict = KvmVerdict::kAbsent;
  std::string detail;   // what happened, e.g. "guest started but did not reach hlt"
  std::string backend;  // the KVM module loaded: kvm_intel, kvm_amd, kvm_pvm, or ""
  Duration deadline{0};
  Duration elapsed{0};
  pid_t child_pid = -1;         // the probe child (already reaped), -1 when none was started
  bool child_unreaped = false;  // killed but stuck in the kernel past the grace period
};

// Runs the probe against <paths.dev>/kvm, reading the backend from <paths.sys>/module.
KvmCheckResult check_kvm(const HostPaths& paths, Duration deadline = std::chrono::seconds(2));

// "usable", "present but a guest does not run (timed out after 2s) — TCG only", "absent", ...
std::string describe(const KvmCheckResult& r);

}  // namespace sandgate
