// The inline SVG charts of the HTML report, drawn by sandgate (no charting library, nothing
// fetched). Each chart is an <svg> with an id the browser check looks for; hover text is an
// SVG <title> (no script).
//
// Extension point: a job that fills more of the model adds its charts to charts_for() (the
// replay's burst timeline per trace, the victim's latency distribution per policy, the plan's
// capacity curve), each a function from the report to a Chart; render_html() shows whatever
// charts_for() returns, in order.
#pragma once

#include <string>
#include <vector>

#include "reports/model.h"

namespace sandgate::reports {

struct Chart {
  std::string id;       // the <svg> element's id: "probe-matrix"
  std::string title;    // the figure caption
  std::string svg;      // the <svg> element, escaped
  std::string caption;  // a sentence under it (escaped HTML)
};

// Providers x probes, a cell per verdict coloured by it; hover: provider, probe, verdict,
// layer and the evidence. Absent when no provider ran the probes.
std::optional<Chart> probe_matrix_chart(const Report& r);
// create + exec + destroy per provider, as bars, with the ratio to the baseline provider.
std::optional<Chart> run_cost_chart(const Report& r);
// One call of true per provider: through the provider alone and through the controller.
std::optional<Chart> call_cost_chart(const Report& r);
// The short replay per provider: its calls stacked by how they ended, with the fidelity.
std::optional<Chart> replay_chart(const Report& r);

// The plan's risk of exceeding the host against the number of runs, a line per sizing model,
// the accepted risk dashed. Absent without a plan.
std::optional<Chart> capacity_curve_chart(const Report& r);
// The replay's victim per policy (and alone): p50, p90, p99 and max on a log scale. Absent
// when no policy ran a victim.
std::optional<Chart> victim_latency_chart(const Report& r);
// One per replayed run (policy x trace), ids burst-timeline-1, -2, ...: memory and CPU over
// time, calls shaded by intent, ladder actions marked. At most kMaxTimelines.
inline constexpr size_t kMaxTimelines = 24;
std::vector<Chart> burst_timeline_charts(const Report& r);

// Every chart the report has data for, in page order.
std::vector<Chart> charts_for(const Report& r);

// The colour of a verdict in every chart and table ("#2e7d32" for blocked, ...).
const char* verdict_colour(probes::Verdict v);

}  // namespace sandgate::reports
