// Host-side witnesses: what the host saw of a probe, collected from outside the sandbox (the
// second witness of docs/DESIGN.md idea 8). Each collector reads an injected path, so it is tested
// against fake trees; the judge (judge.h) turns what they return into verdicts.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "controller/cgroup.h"
#include "controller/policy.h"
#include "core/egress.h"
#include "core/fd.h"
#include "probes/lab/lab.h"
#include "probes/probe_report.h"

namespace sandgate::probes {

// Decoy events that carry the marker (request target, header, payload or DNS name), one line
// each ("metadata http_request 169.254.169.254:80 GET /latest/...?sandgate=M"). With
// `any_event` every event counts: the caller has already narrowed them to one probe's window
// (a bare TCP connect carries no marker).
// Takes out of `events` those the run's egress allowlist permits (the decoy's own address and
// port; TCP for connections and requests, UDP for datagrams and DNS queries) and returns them:
// what a run reached on purpose, not a crossing.
std::vector<lab::LabEvent> take_allowlisted(std::vector<lab::LabEvent>& events,
                                            const std::vector<EgressRule>& allow);

std::vector<std::string> decoy_evidence(const std::vector<lab::LabEvent>& events,
                                        const std::string& marker, bool any_event);

// Processes whose cmdline or environ carries the marker, except `exclude` (sandgate itself,
// the sentinel), one line each ("4242 sandgate-probe linger M 60"), read from <proc>.
std::vector<std::string> marked_processes(const std::string& proc, const std::string& marker,
                                          const std::set<pid_t>& exclude);

// Processes in the pid namespace with inode `pidns` (the run's), read from <proc>; empty when
// pidns is 0 or is the caller's own (host_dir runs share the host's).
std::vector<std::string> processes_in_pidns(const std::string& proc, unsigned long long pidns);

// The inode of <proc>/<pid>/ns/pid (0 when unreadable).
unsigned long long pidns_inode(const std::string& proc, pid_t pid);

// The pid namespace of <proc>/<pid>, held open: its inode number stays its own until this is
// destroyed. A namespace's number is freed with it and the kernel hands the lowest free one to
// the next namespace made anywhere on the host, so a run's number read before its destroy, and
// looked for after it, can name another run's namespace (seen: another test's fresh
// supervisor reported as a process left behind). inode is 0 when it cannot be opened.
struct HeldPidns {
  UniqueFd fd;
  unsigned long long inode = 0;
};
HeldPidns hold_pidns(const std::string& proc, pid_t pid);

// Entries of `dir` (not recursive) whose name carries the marker: files a probe left there.
std::vector<std::string> marked_entries(const std::string& dir, const std::string& marker);

// What a directory tree holds: relative path -> "size:mtime_ns". Two snapshots differ where
// something was written (new files, appended lines, new hooks).
//
// The tree is a canary home a sandbox may have written into, so the walk is bounded: at most
// kSnapshotMaxDepth levels below `dir` and kSnapshotMaxEntries entries (10,000 paths of at most
// 32 names: ~80 MB at the very worst, kilobytes for a real home). Past either bound the walk
// does not go on: `stopped` says which bound was hit, and what lies beyond it is not compared.
constexpr int kSnapshotMaxDepth = 32;
constexpr size_t kSnapshotMaxEntries = 10'000;
struct TreeSnapshot {
  std::map<std::string, std::string> entries;
  std::string stopped;  // "deeper than 32 levels", "more than 10000 entries"; empty: complete
};
TreeSnapshot snapshot_tree(const std::string& dir);
// Paths (under `dir`) that are new or changed in `after`, and "<dir> (snapshot stopped: ...)"
// when `after` hit a bound that `before` did not: a tree grown past the bounds is a change.
std::vector<std::string> tree_changes(const std::string& dir, const TreeSnapshot& before,
                                      const TreeSnapshot& after);

// The cgroup directories of `cg` that still exist.
std::vector<std::string> remaining_cgroups(const controller::Cgroup& cg);

// The limits a call's cgroup has on the host, compared with its grant: v1 / hybrid
// memory.limit_in_bytes, cpu.cfs_quota_us / cpu.cfs_period_us, pids.max; v2 memory.max, cpu.max,
// pids.max. Only the grant's set fields are checked.
struct LimitReadback {
  std::vector<std::string> checked;     // "pids.max = 32 (granted 32)"
  std::vector<std::string> mismatches;  // "memory.limit_in_bytes: granted 64MiB, host has max"
};
LimitReadback read_back_limits(const controller::Cgroup& cg, const controller::Grant& grant);

// The host's own copy of what a disclosure probe read (probes/disclosure.cc), compared with its
// report: `disclosed` gets one line per piece of the host's information the sandbox saw
// (identical /proc/cmdline, boot id, block device names, the workspace's host path in its
// mountinfo), `notes` what only a separate kernel (or a per-run view) would hide. Reads
// <proc>; `uname_release` is the host's uname(2) release; `host_paths` are host paths the
// sandbox should not learn (the workspace, its run directory, the work directory);
// `memory_grant` the probe call's memory grant in bytes, if it had one (disclosure.sysinfo's
// run answer).
struct HostView {
  std::vector<std::string> disclosed;
  std::vector<std::string> notes;
};
HostView disclosure_host_view(const std::string& id, const ProbeReport& report,
                              const std::string& proc, const std::string& uname_release,
                              const std::vector<std::string>& host_paths,
                              std::optional<uint64_t> memory_grant = std::nullopt);

}  // namespace sandgate::probes
