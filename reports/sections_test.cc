// The replay's and the plan's sections of the report model (reports/replay_model.h,
// reports/plan_model.h): their JSON, their strict reading, their charts, and the plan command
// writing them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/process.h"
#include "core/test_temp_dir.h"
#include "reports/charts.h"
#include "reports/job_report.h"
#include "reports/test_reports.h"
#include "reports/writers.h"

namespace sandgate::reports {
namespace {

using testing::error_of;
using testing::hostile_text;
using testing::synthetic_plan;
using testing::synthetic_replay;

Report job(const std::string& name) {
  Report r = job_report(name, {{"system", {{"hostname", "h1"}}}});
  if (name == "replay") r.replay = synthetic_replay();
  if (name == "plan") r.plan = synthetic_plan();
  return r;
}

size_t occurrences(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(ReplaySection, RoundTripsThroughTheModel) {
  Report r = job("replay");
  Json once = to_json(r);
  EXPECT_EQ(once["job"], "replay");
  EXPECT_FALSE(once.contains("plan"));  // absent: the job did not plan
  auto back = report_from_json(once);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(to_json(*back), once);
  ASSERT_TRUE(back->replay);
  EXPECT_FALSE(back->plan);
  const ReplaySection& s = *back->replay;
  ASSERT_EQ(s.policies.size(), 2u);
  EXPECT_EQ(s.policies[0].label, "default");
  ASSERT_TRUE(s.policies[0].victim);
  EXPECT_DOUBLE_EQ(s.policies[0].victim->p99_us, 2500);
  EXPECT_FALSE(s.policies[1].victim);  // "victim": null in its scores
  ASSERT_EQ(s.policies[0].timelines.size(), 2u);
  EXPECT_EQ(s.policies[0].timelines[1].samples.size(), 51u);
  EXPECT_EQ(s.policies[0].timelines[1].actions[1].action, "kill");
  ASSERT_TRUE(s.victim_solo);
  EXPECT_EQ(s.victim_solo->count, 1000u);
  // The scores stay whole: what replay --json has, the model has.
  EXPECT_EQ(s.policies[0].scores["calls"]["killed"], 1);
}

TEST(PlanSection, RoundTripsThroughTheModel) {
  Report r = job("plan");
  Json once = to_json(r);
  EXPECT_FALSE(once.contains("replay"));
  auto back = report_from_json(once);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(to_json(*back), once);
  ASSERT_TRUE(back->plan);
  ASSERT_EQ(back->plan->fits.size(), 3u);
  EXPECT_EQ(back->plan->fits[1].risk_curve.size(), 40u);
  EXPECT_EQ(back->plan->fits[1].extra.size(), 1u);
  EXPECT_FALSE(back->plan->intents[1].grant_memory_bytes);
  // What CPU adds (planner version 2).
  EXPECT_EQ(once["plan"]["schema_version"], 2);
  EXPECT_EQ(back->plan->cpu_overcommit, 1.5);
  const PlanFit& pc = back->plan->fits[1];
  EXPECT_EQ(pc.fits, 20u);
  ASSERT_TRUE(pc.cpu);
  EXPECT_EQ(pc.cpu->fits_by_memory, 25u);
  EXPECT_EQ(pc.cpu->fits_by_cpu_demand, 20u);
  EXPECT_EQ(pc.cpu->binding, "cpu");
  EXPECT_DOUBLE_EQ(pc.cpu->cpu_slowdown_mean, 1.05);
  EXPECT_DOUBLE_EQ(pc.cpu->cpu_slowdown_p95, 1.2);
  EXPECT_EQ(pc.cpu->cpu_risk_curve.size(), 40u);
}

// A plan written before CPU counted (planner version 1: `fits` is memory's answer, no CPU
// fields) still reads, writes back as it was, and renders with "-" where it has no figure.
Json version_1_plan() {
  Json j = to_json(job("plan"));
  Json& plan = j["plan"];
  plan["schema_version"] = 1;
  plan.erase("cpu_overcommit");
  for (auto& f : plan["fits"]) {
    f["fits"] = f["fits_by_memory"];
    for (const char* key : {"fits_by_memory", "fits_by_cpu_demand", "binding", "cpu_slowdown_mean",
                            "cpu_slowdown_p95", "cpu_risk_curve"})
      f.erase(key);
  }
  return j;
}

TEST(PlanSection, AVersion1PlanStillReads) {
  Json j = version_1_plan();
  auto back = report_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().message();
  ASSERT_TRUE(back->plan);
  EXPECT_EQ(back->plan->schema_version, 1);
  EXPECT_FALSE(back->plan->cpu_overcommit);
  ASSERT_EQ(back->plan->fits.size(), 3u);
  EXPECT_EQ(back->plan->fits[1].fits, 25u);
  for (const auto& f : back->plan->fits) EXPECT_FALSE(f.cpu) << f.policy;
  EXPECT_EQ(to_json(*back), j);
  std::string html = render_html(*back);
  EXPECT_NE(html.find("<td>per-call</td><td>25</td><td>-</td><td>-</td><td>-</td>"),
            std::string::npos);
  std::string md = render_markdown(*back);
  EXPECT_NE(md.find("| per-call | 25 | - | - | - | 0.0010 | - |"), std::string::npos) << md;
  auto c = capacity_curve_chart(*back);
  ASSERT_TRUE(c);
  EXPECT_EQ(occurrences(c->svg, "class=\"series\""), 3u);
  EXPECT_EQ(occurrences(c->svg, "class=\"series-cpu\""), 0u);
  // A version-1 plan carrying version 2's fields is refused: the version says what is there.
  j["plan"]["fits"][0]["binding"] = "memory";
  EXPECT_NE(error_of(j).find("plan.fits[0].binding: unknown field"), std::string::npos)
      << error_of(j);
}

// A report from before these sections (the committed qualify fixture) reads as it did.
TEST(Sections, AReportWithoutThemStillReads) {
  Json j = to_json(testing::real_report());
  EXPECT_FALSE(j.contains("replay"));
  EXPECT_FALSE(j.contains("plan"));
  auto back = report_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_FALSE(back->replay);
  EXPECT_FALSE(back->plan);
}

TEST(ReplaySection, ErrorsNameTheField) {
  Json good = to_json(job("replay"));
  Json j = good;
  j["replay"]["policies"][0]["timelines"][1]["calls"][2]["end_ms"] = 1;
  EXPECT_NE(error_of(j).find("replay.policies[0].timelines[1].calls[2].end_ms: before start_ms"),
            std::string::npos)
      << error_of(j);
  j = good;
  j["replay"]["policies"][1]["timelines"][0]["samples"][3]["memory_bytes"] = -5;
  EXPECT_NE(error_of(j).find("replay.policies[1].timelines[0].samples[3].memory_bytes: expected a "
                             "count"),
            std::string::npos)
      << error_of(j);
  j = good;
  j["replay"]["policies"][0]["scores"]["victim"]["p99_us"] = 1;
  EXPECT_NE(error_of(j).find("replay.policies[0].scores.victim: percentiles out of order"),
            std::string::npos)
      << error_of(j);
  j = good;
  j["replay"]["policies"][0]["scores"].erase("policy");
  EXPECT_NE(error_of(j).find("replay.policies[0].scores.policy: expected a string"),
            std::string::npos)
      << error_of(j);
  j = good;
  j["replay"]["policies"][0]["timelinez"] = Json::array();
  EXPECT_NE(error_of(j).find("replay.policies[0].timelinez: unknown field"), std::string::npos);
  j = good;
  j["replay"]["victim_solo"].erase("p90_us");
  EXPECT_NE(error_of(j).find("replay.victim_solo.p90_us: missing"), std::string::npos);
  j = good;
  j["replay"]["policies"][0]["timelines"][0]["samples"][4]["t_ms"] = 0;
  EXPECT_NE(error_of(j).find("replay.policies[0].timelines[0].samples[4].t_ms: earlier than"),
            std::string::npos)
      << error_of(j);
}

TEST(PlanSection, ErrorsNameTheField) {
  Json good = to_json(job("plan"));
  Json j = good;
  j["plan"]["fits"][2]["risk_curve"][5] = {6, 1.5};
  EXPECT_NE(error_of(j).find("plan.fits[2].risk_curve[5]: risk outside [0, 1]"), std::string::npos)
      << error_of(j);
  j = good;
  j["plan"]["fits"][0]["risk_curve"][3] = {1, 0.0};
  EXPECT_NE(error_of(j).find("plan.fits[0].risk_curve[3]: runs not ascending"), std::string::npos)
      << error_of(j);
  j = good;
  j["plan"]["fits"][1]["risk_curve"][0] = "x";
  EXPECT_NE(error_of(j).find("plan.fits[1].risk_curve[0]: expected [runs >= 1, risk]"),
            std::string::npos)
      << error_of(j);
  j = good;
  j["plan"]["fits"][1]["over_grant_call_time_shar"] = 0.1;
  EXPECT_NE(error_of(j).find("plan.fits[1].over_grant_call_time_shar: unknown field"),
            std::string::npos);
  j = good;
  j["plan"]["intents"][0]["grant_memory_bytes"] = "2GiB";
  EXPECT_NE(error_of(j).find("plan.intents[0].grant_memory_bytes: expected a number or null"),
            std::string::npos);
  j = good;
  j["plan"]["risk"] = 2;
  EXPECT_NE(error_of(j).find("plan.risk: expected a number in (0, 1)"), std::string::npos);
  j = good;
  j["plan"]["schema_version"] = 3;
  EXPECT_NE(error_of(j).find("plan.schema_version: this sandgate reads the planner's versions 1 "
                             "and 2, got 3"),
            std::string::npos)
      << error_of(j);
  // What CPU adds is required in version 2, and checked.
  j = good;
  j["plan"]["fits"][2].erase("binding");
  EXPECT_NE(error_of(j).find("plan.fits[2].binding: missing"), std::string::npos) << error_of(j);
  j = good;
  j["plan"]["fits"][2]["binding"] = "disk";
  EXPECT_NE(error_of(j).find("plan.fits[2].binding: expected memory, cpu, both or none"),
            std::string::npos)
      << error_of(j);
  j = good;
  j["plan"]["fits"][1]["fits"] = 25;  // memory's answer, though CPU allows only 20
  EXPECT_NE(error_of(j).find("plan.fits[1].fits: not the smaller of fits_by_memory and "
                             "fits_by_cpu_demand"),
            std::string::npos)
      << error_of(j);
  j = good;
  j["plan"]["fits"][0]["cpu_slowdown_p95"] = 0.5;
  EXPECT_NE(error_of(j).find("plan.fits[0].cpu_slowdown_p95: expected a factor >= 1"),
            std::string::npos)
      << error_of(j);
  j = good;
  j["plan"]["fits"][0]["cpu_risk_curve"][2] = {2, 0.5};
  EXPECT_NE(error_of(j).find("plan.fits[0].cpu_risk_curve[2]: runs not ascending"),
            std::string::npos)
      << error_of(j);
  j = good;
  j["plan"]["cpu_overcommit"] = 0.8;
  EXPECT_NE(error_of(j).find("plan.cpu_overcommit: expected a ratio >= 1"), std::string::npos)
      << error_of(j);
  j = good;
  j["plan"].erase("cpu_overcommit");
  EXPECT_NE(error_of(j).find("plan.cpu_overcommit: missing"), std::string::npos) << error_of(j);
}

// ---- The charts, on the synthetic sections.

TEST(CapacityCurveChart, ALinePerModelTheThresholdDashedAndTheFits) {
  Report r = job("plan");
  auto c = capacity_curve_chart(r);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->id, "capacity-curve");
  EXPECT_EQ(c->svg.find("<svg id=\"capacity-curve\""), 0u);
  EXPECT_EQ(occurrences(c->svg, "class=\"series\""), 3u);      // static-peak, per-call, actual
  EXPECT_EQ(occurrences(c->svg, "class=\"series-cpu\""), 3u);  // and their CPU demand
  EXPECT_EQ(occurrences(c->svg, "class=\"fit\""), 3u);
  EXPECT_EQ(occurrences(c->svg, "class=\"threshold\""), 1u);
  EXPECT_NE(c->svg.find("stroke-dasharray=\"6 4\" class=\"threshold\""), std::string::npos);
  // Each line has its 40 points; hover says what the model admits.
  EXPECT_NE(c->svg.find("per-call: 20 runs fit at a risk of 1% (cpu binds: 25 by memory, 20 by "
                        "CPU)"),
            std::string::npos);
  EXPECT_NE(c->svg.find(">per-call: 20 (cpu)<"), std::string::npos);
  EXPECT_NE(c->caption.find("CPU demand exceeds 8 cores x 1.5"), std::string::npos) << c->caption;
  EXPECT_FALSE(capacity_curve_chart(job("replay")));
  EXPECT_FALSE(capacity_curve_chart(testing::real_report()));
}

TEST(VictimLatencyChart, ADistributionPerPolicyThatRanTheVictim) {
  Report r = job("replay");
  auto c = victim_latency_chart(r);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->svg.find("<svg id=\"victim-latency\""), 0u);
  // solo + default; static ran no victim and says so.
  EXPECT_EQ(occurrences(c->svg, "class=\"distribution\""), 2u);
  EXPECT_EQ(occurrences(c->svg, "no victim ran"), 1u);
  EXPECT_NE(c->svg.find("p50 120 µs, p90 200 µs, p99 2.5 ms, max 40.0 ms over 1000 samples"),
            std::string::npos);
  Report none = job("replay");
  none.replay->victim_solo.reset();
  for (auto& p : none.replay->policies) p.victim.reset();
  EXPECT_FALSE(victim_latency_chart(none));
}

TEST(BurstTimelineChart, OnePerRunWithItsLinesCallsAndActions) {
  Report r = job("replay");
  auto charts = burst_timeline_charts(r);
  ASSERT_EQ(charts.size(), 4u);  // 2 policies x 2 traces
  for (size_t i = 0; i < charts.size(); ++i) {
    const Chart& c = charts[i];
    EXPECT_EQ(c.id, "burst-timeline-" + std::to_string(i + 1));
    EXPECT_EQ(c.svg.find("<svg id=\"" + c.id + "\""), 0u);
    EXPECT_EQ(occurrences(c.svg, "class=\"series\""), 2u);         // memory, CPU
    EXPECT_EQ(occurrences(c.svg, "class=\"call\""), 3u);           // three call spans
    EXPECT_EQ(occurrences(c.svg, "class=\"action\""), 2u);         // throttle, kill
    EXPECT_EQ(occurrences(c.svg, "class=\"legend-intent\""), 3u);  // compile, test, search
    EXPECT_EQ(occurrences(c.svg, "class=\"legend-line\""), 2u);
  }
  EXPECT_NE(charts[1].title.find("build.trace#2 under default"), std::string::npos);
  EXPECT_NE(charts[0].svg.find("call c2 (test): 2000 to 3500 ms, killed"), std::string::npos);
  EXPECT_NE(charts[0].svg.find("kill at 3400 ms (call c2): over the grant"), std::string::npos);
  // Bounded however many runs were replayed.
  Report many = job("replay");
  many.replay->policies[0].timelines.resize(kMaxTimelines + 5,
                                            many.replay->policies[0].timelines[0]);
  EXPECT_EQ(burst_timeline_charts(many).size(), kMaxTimelines);
}

TEST(Charts, ForEveryJobInPageOrder) {
  Report r = testing::real_report();
  r.replay = synthetic_replay();
  r.plan = synthetic_plan();
  std::vector<std::string> ids;
  for (const auto& c : charts_for(r)) ids.push_back(c.id);
  EXPECT_EQ(ids,
            (std::vector<std::string>{"probe-matrix", "run-costs", "call-costs", "replay-summary",
                                      "capacity-curve", "victim-latency", "burst-timeline-1",
                                      "burst-timeline-2", "burst-timeline-3", "burst-timeline-4"}));
}

// What a trace, a policy file or a sandbox put into the sections stays text in every chart.
TEST(Charts, HostileTextInTheSectionsIsInert) {
  std::string evil = hostile_text();
  Report r = job_report("replay", Json::object());
  r.replay = synthetic_replay(evil);
  r.plan = synthetic_plan(evil);
  std::string html = render_html(r);
  for (const auto& c : charts_for(r)) {
    SCOPED_TRACE(c.id);
    EXPECT_EQ(c.svg.find("<script"), std::string::npos);
    EXPECT_EQ(c.svg.find("<img"), std::string::npos);
    EXPECT_EQ(c.svg.find('\x1b'), std::string::npos);
    EXPECT_EQ(c.svg.find("\xe2\x80\xae"), std::string::npos);  // the bidi override
    EXPECT_EQ(c.svg.find("TAIL-NEVER-SHOWN"), std::string::npos);
  }
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;"), std::string::npos);
  EXPECT_NE(html.find("<svg id=\"burst-timeline-4\""), std::string::npos);
  // The JSON keeps it whole and reads it back.
  auto back = report_from_json(to_json(r));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->replay->policies[0].label, "default" + evil);
}

// The tables `plan` and `replay` print are on the page too, under their charts; a job without
// providers does not claim "0 of 0 providers qualified".
TEST(HtmlWriter, ShowsThePlanAndReplayTables) {
  Report r = job("plan");
  r.replay = synthetic_replay();
  std::string html = render_html(r);
  EXPECT_NE(html.find("<h1>sandgate plan</h1>"), std::string::npos);
  EXPECT_EQ(html.find("providers qualified"), std::string::npos);
  EXPECT_EQ(html.find("id=\"providers\""), std::string::npos);
  EXPECT_NE(html.find("<h2 id=\"plan\">Capacity plan</h2>"), std::string::npos);
  EXPECT_NE(html.find("<td>per-call</td><td>20</td><td>cpu</td><td>25</td><td>20</td>"),
            std::string::npos);
  EXPECT_NE(html.find("<td>1.05× / 1.20×</td>"), std::string::npos);
  EXPECT_NE(html.find("8 cpus (overcommitted up to 1.5×)"), std::string::npos);
  EXPECT_NE(html.find("<td>search</td><td>9</td><td>30</td><td>none</td>"), std::string::npos);
  EXPECT_NE(html.find("<td>default</td><td>3</td><td>2</td><td>1</td><td>1.5 s</td><td>8.30×</td>"
                      "<td>3072 MiB</td>"),
            std::string::npos);
  EXPECT_NE(html.find("<td>static</td><td>3</td><td>2</td><td>1</td><td>1.5 s</td><td>-</td>"),
            std::string::npos);
}

TEST(MarkdownWriter, SummarisesThePlanAndTheReplay) {
  Report r = job("plan");
  r.replay = synthetic_replay();
  std::string md = render_markdown(r);
  EXPECT_EQ(md.find("## sandgate plan\n"), 0u) << md;
  EXPECT_EQ(md.find("providers qualified"), std::string::npos);
  EXPECT_NE(md.find("| per-call | 20 | cpu | 25 | 20 | 0.0010 | 1.05× / 1.20× |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| actual | 30 | both | 30 | 30 | 0.0020 | 1.10× / 1.40× |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| default | 2 of 3 | 2500 µs (8.30× solo) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| static | 2 of 3 | - |"), std::string::npos) << md;
  // Text from a trace or a policy cannot open markup in a comment.
  r.plan = synthetic_plan(hostile_text());
  md = render_markdown(r);
  EXPECT_EQ(md.find("<script"), std::string::npos);
  EXPECT_EQ(md.find("](https://attacker"), std::string::npos);
}

// ---- sandgate plan --report: the real binary on the repository's traces (no root needed).

TEST(PlanCli, WritesAReportWithTheCapacityCurve) {
  sandgate::testing::TempDir dir;
  std::string out = dir / "plan-report";
  auto r = run_command(
      {SANDGATE_BINARY, "plan", "--traces", sandgate::testing::source_dir() + "/traces",
       "--host-memory", "4GiB", "--host-cpus", "2", "--trials", "2000", "--report", out},
      std::chrono::seconds(120), 8 << 20);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_TRUE(r->status.exited && r->status.code == 0) << r->output;
  auto report = load_report(out + "/report.json");
  ASSERT_TRUE(report.ok()) << report.error().message();
  EXPECT_EQ(report->job, "plan");
  EXPECT_TRUE(report->host.contains("sections")) << "the doctor's findings";
  ASSERT_TRUE(report->plan);
  // Every recording in traces/ is read.
  size_t recorded = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(sandgate::testing::source_dir() + "/traces"))
    recorded += e.path().extension() == ".trace";
  EXPECT_GE(recorded, 4u);
  EXPECT_EQ(report->plan->traces, recorded);
  EXPECT_EQ(report->plan->trace_files.size(), recorded);
  ASSERT_EQ(report->plan->fits.size(), 5u);
  for (const auto& f : report->plan->fits) {
    SCOPED_TRACE(f.policy);
    ASSERT_FALSE(f.risk_curve.empty());
    EXPECT_EQ(f.risk_curve.front().runs, 1u);
    EXPECT_EQ(f.risk_curve.back().runs, report->plan->curve_max_runs);
    // CPU counted: both answers, the headline the smaller, on the same N axis.
    ASSERT_TRUE(f.cpu);
    EXPECT_EQ(f.fits, std::min(f.cpu->fits_by_memory, f.cpu->fits_by_cpu_demand));
    EXPECT_EQ(f.cpu->cpu_risk_curve.size(), f.risk_curve.size());
  }
  EXPECT_EQ(report->plan->schema_version, 2);
  EXPECT_EQ(report->plan->cpu_overcommit, 1.0);
  for (const char* file : {"report.html", "junit.xml", "report.sarif", "summary.md"})
    EXPECT_TRUE(std::filesystem::exists(out + "/" + file)) << file;
  std::ifstream in(out + "/report.html");
  std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(html.find("<svg id=\"capacity-curve\""), std::string::npos);
  EXPECT_EQ(occurrences(html, "class=\"series\""), 5u);
  EXPECT_EQ(occurrences(html, "class=\"series-cpu\""), 5u);
  EXPECT_NE(html.find("<th>binding</th>"), std::string::npos);
}

}  // namespace
}  // namespace sandgate::reports
