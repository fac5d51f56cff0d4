// The judge: each verdict combines a probe's own report with what the host saw (docs/DESIGN.md,
// idea 8: a verdict needs two witnesses). Pure logic: no kernel, no files; the suite collects
// the evidence (probes/witness.h) and the judge decides.
//
// The rules, in the order they are applied (judge_probe):
//   1. Host evidence of a crossing (a decoy logged the probe's traffic, a file appeared on the
//      host, the sentinel received the probe's signal, a marked process outlived its run, a
//      limit read back from the host differs from the grant) is `exposed`, whatever the probe
//      said: a probe that reports "denied" while a decoy saw its connection is exposed (the
//      two-witness override).
//   2. A probe that says `reached` is exposed only when a second witness confirms it, and which
//      one depends on the probe (Witness): the kernel's own answer for a syscall (kSelf), the
//      canary bytes it carries back, which contain the suite's marker (kCanary), or the host
//      evidence of rule 1 (kDecoy, kHostFile, kSentinel). Reached without its witness is
//      `inconclusive` (the witnesses disagree in the safe direction).
//   3. A probe that errored, whose preconditions did not hold, or whose native baseline did not
//      reach, proves nothing: `inconclusive`, with why. Never `blocked`.
//   4. Otherwise (denied, not found) it is `blocked`, by the layer derived from the errno, the
//      probe's boundary and syscall, and what the provider declares (blocking_layer). One
//      clause reads evidence instead of declarations: ENOSYS or EPERM for a syscall that the
//      native baseline showed the kernel runs, from a probe that reports seccomp filter mode
//      itself (evidence "seccomp_mode": 2, from /proc/self/status), is the seccomp layer.
//      Another, for a provider that declares proc.landlock, is the Landlock layer: EACCES on a
//      path that access(2) (which Landlock does not check) calls writable, so neither the
//      mount nor the file modes refused it (evidence "access_w": "ok"); EACCES from a TCP
//      connect or bind (evidence "syscall"; an egress guard answers EPERM, an absent route
//      ENETUNREACH); EPERM from connect to an abstract unix socket (evidence "abstract": true:
//      Landlock's scope, ABI 6). A third: a probe that found the kernel itself refusing the
//      action to every unprivileged caller (evidence "kernel_refuses", e.g. TIOCSTI answered
//      EIO under dev.tty.legacy_tiocsti = 0) is blocked by the kernel layer, and its reason
//      says that the sandbox was not what refused it.
//
// Resource probes (judge_resource) are judged on the controller's outcome instead: the limit
// read back from the host must equal the grant (a silently dropped limit is exposed), and the
// call must end with the termination its limit names (memory_limit, pids_limit, timeout).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/activity.h"
#include "core/json.h"
#include "probes/probe_report.h"
#include "providers/provider.h"

namespace sandgate::probes {

// kWarning: the sandbox allowed it by design and nothing crossed a boundary, but it is a known
// vector for what comes after the run (a git hook planted in the workspace runs when someone
// uses that workspace's repository outside the sandbox). Shown in the table and the JSON for a
// reviewer; not exposed, so it does not fail `sandgate probe` or the hardened self-test.
enum class Verdict { kBlocked, kExposed, kInconclusive, kWarning };
std::string to_string(Verdict v);  // "blocked", "exposed", "inconclusive", "warning"

// What stopped a probe that was blocked.
enum class Layer {
  kNone,         // not blocked
  kNamespace,    // the thing is not there from inside (mount/pid/net/ipc namespace)
  kSeccomp,      // the syscall filter refused it
  kLandlock,     // the provider's Landlock ruleset or scope refused it (rule 4's evidence clause)
  kMount,        // read-only or absent in the sandbox's filesystem view
  kPermissions,  // credentials: uid, capabilities, no_new_privs, file modes
  kEgress,       // an egress policy dropped the traffic (the provider has one)
  kLimit,        // a resource limit (cgroup, rlimit, the controller's deadline)
  kEnvironment,  // the launching environment was scrubbed (variables did not pass)
  kKernel,       // a kernel refuses it by itself: the host kernel's own setting refuses it
                 // to every unprivileged caller, sandboxed or not (dev.tty.legacy_tiocsti = 0),
                 // or, for a run with a kernel of its own (kernel.separate), the thing is not
                 // in that kernel at all (where a jail's namespace would hide it)
};
std::string to_string(Layer l);  // "namespace", "seccomp", ...

// Which second witness confirms a probe's `reached` (rule 2 above).
enum class Witness {
  kSelf,      // the kernel's answer is the evidence: the syscall worked, the capability is held
  kCanary,    // the probe's evidence must carry the suite's marker (canary bytes, token values)
  kDecoy,     // a decoy must have logged the probe's traffic
  kHostFile,  // the file must have appeared on the host
  kSentinel,  // the host sentinel must have received the probe's signal
  kResource,  // judged by judge_resource, never by judge_probe
  // The host's own copy of what the probe read (disclosure): the same bytes are exposed
  // (HostEvidence::disclosed, rule 1); reached with different bytes is blocked by the mount
  // layer (the sandbox sees a view of its own, not the host's).
  kHostView,
};
std::string to_string(Witness w);

// What the provider under test declares: the layer of a refusal is read against it.
struct ProviderFacts {
  std::string name;
  CapabilitySet capabilities;
  std::set<std::string> seccomp_denied;  // syscall names its filter refuses (libseccomp names)
  // The run's egress allowlist when the provider ran with --net allowlist (an EPERM on the
  // network is then the egress guard's); empty: --net none.
  std::vector<EgressRule> egress_allow;

  // The namespaces provider's declared capabilities and seccomp list; others carry only their
  // capabilities.
  static ProviderFacts of(const providers::ProviderInfo& info);
};

// What the host saw of one probe: the second witness. Each entry is one line for people
// ("decoy tcp 169.254.169.254:80 GET /latest/meta-data/ sg-1a2b", "/var/tmp/x/write-out").
struct HostEvidence {
  std::vector<std::string> decoy_events;        // decoy log entries matched to the probe
  std::vector<std::string> files_appeared;      // host files the probe created
  std::vector<std::string> sentinel_signals;    // signals the sentinel received in the window
  std::vector<std::string> leftover_processes;  // marked processes alive after destroy
  std::vector<std::string> leftover_cgroups;    // run cgroups still present after destroy
  std::vector<std::string> other_run;           // what another run's holder saw touch its objects
  std::vector<std::string> disclosed;           // the host's own information, read inside
  // The third witness: what the kernel (the eBPF activity tracer) saw succeed that the probe
  // said it could not do (kernel_crossings).
  std::vector<std::string> kernel;
  // Decoy events the run's egress allowlist permits: what the probe reached on purpose, not a
  // crossing (a reached probe confirmed by them is a warning: allowed by design).
  std::vector<std::string> allowlisted;
  std::vector<std::string> notes;               // context shown with the verdict, not evidence

  bool any() const;  // a crossing was seen (notes do not count)
  std::vector<std::string> all() const;
};

struct Judgement {
  std::string id, boundary, attempt;
  Verdict verdict = Verdict::kInconclusive;
  Layer layer = Layer::kNone;  // blocked only
  std::string why;             // the evidence (exposed), the reason (inconclusive), the refusal
  // Exposed by what this kind of provider cannot hide (a shared kernel's uname, its memory
  // total, its load): what would hide it ("only a separate kernel (a microVM) hides it").
  // Still exposed in every table and report; it does not fail `sandgate probe`, `qualify` or
  // the hardened self-test (ProviderRun::failing), since no setting of the provider closes it.
  std::string known_limit;
  Witness witness = Witness::kSelf;
  std::optional<ProbeReport> baseline;  // the native run
  std::optional<ProbeReport> sandbox;   // the run inside the provider (absent: killed, no report)
  HostEvidence host;

  Json to_json() const;
};

// Rules 1-4 above. `baseline` is the native run (nullopt: none was made).
Judgement judge_probe(const std::optional<ProbeReport>& baseline, const ProbeReport& sandbox,
                      Witness witness, const HostEvidence& host, const ProviderFacts& facts,
                      const std::string& marker);

// The layer that refused a probe (rule 4), from its errno, syscall and boundary, what the
// provider declares and, for the seccomp clause, the native baseline. Exposed for unit tests.
Layer blocking_layer(const ProbeReport& r, const ProviderFacts& facts,
                     const std::optional<ProbeReport>& baseline = std::nullopt);
// Rule 4's evidence clause: `r` was refused with ENOSYS or EPERM, reports seccomp filter mode
// (evidence "seccomp_mode": 2), and the baseline reached (the kernel runs the syscall).
bool refused_by_seccomp_filter(const ProbeReport& r, const std::optional<ProbeReport>& baseline);
// Rule 4's Landlock clause (above).
bool refused_by_landlock(const ProbeReport& r, const ProviderFacts& facts);
// Rule 4's kernel clause: the probe's account of the kernel setting that refused it (evidence
// "kernel_refuses"), or "" when it reports none.
std::string kernel_refusal(const ProbeReport& r);
// Why that layer, in a few words: "EPERM from the seccomp filter (bpf)".
std::string blocking_reason(const ProbeReport& r, Layer layer);

// The syscall a report is about: evidence "syscall", else the attempt up to its first '('
// ("bpf(BPF_PROG_LOAD)" -> "bpf"); "" when neither names one.
std::string probe_syscall(const ProbeReport& r);

// What the controller and the host said about one resource probe's call.
struct ResourceEvidence {
  std::string termination;           // the outcome's termination ("memory_limit", "exited" ...)
  std::string reason;                // the outcome's reason line
  std::vector<std::string> expected;  // terminations that mean the limit held
  // Limits read back from the host while the call ran that differ from the grant
  // ("memory.limit_in_bytes: granted 64MiB, host has 9223372036854771712").
  std::vector<std::string> limit_mismatches;
  // Limits read back that matched ("pids.max = 32"), shown with the verdict.
  std::vector<std::string> limits_checked;
  // The limit visibly held without ending the call ("throttled 420ms at 0.25 cores"); "": not.
  std::string held_by;
  // False when nothing (grant, provider) declares a limit for what the probe exhausts (disk in
  // the workspace with no file_size grant, file descriptors with no open_files grant):
  // reaching its cap proves no crossing.
  bool limit_declared = true;
  // A probe stopped by a per-process rlimit (resource.fd_exhaust by open_files, .disk_fill by
  // file_size): the granted value (0: none), the report's evidence field that counts against
  // it ("fds_opened", "bytes_written"), the errno that means the limit held ("EMFILE",
  // "EFBIG"), and the value read back from the host's /proc/<pid>/limits before the call
  // exec'd (nullopt: could not be read; a value that differs is in limit_mismatches).
  uint64_t rlimit_granted = 0;
  std::string rlimit_count_key;
  std::string rlimit_errno;
  std::optional<uint64_t> rlimit_host;
};

// A resource probe: `sandbox` is nullopt when the call was killed before it could report.
//   - a limit read back from the host that differs from the grant: exposed (dropped limit);
//   - the call ended with an expected termination, or the limit visibly held (held_by): blocked,
//     layer limit;
//   - an rlimit grant (rlimit_granted): blocked, layer limit, when the probe stopped with
//     rlimit_errno at a count within the grant and the host read back the granted value;
//     exposed when its count went past the grant (or it reached its own cap); inconclusive
//     when the host could not read the limit back or the report carries no count;
//   - the probe reached its cap where no limit is declared: inconclusive, saying so;
//   - the probe reports reached (it went past the grant) and the call exited: exposed;
//   - the probe reports denied with an errno (EMFILE, ENOSPC, EAGAIN): blocked, layer limit;
//   - anything else (no report and an unexpected ending, a probe error): inconclusive.
Judgement judge_resource(const std::optional<ProbeReport>& baseline,
                         const std::optional<ProbeReport>& sandbox, const std::string& id,
                         const ResourceEvidence& evidence);

// A check made from the host alone, with no probe report (e.g. "after destroy, no process of
// the run is alive"): exposed when the host evidence shows anything, else blocked by `layer`.
Judgement judge_host_check(const std::string& id, const std::string& boundary,
                           const std::string& attempt, const HostEvidence& host, Layer layer,
                           const std::string& blocked_why);

// persist.git_hooks, from persist.plant's report (`planted.git_hook` / `planted.git_config`,
// each {path, write: "ok" or an errno name}): a write that succeeded is a kWarning naming the
// files (inside the workspace, so allowed by design, but the next `git` outside the sandbox
// runs what was planted); both refused is blocked (by the errno's layer); no report, or no
// entry for either target, is inconclusive.
Judgement judge_git_persistence(const std::optional<ProbeReport>& plant, const std::string& failure);

// The kernel's contradiction of a probe (the third witness; docs/DESIGN.md idea 8): the probe
// says denied or not found about a network action (its syscall is connect, sendto or sendmsg,
// or it is a `net` probe without one), and the tracer saw a connect or send from the same call
// that the kernel let through to anything but loopback. One line per such action
// ("connect tcp 203.0.113.20:443 allowed (pid 12)"). Opens are not judged this way: their
// paths are as the sandbox sees them (its own /proc), so a successful open inside it is no
// evidence of a crossing on its own.
std::vector<std::string> kernel_crossings(const ProbeReport& r, const TracedActivity& seen);

// Counts for a summary line.
struct Tally {
  int blocked = 0, exposed = 0, inconclusive = 0, warning = 0;
};
Tally tally(const std::vector<Judgement>& judgements);

}  // namespace sandgate::probes
