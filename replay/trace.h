// `sandgate trace v1`: a recorded burst-silence run. JSON lines: one header, then call events
// and samples in time order (README.md, "Trace format").
//
//   {"type":"header","schema":"sandgate-trace","version":1,"source":"...","host":{...},
//    "interval_ms":50,"units":{"time":"ms","memory":"bytes","cpu":"millicores","io":"bytes"}}
//   {"type":"call","id":"c1","intent":"compile","tool":"Bash","command":"make -j2",
//    "start_ms":1200,"end_ms":4800,"observed":{"execs":[...],"connects":[...],...}}
//   {"type":"sample","t_ms":1250,"mem_bytes":123456789,"cpu_millicores":1800,"pids":12,
//    "io_bytes":4096,"call":"c1"}
//
// Times are milliseconds from the start of the run. A sample's `call` is optional (the call
// the recorder knew was running); io_bytes is cumulative read+write bytes of the run's cgroup.
// Optional header keys: "unmeasured" (sample fields the source did not measure and wrote as 0,
// e.g. ["pids","io_bytes"] for AgentCgroup imports), "notes" (free text for people) and
// "activity" (whether the kernel's account of each call was recorded: {"traced": true}, or
// {"traced": false, "why": "..."} when the eBPF activity tracer could not be loaded; absent in
// traces made before it existed and in imports).
//
// A call's optional "observed" is what the kernel saw the call's processes do, in the shape of
// the call outcome's `observed` (controller/outcome.h): "execs", "connects", "sensitive_opens",
// "forks", "exits", "lost", "runq_delay_ms", "runq_waits", "runq_delay_max_ms", "not_kept" from
// the activity tracer, "egress" / "egress_not_kept" / "net" from the egress guard. Every key is
// optional; its entries are read as strictly as the rest of the line (errors name the field
// path, "observed.connects[1].port").
//
// Reading is strict: unknown keys, a wrong type, a negative number, a header that is missing or
// not first, an unsupported version, samples whose time goes backwards (equal times included),
// a call ending before it starts, a duplicate call id, and a sample naming a call that is not in
// the file are all errors. Call events may come in any order (a recorder writes a call when it
// ends); they are sorted by start_ms after reading.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "controller/outcome.h"
#include "core/activity.h"
#include "core/egress.h"
#include "core/json.h"
#include "core/result.h"

namespace sandgate::replay {

inline constexpr int kTraceVersion = 1;

struct TraceHeader {
  int version = kTraceVersion;
  std::string source;          // "sandgate record", "agentcgroup import: <file>", "synthetic"
  Json host = Json::object();  // free-form host description: cores, memory, kernel, provider
  int64_t interval_ms = 0;     // nominal sample interval
  std::vector<std::string> unmeasured;  // sample fields written as 0 because not measured
  std::string notes;                    // free text (how the trace was made, caveats)
  // Whether calls carry the kernel's account (JSON "activity"); nullopt: the trace does not say
  // (made before `record` traced calls, or imported).
  struct Activity {
    bool traced = false;
    std::string why;  // why not, when !traced (the tracer's error); empty when traced
    bool operator==(const Activity&) const = default;
  };
  std::optional<Activity> activity;
  bool operator==(const TraceHeader&) const = default;
};

// What `record` keeps of a call outcome's `observed`: the activity tracer's account and the
// egress guard's decisions and byte counts. Resource peaks are not repeated here: the samples
// carry them.
struct CallObserved {
  std::optional<TracedActivity> activity;  // the tracer watched the call
  std::vector<EgressVerdict> egress;       // the guard's decisions (an allowlisted run)
  uint64_t egress_not_kept = 0;
  std::optional<controller::CallObservation::NetBytes> net;
  bool empty() const { return !activity && egress.empty() && !egress_not_kept && !net; }
  bool operator==(const CallObserved&) const = default;
};
// The part of an outcome's observation a trace keeps; nullopt when there is none.
std::optional<CallObserved> observed_of(const controller::CallObservation& o);

struct CallEvent {
  std::string id;       // unique in the trace
  std::string intent;   // controller intent: compile, test, install, search, edit, run, default
  std::string tool;     // "Bash", "Read", "exec", ...
  std::string command;  // as run (or the tool's main argument)
  int64_t start_ms = 0;
  int64_t end_ms = 0;  // >= start_ms
  // Made inside another call that is still running (a sub-agent's call inside its Task), so it
  // overlaps that call. JSON "nested": true, omitted when false.
  bool nested = false;
  // What the kernel saw it do (JSON "observed"; see above); nullopt: nothing recorded.
  std::optional<CallObserved> observed;
  bool operator==(const CallEvent&) const = default;
};

struct Sample {
  int64_t t_ms = 0;
  uint64_t mem_bytes = 0;
  uint64_t cpu_millicores = 0;  // average use over the interval ending at t_ms; 1000 = one core
  uint64_t pids = 0;
  uint64_t io_bytes = 0;            // cumulative
  std::optional<std::string> call;  // id of the call running at t_ms, when known
  bool operator==(const Sample&) const = default;
};

struct Trace {
  TraceHeader header;
  std::vector<CallEvent> calls;  // sorted by start_ms
  std::vector<Sample> samples;   // sorted by t_ms
  int64_t duration_ms() const;   // last sample or call end, whichever is later
  bool operator==(const Trace&) const = default;
};

// Reads a trace; every error names the file, the line and the field ("read trace
// trace.jsonl:12: field 'mem_bytes': expected a non-negative integer, got 1.5").
Result<Trace> read_trace(const std::string& path);
Result<Trace> parse_trace(std::string_view text, const std::string& source_name);
// Writes header, then calls and samples merged in time order.
std::string format_trace(const Trace& trace);
Status write_trace(const std::string& path, const Trace& trace);

// The framing of a JSON-lines file, shared by the trace reader and the AgentCgroup importer:
// each non-blank line parsed as one JSON object. A line that is not JSON (with the column) or
// not an object is an error at "source:line" under `step`.
class JsonLines {
 public:
  // `text` must outlive this reader.
  JsonLines(std::string_view text, std::string source_name, std::string step)
      : text_(text), source_(std::move(source_name)), step_(std::move(step)) {}
  // The next line's object; nullopt after the last line.
  Result<std::optional<Json>> next();
  // The number (from 1) of the line next() returned last.
  size_t line_no() const { return line_no_; }

 private:
  std::string_view text_;
  std::string source_, step_;
  size_t pos_ = 0, line_no_ = 0;
};

// Messages for an integer field, shared by the trace reader and the importer: a value above
// `max` ("too large: at most N, got ...") and a JSON number read as a double (a whole number
// beyond uint64 is too large; anything else is not an integer).
std::string too_large(const Json& v, uint64_t max);
std::string not_an_integer(const Json& v, uint64_t max);

// The one rule for every command that takes traces or files to import by name or by directory
// (trace validate|stats|import, plan --traces, replay): the files named, with each directory
// replaced by its *.jsonl and *.trace entries (sorted; not recursive); an error for a directory
// with none. Entries are not checked here: reading refuses what is not a regular file.
Result<std::vector<std::string>> trace_files(const std::vector<std::string>& paths);

// A deterministic half of a set of traces, so grants sized on one half can be tried on the
// other (`policy suggest --split even`, then `replay --split odd` on the same inputs): the
// files sorted by path and numbered from 0; even takes 0, 2, 4, ..., odd 1, 3, 5, ..., all
// every file (in that sorted order). The two halves of one set are disjoint and cover it.
enum class TraceSplit { kAll, kEven, kOdd };
// "all", "even" or "odd"; an error names the value and the choices.
Result<TraceSplit> parse_trace_split(std::string_view text);
std::string to_string(TraceSplit split);
std::vector<std::string> select_split(std::vector<std::string> files, TraceSplit split);

// One line each (newline included), for writers that stream a trace as it is recorded: the
// header first, then calls and samples in any order the reader accepts.
std::string format_header_line(const TraceHeader& header);
std::string format_call_line(const CallEvent& call);
std::string format_sample_line(const Sample& sample);

}  // namespace sandgate::replay
