// The Markdown summary: short enough for a pull-request comment or a CI job summary. What
// changed against a baseline first (when the caller has one), then what is exposed, then the
// providers side by side. Every value is escape_markdown'd: a probe's words cannot open a
// link, an image, a table cell or an HTML element.
#include <fmt/format.h>

#include "reports/text.h"
#include "reports/writers.h"

namespace sandgate::reports {
namespace {

std::string opt_ms(const std::optional<double>& v) {
  return v ? fmt::format("{:.1f} ms", *v) : std::string("-");
}

std::string listing(const Report& r, probes::Verdict wanted, size_t max) {
  std::string s;
  size_t n = 0, more = 0;
  for (const auto& p : r.providers) {
    if (!p.probes) continue;
    for (const auto& v : *p.probes) {
      if (v.verdict != wanted) continue;
      if (n++ >= max) {
        ++more;
        continue;
      }
      s += fmt::format("- **{}** {}: {}\n", md(p.name, 80), md(v.id, 120), md(v.why));
    }
  }
  if (more > 0) s += fmt::format("- … and {} more (see the HTML report)\n", more);
  return s;
}

// `sandgate bench`'s figures: one row each, the median of its ratios (paired) or samples.
std::string bench_table(const std::vector<BenchFigure>& figures) {
  std::string s = "### Benchmarks\n\n| figure | median | against | n |\n|---|---:|---|---:|\n";
  for (const auto& f : figures) {
    if (f.skipped) {
      s += fmt::format("| {} | not measured | {} | 0 |\n", md(f.name, 80), md(*f.skipped));
      continue;
    }
    auto m = bench_median(f);
    std::string median = !m           ? "-"
                         : f.paired() ? fmt::format("{:.2f}×", *m)
                                      : fmt::format("{:.2f} {}", *m, md(f.unit, 20));
    s += fmt::format("| {} | {} | {} | {} |\n", md(f.name, 80), median,
                     f.paired() ? md(f.baseline_what, 120) : "absolute (this machine)",
                     f.samples.size());
  }
  return s + "\n";
}

// The plan's and the replay's headline figures, when the report has them: a line per model
// or policy (the HTML has the charts and every figure).
std::string sections(const Report& r) {
  std::string s;
  if (r.plan) {
    s += fmt::format(
        "### Capacity plan: {} traces, risk {}\n\n| model | fits | binding | by memory | by cpu | "
        "P(mem>host) | cpu slow-down mean / p95 |\n|---|---:|---|---:|---:|---:|---:|\n",
        r.plan->traces, r.plan->risk);
    for (const auto& f : r.plan->fits) {
      // A version-1 plan counted memory only: "-" where it has no figure.
      s += fmt::format(
          "| {} | {}{} | {} | {} | {} | {:.4f} | {} |\n", md(f.policy, 60),
          f.fits_is_lower_bound ? "≥" : "", f.fits, f.cpu ? md(f.cpu->binding, 20) : "-",
          f.cpu ? std::to_string(f.cpu->fits_by_memory) : "-",
          f.cpu ? std::to_string(f.cpu->fits_by_cpu_demand) : "-", f.p_memory_exceeded,
          f.cpu
              ? fmt::format("{:.2f}× / {:.2f}×", f.cpu->cpu_slowdown_mean, f.cpu->cpu_slowdown_p95)
              : "-");
    }
    s += "\n";
  }
  if (r.replay) {
    s += "### Replay\n\n| policy | completed | victim p99 |\n|---|---:|---:|\n";
    for (const auto& p : r.replay->policies) {
      const Json& calls = p.scores.contains("calls") ? p.scores["calls"] : Json();
      auto count = [&](const char* key) {
        return calls.is_object() && calls.contains(key) && calls[key].is_number()
                   ? fmt::format("{}", calls[key].get<double>())
                   : std::string("-");
      };
      std::string victim = "-";
      if (p.victim) victim = fmt::format("{:.0f} µs", p.victim->p99_us);
      // The replay's own inflation figure (one definition, in replay/experiment.cc).
      const Json* inflation =
          p.scores.contains("victim_p99_inflation") ? &p.scores["victim_p99_inflation"] : nullptr;
      if (p.victim && inflation && inflation->is_number())
        victim += fmt::format(" ({:.2f}× solo)", inflation->get<double>());
      s += fmt::format("| {} | {} of {} | {} |\n", md(p.label, 60), count("completed"),
                       count("total"), victim);
    }
    s += "\n";
  }
  return s;
}

}  // namespace

std::string render_markdown(const Report& r, const MarkdownOptions& options) {
  size_t qualified = 0;
  for (const auto& p : r.providers) qualified += p.qualified;
  std::string s = fmt::format("## sandgate {}: {} of {} provider{} qualified\n\n", md(r.job, 40),
                              qualified, r.providers.size(), r.providers.size() == 1 ? "" : "s");
  if (r.providers.empty()) s = fmt::format("## sandgate {}\n\n", md(r.job, 40));
  if (!options.what_changed.empty()) {
    s += "### What changed\n\n";
    for (const auto& line : options.what_changed) s += "- " + md(line, 300) + "\n";
    s += "\n";
  }
  // A bench, a replay or a plan qualifies nothing: their figures are the summary.
  if (r.providers.empty()) return s + sections(r) + (r.bench ? bench_table(*r.bench) : "");
  std::string exposed = listing(r, probes::Verdict::kExposed, options.max_listed);
  if (!exposed.empty()) s += "### Exposed\n\n" + exposed + "\n";

  const ProviderReport* base = baseline_of(r);
  s += "| provider | qualified | exposed | blocked | inconclusive | warning | run | call |\n"
       "|---|---|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& p : r.providers) {
    std::string tally = "| - | - | - | - ";
    if (p.probes) {
      int n[4] = {0, 0, 0, 0};
      for (const auto& v : *p.probes) ++n[static_cast<int>(v.verdict)];
      tally = fmt::format("| {} | {} | {} | {} ", n[1], n[0], n[2], n[3]);
    }
    auto ratios = cost_ratios(r, p);
    std::string run = opt_ms(p.costs.run_ms);
    if (ratios.run && base && base != &p)
      run += fmt::format(" ({:.2f}×)", *ratios.run);
    else if (!base && ratios.spawn)
      run += fmt::format(" ({:.1f}× spawn)", *ratios.spawn);
    std::string call = opt_ms(p.costs.call_ms);
    if (ratios.controller) call += fmt::format(" ({:.1f}× exec)", *ratios.controller);
    std::string status = p.qualified ? "yes" : "**no**";
    if (!p.qualified && !p.disqualifications.empty())
      status += ": " + md(p.disqualifications.front(), 120);
    s += fmt::format("| {}{} | {} {}| {} | {} |\n", md(p.display_name, 80), p.unsafe ? " ⚠" : "",
                     status, tally, run, call);
  }
  if (r.bench) s += bench_table(*r.bench);
  std::string warnings = listing(r, probes::Verdict::kWarning, options.max_listed);
  if (!warnings.empty()) s += "\n### Warnings\n\n" + warnings;
  s += "\n";
  if (base)
    s += "Run ratios are to " + md(base->name, 80) +
         " (no isolation) measured in the same run; call ratios to the provider's own exec.\n";
  else if (!r.spawn_samples_ms.empty())
    s += "Run ratios are to a bare spawn of /bin/true in the same rounds; call ratios to the "
         "provider's own exec.\n";
  return s;
}

}  // namespace sandgate::reports
