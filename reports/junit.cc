// JUnit XML, the shape every CI reads (Jenkins, GitLab, GitHub test reporters): <testsuites>,
// a <testsuite> per provider, a <testcase> per probe. Text goes through clean_text (no
// character XML 1.0 forbids is left) and escape_markup; no CDATA, so "]]>" is only ever text.
#include <fmt/format.h>

#include "reports/text.h"
#include "reports/writers.h"

namespace sandgate::reports {
namespace {

std::string x(std::string_view s, size_t max = 400) {
  CleanOptions o;
  o.max_bytes = max;
  return escape_markup(clean_text(s, o));
}

std::string body(std::string_view s, size_t max = 4000) {
  CleanOptions o;
  o.max_bytes = max;
  o.keep_newlines = true;
  return escape_markup(clean_text(s, o));
}

struct Counts {
  size_t tests = 0, failures = 0, skipped = 0;
};

// The failure text: why, what the host saw, the fix.
std::string evidence(const Report& r, const ProbeVerdict& v) {
  std::string text = "tried: " + v.attempt + "\nwhy: " + v.why + "\n";
  const Json& host = v.judgement.contains("host") ? v.judgement["host"] : Json();
  if (host.is_object())
    for (const auto& [key, lines] : host.items())
      if (lines.is_array())
        for (const auto& line : lines)
          text += "host " + key + ": " +
                  (line.is_string() ? line.get<std::string>() : dump_json(line)) + "\n";
  if (auto rule = r.rules.find(v.id); rule != r.rules.end())
    text += "fix: " + rule->second.remediation + "\n";
  return text;
}

std::string suite(const Report& r, const ProviderReport& p, Counts& total) {
  Counts c;
  std::string cases;
  // The provider's own verdict: a case that fails when it is not qualified, so a provider that
  // could not even run is a red line too, not an empty suite.
  ++c.tests;
  cases +=
      fmt::format("    <testcase classname=\"sandgate.{}\" name=\"qualified\"", x(p.name, 200));
  if (p.qualified) {
    cases += "/>\n";
  } else {
    ++c.failures;
    std::string why;
    for (const auto& d : p.disqualifications) why += d + "\n";
    cases += fmt::format(
        ">\n      <failure type=\"disqualified\" message=\"{}\">{}</failure>\n    </testcase>\n",
        x(p.disqualifications.empty() ? "not qualified" : p.disqualifications.front()), body(why));
  }
  if (p.probes) {
    for (const auto& v : *p.probes) {
      ++c.tests;
      cases += fmt::format("    <testcase classname=\"sandgate.{}.{}\" name=\"{}\"", x(p.name, 200),
                           x(v.boundary, 40), x(v.id, 120));
      switch (v.verdict) {
        case probes::Verdict::kBlocked:
          cases +=
              fmt::format(">\n      <system-out>blocked by {}: {}</system-out>\n    </testcase>\n",
                          x(v.layer.empty() ? "-" : v.layer, 40), body(v.why, 1000));
          break;
        case probes::Verdict::kExposed:
          ++c.failures;
          cases += fmt::format(
              ">\n      <failure type=\"exposed\" message=\"{}\">{}</failure>\n    </testcase>\n",
              x("exposed: " + v.why, 300), body(evidence(r, v)));
          break;
        case probes::Verdict::kInconclusive:
          ++c.skipped;
          cases += fmt::format(">\n      <skipped message=\"{}\"/>\n    </testcase>\n",
                               x("inconclusive: " + v.why, 600));
          break;
        case probes::Verdict::kWarning:
          cases += fmt::format(">\n      <system-out>{}</system-out>\n    </testcase>\n",
                               body("warning: " + evidence(r, v)));
          break;
      }
    }
  }
  total.tests += c.tests;
  total.failures += c.failures;
  total.skipped += c.skipped;
  std::string props = fmt::format(
      "    <properties>\n      <property name=\"unsafe\" value=\"{}\"/>\n"
      "      <property name=\"display_name\" value=\"{}\"/>\n",
      p.unsafe ? "true" : "false", x(p.display_name));
  if (p.unavailable)
    props +=
        fmt::format("      <property name=\"unavailable\" value=\"{}\"/>\n", x(*p.unavailable));
  props += "    </properties>\n";
  double seconds = p.probes_wall_ms.value_or(0) / 1000.0;
  return fmt::format(
      "  <testsuite name=\"sandgate.{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" "
      "time=\"{:.3f}\">\n{}{}  </testsuite>\n",
      x(p.name, 200), c.tests, c.failures, c.skipped, seconds, props, cases);
}

}  // namespace

std::string render_junit(const Report& r) {
  Counts total;
  std::string suites;
  for (const auto& p : r.providers) suites += suite(r, p, total);
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"sandgate {}\" tests=\"{}\" "
      "failures=\"{}\" errors=\"0\" skipped=\"{}\">\n{}</testsuites>\n",
      x(r.job, 40), total.tests, total.failures, total.skipped, suites);
}

}  // namespace sandgate::reports
