#include "replay/trace_stats.h"

#include <algorithm>
#include <cmath>

#include "core/stats.h"

namespace sandgate::replay {

int64_t union_ms(std::vector<std::pair<int64_t, int64_t>> intervals, int64_t lo, int64_t hi) {
  std::sort(intervals.begin(), intervals.end());
  int64_t total = 0;
  int64_t cur_start = 0, cur_end = 0;
  bool open = false;
  for (auto [a, b] : intervals) {
    a = std::max(a, lo);
    b = std::min(b, hi);
    if (b <= a) continue;
    if (open && a <= cur_end) {
      cur_end = std::max(cur_end, b);
      continue;
    }
    if (open) total += cur_end - cur_start;
    cur_start = a, cur_end = b, open = true;
  }
  if (open) total += cur_end - cur_start;
  return total;
}

TraceStats compute_stats(const Trace& trace, const std::string& name,
                         uint64_t peak_threshold_bytes) {
  TraceStats s;
  s.name = name;
  s.duration_s = trace.duration_ms() / 1000.0;
  s.samples = trace.samples.size();
  s.calls = trace.calls.size();
  s.peak_threshold_bytes = peak_threshold_bytes;
  for (const auto& c : trace.calls) {
    auto& is = s.by_intent[c.intent];
    ++is.calls;
    is.seconds += (c.end_ms - c.start_ms) / 1000.0;
    if (!c.observed) continue;
    ObservedStats& o = s.observed;
    for (const auto& e : c.observed->egress) o.egress_denied += e.allowed ? 0 : 1;
    if (c.observed->net) {
      o.net_bytes_out += c.observed->net->bytes_out;
      o.net_bytes_in += c.observed->net->bytes_in;
    }
    if (!c.observed->activity) continue;
    const TracedActivity& a = *c.observed->activity;
    ++o.traced_calls;
    o.execs += a.execs.size() + a.execs_not_kept;
    o.connects += a.connects.size() + a.connects_not_kept;
    for (const auto& k : a.connects) {
      o.connects_denied += k.verdict() == "denied";
      o.connects_failed += k.verdict() == "failed";
    }
    o.sensitive_opens += a.sensitive_opens.size() + a.opens_not_kept;
    o.forks += a.forks;
    o.lost += a.lost;
    o.runq_delay_s += a.runq_delay_ns / 1e9;
    if (a.runq_delay_ns / 1e6 > o.runq_worst_call_ms) {
      o.runq_worst_call_ms = a.runq_delay_ns / 1e6;
      o.runq_worst_call = c.id;
    }
  }
  if (trace.header.activity && !trace.header.activity->traced)
    s.observed.untraced_why.push_back(trace.header.activity->why);
  if (trace.samples.empty()) return s;

  double mem_sum = 0, cpu_sum = 0;
  for (size_t i = 0; i < trace.samples.size(); ++i) {
    const Sample& x = trace.samples[i];
    s.peak_mem_bytes = std::max(s.peak_mem_bytes, x.mem_bytes);
    s.peak_cpu_millicores = std::max(s.peak_cpu_millicores, x.cpu_millicores);
    mem_sum += static_cast<double>(x.mem_bytes);
    cpu_sum += static_cast<double>(x.cpu_millicores);
    if (i > 0) {
      const Sample& p = trace.samples[i - 1];
      // The reader guarantees strictly increasing times, so dt > 0.
      double dt = (x.t_ms - p.t_ms) / 1000.0;
      double rate = (static_cast<double>(x.mem_bytes) - static_cast<double>(p.mem_bytes)) / dt;
      s.max_rise_bytes_per_s = std::max(s.max_rise_bytes_per_s, rate);
      s.max_drop_bytes_per_s = std::min(s.max_drop_bytes_per_s, rate);
    }
    if (x.mem_bytes > peak_threshold_bytes) {
      ++s.peak_samples;
      bool inside = std::any_of(trace.calls.begin(), trace.calls.end(), [&](const CallEvent& c) {
        return c.start_ms <= x.t_ms && x.t_ms <= c.end_ms;
      });
      if (inside) ++s.peak_samples_in_calls;
    }
  }
  double n = static_cast<double>(trace.samples.size());
  s.avg_mem_bytes = mem_sum / n;
  s.avg_cpu_millicores = cpu_sum / n;
  s.peak_to_avg = s.avg_mem_bytes > 0 ? s.peak_mem_bytes / s.avg_mem_bytes : 0;
  s.max_change_bytes_per_s = std::max(s.max_rise_bytes_per_s, -s.max_drop_bytes_per_s);

  int64_t lo = trace.samples.front().t_ms, hi = trace.samples.back().t_ms;
  std::vector<std::pair<int64_t, int64_t>> intervals;
  for (const auto& c : trace.calls) intervals.emplace_back(c.start_ms, c.end_ms);
  s.sampled_s = (hi - lo) / 1000.0;
  s.in_calls_s = union_ms(std::move(intervals), lo, hi) / 1000.0;
  s.time_in_calls_share = s.sampled_s > 0 ? s.in_calls_s / s.sampled_s : 0;
  s.peak_samples_in_calls_share =
      s.peak_samples > 0 ? static_cast<double>(s.peak_samples_in_calls) / s.peak_samples : 0;
  return s;
}

StatsSummary summarize(const std::vector<TraceStats>& each) {
  StatsSummary sum;
  sum.traces = each.size();
  TraceStats& all = sum.pooled;
  all.name = "all";
  if (each.empty()) return sum;
  all.peak_threshold_bytes = each.front().peak_threshold_bytes;
  double mem_weighted = 0, cpu_weighted = 0;
  std::vector<double> ratios;
  for (const auto& s : each) {
    all.duration_s += s.duration_s;
    all.samples += s.samples;
    all.calls += s.calls;
    for (const auto& [intent, is] : s.by_intent) {
      all.by_intent[intent].calls += is.calls;
      all.by_intent[intent].seconds += is.seconds;
    }
    if (s.peak_mem_bytes > all.peak_mem_bytes) all.peak_mem_bytes = s.peak_mem_bytes;
    all.peak_cpu_millicores = std::max(all.peak_cpu_millicores, s.peak_cpu_millicores);
    mem_weighted += s.avg_mem_bytes * s.samples;
    cpu_weighted += s.avg_cpu_millicores * s.samples;
    if (s.max_rise_bytes_per_s > all.max_rise_bytes_per_s) {
      all.max_rise_bytes_per_s = s.max_rise_bytes_per_s;
      sum.max_rise_trace = s.name;
    }
    all.max_drop_bytes_per_s = std::min(all.max_drop_bytes_per_s, s.max_drop_bytes_per_s);
    all.sampled_s += s.sampled_s;
    all.in_calls_s += s.in_calls_s;
    all.peak_samples += s.peak_samples;
    all.peak_samples_in_calls += s.peak_samples_in_calls;
    ObservedStats& o = all.observed;
    const ObservedStats& x = s.observed;
    o.traced_calls += x.traced_calls;
    o.execs += x.execs;
    o.connects += x.connects;
    o.connects_denied += x.connects_denied;
    o.connects_failed += x.connects_failed;
    o.sensitive_opens += x.sensitive_opens;
    o.forks += x.forks;
    o.lost += x.lost;
    o.egress_denied += x.egress_denied;
    o.net_bytes_out += x.net_bytes_out;
    o.net_bytes_in += x.net_bytes_in;
    o.runq_delay_s += x.runq_delay_s;
    if (x.runq_worst_call_ms > o.runq_worst_call_ms) {
      o.runq_worst_call_ms = x.runq_worst_call_ms;
      o.runq_worst_call = s.name + ": " + x.runq_worst_call;
    }
    for (const auto& w : x.untraced_why) o.untraced_why.push_back(s.name + ": " + w);
    if (s.samples > 0) ratios.push_back(s.peak_to_avg);
    if (s.peak_to_avg > sum.peak_to_avg_max) {
      sum.peak_to_avg_max = s.peak_to_avg;
      sum.peak_to_avg_max_trace = s.name;
    }
  }
  if (all.samples > 0) {
    all.avg_mem_bytes = mem_weighted / all.samples;
    all.avg_cpu_millicores = cpu_weighted / all.samples;
  }
  // Pooled peak-to-average (largest peak over the mean of all samples) is not a figure anyone
  // quotes; the per-trace median and maximum are.
  all.peak_to_avg = 0;
  all.max_change_bytes_per_s = std::max(all.max_rise_bytes_per_s, -all.max_drop_bytes_per_s);
  all.time_in_calls_share = all.sampled_s > 0 ? all.in_calls_s / all.sampled_s : 0;
  all.peak_samples_in_calls_share =
      all.peak_samples > 0 ? static_cast<double>(all.peak_samples_in_calls) / all.peak_samples : 0;
  sum.peak_to_avg_median = stats::median(std::move(ratios));
  return sum;
}

Json to_json(const ObservedStats& o) {
  Json j = {{"traced_calls", o.traced_calls},
            {"execs", o.execs},
            {"connects", o.connects},
            {"connects_denied", o.connects_denied},
            {"connects_failed", o.connects_failed},
            {"sensitive_opens", o.sensitive_opens},
            {"forks", o.forks},
            {"lost", o.lost},
            {"egress_denied", o.egress_denied},
            {"net_bytes_out", o.net_bytes_out},
            {"net_bytes_in", o.net_bytes_in},
            {"runq_delay_s", o.runq_delay_s},
            {"runq_worst_call", o.runq_worst_call},
            {"runq_worst_call_ms", o.runq_worst_call_ms}};
  if (!o.untraced_why.empty()) j["untraced_why"] = o.untraced_why;
  return j;
}

Json to_json(const TraceStats& s) {
  Json intents = Json::object();
  for (const auto& [intent, is] : s.by_intent)
    intents[intent] = {{"calls", is.calls}, {"seconds", is.seconds}};
  return {
      {"name", s.name},
      {"duration_s", s.duration_s},
      {"samples", s.samples},
      {"calls", s.calls},
      {"calls_by_intent", intents},
      {"peak_mem_bytes", s.peak_mem_bytes},
      {"avg_mem_bytes", s.avg_mem_bytes},
      {"peak_to_avg", s.peak_to_avg},
      {"max_rise_bytes_per_s", s.max_rise_bytes_per_s},
      {"max_drop_bytes_per_s", s.max_drop_bytes_per_s},
      {"max_change_bytes_per_s", s.max_change_bytes_per_s},
      {"peak_cpu_millicores", s.peak_cpu_millicores},
      {"avg_cpu_millicores", s.avg_cpu_millicores},
      {"sampled_s", s.sampled_s},
      {"in_calls_s", s.in_calls_s},
      {"time_in_calls_share", s.time_in_calls_share},
      {"peak_threshold_bytes", s.peak_threshold_bytes},
      {"peak_samples", s.peak_samples},
      {"peak_samples_in_calls", s.peak_samples_in_calls},
      {"peak_samples_in_calls_share", s.peak_samples_in_calls_share},
      {"observed", to_json(s.observed)},
  };
}

Json to_json(const StatsSummary& s) {
  Json j = to_json(s.pooled);
  j.erase("peak_to_avg");  // not meaningful pooled; see the median and maximum
  j["traces"] = s.traces;
  j["peak_to_avg_median"] = s.peak_to_avg_median;
  j["peak_to_avg_max"] = s.peak_to_avg_max;
  j["peak_to_avg_max_trace"] = s.peak_to_avg_max_trace;
  j["max_rise_trace"] = s.max_rise_trace;
  return j;
}

}  // namespace sandgate::replay
