// The bench section of the model: its round trip, its strict reading, and that a report
// without it (every qualify report) still reads.
#include "reports/bench_model.h"

#include <gtest/gtest.h>

#include "reports/model.h"
#include "reports/test_reports.h"
#include "reports/writers.h"

namespace sandgate::reports {
namespace {

using testing::error_of;

Report bench_report() {
  Report r;
  r.job = "bench";
  r.bench =
      std::vector<BenchFigure>{{"run.namespaces_vs_bwrap",
                                "namespaces create + exec(true) + destroy",
                                "ms",
                                {6.1, 5.9, 6.4},
                                {3.0, 2.9, 3.3},
                                "bwrap --unshare-all ... /bin/true",
                                std::nullopt},
                               {"replay.fidelity",
                                "the short replay's call end error p95",
                                "ms",
                                {12, 15, 11},
                                {},
                                "none: absolute, machine-dependent",
                                std::nullopt},
                               {"burst.reaction_p95",
                                "the first ladder action after a burst",
                                "ms",
                                {},
                                {},
                                "",
                                std::string("sandgate-try is not installed beside sandgate")}};
  return r;
}

TEST(BenchModel, RoundTripsThroughJson) {
  Json once = to_json(bench_report());
  ASSERT_TRUE(once.contains("bench"));
  EXPECT_TRUE(once["bench"][2]["samples"].empty());
  EXPECT_EQ(once["bench"][2]["skipped"], "sandgate-try is not installed beside sandgate");
  EXPECT_FALSE(once["bench"][0].contains("skipped"));
  auto back = report_from_json(once);
  ASSERT_TRUE(back.ok()) << back.error().message();
  ASSERT_TRUE(back->bench);
  ASSERT_EQ(back->bench->size(), 3u);
  EXPECT_TRUE((*back->bench)[0].paired());
  EXPECT_FALSE((*back->bench)[1].paired());
  EXPECT_EQ((*back->bench)[2].skipped, "sandgate-try is not installed beside sandgate");
  EXPECT_EQ(to_json(*back), once);
}

TEST(BenchModel, AReportWithoutTheSectionReadsAndWritesNone) {
  Json j = to_json(testing::real_report());
  EXPECT_FALSE(j.contains("bench"));
  auto r = report_from_json(j);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_FALSE(r->bench);
}

TEST(BenchModel, MedianIsOfTheRatiosWhenPairedElseOfTheSamples) {
  auto figures = *bench_report().bench;
  EXPECT_NEAR(*bench_median(figures[0]), 6.1 / 3.0, 1e-9);  // ratios 2.03, 2.03, 1.94
  EXPECT_EQ(*bench_median(figures[1]), 12);
  EXPECT_FALSE(bench_median(figures[2]));
}

TEST(BenchModel, ErrorsNameTheField) {
  Json good = to_json(bench_report());
  Json j = good;
  j["bench"][0]["speed"] = 1;
  EXPECT_NE(error_of(j).find("bench[0].speed: unknown field"), std::string::npos) << error_of(j);
  j = good;
  j["bench"][1].erase("unit");
  EXPECT_NE(error_of(j).find("bench[1].unit: missing"), std::string::npos) << error_of(j);
  j = good;
  j["bench"][0]["baseline_samples"] = {1.0, 2.0};
  EXPECT_NE(error_of(j).find("bench[0].baseline_samples: paired with samples, so as many (3)"),
            std::string::npos)
      << error_of(j);
  j = good;
  j["bench"][0]["samples"][1] = "fast";
  EXPECT_NE(error_of(j).find("bench[0].samples[1]: expected a number"), std::string::npos)
      << error_of(j);
  j = good;
  j["bench"][2]["samples"] = {1.0};
  EXPECT_NE(error_of(j).find("bench[2].samples: a skipped figure has none"), std::string::npos)
      << error_of(j);
  j = good;
  j["bench"][1]["samples"] = Json::array();
  EXPECT_NE(error_of(j).find("bench[1].samples: empty, and the figure is not skipped"),
            std::string::npos)
      << error_of(j);
  j = good;
  j["bench"][1]["name"] = "run.namespaces_vs_bwrap";
  EXPECT_NE(error_of(j).find("bench[1].name: a second figure"), std::string::npos) << error_of(j);
  j = good;
  j["bench"] = Json::object();
  EXPECT_NE(error_of(j).find("bench: expected an array"), std::string::npos) << error_of(j);
}

TEST(BenchModel, MarkdownAndHtmlShowTheFiguresEscaped) {
  Report r = bench_report();
  (*r.bench)[2].skipped = "<script>alert(1)</script> | [x](http://evil)";
  std::string md = render_markdown(r, {});
  EXPECT_NE(md.find("## sandgate bench\n"), std::string::npos) << md;
  EXPECT_NE(md.find("### Benchmarks"), std::string::npos) << md;
  EXPECT_NE(md.find("2.03×"), std::string::npos) << md;     // the paired figure, as a ratio
  EXPECT_NE(md.find("12.00 ms"), std::string::npos) << md;  // the absolute one, in its unit
  EXPECT_EQ(md.find("<script>"), std::string::npos) << md;
  EXPECT_NE(md.find("\\[x\\](http"), std::string::npos) << md;  // no link opens
  EXPECT_EQ(md.find("| provider |"), std::string::npos) << md;  // no empty providers table
  std::string html = render_html(r);
  EXPECT_NE(html.find("<h2 id=\"bench\">"), std::string::npos);
  EXPECT_NE(html.find("not measured"), std::string::npos);
  EXPECT_NE(html.find("2.03×"), std::string::npos);
  EXPECT_EQ(html.find("<script>"), std::string::npos);
}

}  // namespace
}  // namespace sandgate::reports
