// The state directory: every run writes down what it is about to create, before creating it,
// so that a crashed run (kill -9, power loss of the sandgate process) can be cleaned up by
// `sandgate gc`.
//
// One JSON record per run at <state_dir>/runs/<run-id>.json, rewritten atomically on every
// change. A record whose owner process is still alive belongs to a live run and gc leaves it.
//
// Records are renamed into place but not fsynced: a crash of sandgate cannot lose one, and a
// power loss takes every process, mount, namespace and cgroup with it. What can outlive a power
// loss without its record, a run directory under <work_dir>, gc removes as an orphan (records
// are written before a run directory is made and removed after it is gone). fsync was most of
// the cost of creating an environment under load (three synced writes, 4-8 ms each).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "core/host_paths.h"
#include "core/json.h"
#include "core/result.h"

namespace sandgate {

struct Resource {
  // kCgroupParent: a cgroup other runs may share (sandgate's root, a tenant): removed only if
  // empty, and nothing in it is ever killed.
  // kContainer: a Podman container, by name (podman provider); removed with `podman rm -f`.
  // kCgroup: removed with every child cgroup a runtime made under it (podman's conmon and
  // libpod-<id> groups), their processes killed first.
  // kIdRange: the lock file of the run's host id range (core/id_ranges.h), released last,
  // after every process and file of the run is gone; `owner` is the run it must name.
  // kMarkedFile: one regular file sandgate made in a directory it does not own (a canary in
  // the host's /usr); `owner` is the marker its content carries. Removed only while it is
  // still a regular file (never a symlink) carrying that marker, so a record can never make
  // gc remove a host file sandgate did not write.
  // kLoopDevice: a loop device (`path`, /dev/loopN) sandgate attached to the image file
  // `owner` (a run's workspace filesystem, providers/workspace.h). Detached only while the
  // kernel still names that image as its backing file, so a record can never detach a device
  // another user attached since.
  enum class Kind {
    kDirectory,
    kProcess,
    kMount,
    kCgroup,
    kCgroupParent,
    kNetns,
    kContainer,
    kIdRange,
    kMarkedFile,
    kLoopDevice
  };
  Kind kind = Kind::kDirectory;
  std::string path;                   // directory, mount point, cgroup dir, netns file, container;
                                      // kProcess: empty, or what the process serves (a label)
  pid_t pid = 0;                      // kProcess
  unsigned long long start_time = 0;  // kProcess: /proc/<pid>/stat field 22
  std::string owner;                  // kIdRange: the run id the lock names; kMarkedFile: marker;
                                      // kLoopDevice: the backing image's path

  bool operator==(const Resource&) const = default;
};

std::string to_string(Resource::Kind k);
// Removes a kMarkedFile: gone already is fine; a file that is not a regular file or does not
// carry `marker` in its first 64 KiB is left alone, and that is an error (the record is kept).
Status remove_marked_file(const std::string& path, const std::string& marker);
// Detaches a kLoopDevice: a device that is free, gone, or backed by another file than `image`
// (<sys>/block/loopN/loop/backing_file) is left alone, and that is not an error. A device still
// in use is marked autoclear (LOOP_CLR_FD on a busy device): the kernel detaches it at its
// last close.
Status detach_loop_device(const HostPaths& paths, const std::string& device,
                          const std::string& image);
Json to_json(const Resource& r);
Result<Resource> resource_from_json(const Json& j);

// Undoes resources, most intrusive first: containers, processes, mounts, namespaces, cgroups,
// loop devices, directories and marked files, id ranges. A recorded process that already
// exited is reaped when it is this process's child.
// Keeps going after a failure and returns the first one.
Status release_resources(const HostPaths& paths, std::vector<Resource> resources);

// Sends `sig` to the process `r` (a kProcess) records, if it still is that process (the same
// start time) and has not exited; no wait. release_resources still waits for it (and reaps it).
void signal_recorded_process(const HostPaths& paths, const Resource& r, int sig);

class RunState {
 public:
  // Creates the record for a new run owned by the calling process, with the resources it is
  // about to create first (one write instead of one per resource).
  static Result<RunState> create(const HostPaths& paths, std::string run_id, std::string provider,
                                 std::vector<Resource> initial = {});
  RunState(RunState&&) noexcept = default;
  RunState& operator=(RunState&&) noexcept = default;

  const std::string& run_id() const { return run_id_; }
  const std::vector<Resource>& resources() const { return resources_; }
  // Call before creating the resource.
  Status record(Resource r);
  // The same for several at once: one write of the record.
  Status record_all(std::vector<Resource> rs);
  // Call after the resource is gone.
  Status forget(const Resource& r);
  // The same for several at once: one write of the record.
  Status forget_all(const std::vector<Resource>& rs);
  // Removes the record itself; the run is over and nothing is left.
  Status finish();

 private:
  RunState() = default;
  Status save() const;
  std::string file_;
  std::string run_id_;
  std::string provider_;
  pid_t owner_pid_ = 0;
  unsigned long long owner_start_ = 0;
  std::vector<Resource> resources_;
};

struct GcReport {
  int runs_seen = 0;
  int runs_live = 0;  // owner still running: left alone
  int runs_removed = 0;
  int orphans_removed = 0;      // run directories with no record (after a power loss)
  int id_ranges_reclaimed = 0;  // id range locks of owners that died before recording them
  std::vector<std::string> errors;
};

// Cleans every run whose owner is gone; records of live runs are left alone. A record whose
// resources cannot all be released is kept so that a later gc retries. Then removes each
// directory under <work_dir> that no record names (runs_orphaned).
GcReport collect_garbage(const HostPaths& paths);

// A short unique id: "r" + base36 time + random.
std::string new_run_id();

// Kill points: named steps at which this process can be made to stop itself with SIGKILL, so
// that the chaos test (tests/chaos.py, `make chaos`) proves that `sandgate gc` cleans up after
// a crash at each of them. Every change of a run record passes two of them
// ("before-record:<provider>:<kind>", "after-record:...", the same for create, record-all,
// forget and finish), and release_resources one per resource ("release:<kind>"): the record is
// where what a crash leaves behind is decided, so that is where the crashes are placed.
//
// Compiled in only with SANDGATE_KILL_POINTS (the CMake option of that name: on for Debug
// builds, which `make test` and `make chaos` use; off for the release build users install and
// `make qualify` runs), so that no installed sandgate can be made to kill itself by whatever
// its environment holds. Where compiled in, inert unless one of these is set:
//   SANDGATE_KILL_AT=NAME#N    SIGKILL at the N-th (from 1) passage of NAME in this process
//   SANDGATE_KILL_TRACE=FILE   append "NAME#N" per passage (the list the chaos test draws from;
//                              the line is written before the kill, so a kill is confirmed)
void kill_point(std::string_view name);
// Whether this build has kill points at all.
bool kill_points_compiled_in();

}  // namespace sandgate
