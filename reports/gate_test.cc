// The gate: every kind of regression it must catch, in the order of importance, and the noise it
// must not call a regression (costs compared as paired ratios with intervals, not one sample).
#include "reports/gate.h"

#include <gtest/gtest.h>

#include <random>

#include "reports/test_reports.h"
#include "reports/writers.h"

namespace sandgate::reports {
namespace {

using Change = GateFinding::Change;
using Kind = GateFinding::Kind;
using probes::Verdict;

ProbeVerdict probe(const std::string& id, Verdict v, const std::string& layer = "") {
  ProbeVerdict p;
  p.id = id;
  p.boundary = id.substr(0, id.find('.'));
  p.attempt = "tries " + id;
  p.verdict = v;
  p.layer = v == Verdict::kBlocked ? layer : "";
  p.why = "because " + id;
  p.witness = "self";
  return p;
}

// Samples with a machine of a given speed: every sample of the round scales together, plus a
// per-sample jitter of up to +-jitter.
struct Machine {
  double speed = 1.0, jitter = 0.15;
  std::mt19937 rng{7};
  double sample(double ms) {
    std::uniform_real_distribution<double> d(1 - jitter, 1 + jitter);
    return ms * speed * d(rng);
  }
};

// A report of one provider, "jail", fully measured: three probes, a replay, 9 run rounds and
// 20 call pairs; its run costs `run_ms` and a controlled call `call_ms` on this machine.
Report report(Machine& m, double run_ms = 6, double call_ms = 4) {
  Report r;
  ProviderReport p;
  p.name = "jail";
  p.display_name = "jail";
  p.capabilities = {"net.none", "proc.seccomp"};
  p.qualified = true;
  for (int i = 0; i < 9; ++i) {
    r.spawn_samples_ms.push_back(m.sample(1));
    p.costs.run_samples_ms.push_back(m.sample(run_ms));
  }
  for (int i = 0; i < 20; ++i) {
    p.costs.exec_samples_ms.push_back(m.sample(1.4));
    p.costs.call_samples_ms.push_back(m.sample(call_ms));
  }
  p.probes = {probe("net.vsock", Verdict::kBlocked, "seccomp"),
              probe("creds.env_tokens", Verdict::kBlocked, "environment"),
              probe("proc.tiocsti", Verdict::kInconclusive)};
  ReplaySummary replay;
  replay.calls = replay.completed = 4;
  replay.scores = {{"work_lost_call_s", 0.0}, {"victim_p99_inflation", nullptr}};
  p.replay = replay;
  r.providers.push_back(p);
  return r;
}

ProviderReport& jail(Report& r) { return r.providers.at(0); }
ProbeVerdict& verdict(Report& r, size_t i) { return jail(r).probes->at(i); }

std::vector<std::string> keys(const GateResult& g, Change c) {
  std::vector<std::string> out;
  for (const auto& f : g.findings)
    if (f.change == c) out.push_back(f.key);
  return out;
}

TEST(Gate, TwoHonestRunsOfTheSameThingPass) {
  // Same machine, same provider, different samples (each up to 15% off), five times over.
  for (unsigned seed = 1; seed <= 5; ++seed) {
    Machine a{1.0, 0.15, std::mt19937(seed)}, b{1.0, 0.15, std::mt19937(seed + 100)};
    auto g = run_gate(report(a), report(b), {});
    EXPECT_EQ(g.failing(), 0u) << render_gate_text(g, "a", "b");
    EXPECT_TRUE(g.findings.empty()) << render_gate_text(g, "a", "b");
  }
}

TEST(Gate, AMachineTwiceAsSlowIsNotARegression) {
  // Every sample of the current run is twice as slow (another machine, a busy one): the paired
  // ratios stay where they were.
  Machine fast{1.0}, slow{2.0};
  auto g = run_gate(report(fast), report(slow), {});
  EXPECT_EQ(g.failing(), 0u) << render_gate_text(g, "fast", "slow");
}

TEST(Gate, ACostThatReallyRoseIsARegressionWithItsIntervals) {
  Machine a, b;
  auto g = run_gate(report(a, 6, 4), report(b, 12, 8), {});
  EXPECT_EQ(keys(g, Change::kRegression),
            (std::vector<std::string>{"jail/cost:run", "jail/cost:call"}));
  std::string text = render_gate_text(g, "base", "cur");
  EXPECT_NE(text.find("run (create + exec + destroy) / bare spawn"), std::string::npos) << text;
  EXPECT_NE(text.find("interval"), std::string::npos) << text;
  EXPECT_NE(text.find("n=9"), std::string::npos) << text;
  // Cheaper is better, said as such, and never fails.
  auto better = run_gate(report(b, 12, 8), report(a, 6, 4), {});
  EXPECT_EQ(better.failing(), 0u);
  EXPECT_EQ(keys(better, Change::kImprovement),
            (std::vector<std::string>{"jail/cost:run", "jail/cost:call"}));
}

TEST(Gate, OneSlowSampleIsNotARegression) {
  Machine a, b;
  Report base = report(a), cur = report(b);
  jail(cur).costs.run_samples_ms[4] *= 10;  // one round hit by something else entirely
  jail(cur).costs.call_samples_ms[7] *= 10;
  auto g = run_gate(base, cur, {});
  EXPECT_EQ(g.failing(), 0u) << render_gate_text(g, "base", "cur");
}

TEST(Gate, ARiseWithinTheToleranceIsNotARegression) {
  // 6% dearer with almost no jitter: the intervals separate, the tolerance (10%) holds.
  Machine a{1.0, 0.005}, b{1.0, 0.005};
  EXPECT_EQ(run_gate(report(a, 6), report(b, 6.36), {}).failing(), 0u);
  GateTolerance strict;
  strict.cost_relative = 0.03;
  Machine c{1.0, 0.005}, d{1.0, 0.005};
  auto g = run_gate(report(c, 6), report(d, 6.36), strict);
  EXPECT_EQ(keys(g, Change::kRegression), std::vector<std::string>{"jail/cost:run"});
}

TEST(Gate, BlockedToExposedComesFirstWithTheEvidence) {
  Machine a, b;
  Report base = report(a), cur = report(b, 12, 8);  // costs worse too: listed after
  verdict(cur, 0) = probe("net.vsock", Verdict::kExposed);
  verdict(cur, 0).why = "socket(AF_VSOCK) returned fd 3";
  auto g = run_gate(base, cur, {});
  ASSERT_FALSE(g.findings.empty());
  EXPECT_EQ(g.findings[0].key, "jail/net.vsock");
  EXPECT_EQ(g.findings[0].kind, Kind::kExposed);
  EXPECT_EQ(g.findings[0].change, Change::kRegression);
  EXPECT_NE(g.findings[0].text.find("exposed, was blocked (seccomp)"), std::string::npos)
      << g.findings[0].text;
  EXPECT_NE(g.findings[0].text.find("returned fd 3"), std::string::npos);
  EXPECT_EQ(g.failing(), 3u);
  EXPECT_EQ(g.findings.back().kind, Kind::kCost);
}

TEST(Gate, BlockedToInconclusiveOrGoneIsARegressionAndTheReverseAnImprovement) {
  Machine a, b;
  Report base = report(a), cur = report(b);
  verdict(cur, 1) = probe("creds.env_tokens", Verdict::kInconclusive);    // proves nothing now
  verdict(cur, 2) = probe("proc.tiocsti", Verdict::kBlocked, "seccomp");  // proves it now
  auto g = run_gate(base, cur, {});
  EXPECT_EQ(keys(g, Change::kRegression), std::vector<std::string>{"jail/creds.env_tokens"});
  EXPECT_EQ(keys(g, Change::kImprovement), std::vector<std::string>{"jail/proc.tiocsti"});

  Report fewer = report(b);
  jail(fewer).probes->erase(jail(fewer).probes->begin());
  EXPECT_EQ(keys(run_gate(base, fewer, {}), Change::kRegression),
            std::vector<std::string>{"jail/net.vsock"});
  Report none = report(b);
  jail(none).probes.reset();
  EXPECT_EQ(keys(run_gate(base, none, {}), Change::kRegression),
            std::vector<std::string>{"jail/probes"});
}

TEST(Gate, ABlockingLayerThatMovedIsANoteNotARegression) {
  Machine a, b;
  Report base = report(a), cur = report(b);
  verdict(cur, 0).layer = "namespace";
  auto g = run_gate(base, cur, {});
  EXPECT_EQ(g.failing(), 0u);
  EXPECT_EQ(keys(g, Change::kNote), std::vector<std::string>{"jail/net.vsock"});
}

TEST(Gate, CapabilityLostProviderDisqualifiedOrGone) {
  Machine a, b;
  Report base = report(a), cur = report(b);
  jail(cur).capabilities = {"proc.seccomp"};
  jail(cur).qualified = false;
  jail(cur).disqualifications = {"the policy requires net.none"};
  auto g = run_gate(base, cur, {});
  EXPECT_EQ(keys(g, Change::kRegression),
            (std::vector<std::string>{"jail/capability:net.none", "jail/qualified"}));
  EXPECT_NE(render_gate_text(g, "b", "c").find("no longer qualified: the policy requires net.none"),
            std::string::npos);
  Report gone = report(b);
  jail(gone).name = "other";
  auto g2 = run_gate(base, gone, {});
  EXPECT_EQ(keys(g2, Change::kRegression), std::vector<std::string>{"jail/qualified"});
  EXPECT_EQ(keys(g2, Change::kNote), std::vector<std::string>{"other/qualified"});
}

TEST(Gate, ContainmentAndTheVictim) {
  Machine a, b;
  Report base = report(a), cur = report(b);
  jail(cur).replay->completed = 3;
  jail(cur).replay->killed = 1;
  jail(cur).replay->scores["work_lost_call_s"] = 0.3;  // within the 0.5 s tolerance
  auto g = run_gate(base, cur, {});
  EXPECT_EQ(keys(g, Change::kRegression),
            (std::vector<std::string>{"jail/replay:completed", "jail/replay:killed"}));
  jail(cur).replay->scores["work_lost_call_s"] = 2.0;
  jail(base).replay->scores["victim_p99_inflation"] = 2.0;
  jail(cur).replay->scores["victim_p99_inflation"] = 5.0;
  auto g2 = run_gate(base, cur, {});
  EXPECT_EQ(keys(g2, Change::kRegression),
            (std::vector<std::string>{"jail/replay:completed", "jail/replay:killed",
                                      "jail/replay:work_lost", "jail/replay:victim"}));
}

TEST(Gate, AnAcceptedRegressionIsShownAndPasses) {
  Machine a, b;
  Report base = report(a), cur = report(b);
  verdict(cur, 1) = probe("creds.env_tokens", Verdict::kWarning);
  GateTolerance t;
  t.accept = {"jail/creds.env_tokens", "jail/net.packet_socket"};
  auto g = run_gate(base, cur, t);
  EXPECT_EQ(g.failing(), 0u);
  ASSERT_EQ(g.findings.size(), 1u);
  EXPECT_TRUE(g.findings[0].accepted);
  EXPECT_EQ(g.unused_accepts, std::vector<std::string>{"jail/net.packet_socket"});
  std::string text = render_gate_text(g, "b", "c");
  EXPECT_NE(text.find("worse (accepted)"), std::string::npos) << text;
  EXPECT_NE(text.find("accepts jail/net.packet_socket, which changed nothing"), std::string::npos);
}

TEST(Gate, SandboxTextInAFindingIsCleaned) {
  Machine a, b;
  Report base = report(a), cur = report(b);
  verdict(cur, 0) = probe("net.vsock", Verdict::kExposed);
  verdict(cur, 0).why = testing::hostile_text();
  auto g = run_gate(base, cur, {});
  ASSERT_FALSE(g.findings.empty());
  const std::string& text = g.findings[0].text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_EQ(text.find('\n'), std::string::npos);
  EXPECT_EQ(text.find("TAIL-NEVER-SHOWN"), std::string::npos);
  EXPECT_LT(text.size(), 600u);
  // ...and the Markdown escapes it for its own format.
  MarkdownOptions md;
  md.what_changed = g.what_changed();
  std::string summary = render_markdown(cur, md);
  EXPECT_EQ(summary.find("<script>"), std::string::npos);
  EXPECT_LT(summary.find("### What changed"), summary.find("| provider |"));
  EXPECT_NE(summary.find("WORSE: jail: net.vsock: exposed, was blocked (seccomp)"),
            std::string::npos)
      << summary;
}

TEST(Gate, AVersionOneBaselineComparesEverythingButCosts) {
  // The committed fixture (schema 1 era: no spawn or call samples) against itself.
  Report r = testing::real_report();
  auto g = run_gate(r, r, {});
  EXPECT_EQ(g.failing(), 0u) << render_gate_text(g, "a", "b");
  for (const auto& f : g.findings) {
    EXPECT_EQ(f.change, Change::kNote);
    EXPECT_NE(f.text.find("not compared, too few paired samples"), std::string::npos) << f.text;
  }
}

// The baseline the CI templates gate against: it must stay readable by this sandgate (a schema
// change that breaks it would fail every change's gate with exit 2), and be a whole qualify.
TEST(Gate, TheCommittedBaselineReadsAndPassesAgainstItself) {
  auto base = load_report(::sandgate::testing::source_dir() + "/ci/baseline/report.json");
  ASSERT_TRUE(base.ok()) << base.error().message();
  EXPECT_EQ(base->job, "qualify");
  EXPECT_FALSE(base->spawn_samples_ms.empty());
  size_t probed = 0;
  for (const auto& p : base->providers) probed += p.probes.has_value();
  EXPECT_GE(probed, 2u);
  auto g = run_gate(*base, *base, {});
  EXPECT_TRUE(g.findings.empty()) << render_gate_text(g, "baseline", "baseline");
}

TEST(Gate, ToleranceFileIsStrict) {
  auto ok = tolerance_from_json(
      Json{{"cost_relative", 0.2}, {"accept", {"podman/proc.tiocsti"}}, {"confidence", 0.9}});
  ASSERT_TRUE(ok.ok()) << ok.error().message();
  EXPECT_EQ(ok->cost_relative, 0.2);
  EXPECT_EQ(ok->confidence, 0.9);
  EXPECT_EQ(ok->work_lost_s, 0.5);  // the default
  EXPECT_TRUE(ok->accept.count("podman/proc.tiocsti"));
  auto message = [](const Json& j) {
    auto t = tolerance_from_json(j);
    return t.ok() ? std::string("accepted") : t.error().message();
  };
  EXPECT_NE(message({{"cost_relativ", 0.2}}).find("cost_relativ: unknown field"),
            std::string::npos);
  EXPECT_NE(message({{"confidence", 1.5}}).find("confidence: expected a number from 0 to"),
            std::string::npos);
  EXPECT_NE(message({{"cost_relative", "10%"}}).find("cost_relative: expected a number"),
            std::string::npos);
  EXPECT_NE(message({{"accept", {"proc.tiocsti"}}}).find("is not PROVIDER/SUBJECT"),
            std::string::npos);
}

}  // namespace
}  // namespace sandgate::reports

namespace sandgate::reports {
namespace {

// A bench report: a paired figure (the subject `subject_ms`, its baseline 2 ms, per round) and
// an absolute one (`absolute_ms`), 9 rounds on machine `m`.
Report bench_report(Machine& m, double subject_ms = 6, double absolute_ms = 30) {
  Report r;
  r.job = "bench";
  BenchFigure paired{"run.namespaces_vs_bwrap", "namespaces run", "ms", {}, {}, "bwrap true", {}};
  BenchFigure absolute{"replay.fidelity", "end error p95", "ms", {}, {}, "none: absolute", {}};
  for (int i = 0; i < 9; ++i) {
    double round = m.sample(1);  // what the machine does this round, shared by the pair
    paired.samples.push_back(round * m.sample(subject_ms) / m.speed);  // the speed is in round
    paired.baseline_samples.push_back(round * 2);
    absolute.samples.push_back(m.sample(absolute_ms));
  }
  r.bench = std::vector<BenchFigure>{paired, absolute};
  return r;
}

TEST(GateBench, NoiseIsNotARegression) {
  for (unsigned seed = 1; seed <= 5; ++seed) {
    Machine a{1.0, 0.15, std::mt19937(seed)}, b{1.0, 0.15, std::mt19937(seed + 100)};
    auto g = run_gate(bench_report(a), bench_report(b), {});
    EXPECT_EQ(g.failing(), 0u) << render_gate_text(g, "a", "b");
  }
  // A machine twice as slow moves both halves of the paired figure: its ratio holds. (The
  // absolute figure would double: it is held at 30 ms here, it compares only on one machine.)
  Machine fast{1.0}, slow{2.0};
  auto g = run_gate(bench_report(fast), bench_report(slow, 6, 30 / 2.0), {});
  EXPECT_EQ(g.failing(), 0u) << render_gate_text(g, "fast", "slow");
}

TEST(GateBench, ADoublingIsCaughtForPairedAndAbsoluteFigures) {
  Machine a, b;
  // The paired figure doubles; the absolute one more than doubles (its default tolerance).
  auto g = run_gate(bench_report(a), bench_report(b, 12, 75), {});
  EXPECT_EQ(keys(g, Change::kRegression),
            (std::vector<std::string>{"bench/run.namespaces_vs_bwrap", "bench/replay.fidelity"}))
      << render_gate_text(g, "a", "b");
  for (const auto& f : g.findings) EXPECT_EQ(f.kind, Kind::kCost);
  std::string text = render_gate_text(g, "a", "b");
  EXPECT_NE(text.find("run.namespaces_vs_bwrap / bwrap true 5."), std::string::npos) << text;
  EXPECT_NE(text.find("replay.fidelity (absolute, this machine) 7"), std::string::npos) << text;
  EXPECT_NE(text.find(" ms (96% interval"), std::string::npos) << text;  // n=9: 96% coverage
  // And the reverse is an improvement, never a failure.
  auto better = run_gate(bench_report(b, 12, 75), bench_report(a), {});
  EXPECT_EQ(better.failing(), 0u);
  EXPECT_EQ(better.count(Change::kImprovement), 2u);
}

// An absolute figure moves with whatever else the machine does between two runs: +60% is within
// its default tolerance (a doubling), and a regression with a tighter one.
TEST(GateBench, AnAbsoluteFigureHasItsOwnWiderTolerance) {
  Machine a{1.0, 0.02}, b{1.0, 0.02};
  Report base = bench_report(a), cur = bench_report(b, 6, 48);
  EXPECT_EQ(run_gate(base, cur, {}).failing(), 0u)
      << render_gate_text(run_gate(base, cur, {}), "a", "b");
  GateTolerance tight;
  tight.absolute_relative = 0.3;
  EXPECT_EQ(keys(run_gate(base, cur, tight), Change::kRegression),
            std::vector<std::string>{"bench/replay.fidelity"});
}

TEST(GateBench, AFigureSkippedInOneReportIsANote) {
  Machine a, b;
  Report base = bench_report(a), cur = bench_report(b, 12, 60);
  auto& fig = (*cur.bench)[0];
  fig.samples.clear();
  fig.baseline_samples.clear();
  fig.skipped = "bwrap is not installed";
  (*cur.bench).pop_back();  // and one not measured at all (--only)
  auto g = run_gate(base, cur, {});
  EXPECT_EQ(g.failing(), 0u) << render_gate_text(g, "a", "b");
  EXPECT_EQ(keys(g, Change::kNote),
            (std::vector<std::string>{"bench/run.namespaces_vs_bwrap", "bench/replay.fidelity"}));
  EXPECT_NE(render_gate_text(g, "a", "b").find("not measured now: bwrap is not installed"),
            std::string::npos);
}

TEST(GateBench, AQualifyReportHasNoBenchAndNothingIsSaid) {
  Machine a, b;
  auto g = run_gate(report(a), report(b), {});
  for (const auto& f : g.findings) EXPECT_NE(f.key.rfind("bench/", 0), 0u) << f.key;
}

}  // namespace
}  // namespace sandgate::reports
