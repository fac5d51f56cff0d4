// Per-run host id ranges (docs/DESIGN.md idea 9: "each run has its own host id range, so
// nothing the kernel counts per user couples two runs").
//
// The kernel keeps some limits per user across every namespace: inotify instances and watches
// (fs.inotify.max_user_instances, max_user_watches), RLIMIT_NPROC, the per-user counts in
// /proc/sys/user (max_*_namespaces), mqueue bytes, keyring quotas. When every run maps its
// users onto the same host uid, one run holding 128 inotify instances breaks `inotify_init`
// in every other run. So each run gets its own block of kIdRangeSize host ids from a pool, as
// Podman's --userns=auto does.
//
// A range is held by a lock file, <id_range_dir>/<first>.lock, made with link(2) from a
// complete temporary file (atomic and exclusive: two sandgate processes never get the same
// range, and no reader ever sees a half-written lock). The lock directory is host-wide
// (HostPaths::id_range_dir), not under the state directory: two sandgate processes with state
// directories of their own (two users, two test processes) still draw host ids that the kernel
// counts together. A lock names the run, the state directory that records it and the process
// that took it. The run records it in its state record (Resource::Kind::kIdRange) and releases
// it last, after its processes and files are gone; `sandgate gc` releases it with the rest of
// a dead run's record, and removes a lock whose owner died before recording it
// (reclaim_orphan_id_ranges).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/host_paths.h"
#include "core/result.h"

namespace sandgate {

// Ids per run: uid/gid 0..65535 inside map onto [first, first + 65536) on the host.
inline constexpr uint32_t kIdRangeSize = 65536;

// The host ids runs are given: `ranges` blocks of kIdRangeSize starting at `first`.
// The default, 2,000,000 .. 69,108,863, lies above the fixed legacy base (1,000,000, kept by
// the test-only shared_uid weakening) and below nothing the kernel reserves ((uid_t)-1).
struct IdPool {
  uid_t first = 2'000'000;
  uint32_t ranges = 1024;
};

// "FIRST:RANGES" (SANDGATE_ID_POOL, --id-pool): both decimal; the pool must end below
// 4294967295 and start at or above 65536 (never over the host's own system and user ids).
Result<IdPool> parse_id_pool(const std::string& text);
std::string to_string(const IdPool& pool);

// One range held by this process for a run. Movable; the destructor removes the lock unless
// the run's record names it (then the record owns it: its release, or gc, removes it).
class IdRangeLease {
 public:
  IdRangeLease(IdRangeLease&& o) noexcept { *this = std::move(o); }
  IdRangeLease& operator=(IdRangeLease&& o) noexcept;
  ~IdRangeLease();

  uid_t first() const { return first_; }
  const std::string& lock_path() const { return lock_; }
  const std::string& run_id() const { return run_id_; }

  friend Result<IdRangeLease> acquire_id_range(const HostPaths&, const IdPool&, const std::string&);

 private:
  IdRangeLease() = default;
  std::string state_dir_;
  std::string lock_;
  std::string run_id_;
  uid_t first_ = 0;
};

// Takes the lowest free range of the pool for `run_id`. Fails (EAGAIN, naming the pool) when
// every range is held.
Result<IdRangeLease> acquire_id_range(const HostPaths& paths, const IdPool& pool,
                                      const std::string& run_id);

// Removes the lock at `lock_path` if it still names `run_id` (a lock another run took after
// this one's was removed stays). ENOENT is success.
Status release_id_range(const std::string& lock_path, const std::string& run_id);

// gc: removes each lock whose owner process is gone and whose run has no record left in the
// state directory the lock names (the owner died between taking the range and recording it,
// or its state directory is gone). Returns how many; errors are appended.
int reclaim_orphan_id_ranges(const HostPaths& paths, std::vector<std::string>& errors);

// The locks in paths.id_range_dir taken for runs of paths.state_dir (for checks that a state
// directory's runs left no range behind).
std::vector<std::string> id_range_locks_of(const HostPaths& paths);

}  // namespace sandgate
