#include "replay/replayer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "core/fd.h"
#include "core/log.h"

namespace sandgate::replay {
namespace {

using Clock = std::chrono::steady_clock;

// Trace time -> replay time: piecewise linear through anchors (trace_ms, replay_ms).
class TimeMap {
 public:
  void add(int64_t trace_ms, double replay_ms) {
    if (!anchors_.empty() && trace_ms <= anchors_.back().first) {
      anchors_.back().second = std::max(anchors_.back().second, replay_ms);
      return;
    }
    anchors_.emplace_back(trace_ms, replay_ms);
  }
  double operator()(int64_t t) const {
    if (anchors_.empty()) return static_cast<double>(t);
    if (t <= anchors_.front().first)
      return anchors_.front().second + static_cast<double>(t - anchors_.front().first);
    for (size_t i = 1; i < anchors_.size(); ++i) {
      auto [t0, r0] = anchors_[i - 1];
      auto [t1, r1] = anchors_[i];
      if (t <= t1)
        return r0 + (r1 - r0) * static_cast<double>(t - t0) / static_cast<double>(t1 - t0);
    }
    return anchors_.back().second + static_cast<double>(t - anchors_.back().first);
  }

 private:
  std::vector<std::pair<int64_t, double>> anchors_;
};

int64_t round_ms(double ms) { return static_cast<int64_t>(std::llround(ms)); }

bool unmeasured(const Trace& t, const std::string& field) {
  return std::find(t.header.unmeasured.begin(), t.header.unmeasured.end(), field) !=
         t.header.unmeasured.end();
}

}  // namespace

workloads::Segment fit_segment(const workloads::Segment& segment, double overhead_ms) {
  workloads::Segment out = segment;
  if (overhead_ms <= 0 || segment.end_ms <= 0) return out;
  double room = std::max(0.0, static_cast<double>(segment.end_ms) - overhead_ms);
  double k = room / static_cast<double>(segment.end_ms);
  out.end_ms = round_ms(room);
  out.points.clear();
  for (const auto& p : segment.points) {
    workloads::SegmentPoint q = p;
    q.t_ms = std::min<int64_t>(round_ms(static_cast<double>(p.t_ms) * k), out.end_ms);
    // Squeezed points landing on one millisecond: the later one wins, as in the plan.
    if (!out.points.empty() && out.points.back().t_ms == q.t_ms)
      out.points.back() = q;
    else
      out.points.push_back(q);
  }
  if (out.points.empty()) out.points.push_back({});
  out.points.front().t_ms = 0;
  return out;
}

uint64_t PlannedCall::target_peak_bytes() const {
  uint64_t peak = 0;
  for (const auto& p : segment.points) peak = std::max(peak, p.mem_bytes);
  return peak;
}

int64_t PlannedCall::burst_onset_ms() const {
  uint64_t peak = target_peak_bytes();
  for (const auto& p : segment.points)
    if (p.mem_bytes * 2 >= peak) return p.t_ms;
  return 0;
}

double ReplayPlan::speedup() const {
  return duration_ms > 0 ? static_cast<double>(trace_duration_ms) / static_cast<double>(duration_ms)
                         : 1.0;
}

controller::Cgroup main_cgroup_of(const controller::Cgroup& run) {
  controller::Cgroup main{run.rel + "/main", {}};
  for (const auto& [h, dir] : run.dirs) main.dirs[h] = dir + "/main";
  return main;
}

Result<ReplayPlan> plan_replay(const Trace& trace, const std::string& name,
                               const ReplayTiming& timing) {
  if (!(timing.time_scale > 0))
    return logic_error("plan replay", "--time-scale must be positive", name);
  if (trace.samples.empty()) return logic_error("plan replay", "the trace has no samples", name);
  ReplayPlan plan;
  plan.name = name;
  plan.trace_duration_ms = trace.duration_ms();
  plan.trace_calls = trace.calls.size();

  // Calls of one run are sequential: a call starting inside the current one is absorbed.
  std::vector<CallEvent> calls(trace.calls);
  std::stable_sort(calls.begin(), calls.end(),
                   [](const CallEvent& a, const CallEvent& b) { return a.start_ms < b.start_ms; });
  std::vector<PlannedCall> merged;
  for (const auto& c : calls) {
    if (!merged.empty() && c.start_ms < merged.back().trace_end_ms) {
      merged.back().trace_end_ms = std::max(merged.back().trace_end_ms, c.end_ms);
      ++merged.back().absorbed;
      ++plan.absorbed_calls;
      continue;
    }
    PlannedCall p;
    p.id = c.id;
    p.intent = c.intent;
    p.command = c.command;
    p.trace_start_ms = c.start_ms;
    p.trace_end_ms = c.end_ms;
    merged.push_back(std::move(p));
  }

  // The time map: calls keep their length, gaps longer than max_silence are shortened.
  const double max_gap = to_millis(timing.max_silence);
  auto gap_length = [&](int64_t len) {
    double l = static_cast<double>(len);
    return timing.compress_silence && l > max_gap ? max_gap : l;
  };
  TimeMap map;
  int64_t prev_end = 0;
  double r = 0;
  map.add(0, 0);
  for (const auto& c : merged) {
    int64_t start = std::max(c.trace_start_ms, prev_end);
    r += gap_length(start - prev_end);
    map.add(start, r);
    r += static_cast<double>(c.trace_end_ms - start);
    map.add(c.trace_end_ms, r);
    prev_end = std::max(prev_end, c.trace_end_ms);
  }
  if (plan.trace_duration_ms > prev_end)
    map.add(plan.trace_duration_ms, r + gap_length(plan.trace_duration_ms - prev_end));
  auto replay_ms = [&](int64_t t) { return map(t) / timing.time_scale; };
  plan.duration_ms = round_ms(replay_ms(plan.trace_duration_ms));

  // The run's level between calls (samples outside every call), and each call's baseline.
  const auto& samples = trace.samples;
  auto inside = [&](int64_t t) {
    for (const auto& c : merged)
      if (t >= c.trace_start_ms && t <= c.trace_end_ms) return true;
    return false;
  };
  uint64_t level = 0;
  uint64_t level_pids = 0;
  uint64_t level_io = 0;
  size_t si = 0;
  const bool no_pids = unmeasured(trace, "pids"), no_io = unmeasured(trace, "io_bytes");
  for (auto& c : merged) {
    // Samples before the call start set the held level.
    for (; si < samples.size() && samples[si].t_ms < c.trace_start_ms; ++si) {
      const Sample& s = samples[si];
      level_io = s.io_bytes;
      if (inside(s.t_ms)) continue;
      if (plan.hold.empty() || plan.hold.back().bytes != s.mem_bytes)
        plan.hold.push_back({round_ms(replay_ms(s.t_ms)), s.mem_bytes});
      level = s.mem_bytes;
      level_pids = s.pids;
    }
    if (plan.hold.empty() && !samples.empty() && samples.front().t_ms >= c.trace_start_ms) {
      // The call starts before the first sample: nothing says what the run held; hold nothing.
      level = 0;
    }
    c.baseline_bytes = level;
    c.start_ms = round_ms(replay_ms(c.trace_start_ms));
    c.end_ms = std::max(c.start_ms, round_ms(replay_ms(c.trace_end_ms)));

    // The call's slice: samples in (start, end], or, for a call shorter than one interval, the
    // first sample after it (its interval covers the call).
    std::vector<const Sample*> slice;
    size_t sj = si;
    for (; sj < samples.size() && samples[sj].t_ms <= c.trace_end_ms; ++sj)
      if (samples[sj].t_ms > c.trace_start_ms) slice.push_back(&samples[sj]);
    if (slice.empty() && sj < samples.size() &&
        samples[sj].t_ms - c.trace_end_ms <= std::max<int64_t>(trace.header.interval_ms, 1))
      slice.push_back(&samples[sj]);

    workloads::Segment& seg = c.segment;
    seg.name = c.id;
    seg.workdir = ".";
    seg.end_ms = c.end_ms - c.start_ms;
    double call_origin = replay_ms(c.trace_start_ms);
    int64_t prev_t = c.trace_start_ms;
    for (const Sample* s : slice) {
      workloads::SegmentPoint p;
      // The level over the interval ending at this sample starts at the previous sample.
      p.t_ms = std::clamp<int64_t>(
          round_ms(replay_ms(std::max(prev_t, c.trace_start_ms)) - call_origin), 0, seg.end_ms);
      p.mem_bytes = s->mem_bytes > level ? s->mem_bytes - level : 0;
      p.cpu_millicores = s->cpu_millicores;
      p.pids = no_pids ? 0 : std::max<uint64_t>(1, s->pids > level_pids ? s->pids - level_pids : 1);
      p.io_bytes = no_io || s->io_bytes < level_io ? 0 : s->io_bytes - level_io;
      if (!seg.points.empty()) p.io_bytes = std::max(p.io_bytes, seg.points.back().io_bytes);
      c.trace_peak_bytes = std::max(c.trace_peak_bytes, s->mem_bytes);
      if (!seg.points.empty() && seg.points.back().t_ms == p.t_ms)
        seg.points.back() = p;
      else
        seg.points.push_back(p);
      prev_t = s->t_ms;
    }
    if (seg.points.empty()) seg.points.push_back({0, 0, 0, no_pids ? 0u : 1u, 0});
    seg.points.front().t_ms = 0;
    // Past the call's end: move on to the samples after it.
    for (; si < samples.size() && samples[si].t_ms <= c.trace_end_ms; ++si)
      level_io = samples[si].io_bytes;
  }
  for (; si < samples.size(); ++si) {
    const Sample& s = samples[si];
    if (inside(s.t_ms)) continue;
    if (plan.hold.empty() || plan.hold.back().bytes != s.mem_bytes)
      plan.hold.push_back({round_ms(replay_ms(s.t_ms)), s.mem_bytes});
  }
  plan.calls = std::move(merged);
  return plan;
}

ReplayedRun replay_run(controller::Controller& controller, providers::Provider& provider,
                       const ReplayPlan& plan, const RunReplayOptions& options,
                       const RunObserver& observer) {
  ReplayedRun out;
  out.name = plan.name;
  out.planned_calls = plan.calls.size();
  auto began = Clock::now();
  providers::EnvSpec spec = options.spec;
  spec.readonly_mounts.push_back({options.load_binary, kLoadInside});
  auto opened = session::RunSession::open(controller, provider, spec);
  if (!opened.ok()) {
    out.start_failed = true;
    out.error = "the run could not start: " + opened.error().message();
    return out;
  }
  session::RunSession& run = **opened;
  out.run_id = run.run_id();
  const std::string ws = run.workspace_path();
  const controller::Cgroup run_cg = run.run().cgroup();
  if (observer.opened) observer.opened(plan.name, run_cg, main_cgroup_of(run_cg));

  // What the run holds before any replay process (its supervisor): the trace's levels count
  // the recorded run's own supervisor, so the hold makes up only the rest.
  uint64_t offset = 0;
  if (auto u = run.resident_usage(); u.ok()) offset = u->memory_bytes;
  auto held = [&](uint64_t level) { return level > offset ? level - offset : 0; };
  auto stopped = [&] { return options.stop && options.stop->load(); };
  auto fail = [&](const std::string& what) {
    out.error = what;
    spdlog::warn("replay {}: {}", plan.name, what);
  };

  // The run's inputs are files in its workspace, put there by the environment (on a microVM,
  // inside its guest): the held level, which the hold process follows, and each call's
  // segment, put while the call before it is done so that it is not on the call's path.
  const std::string level_file = "hold.level";
  const std::string segment_file = "segment.json";
  uint64_t first_level = plan.hold.empty() ? 0 : plan.hold.front().bytes;
  if (auto s = run.put_file(level_file, std::to_string(held(first_level)) + "\n"); !s.ok()) {
    fail(s.error().message());
  } else {
    providers::Call hold;
    hold.argv = {kLoadInside, "hold", "--follow", ws + "/" + level_file, "--detach"};
    // A resident process of the run (its main cgroup), not a call: it must outlive every call.
    auto r = run.run_resident(hold);
    if (!r.ok())
      fail("start the run's hold process: " + r.error().message());
    else if (!r->status.exited || r->status.code != 0)
      fail("the run's hold process did not start (" + r->status.describe() +
           "): " + r->stderr_data);
  }
  // Without its hold the agent never ran (the level file, or the process that holds it).
  out.start_failed = !out.error.empty();

  const Clock::time_point origin = Clock::now();
  if (observer.ready) observer.ready(plan.name);
  auto at = [&](double ms) {
    return origin + std::chrono::duration_cast<Clock::duration>(
                        std::chrono::duration<double, std::milli>(ms));
  };
  auto since_origin_ms = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(t - origin).count();
  };
  auto sleep_until = [&](Clock::time_point t) {
    while (!stopped()) {
      auto now = Clock::now();
      if (now >= t) return;
      std::this_thread::sleep_for(
          std::min<Clock::duration>(t - now, std::chrono::milliseconds(100)));
    }
  };
  size_t h = 1;  // hold[0] was written before the hold process started
  uint64_t last_written = first_level;
  auto advance_until = [&](double until_ms) {
    for (;
         h < plan.hold.size() && static_cast<double>(plan.hold[h].at_ms) <= until_ms && !stopped();
         ++h) {
      sleep_until(at(static_cast<double>(plan.hold[h].at_ms)));
      if (plan.hold[h].bytes == last_written) continue;
      if (auto s = run.put_file(level_file, std::to_string(held(plan.hold[h].bytes)) + "\n");
          !s.ok())
        spdlog::warn("replay {}: {}", plan.name, s.error().message());
      last_written = plan.hold[h].bytes;
    }
    sleep_until(at(until_ms));
  };

  // A call costs more than its segment: the call's cgroup, the process start, the clean-up
  // (tens of ms here). The recorded call's duration already includes that cost once, so each
  // segment is fitted into its call's duration minus the overhead measured on this run's
  // previous calls (smoothed); otherwise every call would end late by the overhead.
  double overhead_ms = 0;
  bool have_overhead = false;
  // The segment of call `i`, fitted to the overhead measured so far; the error, if any.
  auto put_segment = [&](size_t i) -> std::string {
    if (i >= plan.calls.size()) return "";
    workloads::Segment seg = fit_segment(plan.calls[i].segment, overhead_ms);
    seg.workdir = ws;
    auto s = run.put_file(segment_file, dump_json(seg.to_json()));
    return s.ok() ? "" : s.error().message();
  };
  std::string segment_error = out.error.empty() ? put_segment(0) : "";
  size_t index = 0;
  for (const auto& call : plan.calls) {
    if (!out.error.empty() || stopped()) break;
    advance_until(static_cast<double>(call.start_ms));
    if (stopped()) break;
    // The hold stands for the agent's own resident memory: when the kernel OOM-killed it, the
    // agent is gone and the rest of its calls would never have been made. (On a microVM the
    // guest's count is as of its last exec's end.)
    if (auto u = run.resident_usage(); u.ok() && u->oom_kills > 0) {
      out.agent_killed = true;
      fail("the run's resident process (its hold) was OOM-killed: the agent is gone, " +
           std::to_string(plan.calls.size() - index) + " call(s) not replayed");
      break;
    }
    ++index;
    ReplayedCall rc;
    rc.run = plan.name;
    rc.id = call.id;
    rc.intent = call.intent;
    rc.planned_start_ms = static_cast<double>(call.start_ms);
    rc.planned_end_ms = static_cast<double>(call.end_ms);
    rc.target_peak_bytes = call.target_peak_bytes();
    rc.burst_onset_ms = call.burst_onset_ms();
    if (!segment_error.empty()) {
      rc.error = segment_error;
    } else {
      session::CallRequest req;
      req.argv = {kLoadInside, "run", "--segment", ws + "/" + segment_file};
      req.intent = call.intent;
      // Measured as the recorder measures a call: from the request to the outcome, host side.
      auto requested = Clock::now();
      auto outcome = run.call(req);
      auto ended = Clock::now();
      rc.actual_start_ms = since_origin_ms(requested);
      rc.actual_end_ms = since_origin_ms(ended);
      if (!outcome.ok()) {
        rc.error = outcome.error().message();
      } else {
        rc.outcome = std::move(outcome).value();
        if (auto j = parse_json(rc.outcome.exec.stdout_data, "sandgate-load report");
            j.ok() && j->is_object())
          if (auto a = workloads::Achieved::from_json(*j); a.ok())
            rc.achieved = std::move(a).value();
        if (rc.achieved && rc.outcome.termination == controller::Termination::kExited) {
          double measured = std::max(0.0, rc.actual_end_ms - rc.actual_start_ms -
                                              static_cast<double>(rc.achieved->wall_ms));
          overhead_ms = have_overhead ? 0.7 * overhead_ms + 0.3 * measured : measured;
          have_overhead = true;
        }
        rc.outcome.exec.stdout_data.clear();
        rc.outcome.exec.stderr_data.clear();
      }
    }
    segment_error = put_segment(index);  // the next call's, while this run is idle
    if (observer.call_done) observer.call_done(rc);
    out.calls.push_back(std::move(rc));
  }
  if (out.error.empty() && !stopped()) {
    advance_until(static_cast<double>(plan.duration_ms));
    // Killed after its last call, while it held the run's level to the trace's end: the agent
    // did not live to the end either.
    if (auto u = run.resident_usage(); u.ok() && u->oom_kills > 0) {
      out.agent_killed = true;
      fail("the run's resident process (its hold) was OOM-killed after the run's last call");
    }
  }
  if (observer.closed) observer.closed(plan.name);
  if (auto s = run.close(); !s.ok() && out.error.empty()) out.error = s.error().message();
  out.wall_s = std::chrono::duration<double>(Clock::now() - began).count();
  return out;
}

}  // namespace sandgate::replay
