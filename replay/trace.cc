// `sandgate trace v1` reader and writer (format in trace.h and README.md, "Trace format").
//
// The reader works line by line so that every error can name the line; each line is parsed by
// nlohmann::json at the boundary and then walked field by field, strictly, like the policy
// parser (controller/policy.cc): a trace is an input to measurements, and a silently ignored
// typo ("mem_byte") would skew every figure drawn from it.
#include "replay/trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <string_view>

#include "core/defer.h"
#include "core/fd.h"
#include "core/strings.h"

namespace sandgate::replay {
namespace {

constexpr std::string_view kStep = "read trace";
constexpr std::string_view kSchema = "sandgate-trace";
// Traces are a few MB (10 minutes at 50 ms is ~12k samples, ~1.5 MB); the bound only keeps a
// wrong path (a disk image) from being read whole.
constexpr size_t kMaxTraceBytes = size_t{512} << 20;
// A line is one event: a few hundred bytes (a recorded command is the longest field). The bound
// keeps a corrupt line (a 50 MB number) from being copied by the JSON parser and echoed; such
// a line is refused before it is parsed.
constexpr size_t kMaxLineBytes = size_t{1} << 20;

// The units the format fixes; the header states them so a reader of the file needs no manual.
const Json& fixed_units() {
  static const Json units = {
      {"time", "ms"}, {"memory", "bytes"}, {"cpu", "millicores"}, {"io", "bytes"}};
  return units;
}

const std::vector<std::string_view>& sample_field_names() {
  static const std::vector<std::string_view> names = {"mem_bytes", "cpu_millicores", "pids",
                                                      "io_bytes"};
  return names;
}

}  // namespace

// nlohmann reads an integer beyond uint64 as a double: 1e+20 is a whole number, too large, not
// "not an integer".
std::string not_an_integer(const Json& v, uint64_t max) {
  double d = v.get<double>();
  if (std::isfinite(d) && d >= 0 && std::floor(d) == d) return too_large(v, max);
  if (std::isfinite(d) && d < 0) return "must not be negative, got " + describe_json(v);
  return "expected a non-negative integer, got " + describe_json(v) + " (not an integer)";
}

std::string too_large(const Json& v, uint64_t max) {
  return "too large: at most " + std::to_string(max) + ", got " + describe_json(v);
}

namespace {

// Reads the fields of one line; every failure names file:line and the field.
class LineReader {
 public:
  LineReader(const std::string& file, size_t line, const Json& j)
      : file_(file), line_(line), j_(j) {}

  Error fail(std::string_view field, const std::string& what) const {
    // The field may be a key from the input (an unknown one): quoted as an excerpt.
    return logic_error(std::string(kStep), "field '" + excerpt(field) + "': " + what, where());
  }
  std::string where() const { return file_ + ":" + std::to_string(line_); }

  // Every key of the line must be one of `known`.
  Status keys(std::initializer_list<std::string_view> known) const {
    for (const auto& [key, value] : j_.items()) {
      if (std::find(known.begin(), known.end(), key) == known.end())
        return fail(key, "unknown key; known keys here: " + join(std::vector(known)));
    }
    return {};
  }

  const Json* find(std::string_view field) const {
    auto it = j_.find(field);
    return it == j_.end() ? nullptr : &*it;
  }

  Result<const Json*> require(std::string_view field) const {
    const Json* v = find(field);
    if (!v) return fail(field, "missing");
    return v;
  }

  Result<std::string> string(std::string_view field, bool allow_empty) const {
    SG_ASSIGN_OR_RETURN(const Json* v, require(field));
    return string_value(field, *v, allow_empty);
  }

  Result<std::string> string_value(std::string_view field, const Json& v, bool allow_empty) const {
    if (!v.is_string()) return fail(field, "expected a string, got " + describe_json(v));
    std::string s = v.get<std::string>();
    if (!allow_empty && s.empty()) return fail(field, "must not be empty");
    return s;
  }

  // A non-negative integer that fits int64 (times) or uint64 (amounts).
  Result<uint64_t> count(std::string_view field, uint64_t max) const {
    SG_ASSIGN_OR_RETURN(const Json* v, require(field));
    if (!v->is_number())
      return fail(field, "expected a non-negative integer, got " + describe_json(*v));
    if (v->is_number_float()) return fail(field, not_an_integer(*v, max));
    if (v->is_number_unsigned()) {
      uint64_t u = v->get<uint64_t>();
      if (u > max) return fail(field, too_large(*v, max));
      return u;
    }
    int64_t s = v->get<int64_t>();
    if (s < 0) return fail(field, "must not be negative, got " + describe_json(*v));
    if (static_cast<uint64_t>(s) > max) return fail(field, too_large(*v, max));
    return static_cast<uint64_t>(s);
  }

  Result<int64_t> time(std::string_view field) const {
    SG_ASSIGN_OR_RETURN(uint64_t v, count(field, std::numeric_limits<int64_t>::max()));
    return static_cast<int64_t>(v);
  }

 private:
  const std::string& file_;
  size_t line_;
  const Json& j_;
};

Result<TraceHeader> read_header(const LineReader& r) {
  SG_TRY(r.keys({"type", "schema", "version", "source", "host", "interval_ms", "units",
                 "unmeasured", "notes"}));
  SG_ASSIGN_OR_RETURN(std::string schema, r.string("schema", false));
  if (schema != kSchema) {
    return r.fail("schema",
                  "expected \"" + std::string(kSchema) + "\", got \"" + excerpt(schema) + "\"");
  }
  SG_ASSIGN_OR_RETURN(const Json* version, r.require("version"));
  if (!version->is_number_integer()) {
    return r.fail("version", "expected an integer, got " + describe_json(*version));
  }
  if (version->get<int64_t>() != kTraceVersion) {
    return r.fail("version", "unsupported version " + describe_json(*version) +
                                 " (this sandgate reads " + std::to_string(kTraceVersion) + ")");
  }
  TraceHeader h;
  SG_ASSIGN_OR_RETURN(h.source, r.string("source", false));
  SG_ASSIGN_OR_RETURN(const Json* host, r.require("host"));
  if (!host->is_object()) return r.fail("host", "expected an object, got " + describe_json(*host));
  h.host = *host;
  SG_ASSIGN_OR_RETURN(h.interval_ms, r.time("interval_ms"));
  SG_ASSIGN_OR_RETURN(const Json* units, r.require("units"));
  if (*units != fixed_units()) {
    return r.fail("units", "expected " + fixed_units().dump() + " (v1 fixes the units), got " +
                               excerpt(dump_json(*units)));
  }
  if (const Json* unmeasured = r.find("unmeasured")) {
    if (!unmeasured->is_array()) {
      return r.fail("unmeasured",
                    "expected an array of sample field names, got " + describe_json(*unmeasured));
    }
    for (const Json& f : *unmeasured) {
      const auto& names = sample_field_names();
      if (!f.is_string() ||
          std::find(names.begin(), names.end(), f.get<std::string>()) == names.end()) {
        return r.fail("unmeasured",
                      "expected sample field names (" + join(names) + "), got " + describe_json(f));
      }
      h.unmeasured.push_back(f.get<std::string>());
    }
  }
  if (r.find("notes")) {
    SG_ASSIGN_OR_RETURN(h.notes, r.string("notes", true));
  }
  return h;
}

Result<CallEvent> read_call(const LineReader& r) {
  SG_TRY(r.keys({"type", "id", "intent", "tool", "command", "start_ms", "end_ms", "nested"}));
  CallEvent c;
  SG_ASSIGN_OR_RETURN(c.id, r.string("id", false));
  SG_ASSIGN_OR_RETURN(c.intent, r.string("intent", false));
  SG_ASSIGN_OR_RETURN(c.tool, r.string("tool", false));
  SG_ASSIGN_OR_RETURN(c.command, r.string("command", true));
  SG_ASSIGN_OR_RETURN(c.start_ms, r.time("start_ms"));
  SG_ASSIGN_OR_RETURN(c.end_ms, r.time("end_ms"));
  if (c.end_ms < c.start_ms) {
    return r.fail("end_ms", "ends before it starts (start_ms " + std::to_string(c.start_ms) +
                                ", end_ms " + std::to_string(c.end_ms) + ")");
  }
  if (const Json* nested = r.find("nested")) {
    if (!nested->is_boolean())
      return r.fail("nested", "expected true or false, got " + describe_json(*nested));
    c.nested = nested->get<bool>();
  }
  return c;
}

Result<Sample> read_sample(const LineReader& r) {
  SG_TRY(r.keys({"type", "t_ms", "mem_bytes", "cpu_millicores", "pids", "io_bytes", "call"}));
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  Sample s;
  SG_ASSIGN_OR_RETURN(s.t_ms, r.time("t_ms"));
  SG_ASSIGN_OR_RETURN(s.mem_bytes, r.count("mem_bytes", kMax));
  SG_ASSIGN_OR_RETURN(s.cpu_millicores, r.count("cpu_millicores", kMax));
  SG_ASSIGN_OR_RETURN(s.pids, r.count("pids", kMax));
  SG_ASSIGN_OR_RETURN(s.io_bytes, r.count("io_bytes", kMax));
  if (r.find("call")) {
    SG_ASSIGN_OR_RETURN(s.call, r.string("call", false));
  }
  return s;
}

nlohmann::ordered_json header_json(const TraceHeader& h) {
  nlohmann::ordered_json j;
  j["type"] = "header";
  j["schema"] = kSchema;
  j["version"] = h.version;
  j["source"] = h.source;
  j["host"] = h.host;
  j["interval_ms"] = h.interval_ms;
  j["units"] = fixed_units();
  if (!h.unmeasured.empty()) j["unmeasured"] = h.unmeasured;
  if (!h.notes.empty()) j["notes"] = h.notes;
  return j;
}

nlohmann::ordered_json call_json(const CallEvent& c) {
  nlohmann::ordered_json j;
  j["type"] = "call";
  j["id"] = c.id;
  j["intent"] = c.intent;
  j["tool"] = c.tool;
  j["command"] = c.command;
  j["start_ms"] = c.start_ms;
  j["end_ms"] = c.end_ms;
  if (c.nested) j["nested"] = true;
  return j;
}

nlohmann::ordered_json sample_json(const Sample& s) {
  nlohmann::ordered_json j;
  j["type"] = "sample";
  j["t_ms"] = s.t_ms;
  j["mem_bytes"] = s.mem_bytes;
  j["cpu_millicores"] = s.cpu_millicores;
  j["pids"] = s.pids;
  j["io_bytes"] = s.io_bytes;
  if (s.call) j["call"] = *s.call;
  return j;
}

// dump() with invalid UTF-8 replaced rather than thrown: a command cut at 200 bytes by the
// source may end inside a character.
std::string line_of(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace

int64_t Trace::duration_ms() const {
  int64_t d = samples.empty() ? 0 : samples.back().t_ms;
  for (const auto& c : calls) d = std::max(d, c.end_ms);
  return d;
}

Result<std::optional<Json>> JsonLines::next() {
  while (pos_ < text_.size()) {
    size_t end = text_.find('\n', pos_);
    if (end == std::string_view::npos) end = text_.size();
    std::string_view line = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    ++line_no_;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // blank line

    std::string where = source_ + ":" + std::to_string(line_no_);
    if (line.size() > kMaxLineBytes) {
      return logic_error(step_,
                         "line of " + std::to_string(line.size()) + " bytes, more than the " +
                             std::to_string(kMaxLineBytes) + " a line may have: \"" +
                             excerpt(line) + "\"",
                         where);
    }
    // Copying a trace's host (or any value) recurses once per level of nesting: refused before
    // the parse, as parse_json does.
    if (auto at = json_nesting_beyond(line, kMaxJsonDepth)) {
      return logic_error(step_,
                         "nested deeper than " + std::to_string(kMaxJsonDepth) +
                             " levels at column " + std::to_string(*at + 1),
                         where);
    }
    Json j;
    try {
      j = Json::parse(line);
    } catch (const Json::parse_error& e) {
      // e.byte counts the characters read, the offending one included: the column from 1, as
      // compilers count (and parse_json).
      return logic_error(
          step_, "not JSON at column " + std::to_string(e.byte) + ": " + json_error_text(e), where);
    } catch (const Json::exception& e) {
      // out_of_range.406, a number too large for a double: nlohmann gives no position.
      return logic_error(step_, "not JSON: " + json_error_text(e), where);
    }
    if (!j.is_object())
      return logic_error(step_, "expected a JSON object, got " + describe_json(j), where);
    return std::optional<Json>(std::move(j));
  }
  return std::optional<Json>();
}

Result<Trace> parse_trace(std::string_view text, const std::string& source_name) {
  Trace trace;
  bool have_header = false;
  std::map<std::string, size_t> call_lines;                  // id -> line that defined it
  std::vector<std::pair<size_t, std::string>> sample_calls;  // line, call id named
  JsonLines lines(text, source_name, std::string(kStep));
  for (;;) {
    SG_ASSIGN_OR_RETURN(std::optional<Json> next, lines.next());
    if (!next) break;
    const Json& j = *next;
    const size_t line_no = lines.line_no();
    LineReader r(source_name, line_no, j);
    SG_ASSIGN_OR_RETURN(std::string type, r.string("type", false));
    if (type != "header" && type != "call" && type != "sample") {
      return r.fail("type", "unknown type \"" + excerpt(type) + "\" (known: header, call, sample)");
    }
    if (!have_header && type != "header") {
      return r.fail("type", "expected the header first, got \"" + excerpt(type) + "\"");
    }
    if (type == "header") {
      if (have_header) return r.fail("type", "a second header (the header comes once, first)");
      SG_ASSIGN_OR_RETURN(trace.header, read_header(r));
      have_header = true;
    } else if (type == "call") {
      SG_ASSIGN_OR_RETURN(CallEvent c, read_call(r));
      auto [it, inserted] = call_lines.emplace(c.id, line_no);
      if (!inserted) {
        return r.fail("id", "duplicate call id \"" + excerpt(c.id) + "\" (first defined on line " +
                                std::to_string(it->second) + ")");
      }
      trace.calls.push_back(std::move(c));
    } else {
      SG_ASSIGN_OR_RETURN(Sample s, read_sample(r));
      if (!trace.samples.empty() && s.t_ms <= trace.samples.back().t_ms) {
        return r.fail("t_ms", "samples out of time order: " + std::to_string(s.t_ms) +
                                  " ms is not after the previous sample's " +
                                  std::to_string(trace.samples.back().t_ms) + " ms");
      }
      if (s.call) sample_calls.emplace_back(line_no, *s.call);
      trace.samples.push_back(std::move(s));
    }
  }
  if (!have_header) {
    return logic_error(std::string(kStep), "field 'type': no header line (the file is empty)",
                       source_name + ":1");
  }
  // Calls may be written after the samples that name them (a recorder knows a call's end only
  // when it ends), so the references are checked once the whole file is read.
  for (const auto& [line, id] : sample_calls) {
    if (!call_lines.contains(id)) {
      return logic_error(
          std::string(kStep),
          "field 'call': names call \"" + excerpt(id) + "\", which is not in the trace",
          source_name + ":" + std::to_string(line));
    }
  }
  std::stable_sort(trace.calls.begin(), trace.calls.end(),
                   [](const CallEvent& a, const CallEvent& b) { return a.start_ms < b.start_ms; });
  return trace;
}

Result<std::vector<std::string>> trace_files(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) {
    std::error_code ec;
    if (!std::filesystem::is_directory(p, ec)) {
      out.push_back(p);  // reading it will say what is wrong, if anything
      continue;
    }
    std::vector<std::string> found;
    for (const auto& e : std::filesystem::directory_iterator(p, ec)) {
      // *.jsonl (what import writes, and AgentCgroup's files) and *.trace (what record writes
      // by convention, as in this repository's traces/).
      auto ext = e.path().extension();
      // Anything but a directory is listed: a FIFO named x.trace is refused by the reader with a
      // message, not skipped in silence.
      if ((ext == ".jsonl" || ext == ".trace") && !e.is_directory())
        found.push_back(e.path().string());
    }
    if (ec) return sys_error(ec.value(), "list traces", p);
    if (found.empty())
      return logic_error("list traces", "no *.jsonl or *.trace files in the directory", p);
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

Result<TraceSplit> parse_trace_split(std::string_view text) {
  if (text == "all") return TraceSplit::kAll;
  if (text == "even") return TraceSplit::kEven;
  if (text == "odd") return TraceSplit::kOdd;
  return logic_error("--split", "expected all, even or odd, got '" + excerpt(text) + "'");
}

std::string to_string(TraceSplit split) {
  switch (split) {
    case TraceSplit::kAll:
      return "all";
    case TraceSplit::kEven:
      return "even";
    case TraceSplit::kOdd:
      return "odd";
  }
  return "all";
}

std::vector<std::string> select_split(std::vector<std::string> files, TraceSplit split) {
  std::sort(files.begin(), files.end());
  if (split == TraceSplit::kAll) return files;
  std::vector<std::string> out;
  for (size_t i = split == TraceSplit::kEven ? 0 : 1; i < files.size(); i += 2)
    out.push_back(files[i]);
  return out;
}

Result<Trace> read_trace(const std::string& path) {
  SG_ASSIGN_OR_RETURN(std::string text, read_input_file(path, kMaxTraceBytes));
  return parse_trace(text, path);
}

std::string format_header_line(const TraceHeader& header) { return line_of(header_json(header)); }
std::string format_call_line(const CallEvent& call) { return line_of(call_json(call)); }
std::string format_sample_line(const Sample& sample) { return line_of(sample_json(sample)); }

std::string format_trace(const Trace& trace) {
  std::vector<const CallEvent*> calls;
  for (const auto& c : trace.calls) calls.push_back(&c);
  std::stable_sort(calls.begin(), calls.end(), [](const CallEvent* a, const CallEvent* b) {
    return a->start_ms < b->start_ms;
  });
  std::string out = format_header_line(trace.header);
  // Merge by time; a call starting at a sample's time comes first, so the sample that names
  // it follows its definition.
  size_t ci = 0;
  for (const auto& s : trace.samples) {
    while (ci < calls.size() && calls[ci]->start_ms <= s.t_ms)
      out += format_call_line(*calls[ci++]);
    out += format_sample_line(s);
  }
  while (ci < calls.size()) out += format_call_line(*calls[ci++]);
  return out;
}

Status write_trace(const std::string& path, const Trace& trace) {
  // Temporary file and rename: a reader never sees half a trace.
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  Defer remove_tmp([&] { ::unlink(tmp.c_str()); });
  SG_TRY(write_file(tmp, format_trace(trace), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return sys_error("rename", tmp);
  remove_tmp.cancel();
  return {};
}

}  // namespace sandgate::replay
