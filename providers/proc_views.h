// A run's own /proc views (issue 16, "disclosure" and "side channels between tenants"): the
// jail's /proc/meminfo, /proc/stat, /proc/loadavg, /proc/uptime, /proc/vmstat and
// /proc/pressure/{cpu,memory,io} are replaced by files a small per-run FUSE filesystem serves from
// the run's own cgroup, so a call sees its grant instead of the host's memory, and nothing of what
// other runs (or the host) do moves what it reads. The namespaces jail binds all eight (jail.cc,
// step_proc_views); the podman provider has its runtime bind the four runc allows
// (kPodmanProcViewFiles, below).
//
// Why not lxcfs (evaluated first): it derives every view from the cgroup of the reader's pid
// namespace's init (the run's supervisor in <run>/main, never the calls' cgroups), copies the
// host's procs_running, ctxt, intr, btime and processes into its /proc/stat unchanged (the side
// channel stays open), has no /proc/pressure, and answers with the host's own file whenever a
// cgroup read fails (a view that silently shows the host's is what this replaces).
//
// This file: what the views say, as pure functions of the run's cgroup numbers (unit-tested
// against given numbers and fake cgroup trees), and the host side that starts and records the
// server. The server itself (libfuse) is proc_views_server.cc.
//
// What each view says, and where it comes from:
//   meminfo   MemTotal: the lowest memory limit from the reader's cgroup up (a call's grant,
//             else the run's ceiling; the host's total when nothing limits it). MemFree,
//             MemAvailable, Cached, Active/Inactive, Shmem, ... from that cgroup's usage and
//             memory.stat. Swap from the cgroup's swap limit (0 where not accounted).
//   stat      one "cpu" line and one per CPU the run may use (the quota rounded up, else the
//             host's CPUs), from the run's own user/system time (split evenly over its CPUs);
//             idle is the rest of the run's age times its CPUs. btime is when the run's view
//             started; processes, procs_running and procs_blocked count the run's own tasks;
//             intr, ctxt and softirq are 0 (kernel-wide counters).
//   loadavg   the kernel's damped 1/5/15-minute averages (kernel/sched/loadavg.c) of the run's
//             runnable plus uninterruptible tasks, sampled every 5 s and at every read;
//             "running/total" are the run's own threads; the last pid field is 0 (the kernel's
//             counts every pid the host allocates).
//   uptime    the run's age, and its idle time (age times CPUs, less the CPU it used).
//   vmstat    every key this kernel's /proc/vmstat has, in its order. From the reader's memory
//             cgroup (as meminfo): the page counts (nr_free_pages as meminfo's MemFree,
//             nr_active_anon, nr_file_pages, nr_dirty, ...) and the events memory.stat counts
//             under vmstat's own names (pgfault, pgmajfault, workingset_*, pgscan_*,
//             pgsteal_*, ...). Every other key is 0: the host-wide ones (numa_*, pgalloc_*,
//             compact_*, the dirty thresholds, ...) would tell the host's memory and the
//             activity of every other tenant (the side channel the run's own numbers close).
//   pressure  the run cgroup's own cpu/memory/io.pressure (the unified hierarchy's on a hybrid
//             host): stalls the run's tasks suffered. A run that is starved by another still
//             sees its own stall there, as it would by timing a loop; it no longer sees the
//             stalls of every other task on the host.
#pragma once

#include <sys/sysinfo.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/fd.h"
#include "core/host_paths.h"
#include "core/result.h"
#include "core/state.h"

namespace sandgate::providers {

// The files the views replace, relative to /proc (the jail binds each over its own).
inline constexpr const char* kProcViewFiles[] = {"meminfo",         "stat",       "loadavg",
                                                 "uptime",          "vmstat",     "pressure/cpu",
                                                 "pressure/memory", "pressure/io"};

// The ones a container runtime binds for the podman provider (`--volume VIEW:/proc/NAME:ro`).
// runc refuses any bind target inside /proc but a fixed list, the files lxcfs emulates
// (libcontainer/rootfs_linux.go, checkProcMount: cpuinfo, diskstats, meminfo, stat, swaps,
// uptime, loadavg, slabinfo, net/dev, ...): "/proc/pressure/cpu cannot be mounted because it is
// inside /proc". So a podman run's /proc/pressure/* stay the kernel's: the stalls of every task
// on the host; and so does its /proc/vmstat (not on runc 1.1.5's list either: the host's memory
// counters and every tenant's faults). kPodmanUncoveredViews says so wherever the views are
// described.
inline constexpr const char* kPodmanProcViewFiles[] = {"meminfo", "stat", "loadavg", "uptime"};
inline constexpr char kPodmanUncoveredViews[] =
    "/proc/pressure/* and /proc/vmstat (runc refuses binds inside /proc but for the lxcfs files)";

// A cgroup's memory, in bytes. limit 0: nothing limits it.
struct MemoryNumbers {
  uint64_t limit = 0;
  uint64_t usage = 0;
  uint64_t swap_limit = 0;  // what it may swap beyond its memory; 0: none, or not accounted
  uint64_t swap_usage = 0;
  uint64_t file = 0, anon = 0, shmem = 0, mapped = 0, dirty = 0, writeback = 0;
  uint64_t active_anon = 0, inactive_anon = 0, active_file = 0, inactive_file = 0;
  uint64_t unevictable = 0;
  uint64_t slab_reclaimable = 0, slab_unreclaimable = 0, kernel_stack = 0, pagetables = 0;
  uint64_t swapcached = 0, anon_thp = 0, file_thp = 0, shmem_thp = 0;
  // The cgroup's event counters that /proc/vmstat has too, under vmstat's names ("pgfault",
  // "workingset_refault_file", ...: kVmstatEvents in proc_views.cc); absent: not counted here.
  std::map<std::string, uint64_t> events;
};

// /proc/meminfo's text (kB, the kernel's layout) for `m`; host_total_kb stands in for a cgroup
// nothing limits, and caps a limit above it.
std::string render_meminfo(const MemoryNumbers& m, uint64_t host_total_kb);

// /proc/vmstat's text for `m` ("key value" lines): one line per key of `kernel_keys` (the keys
// of this kernel's own /proc/vmstat, in its order; values are never read from it), with the
// run's value where the cgroup has one and 0 otherwise. No kernel keys (no /proc/vmstat read):
// the keys the run has values for. host_total_kb and page_size as for meminfo: nr_free_pages is
// its MemFree in pages.
std::string render_vmstat(const MemoryNumbers& m, uint64_t host_total_kb,
                          const std::vector<std::string>& kernel_keys, uint64_t page_size);
// The keys of a /proc/vmstat text, in order (the first field of each line).
std::vector<std::string> vmstat_keys(std::string_view text);

// The run's CPU time in USER_HZ ticks (sysconf(_SC_CLK_TCK), 100 on Linux), and how many CPUs
// it may use.
struct CpuNumbers {
  uint64_t user_ticks = 0;
  uint64_t system_ticks = 0;
  int cpus = 1;
};

// The run's tasks (threads), by state: running (R) and blocked (D), as the kernel's load counts.
struct TaskCounts {
  int threads = 0;
  int running = 0;
  int blocked = 0;
};

// /proc/stat's text. age_s: how long the run's view has existed; btime: when it started (epoch
// seconds).
std::string render_stat(const CpuNumbers& cpu, const TaskCounts& tasks, double age_s,
                        long long btime);
// /proc/uptime's text: the run's age and idle seconds.
std::string render_uptime(const CpuNumbers& cpu, double age_s);

// The kernel's load average (kernel/sched/loadavg.c): every LOAD_FREQ (5 s) each average moves
// toward the active task count by 1 - e^(-5/60), e^(-5/300), e^(-5/900). Here the decay is
// applied for the time that actually passed since the last sample, so sampling at reads as
// well as on the 5 s tick gives the same curve for a steady count.
struct LoadAverage {
  double avg[3] = {0, 0, 0};
  void update(double active, double elapsed_s);
};
// /proc/loadavg's text: "1min 5min 15min running/threads lastpid" (lastpid: 0, see above).
std::string render_loadavg(const LoadAverage& load, const TaskCounts& tasks);

// sysinfo(2)'s answer (sysinfo_notify.h) with the numbers the views show the same reader:
// totalram and freeram are meminfo's MemTotal and MemFree, sharedram its Shmem, the swap its
// SwapTotal and SwapFree (all in bytes, mem_unit 1, as a 64-bit kernel answers); loads the
// load average in the kernel's fixed point (1 << SI_LOAD_SHIFT is 1.0); uptime the run's age
// rounded up, as the kernel rounds its own; procs the run's threads (the kernel counts every
// thread of the host there), at most 65535 (the field is 16 bits).
struct sysinfo make_sysinfo(const MemoryNumbers& m, uint64_t host_total_kb, const LoadAverage& load,
                            const TaskCounts& tasks, double age_s);

// What one sysinfo(2) answer reads from the cgroups: the reader's memory and the run's tasks
// (count_tasks, before the reader's own adjustment).
struct SysinfoSample {
  MemoryNumbers memory;
  TaskCounts tasks;
};

// How long a sample answers sysinfo(2) for the same reader cgroup. Reading the cgroup files and
// every task's stat costs ~0.2 ms per answer, a thousand times what the kernel takes, and a
// program may call sysinfo in a loop (glibc's sysconf(_SC_PHYS_PAGES) is one call each). 10 ms
// hides nothing a caller could observe: the kernel's own numbers are not fresher (memory.stat
// is flushed every 2 s, mm/memcontrol.c FLUSH_TIME; /proc/meminfo's and sysinfo's free pages
// are per-CPU counters folded every second, vm.stat_interval; the load average is sampled every
// 5 s), and a grant is set before its call starts, in a cgroup no other call uses. The views
// themselves read afresh at each open, so sysinfo may lag /proc/meminfo by at most this window;
// both are made from the same numbers by the same rules (make_sysinfo, render_meminfo).
inline constexpr std::chrono::milliseconds kSysinfoCacheWindow{10};

// Samples kept per reader cgroup (the key: its directories) for kSysinfoCacheWindow. The clock
// is injected for tests.
class SysinfoCache {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  explicit SysinfoCache(Clock now = [] { return std::chrono::steady_clock::now(); })
      : now_(std::move(now)) {}
  // The sample for `key`: the kept one if it was read less than kSysinfoCacheWindow ago, else
  // a new one from `read` (kept unless it is an error). Samples past their window are dropped
  // here, so the cache holds only the cgroups read in the last window.
  Result<SysinfoSample> get(const std::string& key,
                            const std::function<Result<SysinfoSample>()>& read);

 private:
  struct Entry {
    std::chrono::steady_clock::time_point read_at;
    SysinfoSample sample;
  };
  Clock now_;
  std::map<std::string, Entry> entries_;
};

// Readers of the cgroup files, from injected directories (fake trees in tests).

// Memory of the cgroup `dir` (a v1 memory hierarchy's directory, or a v2 one): usage and
// memory.stat there; the limit is the lowest on the way from `dir` up to the hierarchy's root.
// Not a memory cgroup: an error.
Result<MemoryNumbers> read_memory(const std::string& dir);
// CPU time of the cgroup: the first of `dirs` with cpuacct.stat (v1) or cpu.stat (v2); the CPUs
// from a quota (cpu.cfs_quota_us/cpu.cfs_period_us, or cpu.max) in any of them, else
// host_cpus. No accounting anywhere: an error.
Result<CpuNumbers> read_cpu(const std::vector<std::string>& dirs, int host_cpus);
// The threads of the cgroup and every cgroup below it, counted by state from <proc>/<tid>/stat:
// from the first of `dirs` that lists them (v1 "tasks", v2 "cgroup.threads"). A thread that
// exits while it is counted is skipped.
Result<TaskCounts> count_tasks(const std::vector<std::string>& dirs, const std::string& proc);
// The pressure file `name` ("cpu.pressure") of the first of `dirs` that has it.
Result<std::string> read_pressure(const std::vector<std::string>& dirs, const std::string& name);

// The directory of the reader's cgroup in the hierarchy that `run_dir` (a run's cgroup) is in,
// from the reader's /proc/<pid>/cgroup text: "" unless the reader is in run_dir or below it (a
// reader elsewhere sees the run's own numbers). `controller`: the v1 controller naming the
// hierarchy ("memory"), "" for the v2 line ("0::").
std::string reader_cgroup_dir(const std::string& run_dir, std::string_view proc_cgroup,
                              std::string_view controller);

// Host side: starts a run's views in two halves, so that the launcher can go on starting the
// run (the supervisor's exec, a container's root) while the server mounts: one after the other,
// they were most of a run's create. begin_proc_views() makes the mount point (an empty
// directory), takes a server (the spare started during the previous run when there is one,
// otherwise a fresh fork and exec), records it and the mount it will make in one write, and
// lets it go with the mount point and the cgroup: it mounts only once it is recorded, so a
// server whose launcher died before recording it exits unmounted.
// wait_mounted() waits until the filesystem is mounted at `mount_point` (a server that failed is
// then killed and reaped). Destroyed without a wait (the launcher failed first): the server is left
// to the run's release, as its record says. `cgroup_dirs`: the run's cgroup, one directory per
// hierarchy; empty (a run without a cgroup of its own, as in the providers' own tests): each view
// follows the cgroup of the process that reads it. `exe`: a binary whose main calls
// maybe_run_supervisor() (ProviderOptions::supervisor_exe; empty: this one). Released with the run
// (release_resources): the server is stopped, the mount detached. take_sysinfo_channel() gives
// the launcher's end of the run's sysinfo channel (sysinfo_notify.h): the calls' listeners
// sent there are answered by the server.
class StartingProcViews {
 public:
  StartingProcViews(StartingProcViews&&) noexcept = default;
  StartingProcViews& operator=(StartingProcViews&&) noexcept = default;
  // Mounted at the mount point, or why not. Once only.
  Status wait_mounted();
  // The launcher's end of the run's sysinfo channel.
  UniqueFd take_sysinfo_channel() { return std::move(channel_); }

 private:
  friend Result<StartingProcViews> begin_proc_views(const HostPaths&, const std::string&,
                                                    const std::string&,
                                                    const std::vector<std::string>&, RunState&);
  StartingProcViews() = default;
  pid_t pid_ = -1;
  UniqueFd answer_;   // the server's "ok" or error comes here
  UniqueFd channel_;  // the sysinfo channel, launcher's end
  std::string mount_point_;
};
Result<StartingProcViews> begin_proc_views(const HostPaths& paths, const std::string& exe,
                                           const std::string& mount_point,
                                           const std::vector<std::string>& cgroup_dirs,
                                           RunState& state);

// The next run's server, started ahead (the spare): its exec, dynamic loading and
// initialisation (4-6 ms on a 2-core VM) then overlap a run instead of holding up the next
// one's create. Called by a provider as a run with views is destroyed (Recipe::stopping): not
// once a run is ready, where its fork (of a large process) and exec took the cores from the
// run's first call (a one-call `exec --socket` 7-9 ms slower); does something only in a
// process whose servers have mounted twice already, and so will likely start more (serve,
// replay, the probe suite, qualify, benchmarks; not a one-run `sandgate exec`, which would pay
// for a spare it never uses), and when no spare waits. One per process, for `exe` (as
// begin_proc_views's); it exits with the process. Each server is still an exec of its own,
// with its own address layout (it parses FUSE requests from the run's code), for one run.
// The spawn itself runs on a thread of its own and this returns at once (the spawn waited for
// the server's exec, 1-5 ms, on the destroy that asked for it); the next run's create, and the
// two functions below, wait for a start under way.
void start_proc_views_spare(const std::string& exe);
// The spare's pid, -1 when none waits (for tests).
pid_t proc_views_spare_pid();
// Stops the spare, if one waits: for a test that counts the process's descriptors (the spare's
// socket is no run's).
void drop_proc_views_spare();

// Stops, without waiting, each views server `resources` records (a process recorded under the
// mount point it serves, as begin_proc_views records it). A run's destroy does this first:
// nothing reads the views once the run's processes are gone, and the server's exit (its
// unmount, its exit) then overlaps the supervisor's and a container runtime's teardown instead
// of following it. release_resources still waits for it and reaps it.
void stop_proc_views_servers(const HostPaths& paths, const std::vector<Resource>& resources);

// A provider's run: its cgroup from the placement its supervisor (or container) gets, the
// parent of each <run>/main directory (a placement elsewhere is taken as it is); none without
// a placement (no controller: the views follow each reader's cgroup).
std::vector<std::string> run_cgroup_dirs(const std::vector<std::string>& placement_dirs);
// begin_proc_views() at <run_dir>/proc-views for a provider's run: `wait_mounted` must be
// called, and succeed, before anything binds the views (its error, as begin's, says how to run
// without them).
struct RunProcViews {
  std::string dir;                            // the views' mount point
  std::shared_ptr<UniqueFd> sysinfo_channel;  // the launcher's end (SupervisorConfig)
};
struct BeginRunProcViews {
  RunProcViews views;
  std::function<Status()> wait_mounted;
};
Result<BeginRunProcViews> begin_run_proc_views(const HostPaths& paths, const std::string& exe,
                                               const std::string& run_dir,
                                               const std::vector<std::string>& cgroup_dirs,
                                               RunState& state);

// Whether views can be served on this host, and why not: /dev/fuse and the kernel's fuse
// filesystem (`sandgate doctor`'s "proc views" line).
Status proc_views_supported(const HostPaths& paths);

// libfuse's version ("3.14.0"), for doctor.
std::string proc_views_library_version();

// The server's entry point, from maybe_run_supervisor(): argv[1] is kProcViewsArg.
inline constexpr char kProcViewsArg[] = "--sandgate-proc-views";
int run_proc_views_server(int argc, char** argv);

// SANDGATE_PROC_VIEWS=0 (or "no", "off", "false") turns the views off for every run.
bool proc_views_enabled_by_environment();

}  // namespace sandgate::providers
