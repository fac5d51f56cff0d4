// What a trace says about burst-silence behaviour: the figures `sandgate trace stats` prints
// and the AgentCgroup paper reports (peak-to-average, change rate, share of peaks in calls).
//
// Definitions (README.md, "Trace format"):
// - average memory: the mean of the samples (the recorder and podman sample at a fixed
//   interval, so this is the time average up to the sampling jitter; it is what the
//   AgentCgroup characterisation uses).
// - change rate: (mem[i] - mem[i-1]) / (t[i] - t[i-1]) between consecutive samples, in bytes
//   per second; the largest rise and the largest drop are both kept.
// - time in calls: the union of the call intervals, clipped to [first sample, last sample],
//   over that span. Calls overlap (a sub-agent's calls sit inside its Task), and a union
//   counts each overlapping second once. Per-intent seconds, by contrast, are the sum of that
//   intent's call durations (an overlap counts in both intents).
// - observed (the kernel's account each call carries, when `record` traced it): counts summed
//   over the traced calls (an entry a call counted but did not keep is counted too);
//   run-queue delay is the calls' total time waiting for a CPU, and the call that waited most.
// - peak sample: a sample whose memory is strictly above the threshold (default 300 MB =
//   300,000,000 bytes, the AgentCgroup README's). It is "inside a call" when its time lies in
//   [start_ms, end_ms] of any call.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/json.h"
#include "replay/trace.h"

namespace sandgate::replay {

inline constexpr uint64_t kDefaultPeakThresholdBytes = 300'000'000;  // AgentCgroup README

struct IntentStats {
  size_t calls = 0;
  double seconds = 0;  // sum of the calls' durations
};

// What the traced calls of a trace were seen doing (CallEvent::observed).
struct ObservedStats {
  size_t traced_calls = 0;  // calls carrying the tracer's account
  uint64_t execs = 0, connects = 0, connects_denied = 0, connects_failed = 0;
  uint64_t sensitive_opens = 0, forks = 0, lost = 0;
  uint64_t egress_denied = 0;  // the guard's refusals
  uint64_t net_bytes_out = 0, net_bytes_in = 0;
  double runq_delay_s = 0;                // summed over the traced calls
  double runq_worst_call_ms = 0;          // the call that waited most, in total
  std::string runq_worst_call;            // its id (a summary: "trace: id")
  std::vector<std::string> untraced_why;  // headers that say the run was not traced, and why
};

struct TraceStats {
  std::string name;  // the file, or "all" for a summary
  double duration_s = 0;
  size_t samples = 0;
  size_t calls = 0;
  std::map<std::string, IntentStats> by_intent;
  uint64_t peak_mem_bytes = 0;
  double avg_mem_bytes = 0;
  double peak_to_avg = 0;             // 0 when the average is 0
  double max_rise_bytes_per_s = 0;    // >= 0
  double max_drop_bytes_per_s = 0;    // <= 0
  double max_change_bytes_per_s = 0;  // the larger magnitude of the two
  uint64_t peak_cpu_millicores = 0;
  double avg_cpu_millicores = 0;
  double sampled_s = 0;            // last sample - first sample
  double in_calls_s = 0;           // union of call intervals within the sampled span
  double time_in_calls_share = 0;  // in_calls_s / sampled_s (0 when nothing was sampled)
  uint64_t peak_threshold_bytes = kDefaultPeakThresholdBytes;
  size_t peak_samples = 0;  // above the threshold
  size_t peak_samples_in_calls = 0;
  double peak_samples_in_calls_share = 0;  // 0 when there are no peak samples
  ObservedStats observed;
};

TraceStats compute_stats(const Trace& trace, const std::string& name,
                         uint64_t peak_threshold_bytes = kDefaultPeakThresholdBytes);

// Figures over several traces: counts, seconds and peak samples are pooled (sums), so shares
// are over all of the time and all of the samples; peak memory and rates are the largest of
// any trace; per-trace ratios are summarised by their median and maximum.
struct StatsSummary {
  size_t traces = 0;
  TraceStats pooled;  // name "all"; avg_mem_bytes is the mean over all samples
  double peak_to_avg_median = 0;
  double peak_to_avg_max = 0;
  std::string peak_to_avg_max_trace;
  std::string max_rise_trace;
};
StatsSummary summarize(const std::vector<TraceStats>& each);

Json to_json(const ObservedStats& o);
Json to_json(const TraceStats& s);
Json to_json(const StatsSummary& s);

// The union of [start, end] intervals clipped to [lo, hi], in ms.
int64_t union_ms(std::vector<std::pair<int64_t, int64_t>> intervals, int64_t lo, int64_t hi);

}  // namespace sandgate::replay
