// Record and replay end to end, through the real binaries on this host's cgroups:
// `sandgate record` with calls made through its socket by `sandgate exec --socket`, and
// `sandgate replay` of a short real trace (traces/burst.trace) through the namespaces provider
// with the controller, with its fidelity figures.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <iostream>

#include "core/json.h"
#include "core/process.h"
#include "providers/microvm.h"
#include "replay/trace.h"
#include "reports/from_qualify.h"
#include "tests/support/cgroup_dirs.h"
#include "tests/support/cli_fixture.h"

namespace sandgate::testing {
namespace {

// The CLI fixture: private state and work directories and a cgroup root of the test's own,
// passed to the real binary through the environment, and checked to be left empty.
using ReplayTest = CliTest;

TEST_F(ReplayTest, RecordingThroughTheSocketGivesAValidTrace) {
  SANDGATE_REQUIRE_ROOT();
  std::string script = tmp_ + "/drive.sh";
  {
    std::ofstream f(script);
    f << "#!/bin/sh\nset -e\n"
         "\"$SANDGATE_BIN\" exec --socket \"$SANDGATE_SOCKET\" --intent search -- sh -c 'echo "
         "one'\n"
         "sleep 0.2\n"
         // A real burst: a shell string of 100 MB held for half a second.
         "\"$SANDGATE_BIN\" exec --socket \"$SANDGATE_SOCKET\" --intent compile -- "
         "sh -c 'x=$(head -c 100000000 /dev/zero | tr \"\\0\" a); sleep 0.5; echo ${#x}'\n"
         "sleep 0.2\n"
         // No --intent: the policy's inference names it (grep -> search).
         "\"$SANDGATE_BIN\" exec --socket \"$SANDGATE_SOCKET\" -- grep -c root /etc/passwd\n";
  }
  ::chmod(script.c_str(), 0755);
  std::string out = tmp_ + "/t.trace";
  auto r = sandgate({"record", "--out", out, "--interval", "20ms", "--", script});
  ASSERT_EQ(r.status.shell_code(), 0) << r.output;
  EXPECT_NE(r.output.find("100000000"), std::string::npos)
      << "the call's output reaches the driver";

  auto t = replay::read_trace(out);
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_EQ(t->header.source, "sandgate record");
  EXPECT_EQ(t->header.interval_ms, 20);
  ASSERT_EQ(t->calls.size(), 3u);
  EXPECT_EQ(t->calls[0].intent, "search");
  EXPECT_EQ(t->calls[0].command, "sh -c 'echo one'");
  EXPECT_EQ(t->calls[1].intent, "compile");
  EXPECT_EQ(t->calls[2].intent, "search");
  EXPECT_EQ(t->calls[2].command, "grep -c root /etc/passwd");
  EXPECT_GE(t->calls[1].end_ms - t->calls[1].start_ms, 500);
  EXPECT_GE(t->calls[1].start_ms, t->calls[0].end_ms + 200);  // the driver's sleep

  size_t in_burst = 0;
  uint64_t burst_peak = 0, outside_peak = 0;
  for (const auto& s : t->samples) {
    if (s.call == "c2") {
      ++in_burst;
      burst_peak = std::max(burst_peak, s.mem_bytes);
      EXPECT_GE(s.t_ms, t->calls[1].start_ms);
      EXPECT_LE(s.t_ms, t->calls[1].end_ms);
    } else if (!s.call) {
      outside_peak = std::max(outside_peak, s.mem_bytes);
    }
  }
  EXPECT_GE(in_burst, 20u);  // >= 0.5 s at 20 ms
  EXPECT_GE(burst_peak, 100'000'000u) << "the burst shows in the samples that carry its call id";
  EXPECT_LT(outside_peak, burst_peak / 4) << "and not between calls";
}

// record --base-path: the recorded run's calls see the narrowed read-only base ('minimal'
// leaves /usr/share/doc out; the host has it), and programs in it still run.
TEST_F(ReplayTest, RecordRunsItsCallsOnTheNarrowedBase) {
  SANDGATE_REQUIRE_ROOT();
  ASSERT_EQ(::access("/usr/share/doc", F_OK), 0) << "the control needs /usr/share/doc on the host";
  std::string script = tmp_ + "/drive.sh";
  {
    std::ofstream f(script);
    f << "#!/bin/sh\nset -e\n"
         "\"$SANDGATE_BIN\" exec --socket \"$SANDGATE_SOCKET\" --intent search -- sh -c "
         "'test -e /usr/share/doc && echo doc-visible || echo doc-hidden; echo hi | tr a-z A-Z'\n";
  }
  ::chmod(script.c_str(), 0755);
  std::string out = tmp_ + "/base.trace";
  auto r = sandgate({"record", "--out", out, "--base-path", "minimal", "--", script});
  ASSERT_EQ(r.status.shell_code(), 0) << r.output;
  EXPECT_NE(r.output.find("doc-hidden\nHI\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("doc-visible"), std::string::npos) << r.output;
  auto t = replay::read_trace(out);
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_EQ(t->calls.size(), 1u);
}

// What the kernel saw each recorded call do, in the trace: the first call execs the probe
// twice (a sensitive open, then a connect on the run's own loopback), the second only echoes,
// the third only connects. Each event is found on its own call and on no other.
TEST_F(ReplayTest, RecordingKeepsWhatTheKernelSawEachCallDo) {
  SANDGATE_REQUIRE_ROOT();
  const std::string kTry = "/opt/sandgate-try";
  std::string script = tmp_ + "/drive.sh";
  {
    std::ofstream f(script);
    f << "#!/bin/sh\nset -e\n"
         "\"$SANDGATE_BIN\" exec --socket \"$SANDGATE_SOCKET\" --intent test -- sh -c '"
      << kTry << " read-file /proc/self/environ; " << kTry
      << " connect 127.0.0.1 9'\n"
         "\"$SANDGATE_BIN\" exec --socket \"$SANDGATE_SOCKET\" --intent test -- echo quiet\n"
         "\"$SANDGATE_BIN\" exec --socket \"$SANDGATE_SOCKET\" --intent test -- "
      << kTry << " connect 127.0.0.1 9\n";
  }
  ::chmod(script.c_str(), 0755);
  std::string out = tmp_ + "/observed.trace";
  auto r = sandgate({"record", "--out", out, "--interval", "50ms", "--ro-bind",
                     std::string(SANDGATE_TRY_BINARY) + ":" + kTry, "--", script});
  ASSERT_EQ(r.status.shell_code(), 0) << r.output;
  auto t = replay::read_trace(out);
  ASSERT_TRUE(t.ok()) << t.error().message();
  ASSERT_TRUE(t->header.activity.has_value()) << "the header must say whether calls were traced";
  SANDGATE_REQUIRE(t->header.activity->traced,
                   "the eBPF activity tracer cannot load here: " + t->header.activity->why);
  ASSERT_EQ(t->calls.size(), 3u);
  for (const auto& c : t->calls)
    ASSERT_TRUE(c.observed && c.observed->activity) << "call " << c.id << " carries no account";
  const TracedActivity& c1 = *t->calls[0].observed->activity;
  const TracedActivity& c2 = *t->calls[1].observed->activity;
  const TracedActivity& c3 = *t->calls[2].observed->activity;

  // c1: sh, then the probe twice; its sensitive open and its connect.
  ASSERT_EQ(c1.execs.size(), 3u) << to_json(c1).dump(2);
  EXPECT_EQ(c1.execs[1].path, kTry);
  EXPECT_EQ(c1.execs[1].argv, (std::vector<std::string>{kTry, "read-file", "/proc/self/environ"}));
  ASSERT_EQ(c1.sensitive_opens.size(), 1u) << to_json(c1).dump(2);
  EXPECT_EQ(c1.sensitive_opens[0].path, "/proc/self/environ");
  EXPECT_EQ(c1.sensitive_opens[0].err, 0);
  ASSERT_EQ(c1.connects.size(), 1u) << to_json(c1).dump(2);
  EXPECT_EQ(c1.connects[0].address, "127.0.0.1");
  EXPECT_EQ(c1.connects[0].port, 9);
  EXPECT_EQ(c1.connects[0].protocol, "tcp");
  // Nothing listens on port 9 of the run's own loopback (or the jail has none up): the kernel
  // refused it, and the verdict says the connect did not get through.
  EXPECT_NE(c1.connects[0].err, 0);

  // c2: one exec, nothing else.
  ASSERT_EQ(c2.execs.size(), 1u) << to_json(c2).dump(2);
  EXPECT_TRUE(c2.connects.empty()) << to_json(c2).dump(2);
  EXPECT_TRUE(c2.sensitive_opens.empty()) << to_json(c2).dump(2);

  // c3: the probe's connect, and no open.
  ASSERT_EQ(c3.execs.size(), 1u) << to_json(c3).dump(2);
  EXPECT_EQ(c3.execs[0].path, kTry);
  ASSERT_EQ(c3.connects.size(), 1u) << to_json(c3).dump(2);
  EXPECT_EQ(c3.connects[0].port, 9);
  EXPECT_TRUE(c3.sensitive_opens.empty()) << to_json(c3).dump(2);

  // `trace stats` sums it up.
  auto stats = sandgate({"trace", "stats", "--json", out});
  ASSERT_EQ(stats.status.shell_code(), 0) << stats.output;
  auto j = parse_json(stats.output.substr(stats.output.find('{'),
                                          stats.output.rfind('}') - stats.output.find('{') + 1),
                      "trace stats --json");
  ASSERT_TRUE(j.ok()) << stats.output;
  const Json& o = (*j)["traces"][0]["observed"];
  EXPECT_EQ(o["traced_calls"], 3);
  EXPECT_EQ(o["execs"], 5);
  EXPECT_EQ(o["connects"], 2);
  EXPECT_EQ(o["sensitive_opens"], 1);
  auto text = sandgate({"trace", "stats", out});
  EXPECT_NE(text.output.find("observed (3 of 3 calls traced): 5 execs"), std::string::npos)
      << text.output;

  // The negative twin: --no-trace records no account, and the header says why.
  std::string plain = tmp_ + "/plain.trace";
  auto r2 = sandgate({"record", "--no-trace", "--out", plain, "--", "sh", "-c",
                      "\"$SANDGATE_BIN\" exec --socket \"$SANDGATE_SOCKET\" -- echo x"});
  ASSERT_EQ(r2.status.shell_code(), 0) << r2.output;
  auto t2 = replay::read_trace(plain);
  ASSERT_TRUE(t2.ok()) << t2.error().message();
  ASSERT_TRUE(t2->header.activity.has_value());
  EXPECT_FALSE(t2->header.activity->traced);
  EXPECT_NE(t2->header.activity->why.find("--no-trace"), std::string::npos);
  ASSERT_EQ(t2->calls.size(), 1u);
  EXPECT_FALSE(t2->calls[0].observed.has_value());
}

TEST_F(ReplayTest, ReplayOfAShortRealTraceIsFaithfulAndLeavesNothing) {
  SANDGATE_REQUIRE_ROOT();
  std::string trace = source_dir() + "/traces/burst.trace";
  SANDGATE_REQUIRE(::access(trace.c_str(), R_OK) == 0,
                   "traces/burst.trace not found (SANDGATE_SOURCE_DIR)");
  auto recorded = replay::read_trace(trace);
  ASSERT_TRUE(recorded.ok()) << recorded.error().message();

  // The 5% memory target holds on a quiet host. On a loaded one (this project's 2-core
  // machines, shared by several builds) sandgate-load itself can be starved of CPU or of page
  // faults while it touches its memory; its report says so (control_wait_ms: how late its
  // control loop ran; behind_touch_ms: time spent touching memory already due). Such an
  // attempt is repeated, at most three times in all; a miss without that evidence, or three
  // misses, fails.
  std::string json = tmp_ + "/replay.json";
  Json j;
  std::string misses;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    auto r = sandgate({"replay", "--policy", "none", "--policy", "default", "--json", json, trace});
    ASSERT_EQ(r.status.shell_code(), 0) << r.output;
    std::cerr << r.output;  // the table, with the measured fidelity, in the test log
    auto parsed = read_json_file(json);
    ASSERT_TRUE(parsed.ok()) << parsed.error().message();
    j = std::move(parsed).value();
    ASSERT_EQ(j["policies"].size(), 2u);
    bool faithful = true, starved = false;
    for (const auto& p : j["policies"]) {
      SCOPED_TRACE(p["policy"].get<std::string>());
      EXPECT_EQ(p["calls"]["total"], recorded->calls.size());
      EXPECT_EQ(p["calls"]["completed"], recorded->calls.size())
          << "every call completes under "
             "no limits and the default grants";
      EXPECT_EQ(p["run_errors"], 0);
      EXPECT_GT(p["used_gib_s"].get<double>(), 0);
      const Json& f = p["fidelity"];
      // The python call's 300 MB burst is the one call above the floor.
      EXPECT_GE(f["calls_scored"].get<int>(), 1);
      double host = f["memory_peak_rel_error_host"]["max"].get<double>();
      double self = f["memory_peak_rel_error_self"]["max"].get<double>();
      std::cerr << p["policy"] << ": memory peak error (host, max) " << host << ", self " << self
                << "; start error max " << f["start_abs_error_ms"]["max"] << " ms, end error max "
                << f["end_abs_error_ms"]["max"] << " ms\n";
      // Timing is reported for every call; its target (50 ms) is reported, not asserted: a
      // replayed call pays the controller's per-call cost on top of the recorded one.
      EXPECT_EQ(f["start_abs_error_ms"]["n"], recorded->calls.size());
      EXPECT_LT(f["start_abs_error_ms"]["max"].get<double>(), 1000);
      if (host <= 0.05 && self <= 0.05) continue;
      faithful = false;
      misses += "attempt " + std::to_string(attempt) + " " + p["policy"].get<std::string>() +
                ": host " + std::to_string(host) + ", self " + std::to_string(self) + "; ";
      for (const auto& c : j["runs"][p["policy"].get<std::string>()][0]["calls"])
        if (c["achieved"].is_object() && c["achieved"].value("control_wait_ms", 0.0) +
                                                 c["achieved"].value("behind_touch_ms", 0.0) >
                                             100)
          starved = true;
    }
    if (faithful) break;
    ASSERT_TRUE(starved) << "memory peak outside 5% with the generator not starved: " << misses;
    ASSERT_LT(attempt, 3) << "memory peak outside 5% in three attempts on a loaded host: "
                          << misses;
  }
  // Per-call grants reserve something; none reserves nothing.
  EXPECT_TRUE(j["policies"][0]["reserved_gib_s"].is_null());
  EXPECT_GT(j["policies"][1]["reserved_gib_s"].get<double>(), 0);
  // The per-call records carry the outcome and the generator's report.
  const Json& calls = j["runs"]["default"][0]["calls"];
  ASSERT_EQ(calls.size(), recorded->calls.size());
  EXPECT_EQ(calls[2]["intent"], "test");
  EXPECT_EQ(calls[2]["outcome"]["intent"]["name"], "test");
  EXPECT_TRUE(calls[2]["achieved"].is_object());
}

// The same trace replayed in a microVM (issue 14): the segments and the held level are put into
// the guest's workspace, the hold lives in the guest's /main, each call's grant and figures are
// the guest's. Checked: every call completes, none is lost, and the burst's peak as the guest's
// call cgroup saw it agrees with what sandgate-load made (a host-side figure, QEMU's memory,
// would not). How close both come to the trace is printed, not held: under TCG on a busy host
// the guest cannot keep the trace's pace (alone 0.1-0.3% off; beside the suite once 77%).
TEST_F(ReplayTest, ReplaysInAMicrovmWithTheGuestsFigures) {
  SANDGATE_REQUIRE_ROOT();
  auto vm = providers::microvm_host(options_.paths);
  SANDGATE_REQUIRE(vm.ready.ok(), "microvm provider: " +
                                      (vm.ready.ok() ? std::string() : vm.ready.error().message()));
  std::string trace = source_dir() + "/traces/burst.trace";
  SANDGATE_REQUIRE(::access(trace.c_str(), R_OK) == 0,
                   "traces/burst.trace not found (SANDGATE_SOURCE_DIR)");
  auto recorded = replay::read_trace(trace);
  ASSERT_TRUE(recorded.ok()) << recorded.error().message();
  std::string json = tmp_ + "/replay.json";
  auto r =
      sandgate({"replay", "--provider", "microvm", "--policy", "default", "--json", json, trace});
  ASSERT_EQ(r.status.shell_code(), 0) << r.output;
  std::cerr << r.output;
  auto parsed = read_json_file(json);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  const Json& p = (*parsed)["policies"][0];
  EXPECT_EQ(p["calls"]["total"], recorded->calls.size());
  EXPECT_EQ(p["calls"]["completed"], recorded->calls.size()) << r.output;
  EXPECT_EQ(p["run_errors"], 0) << r.output;
  const Json& f = p["fidelity"];
  ASSERT_GE(f["calls_scored"].get<int>(), 1) << "the 300 MB burst is scored";
  double host = f["memory_peak_rel_error_host"]["max"].get<double>();
  double self = f["memory_peak_rel_error_self"]["max"].get<double>();
  std::cerr << "[ microvm  ] memory peak error (the guest's cgroup, max) " << host << ", self "
            << self << "; end error p95 " << f["end_abs_error_ms"]["p95"] << " ms\n";
  // The guest's figure is its call cgroup's peak, so it tracks what sandgate-load made.
  EXPECT_LT(std::abs(host - self), 0.05) << "the guest's cgroup and sandgate-load disagree";
  const Json& calls = (*parsed)["runs"]["default"][0]["calls"];
  ASSERT_EQ(calls.size(), recorded->calls.size());
  for (const auto& c : calls) {
    EXPECT_TRUE(c["achieved"].is_object()) << c.dump();
    EXPECT_EQ(c["outcome"]["termination"], "exited") << c.dump();
  }
}

// The neighbour score's interleaved trials, for real: two policies and the victim alone, two
// trials, under an enforced budget cgroup. It checks the structure and that the figures exist
// and agree with each other, never which policy wins or any time: two trials are below the
// five the ordering rule needs, so no order may be claimed whatever the machine did.
TEST_F(ReplayTest, InterleavedTrialsUnderABudgetGiveConsistentFigures) {
  SANDGATE_REQUIRE_ROOT();
  std::string trace = source_dir() + "/traces/burst.trace";
  SANDGATE_REQUIRE(::access(trace.c_str(), R_OK) == 0,
                   "traces/burst.trace not found (SANDGATE_SOURCE_DIR)");
  auto recorded = replay::read_trace(trace);
  ASSERT_TRUE(recorded.ok()) << recorded.error().message();
  std::string json = tmp_ + "/trials.json";
  auto r = sandgate({"replay", "--policy", "none", "--policy", "default", "--victim", "--trials",
                     "2", "--host-budget", "2GiB", "--enforce-budget", "--time-scale", "2",
                     "--json", json, trace});
  ASSERT_EQ(r.status.shell_code(), 0) << r.output;
  std::cerr << r.output;
  EXPECT_NE(r.output.find("Over 2 interleaved trials"), std::string::npos) << r.output;
  auto parsed = read_json_file(json);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  const Json& j = *parsed;
  EXPECT_EQ(j["schema_version"], 2);
  EXPECT_EQ(j["enforce_budget"], true);
  const uint64_t budget = 2ull << 30;
  EXPECT_EQ(j["host_budget_bytes"], budget);

  // Interleaved: each trial runs both policies and the solo victim once, in a rotated order.
  ASSERT_EQ(j["trials"].size(), 2u);
  EXPECT_EQ(j["trials"][0]["order"], Json({"none", "default", "solo"}));
  EXPECT_EQ(j["trials"][1]["order"], Json({"default", "solo", "none"}));
  for (const auto& t : j["trials"]) {
    SCOPED_TRACE("trial " + t["trial"].dump());
    ASSERT_TRUE(t["victim_solo"].is_object());
    double solo_p99 = t["victim_solo"]["p99_us"].get<double>();
    EXPECT_GT(solo_p99, 0);
    ASSERT_EQ(t["policies"].size(), 2u);
    for (const auto& p : t["policies"]) {
      SCOPED_TRACE(p["policy"].get<std::string>());
      EXPECT_EQ(p["calls"]["total"], recorded->calls.size());
      // Survival is completed over started, and what did not complete is lost work.
      size_t started = p["started"].get<size_t>();
      size_t completed = p["calls"]["completed"].get<size_t>();
      EXPECT_LE(completed, started);
      ASSERT_GT(started, 0u);
      EXPECT_DOUBLE_EQ(p["survival"].get<double>(),
                       static_cast<double>(completed) / static_cast<double>(started));
      if (completed == started) {
        EXPECT_DOUBLE_EQ(p["work_lost_call_s"].get<double>(), 0);
      }
      // The budget cgroup was there, and its peak stayed within its limit.
      ASSERT_TRUE(p["budget_oom_kills"].is_number());
      ASSERT_TRUE(p["budget_peak_bytes"].is_number());
      EXPECT_GT(p["budget_peak_bytes"].get<uint64_t>(), 0u);
      EXPECT_LE(p["budget_peak_bytes"].get<uint64_t>(), budget);
      // The victim: latency, its allocations, its cgroup's pressure where the layout has it.
      const Json& v = p["victim"];
      ASSERT_TRUE(v.is_object());
      EXPECT_GT(v["count"].get<uint64_t>(), 0u);
      EXPECT_LE(v["p50_us"].get<double>(), v["p99_us"].get<double>());
      EXPECT_EQ(v["alloc_count"], v["count"]) << "one timed allocation per unit";
      EXPECT_LE(v["alloc_p50_us"].get<double>(), v["alloc_p95_us"].get<double>());
      if (v["psi_ms"]["cpu_some"].is_number() && v["psi_ms"]["cpu_full"].is_number()) {
        // some >= full, to the kernel's accounting: for a cgroup whose every task waits, the
        // two totals are the same stall, summed from per-CPU times taken at slightly different
        // moments; full was seen 1 us above some once (12.367 vs 12.366 ms). 10 us of slack.
        EXPECT_GE(v["psi_ms"]["cpu_some"].get<double>() + 0.01,
                  v["psi_ms"]["cpu_full"].get<double>());
      }
      if (v["runq_delay_ms"].is_number()) {
        EXPECT_GE(v["runq_delay_ms"].get<double>(), 0);
      }
      // Inflation is this trial's p99 over this trial's solo p99.
      EXPECT_NEAR(p["victim_p99_inflation"].get<double>(), v["p99_us"].get<double>() / solo_p99,
                  1e-9);
    }
  }
  // The summary: each figure's median over the two trials lies within its interval, and no
  // order is claimed from two trials.
  bool saw_p99 = false;
  for (const auto& m : j["summary"]) {
    SCOPED_TRACE(m["metric"].get<std::string>());
    EXPECT_EQ(m["ordering"], "no significant difference (fewer than 5 trials)");
    EXPECT_TRUE(m["significant"].empty());
    for (const auto& [policy, b] : m["by_policy"].items()) {
      EXPECT_EQ(b["n"], 2);
      EXPECT_LE(b["ci_low"].get<double>(), b["median"].get<double>());
      EXPECT_GE(b["ci_high"].get<double>(), b["median"].get<double>());
    }
    if (m["metric"] == "victim_p99") {
      saw_p99 = true;
      double a = j["trials"][0]["policies"][0]["victim"]["p99_us"].get<double>();
      double b = j["trials"][1]["policies"][0]["victim"]["p99_us"].get<double>();
      EXPECT_DOUBLE_EQ(m["by_policy"]["none"]["median"].get<double>(), (a + b) / 2);
    }
  }
  EXPECT_TRUE(saw_p99);
  // The budget cgroup and everything under it are gone (the fixture checks its root is empty).
}

// A budget too small for any run to start: the kernel kills each run's supervisor while it
// starts, or its first process (the victim's, the agent's hold) as the run starts it: which,
// depends on whether the supervisor's placement in the budget (a grace period) ends before or
// after it has assembled its jail, whose allocations are charged to sandgate until it is
// placed. Both the victim and the agent are lost, scored with the reason, and the invocation
// goes on to its table and JSON (it used to end at the victim: "victim under none"). The solo
// victim, under no budget, still runs.
TEST_F(ReplayTest, RunsTheBudgetKillsAtTheirStartAreScoredNotFatal) {
  SANDGATE_REQUIRE_ROOT();
  std::string trace = source_dir() + "/traces/burst.trace";
  SANDGATE_REQUIRE(::access(trace.c_str(), R_OK) == 0,
                   "traces/burst.trace not found (SANDGATE_SOURCE_DIR)");
  std::string json = tmp_ + "/killed.json";
  // 1 MiB: below what any run needs for its jail or its first process, sanitizer or not.
  auto r = sandgate({"replay", "--policy", "none", "--victim", "--trials", "1", "--host-budget",
                     "1MiB", "--enforce-budget", "--json", json, trace});
  ASSERT_EQ(r.status.shell_code(), 0) << r.output;
  // Killed as it started (the supervisor), or at its first process (the supervisor, which
  // the kernel took with it, went away during that call).
  auto lost_at_start = [](const std::string& why) {
    return why.find("could not start") != std::string::npos ||
           why.find("the run's supervisor went away during a call") != std::string::npos;
  };
  EXPECT_NE(r.output.find("the victim died: its run "), std::string::npos) << r.output;
  auto parsed = read_json_file(json);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  const Json& p = (*parsed)["policies"][0];
  EXPECT_TRUE(p["victim"].is_null());
  ASSERT_TRUE(p["victim_lost"].is_string()) << p.dump();
  EXPECT_TRUE(lost_at_start(p["victim_lost"].get<std::string>())) << p["victim_lost"];
  EXPECT_EQ(p["runs"], 1);
  EXPECT_EQ(p["agents_not_started"], 1);
  EXPECT_EQ(p["started"], 0);
  auto recorded = replay::read_trace(trace);
  ASSERT_TRUE(recorded.ok()) << recorded.error().message();
  EXPECT_EQ(p["calls"]["never_made"], recorded->calls.size()) << "the lost agent made none";
  const Json& run = (*parsed)["runs"]["none"][0];
  // The agent's run: killed as it started, or as it started its hold process.
  const std::string agent_error = run["error"].get<std::string>();
  EXPECT_TRUE(agent_error.find("the run could not start") != std::string::npos ||
              agent_error.find("start the run's hold process") != std::string::npos)
      << run.dump();
  EXPECT_TRUE((*parsed)["victim_solo"].is_object()) << "the solo victim ran, under no budget";
  // The budget cgroup and the runs' cgroups are gone (the fixture checks its root is empty).
}

// `replay --report DIR`: the report model with the replay's section, read back strictly, and
// the HTML with the run's burst timeline. One policy, no victim: a few seconds.
TEST_F(ReplayTest, ReportHasTheReplaySectionAndItsTimeline) {
  SANDGATE_REQUIRE_ROOT();
  std::string trace = source_dir() + "/traces/burst.trace";
  SANDGATE_REQUIRE(::access(trace.c_str(), R_OK) == 0,
                   "traces/burst.trace not found (SANDGATE_SOURCE_DIR)");
  auto recorded = replay::read_trace(trace);
  ASSERT_TRUE(recorded.ok()) << recorded.error().message();
  std::string dir = tmp_ + "/report";
  auto r = sandgate({"replay", "--policy", "default", "--report", dir, trace});
  ASSERT_EQ(r.status.shell_code(), 0) << r.output;
  auto report = reports::load_report(dir + "/report.json");
  ASSERT_TRUE(report.ok()) << report.error().message();
  EXPECT_EQ(report->job, "replay");
  EXPECT_TRUE(report->host.contains("sections")) << "the doctor's findings";
  ASSERT_TRUE(report->replay);
  EXPECT_FALSE(report->plan);
  ASSERT_EQ(report->replay->policies.size(), 1u);
  const auto& policy = report->replay->policies[0];
  EXPECT_EQ(policy.label, "default");
  EXPECT_EQ(policy.scores["calls"]["total"], recorded->calls.size());
  ASSERT_EQ(policy.timelines.size(), 1u);
  const auto& t = policy.timelines[0];
  EXPECT_EQ(t.trace, "burst.trace");
  EXPECT_TRUE(t.error.empty()) << t.error;
  ASSERT_EQ(t.calls.size(), recorded->calls.size());
  EXPECT_EQ(t.calls[2].intent, "test");
  // Sampled every 100 ms over a replay of about 5 s: dozens of points, none before the run was
  // ready, and the 300 MB burst shows in them: outside it the trace never holds more than
  // 3 MB. Not its full height: beside stress-ng and two other tests the starved generator had
  // reached 175 MB when a sample was taken (how close it comes is ReplayOfAShortRealTrace's).
  EXPECT_GE(t.samples.size(), 20u);
  uint64_t peak = 0;
  for (const auto& s : t.samples) {
    EXPECT_GE(s.t_ms, 0);
    peak = std::max(peak, s.memory_bytes);
  }
  EXPECT_GE(peak, 100'000'000u);
  std::ifstream in(dir + "/report.html");
  std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(html.find("<svg id=\"burst-timeline-1\""), std::string::npos);
}

// A policy from `policy suggest` is one `replay --policy` runs, and `replay --split` takes the
// half of a directory that `policy suggest --split` did not: the round trip a held-out
// comparison rests on (README "Sizing grants from traces").
TEST_F(ReplayTest, ASuggestedPolicyReplaysOnTheOtherHalf) {
  SANDGATE_REQUIRE_ROOT();
  std::string burst = source_dir() + "/traces/burst.trace";
  SANDGATE_REQUIRE(::access(burst.c_str(), R_OK) == 0,
                   "traces/burst.trace not found (SANDGATE_SOURCE_DIR)");
  auto recorded = replay::read_trace(burst);
  ASSERT_TRUE(recorded.ok()) << recorded.error().message();
  // Two traces: a.trace (even, sized on) and b.trace (odd, replayed); the same run twice.
  std::string dir = tmp_ + "/runs";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  for (const char* name : {"/b.trace", "/a.trace"}) {
    std::ifstream in(burst);
    std::ofstream out(dir + name);
    out << in.rdbuf();
  }
  std::string policy = tmp_ + "/suggested.json";
  auto s = sandgate(
      {"policy", "suggest", "--traces", dir, "--split", "even", "--min-calls", "1", "-o", policy});
  ASSERT_EQ(s.status.shell_code(), 0) << s.output;
  auto sized = read_json_file(tmp_ + "/suggested.evidence.json");
  ASSERT_TRUE(sized.ok()) << sized.error().message();
  ASSERT_EQ((*sized)["traces"].size(), 1u);
  EXPECT_EQ((*sized)["traces"][0], dir + "/a.trace");

  std::string json = tmp_ + "/replay.json";
  auto r = sandgate({"replay", "--split", "odd", "--policy", policy, "--json", json, dir});
  ASSERT_EQ(r.status.shell_code(), 0) << r.output;
  auto j = read_json_file(json);
  ASSERT_TRUE(j.ok()) << j.error().message();
  ASSERT_EQ((*j)["traces"].size(), 1u);
  EXPECT_EQ((*j)["traces"][0]["trace"], dir + "/b.trace");
  ASSERT_EQ((*j)["policies"].size(), 1u);
  const Json& p = (*j)["policies"][0];
  EXPECT_EQ(p["policy"], policy);
  EXPECT_EQ(p["kind"], "per-call");
  EXPECT_EQ(p["run_errors"], 0);
  EXPECT_EQ(p["calls"]["total"], recorded->calls.size());
  EXPECT_GT(p["reserved_gib_s"].get<double>(), 0);
  // The grants it ran with are the suggested ones.
  const Json& calls = (*j)["runs"][policy][0]["calls"];
  auto file = read_json_file(policy);
  ASSERT_TRUE(file.ok());
  for (const auto& c : calls) {
    std::string intent = c["intent"];
    EXPECT_EQ(c["outcome"]["grant"]["memory_max"], (*file)["intents"][intent]["memory_max"])
        << c.dump();
  }
}

TEST_F(ReplayTest, BadInputIsOneClearLine) {
  std::string bad = tmp_ + "/bad.trace";
  {
    std::ofstream f(bad);
    f << "{\"type\":\"sample\",\"t_ms\":1}\n";
  }
  auto r = sandgate({"replay", "--policy", "none", bad});
  EXPECT_EQ(r.status.shell_code(), 2);
  EXPECT_NE(r.output.find("bad.trace"), std::string::npos) << r.output;
  auto p = sandgate(
      {"replay", "--policy", "/nonexistent-policy.json", source_dir() + "/traces/burst.trace"});
  EXPECT_EQ(p.status.shell_code(), 2);
  EXPECT_NE(p.output.find("nonexistent-policy.json"), std::string::npos) << p.output;
  auto nopol = sandgate({"replay", source_dir() + "/traces/burst.trace"});
  EXPECT_EQ(nopol.status.shell_code(), 2);
  EXPECT_NE(nopol.output.find("--policy"), std::string::npos) << nopol.output;
}

}  // namespace
}  // namespace sandgate::testing
