// The writers: one report model (reports/model.h), five renderings. Each escapes what it
// prints (reports/text.h): probe evidence is attacker-controlled text.
#pragma once

#include <string>
#include <vector>

#include "core/result.h"
#include "reports/model.h"

namespace sandgate::reports {

enum class Format { kJson, kHtml, kJunit, kSarif, kMarkdown };

// "json", "html", "junit", "sarif", "md" (also "markdown"); an error lists them.
Result<Format> parse_format(const std::string& name);
// The file qualify writes each format to: report.json, report.html, junit.xml, report.sarif,
// summary.md.
std::string default_file_name(Format f);
const std::vector<Format>& all_formats();

// The model itself, indented.
std::string render_json(const Report& r);
// One self-contained page: inline CSS and SVG, no script, nothing fetched (a
// Content-Security-Policy of default-src 'none' says so to the browser too).
std::string render_html(const Report& r);
// A suite per provider, a test case per probe: exposed = failure, inconclusive = skipped with
// the reason, warning = passed with the warning in system-out; plus a "qualified" case that
// fails with the provider's disqualifications.
std::string render_junit(const Report& r);
// SARIF 2.1.0: a rule per probe id, a result per exposed (error) and warning (warning) verdict.
std::string render_sarif(const Report& r);

struct MarkdownOptions {
  // What changed against a baseline, one line each, most important first: printed before
  // anything else. The gate (`sandgate gate`, later) computes it; empty: no baseline.
  std::vector<std::string> what_changed;
  // At most this many exposed (and, separately, warning) probes are listed; the rest counted.
  size_t max_listed = 20;
};
// A short summary for a pull-request comment or a CI job summary.
std::string render_markdown(const Report& r, const MarkdownOptions& options = {});

std::string render(const Report& r, Format f);

// Writes `text` to `path` atomically (a temporary file beside it, fsync, rename), mode 0644.
Status write_report_file(const std::string& path, std::string_view text);

// Every format into `dir` under its default file name, each written atomically.
Status write_all_formats(const Report& r, const std::string& dir);

}  // namespace sandgate::reports
