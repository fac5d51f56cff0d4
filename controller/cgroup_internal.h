// What the three cgroup backends share (implemented in cgroup.cc): making a cgroup directory
// path with each new directory recorded first, reading cgroup.procs, walking a cgroup's subtree,
// emptying and removing it, and the bounded waits on the kernel. Not part of the controller's
// interface (controller/cgroup.h); only cgroup_v1/v2/hybrid include it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "controller/cgroup.h"
#include "core/fd.h"
#include "core/result.h"
#include "core/state.h"
#include "core/units.h"

namespace sandgate::controller::cgroup_detail {

// How long a backend waits for the kernel to reach a state it asked for: a freeze to be
// reported, a killed cgroup to empty, an rmdir to stop failing with EBUSY.
inline constexpr Duration kSettleTimeout = std::chrono::seconds(2);

// The running kernel's version, from which the cgroup2 files a backend can count on follow
// (Documentation/admin-guide/cgroup-v2.rst and the release notes of each version):
// cgroup.freeze and PSI triggers since 5.2, cgroup.kill since 5.14, memory.peak since 5.19.
// Most of these files do not exist in a cgroup root, so they cannot be looked for before a
// cgroup is made; the version answers features() up front.
struct KernelVersion {
  int major = 0;
  int minor = 0;
  bool at_least(int ma, int mi) const { return major > ma || (major == ma && minor >= mi); }
};
// "6.1.0-18-amd64" -> {6, 1}; {0, 0} when unreadable.
KernelVersion parse_kernel_release(std::string_view release);
KernelVersion running_kernel();  // uname(2)

// `rel` must be a relative path of plain names: no "", ".", ".." or leading '/'.
Status check_rel(const std::string& rel);

// Called with each existing parent before its child component is made (v2 enables the
// controllers the child needs in the parent's cgroup.subtree_control here).
using PrepareParent = std::function<Status(const DirFd& parent)>;

// Makes `rel` under `mount` one component at a time and returns the absolute directory. A new
// directory is recorded in `state` (when not null) before mkdir and forgotten again when mkdir
// fails; an existing one is reused and not recorded (it is not ours to remove).
Result<std::string> make_cgroup_dirs(const std::string& mount, const std::string& rel,
                                     RunState* state, const PrepareParent& prepare = {});

// Makes `rel` under each of `mounts` (distinct mount points) and returns its directory in
// each, in order. Every directory about to be made is recorded in `state` (when not null) in
// one write before the first mkdir: one crash-safe write per cgroup, where a record per
// directory cost a write for each hierarchy (seven on a hybrid host, 36 ms a call's cgroup
// under load). What was recorded and not made is forgotten again when a mkdir fails. For
// names that are the caller's own (a run's, a call's): one made by someone else between the
// look and the mkdir stays recorded, where make_cgroup_dirs would forget it.
Result<std::vector<std::string>> make_cgroup_dirs_in(const std::vector<std::string>& mounts,
                                                     const std::string& rel, RunState* state);

// The distinct directories of a cgroup, in key order (comounted hierarchies share one).
std::vector<std::string> distinct_dirs(const Cgroup& cg);

// The directory of hierarchy `key`, or an error naming what needed it.
Result<std::string> dir_of(const Cgroup& cg, const std::string& key, std::string_view what);

// The pids in <dir>/cgroup.procs.
Result<std::vector<pid_t>> read_procs(const std::string& dir);
// The pids in the cgroup.procs of each of `dirs` (not their children), sorted and unique: on
// v1 and hybrid a process is in one cgroup per hierarchy.
Result<std::vector<pid_t>> procs_of(const std::vector<std::string>& dirs);
// `dir` and every cgroup below it, deepest first (the order they can be removed in).
Result<std::vector<std::string>> subtree_deepest_first(const std::string& dir);
// The pids of every cgroup in the subtrees of `dirs`, sorted and unique. A cgroup that vanishes
// while it is walked (ENOENT, ENODEV) is skipped.
Result<std::vector<pid_t>> subtree_procs(const std::vector<std::string>& dirs);
// kill(2)s every pid in the subtrees of `dirs`; a pid that is already gone (ESRCH) is fine.
Status signal_subtrees(const std::vector<std::string>& dirs, int sig);
// Waits (until `deadline`) for the subtrees of `dirs` to hold no process, sending SIGKILL again
// to what is still there when `rekill` (a process forked between the read and the kill).
Status wait_empty(const std::vector<std::string>& dirs,
                  std::chrono::steady_clock::time_point deadline, bool rekill);
// rmdir of every cgroup in the subtrees of `dirs`, deepest first, retrying EBUSY until
// `deadline`; ENOENT / ENODEV (someone else removed it) are logged at debug.
Status remove_subtrees(const std::vector<std::string>& dirs,
                       std::chrono::steady_clock::time_point deadline);
// Kills without cgroup.kill: freezes (so nothing forks between the read of cgroup.procs and
// the kill), SIGKILLs every pid in the subtrees of `dirs` and thaws, so the kills are
// delivered. Without `freeze` (no freezer), or when the freeze is not reached in time, SIGKILL
// is repeated until the subtrees are empty.
using FreezeFn = std::function<Status(bool frozen)>;
Status kill_by_freezing(const FreezeFn& freeze, const std::vector<std::string>& dirs);
// CgroupBackend::remove for every backend: kills what is left in the subtrees (backend.kill),
// waits (bounded) until they are empty and removes them deepest first. A cgroup that is
// already gone is not an error.
Status remove_cgroup(CgroupBackend& backend, const Cgroup& cg);
// Whether an error is the cgroup having vanished underneath us: ENOENT or ENODEV.
bool is_gone(const Error& e);

// Calls `done` every millisecond or so until it returns true or an error, or `bound` passes.
Status poll_until(const std::function<Result<bool>()>& done, Duration bound,
                  const std::string& what, const std::string& path);

// One unsigned number, trailing newline or blanks allowed ("max" is an error: callers that
// accept it check first). Errors have no path (read_counters adds the file's).
Result<uint64_t> parse_u64(std::string_view text);
Status parse_u64_into(std::string_view text, uint64_t& out);
// parse_flat_keyed, then the value of each key (0 when absent: older kernels lack newer keys)
// into its field.
Status parse_flat_keyed_into(std::string_view text,
                             std::initializer_list<std::pair<std::string_view, uint64_t*>> fields);
// parse_flat_keyed on a control file, naming it on error.
Result<std::map<std::string, uint64_t>> read_flat_keyed(const DirFd& dir, const std::string& name);
// A key of a flat-keyed map, 0 when absent (older kernels lack newer keys).
uint64_t value_or_zero(const std::map<std::string, uint64_t>& m, const std::string& key);

// ---- Usage: which control files hold a cgroup's counters, and reading them -------------------
//
// Each backend describes its counters as a list of CounterFiles (which hierarchy's directory,
// which file, how often, how it is parsed); read_counters reads such a list once for
// CgroupBackend::read_usage, and CounterReader keeps it open for CgroupBackend::usage_reader.
// The three backends differ only in their lists.

// Which reads of a UsageReader read a file: every one, only full ones, or none: what no sample
// acts on (the cgroup's own pressure: the replay compares read_usage before and after a call;
// the ladder acts on the host's). read_usage reads them all.
enum class Tier { kEveryRead, kFullOnly, kNotSampled };

// What moves a file's counters, for a CounterReader that may skip it.
enum class Moves {
  kAnytime,  // the kernel or other processes may change it at any moment: read per its tier
  // The cgroup's CPU time (v1 cpuacct.usage, v2 cpu.stat): the clock the next kind is gated
  // on. Read per its tier, like kAnytime.
  kCpuClock,
  // Only an action of one of the cgroup's own tasks, which runs them (a fork refused at
  // pids.max, an OOM kill in a v1 charge path, a quota used up): skipped while the cgroup's
  // CPU time stands where it stood at the file's last read. Such a change is seen at most one
  // sample late (the time a task runs is accounted at the next tick or switch).
  kOnlyWhenItsTasksRun,
};

struct CounterFile {
  const char* hierarchy;  // key of Cgroup::dirs
  const char* name;       // "memory.current"
  Tier tier;
  // ENOENT leaves its fields unset instead of failing (memory.peak before Linux 5.19, the
  // pressure files without PSI).
  bool may_be_absent;
  // The file's whole text into the fields it holds; the error is given the file's path.
  Status (*parse)(std::string_view text, Usage& usage);
  Moves moves = Moves::kAnytime;
};

// The counter files of a cgroup; may read the cgroup (v2: its cgroup.controllers).
using CounterFileList = std::function<Result<std::vector<CounterFile>>(const Cgroup& cg)>;

// Every file of `files` opened, read and closed in turn, into a fresh Usage.
Result<Usage> read_counters(const Cgroup& cg, const std::vector<CounterFile>& files);

// The UsageReader of every backend: on its first read it lists and opens the files (each
// directory opened once) and keeps them open; each read preads the files its tier needs from
// offset 0 into the last Usage, except the kOnlyWhenItsTasksRun files while the cgroup's CPU
// clock has not moved since their last read (an idle call, the usual state of an agent's
// calls, costs the monitor fewer reads; none are skipped when the cgroup has no kCpuClock
// file). When the process is out of file descriptors (EMFILE, ENFILE) it falls back to
// read_counters, full every time, rather than leave the call unwatched.
class CounterReader final : public UsageReader {
 public:
  CounterReader(Cgroup cg, CounterFileList list);
  Result<Usage> read(bool full) override;
  Status prepare() override { return opened_ ? Status{} : open(); }

 private:
  struct OpenFile {
    CounterFile file;
    std::string path;
    UniqueFd fd;
    std::optional<uint64_t> read_at_cpu_us;  // the CPU clock when last read (gated files)
  };
  Status open();
  Status read_file(OpenFile& f, Usage& u);

  Cgroup cg_;
  CounterFileList list_;
  std::vector<OpenFile> files_;
  bool opened_ = false;
  bool has_clock_ = false;  // a kCpuClock file is open: the gated files may be skipped
  bool warned_ = false;     // about running out of file descriptors
  std::optional<Usage> last_;
  std::string buf_;
};

// pids.current and pids.events "max", read every time: the same files on v1 and v2.
std::vector<CounterFile> pids_counter_files(const char* hierarchy);

// The cpu bandwidth every backend writes: a 100 ms period (the kernel default,
// Documentation/scheduler/sched-bwc.rst) and the quota for `cores` of it, at least the
// kernel's 1 ms minimum. Errors name "cpu_cores" when cores is not a positive finite number.
inline constexpr uint64_t kCpuPeriodUs = 100000;
Result<uint64_t> cpu_quota_us(double cores);
// 1..10000 (Documentation/admin-guide/cgroup-v2.rst, cpu.weight); errors name "cpu_weight".
Status check_cpu_weight(uint32_t weight);

// Whether `limits` sets io_read_bps or io_write_bps.
inline bool has_io_limits(const Limits& limits) {
  return limits.io_read_bps.has_value() || limits.io_write_bps.has_value();
}
// With an io limit set: io_device must be "MAJOR:MINOR" (decimal; errors name "io_device") and
// each rate positive (0 would remove a v1 throttle rule; errors name the field). Without one:
// nothing to check.
Status check_io_limits(const Limits& limits, const std::string& rel);

}  // namespace sandgate::controller::cgroup_detail
