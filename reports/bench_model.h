// The bench section of the report model (reports/model.h Report::bench): the fixed benchmark
// set `sandgate bench` measures, one figure each, so that `sandgate gate` compares two
// commits' figures measured on the same machine.
//
// A figure is either paired or absolute:
// - paired: samples[i] and baseline_samples[i] were taken side by side in round i (the
//   subject, then its baseline, interleaved as qualify does); the gate compares the median of
//   the ratios samples[i] / baseline_samples[i], which cancels what the machine was doing.
// - absolute: no honest baseline exists in the same round (baseline_samples is empty); the
//   gate compares the samples' medians directly, which is only meaningful between two runs on
//   the same machine.
// A figure that could not be measured has `skipped` (the reason) and no samples.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/json.h"

namespace sandgate::reports {

struct BenchFigure {
  std::string name;  // "run.namespaces_vs_bwrap": <area>.<subject>, the gate's key bench/<name>
  std::string what;  // the subject, in words
  std::string unit;  // of samples and baseline_samples ("ms", "%")
  std::vector<double> samples;           // the subject, one per round
  std::vector<double> baseline_samples;  // paired with samples; empty: an absolute figure
  std::string baseline_what;  // the baseline in words; for an absolute figure, why it has none
  std::optional<std::string> skipped;  // why it was not measured; absent when it was

  bool paired() const { return !baseline_samples.empty(); }
};

Json to_json(const BenchFigure& f);
Json bench_json(const std::vector<BenchFigure>& figures);

namespace detail {
class Reader;
}
// Strict, as the rest of the model: unknown or missing fields, a paired figure whose sample
// counts differ, a skipped figure with samples, a name given twice are errors naming the path.
// Throws detail::FieldError (caught by report_from_json).
std::vector<BenchFigure> bench_from(detail::Reader& r, const std::string& key);

// The figure's summary: the median of the paired ratios (paired), else of the samples; nullopt
// when there is none.
std::optional<double> bench_median(const BenchFigure& f);

}  // namespace sandgate::reports

namespace sandgate::reports {
struct Report;
// An empty report of job "bench" with this sandgate's version and an empty bench section, for
// `sandgate bench` to fill.
Report bench_report_skeleton();
}  // namespace sandgate::reports
