// The report model filled from a qualify run: qualify.json (schema_version 2, cli/qualify.cc)
// and each provider's probe-<provider>.json (probes/suite.h, the judge's full judgements),
// which the report embeds so that one file carries everything.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "core/json.h"
#include "core/result.h"
#include "reports/model.h"

namespace sandgate::reports {

// The qualify.json schema this importer reads.
inline constexpr int kQualifySchemaVersion = 2;

// A provider's probe report (the whole probe-<provider>.json), by provider name.
using ProbeFiles = std::map<std::string, Json>;

// Errors name the field ("qualify.json: providers[1].probes.blocked: expected ...").
// A provider whose qualify entry has "probes" must have its file in `probe_files`.
Result<Report> from_qualify(const Json& qualify, const ProbeFiles& probe_files);

// The report model of a `sandgate probe` run (its --json file, probes/suite.h: schema 1, one
// run per provider, and in a self-test one per weakening, named "PROVIDER +WEAKENING"): job
// "probe", a provider per run with its verdicts, declared and contradicted capabilities;
// qualified when nothing was exposed. `host` is the doctor's findings (an empty object when
// not known). Errors name the field.
Result<Report> from_probe_report(const Json& probe_report, Json host);

// The JSON of a saved report, parsed without recursion, with containers nested deeper than 64
// levels cut (a string saying so takes the place of what was under the 64th level): copying,
// comparing and writing a JSON value recurse once per level. An error names `source`, line and
// column. load_report's parser, exposed for its fuzz harness (tests/fuzz/report_fuzz.cc).
Result<Json> parse_bounded_json(std::string_view text, const std::string& source);

// Reads a saved report: the model itself (type "sandgate-report"), a probe report (`sandgate
// probe --json`), or a qualify.json with its
// probe files, looked for beside it first (the directory may have moved since) and then at the
// path qualify.json names. JSON nested deeper than 64 levels (a probe's evidence can be) is
// cut there, with a note in its place: every writer would otherwise recurse that deep.
Result<Report> load_report(const std::string& path);

}  // namespace sandgate::reports
