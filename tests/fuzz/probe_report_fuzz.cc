// Probe reports (probes/probe_report.cc, probes/suite.cc parse_reports): sandgate-probe prints
// one JSON line per probe from inside the sandbox, and the judge reads them back. Everything in
// them is the sandbox's to shape. A report that reads back writes out as one that reads the same.
#include "core/json.h"
#include "probes/probe_report.h"
#include "probes/suite.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandgate;
  auto reports = probes::parse_reports(std::string(fuzz::as_text(data, size)), "sandgate-probe");
  if (!reports.ok()) {
    (void)reports.error().message();
    return 0;
  }
  for (const auto& r : *reports) {
    Json out = r.to_json();
    std::string line = dump_json(out);
    auto back = parse_json(line, "written");
    FUZZ_CHECK(back.ok(), "a written probe report is not JSON: " + fuzz::brief(line));
    auto again = probes::ProbeReport::from_json(*back);
    FUZZ_CHECK(again.ok(), "a written probe report does not read: " + again.error().message());
    FUZZ_CHECK(again->to_json() == *back, "a probe report changed: " + fuzz::brief(line));
  }
  return 0;
}
