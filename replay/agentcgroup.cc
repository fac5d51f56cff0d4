#include "replay/agentcgroup.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include "core/fd.h"
#include "core/stats.h"
#include "core/strings.h"

namespace sandgate::replay {
namespace {

constexpr std::string_view kImportStep = "import agentcgroup";
constexpr size_t kMaxFileBytes = size_t{256} << 20;

class Line {
 public:
  Line(const std::string& file, size_t line) : where_(file + ":" + std::to_string(line)) {}

  Error fail(std::string_view field, const std::string& what) const {
    // The field may carry a key from the input (an unknown one): quoted as an excerpt.
    return logic_error(std::string(kImportStep), "field '" + excerpt(field) + "': " + what, where_);
  }
  Status keys(const Json& j, std::string_view prefix,
              std::initializer_list<std::string_view> known) const {
    for (const auto& [key, value] : j.items()) {
      if (std::find(known.begin(), known.end(), key) == known.end())
        return fail(std::string(prefix) + key, "unknown key (not an AgentCgroup line?)");
    }
    return {};
  }

  Result<const Json*> require(const Json& j, std::string_view prefix, std::string_view key) const {
    auto it = j.find(key);
    if (it == j.end()) return fail(std::string(prefix) + std::string(key), "missing");
    return &*it;
  }

  Result<int64_t> time(const Json& j, std::string_view prefix, std::string_view key) const {
    SG_ASSIGN_OR_RETURN(const Json* v, require(j, prefix, key));
    std::string field = std::string(prefix) + std::string(key);
    constexpr uint64_t kMax = std::numeric_limits<int64_t>::max();
    // nlohmann stores non-negative integers as unsigned: anything else is a float or negative.
    if (v->is_number_float()) return fail(field, not_an_integer(*v, kMax));
    if (!v->is_number_unsigned())
      return fail(field, "expected a non-negative integer (ms), got " + describe_json(*v));
    if (v->get<uint64_t>() > kMax) return fail(field, too_large(*v, kMax));
    return static_cast<int64_t>(v->get<uint64_t>());
  }

  Result<std::string> string(const Json& j, std::string_view prefix, std::string_view key) const {
    SG_ASSIGN_OR_RETURN(const Json* v, require(j, prefix, key));
    if (!v->is_string())
      return fail(std::string(prefix) + std::string(key),
                  "expected a string, got " + describe_json(*v));
    return v->get<std::string>();
  }

 private:
  std::string where_;
};

// Some commands in the data carry HTML escapes ("pip install x &amp;&amp; pytest"); the shell
// saw the plain characters, and the inference rules must too ("cat &gt; f" is an edit).
std::string unescape_html(std::string s) {
  for (auto [from, to] :
       {std::pair{"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&amp;", "&"}}) {
    std::string_view f(from);
    for (size_t p = s.find(f); p != std::string::npos; p = s.find(f, p + 1))
      s.replace(p, f.size(), to);
  }
  return s;
}

}  // namespace

std::string agentcgroup_dataset(const std::string& path) {
  // The directory's own name, also for a relative path ("run.jsonl" in the current directory).
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  if (ec) p = path;
  std::string dir = p.lexically_normal().parent_path().filename().string();
  return dir.empty() ? "unknown" : dir;
}

Json agentcgroup_host() {
  return {{"description",
           "AgentCgroup paper host (arXiv 2602.09345): 24 cores, 128 GB, Podman, no container "
           "limits; podman stats about every 1.04 s"},
          {"cores", 24},
          {"memory", "128 GB"},
          {"runtime", "podman"}};
}

std::string agentcgroup_intent(const controller::Policy& policy, const std::string& tool,
                               const std::string& cmd) {
  if (tool == "Bash") {
    // What `sandgate exec` does with no --intent; the Bash tool runs its command in a shell.
    auto choice = controller::choose_intent(policy, std::nullopt, {"bash", "-c", cmd});
    return choice.ok() ? choice->intent : "default";  // fails only for a declared intent
  }
  if (tool == "Read" || tool == "Grep" || tool == "Glob") return "search";
  if (tool == "Edit" || tool == "Write" || tool == "MultiEdit" || tool == "NotebookEdit")
    return "edit";
  return "default";
}

Result<Trace> parse_agentcgroup(std::string_view text, const std::string& source_name,
                                const controller::Policy& policy) {
  Trace trace;
  size_t null_cpu = 0, negative_cpu = 0, nested = 0;
  std::vector<int64_t> intervals;
  JsonLines lines(text, source_name, std::string(kImportStep));
  for (;;) {
    SG_ASSIGN_OR_RETURN(std::optional<Json> next, lines.next());
    if (!next) break;
    const Json& j = *next;
    Line line(source_name, lines.line_no());

    if (j.contains("tool_call")) {
      SG_TRY(line.keys(j, "", {"tool_call"}));
      const Json& tc = j["tool_call"];
      if (!tc.is_object())
        return line.fail("tool_call", "expected an object, got " + describe_json(tc));
      SG_TRY(line.keys(tc, "tool_call.", {"name", "cmd", "start_ms", "end_ms", "sidechain"}));
      CallEvent c;
      c.id = "c" + std::to_string(trace.calls.size() + 1);
      SG_ASSIGN_OR_RETURN(c.tool, line.string(tc, "tool_call.", "name"));
      if (c.tool.empty()) return line.fail("tool_call.name", "must not be empty");
      SG_ASSIGN_OR_RETURN(c.command, line.string(tc, "tool_call.", "cmd"));
      SG_ASSIGN_OR_RETURN(c.start_ms, line.time(tc, "tool_call.", "start_ms"));
      SG_ASSIGN_OR_RETURN(c.end_ms, line.time(tc, "tool_call.", "end_ms"));
      if (c.end_ms < c.start_ms) {
        return line.fail("tool_call.end_ms", "ends before it starts (start_ms " +
                                                 std::to_string(c.start_ms) + ", end_ms " +
                                                 std::to_string(c.end_ms) + ")");
      }
      // Real files vary: a run with no sub-agent may carry "sidechain": null or no sidechain at
      // all. Both mean what they say unambiguously, not a sub-agent's call (null = absent).
      if (auto side = tc.find("sidechain"); side != tc.end() && !side->is_null()) {
        if (!side->is_boolean()) {
          return line.fail("tool_call.sidechain",
                           "expected true, false or null, got " + describe_json(*side));
        }
        c.nested = side->get<bool>();
      }
      nested += c.nested;
      if (c.tool == "Bash") c.command = unescape_html(std::move(c.command));
      c.intent = agentcgroup_intent(policy, c.tool, c.command);
      trace.calls.push_back(std::move(c));
      continue;
    }

    SG_TRY(line.keys(j, "", {"t_ms", "mem_bytes", "cpu_pct", "cpu_pct_interval_est", "mem_pct"}));
    Sample s;
    SG_ASSIGN_OR_RETURN(s.t_ms, line.time(j, "", "t_ms"));
    SG_ASSIGN_OR_RETURN(const Json* mem, line.require(j, "", "mem_bytes"));
    if (mem->is_number_float())
      return line.fail("mem_bytes", not_an_integer(*mem, std::numeric_limits<uint64_t>::max()));
    if (!mem->is_number_unsigned())
      return line.fail("mem_bytes", "expected a non-negative integer, got " + describe_json(*mem));
    s.mem_bytes = mem->get<uint64_t>();
    SG_ASSIGN_OR_RETURN(const Json* cpu, line.require(j, "", "cpu_pct_interval_est"));
    if (cpu->is_null()) {
      ++null_cpu;
    } else if (!cpu->is_number() || !std::isfinite(cpu->get<double>())) {
      return line.fail("cpu_pct_interval_est",
                       "expected a number or null, got " + describe_json(*cpu));
    } else if (double pct = cpu->get<double>(); pct < 0) {
      ++negative_cpu;
    } else {
      // llround of a value beyond int64 is unspecified (glibc gives INT64_MIN, which became
      // 9223372036854775808 millicores): such a percentage is refused, not imported.
      constexpr double kLimit = 9223372036854775807.0;  // rounds to 2^63, the first too large
      if (!(pct * 10 < kLimit))
        return line.fail("cpu_pct_interval_est",
                         too_large(*cpu, std::numeric_limits<int64_t>::max() / 10) + " (percent)");
      s.cpu_millicores = static_cast<uint64_t>(std::llround(pct * 10));
    }
    if (!trace.samples.empty()) {
      int64_t prev = trace.samples.back().t_ms;
      if (s.t_ms <= prev) {
        return line.fail("t_ms", "samples out of time order: " + std::to_string(s.t_ms) +
                                     " ms is not after the previous sample's " +
                                     std::to_string(prev) + " ms");
      }
      intervals.push_back(s.t_ms - prev);
    }
    trace.samples.push_back(std::move(s));
  }
  if (trace.samples.empty()) {
    return logic_error(std::string(kImportStep), "no samples (not an AgentCgroup run file?)",
                       source_name);
  }

  std::stable_sort(trace.calls.begin(), trace.calls.end(),
                   [](const CallEvent& a, const CallEvent& b) { return a.start_ms < b.start_ms; });
  // Each sample names the most recently started call still running at its time (for nested
  // calls, the sub-agent's call rather than its Task).
  for (auto& s : trace.samples) {
    for (auto it = trace.calls.rbegin(); it != trace.calls.rend(); ++it) {
      if (it->start_ms <= s.t_ms && s.t_ms <= it->end_ms) {
        s.call = it->id;
        break;
      }
    }
  }

  TraceHeader& h = trace.header;
  // The files carry no model or experiment name of their own; the data keeps one directory per
  // model and experiment (haiku/, all_images_haiku/, ...), so the directory names the data set.
  std::string base = source_name.substr(source_name.rfind('/') + 1);
  std::string dataset = agentcgroup_dataset(source_name);
  h.source = "agentcgroup import: " + dataset + "/" + base;
  h.host = agentcgroup_host();
  if (!intervals.empty()) h.interval_ms = std::llround(stats::median(std::move(intervals)));
  h.unmeasured = {"pids", "io_bytes"};
  h.notes =
      "Imported from AgentCgroup data (not committed to sandgate), data set '" + dataset +
      "' (the directory the run file was in). cpu_millicores = "
      "cpu_pct_interval_est x 10; " +
      std::to_string(null_cpu) + " sample(s) with a null estimate and " +
      std::to_string(negative_cpu) +
      " with a negative one are 0. pids and io_bytes were not measured (0). Memory is podman's, "
      "decimal, 3-4 significant digits. Sampling at ~1 s smooths sub-second bursts. " +
      std::to_string(nested) +
      " call(s) were made by a sub-agent (nested: they overlap their Task call). Intents: Bash "
      "(HTML escapes &amp; &lt; &gt; &quot; undone) by sandgate's inference rules, Read/Grep/Glob "
      "search, Edit/Write/MultiEdit/NotebookEdit "
      "edit, other tools default.";
  return trace;
}

Result<Trace> import_agentcgroup(const std::string& path, const controller::Policy& policy) {
  SG_ASSIGN_OR_RETURN(std::string text, read_input_file(path, kMaxFileBytes));
  return parse_agentcgroup(text, path, policy);
}

}  // namespace sandgate::replay
