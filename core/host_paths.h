// Every kernel and host path sandgate reads or writes, in one injectable struct, so logic runs
// against fake trees in unit tests (firecracker MockCgroupFs, systemd ..._acquire(path)) and
// against the real kernel in integration tests.
#pragma once

#include <string>

namespace sandgate {

struct HostPaths {
  std::string proc = "/proc";
  std::string sys = "/sys";
  std::string cgroup = "/sys/fs/cgroup";
  std::string dev = "/dev";
  std::string tracefs = "/sys/kernel/tracing";
  std::string btf_vmlinux = "/sys/kernel/btf/vmlinux";
  // Where every run records what it creates before creating it; `sandgate gc` reads it.
  std::string state_dir = "/run/sandgate";
  // The locks of the host id ranges runs hold (core/id_ranges.h). Host-wide, whatever the
  // state directory: the ids are the host's, so every sandgate process on the host must see
  // every range taken, also those of runs recorded in another state directory.
  std::string id_range_dir = "/run/sandgate/id-ranges";
  // Per-run directories (workspaces, jail roots). On disk, not tmpfs: builds are large.
  std::string work_dir = "/var/tmp/sandgate";

  // The defaults, with SANDGATE_STATE_DIR / SANDGATE_WORK_DIR overriding when set.
  static HostPaths from_environment();
};

}  // namespace sandgate
