#include "replay/call_use.h"

#include <algorithm>

#include "core/stats.h"

namespace sandgate::replay {
namespace {

bool inside(const CallEvent& c, int64_t t_ms) { return c.start_ms <= t_ms && t_ms <= c.end_ms; }

}  // namespace

RunBaseline run_baseline(const Trace& trace) {
  std::vector<double> mem, cpu, pids;
  for (const auto& s : trace.samples) {
    bool in_call = std::any_of(trace.calls.begin(), trace.calls.end(),
                               [&](const CallEvent& c) { return inside(c, s.t_ms); });
    if (in_call) continue;
    mem.push_back(static_cast<double>(s.mem_bytes));
    cpu.push_back(static_cast<double>(s.cpu_millicores));
    pids.push_back(static_cast<double>(s.pids));
  }
  RunBaseline b;
  if (!mem.empty()) {
    b.mem = stats::median(std::move(mem));
    b.cpu = stats::median(std::move(cpu));
    b.pids = stats::median(std::move(pids));
    return b;
  }
  // Always in a call: the least it ever held is the most that can be called a baseline.
  const auto& s = trace.samples;
  auto least = [&](auto field) {
    double m = static_cast<double>(field(s.front()));
    for (const auto& x : s) m = std::min(m, static_cast<double>(field(x)));
    return m;
  };
  b.mem = least([](const Sample& x) { return x.mem_bytes; });
  b.cpu = least([](const Sample& x) { return x.cpu_millicores; });
  b.pids = least([](const Sample& x) { return x.pids; });
  return b;
}

std::vector<CallUse> call_uses(const Trace& trace, const RunBaseline& b) {
  std::vector<CallUse> out;
  out.reserve(trace.calls.size());
  for (const auto& c : trace.calls) {
    double mem = 0, cpu = 0, pids = 0;
    for (const auto& s : trace.samples) {
      if (!inside(c, s.t_ms)) continue;
      mem = std::max(mem, static_cast<double>(s.mem_bytes));
      cpu = std::max(cpu, static_cast<double>(s.cpu_millicores));
      pids = std::max(pids, static_cast<double>(s.pids));
    }
    out.push_back({c.intent, (c.end_ms - c.start_ms) / 1000.0, std::max(0.0, mem - b.mem),
                   std::max(0.0, cpu - b.cpu), std::max(0.0, pids - b.pids)});
  }
  return out;
}

std::map<std::string, IntentCalls> calls_by_intent(const std::vector<CallUse>& uses) {
  std::map<std::string, IntentCalls> by;
  for (const auto& u : uses) {
    IntentCalls& i = by[u.intent];
    ++i.calls;
    i.seconds += u.seconds;
    i.mem.push_back(u.above_baseline);
    i.cpu.push_back(u.cpu_above_baseline);
    i.pids.push_back(u.pids_above_baseline);
  }
  return by;
}

}  // namespace sandgate::replay
