#include "reports/writers.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <regex>

#include "core/process.h"
#include "core/test_temp_dir.h"
#include "reports/test_reports.h"

namespace sandgate::reports {
namespace {

using testing::hostile_report;
using testing::real_report;

// What every writer's output must be, whatever the sandbox wrote: valid UTF-8, no control
// character but the line break, no escape sequence, no bidirectional override, nothing of the
// hostile text past the writer's cut, and the cut said.
void expect_inert(const std::string& out, const std::string& format,
                  const std::string& shown = "\\x1b[31mRED") {
  SCOPED_TRACE(format);
  std::string copy = out;
  EXPECT_EQ(make_valid_utf8(copy), 0u) << "invalid UTF-8";
  for (size_t i = 0; i < out.size(); ++i) {
    auto c = static_cast<unsigned char>(out[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7f) {
      ADD_FAILURE() << "control byte " << int(c) << " at " << i << ": "
                    << out.substr(i > 40 ? i - 40 : 0, 80);
      break;
    }
  }
  EXPECT_EQ(out.find("\xc2\x9b"), std::string::npos) << "C1 CSI";
  EXPECT_EQ(out.find("\xe2\x80\xae"), std::string::npos) << "bidi override";
  EXPECT_EQ(out.find("TAIL-NEVER-SHOWN"), std::string::npos) << "the long line was not cut";
  EXPECT_NE(out.find("[cut: "), std::string::npos) << "no note that text was cut";
  // The hostile text is shown, inert, not dropped.
  EXPECT_NE(out.find(shown), std::string::npos);
}

// Markup outputs: no element, comment or CDATA end from the hostile text.
void expect_no_markup_from_text(const std::string& out) {
  EXPECT_EQ(out.find("<script"), std::string::npos);
  EXPECT_EQ(out.find("<img"), std::string::npos);
  EXPECT_EQ(out.find("]]>"), std::string::npos);
  EXPECT_EQ(out.find("-->"), std::string::npos);
  EXPECT_EQ(out.find("<!--"), std::string::npos);
  EXPECT_NE(out.find("&lt;script&gt;"), std::string::npos);
}

std::string python3() { return ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : ""; }

// Runs a Python check on `text` (as the file in argv[1]); its output on failure.
void python_check(const std::string& script, const std::string& text, const std::string& name) {
  sandgate::testing::TempDir dir;
  std::ofstream(dir / name) << text;
  auto r = run_command({python3(), "-c", script, dir / name});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->status.shell_code(), 0) << r->output;
  EXPECT_NE(r->output.find("ok"), std::string::npos) << r->output;
}

TEST(JsonWriter, IsTheModelAndSurvivesHostileText) {
  Report r = hostile_report();
  std::string out = render_json(r);
  auto parsed = parse_json(out, "report.json");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  auto back = report_from_json(*parsed);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->providers.size(), 3u);
  // JSON escapes control characters itself; invalid UTF-8 is replaced, never thrown on.
  std::string copy = out;
  EXPECT_EQ(make_valid_utf8(copy), 0u);
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
  EXPECT_NE(out.find("\\u001b[31mRED"), std::string::npos);
}

TEST(HtmlWriter, RendersARealReport) {
  std::string out = render_html(real_report());
  for (const char* id : {"probe-matrix", "run-costs", "call-costs", "replay-summary"})
    EXPECT_NE(out.find(std::string("<svg id=\"") + id + "\""), std::string::npos) << id;
  EXPECT_NE(out.find("host_dir · creds.env_tokens: exposed"), std::string::npos);
  EXPECT_NE(out.find("namespaces · creds.keyctl_session: blocked (seccomp)"), std::string::npos);
  EXPECT_NE(out.find("EPERM from the seccomp filter (keyctl)"), std::string::npos);
  EXPECT_NE(out.find("the unsafe provider"), std::string::npos);
  EXPECT_NE(out.find("× host_dir"), std::string::npos);  // a run cost as a ratio
  EXPECT_NE(out.find("<b>Fix:</b>"), std::string::npos);
}

// Without a baseline provider (the default qualify has none), the run costs are shown as
// ratios to the bare spawn measured in the same rounds: in the HTML chart and in the Markdown.
TEST(Writers, RunCostsAreRatiosToTheSpawnBaselineWithoutABaselineProvider) {
  Report r = real_report();
  std::erase_if(r.providers, [](const ProviderReport& p) { return p.unsafe; });
  r.baseline_provider = "";
  ASSERT_FALSE(r.providers.empty());
  ProviderReport& p = r.providers[0];
  p.costs.run_samples_ms = {10, 12, 11};
  p.costs.run_ms = 11;
  r.spawn_samples_ms = {2, 3, 2};  // ratios 5, 4, 5.5: median 5
  std::string html = render_html(r);
  EXPECT_NE(html.find("(5.00× a bare spawn)"), std::string::npos);
  EXPECT_NE(html.find("over a bare spawn of /bin/true"), std::string::npos);
  std::string md = render_markdown(r);
  EXPECT_NE(md.find("(5.0× spawn)"), std::string::npos) << md;
  EXPECT_NE(md.find("Run ratios are to a bare spawn"), std::string::npos) << md;
  r.spawn_samples_ms.clear();
  EXPECT_EQ(render_html(r).find("a bare spawn"), std::string::npos);
}

TEST(HtmlWriter, FetchesNothing) {
  for (const Report& r : {real_report(), hostile_report()}) {
    std::string out = render_html(r);
    std::regex fetch(R"((src|href|action|poster|data)\s*=\s*["']?\s*(https?:)?//)",
                     std::regex::icase);
    EXPECT_FALSE(std::regex_search(out, fetch));
    EXPECT_EQ(out.find("url("), std::string::npos);
    EXPECT_EQ(out.find("@import"), std::string::npos);
    EXPECT_EQ(out.find("<link"), std::string::npos);
    EXPECT_EQ(out.find("<script"), std::string::npos);
    EXPECT_NE(out.find("default-src 'none'"), std::string::npos);
  }
}

TEST(HtmlWriter, HostileTextIsInert) {
  std::string out = render_html(hostile_report());
  expect_inert(out, "html");
  expect_no_markup_from_text(out);
  // Inside an SVG <title> too (the matrix's hover text).
  EXPECT_NE(out.find("<title>evil\\x1b[31mRED"), std::string::npos);
}

const char* kJunitCheck = R"(
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == 'testsuites', root.tag
total = dict(tests=0, failures=0, skipped=0)
for s in root:
    assert s.tag == 'testsuite', s.tag
    cases = s.findall('testcase')
    fails = [c for c in cases if c.find('failure') is not None]
    skips = [c for c in cases if c.find('skipped') is not None]
    assert int(s.get('tests')) == len(cases), (s.get('name'), s.get('tests'), len(cases))
    assert int(s.get('failures')) == len(fails)
    assert int(s.get('skipped')) == len(skips)
    assert int(s.get('errors')) == 0
    float(s.get('time'))
    for c in cases:
        assert c.get('name') and c.get('classname'), c.attrib
        for f in c.findall('failure'):
            assert f.get('message') and f.get('type') in ('exposed', 'disqualified'), f.attrib
        for k in c.findall('skipped'):
            assert k.get('message').startswith('inconclusive: ')
    total['tests'] += len(cases); total['failures'] += len(fails); total['skipped'] += len(skips)
for k, v in total.items():
    assert int(root.get(k)) == v, (k, root.get(k), v)
print('ok', *(f'{k}={v}' for k, v in total.items()), 'suites=%d' % len(root))
)";

TEST(JunitWriter, IsWellFormedWithASuitePerProviderAndACasePerProbe) {
  SANDGATE_REQUIRE(!python3().empty(), "python3 parses the XML (ci/bootstrap installs it)");
  std::string out = render_junit(real_report());
  python_check(kJunitCheck, out, "junit.xml");
  // 2 suites; 1 + 7 cases each; host_dir: 7 exposed + not qualified.
  python_check(std::string(kJunitCheck) +
                   "assert total == dict(tests=16, failures=8, skipped=0), total\n"
                   "assert len(root) == 2\nprint('ok counts')\n",
               out, "junit.xml");
  EXPECT_NE(out.find("<failure type=\"exposed\""), std::string::npos);
}

TEST(JunitWriter, HostileTextIsInertAndStillParses) {
  SANDGATE_REQUIRE(!python3().empty(), "python3 parses the XML (ci/bootstrap installs it)");
  std::string out = render_junit(hostile_report());
  expect_inert(out, "junit");
  expect_no_markup_from_text(out);
  python_check(
      std::string(kJunitCheck) +
          "s = root[2]\n"
          "assert [c.find('skipped') is not None for c in s.findall('testcase')][2], 'skipped'\n"
          "assert '<script>' in s.find('testcase/failure').text\n"
          "print('ok hostile')\n",
      out, "junit.xml");
}

// The SARIF 2.1.0 structure a consumer requires (sarif-schema-2.1.0.json: sarifLog needs
// version and runs; run needs tool; tool needs driver; driver needs name; a result needs a
// message; reportingDescriptor needs id; level is one of none/note/warning/error).
void check_sarif(const std::string& out, size_t want_results) {
  auto j = parse_json(out, "report.sarif");
  ASSERT_TRUE(j.ok()) << j.error().message();
  EXPECT_EQ((*j)["version"], "2.1.0");
  EXPECT_NE((*j)["$schema"].get<std::string>().find("sarif-schema-2.1.0.json"), std::string::npos);
  ASSERT_TRUE((*j)["runs"].is_array());
  ASSERT_EQ((*j)["runs"].size(), 1u);
  const Json& run = (*j)["runs"][0];
  const Json& driver = run["tool"]["driver"];
  EXPECT_EQ(driver["name"], "sandgate");
  ASSERT_TRUE(driver["rules"].is_array());
  std::set<std::string> ids;
  for (const auto& rule : driver["rules"]) {
    ASSERT_TRUE(rule["id"].is_string());
    EXPECT_TRUE(ids.insert(rule["id"].get<std::string>()).second) << "duplicate rule id";
    EXPECT_FALSE(rule["shortDescription"]["text"].get<std::string>().empty());
    EXPECT_FALSE(rule["fullDescription"]["text"].get<std::string>().empty());
    EXPECT_NE(rule["help"]["text"].get<std::string>().find("Fix: "), std::string::npos);
  }
  ASSERT_TRUE(run["results"].is_array());
  EXPECT_EQ(run["results"].size(), want_results);
  for (const auto& res : run["results"]) {
    ASSERT_TRUE(res["ruleId"].is_string());
    EXPECT_TRUE(ids.count(res["ruleId"].get<std::string>())) << res["ruleId"];
    const std::string& rule_id = driver["rules"][res["ruleIndex"].get<size_t>()]["id"];
    EXPECT_EQ(rule_id, res["ruleId"]);
    EXPECT_TRUE(res["level"] == "error" || res["level"] == "warning") << res["level"];
    EXPECT_FALSE(res["message"]["text"].get<std::string>().empty());
    EXPECT_FALSE(res["locations"].empty());
  }
}

TEST(SarifWriter, HasTheRequiredStructure) {
  std::string out = render_sarif(real_report());
  check_sarif(out, 7);  // host_dir's 7 exposed probes; namespaces has none
  EXPECT_NE(out.find("\"level\": \"error\""), std::string::npos);
  EXPECT_NE(out.find("host_dir is exposed: creds.env_tokens"), std::string::npos);
}

TEST(SarifWriter, HostileTextIsInert) {
  std::string out = render_sarif(hostile_report());
  check_sarif(out, 7 + 3);  // + the hostile provider's 2 exposed and 1 warning
  expect_inert(out, "sarif");
  EXPECT_EQ(out.find("\\u001b"), std::string::npos) << "an escape sequence survived as JSON";
  EXPECT_NE(out.find("\"level\": \"warning\""), std::string::npos);
}

TEST(MarkdownWriter, SummarisesExposedFirst) {
  std::string out = render_markdown(real_report());
  auto exposed = out.find("### Exposed");
  auto table = out.find("| provider |");
  ASSERT_NE(exposed, std::string::npos);
  ASSERT_NE(table, std::string::npos);
  EXPECT_LT(exposed, table);
  EXPECT_NE(out.find("- **host\\_dir** creds.env\\_tokens:"), std::string::npos) << out;
  EXPECT_NE(out.find("| namespaces | yes | 0 | 7 | 0 | 0 |"), std::string::npos) << out;
  EXPECT_EQ(out.find("### What changed"), std::string::npos);
}

TEST(MarkdownWriter, WhatChangedComesFirst) {
  MarkdownOptions o;
  o.what_changed = {"namespaces: creds.env_tokens was blocked, is exposed"};
  std::string out = render_markdown(real_report(), o);
  auto changed = out.find("### What changed");
  ASSERT_NE(changed, std::string::npos);
  EXPECT_LT(changed, out.find("### Exposed"));
}

TEST(MarkdownWriter, HostileTextIsInert) {
  std::string out = render_markdown(hostile_report());
  expect_inert(out, "markdown", "\\\\x1b\\[31mRED");
  EXPECT_EQ(out.find("<script"), std::string::npos);
  EXPECT_EQ(out.find("[link]("), std::string::npos) << "a live link";
  // Every table row keeps its 8 cells: no '|' from the text splits one.
  std::regex unescaped_pipe(R"((^|[^\\])\|)");
  for (size_t at = out.find("\n| "); at != std::string::npos; at = out.find("\n| ", at + 1)) {
    std::string row = out.substr(at + 1, out.find('\n', at + 1) - at - 1);
    auto n = std::distance(std::sregex_iterator(row.begin(), row.end(), unescaped_pipe),
                           std::sregex_iterator());
    EXPECT_EQ(n, 9) << row.substr(0, 200);
  }
}

TEST(Writers, FormatsByName) {
  EXPECT_EQ(*parse_format("md"), Format::kMarkdown);
  EXPECT_EQ(*parse_format("junit"), Format::kJunit);
  auto bad = parse_format("pdf");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("html, junit, sarif, md or json"), std::string::npos);
}

TEST(Writers, WritesEveryFormat) {
  sandgate::testing::TempDir dir;
  ASSERT_TRUE(write_all_formats(real_report(), dir.path()).ok());
  for (const char* f : {"report.json", "report.html", "junit.xml", "report.sarif", "summary.md"})
    EXPECT_GT(std::filesystem::file_size(dir / f), 1000u) << f;
}

}  // namespace
}  // namespace sandgate::reports
