#include "reports/bench_model.h"

#include <set>

#include "core/stats.h"
#include "reports/field_reader.h"
#include "reports/model.h"

namespace sandgate::reports {

Json to_json(const BenchFigure& f) {
  Json j = {{"name", f.name},
            {"what", f.what},
            {"unit", f.unit},
            {"samples", f.samples},
            {"baseline_samples", f.baseline_samples},
            {"baseline_what", f.baseline_what}};
  if (f.skipped) j["skipped"] = *f.skipped;
  return j;
}

Json bench_json(const std::vector<BenchFigure>& figures) {
  Json out = Json::array();
  for (const auto& f : figures) out.push_back(to_json(f));
  return out;
}

std::vector<BenchFigure> bench_from(detail::Reader& parent, const std::string& key) {
  const Json& list = parent.array(key);
  std::vector<BenchFigure> out;
  std::set<std::string> names;
  for (size_t i = 0; i < list.size(); ++i) {
    detail::Reader r(list[i], parent.at(key, i));
    BenchFigure f;
    f.name = r.str("name");
    if (f.name.empty()) r.fail("name", "empty");
    if (!names.insert(f.name).second) r.fail("name", "a second figure named \"" + f.name + "\"");
    f.what = r.str("what");
    f.unit = r.str("unit");
    f.samples = r.numbers("samples");
    f.baseline_samples = r.numbers("baseline_samples");
    f.baseline_what = r.str("baseline_what");
    f.skipped = r.opt_str("skipped");
    r.done();
    if (f.skipped && !f.samples.empty()) r.fail("samples", "a skipped figure has none");
    if (!f.skipped && f.samples.empty()) r.fail("samples", "empty, and the figure is not skipped");
    if (f.paired() && f.baseline_samples.size() != f.samples.size())
      r.fail("baseline_samples", "paired with samples, so as many (" +
                                     std::to_string(f.samples.size()) + "), got " +
                                     std::to_string(f.baseline_samples.size()));
    out.push_back(std::move(f));
  }
  return out;
}

std::optional<double> bench_median(const BenchFigure& f) {
  std::vector<double> values =
      f.paired() ? paired_ratios(f.samples, f.baseline_samples) : f.samples;
  if (values.empty()) return std::nullopt;
  return stats::median(values);
}

}  // namespace sandgate::reports

namespace sandgate::reports {

Report bench_report_skeleton() {
  Report r;
  r.job = "bench";
#ifdef SANDGATE_VERSION
  r.sandgate_version = SANDGATE_VERSION;
#else
  r.sandgate_version = "unknown";
#endif
  r.bench.emplace();
  return r;
}

}  // namespace sandgate::reports
