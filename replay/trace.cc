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

// The inverse of errno_name: "ECONNREFUSED" (or "E<n>", as errno_name writes an unnamed one)
// -> its number; nullopt for anything else.
std::optional<int> errno_from_name(std::string_view name) {
  if (name.size() < 2 || name[0] != 'E') return std::nullopt;
  // 4095: the largest errno the kernel returns (MAX_ERRNO, include/linux/err.h).
  for (int err = 1; err <= 4095; ++err)
    if (errno_name(err) == name) return err;
  return std::nullopt;
}
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

// The strict reader of a call's "observed" (and the header's "activity"): every failure names
// the field's path from the line's top level ("observed.connects[1].port").
class ObservedReader {
 public:
  explicit ObservedReader(const LineReader& r) : r_(r) {}

  Status keys(const Json& j, const std::string& path,
              std::initializer_list<std::string_view> known) const {
    if (!j.is_object()) return r_.fail(path, "expected an object, got " + describe_json(j));
    for (const auto& [key, value] : j.items()) {
      if (std::find(known.begin(), known.end(), key) == known.end())
        return r_.fail(path + "." + key,
                       "unknown key; known keys here: " + join(std::vector(known)));
    }
    return {};
  }
  Result<const Json*> member(const Json& j, const std::string& path, std::string_view key) const {
    auto it = j.find(key);
    if (it == j.end()) return r_.fail(path + "." + std::string(key), "missing");
    return &*it;
  }
  Result<bool> boolean(const Json& v, const std::string& path) const {
    if (!v.is_boolean()) return r_.fail(path, "expected true or false, got " + describe_json(v));
    return v.get<bool>();
  }
  Result<std::string> string(const Json& v, const std::string& path, bool allow_empty) const {
    if (!v.is_string()) return r_.fail(path, "expected a string, got " + describe_json(v));
    std::string s = v.get<std::string>();
    if (!allow_empty && s.empty()) return r_.fail(path, "must not be empty");
    return s;
  }
  Result<uint64_t> count(const Json& v, const std::string& path, uint64_t max) const {
    if (!v.is_number())
      return r_.fail(path, "expected a non-negative integer, got " + describe_json(v));
    if (v.is_number_float()) return r_.fail(path, not_an_integer(v, max));
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > max) return r_.fail(path, too_large(v, max));
      return v.get<uint64_t>();
    }
    int64_t s = v.get<int64_t>();
    if (s < 0) return r_.fail(path, "must not be negative, got " + describe_json(v));
    if (static_cast<uint64_t>(s) > max) return r_.fail(path, too_large(v, max));
    return static_cast<uint64_t>(s);
  }
  // Milliseconds written as a number with a fraction (runq_delay_ms): nanoseconds back. At
  // most 1e9 ms (11.6 days of waiting): below 2^50 ns, ns -> ms -> ns is exact through a
  // double, so a trace reads back as the same trace after it is written.
  Result<uint64_t> millis_as_ns(const Json& v, const std::string& path) const {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0 ||
        v.get<double>() > 1e9)
      return r_.fail(
          path, "expected a number of milliseconds from 0 to 1000000000, got " + describe_json(v));
    return static_cast<uint64_t>(std::llround(v.get<double>() * 1e6));
  }
  Result<pid_t> pid(const Json& v, const std::string& path) const {
    SG_ASSIGN_OR_RETURN(uint64_t p, count(v, path, std::numeric_limits<pid_t>::max()));
    return static_cast<pid_t>(p);
  }
  // "ECONNREFUSED" -> its number.
  Result<int> errno_value(const Json& v, const std::string& path) const {
    SG_ASSIGN_OR_RETURN(std::string name, string(v, path, false));
    auto err = errno_from_name(name);
    if (!err)
      return r_.fail(path, "expected an errno name like \"ECONNREFUSED\", got " + describe_json(v));
    return *err;
  }
  Result<std::vector<std::string>> strings(const Json& v, const std::string& path) const {
    if (!v.is_array())
      return r_.fail(path, "expected an array of strings, got " + describe_json(v));
    std::vector<std::string> out;
    for (size_t i = 0; i < v.size(); ++i) {
      SG_ASSIGN_OR_RETURN(std::string s, string(v[i], path + "[" + std::to_string(i) + "]", true));
      out.push_back(std::move(s));
    }
    return out;
  }
  // An array whose entries are read by `each(entry, path)`.
  template <typename T, typename F>
  Result<std::vector<T>> list(const Json& v, const std::string& path, F each) const {
    if (!v.is_array()) return r_.fail(path, "expected an array, got " + describe_json(v));
    if (v.size() > kTracedKeep)
      return r_.fail(path, std::to_string(v.size()) + " entries, more than the " +
                               std::to_string(kTracedKeep) + " a call keeps");
    std::vector<T> out;
    for (size_t i = 0; i < v.size(); ++i) {
      SG_ASSIGN_OR_RETURN(T t, each(v[i], path + "[" + std::to_string(i) + "]"));
      out.push_back(std::move(t));
    }
    return out;
  }

  Result<TracedExec> exec(const Json& j, const std::string& path) const {
    SG_TRY(keys(j, path, {"pid", "ppid", "path", "argv", "argv_cut"}));
    TracedExec e;
    SG_ASSIGN_OR_RETURN(const Json* v, member(j, path, "pid"));
    SG_ASSIGN_OR_RETURN(e.pid, pid(*v, path + ".pid"));
    SG_ASSIGN_OR_RETURN(v, member(j, path, "ppid"));
    SG_ASSIGN_OR_RETURN(e.ppid, pid(*v, path + ".ppid"));
    SG_ASSIGN_OR_RETURN(v, member(j, path, "path"));
    SG_ASSIGN_OR_RETURN(e.path, string(*v, path + ".path", true));
    SG_ASSIGN_OR_RETURN(v, member(j, path, "argv"));
    SG_ASSIGN_OR_RETURN(e.argv, strings(*v, path + ".argv"));
    if (j.contains("argv_cut")) {
      SG_ASSIGN_OR_RETURN(e.args_cut, boolean(j["argv_cut"], path + ".argv_cut"));
    }
    return e;
  }

  Result<TracedConnect> connect(const Json& j, const std::string& path) const {
    SG_TRY(keys(j, path,
                {"pid", "syscall", "family", "address", "port", "protocol", "verdict", "errno"}));
    TracedConnect c;
    SG_ASSIGN_OR_RETURN(const Json* v, member(j, path, "pid"));
    SG_ASSIGN_OR_RETURN(c.pid, pid(*v, path + ".pid"));
    SG_ASSIGN_OR_RETURN(v, member(j, path, "syscall"));
    SG_ASSIGN_OR_RETURN(c.syscall, string(*v, path + ".syscall", false));
    SG_ASSIGN_OR_RETURN(v, member(j, path, "family"));
    SG_ASSIGN_OR_RETURN(c.family, string(*v, path + ".family", false));
    SG_ASSIGN_OR_RETURN(v, member(j, path, "address"));
    SG_ASSIGN_OR_RETURN(c.address, string(*v, path + ".address", true));
    SG_ASSIGN_OR_RETURN(v, member(j, path, "port"));
    SG_ASSIGN_OR_RETURN(uint64_t port, count(*v, path + ".port", 65535));
    c.port = static_cast<uint16_t>(port);
    SG_ASSIGN_OR_RETURN(v, member(j, path, "protocol"));
    SG_ASSIGN_OR_RETURN(c.protocol, string(*v, path + ".protocol", true));
    if (j.contains("errno")) {
      SG_ASSIGN_OR_RETURN(c.err, errno_value(j["errno"], path + ".errno"));
    }
    // The verdict follows from the errno; one that disagrees is a corrupt or edited line.
    SG_ASSIGN_OR_RETURN(v, member(j, path, "verdict"));
    SG_ASSIGN_OR_RETURN(std::string verdict, string(*v, path + ".verdict", false));
    if (verdict != c.verdict())
      return r_.fail(path + ".verdict", "expected \"" + c.verdict() + "\" for errno " +
                                            (c.err ? errno_name(c.err) : "none") + ", got " +
                                            describe_json(*v));
    return c;
  }

  Result<TracedOpen> open(const Json& j, const std::string& path) const {
    SG_TRY(keys(j, path, {"pid", "path", "flags", "result"}));
    TracedOpen o;
    SG_ASSIGN_OR_RETURN(const Json* v, member(j, path, "pid"));
    SG_ASSIGN_OR_RETURN(o.pid, pid(*v, path + ".pid"));
    SG_ASSIGN_OR_RETURN(v, member(j, path, "path"));
    SG_ASSIGN_OR_RETURN(o.path, string(*v, path + ".path", true));
    SG_ASSIGN_OR_RETURN(v, member(j, path, "flags"));
    SG_ASSIGN_OR_RETURN(uint64_t flags,
                        count(*v, path + ".flags", std::numeric_limits<int>::max()));
    o.flags = static_cast<int>(flags);
    SG_ASSIGN_OR_RETURN(v, member(j, path, "result"));
    if (v->is_string() && v->get<std::string>() == "opened") {
      o.err = 0;
    } else if (auto err = errno_value(*v, path + ".result"); err.ok()) {
      o.err = *err;
    } else {
      return r_.fail(
          path + ".result",
          "expected \"opened\" or an errno name like \"EACCES\", got " + describe_json(*v));
    }
    return o;
  }

  Result<EgressVerdict> egress(const Json& j, const std::string& path) const {
    SG_TRY(keys(j, path, {"hook", "address", "port", "protocol", "verdict", "pid"}));
    EgressVerdict e;
    SG_ASSIGN_OR_RETURN(const Json* v, member(j, path, "pid"));
    SG_ASSIGN_OR_RETURN(e.pid, pid(*v, path + ".pid"));
    SG_ASSIGN_OR_RETURN(v, member(j, path, "hook"));
    SG_ASSIGN_OR_RETURN(e.hook, string(*v, path + ".hook", false));
    SG_ASSIGN_OR_RETURN(v, member(j, path, "address"));
    SG_ASSIGN_OR_RETURN(e.address, string(*v, path + ".address", true));
    SG_ASSIGN_OR_RETURN(v, member(j, path, "port"));
    SG_ASSIGN_OR_RETURN(uint64_t port, count(*v, path + ".port", 65535));
    e.port = static_cast<uint16_t>(port);
    SG_ASSIGN_OR_RETURN(v, member(j, path, "protocol"));
    SG_ASSIGN_OR_RETURN(e.protocol, string(*v, path + ".protocol", true));
    SG_ASSIGN_OR_RETURN(v, member(j, path, "verdict"));
    SG_ASSIGN_OR_RETURN(std::string verdict, string(*v, path + ".verdict", false));
    if (verdict != "allowed" && verdict != "denied")
      return r_.fail(path + ".verdict",
                     "expected \"allowed\" or \"denied\", got " + describe_json(*v));
    e.allowed = verdict == "allowed";
    return e;
  }

  Result<CallObserved> observed(const Json& j) const {
    const std::string path = "observed";
    SG_TRY(
        keys(j, path,
             {"execs", "connects", "sensitive_opens", "forks", "exits", "lost", "runq_delay_ms",
              "runq_waits", "runq_delay_max_ms", "not_kept", "egress", "egress_not_kept", "net"}));
    constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
    auto at = [&](std::string_view k) { return path + "." + std::string(k); };
    CallObserved o;
    // Any of the tracer's keys means the tracer watched the call; the ones missing are 0.
    static constexpr std::string_view kActivityKeys[] = {
        "execs",         "connects",   "sensitive_opens",   "forks",   "exits", "lost",
        "runq_delay_ms", "runq_waits", "runq_delay_max_ms", "not_kept"};
    bool traced = std::any_of(std::begin(kActivityKeys), std::end(kActivityKeys),
                              [&](std::string_view k) { return j.contains(k); });
    if (traced) {
      TracedActivity a;
      if (j.contains("execs")) {
        SG_ASSIGN_OR_RETURN(a.execs, list<TracedExec>(j["execs"], at("execs"),
                                                      [&](const Json& e, const std::string& p) {
                                                        return exec(e, p);
                                                      }));
      }
      if (j.contains("connects")) {
        SG_ASSIGN_OR_RETURN(
            a.connects, list<TracedConnect>(
                            j["connects"], at("connects"),
                            [&](const Json& e, const std::string& p) { return connect(e, p); }));
      }
      if (j.contains("sensitive_opens")) {
        SG_ASSIGN_OR_RETURN(
            a.sensitive_opens,
            list<TracedOpen>(j["sensitive_opens"], at("sensitive_opens"),
                             [&](const Json& e, const std::string& p) { return open(e, p); }));
      }
      for (auto [key, field] :
           {std::pair{"forks", &a.forks}, std::pair{"exits", &a.exits}, std::pair{"lost", &a.lost},
            std::pair{"runq_waits", &a.runq_waits}}) {
        if (j.contains(key)) {
          SG_ASSIGN_OR_RETURN(*field, count(j[key], at(key), kMax));
        }
      }
      if (j.contains("runq_delay_ms")) {
        SG_ASSIGN_OR_RETURN(a.runq_delay_ns, millis_as_ns(j["runq_delay_ms"], at("runq_delay_ms")));
      }
      if (j.contains("runq_delay_max_ms")) {
        SG_ASSIGN_OR_RETURN(a.runq_delay_max_ns,
                            millis_as_ns(j["runq_delay_max_ms"], at("runq_delay_max_ms")));
      }
      if (j.contains("not_kept")) {
        const Json& nk = j["not_kept"];
        SG_TRY(keys(nk, at("not_kept"), {"execs", "connects", "sensitive_opens"}));
        for (auto [key, field] :
             {std::pair{"execs", &a.execs_not_kept}, std::pair{"connects", &a.connects_not_kept},
              std::pair{"sensitive_opens", &a.opens_not_kept}}) {
          if (nk.contains(key)) {
            SG_ASSIGN_OR_RETURN(*field, count(nk[key], at("not_kept") + "." + key, kMax));
          }
        }
      }
      o.activity = std::move(a);
    }
    if (j.contains("egress")) {
      SG_ASSIGN_OR_RETURN(o.egress, list<EgressVerdict>(j["egress"], at("egress"),
                                                        [&](const Json& e, const std::string& p) {
                                                          return egress(e, p);
                                                        }));
    }
    if (j.contains("egress_not_kept")) {
      SG_ASSIGN_OR_RETURN(o.egress_not_kept,
                          count(j["egress_not_kept"], at("egress_not_kept"), kMax));
    }
    if (j.contains("net")) {
      const Json& n = j["net"];
      SG_TRY(keys(n, at("net"), {"bytes_out", "bytes_in", "packets_out", "packets_in"}));
      controller::CallObservation::NetBytes b;
      for (auto [key, field] :
           {std::pair{"bytes_out", &b.bytes_out}, std::pair{"bytes_in", &b.bytes_in},
            std::pair{"packets_out", &b.packets_out}, std::pair{"packets_in", &b.packets_in}}) {
        SG_ASSIGN_OR_RETURN(const Json* v, member(n, at("net"), key));
        SG_ASSIGN_OR_RETURN(*field, count(*v, at("net") + "." + key, kMax));
      }
      o.net = b;
    }
    return o;
  }

 private:
  const LineReader& r_;
};

Result<TraceHeader> read_header(const LineReader& r) {
  SG_TRY(r.keys({"type", "schema", "version", "source", "host", "interval_ms", "units",
                 "unmeasured", "notes", "activity"}));
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
  if (const Json* activity = r.find("activity")) {
    ObservedReader o(r);
    SG_TRY(o.keys(*activity, "activity", {"traced", "why"}));
    TraceHeader::Activity a;
    SG_ASSIGN_OR_RETURN(const Json* traced, o.member(*activity, "activity", "traced"));
    SG_ASSIGN_OR_RETURN(a.traced, o.boolean(*traced, "activity.traced"));
    if (activity->contains("why")) {
      SG_ASSIGN_OR_RETURN(a.why, o.string((*activity)["why"], "activity.why", false));
      if (a.traced) return r.fail("activity.why", "only a trace that was not traced says why");
    } else if (!a.traced) {
      return r.fail("activity.why", "missing: a trace without the kernel's account says why");
    }
    h.activity = std::move(a);
  }
  return h;
}

Result<CallEvent> read_call(const LineReader& r) {
  SG_TRY(r.keys(
      {"type", "id", "intent", "tool", "command", "start_ms", "end_ms", "nested", "observed"}));
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
  if (const Json* observed = r.find("observed")) {
    SG_ASSIGN_OR_RETURN(c.observed, ObservedReader(r).observed(*observed));
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
  if (h.activity) {
    nlohmann::ordered_json a;
    a["traced"] = h.activity->traced;
    if (!h.activity->traced) a["why"] = h.activity->why;
    j["activity"] = a;
  }
  return j;
}

// The shape of a call outcome's `observed` (controller/outcome.cc), the tracer's and the
// guard's parts only.
Json observed_json(const CallObserved& o) {
  Json j = o.activity ? to_json(*o.activity) : Json::object();
  if (!o.egress.empty() || o.egress_not_kept) {
    Json egress = Json::array();
    for (const auto& v : o.egress) egress.push_back(to_json(v));
    j["egress"] = std::move(egress);
    if (o.egress_not_kept) j["egress_not_kept"] = o.egress_not_kept;
  }
  if (o.net) {
    j["net"] = {{"bytes_out", o.net->bytes_out},
                {"bytes_in", o.net->bytes_in},
                {"packets_out", o.net->packets_out},
                {"packets_in", o.net->packets_in}};
  }
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
  if (c.observed) j["observed"] = observed_json(*c.observed);
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

std::optional<CallObserved> observed_of(const controller::CallObservation& o) {
  CallObserved out;
  out.activity = o.traced;
  out.egress = o.egress;
  out.egress_not_kept = o.egress_not_kept;
  out.net = o.net;
  if (out.empty()) return std::nullopt;
  return out;
}

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
