// The commands that read traces and input files, through the real binary, as a user meets
// them: a FIFO given as input, a directory import with one bad file, --out for several inputs,
// and every `Example:` line of `trace --help` and `plan --help` and the README's trace and plan
// examples, run against this repository's traces/. Nothing here needs root or a cgroup: these
// commands read files and compute.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "core/fd.h"
#include "core/json.h"
#include "core/process.h"
#include "core/test_temp_dir.h"
#include "tests/support/privileged.h"

namespace sandgate::testing {
namespace {

using ::testing::HasSubstr;

// Generous: each command here takes well under a second; a command that hangs is what the FIFO
// test looks for, and it must not hang the suite.
constexpr auto kTimeout = std::chrono::seconds(60);

// A refusal takes well under a second; a command that blocks on a FIFO is cut off after this,
// 20x that, so that nine blocked commands cost minutes, not the suite's patience.
constexpr auto kFifoTimeout = std::chrono::seconds(20);

CommandResult sandgate(std::vector<std::string> args, Duration timeout = kTimeout) {
  args.insert(args.begin(), SANDGATE_BINARY);
  auto r = run_command(args, timeout, 1 << 20);
  EXPECT_TRUE(r.ok()) << r.error().message();
  return r.ok() ? *r : CommandResult{};
}

std::string example_run() { return source_dir() + "/replay/testdata/agentcgroup-example.jsonl"; }

void copy_file(const std::string& from, const std::string& to) {
  auto text = read_file(from);
  ASSERT_TRUE(text.ok()) << text.error().message();
  ASSERT_TRUE(write_file(to, *text, O_WRONLY | O_CREAT | O_TRUNC).ok());
}

// A FIFO given as input blocked forever (an open for reading waits for a writer): every command
// that reads traces or input files refuses it at once, saying what it is.
TEST(TraceCli, AFifoIsRefusedByEveryCommandThatReadsInputs) {
  TempDir dir;
  std::string fifo = dir / "input.trace";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string traces = source_dir() + "/traces";
  std::string burst = traces + "/burst.trace";
  const std::vector<std::vector<std::string>> commands = {
      {"trace", "validate", fifo},
      {"trace", "validate", dir.path()},  // the FIFO inside a directory of traces
      {"trace", "stats", fifo},
      {"trace", "import", "--from", "agentcgroup", fifo, "--out", dir / "out"},
      {"trace", "import", "--from", "agentcgroup", "--policy", fifo, example_run(), "--out",
       dir / "out2"},
      {"plan", "--traces", fifo, "--host-memory", "64GiB", "--host-cpus", "16"},
      {"plan", "--traces", traces, "--policy", fifo, "--host-memory", "64GiB", "--host-cpus", "16"},
      {"replay", "--policy", "none", fifo},
      {"replay", "--policy", fifo, burst},
  };
  for (const auto& args : commands) {
    std::string line;
    for (const auto& a : args) line += a + " ";
    auto r = sandgate(args, kFifoTimeout);
    EXPECT_FALSE(r.timed_out) << line << "blocked";
    EXPECT_EQ(r.status.shell_code(), 2) << line << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr(fifo + ": is a FIFO, not a regular file")) << line;
  }
}

// One bad file among good ones: the good ones are imported, the bad one is named (file, line,
// field) and the exit status says that something failed.
TEST(TraceCli, ImportOfADirectoryImportsTheGoodFilesAndNamesEachBadOne) {
  TempDir dir;
  ASSERT_EQ(::mkdir((dir / "in").c_str(), 0755), 0);
  copy_file(example_run(), dir / "in/a.jsonl");
  copy_file(example_run(), dir / "in/c.jsonl");
  {
    std::ofstream bad(dir / "in/b.jsonl");
    bad << R"({"t_ms":0,"mem_bytes":1,"cpu_pct":1,"cpu_pct_interval_est":null,"mem_pct":0})"
        << "\n"
        << R"({"tool_call":{"name":"Bash","cmd":"ls","start_ms":1,"end_ms":3,"sidechain":"yes"}})"
        << "\n";
  }
  auto r = sandgate({"trace", "import", "--from", "agentcgroup", dir / "in", "--out", dir / "out"});
  EXPECT_EQ(r.status.shell_code(), 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr(dir / "in/b.jsonl:2: field 'tool_call.sidechain'"));
  EXPECT_THAT(r.output, HasSubstr("imported 2 of 3 files; 1 failed"));
  EXPECT_EQ(::access((dir / "out/a.jsonl").c_str(), F_OK), 0) << r.output;
  EXPECT_EQ(::access((dir / "out/c.jsonl").c_str(), F_OK), 0)
      << "stopped at the bad file: " << r.output;
  EXPECT_NE(::access((dir / "out/b.jsonl").c_str(), F_OK), 0);
  auto v = sandgate({"trace", "validate", dir / "out"});
  EXPECT_EQ(v.status.shell_code(), 0) << v.output;
}

// Two inputs with --out X.jsonl made a directory named X.jsonl: a file name takes one input.
TEST(TraceCli, SeveralInputsWithAnOutFileNameAreAnError) {
  TempDir dir;
  std::string out = dir / "X.jsonl";
  auto r = sandgate(
      {"trace", "import", "--from", "agentcgroup", example_run(), example_run(), "--out", out});
  EXPECT_EQ(r.status.shell_code(), 2) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("--out " + out + ": names a file, but 2 input files need a directory"));
  EXPECT_NE(::access(out.c_str(), F_OK), 0) << "created " << out;
  auto one = sandgate({"trace", "import", "--from", "agentcgroup", example_run(), "--out", out});
  EXPECT_EQ(one.status.shell_code(), 0) << one.output;
  struct stat st;
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
}

// The examples a user copies first: each `Example:` line of the help of the commands that take
// traces, and each README line starting "$ sandgate trace" or "$ sandgate plan", run from the
// repository's root (where traces/ is), must succeed.
TEST(TraceCli, EveryTraceAndPlanExampleRuns) {
  std::vector<std::string> examples;
  for (auto cmd : {"trace", "plan"}) {
    auto help = sandgate({cmd, "--help"});
    size_t found = 0;
    std::istringstream lines(help.output);
    for (std::string line; std::getline(lines, line);) {
      auto p = line.find("Example: sandgate ");
      if (p == std::string::npos) continue;
      examples.push_back(line.substr(p + 9));
      ++found;
    }
    EXPECT_GT(found, 0u) << "no Example: line in `sandgate " << cmd << " --help`";
  }
  std::ifstream readme(source_dir() + "/README.md");
  size_t in_readme = 0;
  for (std::string line; std::getline(readme, line);) {
    if (!line.starts_with("$ sandgate trace ") && !line.starts_with("$ sandgate plan ")) continue;
    examples.push_back(line.substr(2));
    ++in_readme;
  }
  EXPECT_GT(in_readme, 0u) << "no `$ sandgate trace|plan` example in README.md";
  // The README repeats the help's plan example: each distinct command runs once (the planner's
  // 10,000 trials take seconds in the sanitised build).
  std::sort(examples.begin(), examples.end());
  examples.erase(std::unique(examples.begin(), examples.end()), examples.end());
  for (const auto& example : examples) {
    // "sandgate ARGS": this build's binary, from the repository's root.
    std::string cmd = "cd '" + source_dir() + "' && '" + SANDGATE_BINARY + "'" + example.substr(8);
    // The planner's 10,000 trials took over 60 s in the sanitised build beside stress-ng and
    // two other tests: the examples must run, at whatever speed the host allows.
    auto r = run_command({"/bin/sh", "-c", cmd}, std::chrono::seconds(600), 1 << 20);
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ(r->status.shell_code(), 0) << example << "\n" << r->output;
  }
}

// `plan` counts CPU as well as memory: per model the N each allows, the binding one, and the
// headline the smaller; --cpu-overcommit lets CPU demand pass the cores at a stated slow-down.
// The repository's traces hold tens of MiB and a few hundred millicores: on 64 GiB and one core
// CPU binds, on 1 GiB and 64 cores memory does.
// The four recordings the planner's and suggest's figures below come from, copied to
// DIR/traces: not whatever traces/ holds today (traces/cpu.trace, a CPU-bound neighbour
// experiment, came later and needs more than one core on its own).
std::string reference_traces(const TempDir& dir) {
  const std::string traces = dir / "traces";
  if (::mkdir(traces.c_str(), 0755) != 0 && errno != EEXIST) ADD_FAILURE() << "mkdir " << traces;
  for (std::string t : {"build.trace", "burst.trace", "search_edit.trace", "tests.trace"})
    copy_file(source_dir() + "/traces/" + t, traces + "/" + t);
  return traces;
}

Json plan_json(const TempDir& dir, const std::string& name, std::vector<std::string> extra) {
  std::vector<std::string> args = {"plan",     "--traces", reference_traces(dir),
                                   "--trials", "1000",     "--max-runs",
                                   "5000",     "--json",   dir / name};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = sandgate(args);
  EXPECT_EQ(r.status.shell_code(), 0) << r.output;
  // The table names the resources and the binding one.
  EXPECT_THAT(r.output, HasSubstr("binding"));
  EXPECT_THAT(r.output, HasSubstr("by mem"));
  EXPECT_THAT(r.output, HasSubstr("slow-down"));
  auto text = read_file(dir / name);
  EXPECT_TRUE(text.ok()) << r.output;
  if (!text.ok()) return Json();
  auto j = parse_json(*text, name);
  EXPECT_TRUE(j.ok());
  return j.ok() ? *j : Json();
}

TEST(PlanCli, CountsCpuNamesTheBindingResourceAndTakesAnOvercommit) {
  TempDir dir;
  Json cpu = plan_json(dir, "cpu.json", {"--host-memory", "64GiB", "--host-cpus", "1"});
  ASSERT_TRUE(cpu.is_object());
  EXPECT_EQ(cpu["schema_version"], 2);
  EXPECT_EQ(cpu["cpu_overcommit"], 1.0);
  ASSERT_EQ(cpu["fits"].size(), 5u);
  for (const auto& f : cpu["fits"]) {
    SCOPED_TRACE(f["policy"].get<std::string>());
    EXPECT_EQ(f["binding"], "cpu");
    EXPECT_EQ(f["fits"], f["fits_by_cpu_demand"]);
    EXPECT_LT(f["fits_by_cpu_demand"].get<int>(), f["fits_by_memory"].get<int>());
    EXPECT_LE(f["p_cpu_exceeded"].get<double>(), 0.01);  // no overcommit: within the cores
    EXPECT_DOUBLE_EQ(f["cpu_slowdown_mean"].get<double>(), 1.0);
  }
  // Twice the cores' worth of demand accepted: more runs, each slower, never past 2x at p95.
  Json over = plan_json(dir, "over.json",
                        {"--host-memory", "64GiB", "--host-cpus", "1", "--cpu-overcommit", "2"});
  ASSERT_TRUE(over.is_object());
  EXPECT_EQ(over["cpu_overcommit"], 2.0);
  for (size_t i = 0; i < 5; ++i) {
    const Json& f = over["fits"][i];
    SCOPED_TRACE(f["policy"].get<std::string>());
    EXPECT_GT(f["fits_by_cpu_demand"].get<int>(), cpu["fits"][i]["fits_by_cpu_demand"].get<int>());
    EXPECT_GT(f["cpu_slowdown_mean"].get<double>(), 1.0);
    EXPECT_LE(f["cpu_slowdown_p95"].get<double>(), 2.0);
    EXPECT_GE(f["cpu_slowdown_p95"].get<double>(), f["cpu_slowdown_mean"].get<double>());
    EXPECT_EQ(f["fits_by_memory"], cpu["fits"][i]["fits_by_memory"]);  // the same trials
  }
  Json mem = plan_json(dir, "mem.json", {"--host-memory", "1GiB", "--host-cpus", "64"});
  ASSERT_TRUE(mem.is_object());
  for (const auto& f : mem["fits"]) {
    SCOPED_TRACE(f["policy"].get<std::string>());
    EXPECT_EQ(f["binding"], "memory");
    EXPECT_EQ(f["fits"], f["fits_by_memory"]);
  }
}

TEST(PlanCli, ABadCpuOvercommitIsRefusedNamingTheFlag) {
  std::string traces = source_dir() + "/traces";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"150%",
       "--cpu-overcommit: expected a ratio >= 1 such as 1 or 1.5, got '150%' (write the "
       "ratio: 1.5 for 150%)"},
      {"0.5", "--cpu-overcommit: expected a ratio >= 1 such as 1 or 1.5, got '0.5' (below 1"},
      {"lots", "--cpu-overcommit: expected a ratio >= 1 such as 1 or 1.5, got 'lots'"},
  };
  for (const auto& [value, message] : cases) {
    auto r = sandgate({"plan", "--traces", traces, "--host-memory", "64GiB", "--host-cpus", "16",
                       "--cpu-overcommit", value});
    EXPECT_EQ(r.status.shell_code(), 2) << value << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr(message)) << value;
  }
}

// `policy suggest` as a user meets it: the help says what a grant is made of, a run on this
// repository's recorded traces writes a policy that `policy --check` loads and an evidence file
// with every intent, and bad input is one line naming what is wrong.
TEST(PolicySuggestCli, HelpTeachesTheRule) {
  auto help = sandgate({"policy", "suggest", "--help"});
  EXPECT_EQ(help.status.shell_code(), 0) << help.output;
  for (const char* s : {"--quantile", "--headroom", "--split", "--min-calls", "--evidence",
                        "above their\nrun's baseline", "rounded up to 16MiB", "0.1 core",
                        "nearest\nrank", "base policy's grant", "sandgate replay --split"})
    EXPECT_THAT(help.output, HasSubstr(s));
  auto top = sandgate({"policy", "--help"});
  EXPECT_THAT(top.output, HasSubstr("suggest"));
  auto none = sandgate({"policy"});
  EXPECT_EQ(none.status.shell_code(), 2);
  EXPECT_THAT(none.output, HasSubstr("--print-default, --check FILE or suggest"));
}

TEST(PolicySuggestCli, WritesAPolicyThatLoadsAndItsEvidence) {
  TempDir dir;
  const std::string traces = reference_traces(dir);
  auto r = sandgate({"policy", "suggest", "--traces", traces, "--min-calls", "5", "--headroom",
                     "25%", "-o", dir / "p.json"});
  ASSERT_EQ(r.status.shell_code(), 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("policy suggest: 4 of 4 trace(s) (--split all), 29 calls"));
  EXPECT_THAT(r.output, HasSubstr("4 calls, fewer than 5 (--min-calls)"));  // compile, edit
  EXPECT_THAT(r.output, HasSubstr("wrote " + (dir / "p.json")));
  // The round trip: what was written is a policy every command loads.
  auto check = sandgate({"policy", "--check", dir / "p.json"});
  ASSERT_EQ(check.status.shell_code(), 0) << check.output;
  auto policy = parse_json(check.output, "policy --check");
  ASSERT_TRUE(policy.ok()) << check.output;
  EXPECT_EQ((*policy)["mode"], "per_call");
  EXPECT_THAT((*policy)["name"].get<std::string>(), HasSubstr("q0.99 +25% headroom, 4 traces"));
  // The evidence beside it: every intent, its calls and quantiles, the grant and why.
  auto evidence = read_json_file(dir / "p.evidence.json");
  ASSERT_TRUE(evidence.ok()) << evidence.error().message();
  EXPECT_EQ((*evidence)["calls"], 29);
  EXPECT_EQ((*evidence)["headroom"], 0.25);
  EXPECT_EQ((*evidence)["traces"].size(), 4u);
  ASSERT_EQ((*evidence)["intents"].size(), 7u);
  for (const auto& i : (*evidence)["intents"]) {
    for (const char* k : {"p50_bytes", "p90_bytes", "p99_bytes", "max_bytes", "why"})
      EXPECT_TRUE(i["memory"].contains(k)) << i.dump();
    EXPECT_EQ(i["grant"], (*policy)["intents"][i["intent"].get<std::string>()]) << i.dump();
    if (i["intent"] == "compile") {
      EXPECT_FALSE(i["memory"]["sized"].get<bool>());
    }
    if (i["intent"] == "search" || i["intent"] == "test") {
      EXPECT_TRUE(i["memory"]["sized"].get<bool>()) << i.dump();
    }
  }
  // --evidence names it elsewhere; --split takes every other trace sorted by path.
  auto half = sandgate({"policy", "suggest", "--traces", traces, "--split", "odd", "--min-calls",
                        "1", "-o", dir / "odd.json", "--evidence", dir / "odd-why.json"});
  ASSERT_EQ(half.status.shell_code(), 0) << half.output;
  EXPECT_THAT(half.output, HasSubstr("2 of 4 trace(s) (--split odd)"));
  auto odd = read_json_file(dir / "odd-why.json");
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ((*odd)["traces"][0], traces + "/burst.trace");
  EXPECT_EQ((*odd)["traces"][1], traces + "/tests.trace");
}

TEST(PolicySuggestCli, BadInputIsOneLineNamingIt) {
  TempDir dir;
  const std::string traces = source_dir() + "/traces";
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"policy", "suggest", "-o", dir / "p.json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return sandgate(args);
  };
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  ASSERT_EQ(::mkdir((dir / "empty").c_str(), 0700), 0);
  {
    std::ofstream bad(dir / "bad.jsonl");
    bad << R"({"type":"header","schema":"sandgate-trace","version":1,"source":"x","host":{},)"
        << R"("interval_ms":1000,"units":{"time":"ms","memory":"bytes","cpu":"millicores","io":"bytes"}})"
        << "\n"
        << R"({"type":"sample","t_ms":0,"mem_bytes":-5,"cpu_millicores":0,"pids":0,"io_bytes":0})"
        << "\n";
  }
  const std::vector<Case> cases = {
      {{"--traces", dir / "missing"}, dir / "missing"},
      {{"--traces", dir / "empty"}, "no *.jsonl or *.trace files in the directory"},
      {{"--traces", dir / "bad.jsonl"}, "bad.jsonl:2: field 'mem_bytes'"},
      {{"--traces", traces + "/burst.trace", "--split", "odd"},
       "--split odd: no traces in that part of 1 file(s)"},
      {{"--traces", traces, "--split", "half"}, "expected all, even or odd, got 'half'"},
      {{"--traces", traces, "--quantile", "99"}, "--quantile: expected a quantile in (0, 1]"},
      {{"--traces", traces, "--quantile", "0"}, "got '0'"},
      {{"--traces", traces, "--headroom", "10 %"}, "--headroom: expected headroom"},
      {{"--traces", traces, "--headroom", "-0.1"}, "like 10% or 0.1, got '-0.1'"},
      {{"--traces", traces, "--policy", dir / "nope.json"}, "nope.json"},
  };
  for (const auto& c : cases) {
    auto r = run(c.args);
    EXPECT_EQ(r.status.shell_code(), 2) << c.says << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.says));
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  EXPECT_NE(::access((dir / "p.json").c_str(), F_OK), 0) << "nothing written on an error";
}

}  // namespace
}  // namespace sandgate::testing
