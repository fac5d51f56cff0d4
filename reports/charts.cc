#include "reports/charts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "reports/text.h"

namespace sandgate::reports {
namespace {

// Text for an SVG <text> or <title>: cleaned, cut, escaped.
std::string svg_text(std::string_view s, size_t max = 200, bool newlines = false) {
  CleanOptions o;
  o.max_bytes = max;
  o.keep_newlines = newlines;
  return escape_markup(clean_text(s, o));
}

// Labels are cut to what fits: SVG text does not wrap.
constexpr size_t kLabelChars = 34;

std::string ms(double v) { return fmt::format("{:.1f} ms", v); }

// Horizontal bars, one row per provider, each row one or more bars (a group); the scale is
// the largest value. Returns the <svg>.
struct Bar {
  double value;
  std::string colour, label, hover;
};
struct BarRow {
  std::string name;
  std::vector<Bar> bars;  // empty: the row says `missing`
  std::string missing;
};

std::string bar_chart(const std::string& id, const std::string& title,
                      const std::vector<BarRow>& rows) {
  constexpr int kLeft = 200, kBarWidth = 360, kRight = 440, kBarHeight = 16, kGap = 10;
  double max = 0;
  for (const auto& row : rows)
    for (const auto& b : row.bars) max = std::max(max, b.value);
  if (max <= 0) max = 1;
  int height = 10;
  for (const auto& row : rows)
    height += static_cast<int>(std::max<size_t>(row.bars.size(), 1)) * (kBarHeight + 2) + kGap;
  int width = kLeft + kBarWidth + kRight;
  std::string s = fmt::format(
      "<svg id=\"{}\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" role=\"img\"><title>{}</title>\n",
      id, width, height, width, height, svg_text(title));
  int y = 10;
  for (const auto& row : rows) {
    size_t n = std::max<size_t>(row.bars.size(), 1);
    int row_height = static_cast<int>(n) * (kBarHeight + 2);
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"label\">{}</text>\n",
                     kLeft - 8, y + row_height / 2 + 5, svg_text(row.name, kLabelChars));
    if (row.bars.empty()) {
      s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"missing\">{}</text>\n", kLeft + 4,
                       y + row_height / 2 + 5, svg_text(row.missing, 80));
    }
    int by = y;
    for (const auto& b : row.bars) {
      int w = std::max(1, static_cast<int>(b.value / max * kBarWidth));
      s += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}</title></rect>"
          "<text x=\"{}\" y=\"{}\" class=\"value\">{}</text>\n",
          kLeft, by, w, kBarHeight, b.colour, svg_text(b.hover, 300), kLeft + w + 6,
          by + kBarHeight - 3, svg_text(b.label, 80));
      by += kBarHeight + 2;
    }
    y += row_height + kGap;
  }
  return s + "</svg>";
}

std::string ratio_note(const std::optional<double>& ratio, const std::string& base) {
  return ratio ? fmt::format(" ({:.2f}× {})", *ratio, base) : "";
}

}  // namespace

const char* verdict_colour(probes::Verdict v) {
  switch (v) {
    case probes::Verdict::kBlocked:
      return "#2e7d32";
    case probes::Verdict::kExposed:
      return "#c62828";
    case probes::Verdict::kInconclusive:
      return "#9e9e9e";
    case probes::Verdict::kWarning:
      return "#ef6c00";
  }
  return "#000000";
}

std::optional<Chart> probe_matrix_chart(const Report& r) {
  std::vector<const ProviderReport*> cols;
  for (const auto& p : r.providers)
    if (p.probes) cols.push_back(&p);
  if (cols.empty()) return std::nullopt;
  std::vector<std::string> ids;
  for (const auto* p : cols)
    for (const auto& v : *p->probes)
      if (std::find(ids.begin(), ids.end(), v.id) == ids.end()) ids.push_back(v.id);

  constexpr int kLeft = 250, kTop = 64, kCol = 150, kRow = 18;
  // Wide enough for the legend too, with one provider.
  int width = std::max(kLeft + kCol * static_cast<int>(cols.size()) + 10, 620);
  int height = kTop + kRow * static_cast<int>(ids.size()) + 10;
  std::string s = fmt::format(
      "<svg id=\"probe-matrix\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" role=\"img\"><title>Escape probes: providers × probes</title>\n",
      width, height, width, height);
  // The legend: what each colour says.
  int lx = 10;
  for (auto v : {probes::Verdict::kBlocked, probes::Verdict::kExposed,
                 probes::Verdict::kInconclusive, probes::Verdict::kWarning}) {
    s += fmt::format(
        "<rect x=\"{}\" y=\"6\" width=\"14\" height=\"14\" fill=\"{}\"/><text x=\"{}\" "
        "y=\"18\" class=\"label\">{}</text>\n",
        lx, verdict_colour(v), lx + 20, probes::to_string(v));
    lx += 120;
  }
  s += fmt::format(
      "<rect x=\"{}\" y=\"6\" width=\"14\" height=\"14\" fill=\"#eeeeee\"/><text x=\"{}\" "
      "y=\"18\" class=\"label\">not run</text>\n",
      lx, lx + 20);
  for (size_t c = 0; c < cols.size(); ++c)
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"label\">{}</text>\n",
                     kLeft + kCol * static_cast<int>(c) + kCol / 2, kTop - 12,
                     svg_text(cols[c]->name + (cols[c]->unsafe ? " (unsafe)" : ""), 24));
  for (size_t i = 0; i < ids.size(); ++i) {
    int y = kTop + kRow * static_cast<int>(i);
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"label\">{}</text>\n",
                     kLeft - 8, y + kRow - 5, svg_text(ids[i], kLabelChars));
    for (size_t c = 0; c < cols.size(); ++c) {
      int x = kLeft + kCol * static_cast<int>(c);
      const ProbeVerdict* v = nullptr;
      for (const auto& pv : *cols[c]->probes)
        if (pv.id == ids[i]) v = &pv;
      if (!v) {
        s += fmt::format(
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#eeeeee\"><title>{} · {}: "
            "not run</title></rect>\n",
            x + 1, y + 1, kCol - 2, kRow - 2, svg_text(cols[c]->name, 80), svg_text(ids[i], 80));
        continue;
      }
      std::string hover = cols[c]->name + " · " + v->id + ": " + verdict_cell(*v) + "\n" + v->why;
      s += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" class=\"{}\">"
          "<title>{}</title></rect>\n",
          x + 1, y + 1, kCol - 2, kRow - 2, verdict_colour(v->verdict),
          probes::to_string(v->verdict), svg_text(hover, 800, true));
      s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"cell\">{}</text>\n",
                       x + kCol / 2, y + kRow - 5, svg_text(verdict_cell(*v), 24));
    }
  }
  s += "</svg>";
  return Chart{"probe-matrix", "Escape probes", std::move(s),
               "Each cell is one probe's verdict on one provider, with the layer that blocked it; "
               "hover a cell for the evidence."};
}

std::optional<Chart> run_cost_chart(const Report& r) {
  const ProviderReport* base = baseline_of(r);
  std::vector<BarRow> rows;
  bool any = false;
  for (const auto& p : r.providers) {
    BarRow row{p.name, {}, p.unavailable ? "not available" : "not measured"};
    if (p.costs.run_ms) {
      any = true;
      auto ratios = cost_ratios(r, p);
      // Against the baseline provider when the run has one, else against the bare spawn of
      // /bin/true measured in the same rounds (Report::spawn_samples_ms).
      std::string label = ms(*p.costs.run_ms) + (base == &p ? std::string(" (the baseline)")
                                                 : base     ? ratio_note(ratios.run, base->name)
                                                        : ratio_note(ratios.spawn, "a bare spawn"));
      row.bars.push_back({*p.costs.run_ms, p.unsafe ? "#9e9e9e" : "#1565c0", label,
                          p.name + ": median of " + std::to_string(p.costs.run_samples_ms.size()) +
                              " create + exec(true) + destroy: " + label});
    }
    rows.push_back(std::move(row));
  }
  if (!any) return std::nullopt;
  return Chart{"run-costs", "Run cost: create + exec + destroy",
               bar_chart("run-costs", "Run cost per provider", rows),
               base ? "Median wall time of one environment's life; the ratio is to " +
                          escape_markup(clean_text(base->name)) +
                          " (no isolation) measured in the same run."
               : !r.spawn_samples_ms.empty()
                   ? "Median wall time of one environment's life; the ratio is the median of "
                     "each round's run over a bare spawn of /bin/true on the host in the same "
                     "round (what the gate compares)."
                   : "Median wall time of one environment's life (no baseline in this run, so "
                     "no ratios)."};
}

std::optional<Chart> call_cost_chart(const Report& r) {
  std::vector<BarRow> rows;
  bool any = false;
  for (const auto& p : r.providers) {
    BarRow row{p.name, {}, p.unavailable ? "not available" : "not measured"};
    auto ratios = cost_ratios(r, p);
    if (p.costs.exec_ms) {
      any = true;
      row.bars.push_back({*p.costs.exec_ms, "#90caf9", "provider: " + ms(*p.costs.exec_ms),
                          p.name + ": one call of true through the provider alone"});
    }
    if (p.costs.call_ms) {
      any = true;
      std::string label = "with controller: " + ms(*p.costs.call_ms);
      if (ratios.controller)
        label += fmt::format(" ({:.1f}× the provider alone)", *ratios.controller);
      row.bars.push_back({*p.costs.call_ms, "#1565c0", label,
                          p.name + ": one call of true with its own cgroup and grant"});
    }
    rows.push_back(std::move(row));
  }
  if (!any) return std::nullopt;
  return Chart{"call-costs", "Call cost: one call of true in a live run",
               bar_chart("call-costs", "Call cost per provider", rows),
               "Median of the calls; light: through the provider alone, dark: through the "
               "controller (its own cgroup and grant, placed before exec, watched)."};
}

std::optional<Chart> replay_chart(const Report& r) {
  std::vector<BarRow> rows;
  bool any = false;
  for (const auto& p : r.providers) {
    BarRow row{p.name, {}, p.unavailable ? "not available" : "not replayed"};
    if (p.replay) {
      any = true;
      const auto& s = *p.replay;
      std::string fidelity =
          fmt::format("{}/{} completed · memory error {:.1f}% · end error p95 {:.0f} ms",
                      s.completed, s.calls, 100 * s.mem_error_median, s.end_error_p95_ms);
      uint64_t other = s.calls - std::min(s.calls, s.completed);
      row.bars.push_back(
          {static_cast<double>(s.completed), "#2e7d32", fidelity, p.name + ": " + fidelity});
      if (other > 0)
        row.bars.push_back({static_cast<double>(other), "#c62828",
                            fmt::format("{} killed, {} cancelled, {} timed out, {} failed",
                                        s.killed, s.cancelled, s.timed_out, s.failed_exit),
                            p.name + ": calls that did not complete"});
    }
    rows.push_back(std::move(row));
  }
  if (!any) return std::nullopt;
  return Chart{"replay-summary", "Short replay of a recorded burst",
               bar_chart("replay-summary", "Replayed calls per provider", rows),
               "The recorded burst's calls replayed as real effects under the built-in per-call "
               "policy: green completed, red did not (how they ended beside it)."};
}

namespace {

// Axes shared by the replay's and the plan's charts: a plot area inside the <svg>, a linear or
// base-10 logarithmic scale per axis.
struct Scale {
  double lo = 0, hi = 1;    // data range (log: both > 0)
  double from = 0, to = 1;  // pixels
  bool log = false;
  double operator()(double v) const {
    double a = log ? std::log10(std::max(v, lo)) : v;
    double l = log ? std::log10(lo) : lo, h = log ? std::log10(hi) : hi;
    if (h <= l) return from;
    a = std::clamp(a, l, h);
    return from + (a - l) / (h - l) * (to - from);
  }
};

// Ticks at 1, 2 and 5 times a power of ten: about `want` of them over [lo, hi].
std::vector<double> linear_ticks(double lo, double hi, int want) {
  std::vector<double> out;
  if (hi <= lo) return {lo};
  double raw = (hi - lo) / want, p = std::pow(10, std::floor(std::log10(raw)));
  double step = raw / p < 1.5 ? p : raw / p < 3.5 ? 2 * p : raw / p < 7.5 ? 5 * p : 10 * p;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push_back(v);
  return out;
}

std::vector<double> decade_ticks(double lo, double hi) {
  std::vector<double> out;
  for (double v = std::pow(10, std::ceil(std::log10(lo) - 1e-9)); v <= hi * (1 + 1e-9); v *= 10)
    out.push_back(v);
  return out;
}

std::string svg_open(const std::string& id, int width, int height, const std::string& title) {
  return fmt::format(
      "<svg id=\"{}\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\">"
      "<title>{}</title>\n",
      svg_text(id, 80), width, height, width, height, svg_text(title, 300));
}

std::string line(double x1, double y1, double x2, double y2, const std::string& style) {
  return fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" {}/>\n", x1, y1,
                     x2, y2, style);
}

std::string label(double x, double y, const std::string& text, const char* anchor = "start") {
  return fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\" class=\"label\">{}</text>\n", x, y,
      anchor, svg_text(text, kLabelChars));
}

// The model's colours, in order; more series than colours reuse them.
constexpr const char* kPalette[] = {"#1565c0", "#c62828", "#2e7d32", "#ef6c00",
                                    "#6a1b9a", "#00838f", "#5d4037", "#9e9d24"};
const char* palette(size_t i) { return kPalette[i % std::size(kPalette)]; }
// Lines that may lie on each other (per-call and actual often do) differ by dash too.
constexpr const char* kDashes[] = {"", "", "", "8 4", "2 3"};
std::string dash(size_t i) {
  const char* d = kDashes[i % std::size(kDashes)];
  return *d ? fmt::format(" stroke-dasharray=\"{}\"", d) : "";
}
// Call shades: none of the timeline's line colours (memory blue, CPU orange).
constexpr const char* kIntentColours[] = {"#2e7d32", "#6a1b9a", "#00838f", "#5d4037",
                                          "#9e9d24", "#ad1457", "#455a64"};

std::string percent(double p) {
  if (p == 0) return "0%";
  if (p < 0.001) return fmt::format("{:.3g}%", p * 100);
  return fmt::format("{:.3g}%", p * 100);
}

std::string micros(double us) {
  if (us >= 1e6) return fmt::format("{:.2f} s", us / 1e6);
  if (us >= 1e3) return fmt::format("{:.1f} ms", us / 1e3);
  return fmt::format("{:.0f} µs", us);
}

std::string mib(double bytes) { return fmt::format("{:.0f} MiB", bytes / (1024.0 * 1024)); }

}  // namespace

std::optional<Chart> capacity_curve_chart(const Report& r) {
  if (!r.plan) return std::nullopt;
  const PlanSection& plan = *r.plan;
  uint64_t max_runs = 1;
  bool any = false;
  for (const auto& f : plan.fits) {
    for (const auto& p : f.risk_curve) {
      any = true;
      max_runs = std::max(max_runs, p.runs);
    }
    if (f.cpu)
      for (const auto& p : f.cpu->cpu_risk_curve) max_runs = std::max(max_runs, p.runs);
  }
  if (!any) return std::nullopt;
  constexpr int kLeft = 70, kPlot = 600, kTop = 20, kHeight = 300, kLegend = 230;
  const int width = kLeft + kPlot + kLegend, height = kTop + kHeight + 50;
  // Risk on a log scale: the threshold (1% by default) sits far from both ends; a risk of 0 is
  // drawn at the bottom, a decade below the threshold's.
  double lo = std::pow(10, std::floor(std::log10(plan.risk)) - 1);
  Scale x{1, static_cast<double>(std::max<uint64_t>(max_runs, 2)), kLeft, kLeft + kPlot};
  Scale y{lo, 1, kTop + kHeight, kTop, true};
  std::string s = svg_open("capacity-curve", width, height,
                           "Risk of exceeding the host against the number of runs");
  for (double t : decade_ticks(lo, 1)) {
    s += line(kLeft, y(t), kLeft + kPlot, y(t), "stroke=\"#e0e0e0\"");
    s += label(kLeft - 6, y(t) + 4, t == lo ? "≤ " + percent(t) : percent(t), "end");
  }
  for (double t : linear_ticks(1, x.hi, 8)) {
    s += line(x(t), kTop + kHeight, x(t), kTop + kHeight + 5, "stroke=\"#616161\"");
    s += label(x(t), kTop + kHeight + 18, fmt::format("{:.0f}", t), "middle");
  }
  s += line(kLeft, kTop + kHeight, kLeft + kPlot, kTop + kHeight, "stroke=\"#616161\"");
  s += line(kLeft, kTop, kLeft, kTop + kHeight, "stroke=\"#616161\"");
  s += label(kLeft + kPlot / 2.0, height - 8, "concurrent runs on the host", "middle");
  s += fmt::format(
      "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#000\" "
      "stroke-dasharray=\"6 4\" class=\"threshold\"><title>{}</title></line>\n",
      kLeft, y(plan.risk), kLeft + kPlot, y(plan.risk),
      svg_text("the accepted risk: " + percent(plan.risk)));
  int ly = kTop + 10;
  for (size_t i = 0; i < plan.fits.size(); ++i) {
    const PlanFit& f = plan.fits[i];
    if (f.risk_curve.empty()) continue;
    std::string fits = (f.fits_is_lower_bound ? "at least " : "") + std::to_string(f.fits);
    std::string hover = f.policy + ": " + fits + " runs fit at a risk of " + percent(plan.risk) +
                        (f.cpu ? fmt::format(" ({} binds: {} by memory, {} by CPU)", f.cpu->binding,
                                             f.cpu->fits_by_memory, f.cpu->fits_by_cpu_demand)
                               : std::string()) +
                        "; " + f.note;
    auto polyline = [&](const std::vector<RiskPoint>& curve) {
      std::string points;
      for (const auto& p : curve)
        points += fmt::format("{:.1f},{:.1f} ", x(static_cast<double>(p.runs)), y(p.risk));
      return points;
    };
    s += fmt::format(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{} "
        "class=\"series\"><title>{}</title></polyline>\n",
        polyline(f.risk_curve), palette(i), dash(i), svg_text("memory, " + hover, 600));
    // The CPU demand's curve in the row's colour, thin and dotted: the headline N is where the
    // first of the two leaves the accepted risk.
    if (f.cpu && !f.cpu->cpu_risk_curve.empty())
      s += fmt::format(
          "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.2\" "
          "stroke-dasharray=\"2 3\" class=\"series-cpu\"><title>{}</title></polyline>\n",
          polyline(f.cpu->cpu_risk_curve), palette(i), svg_text("CPU, " + hover, 600));
    // Where the curve leaves the accepted risk: the answer `plan` prints.
    if (f.fits >= 1)
      s += fmt::format(
          "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\" class=\"fit\"><title>{}</title>"
          "</circle>\n",
          x(static_cast<double>(f.fits)), y(plan.risk), palette(i), svg_text(hover, 600));
    s += line(kLeft + kPlot + 12, ly - 4, kLeft + kPlot + 32, ly - 4,
              fmt::format("stroke=\"{}\" stroke-width=\"3\"{}", palette(i), dash(i)));
    s += label(kLeft + kPlot + 36, ly,
               f.policy + ": " + fits + (f.cpu ? " (" + f.cpu->binding + ")" : std::string()));
    ly += 18;
  }
  s += "</svg>";
  return Chart{
      "capacity-curve", "Capacity: risk of exceeding the host", std::move(s),
      escape_markup(clean_text(fmt::format(
          "From {} traces, {} trials: the chance that N runs of each sizing model exceed "
          "host memory ({}), against N (log scale){}. The dashed line is the accepted "
          "risk ({}); each dot is the N the model admits, the smaller of the two.",
          plan.traces, plan.trials, mib(static_cast<double>(plan.host_memory_bytes)),
          plan.cpu_overcommit ? fmt::format("; thin dotted lines: the chance that their CPU demand "
                                            "exceeds {:g} cores x {:g}",
                                            plan.host_cpus, *plan.cpu_overcommit)
                              : std::string(),
          percent(plan.risk))))};
}

std::optional<Chart> victim_latency_chart(const Report& r) {
  if (!r.replay) return std::nullopt;
  struct Row {
    std::string name;
    std::optional<LatencySummary> l;
  };
  std::vector<Row> rows;
  if (r.replay->victim_solo) rows.push_back({"alone (solo)", r.replay->victim_solo});
  bool any = false;
  for (const auto& p : r.replay->policies) {
    rows.push_back({p.label, p.victim});
    any |= p.victim.has_value();
  }
  if (!any) return std::nullopt;
  double lo = 1e300, hi = 0;
  for (const auto& row : rows)
    if (row.l) {
      lo = std::min(lo, std::max(row.l->p50_us, 1.0));
      hi = std::max(hi, std::max(row.l->max_us, 1.0));
    }
  // Latencies span decades (a throttled neighbour waits milliseconds where it took
  // microseconds): a log scale from the decade under the lowest p50 to the one above the max.
  lo = std::pow(10, std::floor(std::log10(lo)));
  hi = std::pow(10, std::ceil(std::log10(hi * 1.0001)));
  constexpr int kLeft = 200, kPlot = 560, kRow = 34, kTop = 10;
  const int width = kLeft + kPlot + 40;
  const int height = kTop + kRow * static_cast<int>(rows.size()) + 40;
  Scale x{lo, hi, kLeft, kLeft + kPlot, true};
  std::string s =
      svg_open("victim-latency", width, height, "The victim's latency per policy (log scale)");
  const int bottom = kTop + kRow * static_cast<int>(rows.size());
  for (double t : decade_ticks(lo, hi)) {
    s += line(x(t), kTop, x(t), bottom, "stroke=\"#e0e0e0\"");
    s += label(x(t), bottom + 16, micros(t), "middle");
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    double cy = kTop + kRow * static_cast<double>(i) + kRow / 2.0;
    s += label(kLeft - 8, cy + 4, row.name, "end");
    if (!row.l) {
      s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"missing\">no victim ran</text>\n",
                       kLeft + 4, cy + 4);
      continue;
    }
    const LatencySummary& l = *row.l;
    std::string hover =
        fmt::format("{}: p50 {}, p90 {}, p99 {}, max {} over {} samples, {} deadlines missed",
                    row.name, micros(l.p50_us), micros(l.p90_us), micros(l.p99_us),
                    micros(l.max_us), l.count, l.missed_deadlines);
    std::string title = "<title>" + svg_text(hover, 600) + "</title>";
    const char* colour = i == 0 && r.replay->victim_solo ? "#9e9e9e" : palette(i);
    // The box from p50 to p99, a whisker on to the max, a tick at p90, a dot at p50.
    s += fmt::format(
        "<g class=\"distribution\">{}<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" "
        "stroke=\"{}\" stroke-width=\"2\"/>"
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"14\" fill=\"{}\" "
        "fill-opacity=\"0.35\" stroke=\"{}\"/>"
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
        "stroke-width=\"2\"/>"
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\"/></g>\n",
        title, x(l.p99_us), cy, x(l.max_us), cy, colour, x(l.p50_us), cy - 7,
        std::max(1.0, x(l.p99_us) - x(l.p50_us)), colour, colour, x(l.p90_us), cy - 9, x(l.p90_us),
        cy + 9, colour, x(l.p50_us), cy, colour);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"value\">{}</text>\n",
                     std::min(x(l.max_us) + 6, kLeft + kPlot - 60.0), cy - 9,
                     svg_text("p99 " + micros(l.p99_us), 40));
  }
  s += "</svg>";
  return Chart{"victim-latency", "The victim's latency per policy", std::move(s),
               "A latency-sensitive neighbour beside the replayed aggressors: dot p50, tick p90, "
               "box p50 to p99, whisker to the max; grey: the victim alone before any aggressor."};
}

namespace {

const char* action_colour(const std::string& action) {
  if (action == "throttle" || action == "freeze") return "#ef6c00";
  if (action == "unthrottle" || action == "thaw") return "#757575";
  return "#c62828";  // cancel, kill, oom_kill
}

Chart timeline_chart(const std::string& id, const std::string& policy, const TraceTimeline& t) {
  constexpr int kLeft = 80, kPlot = 640, kRight = 80, kTop = 46, kHeight = 220;
  const int width = kLeft + kPlot + kRight, height = kTop + kHeight + 44;
  double end = 1;
  uint64_t mem_max = 1;
  double cpu_max = 1;
  for (const auto& p : t.samples) {
    end = std::max(end, p.t_ms);
    mem_max = std::max(mem_max, p.memory_bytes);
    cpu_max = std::max(cpu_max, p.cpu_cores);
  }
  for (const auto& c : t.calls) end = std::max(end, c.end_ms);
  for (const auto& a : t.actions) end = std::max(end, a.at_ms);
  Scale x{0, end, kLeft, kLeft + kPlot};
  Scale ym{0, static_cast<double>(mem_max) * 1.05, kTop + kHeight, kTop};
  Scale yc{0, cpu_max * 1.05, kTop + kHeight, kTop};
  std::string s = svg_open(id, width, height, "Burst timeline: " + t.trace + " under " + policy);
  // Intents in the order they first appear: one colour each, a legend entry each.
  std::vector<std::string> intents;
  for (const auto& c : t.calls)
    if (std::find(intents.begin(), intents.end(), c.intent) == intents.end())
      intents.push_back(c.intent);
  auto intent_colour = [&](const std::string& intent) {
    size_t at = std::find(intents.begin(), intents.end(), intent) - intents.begin();
    return kIntentColours[at % std::size(kIntentColours)];
  };
  for (const auto& c : t.calls) {
    std::string hover = fmt::format("call {} ({}): {:.0f} to {:.0f} ms, {}", c.id, c.intent,
                                    c.start_ms, c.end_ms, c.ended);
    s += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\" "
        "fill-opacity=\"0.18\" class=\"call\"><title>{}</title></rect>\n",
        x(c.start_ms), kTop, std::max(1.0, x(c.end_ms) - x(c.start_ms)), kHeight,
        intent_colour(c.intent), svg_text(hover, 400));
  }
  for (double v : linear_ticks(0, end, 8)) {
    s += line(x(v), kTop + kHeight, x(v), kTop + kHeight + 5, "stroke=\"#616161\"");
    s += label(x(v), kTop + kHeight + 18, fmt::format("{:.1f} s", v / 1000), "middle");
  }
  constexpr double kMiB = 1024.0 * 1024;  // memory ticks at round MiB
  for (double v : linear_ticks(0, ym.hi / kMiB, 4))
    s += label(kLeft - 6, ym(v * kMiB) + 4, mib(v * kMiB), "end");
  for (double v : linear_ticks(0, yc.hi, 4))
    s += label(kLeft + kPlot + 6, yc(v) + 4, fmt::format("{:.1f} cores", v));
  s += line(kLeft, kTop + kHeight, kLeft + kPlot, kTop + kHeight, "stroke=\"#616161\"");
  std::string mem, cpu;
  for (const auto& p : t.samples) {
    mem += fmt::format("{:.1f},{:.1f} ", x(p.t_ms), ym(static_cast<double>(p.memory_bytes)));
    cpu += fmt::format("{:.1f},{:.1f} ", x(p.t_ms), yc(p.cpu_cores));
  }
  if (!t.samples.empty()) {
    s += fmt::format(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"#1565c0\" stroke-width=\"2\" "
        "class=\"series\"><title>{}</title></polyline>\n",
        mem, svg_text("memory (the run's cgroup), peak " + mib(static_cast<double>(mem_max))));
    s += fmt::format(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"#ef6c00\" stroke-width=\"1.5\" "
        "stroke-dasharray=\"4 2\" class=\"series\"><title>{}</title></polyline>\n",
        cpu, svg_text(fmt::format("CPU, peak {:.2f} cores", cpu_max)));
  }
  for (const auto& a : t.actions) {
    double ax = x(a.at_ms);
    s += fmt::format(
        "<path d=\"M{:.1f} {} l-5 -9 h10 z\" fill=\"{}\" class=\"action\"><title>{}</title></path>"
        "<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"{}\" "
        "stroke-dasharray=\"2 2\"/>\n",
        ax, kTop, action_colour(a.action),
        svg_text(
            fmt::format("{} at {:.0f} ms (call {}): {}", a.action, a.at_ms, a.call_id, a.reason),
            400),
        ax, kTop, ax, kTop + kHeight, action_colour(a.action));
  }
  // The legend: the two lines, then each intent's shade.
  int lx = kLeft;
  auto legend = [&](const std::string& colour, const std::string& text, const char* cls) {
    s += fmt::format("<rect x=\"{}\" y=\"8\" width=\"14\" height=\"12\" fill=\"{}\" class=\"{}\"/>",
                     lx, colour, cls);
    s += label(lx + 18, 18, text);
    lx += 30 + static_cast<int>(std::min(text.size(), kLabelChars)) * 7;
  };
  legend("#1565c0", "memory", "legend-line");
  legend("#ef6c00", "CPU", "legend-line");
  for (const auto& intent : intents) legend(intent_colour(intent), intent, "legend-intent");
  if (!t.error.empty())
    s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"missing\">{}</text>\n", kLeft, kTop + 14,
                     svg_text("the run failed: " + t.error, 120));
  s += "</svg>";
  return Chart{id,
               "Burst timeline: " + clean_text(t.trace, {80, false}) + " under " +
                   clean_text(policy, {80, false}),
               std::move(s),
               "The run's memory (solid) and CPU (dashed) on its replay clock; each call shaded "
               "by its intent; triangles mark the ladder's actions (orange throttle or freeze, "
               "red cancel or kill, grey release)."};
}

}  // namespace

std::vector<Chart> burst_timeline_charts(const Report& r) {
  std::vector<Chart> out;
  if (!r.replay) return out;
  for (const auto& p : r.replay->policies)
    for (const auto& t : p.timelines) {
      if (out.size() == kMaxTimelines) return out;
      out.push_back(timeline_chart("burst-timeline-" + std::to_string(out.size() + 1), p.label, t));
    }
  return out;
}

std::vector<Chart> charts_for(const Report& r) {
  std::vector<Chart> out;
  for (auto make : {probe_matrix_chart, run_cost_chart, call_cost_chart, replay_chart,
                    capacity_curve_chart, victim_latency_chart})
    if (auto c = make(r)) out.push_back(std::move(*c));
  for (auto& c : burst_timeline_charts(r)) out.push_back(std::move(c));
  return out;
}

}  // namespace sandgate::reports
