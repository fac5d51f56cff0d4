#include "reports/charts.h"

#include <fmt/format.h>

#include <algorithm>

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
      auto ratio = cost_ratios(r, p).run;
      std::string label =
          ms(*p.costs.run_ms) +
          (base == &p ? std::string(" (the baseline)") : ratio_note(ratio, base ? base->name : ""));
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
                    : "Median wall time of one environment's life (no baseline provider in this "
                      "run, so no ratios)."};
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

std::vector<Chart> charts_for(const Report& r) {
  std::vector<Chart> out;
  for (auto make : {probe_matrix_chart, run_cost_chart, call_cost_chart, replay_chart})
    if (auto c = make(r)) out.push_back(std::move(*c));
  return out;
}

}  // namespace sandgate::reports
