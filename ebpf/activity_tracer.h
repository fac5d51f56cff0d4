// The activity tracer's user side (activity.bpf.c is the kernel side, activity.h the event
// they share): loads and attaches the programs, keeps the set of watched cgroups, and turns
// ring-buffer events into each call's TracedActivity (core/activity.h).
//
// Use: one tracer per process (one ring buffer for every run it watches), then per run
// watch(run cgroup id), per call begin(call cgroup id) before its first process execs and
// end(call cgroup id) after its processes are gone: every event a process causes is in the
// ring buffer before the syscall returns, so end() finds them all. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/activity.h"
#include "core/result.h"

struct activity_bpf;
struct ring_buffer;
struct bpf_program;
struct bpf_link;

namespace sandgate::ebpf {

struct ActivityOptions {
  // Opens of paths under these prefixes are copied by the kernel (at most 8, each < 48 bytes);
  // of those, user space keeps the ones `sensitive_path` accepts.
  std::vector<std::string> kernel_prefixes = default_kernel_prefixes();
  size_t ring_bytes = 4 << 20;  // a power of two, at least a page

  static std::vector<std::string> default_kernel_prefixes();
};

// Whether an opened path is sensitive: /proc/*/environ and /proc/*/mem (another process's
// secrets), /root/*, /home/* (credentials), /etc/shadow*, /etc/ssh/*, /run/secrets/*, and a
// container runtime's or other daemon's socket (/run/*.sock, /var/run/*.sock).
bool sensitive_path(const std::string& path);

// The kernel's id of a cgroup2 directory (its inode number): what bpf_get_current_cgroup_id()
// returns for a process in it.
Result<uint64_t> cgroup_id_of(const std::string& cgroup2_dir);

// One decoded event, for tests and tools that want every event as it comes.
struct ActivityEvent {
  enum class Kind { kExec, kFork, kExit, kConnect, kSendto, kOpen } kind = Kind::kExec;
  uint64_t cgroup_id = 0;
  TracedExec exec;        // kExec (kFork: pid = the child, ppid = the parent)
  TracedConnect connect;  // kConnect, kSendto
  TracedOpen open;        // kOpen
  pid_t pid = 0;
  int exit_status = 0;    // kExit: the wait status
};

struct RunqSoFar {
  uint64_t delay_ns = 0, waits = 0, max_ns = 0;
};

class ActivityTracer {
 public:
  // Loads and attaches; an error says which step failed (no BTF, no right to load, a
  // program the kernel refused).
  static Result<std::unique_ptr<ActivityTracer>> open(const ActivityOptions& options = {});
  ~ActivityTracer();
  ActivityTracer(const ActivityTracer&) = delete;
  ActivityTracer& operator=(const ActivityTracer&) = delete;

  // Processes in this cgroup or below it are traced. The syscall tracepoints (sys_enter and
  // sys_exit, which every process on the host passes through once attached) are attached only
  // while at least one cgroup is watched.
  Status watch(uint64_t cgroup_id);
  void unwatch(uint64_t cgroup_id);

  // Starts keeping the events of processes in exactly this cgroup; end() returns them and
  // forgets the cgroup. Events of cgroups nobody began are counted (unattributed()) and
  // dropped.
  void begin(uint64_t cgroup_id);
  TracedActivity end(uint64_t cgroup_id);
  // The run-queue delay of a begun cgroup's tasks so far (what end() will report), read
  // without ending anything: one map lookup, no lock, safe from any thread between begin()
  // and end(). Zeros before the first wait (and for a cgroup nobody began).
  RunqSoFar runq(uint64_t cgroup_id) const;

  // Every event now in the ring buffer, to `sink` as well as to the begun cgroups. Never blocks.
  void drain(const std::function<void(const ActivityEvent&)>& sink = {});

  uint64_t lost() const;  // ring buffer full, since open
  bool syscalls_attached() const;
  uint64_t unattributed() const;

 private:
  ActivityTracer() = default;
  void on_event(const void* data, size_t size);
  void drain_locked(const std::function<void(const ActivityEvent&)>* sink);
  void detach_watch_programs();
  std::vector<std::pair<struct bpf_program*, struct bpf_link**>> watch_programs();

  struct Call {
    TracedActivity activity;
    uint64_t lost_at_begin = 0;
  };
  mutable std::mutex mu_;
  activity_bpf* skel_ = nullptr;
  ring_buffer* ring_ = nullptr;
  std::map<uint64_t, Call> calls_;
  std::map<uint64_t, int> watched_;  // cgroup id -> times watched
  uint64_t unattributed_ = 0;
  const std::function<void(const ActivityEvent&)>* sink_ = nullptr;
};

}  // namespace sandgate::ebpf
