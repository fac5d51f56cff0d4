#include "replay/agentcgroup.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "core/process.h"
#include "replay/trace_stats.h"
#include "tests/support/privileged.h"

namespace sandgate::replay {
namespace {

using ::testing::HasSubstr;

TEST(AgentCgroupIntent, ToolsAndBashCommands) {
  const auto& p = controller::default_policy();
  EXPECT_EQ(agentcgroup_intent(p, "Read", "/testbed/x.py"), "search");
  EXPECT_EQ(agentcgroup_intent(p, "Grep", "foo"), "search");
  EXPECT_EQ(agentcgroup_intent(p, "Glob", "**/*.py"), "search");
  EXPECT_EQ(agentcgroup_intent(p, "Edit", "x.py"), "edit");
  EXPECT_EQ(agentcgroup_intent(p, "Write", "x.py"), "edit");
  EXPECT_EQ(agentcgroup_intent(p, "MultiEdit", "x.py"), "edit");
  EXPECT_EQ(agentcgroup_intent(p, "NotebookEdit", "x.ipynb"), "edit");
  EXPECT_EQ(agentcgroup_intent(p, "TodoWrite", "todos[4]"), "default");
  EXPECT_EQ(agentcgroup_intent(p, "Task", "explore"), "default");
  EXPECT_EQ(agentcgroup_intent(p, "WebFetch", "https://x"), "default");
  // Bash goes through the controller's inference, shell splitting included.
  EXPECT_EQ(agentcgroup_intent(p, "Bash", "python3 -m pytest tests/ -x"), "test");
  EXPECT_EQ(agentcgroup_intent(p, "Bash", "cd /testbed && make -j4"), "compile");
  EXPECT_EQ(agentcgroup_intent(p, "Bash", "pip install -e ."), "install");
  EXPECT_EQ(agentcgroup_intent(p, "Bash", "grep -rn foo ."), "search");
  // No rule knows the command itself, so the rule for `bash -c` decides, exactly as for
  // `sandgate exec -- bash -c 'frobnicate --all'`.
  EXPECT_EQ(agentcgroup_intent(p, "Bash", "frobnicate --all"), "run");
}

constexpr const char* kSmall =
    R"({"t_ms":0,"mem_bytes":11850000,"cpu_pct":99.44,"cpu_pct_interval_est":null,"mem_pct":0.01})"
    "\n"
    R"({"tool_call":{"name":"Task","cmd":"explore","start_ms":500,"end_ms":3000,"sidechain":false}})"
    "\n"
    R"({"t_ms":1033,"mem_bytes":185300000,"cpu_pct":62.21,"cpu_pct_interval_est":62.21,"mem_pct":0.14})"
    "\n"
    R"({"tool_call":{"name":"Bash","cmd":"cat &gt; a.txt","start_ms":1500,"end_ms":2500,"sidechain":true}})"
    "\n"
    R"({"t_ms":2069,"mem_bytes":195800000,"cpu_pct":47.76,"cpu_pct_interval_est":-0.4,"mem_pct":0.15})"
    "\n"
    R"({"t_ms":3104,"mem_bytes":196000000,"cpu_pct":32.63,"cpu_pct_interval_est":2.46,"mem_pct":0.15})"
    "\n";

TEST(AgentCgroupImport, ConvertsSamplesCallsAndHeader) {
  auto t = parse_agentcgroup(kSmall, "dir/small.jsonl");
  ASSERT_TRUE(t.ok()) << t.error().message();
  ASSERT_EQ(t->samples.size(), 4u);
  ASSERT_EQ(t->calls.size(), 2u);
  EXPECT_EQ(t->samples[0].cpu_millicores, 0u);    // null estimate
  EXPECT_EQ(t->samples[1].cpu_millicores, 622u);  // 62.21 % x 10
  EXPECT_EQ(t->samples[2].cpu_millicores, 0u);    // negative estimate
  EXPECT_EQ(t->samples[3].cpu_millicores, 25u);   // 2.46 % -> 24.6 -> 25
  EXPECT_EQ(t->samples[1].mem_bytes, 185300000u);
  EXPECT_EQ(t->calls[0].id, "c1");
  EXPECT_EQ(t->calls[0].intent, "default");
  EXPECT_FALSE(t->calls[0].nested);
  EXPECT_EQ(t->calls[1].command, "cat > a.txt");  // HTML escape undone
  EXPECT_EQ(t->calls[1].intent, "edit");
  EXPECT_TRUE(t->calls[1].nested);
  // The innermost running call: Task at 1033 ms, the sub-agent's Bash at 2069 ms.
  EXPECT_EQ(t->samples[1].call, "c1");
  EXPECT_EQ(t->samples[2].call, "c2");
  EXPECT_EQ(t->samples[3].call, std::nullopt);
  EXPECT_EQ(t->header.source, "agentcgroup import: dir/small.jsonl");
  EXPECT_EQ(t->header.interval_ms, 1035);  // median of 1033, 1036, 1035
  EXPECT_EQ(t->header.unmeasured, (std::vector<std::string>{"pids", "io_bytes"}));
  EXPECT_EQ(t->header.host["cores"], 24);
  EXPECT_THAT(t->header.notes, HasSubstr("1 sample(s) with a null estimate and 1 with a negative"));
  // The result is a valid trace: it survives the strict reader.
  auto back = parse_trace(format_trace(*t), "imported.jsonl");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, *t);
}

// The README's example of the format (the real data is not in the repository): what a user
// tries first must import, with the intents the README promises.
TEST(AgentCgroupImport, TheReadmeExampleImports) {
  auto t = import_agentcgroup(sandgate::testing::source_dir() +
                              "/replay/testdata/agentcgroup-example.jsonl");
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_EQ(t->samples.size(), 8u);
  ASSERT_EQ(t->calls.size(), 4u);
  EXPECT_EQ(t->calls[0].intent, "search");   // Read
  EXPECT_EQ(t->calls[1].intent, "install");  // pip install
  EXPECT_EQ(t->calls[2].intent, "edit");
  EXPECT_EQ(t->calls[3].intent, "test");           // python -m pytest
  EXPECT_EQ(t->samples[2].cpu_millicores, 1136u);  // 113.6 % x 10
  EXPECT_EQ(t->samples[4].cpu_millicores, 0u);     // a negative estimate
  EXPECT_EQ(t->samples[5].call, "c4");             // 5200 ms: inside pytest
  EXPECT_EQ(compute_stats(*t, "example").peak_mem_bytes, 620000000u);
}

TEST(AgentCgroupImport, IntervalIsTheMedianOfTheSampleGaps) {
  // Gaps 1000, 1047, 1051, 1062: an even count, so the mean of the two middle ones (core/stats.h),
  // as the data's own index.jsonl reports it (median_interval_s), rounded to a millisecond.
  std::string text;
  for (int t : {0, 1000, 2047, 3098, 4160})
    text += R"({"t_ms":)" + std::to_string(t) +
            R"(,"mem_bytes":1,"cpu_pct":1,"cpu_pct_interval_est":1,"mem_pct":0})" + "\n";
  auto t = parse_agentcgroup(text, "even.jsonl");
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_EQ(t->header.interval_ms, 1049);
}

struct BadLine {
  const char* what;
  std::string line;
  std::string field;
};

class AgentCgroupBad : public ::testing::TestWithParam<BadLine> {};
void PrintTo(const BadLine& b, std::ostream* os) { *os << b.what; }

TEST_P(AgentCgroupBad, NamesFileLineAndField) {
  std::string text =
      R"({"t_ms":0,"mem_bytes":1,"cpu_pct":1,"cpu_pct_interval_est":null,"mem_pct":0})"
      "\n" +
      GetParam().line + "\n";
  auto t = parse_agentcgroup(text, "run.jsonl");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.error().message(), HasSubstr("run.jsonl:2"));
  EXPECT_THAT(t.error().message(), HasSubstr(GetParam().field));
}

INSTANTIATE_TEST_SUITE_P(
    Each, AgentCgroupBad,
    ::testing::Values(
        BadLine{"not JSON", R"({"t_ms":5,)", "not JSON at column"},
        BadLine{"missing mem", R"({"t_ms":5,"cpu_pct_interval_est":1})", "'mem_bytes': missing"},
        BadLine{"negative time", R"({"t_ms":-5,"mem_bytes":1,"cpu_pct_interval_est":1})", "'t_ms'"},
        BadLine{"out of order", R"({"t_ms":0,"mem_bytes":1,"cpu_pct_interval_est":1})",
                "'t_ms': samples out of time order"},
        BadLine{"cpu text", R"({"t_ms":5,"mem_bytes":1,"cpu_pct_interval_est":"x"})",
                "'cpu_pct_interval_est'"},
        BadLine{"unknown key", R"({"t_ms":5,"mem_bytes":1,"cpu_pct_interval_est":1,"gpu":0})",
                "'gpu'"},
        BadLine{
            "call end before start",
            R"({"tool_call":{"name":"Bash","cmd":"x","start_ms":9,"end_ms":3,"sidechain":false}})",
            "'tool_call.end_ms'"},
        BadLine{
            "sidechain not a boolean",
            R"({"tool_call":{"name":"Bash","cmd":"x","start_ms":1,"end_ms":3,"sidechain":"no"}})",
            "'tool_call.sidechain': expected true, false or null, got \"no\""},
        BadLine{
            "call cmd not text",
            R"({"tool_call":{"name":"Bash","cmd":7,"start_ms":1,"end_ms":3,"sidechain":false}})",
            "'tool_call.cmd'"}));

// Real runs with no sub-agent carry "sidechain": null, or no sidechain at all: both mean the
// call was not a sub-agent's (null = absent), and a run carrying them imports.
TEST(AgentCgroupImport, SidechainNullOrAbsentIsNotASubAgentCall) {
  std::string text =
      R"({"t_ms":0,"mem_bytes":1000,"cpu_pct":1,"cpu_pct_interval_est":null,"mem_pct":0})"
      "\n"
      R"({"tool_call":{"name":"Bash","cmd":"ls","start_ms":1,"end_ms":3,"sidechain":null}})"
      "\n"
      R"({"tool_call":{"name":"Read","cmd":"x","start_ms":4,"end_ms":5}})"
      "\n"
      R"({"tool_call":{"name":"Bash","cmd":"ls","start_ms":6,"end_ms":7,"sidechain":true}})"
      "\n";
  auto t = parse_agentcgroup(text, "runs/qwen/run.jsonl");
  ASSERT_TRUE(t.ok()) << t.error().message();
  ASSERT_EQ(t->calls.size(), 3u);
  EXPECT_FALSE(t->calls[0].nested);
  EXPECT_FALSE(t->calls[1].nested);
  EXPECT_TRUE(t->calls[2].nested);
}

// The run files carry no model name; the data keeps one directory per model and experiment,
// so the header names the directory the file came from, never a fixed one.
TEST(AgentCgroupImport, HeaderNamesTheDataSetOfItsOwnPath) {
  auto t = parse_agentcgroup(kSmall, "/data/agentcgroup/all_images_sonnet/small.jsonl");
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_EQ(t->header.source, "agentcgroup import: all_images_sonnet/small.jsonl");
  EXPECT_THAT(t->header.notes, HasSubstr("data set 'all_images_sonnet'"));
  EXPECT_THAT(dump_json(t->header.host), ::testing::Not(HasSubstr("haiku")));
}

TEST(AgentCgroupImport, ATooLargeIntegerIsCalledTooLarge) {
  auto t = parse_agentcgroup(
      R"({"t_ms":99999999999999999999,"mem_bytes":1,"cpu_pct":1,"cpu_pct_interval_est":1,"mem_pct":0})",
      "run.jsonl");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.error().message(),
              HasSubstr("run.jsonl:1: field 't_ms': too large: at most 9223372036854775807"));
}

// A 50 MB number was echoed whole (a 52 MB error line): every quote of input is an excerpt.
// A CPU percentage whose millicores do not fit int64 was imported as 9223372036854775808
// millicores (llround out of range); it is refused, naming the field.
TEST(AgentCgroupImport, ACpuPercentBeyondRangeIsTooLargeNotGarbage) {
  for (const char* pct : {"1e300", "1.7e308", "922337203685477580.8"}) {
    std::string text = std::string(R"({"t_ms":0,"mem_bytes":1,"cpu_pct":1,"cpu_pct_interval_est":)") +
                       pct + R"(,"mem_pct":0})" + "\n";
    auto t = parse_agentcgroup(text, "huge.jsonl");
    ASSERT_FALSE(t.ok()) << pct;
    EXPECT_THAT(t.error().message(), HasSubstr("cpu_pct_interval_est")) << pct;
    EXPECT_THAT(t.error().message(), HasSubstr("too large")) << pct;
  }
  auto fine = parse_agentcgroup(
      R"({"t_ms":0,"mem_bytes":1,"cpu_pct":1,"cpu_pct_interval_est":250.04,"mem_pct":0})"
      "\n",
      "fine.jsonl");
  ASSERT_TRUE(fine.ok()) << fine.error().message();
  ASSERT_EQ(fine->samples.size(), 1u);
  EXPECT_EQ(fine->samples[0].cpu_millicores, 2500u);
}

TEST(AgentCgroupImport, AHugeTokenIsQuotedAsAShortExcerpt) {
  for (size_t digits : {size_t{100000}, size_t{3} << 20}) {
    std::string text = R"({"t_ms":0,"mem_bytes":1)" + std::string(digits, '0') +
                       R"(,"cpu_pct":1,"cpu_pct_interval_est":1,"mem_pct":0})";
    auto t = parse_agentcgroup(text, "run.jsonl");
    ASSERT_FALSE(t.ok());
    std::string msg = t.error().message();
    EXPECT_LT(msg.size(), 400u) << msg.substr(0, 400);
    EXPECT_THAT(msg, HasSubstr("run.jsonl:1"));
    EXPECT_THAT(msg, HasSubstr("more bytes]"));
  }
  std::string key(100000, 'k');
  auto t = parse_agentcgroup(
      R"({"t_ms":0,"mem_bytes":1,"cpu_pct":1,"cpu_pct_interval_est":1,")" + key + R"(":0})",
      "run.jsonl");
  ASSERT_FALSE(t.ok());
  EXPECT_LT(t.error().message().size(), 400u) << t.error().message().substr(0, 400);
}

TEST(AgentCgroupImport, EmptyFileIsAnError) {
  auto t = parse_agentcgroup("", "empty.jsonl");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.error().message(), HasSubstr("empty.jsonl"));
}

// The real data carries no licence and is never committed: SANDGATE_AGENTCGROUP_TRACES, else
// where this project's own machines keep it (../shared/traces/agentcgroup beside the tree, or
// beside the checkout a fresh CI clone was made from). Users set the variable (README).
std::string agentcgroup_dir() {
  const char* env = std::getenv("SANDGATE_AGENTCGROUP_TRACES");
  if (env && *env) return env;
  const std::string rel = "/../shared/traces/agentcgroup";
  std::string beside = sandgate::testing::source_dir() + rel;
  struct stat st;
  if (::stat(beside.c_str(), &st) == 0) return beside;
  auto origin = sandgate::run_command(
      {"git", "-C", sandgate::testing::source_dir(), "config", "--get", "remote.origin.url"});
  if (origin.ok() && origin->status.shell_code() == 0) {
    std::string url = origin->output.substr(0, origin->output.find('\n'));
    if (url.starts_with("/") && ::stat((url + rel).c_str(), &st) == 0) return url + rel;
  }
  return beside;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Figures checked by hand on the files (grep/python over the raw lines), not by this importer.
TEST(AgentCgroupRealData, RdflibRun) {
  std::string path = agentcgroup_dir() + "/haiku/RDFLib__rdflib-1117.jsonl";
  SANDGATE_REQUIRE(exists(path),
                   "AgentCgroup data not found at " + path + " (set SANDGATE_AGENTCGROUP_TRACES)");
  auto t = import_agentcgroup(path);
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_EQ(t->samples.size(), 63u);
  EXPECT_EQ(t->calls.size(), 17u);
  EXPECT_EQ(t->samples.back().t_ms, 64221);
  EXPECT_EQ(t->samples[1].cpu_millicores, 622u);  // "cpu_pct_interval_est":62.21
  TraceStats s = compute_stats(*t, path);
  EXPECT_EQ(s.peak_mem_bytes, 262000000u);
  EXPECT_NEAR(s.avg_mem_bytes, 194507142, 1);  // index.jsonl avg_mem_bytes
  // Calls in file order: TodoWrite, Glob, Read, Edit, ..., then "python3 -m pytest" at 22778.
  EXPECT_EQ(t->calls[0].intent, "default");
  EXPECT_EQ(t->calls[1].intent, "search");
  EXPECT_EQ(t->calls[3].intent, "edit");
  auto pytest = std::find_if(t->calls.begin(), t->calls.end(),
                             [](const CallEvent& c) { return c.start_ms == 22778; });
  ASSERT_NE(pytest, t->calls.end());
  EXPECT_EQ(pytest->command, "python3 -m pytest");
  EXPECT_EQ(pytest->intent, "test");
}

TEST(AgentCgroupRealData, PreCommitRunWithTheLargestRise) {
  std::string path = agentcgroup_dir() + "/haiku/pre-commit__pre-commit-2524.jsonl";
  SANDGATE_REQUIRE(exists(path),
                   "AgentCgroup data not found at " + path + " (set SANDGATE_AGENTCGROUP_TRACES)");
  auto t = import_agentcgroup(path);
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_EQ(t->samples.size(), 314u);
  EXPECT_EQ(t->calls.size(), 24u);
  TraceStats s = compute_stats(*t, path);
  EXPECT_EQ(s.peak_mem_bytes, 1862000000u);
  EXPECT_NEAR(s.avg_mem_bytes, 306133343, 1);
  EXPECT_NEAR(s.peak_to_avg, 6.082, 0.001);
  // index.jsonl says 1163824608 B/s from unrounded times; from the ms times it is 1.1645e9.
  EXPECT_NEAR(s.max_rise_bytes_per_s, 1.1645e9, 1e6);
  // The long pytest runs (59.4-179.5 s, 191.3-312.0 s) are tests.
  auto long_run = std::find_if(t->calls.begin(), t->calls.end(),
                               [](const CallEvent& c) { return c.start_ms == 59428; });
  ASSERT_NE(long_run, t->calls.end());
  EXPECT_EQ(long_run->intent, "test");
}

}  // namespace
}  // namespace sandgate::replay
