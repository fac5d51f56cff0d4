#include "reports/gate.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/files.h"
#include "core/stats.h"
#include "reports/field_reader.h"
#include "reports/text.h"

namespace sandgate::reports {
namespace {

using Change = GateFinding::Change;
using Kind = GateFinding::Kind;
using probes::Verdict;

// Probe words are the sandbox's: cleaned (no controls, one line, bounded) before they are part
// of a finding; each writer escapes them again for its format.
std::string said(std::string_view text, size_t max = 160) {
  return clean_text(text, {.max_bytes = max, .keep_newlines = false});
}

class Collector {
 public:
  explicit Collector(const GateTolerance& t) : tolerance_(t) {}

  void add(Change change, Kind kind, const std::string& provider, const std::string& subject,
           std::string text) {
    GateFinding f;
    f.change = change;
    f.kind = kind;
    f.key = provider + "/" + subject;
    f.text = said(provider, 80) + ": " + std::move(text);
    if (tolerance_.accept.count(f.key)) {
      used_.insert(f.key);
      f.accepted = change == Change::kRegression;
    }
    findings_.push_back(std::move(f));
  }

  GateResult finish() {
    GateResult r;
    r.findings = std::move(findings_);
    std::stable_sort(r.findings.begin(), r.findings.end(),
                     [](const GateFinding& a, const GateFinding& b) {
                       return std::pair(a.change, a.kind) < std::pair(b.change, b.kind);
                     });
    for (const auto& key : tolerance_.accept)
      if (!used_.count(key)) r.unused_accepts.push_back(key);
    return r;
  }

 private:
  const GateTolerance& tolerance_;
  std::vector<GateFinding> findings_;
  std::set<std::string> used_;
};

std::string cell(const ProbeVerdict& v) { return verdict_cell(v); }

void compare_probes(Collector& out, const ProviderReport& base, const ProviderReport& cur) {
  const std::string& name = cur.name;
  if (!base.probes) return;
  if (!cur.probes) {
    out.add(Change::kRegression, Kind::kProbeLost, name, "probes",
            "the escape probes did not run (they did in the baseline)");
    return;
  }
  std::map<std::string, const ProbeVerdict*> now;
  for (const auto& v : *cur.probes) now[v.id] = &v;
  std::set<std::string> before;
  for (const auto& b : *base.probes) {
    before.insert(b.id);
    auto it = now.find(b.id);
    if (it == now.end()) {
      out.add(Change::kRegression, Kind::kProbeLost, name, b.id,
              fmt::format("{} no longer runs (was {})", b.id, cell(b)));
      continue;
    }
    const ProbeVerdict& c = *it->second;
    std::string was = fmt::format("{}: {}, was {}", b.id, cell(c), cell(b));
    if (c.verdict == b.verdict) {
      if (c.verdict == Verdict::kBlocked && c.layer != b.layer)
        out.add(Change::kNote, Kind::kProbeLost, name, b.id, was);
      continue;
    }
    if (c.verdict == Verdict::kExposed) {
      out.add(Change::kRegression, Kind::kExposed, name, b.id, was + " — " + said(c.why));
    } else if (b.verdict == Verdict::kBlocked) {
      // Blocked, and now it only warns or proves nothing: the evidence of containment is gone.
      out.add(Change::kRegression, Kind::kProbeLost, name, b.id, was + " — " + said(c.why));
    } else if (c.verdict == Verdict::kBlocked || b.verdict == Verdict::kExposed) {
      out.add(Change::kImprovement, Kind::kExposed, name, b.id, was);
    } else {
      out.add(Change::kNote, Kind::kProbeLost, name, b.id, was + " — " + said(c.why));
    }
  }
  for (const auto& c : *cur.probes)
    if (!before.count(c.id))
      out.add(c.verdict == Verdict::kExposed ? Change::kRegression : Change::kNote, Kind::kExposed,
              name, c.id, fmt::format("{}: {}, new probe", c.id, cell(c)));
}

void compare_capabilities(Collector& out, const ProviderReport& base, const ProviderReport& cur) {
  std::set<std::string> now(cur.capabilities.begin(), cur.capabilities.end());
  std::set<std::string> before(base.capabilities.begin(), base.capabilities.end());
  for (const auto& c : before)
    if (!now.count(c))
      out.add(Change::kRegression, Kind::kCapability, cur.name, "capability:" + c,
              "no longer declares " + c);
  for (const auto& c : now)
    if (!before.count(c))
      out.add(Change::kImprovement, Kind::kCapability, cur.name, "capability:" + c,
              "now declares " + c);
}

void compare_qualification(Collector& out, const ProviderReport& base, const ProviderReport& cur) {
  if (base.qualified && !cur.qualified) {
    std::string why;
    for (const auto& d : cur.disqualifications) why += (why.empty() ? "" : "; ") + said(d, 200);
    out.add(Change::kRegression, Kind::kQualification, cur.name, "qualified",
            "no longer qualified: " + why);
  } else if (!base.qualified && cur.qualified) {
    out.add(Change::kImprovement, Kind::kQualification, cur.name, "qualified", "now qualified");
  }
}

std::optional<double> score(const ReplaySummary& r, const char* key) {
  const Json& v = r.scores.is_object() && r.scores.contains(key) ? r.scores[key] : Json();
  return v.is_number() ? std::optional<double>(v.get<double>()) : std::nullopt;
}

void compare_replay(Collector& out, const ProviderReport& base, const ProviderReport& cur,
                    const GateTolerance& t) {
  if (!base.replay) return;
  if (!cur.replay) {
    out.add(Change::kRegression, Kind::kContainment, cur.name, "replay",
            "the short replay did not run (it did in the baseline)");
    return;
  }
  const ReplaySummary &b = *base.replay, &c = *cur.replay;
  auto share = [](uint64_t part, uint64_t whole) {
    return whole == 0 ? 1.0 : static_cast<double>(part) / static_cast<double>(whole);
  };
  double done_before = share(b.completed, b.calls), done_now = share(c.completed, c.calls);
  if (done_now < done_before)
    out.add(Change::kRegression, Kind::kContainment, cur.name, "replay:completed",
            fmt::format("replay: {} of {} calls completed, was {} of {}", c.completed, c.calls,
                        b.completed, b.calls));
  else if (done_now > done_before)
    out.add(Change::kImprovement, Kind::kContainment, cur.name, "replay:completed",
            fmt::format("replay: {} of {} calls completed, was {} of {}", c.completed, c.calls,
                        b.completed, b.calls));
  struct Ending {
    const char* name;
    uint64_t before, now;
  } endings[] = {{"killed", b.killed, c.killed},
                 {"cancelled", b.cancelled, c.cancelled},
                 {"timed_out", b.timed_out, c.timed_out}};
  for (const auto& e : endings)
    if (e.now != e.before)
      out.add(e.now > e.before ? Change::kRegression : Change::kImprovement, Kind::kContainment,
              cur.name, std::string("replay:") + e.name,
              fmt::format("replay: {} calls {}, was {}", e.now, e.name, e.before));
  auto lost_before = score(b, "work_lost_call_s"), lost_now = score(c, "work_lost_call_s");
  if (lost_before && lost_now && std::abs(*lost_now - *lost_before) > t.work_lost_s)
    out.add(*lost_now > *lost_before ? Change::kRegression : Change::kImprovement,
            Kind::kContainment, cur.name, "replay:work_lost",
            fmt::format("replay: {:.2f} call-seconds of work lost, was {:.2f}", *lost_now,
                        *lost_before));
  auto victim_before = score(b, "victim_p99_inflation"),
       victim_now = score(c, "victim_p99_inflation");
  if (victim_before && victim_now && *victim_before > 0) {
    double rise = *victim_now / *victim_before - 1;
    if (std::abs(rise) > t.victim_relative)
      out.add(rise > 0 ? Change::kRegression : Change::kImprovement, Kind::kVictim, cur.name,
              "replay:victim",
              fmt::format("the victim's p99 latency {:.1f}x its solo run, was {:.1f}x", *victim_now,
                          *victim_before));
  }
}

// One cost ratio in both reports: worse (or better) only when the intervals of the two medians
// do not overlap and the median moved by more than the tolerance.
// `unit` follows each median and interval bound ("x" for a ratio, " ms" for an absolute figure).
void compare_ratio(Collector& out, const std::string& provider, const std::string& subject,
                   const std::string& what, const std::vector<double>& before,
                   const std::vector<double>& now, const GateTolerance& t,
                   const std::string& unit = "x", std::optional<double> relative = {}) {
  const double tolerance = relative.value_or(t.cost_relative);
  if (before.size() < 2 || now.size() < 2) {
    out.add(Change::kNote, Kind::kCost, provider, subject,
            fmt::format("{}: not compared, too few paired samples ({} in the baseline, {} now)",
                        what, before.size(), now.size()));
    return;
  }
  auto b = stats::median_interval(before, t.confidence);
  auto c = stats::median_interval(now, t.confidence);
  double mb = stats::median(before), mc = stats::median(now);
  double change = mb > 0 ? mc / mb - 1 : 0;
  Change verdict = Change::kNote;
  if (c.low > b.high && change > tolerance)
    verdict = Change::kRegression;
  else if (c.high < b.low && mc * (1 + tolerance) < mb)  // the same factor, the other way
    verdict = Change::kImprovement;
  if (verdict == Change::kNote) return;  // within the noise: nothing to say
  out.add(verdict, Kind::kCost, provider, subject,
          fmt::format("{} {:.2f}{} ({:.0f}% interval {:.2f}-{:.2f}, n={}), was {:.2f}{} "
                      "({:.2f}-{:.2f}, n={}): {:+.0f}%",
                      what, mc, unit, 100 * std::min(b.coverage, c.coverage), c.low, c.high, c.n,
                      mb, unit, b.low, b.high, b.n, 100 * change));
}

void compare_costs(Collector& out, const Report& base_report, const ProviderReport& base,
                   const Report& cur_report, const ProviderReport& cur, const GateTolerance& t) {
  auto run_before = paired_ratios(base.costs.run_samples_ms, base_report.spawn_samples_ms);
  auto run_now = paired_ratios(cur.costs.run_samples_ms, cur_report.spawn_samples_ms);
  if (!base.costs.run_samples_ms.empty() || !cur.costs.run_samples_ms.empty())
    compare_ratio(out, cur.name, "cost:run", "run (create + exec + destroy) / bare spawn",
                  run_before, run_now, t);
  auto call_before = paired_ratios(base.costs.call_samples_ms, base.costs.exec_samples_ms);
  auto call_now = paired_ratios(cur.costs.call_samples_ms, cur.costs.exec_samples_ms);
  if (!base.costs.call_samples_ms.empty() || !cur.costs.call_samples_ms.empty())
    compare_ratio(out, cur.name, "cost:call", "call through the controller / provider exec",
                  call_before, call_now, t);
}

// `sandgate bench`'s figures present in both reports (reports/bench_model.h), each by the
// cost rule: a paired figure on its ratios to the baseline measured in the same round, an
// absolute one on its samples (comparable only on the same machine). Higher is worse for every
// figure. A figure measured in one report and not the other is a note: nothing to compare.
void compare_bench(Collector& out, const Report& base, const Report& cur, const GateTolerance& t) {
  if (!base.bench || !cur.bench) return;
  std::map<std::string, const BenchFigure*> now;
  for (const auto& f : *cur.bench) now[f.name] = &f;
  for (const auto& b : *base.bench) {
    auto it = now.find(b.name);
    if (it == now.end()) {
      out.add(Change::kNote, Kind::kCost, "bench", b.name,
              b.name + ": not in the current report, not compared");
      continue;
    }
    const BenchFigure& c = *it->second;
    if (b.skipped || c.skipped) {
      if (!b.skipped || !c.skipped)
        out.add(Change::kNote, Kind::kCost, "bench", b.name,
                fmt::format("{}: not compared, not measured {}: {}", b.name,
                            c.skipped ? "now" : "in the baseline",
                            said(c.skipped ? *c.skipped : *b.skipped)));
      continue;
    }
    if (b.paired() != c.paired()) {
      out.add(Change::kNote, Kind::kCost, "bench", b.name,
              b.name + ": not compared, paired in one report and absolute in the other");
      continue;
    }
    if (b.paired())
      compare_ratio(out, "bench", b.name, b.name + " / " + said(c.baseline_what, 80),
                    paired_ratios(b.samples, b.baseline_samples),
                    paired_ratios(c.samples, c.baseline_samples), t);
    else
      compare_ratio(out, "bench", b.name, b.name + " (absolute, this machine)", b.samples,
                    c.samples, t, " " + said(c.unit, 20), t.absolute_relative);
  }
}

// Hosts of another kind make every cost and some verdicts differ for reasons of their own.
void compare_hosts(Collector& out, const Report& base, const Report& cur) {
  auto fact = [](const Json& host, const char* section, const char* key) {
    const Json& s = host.is_object() && host.contains(section) ? host[section] : Json();
    const Json& v = s.is_object() && s.contains(key) ? s[key] : Json();
    return v.is_string() ? v.get<std::string>() : std::string("?");
  };
  for (auto [section, key] : {std::pair{"cgroup_layout", "kind"}, std::pair{"kvm", "verdict"}}) {
    std::string b = fact(base.host, section, key), c = fact(cur.host, section, key);
    if (b != c)
      out.add(Change::kNote, Kind::kHost, "host", std::string(section) + "." + key,
              fmt::format("{}.{} is {}, the baseline's host had {}: a host of another kind",
                          section, key, said(c, 40), said(b, 40)));
  }
}

}  // namespace

size_t GateResult::failing() const {
  return std::count_if(findings.begin(), findings.end(), [](const GateFinding& f) {
    return f.change == Change::kRegression && !f.accepted;
  });
}

size_t GateResult::count(Change c) const {
  return std::count_if(findings.begin(), findings.end(),
                       [c](const GateFinding& f) { return f.change == c; });
}

std::vector<std::string> GateResult::what_changed() const {
  std::vector<std::string> lines;
  for (const auto& f : findings) {
    if (f.change == Change::kNote) continue;
    const char* tag = f.change == Change::kImprovement ? "better"
                      : f.accepted                     ? "worse (accepted)"
                                                       : "WORSE";
    lines.push_back(fmt::format("{}: {}", tag, f.text));
  }
  return lines;
}

GateResult run_gate(const Report& baseline, const Report& current, const GateTolerance& t) {
  Collector out(t);
  compare_hosts(out, baseline, current);
  std::map<std::string, const ProviderReport*> now;
  for (const auto& p : current.providers) now[p.name] = &p;
  std::set<std::string> before;
  for (const auto& b : baseline.providers) {
    before.insert(b.name);
    auto it = now.find(b.name);
    if (it == now.end()) {
      out.add(Change::kRegression, Kind::kQualification, b.name, "qualified",
              "not in the current report (it was in the baseline)");
      continue;
    }
    const ProviderReport& c = *it->second;
    compare_probes(out, b, c);
    compare_capabilities(out, b, c);
    compare_qualification(out, b, c);
    compare_replay(out, b, c, t);
    compare_costs(out, baseline, b, current, c, t);
  }
  for (const auto& c : current.providers)
    if (!before.count(c.name))
      out.add(Change::kNote, Kind::kQualification, c.name, "qualified",
              std::string("new in the current report, ") +
                  (c.qualified ? "qualified" : "not qualified"));
  compare_bench(out, baseline, current, t);
  return out.finish();
}

Result<GateTolerance> tolerance_from_json(const Json& j) {
  try {
    detail::Reader r(j, "");
    GateTolerance t;
    auto fraction = [&r](const char* key, double& into, double max) {
      if (auto v = r.opt_number(key)) {
        if (*v < 0 || *v > max)
          r.fail(key, fmt::format("expected a number from 0 to {}, got {}", max, *v));
        into = *v;
      }
    };
    fraction("cost_relative", t.cost_relative, 100);
    fraction("absolute_relative", t.absolute_relative, 100);
    fraction("confidence", t.confidence, 0.999);
    fraction("work_lost_s", t.work_lost_s, 1e9);
    fraction("victim_relative", t.victim_relative, 1e6);
    if (r.has("accept"))
      for (const auto& key : r.strings("accept")) {
        if (key.find('/') == std::string::npos)
          r.fail("accept", "\"" + said(key, 80) + "\" is not PROVIDER/SUBJECT");
        t.accept.insert(key);
      }
    r.done();
    return t;
  } catch (const detail::FieldError& e) {
    return logic_error("read tolerance", e.path + ": " + e.message);
  }
}

Result<GateTolerance> load_tolerance(const std::string& path) {
  SG_ASSIGN_OR_RETURN(std::string text, read_file(path));
  SG_ASSIGN_OR_RETURN(Json j, parse_json(text, path));
  auto t = tolerance_from_json(j);
  if (!t.ok()) return std::move(t).error().context_add(path);
  return t;
}

std::string render_gate_text(const GateResult& r, const std::string& baseline_name,
                             const std::string& current_name) {
  size_t failing = r.failing();
  std::string s = fmt::format(
      "sandgate gate: {} against {}: {}\n", said(current_name, 200), said(baseline_name, 200),
      failing ? fmt::format("{} regression{}", failing, failing == 1 ? "" : "s")
              : std::string("nothing regressed"));
  for (const auto& f : r.findings) {
    const char* tag = f.change == Change::kRegression ? (f.accepted ? "worse (accepted)" : "WORSE")
                      : f.change == Change::kImprovement ? "better"
                                                         : "note";
    s += fmt::format("  {:<16} {}  [{}]\n", tag, f.text, said(f.key, 120));
  }
  for (const auto& key : r.unused_accepts)
    s += fmt::format("  {:<16} --tolerance accepts {}, which changed nothing\n", "note",
                     said(key, 120));
  return s;
}

Json to_json(const GateResult& r) {
  Json findings = Json::array();
  for (const auto& f : r.findings) {
    const char* change = f.change == Change::kRegression    ? "regression"
                         : f.change == Change::kImprovement ? "improvement"
                                                            : "note";
    findings.push_back(
        {{"change", change}, {"key", f.key}, {"text", f.text}, {"accepted", f.accepted}});
  }
  return {
      {"regressions", r.failing()}, {"findings", findings}, {"unused_accepts", r.unused_accepts}};
}

}  // namespace sandgate::reports
