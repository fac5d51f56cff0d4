// The HTML report: one self-contained page. Every string from the report goes through
// clean_text and escape_markup; nothing is fetched (no script, font, image or stylesheet link,
// and a Content-Security-Policy that forbids them).
#include <fmt/format.h>

#include "reports/charts.h"
#include "reports/text.h"
#include "reports/writers.h"

namespace sandgate::reports {
namespace {

std::string h(std::string_view s, size_t max = 400) {
  CleanOptions o;
  o.max_bytes = max;
  return escape_markup(clean_text(s, o));
}

// A block of evidence: line breaks kept, long text cut with a note.
std::string pre(std::string_view s, size_t max = 4000) {
  CleanOptions o;
  o.max_bytes = max;
  o.keep_newlines = true;
  return "<pre>" + escape_markup(clean_text(s, o)) + "</pre>";
}

constexpr const char* kStyle = R"(
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#212121;background:#fff}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f5f5f5}
.ok{color:#2e7d32;font-weight:bold}.bad{color:#c62828;font-weight:bold}
.unsafe{background:#ffebee;border:1px solid #c62828;padding:8px;margin:8px 0}
.blocked{color:#2e7d32}.exposed{color:#c62828;font-weight:bold}.inconclusive{color:#616161}
.warning{color:#ef6c00;font-weight:bold}
pre{white-space:pre-wrap;word-break:break-all;background:#fafafa;border:1px solid #eee;
padding:6px;max-height:24em;overflow:auto}
svg text{font:12px system-ui,sans-serif}svg text.cell{fill:#fff;font-size:11px}
svg text.missing{fill:#757575;font-style:italic}figure{margin:16px 0}
figcaption{color:#616161;max-width:60em}
)";

std::string verdict_span(const ProbeVerdict& v) {
  return fmt::format("<span class=\"{}\">{}</span>", probes::to_string(v.verdict),
                     h(verdict_cell(v), 80));
}

// The host's evidence lines of a judgement ("decoy_events: ...").
std::string host_evidence(const ProbeVerdict& v) {
  const Json& host = v.judgement.contains("host") ? v.judgement["host"] : Json();
  if (!host.is_object() || host.empty()) return "";
  std::string text;
  for (const auto& [key, lines] : host.items()) {
    if (!lines.is_array()) continue;
    for (const auto& line : lines)
      text += key + ": " + (line.is_string() ? line.get<std::string>() : dump_json(line)) + "\n";
  }
  return text.empty() ? "" : "<p>What the host saw:</p>" + pre(text);  // the second witness
}

std::string sandbox_report(const ProbeVerdict& v) {
  const Json& s = v.judgement.contains("sandbox") ? v.judgement["sandbox"] : Json();
  if (!s.is_object()) return "<p>No report from inside the sandbox.</p>";
  return "<details><summary>The probe's own report from inside</summary>" + pre(dump_json(s, 1)) +
         "</details>\n";
}

std::string header(const Report& r) {
  size_t qualified = 0;
  for (const auto& p : r.providers) qualified += p.qualified;
  std::string s = fmt::format(
      "<h1>sandgate {}: {} of {} provider{} qualified</h1>\n<p>Report schema {} · sandgate {} · "
      "{}</p>\n",
      h(r.job, 40), qualified, r.providers.size(), r.providers.size() == 1 ? "" : "s",
      r.schema_version, h(r.sandgate_version, 40),
      r.created.empty() ? "time unknown" : h(r.created, 40));
  // A replay or a plan qualifies nothing: its title is the job's alone.
  if (r.providers.empty()) s.replace(0, s.find("</h1>"), "<h1>sandgate " + h(r.job, 40));
  for (const auto& p : r.providers)
    if (p.unsafe)
      s += "<div class=\"unsafe\"><b>" + h(p.display_name) +
           "</b> is the unsafe provider: no isolation at all. It is here to show what exposure "
           "looks like and to be the cost baseline; never run agent code with it.</div>\n";
  return s;
}

std::string providers_table(const Report& r) {
  if (r.providers.empty()) return "";
  std::string s =
      "<h2 id=\"providers\">Providers</h2>\n<table><tr><th>provider</th><th>qualified</th>"
      "<th>why not</th><th>probes: blocked / exposed / inconclusive / warning</th>"
      "<th>capabilities</th></tr>\n";
  for (const auto& p : r.providers) {
    std::string tally = "-";
    if (p.probes) {
      int n[4] = {0, 0, 0, 0};
      for (const auto& v : *p.probes) ++n[static_cast<int>(v.verdict)];
      tally = fmt::format("{} / {} / {} / {}", n[0], n[1], n[2], n[3]);
    }
    std::string why;
    for (const auto& d : p.disqualifications) why += h(d) + "<br>";
    std::string caps;
    for (const auto& c : p.capabilities) caps += h(c, 80) + " ";
    // A declared capability an exposed probe disproved: the declaration is not trusted.
    for (const auto& k : p.contradicted_capabilities) {
      std::string probes;
      for (const auto& id : k.probes) probes += (probes.empty() ? "" : ", ") + id;
      caps += "<br><span class=\"bad\">" + h(k.capability, 80) + " contradicted by " +
              h(probes, 600) + "</span>";
    }
    if (p.policy && !p.policy->missing.empty()) {
      std::string missing;
      for (const auto& c : p.policy->missing) missing += (missing.empty() ? "" : ", ") + c;
      caps += "<br><span class=\"bad\">policy " + h(p.policy->name, 80) + " needs " +
              h(missing, 600) + "</span>";
    }
    s += fmt::format(
        "<tr><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        h(p.display_name), p.qualified ? "ok" : "bad", p.qualified ? "yes" : "NO", why, tally,
        caps.empty() ? "none declared" : caps);
  }
  return s + "</table>\n";
}

std::string charts(const Report& r) {
  std::string s;
  for (const auto& c : charts_for(r))
    s += fmt::format("<h2>{}</h2>\n<figure>{}\n<figcaption>{}</figcaption></figure>\n", h(c.title),
                     c.svg, c.caption);
  return s;
}

// The tables `plan` and `replay` print, from their sections (absent sections: nothing).
std::string section_tables(const Report& r) {
  std::string s;
  auto num = [](const Json& j, const char* key, const char* format) -> std::string {
    if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return "-";
    return fmt::format(fmt::runtime(format), j[key].get<double>());
  };
  if (r.plan) {
    const PlanSection& p = *r.plan;
    auto gib = [](double b) { return fmt::format("{:.1f} GiB", b / (1024.0 * 1024 * 1024)); };
    s += fmt::format(
        "<h2 id=\"plan\">Capacity plan</h2>\n<p>{} traces · host {} and {} cpus{} · risk {} · {} "
        "trials, seed {} · policy {}</p>\n<table><tr><th>model</th><th>fits</th><th>binding</th>"
        "<th>by memory</th><th>by cpu</th><th>reserved</th><th>used</th><th>P(mem&gt;host)</th>"
        "<th>P(cpu&gt;host)</th><th>cpu slow-down mean / p95</th><th>N by cpu reservation</th>"
        "<th>note</th></tr>\n",
        p.traces, gib(static_cast<double>(p.host_memory_bytes)), p.host_cpus,
        p.cpu_overcommit ? (*p.cpu_overcommit > 1
                                ? fmt::format(" (overcommitted up to {:g}×)", *p.cpu_overcommit)
                                : std::string(" (not overcommitted)"))
                         : std::string(),
        p.risk, p.trials, p.seed, h(p.policy, 80));
    for (const auto& f : p.fits) {
      // A version-1 plan counted memory only: its CPU columns are unknown.
      std::string binding = "-", by_memory = "-", by_cpu = "-", slowdown = "-";
      if (f.cpu) {
        binding = h(f.cpu->binding, 20);
        by_memory = std::to_string(f.cpu->fits_by_memory);
        by_cpu = std::to_string(f.cpu->fits_by_cpu_demand);
        slowdown =
            fmt::format("{:.2f}× / {:.2f}×", f.cpu->cpu_slowdown_mean, f.cpu->cpu_slowdown_p95);
      }
      s += fmt::format(
          "<tr><td>{}</td><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
          "<td>{:.4f}</td><td>{:.4f}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
          h(f.policy, 80), f.fits_is_lower_bound ? "&gt;=" : "", f.fits, binding, by_memory, by_cpu,
          gib(f.reserved_bytes), gib(f.used_bytes), f.p_memory_exceeded, f.p_cpu_exceeded, slowdown,
          f.fits_by_cpu, h(f.note));
    }
    s += "</table>\n<table><tr><th>intent</th><th>calls</th><th>seconds</th><th>grant</th>"
         "<th>use p50</th><th>use p99</th><th>use max</th><th>over grant</th></tr>\n";
    auto mib = [](double b) { return fmt::format("{:.0f} MiB", b / (1024.0 * 1024)); };
    for (const auto& u : p.intents)
      s += fmt::format(
          "<tr><td>{}</td><td>{}</td><td>{:.0f}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
          "<td>{}</td></tr>\n",
          h(u.intent, 80), u.calls, u.seconds,
          u.grant_memory_bytes ? mib(*u.grant_memory_bytes) : "none",
          mib(u.above_baseline_p50_bytes), mib(u.above_baseline_p99_bytes),
          mib(u.above_baseline_max_bytes), u.calls_over_grant);
    s += "</table>\n";
  }
  if (r.replay) {
    // The scores are replay::to_json(PolicyScores), kept whole: read what is there.
    auto calls_of = [](const Json& scores) {
      return scores.contains("calls") ? scores["calls"] : Json();
    };
    auto mib_of = [](const Json& j, const char* key) -> std::string {
      if (!j.contains(key) || !j[key].is_number()) return "-";
      return fmt::format("{:.0f} MiB", j[key].get<double>() / (1024.0 * 1024));
    };
    s += fmt::format(
        "<h2 id=\"replay\">Replay</h2>\n<p>provider {} · time scale {}{}</p>\n<table><tr>"
        "<th>policy</th><th>calls</th><th>completed</th><th>killed</th><th>work lost</th>"
        "<th>victim p99 inflation</th><th>host peak</th></tr>\n",
        h(r.replay->provider, 80), r.replay->time_scale,
        r.replay->compress_silence ? " · silences compressed" : "");
    for (const auto& p : r.replay->policies)
      s += fmt::format(
          "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></"
          "tr>\n",
          h(p.label, 80), num(calls_of(p.scores), "total", "{:.0f}"),
          num(calls_of(p.scores), "completed", "{:.0f}"),
          num(calls_of(p.scores), "killed", "{:.0f}"),
          num(p.scores, "work_lost_call_s", "{:.1f} s"),
          num(p.scores, "victim_p99_inflation", "{:.2f}×"), mib_of(p.scores, "host_peak_bytes"));
    s +=
        "</table>\n<details><summary>Every score, as <code>replay --json</code> has them</summary>";
    for (const auto& p : r.replay->policies) s += pre(dump_json(p.scores, 1), 20000);
    s += "</details>\n";
  }
  return s;
}

// Exposed and warning verdicts first, each with its evidence and the remediation.
std::string findings(const Report& r) {
  std::string s = "<h2 id=\"findings\">Exposed and warnings</h2>\n";
  bool any = false;
  for (auto wanted : {probes::Verdict::kExposed, probes::Verdict::kWarning}) {
    for (const auto& p : r.providers) {
      if (!p.probes) continue;
      for (const auto& v : *p.probes) {
        if (v.verdict != wanted) continue;
        any = true;
        auto rule = r.rules.find(v.id);
        s += fmt::format("<h3>{} · {}: {}</h3>\n<p>Tried: {}</p>\n<p>Why: {}</p>\n", h(p.name),
                         h(v.id, 120), verdict_span(v), h(v.attempt), h(v.why, 2000));
        s += host_evidence(v) + sandbox_report(v);
        if (rule != r.rules.end())
          s += "<p><b>Fix:</b> " + h(rule->second.remediation, 2000) + "</p>\n";
      }
    }
  }
  if (!any) s += "<p>No probe found a provider exposed, and none warned.</p>\n";
  return s;
}

std::string differences(const Report& r) {
  auto diffs = probe_differences(r);
  if (diffs.empty()) return "";
  std::string s =
      "<h2 id=\"differences\">Where the providers disagree</h2>\n<table><tr><th>probe</th>";
  std::vector<std::string> names;
  for (const auto& [name, cell] : diffs.front().verdicts) {
    names.push_back(name);
    s += "<th>" + h(name) + "</th>";
  }
  s += "</tr>\n";
  for (const auto& d : diffs) {
    s += "<tr><td>" + h(d.id, 120) + "</td>";
    for (const auto& name : names) s += "<td>" + h(d.verdicts.at(name).verdict, 80) + "</td>";
    s += "</tr>\n";
  }
  return s + "</table>\n";
}

std::string all_verdicts(const Report& r) {
  std::string s = "<h2 id=\"verdicts\">Every verdict</h2>\n";
  for (const auto& p : r.providers) {
    if (!p.probes) continue;
    s += "<details><summary>" + h(p.display_name) + ": " + std::to_string(p.probes->size()) +
         " probes</summary>\n<table><tr><th>probe</th><th>verdict</th><th>witness</th><th>why</"
         "th></tr>\n";
    for (const auto& v : *p.probes)
      s += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n", h(v.id, 120),
                       verdict_span(v), h(v.witness, 40), h(v.why, 1000));
    s += "</table></details>\n";
  }
  return s;
}

std::string host_facts(const Report& r) {
  std::string s = "<h2 id=\"host\">Host</h2>\n";
  const Json& sections = r.host.contains("sections") ? r.host["sections"] : Json();
  if (sections.is_array()) {
    s += "<table><tr><th>area</th><th>check</th><th></th><th>detail</th></tr>\n";
    for (const auto& sec : sections) {
      if (!sec.is_object() || !sec.contains("checks") || !sec["checks"].is_array()) continue;
      std::string area = sec.value("name", Json("")).is_string() ? sec.value("name", "") : "";
      for (const auto& c : sec["checks"]) {
        if (!c.is_object()) continue;
        bool ok = c.value("ok", Json(false)).is_boolean() && c.value("ok", false);
        auto str = [&](const char* k) {
          return c.contains(k) && c[k].is_string() ? c[k].get<std::string>() : std::string();
        };
        s += fmt::format("<tr><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td>{}</td></tr>\n",
                         h(area, 80), h(str("name"), 80), ok ? "ok" : "bad", ok ? "ok" : "no",
                         h(str("detail"), 600));
      }
    }
    s += "</table>\n";
  }
  return s + "<details><summary>The doctor's findings, whole</summary>" +
         pre(dump_json(r.host, 1), 20000) + "</details>\n";
}

// `sandgate bench`'s figures: a row each, the median with the samples behind it.
std::string bench_section(const std::vector<BenchFigure>& figures) {
  std::string s =
      "<h2 id=\"bench\">Benchmarks</h2>\n<p>A paired figure is the median of the ratios of "
      "samples taken side by side with its baseline in the same round; an absolute figure "
      "compares only with runs on the same machine.</p>\n<table><tr><th>figure</th><th>what</th>"
      "<th>median</th><th>against</th><th>samples</th></tr>\n";
  auto list = [](const std::vector<double>& v) {
    std::string out;
    for (double x : v) out += fmt::format("{}{:.2f}", out.empty() ? "" : " ", x);
    return out;
  };
  for (const auto& f : figures) {
    std::string median, against, samples;
    if (f.skipped) {
      median = "<span class=\"inconclusive\">not measured</span>";
      against = h(*f.skipped);
    } else {
      auto m = bench_median(f);
      median = !m           ? "-"
               : f.paired() ? fmt::format("{:.2f}×", *m)
                            : fmt::format("{:.2f} {}", *m, h(f.unit, 20));
      against = f.paired() ? h(f.baseline_what) : "absolute: " + h(f.baseline_what);
      samples = h(f.unit, 20) + ": " + list(f.samples);
      if (f.paired()) samples += "<br>baseline: " + list(f.baseline_samples);
    }
    s += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                     h(f.name, 80), h(f.what), median, against, samples);
  }
  return s + "</table>\n";
}

}  // namespace

std::string render_html(const Report& r) {
  std::string s =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "style-src 'unsafe-inline'\">\n"
      "<meta name=\"viewport\" content=\"width=device-width\">\n<title>sandgate " +
      h(r.job, 40) + " report</title>\n<style>" + kStyle + "</style></head>\n<body>\n";
  s += header(r);
  if (r.bench) s += bench_section(*r.bench);
  if (!r.providers.empty() || !r.bench) s += providers_table(r);
  s += charts(r);
  s += section_tables(r);
  s += findings(r);
  s += differences(r);
  s += all_verdicts(r);
  s += host_facts(r);
  s += "</body></html>\n";
  return s;
}

}  // namespace sandgate::reports
