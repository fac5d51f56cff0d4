// Test-only: the reports the writer tests render. A small real one (a qualify run committed
// under testdata/) and a hostile one: every string a sandbox can put into a report, at once.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "reports/from_qualify.h"
#include "reports/model.h"
#include "tests/support/privileged.h"

namespace sandgate::reports::testing {

// `sandgate qualify --cycles 1 --calls 3 --only creds --allow-unsafe-host --provider
// namespaces --provider host_dir`, as written (the probe files' recorded paths point at the
// directory it was written to, since removed: the loader finds them beside qualify.json).
inline std::string fixture_dir() {
  return ::sandgate::testing::source_dir() + "/reports/testdata/qualify-creds";
}

// The message of the error report_from_json gives for `j` (a failure if it gives none).
inline std::string error_of(const Json& j) {
  auto r = report_from_json(j);
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.error().message();
}

// How many of a provider's probes have verdict `v`.
inline size_t count(const ProviderReport& p, probes::Verdict v) {
  size_t n = 0;
  for (const auto& pv : p.probes.value_or(std::vector<ProbeVerdict>{})) n += pv.verdict == v;
  return n;
}

inline Report real_report() {
  auto r = load_report(fixture_dir() + "/qualify.json");
  EXPECT_TRUE(r.ok()) << r.error().message();
  return r.ok() ? std::move(r).value() : Report{};
}

// Control characters, an ANSI colour and a terminal title sequence, markup of every kind,
// CDATA and comment terminators, invalid UTF-8, a bidirectional override, a Markdown link and
// table pipe, and a line far longer than any writer keeps.
inline std::string hostile_text() {
  return std::string(
             "\x1b[31mRED\x1b[0m \x1b]0;pwned\x07 <script>alert(1)</script> "
             "<img src=x onerror=alert(2)> & \"dq\" 'sq' ]]> --> <!-- \x01\x02\x7f "
             "\xc2\x9b \xc3\x28 \xff\xfe \xe2\x80\xae"
             "evil\xe2\x80\xac "
             "[link](https://attacker.example/x) | cell | `code` *bold* # head\n"
             "second line\r\n") +
         std::string(50000, 'A') + "TAIL-NEVER-SHOWN";
}

// The real report with hostile text wherever a sandbox (or a hostile provider) can put it: one
// exposed, one inconclusive and one warning verdict whose every field is hostile.
inline Report hostile_report() {
  Report r = real_report();
  std::string evil = hostile_text();
  ProviderReport p;
  p.name = "evil" + evil.substr(0, 200);
  p.display_name = evil;
  p.unsafe = false;
  p.capabilities = {evil.substr(0, 300)};
  p.qualified = false;
  p.disqualifications = {evil};
  p.costs.run_samples_ms = {10};
  p.costs.run_ms = 10;
  p.costs.exec_ms = 2;
  p.costs.call_ms = 5;
  p.probes.emplace();
  auto verdict = [&](probes::Verdict v, const std::string& id) {
    ProbeVerdict pv;
    pv.id = id;
    pv.boundary = "creds";
    pv.attempt = evil;
    pv.verdict = v;
    pv.why = evil;
    pv.witness = "canary";
    pv.judgement = {{"id", id},
                    {"host", {{"decoy_events", {evil}}, {"notes", {evil}}}},
                    {"sandbox", {{"attempt", evil}, {"evidence", {{"bytes", evil}}}}}};
    p.probes->push_back(pv);
  };
  verdict(probes::Verdict::kExposed, "creds.env_tokens");
  verdict(probes::Verdict::kInconclusive, "creds.home_files");
  verdict(probes::Verdict::kWarning, "persist.git_hooks");
  verdict(probes::Verdict::kExposed, "creds." + evil.substr(0, 100));
  r.providers.push_back(std::move(p));
  r.rules["persist.git_hooks"] = {"persist.git_hooks", "persist", evil, "host_file", evil};
  std::string odd = "creds." + evil.substr(0, 100);
  r.rules[odd] = {odd, "creds", evil, "canary", evil};
  return r;
}

// A small replay section: two policies (per-call with a victim, static without), two traces
// each; `evil` goes into every string the replay carries from a trace or a sandbox.
inline ReplaySection synthetic_replay(const std::string& evil = "") {
  ReplaySection s;
  s.provider = "namespaces";
  s.time_scale = 2;
  s.victim_solo = LatencySummary{1000, 100, 150, 300, 900, 0};
  for (const std::string& label : {std::string("default") + evil, std::string("static")}) {
    ReplayPolicy p;
    p.label = label;
    // The shape replay::to_json(PolicyScores) writes, in part.
    p.scores = {{"policy", label},
                {"kind", "per-call"},
                {"calls", {{"total", 3}, {"completed", 2}, {"killed", 1}}},
                {"work_lost_call_s", 1.5},
                {"victim_p99_inflation", label == "static" ? Json(nullptr) : Json(8.3)},
                {"host_peak_bytes", 3u << 30},
                {"victim", nullptr}};
    if (label != "static") p.victim = LatencySummary{1000, 120, 200, 2500, 40000, 3};
    for (int t = 0; t < 2; ++t) {
      TraceTimeline tl;
      tl.trace = "build.trace" + evil + (t ? "#2" : "");
      for (int i = 0; i <= 50; ++i)
        tl.samples.push_back(
            {i * 100.0, static_cast<uint64_t>((200 + (i % 10) * 30)) << 20, 0.1 * (i % 7)});
      tl.calls = {{"c1", "compile" + evil, 200, 1800, "exited"},
                  {"c2", "test", 2000, 3500, "killed"},
                  {"c3", "search", 3600, 4900, "exited"}};
      tl.actions = {{"c2", "throttle", 2600, "memory.high" + evil},
                    {"c2", "kill", 3400, "over the grant"}};
      p.timelines.push_back(std::move(tl));
    }
    s.policies.push_back(std::move(p));
  }
  return s;
}

// A small plan section: three models, each with its risk curve.
inline PlanSection synthetic_plan(const std::string& evil = "") {
  PlanSection p;
  p.policy = "default" + evil;
  p.traces = 2;
  p.trace_files = {"traces/build.trace", "traces/tests.trace" + evil};
  p.host_memory_bytes = 16ull << 30;
  p.host_cpus = 8;
  p.risk = 0.01;
  p.trials = 1000;
  p.seed = 1;
  p.max_runs = 20000;
  p.curve_max_runs = 40;
  p.cpu_overcommit = 1.5;
  // static-peak: memory binds at 8; per-call: CPU at 20 (memory 25); actual: both at 30.
  size_t by_memory[] = {8, 25, 30}, by_cpu[] = {64, 20, 30};
  const char* binding[] = {"memory", "cpu", "both"};
  const char* names[] = {"static-peak", "per-call", "actual"};
  auto curve = [](uint64_t knee) {
    std::vector<RiskPoint> c;
    for (uint64_t n = 1; n <= 40; ++n)
      c.push_back({n, n <= knee ? 0.0 : std::min(1.0, (n - knee) / 10.0)});
    return c;
  };
  for (int m = 0; m < 3; ++m) {
    PlanFit f;
    f.policy = names[m] + (m == 1 ? evil : "");
    f.fits = std::min(by_memory[m], by_cpu[m]);
    f.p_memory_exceeded = 0.001 * m;
    f.p_cpu_exceeded = 0.25 * m;
    f.fits_by_cpu = 64;
    f.reserved_bytes = 12e9;
    f.used_bytes = 8e9;
    f.note = "a note" + evil;
    if (m == 1) f.extra = {{"over_grant_call_time_share", 0.02}};
    f.risk_curve = curve(by_memory[m]);
    f.cpu = PlanCpuFit{by_memory[m], by_cpu[m],   binding[m],
                       1 + 0.05 * m, 1 + 0.2 * m, curve(by_cpu[m])};
    p.fits.push_back(std::move(f));
  }
  p.intents = {{"compile" + evil, 4, 120, 2e9, 5e8, 1.5e9, 2.5e9, 1},
               {"search", 9, 30, std::nullopt, 1e7, 5e7, 6e7, 0}};
  return p;
}

}  // namespace sandgate::reports::testing
