// The report reader (reports/model.cc report_from_json over field_reader.h, and from_qualify.cc
// for probe reports and qualify.json): what `sandgate report`, `gate` and `report merge` read
// back, and a probe's evidence inside it is the sandbox's. The same dispatch as load_report,
// on bytes instead of a file. A report that reads writes out as one that reads the same.
#include "core/json.h"
#include "reports/from_qualify.h"
#include "reports/model.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandgate;
  using namespace sandgate::reports;
  auto j = parse_bounded_json(fuzz::as_text(data, size), "report.json");
  if (!j.ok()) {
    (void)j.error().message();
    return 0;
  }
  Result<Report> report = logic_error("fuzz", "not a report");
  if (j->is_object() && j->contains("type")) {
    report = report_from_json(*j);
  } else if (j->is_object() && j->contains("runs")) {
    report = from_probe_report(*j, Json::object());
  } else if (j->is_object() && j->contains("providers")) {
    report = from_qualify(*j, {});
  }
  if (!report.ok()) {
    (void)report.error().message();
    return 0;
  }
  // What every writer starts from; then the model read back from its own JSON.
  std::string text = dump_json(to_json(*report));
  auto back = parse_bounded_json(text, "written");
  FUZZ_CHECK(back.ok(), "a written report is not JSON: " + fuzz::brief(text));
  auto again = report_from_json(*back);
  FUZZ_CHECK(again.ok(), "a written report does not read: " + again.error().message());
  FUZZ_CHECK(to_json(*again) == *back, "a report changed on the way out and back");
  (void)probe_differences(*report);
  for (const auto& p : report->providers) (void)cost_ratios(*report, p);
  return 0;
}
