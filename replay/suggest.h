// `sandgate policy suggest`: a per-call policy whose grants come from traces, not from hand
// sizing. Per intent, each grant is a quantile of what that intent's calls really used above
// their run's baseline (replay/call_use.h, the planner's per-intent figures), with headroom,
// rounded up to a unit; what the traces cannot size is kept from a base policy and the
// evidence says why. README.md, "Sizing grants from traces".
//
// The rule, per intent of the base policy (calls of an intent the base policy does not define
// are pooled under `default`, the grant the controller would give them):
// - fewer than min_calls calls: the base policy's grant is kept whole (too few to size on);
// - memory_max = quantile Q of the calls' peak memory above their run's baseline, times
//   (1 + headroom), rounded up to kMemoryUnit (at least one unit); memory_high is dropped
//   (a soft limit below what the traces show is normal would throttle normal calls);
// - cpu = the same of the calls' peak CPU above the baseline, rounded up to kCpuUnit cores;
// - pids_max = the same of the calls' peak pids above the baseline, rounded up to kPidsUnit,
//   only when every trace measured pids (the header's `unmeasured` does not list them), else
//   the base policy's;
// - every other field (timeouts, rlimits, io, inference, ladder, tenants) is the base's.
// A grant above the run ceiling raises the ceiling to it (a policy's intents may not exceed its
// run ceiling), and the evidence notes it. Quantiles are core/stats.h's nearest rank.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "controller/policy.h"
#include "core/json.h"
#include "core/result.h"
#include "core/units.h"
#include "replay/trace.h"

namespace sandgate::replay {

inline constexpr int kSuggestEvidenceSchemaVersion = 1;
inline constexpr uint64_t kMemoryUnit = uint64_t{16} << 20;  // 16 MiB
inline constexpr double kCpuUnit = 0.1;                      // cores
inline constexpr uint64_t kPidsUnit = 8;

struct SuggestOptions {
  double quantile = 0.99;  // (0, 1]
  double headroom = 0.10;  // 0 .. 10 (0% .. 1000%)
  size_t min_calls = 10;   // >= 1
};

// "0.99" or "99%": a quantile in (0, 1]. Errors name the option and the value.
Result<double> parse_quantile(std::string_view text);
// "10%" or "0.1": headroom from 0 to 10 (1000%). Errors name the option and the value.
Result<double> parse_headroom(std::string_view text);

// Nearest-rank figures of one resource's per-call use for one intent, and the grant chosen.
struct ResourceEvidence {
  double p50 = 0, p90 = 0, p99 = 0, max = 0;
  double at_quantile = 0;  // the figure at the asked quantile
  bool sized = false;      // false: the base policy's value was kept
  std::string why;
};

struct IntentEvidence {
  std::string intent;
  size_t calls = 0;
  double seconds = 0;
  std::vector<std::string> pooled;  // trace intents the base policy lacks, counted here
  ResourceEvidence memory;          // bytes
  ResourceEvidence cpu;             // millicores
  ResourceEvidence pids;
  controller::Grant base, chosen;
  std::string why;  // the intent's verdict in one sentence
};

struct Suggestion {
  controller::Policy policy;
  SuggestOptions options;
  std::string base_name;
  std::vector<std::string> traces;
  size_t calls = 0;
  bool pids_measured = false;
  std::vector<IntentEvidence> intents;  // the base policy's intents, sorted by name
  std::vector<std::string> notes;       // what else changed (a raised run ceiling, ...)
};

// Preconditions: none; an empty set, a trace without samples or a static base policy is an
// error naming what is wrong. `traces` are (name, trace) pairs.
Result<Suggestion> suggest_policy(const std::vector<std::pair<std::string, Trace>>& traces,
                                  const controller::Policy& base, const SuggestOptions& options);

// The evidence file: per intent the calls, the quantiles, the grant chosen and why.
Json to_json(const Suggestion& s);

}  // namespace sandgate::replay
