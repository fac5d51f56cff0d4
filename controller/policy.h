// Policy: what a call may consume, how far it may reach, when its grant is revoked. Read from a
// JSON file (`--policy FILE`) or built in; validated strictly (unknown keys and wrong types
// are errors that name the field path and what was expected).
//
// Each tool call declares an intent (compile, test, install, search, edit, run, default) or
// has one inferred from its argv; the intent maps to a grant, the limits of the call's own
// cgroup. The run carries a ceiling and the tenant a weight and budget. In `static` mode no
// call gets a grant of its own: the run ceiling is the one limit (what people do today).
//
// Where each part lives: policy_json.cc (the file format: strict parser, to_json),
// intent_inference.cc (inference_texts, choose_intent), grant.cc (grant_for, static_policy,
// a grant's limits), builtin_policy.cc (default_policy, which parses builtin_policy.json).
#pragma once

#include <locale>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "controller/cgroup.h"
#include "core/capability.h"
#include "core/egress.h"
#include "core/exec_result.h"
#include "core/json.h"
#include "core/result.h"
#include "core/units.h"

namespace sandgate::controller {

inline constexpr int kPolicySchemaVersion = 1;

struct Grant {
  std::optional<Bytes> memory_max;
  std::optional<Bytes> memory_high;  // soft: throttled above it where the layout has memory.high
  std::optional<double> cpu_cores;
  std::optional<uint64_t> pids_max;
  // Disk bandwidth, bytes per second (JSON "io_read_bps" / "io_write_bps", size strings like
  // "50MiB" read as per second, at least 1MiB). Applied to the block device of the run's
  // workspace (Limits::io_device, filled in by the controller); dropped, with a log line, when
  // the workspace is on no throttlable device (tmpfs) or the layout has no io limits.
  std::optional<Bytes> io_read_bps;
  std::optional<Bytes> io_write_bps;
  // Per-process rlimits of the call's processes (set soft = hard, so the call cannot raise
  // them back; inherited by everything it forks). open_files is RLIMIT_NOFILE (JSON
  // "open_files", 1..1048576, the kernel's default fs.nr_open); file_size is RLIMIT_FSIZE (JSON
  // "file_size", a size like "256MiB"): a write past it fails with EFBIG (and SIGXFSZ). Note
  // file_size bounds each file, not the workspace: a call can still fill the disk with many
  // files. A per-run workspace quota needs project quotas or a loop-mounted filesystem, which
  // this host does not set up.
  std::optional<uint64_t> open_files;
  std::optional<Bytes> file_size;
  Duration timeout{0};               // wall clock for one call (0: none)

  Limits to_limits() const;  // timeout is enforced by the controller, not a cgroup
  ProcessLimits to_process_limits() const;  // open_files and file_size
  bool operator==(const Grant&) const = default;
};
Json to_json(const Grant& g);

struct TenantPolicy {
  uint32_t cpu_weight = 100;         // 1..10000, relative to other tenants
  std::optional<Bytes> memory_budget;  // all of the tenant's runs together
};

// std::regex_traits<char> with a cheaper transform_primary in the classic "C" locale (the
// only one sandgate's regexes are compiled in: it never imbues or sets a global locale).
// libstdc++ calls transform_primary for each of the 256 chars of every bracket expression
// (`\s`, `[0-9.]`) while it builds the expression's match cache, and the base's goes through
// a vector, ctype::tolower and collate::transform (strxfrm) each time: 30 patterns of the
// built-in policy took 1.5 ms of every process's start to compile, 0.5 ms with this one. In
// the classic locale the result is the same: tolower of ASCII, and an identity collation.
// Another locale gets the base's.
struct ClassicRegexTraits : std::regex_traits<char> {
  template <typename It>
  string_type transform_primary(It first, It last) const {
    if (getloc() != std::locale::classic())
      return std::regex_traits<char>::transform_primary(first, last);
    string_type s(first, last);
    for (char& c : s)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return s;
  }
};
using InferenceRegex = std::basic_regex<char, ClassicRegexTraits>;

struct InferenceRule {
  std::string pattern;  // ECMAScript regex matched against the argv joined with spaces
  std::string intent;
  InferenceRegex regex;  // compiled from pattern at parse time
};

// The graduated response (docs/DESIGN.md idea 6): throttle -> freeze -> cancel -> kill.
struct LadderSettings {
  bool enabled = true;
  Duration sample_interval = std::chrono::milliseconds(20);
  // Throttle when memory.current crosses this fraction of the call's memory_max.
  double throttle_at = 0.9;
  // CPU squeeze while throttled: this fraction of the grant's cores (of one core if ungranted).
  double throttle_cpu_fraction = 0.25;
  // Freeze the largest call when host memory pressure (PSI some avg10, %) exceeds this.
  double freeze_host_psi = 40.0;
  // Thaw when host pressure falls below this; cancel if still frozen after freeze_max.
  double thaw_host_psi = 10.0;
  Duration freeze_max = std::chrono::seconds(2);
  // The budget rule (per-call mode only): when the memory charged to the budget a call counts
  // against (its tenant's memory_budget, or ControllerOptions::root_memory_budget, whichever
  // is smaller) reaches freeze_budget_at of it, every call in that budget that grew since the
  // monitor's previous sample and is not the largest in it is frozen. The largest runs on and
  // finishes, instead of the kernel's OOM killer taking it or another one when the budget
  // fills (AgentCgroup's point: agents' bursts are short, and taken in turn they fit where
  // taken together they do not). A frozen call thaws once the budget falls below
  // thaw_budget_at, or once it is the largest in it; still frozen after budget_freeze_max it
  // is cancelled. 0: off.
  double freeze_budget_at = 0.9;
  double thaw_budget_at = 0.75;
  Duration budget_freeze_max = std::chrono::seconds(30);
  // Cancel = SIGTERM to the call's tree; kill after this grace period.
  Duration cancel_grace = std::chrono::milliseconds(500);
  // PSI trigger on the call's memory pressure: stall within window wakes the monitor early.
  // Without CAP_SYS_RESOURCE (even root lacks it on some hosts, this one among them) the kernel
  // takes only windows that are a multiple of 2 s (kernel/sched/psi.c, psi_trigger_create).
  Duration psi_trigger_stall = std::chrono::milliseconds(100);
  Duration psi_trigger_window = std::chrono::seconds(2);
  // Run-queue delay (controller/runq.h): when another active call's tasks wait for a CPU more
  // than this many milliseconds per second of wall time (summed over its tasks), measured over
  // runq_window, the active call using the most CPU is throttled (the same CPU squeeze as for
  // memory, throttle_cpu_fraction of its grant); it is released once every other call waits
  // less than half of this for a whole window. 0: off. Needs a run-queue meter per call (the
  // eBPF activity tracer); calls without one are neither measured nor counted as waiting, nor
  // is a call its own CPU limit throttled within the window (it waits for its quota).
  double runq_throttle_ms_per_s = 0;
  Duration runq_window = std::chrono::seconds(1);
  // Network bytes (controller/net_meter.h): a call whose own traffic, bytes out plus bytes in
  // per second of wall time over net_window, exceeds this is throttled (the same CPU squeeze,
  // throttle_cpu_fraction of its grant) and released once it stays below half of it for a
  // whole window. The squeeze slows what the call's CPU drives (a sender's syscalls, a
  // reader's draining, and with it TCP's window); it is not a bandwidth limit, so a call whose
  // traffic costs it less CPU than the squeeze would leave it is not throttled (it would change
  // nothing). 0: off. Needs a network meter per call (the egress guard, `--net allowlist` runs
  // only). net_window also sets the window of the outcome's peak rate
  // (observed.net.peak_bytes_per_s), which is recorded with the rule off too.
  uint64_t net_throttle_bytes_per_s = 0;
  Duration net_window = std::chrono::seconds(1);
};

enum class PolicyMode { kPerCall, kStatic };
std::string to_string(PolicyMode m);

struct Policy {
  int schema_version = kPolicySchemaVersion;
  std::string name = "default";
  PolicyMode mode = PolicyMode::kPerCall;
  std::map<std::string, TenantPolicy> tenants;  // "default" always present after parsing
  Grant run;                                    // the run ceiling (static mode: the one limit)
  std::map<std::string, Grant> intents;         // must contain "default"
  std::vector<InferenceRule> inference;         // first match wins
  LadderSettings ladder;
  // Required provider capabilities (JSON key "requires"; `requires` itself is a C++20
  // keyword and cannot name a member).
  std::vector<Capability> required_capabilities;
  // Where a run with `--net allowlist` may connect or send (JSON "egress": entries as in
  // core/egress.h, "203.0.113.20:443", "udp:203.0.113.53:53"); the command line's --allow
  // entries are added to these. Unused with --net none.
  std::vector<EgressRule> egress;
  // The read-only base narrowed to these host paths (JSON "base": {"allow": [...]}): absolute
  // paths, or the preset "minimal" (providers/base_root.h says what it holds); the command
  // line's --base-path entries are added to these. Empty: the provider's default base (the
  // host's whole /usr). Only the syntax is checked here; the session's caller resolves the
  // paths on the host it runs on (each must exist there).
  std::vector<std::string> base_allow;
};

// The intents every policy must define.
const std::vector<std::string>& required_intents();

// Strict parse: every error names the JSON path ("intents.compile.memory_max") and what was
// expected ("a size like 512MiB"); unknown keys are errors; regexes must compile.
Result<Policy> parse_policy(const Json& j, const std::string& source);
Result<Policy> load_policy_file(const std::string& path);
Json to_json(const Policy& p);

// The built-in policy (used when no --policy is given), sized for a small host.
const Policy& default_policy();
// The text of controller/builtin_policy.json, compiled in: the built-in policy as a file a user
// can copy and edit (`sandgate policy --print-default`).
std::string_view builtin_policy_json();
// The same intents, but static mode with the given run limit (the comparison baseline).
Policy static_policy(const Grant& run_limit);

struct IntentChoice {
  std::string intent;
  bool inferred = false;  // true: chosen by a rule (or defaulted), not declared
  std::string because;    // "declared", "rule /^make\\b/", "no rule matched"
};
// A declared intent must exist in the policy (error otherwise, listing the known ones); with
// none declared, the first matching inference rule wins, else "default".
Result<IntentChoice> choose_intent(const Policy& p, const std::optional<std::string>& declared,
                                   const std::vector<std::string>& argv);

// The texts inference rules are matched against, in the order tried (added helper, used by
// choose_intent and shown by tests and diagnostics). For `sh -c SCRIPT` / `bash -lc SCRIPT`
// first each command of SCRIPT (split at ; && || | & and newlines, outside quotes), then the
// argv joined with spaces. Each text is normalised the same way: leading `env`, `VAR=value`,
// `time`, `nohup`, `exec`, `command`, `sudo` and `timeout DURATION` are dropped and an
// absolute program path becomes its base name ("/usr/bin/g++ -c x.cc" -> "g++ -c x.cc").
std::vector<std::string> inference_texts(const std::vector<std::string>& argv);

// The grant for an intent under the policy's mode: static mode grants nothing per call.
Grant grant_for(const Policy& p, const std::string& intent);

}  // namespace sandgate::controller
