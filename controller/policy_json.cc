// The policy file format: the strict parser (every error names the JSON path and what was
// expected; unknown keys are errors) and the writer (to_json), which the parser reads back.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <initializer_list>
#include <string_view>
#include <utility>

#include "controller/policy.h"
#include "core/fd.h"
#include "core/strings.h"

namespace sandgate::controller {

namespace {

constexpr std::string_view kStep = "parse policy";

// Memory limits below this are almost certainly a forgotten unit ("memory_max": "512" is 512
// bytes, and every call would be OOM-killed on its first page fault).
constexpr Bytes kMinMemoryLimit = MiB(1);
// io_read_bps / io_write_bps below 1MiB per second: a forgotten unit, or a grant that turns
// every call into a crawl.
constexpr Bytes kMinIoBps = MiB(1);
// open_files: the dynamic loader, libc and a shell need a dozen descriptors before main; below
// 16 a call fails in ways that look nothing like a limit. Above fs.nr_open (1048576 by default,
// fs/file.c sysctl_nr_open) the kernel refuses RLIMIT_NOFILE with EPERM.
constexpr uint64_t kMinOpenFiles = 16;
constexpr uint64_t kMaxOpenFiles = uint64_t{1} << 20;
// libstdc++'s std::regex reads a number (`{n,m}`, a back-reference `\\n`) into a long with no
// overflow check (undefined behaviour, found by the fuzzer with `{5555555555555555555}` and
// `\\5555555555555555555`), and builds a state per repetition (`a{1000}` is 1000 copies of
// `a`), so nested counts multiply. Inference rules recognise a command by its first words; no
// real one needs more than this.
constexpr uint64_t kMaxRegexRepetitions = 10000;
constexpr uint64_t kMaxRegexBackReference = 99;

// What is wrong with `pattern` for std::regex before it is compiled, or "" if nothing:
// back-references above kMaxRegexBackReference, or every `{n}` / `{n,m}` count (0 counted as
// 1) multiplied above kMaxRegexRepetitions. Braces inside a bracket expression are literal.
std::string regex_numbers_problem(std::string_view pattern) {
  auto digits_at = [&](size_t& j) {  // the number at j (capped), j left on its last digit
    uint64_t n = 0;
    while (j < pattern.size() && std::isdigit(static_cast<unsigned char>(pattern[j])))
      n = std::min(n * 10 + static_cast<uint64_t>(pattern[j++] - '0'), kMaxRegexRepetitions + 1);
    --j;
    return n;
  };
  uint64_t product = 1;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\') {
      if (++i < pattern.size() && std::isdigit(static_cast<unsigned char>(pattern[i])) &&
          digits_at(i) > kMaxRegexBackReference)
        return "a back-reference above \\" + std::to_string(kMaxRegexBackReference);
    } else if (in_class) {
      in_class = c != ']';
    } else if (c == '[') {
      in_class = true;
    } else if (c == '{') {
      for (size_t j = i + 1; j < pattern.size(); ++j) {
        if (std::isdigit(static_cast<unsigned char>(pattern[j])))
          product =
              std::min(product * std::max<uint64_t>(digits_at(j), 1), kMaxRegexRepetitions + 1);
        else if (pattern[j] != ',')
          break;
      }
    }
  }
  if (product > kMaxRegexRepetitions)
    return "its repetition counts ({n} and {n,m}) multiply to more than " +
           std::to_string(kMaxRegexRepetitions) + " (the regex engine builds a state for each)";
  return "";
}
// file_size below 1MiB: a forgotten unit (compilers, git and package managers write temporary
// files of several MiB and would die of SIGXFSZ).
constexpr Bytes kMinFileSize = MiB(1);
// cpu.max rejects a quota below 1ms (kernel/sched/core.c, min_cfs_quota_period); with the
// default 100ms period that is 0.01 of a core.
constexpr double kMinCpuCores = 0.01;
// cpu.weight range (Documentation/admin-guide/cgroup-v2.rst, "Weights").
constexpr int64_t kMinCpuWeight = 1;
constexpr int64_t kMaxCpuWeight = 10000;
// A PSI trigger's window must lie in [500ms, 10s] and its stall threshold in (0, window]
// (Documentation/accounting/psi.rst; kernel/sched/psi.c psi_trigger_create returns EINVAL
// otherwise). Checked here so a bad value fails at load, naming the field, not mid-run.
constexpr Duration kPsiWindowMin = std::chrono::milliseconds(500);
constexpr Duration kPsiWindowMax = std::chrono::seconds(10);
// The run-queue rule's window: below 100ms a rate is a handful of scheduler ticks (noise);
// above a minute the rule reacts after the burst is over. The threshold is a sum over a call's
// tasks, so it may exceed 1000 ms/s (a call's 8 threads each waiting half the time: 4000).
constexpr Duration kRunqWindowMin = std::chrono::milliseconds(100);
constexpr Duration kRunqWindowMax = std::chrono::minutes(1);
constexpr double kMaxRunqMsPerS = 1e6;
// The network rule's threshold: below 64KiB per second it is a forgotten unit ("10" is ten
// bytes a second: a DNS lookup would trip it). Its window has the run-queue rule's bounds, for
// the same reasons.
constexpr Bytes kMinNetBytesPerS = KiB(64);

// ---------------------------------------------------------------------------------------------
// Parsing with paths.

// A JSON path component: `.name` for plain names, `["odd name"]` otherwise. A key from the input
// may be any length: a long one is quoted as an excerpt.
std::string child(const std::string& path, const std::string& key) {
  if (key.size() > kExcerptBytes) return path + "[\"" + excerpt(key) + "\"]";
  bool plain = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
  if (!plain) return path + "[" + Json(key).dump() + "]";
  return path.empty() ? key : path + "." + key;
}

std::string index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// Names of tenants and intents become cgroup directory names and report keys: one safe path
// component, never "." or "..".
bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64 || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

class Parser {
 public:
  explicit Parser(std::string source) : source_(std::move(source)) {}

  Error fail(const std::string& path, const std::string& what) const {
    return logic_error(std::string(kStep), path.empty() ? what : path + ": " + what, source_);
  }
  // For semantic errors that read as a sentence starting with the path.
  Error fail_sentence(const std::string& sentence) const {
    return logic_error(std::string(kStep), sentence, source_);
  }

  Status object(const Json& j, const std::string& path) const {
    if (!j.is_object())
      return fail(path.empty() ? "(top level)" : path,
                  "expected an object, got " + describe_json(j));
    return {};
  }

  // `j` must be an object whose keys are all in `known`.
  Status keys(const Json& j, const std::string& path,
              std::initializer_list<std::string_view> known) const {
    SG_TRY(object(j, path));
    for (const auto& [key, value] : j.items()) {
      if (std::find(known.begin(), known.end(), key) != known.end()) continue;
      std::string what = "unknown key";
      std::string_view best;
      size_t best_d = 3;  // suggest only close misspellings
      // (the distance costs len(key) x len(k): a key far longer than any known one is no typo)
      for (auto k : known) {
        if (key.size() > k.size() + best_d) continue;
        size_t d = edit_distance(key, k);
        if (d < best_d) best_d = d, best = k;
      }
      if (!best.empty()) what += " (did you mean '" + std::string(best) + "'?)";
      std::vector<std::string> names(known.begin(), known.end());
      what += "; known keys here: " + join(names);
      return fail(child(path, key), what);
    }
    return {};
  }

  Result<std::string> string(const Json& j, const std::string& path, std::string_view what) const {
    if (!j.is_string())
      return fail(path, "expected " + std::string(what) + ", got " + describe_json(j));
    return j.get<std::string>();
  }

  Result<bool> boolean(const Json& j, const std::string& path) const {
    if (!j.is_boolean()) return fail(path, "expected true or false, got " + describe_json(j));
    return j.get<bool>();
  }

  // A size string; `min` guards against a forgotten unit.
  Result<Bytes> size(const Json& j, const std::string& path, Bytes min = kMinMemoryLimit) const {
    if (!j.is_string())
      return fail(path, "expected a size like \"512MiB\", got " + describe_json(j));
    auto b = parse_bytes(j.get<std::string>());
    if (!b.ok())
      return fail(path, "expected a size like \"512MiB\", got " + describe_json(j) + " (" +
                            b.error().detail + ")");
    if (*b < min)
      return fail(path, format_bytes(*b) + " is below the minimum of " + format_bytes(min) +
                            " (a forgotten unit? write e.g. \"512MiB\")");
    return *b;
  }

  // A rate in bytes per second: 0 (off), or a size string read as per second ("10MiB") or an
  // integer number of bytes, at least `min` (a forgotten unit otherwise).
  Result<uint64_t> bytes_per_second(const Json& j, const std::string& path, Bytes min) const {
    const std::string expected =
        "0 (off) or a size per second like \"10MiB\" (at least " + format_bytes(min) + ")";
    if (j.is_number_integer() && !j.is_number_unsigned() && j.get<int64_t>() < 0)
      return fail(path, "expected " + expected + ", got " + describe_json(j));
    uint64_t v = 0;
    if (j.is_number_integer()) {
      v = j.get<uint64_t>();
    } else if (j.is_string()) {
      auto b = parse_bytes(j.get<std::string>());
      if (!b.ok())
        return fail(path, "expected " + expected + ", got " + describe_json(j) + " (" +
                              b.error().detail + ")");
      v = b->value;
    } else {
      return fail(path, "expected " + expected + ", got " + describe_json(j));
    }
    if (v != 0 && v < min.value)
      return fail(path, format_bytes(Bytes{v}) + " per second is below the minimum of " +
                            format_bytes(min) +
                            " (a forgotten unit? write e.g. \"10MiB\"; 0 is off)");
    return v;
  }

  Result<Duration> duration(const Json& j, const std::string& path) const {
    if (!j.is_string())
      return fail(path, "expected a duration like \"250ms\", got " + describe_json(j));
    auto d = parse_duration(j.get<std::string>());
    if (!d.ok())
      return fail(path, "expected a duration like \"250ms\", got " + describe_json(j) + " (" +
                            d.error().detail + ")");
    return *d;
  }

  // An integer in [lo, hi].
  Result<uint64_t> integer(const Json& j, const std::string& path, uint64_t lo, uint64_t hi) const {
    std::string expected = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
    if (!j.is_number_integer())
      return fail(path, "expected " + expected + ", got " + describe_json(j));
    if (j.is_number_unsigned()) {
      uint64_t v = j.get<uint64_t>();
      if (v >= lo && v <= hi) return v;
    } else {
      int64_t v = j.get<int64_t>();
      if (v >= 0 && static_cast<uint64_t>(v) >= lo && static_cast<uint64_t>(v) <= hi)
        return static_cast<uint64_t>(v);
    }
    return fail(path, "expected " + expected + ", got " + describe_json(j));
  }

  // A number in (lo, hi] (lo_open) or [lo, hi].
  Result<double> number(const Json& j, const std::string& path, double lo, double hi, bool lo_open,
                        std::string_view what) const {
    if (!j.is_number())
      return fail(path, "expected " + std::string(what) + ", got " + describe_json(j));
    double v = j.get<double>();
    bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi;
    if (!ok) return fail(path, "expected " + std::string(what) + ", got " + describe_json(j));
    return v;
  }

  Result<Grant> grant(const Json& j, const std::string& path) const {
    SG_TRY(keys(j, path,
                {"memory_max", "memory_high", "cpu", "pids_max", "io_read_bps", "io_write_bps",
                 "open_files", "file_size", "timeout"}));
    Grant g;
    if (j.contains("memory_max")) {
      SG_ASSIGN_OR_RETURN(g.memory_max, size(j["memory_max"], child(path, "memory_max")));
    }
    if (j.contains("memory_high")) {
      SG_ASSIGN_OR_RETURN(g.memory_high, size(j["memory_high"], child(path, "memory_high")));
    }
    if (j.contains("cpu")) {
      SG_ASSIGN_OR_RETURN(g.cpu_cores, number(j["cpu"], child(path, "cpu"), kMinCpuCores, 1e6,
                                              false, "a number of cores >= 0.01 like 0.5 or 2"));
    }
    if (j.contains("pids_max")) {
      SG_ASSIGN_OR_RETURN(g.pids_max, integer(j["pids_max"], child(path, "pids_max"), 1,
                                              uint64_t{1} << 22));  // pid_max limit (PID_MAX_LIMIT)
    }
    // Bandwidths are sizes per second; below 1MiB/s is almost certainly a forgotten unit.
    if (j.contains("io_read_bps")) {
      SG_ASSIGN_OR_RETURN(g.io_read_bps,
                          size(j["io_read_bps"], child(path, "io_read_bps"), kMinIoBps));
    }
    if (j.contains("io_write_bps")) {
      SG_ASSIGN_OR_RETURN(g.io_write_bps,
                          size(j["io_write_bps"], child(path, "io_write_bps"), kMinIoBps));
    }
    if (j.contains("open_files")) {
      SG_ASSIGN_OR_RETURN(g.open_files, integer(j["open_files"], child(path, "open_files"),
                                                kMinOpenFiles, kMaxOpenFiles));
    }
    if (j.contains("file_size")) {
      SG_ASSIGN_OR_RETURN(g.file_size,
                          size(j["file_size"], child(path, "file_size"), kMinFileSize));
    }
    if (j.contains("timeout")) {
      SG_ASSIGN_OR_RETURN(g.timeout, duration(j["timeout"], child(path, "timeout")));
    }
    if (g.memory_max && g.memory_high && *g.memory_high > *g.memory_max)
      return fail_sentence(child(path, "memory_high") + " (" + format_bytes(*g.memory_high) +
                           ") exceeds memory_max (" + format_bytes(*g.memory_max) + ")");
    return g;
  }

  Result<TenantPolicy> tenant(const Json& j, const std::string& path) const {
    SG_TRY(keys(j, path, {"cpu_weight", "memory_budget"}));
    TenantPolicy t;
    if (j.contains("cpu_weight")) {
      SG_ASSIGN_OR_RETURN(uint64_t w, integer(j["cpu_weight"], child(path, "cpu_weight"),
                                              kMinCpuWeight, kMaxCpuWeight));
      t.cpu_weight = static_cast<uint32_t>(w);
    }
    if (j.contains("memory_budget")) {
      SG_ASSIGN_OR_RETURN(t.memory_budget, size(j["memory_budget"], child(path, "memory_budget")));
    }
    return t;
  }

  Result<LadderSettings> ladder(const Json& j, const std::string& path) const {
    SG_TRY(keys(
        j, path,
        {"enabled", "sample_interval", "throttle_at", "throttle_cpu_fraction", "freeze_host_psi",
         "thaw_host_psi", "freeze_max", "freeze_budget_at", "thaw_budget_at",
         "budget_freeze_max", "cancel_grace", "psi_trigger_stall", "psi_trigger_window",
         "runq_throttle_ms_per_s", "runq_window", "net_throttle_bytes_per_s", "net_window"}));
    LadderSettings l;
    auto at = [&](const char* k) { return child(path, k); };
    if (j.contains("enabled")) {
      SG_ASSIGN_OR_RETURN(l.enabled, boolean(j["enabled"], at("enabled")));
    }
    if (j.contains("sample_interval")) {
      SG_ASSIGN_OR_RETURN(l.sample_interval, duration(j["sample_interval"], at("sample_interval")));
      if (l.sample_interval <= Duration(0))
        return fail(at("sample_interval"), "must be greater than 0");
    }
    if (j.contains("throttle_at")) {
      SG_ASSIGN_OR_RETURN(l.throttle_at, number(j["throttle_at"], at("throttle_at"), 0, 1, true,
                                                "a fraction of memory_max in (0, 1] like 0.9"));
    }
    if (j.contains("throttle_cpu_fraction")) {
      SG_ASSIGN_OR_RETURN(l.throttle_cpu_fraction,
                          number(j["throttle_cpu_fraction"], at("throttle_cpu_fraction"), 0, 1,
                                 true, "a fraction of the granted cores in (0, 1] like 0.25"));
    }
    if (j.contains("freeze_host_psi")) {
      SG_ASSIGN_OR_RETURN(l.freeze_host_psi,
                          number(j["freeze_host_psi"], at("freeze_host_psi"), 0, 100, true,
                                 "a PSI percentage in (0, 100] like 40"));
    }
    if (j.contains("thaw_host_psi")) {
      SG_ASSIGN_OR_RETURN(l.thaw_host_psi, number(j["thaw_host_psi"], at("thaw_host_psi"), 0, 100,
                                                  false, "a PSI percentage in [0, 100) like 10"));
    }
    if (j.contains("freeze_max")) {
      SG_ASSIGN_OR_RETURN(l.freeze_max, duration(j["freeze_max"], at("freeze_max")));
      if (l.freeze_max <= Duration(0)) return fail(at("freeze_max"), "must be greater than 0");
    }
    if (j.contains("freeze_budget_at")) {
      SG_ASSIGN_OR_RETURN(l.freeze_budget_at,
                          number(j["freeze_budget_at"], at("freeze_budget_at"), 0, 1, false,
                                 "a fraction of the memory budget in [0, 1] like 0.9 (0: off)"));
    }
    if (j.contains("thaw_budget_at")) {
      SG_ASSIGN_OR_RETURN(l.thaw_budget_at,
                          number(j["thaw_budget_at"], at("thaw_budget_at"), 0, 1, false,
                                 "a fraction of the memory budget in [0, 1) like 0.75"));
    }
    if (j.contains("budget_freeze_max")) {
      SG_ASSIGN_OR_RETURN(l.budget_freeze_max,
                          duration(j["budget_freeze_max"], at("budget_freeze_max")));
      if (l.budget_freeze_max <= Duration(0))
        return fail(at("budget_freeze_max"), "must be greater than 0");
    }
    if (j.contains("cancel_grace")) {
      SG_ASSIGN_OR_RETURN(l.cancel_grace, duration(j["cancel_grace"], at("cancel_grace")));
    }
    if (j.contains("psi_trigger_stall")) {
      SG_ASSIGN_OR_RETURN(l.psi_trigger_stall,
                          duration(j["psi_trigger_stall"], at("psi_trigger_stall")));
    }
    if (j.contains("psi_trigger_window")) {
      SG_ASSIGN_OR_RETURN(l.psi_trigger_window,
                          duration(j["psi_trigger_window"], at("psi_trigger_window")));
    }
    if (j.contains("runq_throttle_ms_per_s")) {
      SG_ASSIGN_OR_RETURN(
          l.runq_throttle_ms_per_s,
          number(j["runq_throttle_ms_per_s"], at("runq_throttle_ms_per_s"), 0, kMaxRunqMsPerS,
                 false,
                 "milliseconds of run-queue delay per second of wall time, from 0 (off) to "
                 "1000000, like 200"));
    }
    if (j.contains("runq_window")) {
      SG_ASSIGN_OR_RETURN(l.runq_window, duration(j["runq_window"], at("runq_window")));
      if (l.runq_window < kRunqWindowMin || l.runq_window > kRunqWindowMax)
        return fail(at("runq_window"),
                    "must be from 100ms to 1m, got " + format_duration(l.runq_window));
    }
    if (j.contains("net_throttle_bytes_per_s")) {
      SG_ASSIGN_OR_RETURN(l.net_throttle_bytes_per_s,
                          bytes_per_second(j["net_throttle_bytes_per_s"],
                                           at("net_throttle_bytes_per_s"), kMinNetBytesPerS));
    }
    if (j.contains("net_window")) {
      SG_ASSIGN_OR_RETURN(l.net_window, duration(j["net_window"], at("net_window")));
      if (l.net_window < kRunqWindowMin || l.net_window > kRunqWindowMax)
        return fail(at("net_window"),
                    "must be from 100ms to 1m, got " + format_duration(l.net_window));
    }
    // Relations between fields, checked on the merged values (defaults included).
    if (l.runq_throttle_ms_per_s > 0 && l.runq_window < 2 * l.sample_interval)
      return fail_sentence(at("runq_window") + " (" + format_duration(l.runq_window) +
                           ") must be at least twice sample_interval (" +
                           format_duration(l.sample_interval) +
                           "): a rate needs two samples in the window");
    if (l.net_throttle_bytes_per_s > 0 && l.net_window < 2 * l.sample_interval)
      return fail_sentence(at("net_window") + " (" + format_duration(l.net_window) +
                           ") must be at least twice sample_interval (" +
                           format_duration(l.sample_interval) +
                           "): a rate needs two samples in the window");
    if (l.thaw_host_psi >= l.freeze_host_psi)
      return fail_sentence(at("thaw_host_psi") + " (" + Json(l.thaw_host_psi).dump() +
                           ") must be below freeze_host_psi (" + Json(l.freeze_host_psi).dump() +
                           ")");
    if (l.freeze_budget_at > 0 && l.thaw_budget_at >= l.freeze_budget_at)
      return fail_sentence(at("thaw_budget_at") + " (" + Json(l.thaw_budget_at).dump() +
                           ") must be below freeze_budget_at (" +
                           Json(l.freeze_budget_at).dump() + ")");
    if (l.psi_trigger_window < kPsiWindowMin || l.psi_trigger_window > kPsiWindowMax)
      return fail(at("psi_trigger_window"),
                  "must be from 500ms to 10s (the kernel's PSI trigger window), got " +
                      format_duration(l.psi_trigger_window));
    if (l.psi_trigger_stall <= Duration(0) || l.psi_trigger_stall > l.psi_trigger_window)
      return fail(at("psi_trigger_stall"),
                  "must be greater than 0 and at most psi_trigger_window (" +
                      format_duration(l.psi_trigger_window) + "), got " +
                      format_duration(l.psi_trigger_stall));
    return l;
  }

  Result<Policy> policy(const Json& j) const {
    SG_TRY(object(j, ""));
    // The version first: a newer file is refused as newer, not for the keys it added.
    if (!j.contains("schema_version"))
      return fail("schema_version",
                  "missing (expected " + std::to_string(kPolicySchemaVersion) + ")");
    const Json& v = j["schema_version"];
    if (!v.is_number_integer() || v.get<int64_t>() != kPolicySchemaVersion)
      return fail("schema_version", "expected " + std::to_string(kPolicySchemaVersion) + ", got " +
                                        describe_json(v) +
                                        " (this sandgate reads policy schema version " +
                                        std::to_string(kPolicySchemaVersion) + ")");
    SG_TRY(keys(j, "",
                {"schema_version", "name", "mode", "tenants", "run", "intents", "inference",
                 "ladder", "requires", "egress", "base"}));

    Policy p;
    if (j.contains("name")) {
      SG_ASSIGN_OR_RETURN(p.name, string(j["name"], "name", "a string"));
      if (p.name.empty()) return fail("name", "must not be empty");
    }
    if (j.contains("mode")) {
      SG_ASSIGN_OR_RETURN(std::string mode,
                          string(j["mode"], "mode", "\"per_call\" or \"static\""));
      if (mode == "per_call") {
        p.mode = PolicyMode::kPerCall;
      } else if (mode == "static") {
        p.mode = PolicyMode::kStatic;
      } else {
        return fail("mode", "expected \"per_call\" or \"static\", got " + describe_json(j["mode"]));
      }
    }
    if (j.contains("tenants")) {
      SG_TRY(object(j["tenants"], "tenants"));
      for (const auto& [name, value] : j["tenants"].items()) {
        std::string path = child("tenants", name);
        if (!valid_name(name))
          return fail(path, "a tenant name must be 1-64 of [A-Za-z0-9_.-] (it names a cgroup)");
        SG_ASSIGN_OR_RETURN(p.tenants[name], tenant(value, path));
      }
    }
    p.tenants.try_emplace("default");
    if (j.contains("run")) {
      SG_ASSIGN_OR_RETURN(p.run, grant(j["run"], "run"));
    }
    if (!j.contains("intents"))
      return fail("intents", "missing (every policy defines " + join(required_intents()) + ")");
    SG_TRY(object(j["intents"], "intents"));
    for (const auto& [name, value] : j["intents"].items()) {
      std::string path = child("intents", name);
      if (!valid_name(name)) return fail(path, "an intent name must be 1-64 of [A-Za-z0-9_.-]");
      SG_ASSIGN_OR_RETURN(p.intents[name], grant(value, path));
    }
    for (const auto& name : required_intents())
      if (!p.intents.contains(name))
        return fail("intents", "missing required intent '" + name + "' (every policy defines " +
                                   join(required_intents()) + ")");
    // Per call, a grant above the run ceiling can never be reached: the enclosing run cgroup
    // binds first. Static mode keeps the intents for reporting only, so they may exceed it.
    if (p.mode == PolicyMode::kPerCall) SG_TRY(check_under_ceiling(p));

    if (j.contains("inference")) {
      const Json& rules = j["inference"];
      if (!rules.is_array())
        return fail("inference",
                    "expected an array of {\"match\", \"intent\"}, got " + describe_json(rules));
      for (size_t i = 0; i < rules.size(); ++i) {
        std::string path = index("inference", i);
        SG_TRY(keys(rules[i], path, {"match", "intent"}));
        if (!rules[i].contains("match")) return fail(child(path, "match"), "missing (a regex)");
        if (!rules[i].contains("intent"))
          return fail(child(path, "intent"), "missing (the name of an intent)");
        InferenceRule rule;
        SG_ASSIGN_OR_RETURN(rule.pattern,
                            string(rules[i]["match"], child(path, "match"), "a regex string"));
        SG_ASSIGN_OR_RETURN(rule.intent, string(rules[i]["intent"], child(path, "intent"),
                                                "the name of an intent"));
        if (rule.pattern.empty()) return fail(child(path, "match"), "must not be empty");
        if (std::string problem = regex_numbers_problem(rule.pattern); !problem.empty())
          return fail(child(path, "match"), problem);
        try {
          rule.regex = InferenceRegex(rule.pattern, std::regex::ECMAScript);
        } catch (const std::regex_error& e) {
          return fail_sentence(child(path, "match") + " is not a valid regex: " + e.what());
        }
        if (!p.intents.contains(rule.intent)) {
          std::vector<std::string> known;
          for (const auto& [name, g] : p.intents) known.push_back(name);
          return fail_sentence(child(path, "intent") + " '" + excerpt(rule.intent) +
                               "' is not a defined intent (defined: " + join(known) + ")");
        }
        p.inference.push_back(std::move(rule));
      }
    }
    if (j.contains("ladder")) {
      SG_ASSIGN_OR_RETURN(p.ladder, ladder(j["ladder"], "ladder"));
    }
    if (j.contains("requires")) {
      const Json& caps = j["requires"];
      if (!caps.is_array())
        return fail("requires",
                    "expected an array of capability names, got " + describe_json(caps));
      for (size_t i = 0; i < caps.size(); ++i) {
        std::string path = index("requires", i);
        SG_ASSIGN_OR_RETURN(std::string name,
                            string(caps[i], path, "a capability name like \"fs.isolated\""));
        auto cap = capability_from_string(name);
        if (!cap.ok()) return fail(path, cap.error().detail);
        p.required_capabilities.push_back(*cap);
      }
    }
    if (j.contains("egress")) {
      const Json& list = j["egress"];
      if (!list.is_array())
        return fail("egress", "expected an array of entries like \"203.0.113.20:443\", got " +
                                  describe_json(list));
      for (size_t i = 0; i < list.size(); ++i) {
        std::string path = index("egress", i);
        SG_ASSIGN_OR_RETURN(std::string text, string(list[i], path, "an entry like \"203.0.113.20:443\""));
        auto rule = parse_egress_rule(text);
        if (!rule.ok()) return fail(path, rule.error().detail.empty() ? rule.error().message() : rule.error().detail);
        p.egress.push_back(std::move(rule).value());
      }
    }
    if (j.contains("base")) {
      const Json& base = j["base"];
      SG_TRY(object(base, "base"));
      SG_TRY(keys(base, "base", {"allow"}));
      if (!base.contains("allow")) return fail("base.allow", "missing (an array of host paths)");
      const Json& list = base["allow"];
      if (!list.is_array() || list.empty())
        return fail("base.allow",
                    "expected a non-empty array of absolute host paths (or \"minimal\"), got " +
                        describe_json(list));
      for (size_t i = 0; i < list.size(); ++i) {
        std::string path = index("base.allow", i);
        SG_ASSIGN_OR_RETURN(std::string text,
                            string(list[i], path, "an absolute host path like \"/usr/bin\""));
        if (text != "minimal" && (text.empty() || text[0] != '/'))
          return fail(path, "'" + text + "' is not an absolute path (nor the preset \"minimal\")");
        p.base_allow.push_back(std::move(text));
      }
    }
    return p;
  }

 private:
  Status check_under_ceiling(const Policy& p) const {
    const Grant& run = p.run;
    for (const auto& [name, g] : p.intents) {
      std::string path = child("intents", name);
      auto over = [&](const std::string& field, const std::string& have,
                      const std::string& ceiling) {
        return fail_sentence(child(path, field) + " (" + have + ") exceeds run." + field + " (" +
                             ceiling + "): the run ceiling would bind first");
      };
      if (g.memory_max && run.memory_max && *g.memory_max > *run.memory_max)
        return over("memory_max", format_bytes(*g.memory_max), format_bytes(*run.memory_max));
      if (g.cpu_cores && run.cpu_cores && *g.cpu_cores > *run.cpu_cores)
        return over("cpu", Json(*g.cpu_cores).dump(), Json(*run.cpu_cores).dump());
      if (g.pids_max && run.pids_max && *g.pids_max > *run.pids_max)
        return over("pids_max", std::to_string(*g.pids_max), std::to_string(*run.pids_max));
      if (g.io_read_bps && run.io_read_bps && *g.io_read_bps > *run.io_read_bps)
        return over("io_read_bps", format_bytes(*g.io_read_bps), format_bytes(*run.io_read_bps));
      if (g.io_write_bps && run.io_write_bps && *g.io_write_bps > *run.io_write_bps)
        return over("io_write_bps", format_bytes(*g.io_write_bps), format_bytes(*run.io_write_bps));
    }
    return {};
  }

  std::string source_;
};

}  // namespace

Json to_json(const Grant& g) {
  Json j = Json::object();
  if (g.memory_max) j["memory_max"] = format_bytes(*g.memory_max);
  if (g.memory_high) j["memory_high"] = format_bytes(*g.memory_high);
  if (g.cpu_cores) j["cpu"] = *g.cpu_cores;
  if (g.pids_max) j["pids_max"] = *g.pids_max;
  if (g.io_read_bps) j["io_read_bps"] = format_bytes(*g.io_read_bps);
  if (g.io_write_bps) j["io_write_bps"] = format_bytes(*g.io_write_bps);
  if (g.open_files) j["open_files"] = *g.open_files;
  if (g.file_size) j["file_size"] = format_bytes(*g.file_size);
  if (g.timeout != Duration(0)) j["timeout"] = format_duration(g.timeout);
  return j;
}

std::string to_string(PolicyMode m) {
  switch (m) {
    case PolicyMode::kPerCall:
      return "per_call";
    case PolicyMode::kStatic:
      return "static";
  }
  return "unknown";
}

const std::vector<std::string>& required_intents() {
  static const std::vector<std::string> kRequired = {"compile", "test", "install", "search",
                                                     "edit",    "run",  "default"};
  return kRequired;
}

Result<Policy> parse_policy(const Json& j, const std::string& source) {
  // nlohmann throws on misuse (type_error, out_of_range); the parser checks types first, but no
  // exception may cross this boundary.
  try {
    return Parser(source).policy(j);
  } catch (const std::exception& e) {
    return logic_error(std::string(kStep), "unexpected: " + excerpt(e.what(), 400), source);
  }
}

Result<Policy> load_policy_file(const std::string& path) {
  try {
    // A policy is a few KB; read_input_file refuses a FIFO (which would block) and a file over
    // the bound (which would otherwise be cut and fail as bad JSON).
    SG_ASSIGN_OR_RETURN(std::string text, read_input_file(path, size_t{16} << 20));
    SG_ASSIGN_OR_RETURN(Json j, parse_json(text, path));
    return parse_policy(j, path);
  } catch (const std::exception& e) {
    return logic_error("load policy", excerpt(e.what(), 400), path);
  }
}

Json to_json(const Policy& p) {
  Json j;
  j["schema_version"] = p.schema_version;
  j["name"] = p.name;
  j["mode"] = to_string(p.mode);
  Json tenants = Json::object();
  for (const auto& [name, t] : p.tenants) {
    Json tj;
    tj["cpu_weight"] = t.cpu_weight;
    if (t.memory_budget) tj["memory_budget"] = format_bytes(*t.memory_budget);
    tenants[name] = tj;
  }
  j["tenants"] = tenants;
  j["run"] = to_json(p.run);
  Json intents = Json::object();
  for (const auto& [name, g] : p.intents) intents[name] = to_json(g);
  j["intents"] = intents;
  Json rules = Json::array();
  for (const auto& r : p.inference) rules.push_back({{"match", r.pattern}, {"intent", r.intent}});
  j["inference"] = rules;
  const LadderSettings& l = p.ladder;
  j["ladder"] = {
      {"enabled", l.enabled},
      {"sample_interval", format_duration(l.sample_interval)},
      {"throttle_at", l.throttle_at},
      {"throttle_cpu_fraction", l.throttle_cpu_fraction},
      {"freeze_host_psi", l.freeze_host_psi},
      {"thaw_host_psi", l.thaw_host_psi},
      {"freeze_max", format_duration(l.freeze_max)},
      {"freeze_budget_at", l.freeze_budget_at},
      {"thaw_budget_at", l.thaw_budget_at},
      {"budget_freeze_max", format_duration(l.budget_freeze_max)},
      {"cancel_grace", format_duration(l.cancel_grace)},
      {"psi_trigger_stall", format_duration(l.psi_trigger_stall)},
      {"psi_trigger_window", format_duration(l.psi_trigger_window)},
      {"runq_throttle_ms_per_s", l.runq_throttle_ms_per_s},
      {"runq_window", format_duration(l.runq_window)},
      {"net_throttle_bytes_per_s", l.net_throttle_bytes_per_s
                                       ? Json(format_bytes(Bytes{l.net_throttle_bytes_per_s}))
                                       : Json(0)},
      {"net_window", format_duration(l.net_window)},
  };
  Json caps = Json::array();
  for (auto c : p.required_capabilities) caps.push_back(to_string(c));
  j["requires"] = caps;
  if (!p.egress.empty()) {
    Json egress = Json::array();
    for (const auto& r : p.egress) egress.push_back(r.text);
    j["egress"] = egress;
  }
  if (!p.base_allow.empty()) j["base"] = {{"allow", p.base_allow}};
  return j;
}

}  // namespace sandgate::controller
