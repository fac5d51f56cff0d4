#include "controller/ladder.h"

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/log.h"

namespace sandgate::controller {
namespace {
// A fork bomb pinned at pids.max for this long is cancelled: the kernel refuses its forks, but
// it would spin until its timeout otherwise.
constexpr Duration kPidsPinnedLimit = std::chrono::milliseconds(500);
constexpr Duration kCpuRateWindow = std::chrono::milliseconds(100);
// The run-queue rule throttles the call using the most CPU only if it uses more than this and
// more than the squeeze would leave it: a call at a tenth of a core is not what keeps the
// others waiting (the host's own load, outside sandgate, is), and squeezing a call to more
// than it uses changes nothing.
constexpr double kRunqHogMinCores = 0.1;

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}
}  // namespace

Ladder::Ladder(const LadderSettings& settings, const Grant& grant, const CgroupFeatures& features,
               Cgroup cgroup, Actuator& actuator)
    : settings_(settings), grant_(grant), features_(features), cgroup_(std::move(cgroup)),
      actuator_(actuator) {}

void Ladder::record(const std::string& action, Duration at, const std::string& reason) {
  obs_.actions.push_back({action, at, reason});
  spdlog::debug("ladder {} {} at {}: {}", cgroup_.rel, action, format_duration(at), reason);
}

void Ladder::observe(const LadderInput& in) {
  const Usage& u = in.usage;
  ++obs_.samples;
  uint64_t mem = std::max<uint64_t>(u.memory_current, u.memory_peak.value_or(0));
  obs_.peaks.memory_bytes = std::max(obs_.peaks.memory_bytes, mem);
  obs_.peaks.pids = std::max(obs_.peaks.pids, u.pids_current);
  // CPU counters move in scheduler-tick steps: a rate over a few milliseconds is noise, so the
  // peak rate is taken over windows of at least kCpuRateWindow.
  if (first_) {
    last_cpu_us_ = u.cpu_usage_us;
    last_at_ = in.now;
  } else if (in.now - last_at_ >= kCpuRateWindow && u.cpu_usage_us >= last_cpu_us_) {
    double cores = static_cast<double>(u.cpu_usage_us - last_cpu_us_) /
                   (static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(in.now - last_at_).count()));
    obs_.peaks.cpu_cores = std::max(obs_.peaks.cpu_cores, cores);
    last_cpu_us_ = u.cpu_usage_us;
    last_at_ = in.now;
  }
  if (in.net)
    obs_.peaks.net_bytes_per_s =
        std::max(obs_.peaks.net_bytes_per_s.value_or(0), in.net->bytes_per_s());
  obs_.cpu_usage_us = u.cpu_usage_us;
  obs_.cpu_throttled_us = u.cpu_throttled_us;
  if (u.memory_events.oom_kill > last_oom_kill_) {
    record("oom_kill", in.now, "the kernel OOM-killed a process at the call's memory limit");
    obs_.oom_kills = u.memory_events.oom_kill;
  }
  obs_.pids_refused = u.pids_max_events;
  last_oom_kill_ = u.memory_events.oom_kill;
  first_ = false;
}

bool Ladder::squeeze(Duration now, Limits* applied) {
  double cores = grant_.cpu_cores.value_or(1.0) * settings_.throttle_cpu_fraction;
  Limits squeeze;
  squeeze.cpu_cores = std::max(cores, 0.01);
  if (applied) *applied = squeeze;
  if (squeezed_) return true;  // already on for the other reason
  if (auto s = actuator_.set_limits(cgroup_, squeeze); !s.ok()) {
    spdlog::warn("ladder: throttle {}: {}", cgroup_.rel, s.error().message());
    return false;
  }
  squeezed_ = true;
  throttled_since_ = now;
  return true;
}

void Ladder::release(Duration now) {
  if (!squeezed_ || throttled_ || runq_throttled_ || net_throttled_) return;  // another holds
  Limits restore;
  // No grant of cores: give back an unlimited quota (a large value the backends clamp).
  restore.cpu_cores = grant_.cpu_cores.value_or(1024.0);
  (void)actuator_.set_limits(cgroup_, restore);
  squeezed_ = false;
  obs_.throttled_for += now - throttled_since_;
}

std::string Ladder::squeeze_stays() const {
  if (!squeezed_) return "";
  std::vector<std::string> why;
  if (throttled_) why.push_back("memory");
  if (runq_throttled_) why.push_back("the run-queue delay of other calls");
  if (net_throttled_) why.push_back("the network burst");
  if (why.empty()) return "";
  std::string s = "; the cpu squeeze stays for " + why[0];
  for (size_t i = 1; i < why.size(); ++i) s += (i + 1 == why.size() ? " and " : ", ") + why[i];
  return s;
}

void Ladder::throttle(const LadderInput& in) {
  // memory.high (set with the grant where the layout has it) already makes the kernel reclaim
  // and throttle allocations; the CPU squeeze slows the allocator on every layout.
  Limits squeeze;
  if (!this->squeeze(in.now, &squeeze)) return;
  throttled_ = true;
  state_ = State::kThrottled;
  record("throttle", in.now,
         "memory " + human_bytes({in.usage.memory_current}) + " reached " +
             std::to_string(std::lround(settings_.throttle_at * 100)) + "% of the " +
             format_bytes(*grant_.memory_max) + " grant; cpu squeezed to " +
             std::to_string(squeeze.cpu_cores.value()).substr(0, 4) + " cores");
}

void Ladder::unthrottle(const LadderInput& in) {
  throttled_ = false;
  state_ = State::kNormal;
  release(in.now);
  record("unthrottle", in.now,
         "memory back to " + human_bytes({in.usage.memory_current}) + squeeze_stays());
}

// Other calls waiting for a CPU while this one uses the most of it: this one is squeezed until
// they wait less than half the threshold for a whole window.
void Ladder::step_runq(const LadderInput& in) {
  const double at = settings_.runq_throttle_ms_per_s;
  if (at <= 0 || !in.runq) return;
  const RunqSignal& r = *in.runq;
  if (!runq_throttled_) {
    const double squeezed_to = grant_.cpu_cores.value_or(1.0) * settings_.throttle_cpu_fraction;
    if (!r.most_cpu || r.others_ms_per_s < at ||
        r.cpu_cores <= std::max(kRunqHogMinCores, squeezed_to))
      return;
    Limits squeeze;
    if (!this->squeeze(in.now, &squeeze)) return;
    runq_throttled_ = true;
    runq_since_ = in.now;
    record(
        "throttle", in.now,
        "run-queue delay: " + (r.worst_call.empty() ? std::string("another call") : r.worst_call) +
            " waited " + fixed(r.others_ms_per_s, 0) + " ms per second for a CPU over " +
            format_duration(settings_.runq_window) + " (threshold " + fixed(at, 0) +
            " ms/s) while this call used the most CPU, " + fixed(r.cpu_cores, 2) +
            " cores; cpu squeezed to " + fixed(squeeze.cpu_cores.value(), 2) + " cores");
    return;
  }
  if (r.others_ms_per_s < at / 2 && in.now - runq_since_ >= settings_.runq_window) {
    runq_throttled_ = false;
    release(in.now);
    record("unthrottle", in.now,
           "run-queue delay of the other calls down to " + fixed(r.others_ms_per_s, 0) +
               " ms per second (below half the " + fixed(at, 0) + " ms/s threshold)" +
               squeeze_stays());
  }
}

// The call's own traffic over the window above the threshold: it is squeezed until its rate
// stays below half the threshold for a whole window. The squeeze slows what the call's CPU
// drives (a sender's syscalls; a reader's draining, and through it TCP's receive window); a
// call whose traffic costs it less CPU than the squeeze leaves it is left alone, since
// squeezing it would change nothing (its peak rate is still in the outcome).
void Ladder::step_net(const LadderInput& in) {
  const double at = static_cast<double>(settings_.net_throttle_bytes_per_s);
  if (at <= 0 || !in.net) return;
  const NetSignal& n = *in.net;
  const double rate = n.bytes_per_s();
  auto per_s = [](double v) {
    return human_bytes(Bytes{static_cast<uint64_t>(std::llround(v))}) + "/s";
  };
  if (!net_throttled_) {
    const double squeezed_to = grant_.cpu_cores.value_or(1.0) * settings_.throttle_cpu_fraction;
    if (rate <= at || n.cpu_cores <= squeezed_to) return;
    Limits squeeze;
    if (!this->squeeze(in.now, &squeeze)) return;
    net_throttled_ = true;
    net_since_ = in.now;
    record("throttle", in.now,
           "network burst " + per_s(rate) + " over " + format_duration(settings_.net_window) +
               " (out " + per_s(n.bytes_out_per_s) + ", in " + per_s(n.bytes_in_per_s) +
               "; threshold " + per_s(at) + ") while the call used " + fixed(n.cpu_cores, 2) +
               " cores; cpu squeezed to " + fixed(squeeze.cpu_cores.value(), 2) + " cores");
    return;
  }
  if (rate < at / 2 && in.now - net_since_ >= settings_.net_window) {
    net_throttled_ = false;
    release(in.now);
    record("unthrottle", in.now,
           "network rate down to " + per_s(rate) + " (below half the " + per_s(at) + " threshold)" +
               squeeze_stays());
  }
}

void Ladder::cancel(Duration at, Termination why, const std::string& reason) {
  if (state_ == State::kFrozen) {
    // A frozen task cannot handle SIGTERM: thaw first.
    (void)actuator_.freeze(cgroup_, false);
    obs_.frozen_for += at - frozen_since_;
  }
  (void)actuator_.signal(cgroup_, SIGTERM);
  obs_.cancelled_by_ladder = true;
  obs_.ladder_termination = why;
  obs_.ladder_reason = reason;
  cancelled_at_ = at;
  state_ = State::kCancelling;
  record("cancel", at, reason + "; SIGTERM, kill after " + format_duration(settings_.cancel_grace));
}

void Ladder::kill(Duration at, const std::string& reason) {
  (void)actuator_.kill(cgroup_);
  obs_.killed_by_ladder = true;
  if (obs_.ladder_reason.empty()) obs_.ladder_reason = reason;
  state_ = State::kKilled;
  record("kill", at, reason);
}

void Ladder::step(const LadderInput& in) {
  observe(in);
  if (!settings_.enabled || state_ == State::kKilled) return;
  const Usage& u = in.usage;

  if (state_ == State::kCancelling) {
    if (in.now - cancelled_at_ >= settings_.cancel_grace && u.pids_current > 0)
      kill(in.now, "still running " + format_duration(settings_.cancel_grace) + " after SIGTERM");
    return;
  }

  // Fork bomb: the kernel refuses forks at pids.max; a call pinned there is cancelled.
  if (grant_.pids_max && u.pids_current >= *grant_.pids_max && u.pids_max_events > last_pids_refused_) {
    if (pids_pinned_since_.count() < 0) pids_pinned_since_ = in.now;
    if (in.now - pids_pinned_since_ >= kPidsPinnedLimit) {
      last_pids_refused_ = u.pids_max_events;
      cancel(in.now, Termination::kPidsLimit,
             "pinned at its limit of " + std::to_string(*grant_.pids_max) + " processes for " +
                 format_duration(kPidsPinnedLimit) + " (" + std::to_string(u.pids_max_events) +
                 " forks refused)");
      return;
    }
  } else if (u.pids_current < grant_.pids_max.value_or(UINT64_MAX)) {
    pids_pinned_since_ = Duration(-1);
  }
  last_pids_refused_ = u.pids_max_events;

  if (state_ == State::kFrozen && frozen_for_budget_) {
    step_frozen_for_budget(in);
    return;
  }
  if (state_ == State::kFrozen) {
    if (in.host_memory_psi && *in.host_memory_psi < settings_.thaw_host_psi) {
      (void)actuator_.freeze(cgroup_, false);
      obs_.frozen_for += in.now - frozen_since_;
      state_ = throttled_ ? State::kThrottled : State::kNormal;
      record("thaw", in.now, "host memory pressure down to " + std::to_string(*in.host_memory_psi).substr(0, 5) + "%");
    } else if (in.now - frozen_since_ >= settings_.freeze_max) {
      cancel(in.now, Termination::kCancelled,
             "host memory pressure did not clear within " + format_duration(settings_.freeze_max) +
                 " of freezing the largest call");
    }
    return;
  }

  if (freeze_for_budget(in)) return;

  // Host under pressure: the largest call is frozen while it clears (bounded).
  if (features_.freeze && in.largest_active_call && in.host_memory_psi &&
      *in.host_memory_psi >= settings_.freeze_host_psi) {
    if (auto s = actuator_.freeze(cgroup_, true); s.ok()) {
      frozen_since_ = in.now;
      state_ = State::kFrozen;
      record("freeze", in.now,
             "host memory pressure " + std::to_string(*in.host_memory_psi).substr(0, 5) +
                 "% and this is the largest call");
      return;
    }
  }

  if (grant_.memory_max) {
    double threshold = settings_.throttle_at * static_cast<double>(grant_.memory_max->value);
    if (!throttled_ && static_cast<double>(u.memory_current) >= threshold) {
      throttle(in);
    } else if (throttled_ && static_cast<double>(u.memory_current) < 0.8 * threshold) {
      unthrottle(in);
    }
  }
  step_runq(in);
  step_net(in);
}

bool Ladder::freeze_for_budget(const LadderInput& in) {
  const double at = settings_.freeze_budget_at;
  if (at <= 0 || !features_.freeze || !in.budget) return false;
  const BudgetSignal& b = *in.budget;
  if (b.largest || !b.growing || static_cast<double>(b.used) < at * static_cast<double>(b.limit))
    return false;
  if (auto s = actuator_.freeze(cgroup_, true); !s.ok()) {
    spdlog::warn("ladder: freeze {}: {}", cgroup_.rel, s.error().message());
    return false;
  }
  frozen_since_ = in.now;
  frozen_for_budget_ = true;
  state_ = State::kFrozen;
  record("freeze", in.now,
         "memory budget " + b.name + " at " + human_bytes({b.used}) + " of " +
             format_bytes(Bytes{b.limit}) + " (" +
             std::to_string(std::lround(100.0 * static_cast<double>(b.used) /
                                        static_cast<double>(b.limit))) +
             "%), and this call is growing but is not the largest in it");
  return true;
}

void Ladder::step_frozen_for_budget(const LadderInput& in) {
  std::string why;
  if (in.budget) {
    const BudgetSignal& b = *in.budget;
    if (static_cast<double>(b.used) <
        settings_.thaw_budget_at * static_cast<double>(b.limit))
      why = "memory budget " + b.name + " down to " + human_bytes({b.used});
    else if (b.largest)
      why = "now the largest call in memory budget " + b.name;
  }
  if (!why.empty()) {
    (void)actuator_.freeze(cgroup_, false);
    obs_.frozen_for += in.now - frozen_since_;
    frozen_for_budget_ = false;
    state_ = throttled_ ? State::kThrottled : State::kNormal;
    record("thaw", in.now, why);
  } else if (in.now - frozen_since_ >= settings_.budget_freeze_max) {
    frozen_for_budget_ = false;
    cancel(in.now, Termination::kCancelled,
           "its memory budget stayed full for " + format_duration(settings_.budget_freeze_max) +
               " after freezing it");
  }
}

void Ladder::finish(Duration now) {
  if (squeezed_) obs_.throttled_for += now - throttled_since_;
  squeezed_ = runq_throttled_ = net_throttled_ = false;
  if (state_ == State::kFrozen) {
    obs_.frozen_for += now - frozen_since_;
    (void)actuator_.freeze(cgroup_, false);
  }
  throttled_ = false;
  frozen_for_budget_ = false;
}

}  // namespace sandgate::controller
