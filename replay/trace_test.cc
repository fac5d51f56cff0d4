#include "replay/trace.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/fd.h"
#include "core/test_temp_dir.h"
#include "tests/support/privileged.h"

namespace sandgate::replay {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr const char* kHeader =
    R"({"type":"header","schema":"sandgate-trace","version":1,"source":"synthetic","host":{},)"
    R"("interval_ms":50,"units":{"time":"ms","memory":"bytes","cpu":"millicores","io":"bytes"}})";

Trace sample_trace() {
  Trace t;
  t.header.source = "synthetic: unit test";
  t.header.host = {{"cores", 2}, {"memory_bytes", 4294967296ULL}};
  t.header.interval_ms = 50;
  t.header.unmeasured = {"io_bytes"};
  t.header.notes = "made by hand, \"quoted\" and ünïcode";
  t.calls = {{"c1", "compile", "Bash", "make -j2", 100, 300},
             {"c2", "search", "Grep", "", 300, 300},
             {"c3", "default", "Task", "explore", 320, 400}};
  t.calls[2].nested = true;
  t.samples = {{0, 100'000'000, 10, 1, 0, std::nullopt},
               {100, 900'000'000, 1800, 12, 4096, "c1"},
               {200, 18'446'744'073'709'551'615ULL, 2000, 12, 8192, "c1"},
               {300, 100'000'000, 50, 1, 8192, "c2"},
               {350, 100'000'000, 0, 1, 8192, std::nullopt}};
  return t;
}

TEST(TraceCodec, RoundTripsThroughText) {
  Trace t = sample_trace();
  std::string text = format_trace(t);
  auto back = parse_trace(text, "mem.jsonl");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, t);
  EXPECT_EQ(back->duration_ms(), 400);  // c3 ends after the last sample
  // Header first, then merged by time with a call before the sample that names it.
  EXPECT_THAT(text.substr(0, text.find('\n')), HasSubstr(R"("type":"header")"));
  EXPECT_LT(text.find(R"("id":"c1")"), text.find(R"("call":"c1")"));
}

TEST(TraceCodec, RoundTripsThroughAFile) {
  testing::TempDir dir;
  Trace t = sample_trace();
  ASSERT_TRUE(write_trace(dir / "t.jsonl", t).ok());
  auto back = read_trace(dir / "t.jsonl");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, t);
}

TEST(TraceCodec, StreamedLinesReadBackWithCallsAfterTheirSamples) {
  // A recorder writes a call when it ends: after the samples that name it.
  Trace t = sample_trace();
  std::string text = format_header_line(t.header);
  for (const auto& s : t.samples) text += format_sample_line(s);
  for (auto it = t.calls.rbegin(); it != t.calls.rend(); ++it) text += format_call_line(*it);
  auto back = parse_trace(text, "stream.jsonl");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, t);  // calls sorted by start again
}

TEST(TraceCodec, DurationIsTheLaterOfLastSampleAndLastCallEnd) {
  Trace t;
  t.samples = {{0, 1, 0, 0, 0, std::nullopt}, {100, 1, 0, 0, 0, std::nullopt}};
  EXPECT_EQ(t.duration_ms(), 100);
  t.calls = {{"a", "run", "exec", "x", 50, 900}};
  EXPECT_EQ(t.duration_ms(), 900);
}

TEST(TraceCodec, BlankLinesAreSkippedButCounted) {
  std::string text =
      std::string(kHeader) + "\n\n" +
      R"({"type":"sample","t_ms":0,"mem_bytes":1,"cpu_millicores":0,"pids":0,"io_bytes":0})" +
      "\n\n" +
      R"({"type":"sample","t_ms":0,"mem_bytes":1,"cpu_millicores":0,"pids":0,"io_bytes":0})";
  auto r = parse_trace(text, "blank.jsonl");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), AllOf(HasSubstr("blank.jsonl:5"), HasSubstr("'t_ms'")));
}

TEST(JsonLines, ObjectsWithTheirLineNumbersAndErrorsAtSourceAndLine) {
  JsonLines lines("{\"a\":1}\n\n  \r\n{\"b\":2}\n[3]\n", "f.jsonl", "read x");
  auto first = lines.next();
  ASSERT_TRUE(first.ok() && *first);
  EXPECT_EQ((**first)["a"], 1);
  EXPECT_EQ(lines.line_no(), 1u);
  auto second = lines.next();
  ASSERT_TRUE(second.ok() && *second);
  EXPECT_EQ((**second)["b"], 2);
  EXPECT_EQ(lines.line_no(), 4u);  // blank lines are counted, not returned
  auto array = lines.next();
  ASSERT_FALSE(array.ok());
  EXPECT_EQ(array.error().message(), "read x f.jsonl:5: expected a JSON object, got an array");

  JsonLines bad("{\"a\":1,\n", "g.jsonl", "read x");
  auto b = bad.next();
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.error().message(), ::testing::HasSubstr("g.jsonl:1: not JSON at column 8"));
  JsonLines empty("", "e.jsonl", "read x");
  auto e = empty.next();
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(*e);
}

TEST(TraceCodec, CommittedSyntheticTracesRead) {
  for (const char* name : {"flat.jsonl", "spiky.jsonl"}) {
    auto t = read_trace(sandgate::testing::source_dir() + "/replay/testdata/" + name);
    ASSERT_TRUE(t.ok()) << t.error().message();
    EXPECT_THAT(t->header.source, HasSubstr("synthetic"));
    EXPECT_FALSE(t->samples.empty());
  }
}

// Each malformed input, with the file:line and field its error must name.
struct Malformed {
  const char* what;
  std::string body;  // lines after the header (or the whole file when header_too is false)
  bool with_header;
  std::string where;  // "bad.jsonl:N"
  std::string field;  // "'mem_bytes'" or a phrase the message must carry
  std::string says;
};

std::string S(const std::string& extra) {
  return R"({"type":"sample","t_ms":10,"mem_bytes":5,"cpu_millicores":0,"pids":0,"io_bytes":0)" +
         extra + "}";
}
std::string C(const std::string& id, const std::string& times) {
  return R"({"type":"call","id":")" + id +
         R"(","intent":"test","tool":"Bash","command":"pytest",)" + times + "}";
}

void PrintTo(const Malformed& m, std::ostream* os) { *os << m.what; }

class TraceMalformed : public ::testing::TestWithParam<Malformed> {};

TEST_P(TraceMalformed, NamesLineAndField) {
  const Malformed& m = GetParam();
  std::string text = m.with_header ? std::string(kHeader) + "\n" + m.body : m.body;
  auto r = parse_trace(text, "bad.jsonl");
  ASSERT_FALSE(r.ok()) << m.what;
  std::string msg = r.error().message();
  EXPECT_THAT(msg, HasSubstr(m.where + ":")) << m.what;
  EXPECT_THAT(msg, HasSubstr(m.field)) << m.what;
  EXPECT_THAT(msg, HasSubstr(m.says)) << m.what;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
}

std::string header_with(const std::string& from, const std::string& to) {
  std::string h = kHeader;
  auto p = h.find(from);
  return h.replace(p, from.size(), to);
}

INSTANTIATE_TEST_SUITE_P(
    Each, TraceMalformed,
    ::testing::Values(
        Malformed{"not JSON", S("") + "\n{\"type\":\"sample\",", true, "bad.jsonl:3", "column",
                  "not JSON"},
        Malformed{"not an object", "[1,2]", true, "bad.jsonl:2", "JSON object", "an array"},
        Malformed{"missing field",
                  R"({"type":"sample","t_ms":10,"cpu_millicores":0,"pids":0,"io_bytes":0})", true,
                  "bad.jsonl:2", "'mem_bytes'", "missing"},
        Malformed{"missing type", R"({"t_ms":10})", true, "bad.jsonl:2", "'type'", "missing"},
        Malformed{"wrong type (string)", S(R"(,"call":7)"), true, "bad.jsonl:2", "'call'",
                  "expected a string"},
        Malformed{
            "wrong type (float)",
            R"({"type":"sample","t_ms":10,"mem_bytes":1.5,"cpu_millicores":0,"pids":0,"io_bytes":0})",
            true, "bad.jsonl:2", "'mem_bytes'", "not an integer"},
        Malformed{
            "wrong type (text)",
            R"({"type":"sample","t_ms":"10","mem_bytes":1,"cpu_millicores":0,"pids":0,"io_bytes":0})",
            true, "bad.jsonl:2", "'t_ms'", "expected a non-negative integer"},
        Malformed{
            "negative",
            R"({"type":"sample","t_ms":10,"mem_bytes":1,"cpu_millicores":-3,"pids":0,"io_bytes":0})",
            true, "bad.jsonl:2", "'cpu_millicores'", "must not be negative"},
        Malformed{"negative time", C("a", R"("start_ms":-1,"end_ms":5)"), true, "bad.jsonl:2",
                  "'start_ms'", "must not be negative"},
        Malformed{"unknown type", R"({"type":"comment"})", true, "bad.jsonl:2", "'type'",
                  "unknown type"},
        Malformed{"header not first", S(""), false, "bad.jsonl:1", "'type'",
                  "expected the header first"},
        Malformed{"header missing (empty)", "", false, "bad.jsonl:1", "'type'", "no header"},
        Malformed{"second header", std::string(kHeader), true, "bad.jsonl:2", "'type'",
                  "second header"},
        Malformed{"version unsupported", header_with(R"("version":1)", R"("version":2)"), false,
                  "bad.jsonl:1", "'version'", "unsupported version 2"},
        Malformed{"wrong schema", header_with("sandgate-trace", "other"), false, "bad.jsonl:1",
                  "'schema'", "expected \"sandgate-trace\""},
        Malformed{"wrong units", header_with(R"("time":"ms")", R"("time":"s")"), false,
                  "bad.jsonl:1", "'units'", "v1 fixes the units"},
        Malformed{"unknown header key",
                  header_with(R"("interval_ms")", R"("interval":1,"interval_ms")"), false,
                  "bad.jsonl:1", "'interval'", "unknown key"},
        Malformed{"unmeasured names a non-field",
                  header_with(R"("interval_ms")", R"("unmeasured":["gpu"],"interval_ms")"), false,
                  "bad.jsonl:1", "'unmeasured'", "\"gpu\""},
        Malformed{"samples out of order", S("") + "\n" + S(""), true, "bad.jsonl:3", "'t_ms'",
                  "out of time order"},
        Malformed{"call end before start", C("a", R"("start_ms":50,"end_ms":40)"), true,
                  "bad.jsonl:2", "'end_ms'", "ends before it starts"},
        Malformed{
            "duplicate call id",
            C("a", R"("start_ms":1,"end_ms":2)") + "\n" + C("a", R"("start_ms":3,"end_ms":4)"),
            true, "bad.jsonl:3", "'id'", "first defined on line 2"},
        Malformed{"sample names no call", S(R"(,"call":"ghost")"), true, "bad.jsonl:2", "'call'",
                  "\"ghost\""},
        Malformed{"unknown sample key", S(R"(,"mem_byte":1)"), true, "bad.jsonl:2", "'mem_byte'",
                  "unknown key"},
        Malformed{"unknown call key", C("a", R"("start_ms":1,"end_ms":2,"exit":0)"), true,
                  "bad.jsonl:2", "'exit'", "unknown key"},
        Malformed{"nested not a boolean", C("a", R"("start_ms":1,"end_ms":2,"nested":1)"), true,
                  "bad.jsonl:2", "'nested'", "true or false"},
        Malformed{"observed not an object", C("a", R"("start_ms":1,"end_ms":2,"observed":[])"),
                  true, "bad.jsonl:2", "'observed'", "expected an object"},
        Malformed{"observed unknown key",
                  C("a", R"("start_ms":1,"end_ms":2,"observed":{"execz":[]})"), true, "bad.jsonl:2",
                  "'observed.execz'", "unknown key"},
        Malformed{"observed port too large",
                  C("a", R"("start_ms":1,"end_ms":2,"observed":{"connects":[)"
                         R"({"pid":1,"syscall":"connect","family":"inet","address":"127.0.0.1",)"
                         R"("port":7,"protocol":"tcp","verdict":"allowed"},)"
                         R"({"pid":1,"syscall":"connect","family":"inet","address":"127.0.0.1",)"
                         R"("port":70000,"protocol":"tcp","verdict":"allowed"}]})"),
                  true, "bad.jsonl:2", "'observed.connects[1].port'", "too large"},
        Malformed{"observed verdict disagrees with errno",
                  C("a", R"("start_ms":1,"end_ms":2,"observed":{"connects":[)"
                         R"({"pid":1,"syscall":"connect","family":"inet","address":"127.0.0.1",)"
                         R"("port":7,"protocol":"tcp","verdict":"allowed","errno":"EPERM"}]})"),
                  true, "bad.jsonl:2", "'observed.connects[0].verdict'", "expected \"denied\""},
        Malformed{"observed errno not a name",
                  C("a", R"("start_ms":1,"end_ms":2,"observed":{"sensitive_opens":[)"
                         R"({"pid":1,"path":"/etc/shadow","flags":0,"result":"nope"}]})"),
                  true, "bad.jsonl:2", "'observed.sensitive_opens[0].result'",
                  "expected \"opened\" or an errno name"},
        Malformed{"observed exec argv not strings",
                  C("a", R"("start_ms":1,"end_ms":2,"observed":{"execs":[)"
                         R"({"pid":1,"ppid":0,"path":"/bin/true","argv":[1]}]})"),
                  true, "bad.jsonl:2", "'observed.execs[0].argv[0]'", "expected a string"},
        Malformed{"observed negative runq",
                  C("a", R"("start_ms":1,"end_ms":2,"observed":{"runq_delay_ms":-1})"), true,
                  "bad.jsonl:2", "'observed.runq_delay_ms'", "from 0 to 1000000000"},
        Malformed{"observed net missing a count",
                  C("a", R"("start_ms":1,"end_ms":2,"observed":{"net":{"bytes_out":1,)"
                         R"("bytes_in":1,"packets_out":1}})"),
                  true, "bad.jsonl:2", "'observed.net.packets_in'", "missing"},
        Malformed{"observed egress verdict",
                  C("a", R"("start_ms":1,"end_ms":2,"observed":{"egress":[{"hook":"connect",)"
                         R"("address":"203.0.113.20","port":443,"protocol":"tcp",)"
                         R"("verdict":"maybe","pid":3}]})"),
                  true, "bad.jsonl:2", "'observed.egress[0].verdict'", "\"allowed\" or"},
        Malformed{"activity without why",
                  header_with(R"("interval_ms")", R"("activity":{"traced":false},"interval_ms")"),
                  false, "bad.jsonl:1", "'activity.why'", "missing"},
        Malformed{"activity traced not a boolean",
                  header_with(R"("interval_ms")", R"("activity":{"traced":"yes"},"interval_ms")"),
                  false, "bad.jsonl:1", "'activity.traced'", "true or false"},
        Malformed{
            "empty intent",
            R"({"type":"call","id":"a","intent":"","tool":"Bash","command":"x","start_ms":1,"end_ms":2})",
            true, "bad.jsonl:2", "'intent'", "must not be empty"}),
    [](const ::testing::TestParamInfo<Malformed>& info) {
      std::string n;
      for (char c : std::string(info.param.what))
        n += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return n;
    });

// What the kernel saw, as `record` writes it from each call's outcome, reads back equal.
TEST(TraceCodec, ObservedActivityRoundTrips) {
  Trace t = sample_trace();
  t.header.activity = TraceHeader::Activity{true, ""};
  TracedActivity a;
  a.execs = {{41, 40, "/usr/bin/python3", {"python3", "-c", "x"}, false},
             {42, 41, "/bin/sh", {"sh", "-c", "a long one"}, true}};
  a.connects = {{42, "connect", "inet", "127.0.0.1", 8080, "tcp", ECONNREFUSED},
                {42, "connect", "inet6", "fd00:ec2::254", 80, "tcp", EPERM},
                {43, "sendto", "inet", "203.0.113.53", 53, "udp", 0},
                {43, "connect", "unix", "@abstract", 0, "unix-stream", EINPROGRESS}};
  a.sensitive_opens = {{44, "/etc/shadow", 0, EACCES}, {44, "/root/.ssh/id_rsa", 02000000, 0}};
  a.forks = 3;
  a.exits = 4;
  a.runq_delay_ns = 12'345'678;
  a.runq_waits = 17;
  a.runq_delay_max_ns = 2'000'001;
  a.execs_not_kept = 5;
  a.lost = 1;
  CallObserved o;
  o.activity = a;
  o.egress = {{43, "sendmsg", "203.0.113.53", 53, "udp", true},
              {42, "connect", "203.0.113.99", 443, "tcp", false}};
  o.egress_not_kept = 2;
  o.net = controller::CallObservation::NetBytes{100, 200, 3, 4};
  t.calls[0].observed = o;
  // Only the guard's part (an untraced run with an allowlist), and an empty account.
  t.calls[1].observed =
      CallObserved{std::nullopt, {}, 0, controller::CallObservation::NetBytes{1, 2, 3, 4}};
  t.calls[2].observed = CallObserved{TracedActivity{}, {}, 0, std::nullopt};
  std::string text = format_trace(t);
  auto back = parse_trace(text, "observed.jsonl");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, t);
  EXPECT_THAT(text, HasSubstr(R"("activity":{"traced":true})"));
  EXPECT_THAT(text, HasSubstr(R"("errno":"ECONNREFUSED")"));
  EXPECT_THAT(text, HasSubstr(R"("runq_delay_ms":12.345678)"));

  // A trace whose run was not traced says why in its header.
  t.header.activity = TraceHeader::Activity{false, "load BPF: Operation not permitted"};
  auto untraced = parse_trace(format_trace(t), "untraced.jsonl");
  ASSERT_TRUE(untraced.ok()) << untraced.error().message();
  EXPECT_EQ(untraced->header.activity, t.header.activity);
}

// Traces written before calls carried "observed" (and every import) read as before.
TEST(TraceCodec, OldTracesWithoutObservedStillRead) {
  std::string text = std::string(kHeader) + "\n" + R"({"type":"call","id":"a","intent":"edit",)" +
                     R"("tool":"Edit","command":"x","start_ms":5,"end_ms":6})";
  auto r = parse_trace(text, "old.jsonl");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_FALSE(r->header.activity.has_value());
  ASSERT_EQ(r->calls.size(), 1u);
  EXPECT_FALSE(r->calls[0].observed.has_value());
}

TEST(TraceCodec, ObservedOfAnOutcomeKeepsTheTracerAndTheGuard) {
  controller::CallObservation none;
  EXPECT_FALSE(observed_of(none).has_value());
  controller::CallObservation seen;
  seen.traced = TracedActivity{};
  seen.traced->forks = 2;
  seen.egress = {{1, "connect", "203.0.113.20", 443, "tcp", true}};
  seen.net = controller::CallObservation::NetBytes{1, 2, 3, 4};
  auto o = observed_of(seen);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->activity, seen.traced);
  EXPECT_EQ(o->egress, seen.egress);
  EXPECT_EQ(o->net, seen.net);
}

// The positive twins of the strictness above: what is allowed reads.
TEST(TraceCodec, AcceptsEmptyCommandZeroLengthCallsAndNoSamples) {
  std::string text =
      std::string(kHeader) + "\n" +
      R"({"type":"call","id":"a","intent":"edit","tool":"Edit","command":"","start_ms":5,"end_ms":5})";
  auto r = parse_trace(text, "ok.jsonl");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->calls.size(), 1u);
  EXPECT_EQ(r->duration_ms(), 5);
}

// A directory stands for its traces: *.jsonl (import's output) and *.trace (record's, as in
// this repository's traces/), sorted; anything else is left out, and none at all is an error.
TEST(TraceFiles, ADirectoryIsItsJsonlAndTraceFiles) {
  testing::TempDir dir;
  for (const char* name : {"b.trace", "a.jsonl", "notes.md", "c.json"})
    ASSERT_TRUE(write_file(dir / name, "x", O_WRONLY | O_CREAT).ok());
  auto files = trace_files({dir.path(), "/explicit/file.txt"});
  ASSERT_TRUE(files.ok()) << files.error().message();
  EXPECT_EQ(*files,
            (std::vector<std::string>{dir / "a.jsonl", dir / "b.trace", "/explicit/file.txt"}));
  testing::TempDir empty;
  auto none = trace_files({empty.path()});
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.error().message(), ::testing::HasSubstr("no *.jsonl or *.trace files"));
}

// A header whose host is 100,000 objects deep (found by tests/fuzz/trace_fuzz.cc): copying the
// trace overflowed the stack. Refused at the brace that goes too deep, with its line.
TEST(TraceCodec, NestingDeeperThanTheBoundIsAnErrorNotACrash) {
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "{\"a\":";
  deep += "1" + std::string(100000, '}');
  std::string text = R"({"type":"header","schema":"sandgate-trace","version":1,"source":"x","host":)" +
                     deep + R"(,"interval_ms":1000})" + "\n";
  auto t = parse_trace(text, "deep.trace");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.error().message(), HasSubstr("deep.trace:1"));
  EXPECT_THAT(t.error().message(), HasSubstr("nested deeper than 256 levels at column"));
  EXPECT_LT(t.error().message().size(), 300u);
}

TEST(TraceCodec, ATooLargeIntegerIsCalledTooLargeNotNotAnInteger) {
  auto r = parse_trace(std::string(kHeader) + "\n" +
                           R"({"type":"sample","t_ms":1,"mem_bytes":99999999999999999999,)"
                           R"("cpu_millicores":0,"pids":0,"io_bytes":0})",
                       "big.jsonl");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(),
              HasSubstr("big.jsonl:2: field 'mem_bytes': too large: at most 18446744073709551615"));
  auto time = parse_trace(std::string(kHeader) + "\n" +
                              R"({"type":"sample","t_ms":9223372036854775808,"mem_bytes":1,)"
                              R"("cpu_millicores":0,"pids":0,"io_bytes":0})",
                          "big.jsonl");
  ASSERT_FALSE(time.ok());
  EXPECT_THAT(time.error().message(),
              HasSubstr("field 't_ms': too large: at most 9223372036854775807"));
}

// Columns count from 1 in every message, as compilers count, in the JSON-lines reader and in
// parse_json alike; a number too large for a double has no position and says no column at all
// (it said "column 0").
TEST(JsonLines, ColumnsCountFromOneLikeParseJson) {
  JsonLines lines("{\"type\":x}\n", "c.jsonl", "read x");
  auto l = lines.next();
  ASSERT_FALSE(l.ok());
  EXPECT_THAT(l.error().message(), HasSubstr("c.jsonl:1: not JSON at column 9:"));
  auto j = parse_json("{\"type\":x}", "c.json");
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(j.error().message(), HasSubstr("line 1 column 9:"));
  const std::string huge_text = "{\"a\":1" + std::string(400, '0') + "}\n";  // outlives the reader
  JsonLines huge(huge_text, "h.jsonl", "read x");
  auto h = huge.next();
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.error().message(), ::testing::Not(HasSubstr("column 0")));
  EXPECT_THAT(h.error().message(), HasSubstr("h.jsonl:1: not JSON: number overflow"));
}

// A 50 MB number was echoed whole in the error (a 52 MB line): any input a message quotes (a
// token, a value, a key, a type) is an excerpt of at most 80 bytes.
TEST(TraceCodec, HugeInputIsQuotedAsAShortExcerpt) {
  const std::string big(100000, '7');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a number too large for a double", R"({"type":"sample","t_ms":)" + big + "}"},
      {"a 3 MB line", R"({"type":"sample","t_ms":)" + std::string(size_t{3} << 20, '7') + "}"},
      {"a bad escape at the end of a long string",
       R"({"type":")" + std::string(100000, 'x') + R"(\q"})"},
      {"an unknown key", R"({"type":"sample",")" + big + R"(":1})"},
      {"an unknown type", R"({"type":")" + big + R"("})"},
      {"a string for a number", R"({"type":"sample","t_ms":")" + big + R"("})"},
  };
  for (const auto& [what, line] : cases) {
    auto r = parse_trace(std::string(kHeader) + "\n" + line + "\n", "big.jsonl");
    ASSERT_FALSE(r.ok()) << what;
    std::string msg = r.error().message();
    EXPECT_LT(msg.size(), 400u) << what << ": " << msg.substr(0, 400);
    EXPECT_THAT(msg, HasSubstr("big.jsonl:2")) << what;
    EXPECT_THAT(msg, HasSubstr("more bytes]")) << what << ": " << msg.substr(0, 400);
    EXPECT_EQ(msg.find('\n'), std::string::npos) << what;
  }
  auto schema = parse_trace(header_with("sandgate-trace", big) + "\n", "big.jsonl");
  ASSERT_FALSE(schema.ok());
  EXPECT_LT(schema.error().message().size(), 400u);
}

TEST(TraceCodec, MissingFileNamesThePath) {
  auto r = read_trace("/nonexistent/trace.jsonl");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("/nonexistent/trace.jsonl"));
}

}  // namespace
}  // namespace sandgate::replay
