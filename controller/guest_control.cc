#include "controller/guest_control.h"

#include <cmath>
#include <limits>

#include "controller/cgroup_layout.h"
#include "core/log.h"

namespace sandgate::controller {
namespace {

constexpr char kStep[] = "read the guest's call observation";
// A call observed for longer than a day, or a count past 2^53, is no observation of ours.
constexpr uint64_t kMaxMicros = uint64_t{24} * 3600 * 1000 * 1000;
constexpr uint64_t kMaxCount = uint64_t{1} << 53;

uint64_t micros(Duration d) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  return us > 0 ? static_cast<uint64_t>(us) : 0;
}
Duration from_micros(uint64_t us) { return std::chrono::microseconds(us); }

// Strict readers over an object: a missing key is its default, a wrong type an error naming it.
class Fields {
 public:
  Fields(const Json& j, const char* step) : j_(j), step_(step) {}
  Status object() const {
    if (!j_.is_object()) return logic_error(step_, "expected an object, got " + describe_json(j_));
    return {};
  }
  Result<uint64_t> count(const char* key, uint64_t bound = kMaxCount) const {
    auto it = j_.find(key);
    if (it == j_.end()) return uint64_t{0};
    // Parsed text gives unsigned numbers; a Json built in this process may hold signed ones.
    const bool non_negative =
        it->is_number_unsigned() || (it->is_number_integer() && it->get<int64_t>() >= 0);
    if (!non_negative || it->get<uint64_t>() > bound)
      return logic_error(step_, std::string(key) + ": expected an integer from 0 to " +
                                    std::to_string(bound) + ", got " + describe_json(*it));
    return it->get<uint64_t>();
  }
  Result<std::optional<uint64_t>> maybe_count(const char* key) const {
    if (!j_.contains(key)) return std::optional<uint64_t>();
    SG_ASSIGN_OR_RETURN(uint64_t v, count(key));
    return std::optional<uint64_t>(v);
  }
  Result<double> number(const char* key, double fallback, double lo, double hi) const {
    auto it = j_.find(key);
    if (it == j_.end()) return fallback;
    double v = it->is_number() ? it->get<double>() : std::nan("");
    if (!std::isfinite(v) || v < lo || v > hi)
      return logic_error(step_, std::string(key) + ": expected a number from " + Json(lo).dump() +
                                    " to " + Json(hi).dump() + ", got " + describe_json(*it));
    return v;
  }
  Result<bool> boolean(const char* key, bool fallback) const {
    auto it = j_.find(key);
    if (it == j_.end()) return fallback;
    if (!it->is_boolean())
      return logic_error(step_,
                         std::string(key) + ": expected true or false, got " + describe_json(*it));
    return it->get<bool>();
  }
  // A string, cut at kMaxGuestText bytes on a character boundary (parse_json took only valid
  // UTF-8 text, so the cut keeps it valid).
  Result<std::string> text(const Json& where, const char* key) const {
    auto it = where.find(key);
    if (it == where.end()) return std::string();
    if (!it->is_string())
      return logic_error(step_,
                         std::string(key) + ": expected a string, got " + describe_json(*it));
    const auto& s = it->get_ref<const std::string&>();
    return s.substr(0, utf8_safe_cut(s, kMaxGuestText));
  }

 private:
  const Json& j_;
  const char* step_;
};

Result<Termination> termination_from(const std::string& name) {
  for (Termination t : {Termination::kExited, Termination::kTimeout, Termination::kMemoryLimit,
                        Termination::kPidsLimit, Termination::kCancelled, Termination::kKilled,
                        Termination::kNotStarted})
    if (to_string(t) == name) return t;
  return logic_error(kStep, "ladder_termination: not a termination: '" + name + "'");
}

}  // namespace

Json guest_control_to_json(const Grant& g, const LadderSettings& l) {
  Json grant = Json::object();
  if (g.memory_max) grant["memory_max"] = g.memory_max->value;
  if (g.memory_high) grant["memory_high"] = g.memory_high->value;
  if (g.cpu_cores) grant["cpu_cores"] = *g.cpu_cores;
  if (g.pids_max) grant["pids_max"] = *g.pids_max;
  return {{"grant", grant},
          {"ladder",
           {{"enabled", l.enabled},
            {"sample_interval_us", micros(l.sample_interval)},
            {"throttle_at", l.throttle_at},
            {"throttle_cpu_fraction", l.throttle_cpu_fraction},
            {"freeze_host_psi", l.freeze_host_psi},
            {"thaw_host_psi", l.thaw_host_psi},
            {"freeze_max_us", micros(l.freeze_max)},
            {"cancel_grace_us", micros(l.cancel_grace)},
            {"psi_trigger_stall_us", micros(l.psi_trigger_stall)},
            {"psi_trigger_window_us", micros(l.psi_trigger_window)}}}};
}

Result<GuestControl> guest_control_from_json(const Json& j) {
  constexpr char step[] = "read the call's grant for the guest";
  GuestControl c;
  if (j.is_null()) {
    c.ladder.enabled = false;  // nothing granted: measured only
    return c;
  }
  SG_TRY(Fields(j, step).object());
  static const Json kEmpty = Json::object();
  const Json& g = j.contains("grant") ? j["grant"] : kEmpty;
  const Json& l = j.contains("ladder") ? j["ladder"] : kEmpty;
  Fields gf(g, step), lf(l, step);
  SG_TRY(gf.object());
  SG_TRY(lf.object());
  SG_ASSIGN_OR_RETURN(auto memory_max, gf.maybe_count("memory_max"));
  SG_ASSIGN_OR_RETURN(auto memory_high, gf.maybe_count("memory_high"));
  SG_ASSIGN_OR_RETURN(auto pids_max, gf.maybe_count("pids_max"));
  if (memory_max) c.grant.memory_max = Bytes{*memory_max};
  if (memory_high) c.grant.memory_high = Bytes{*memory_high};
  c.grant.pids_max = pids_max;
  if (g.contains("cpu_cores")) {
    SG_ASSIGN_OR_RETURN(double cores, gf.number("cpu_cores", 0, 0.001, 1e6));
    c.grant.cpu_cores = cores;
  }
  LadderSettings& s = c.ladder;
  SG_ASSIGN_OR_RETURN(s.enabled, lf.boolean("enabled", s.enabled));
  SG_ASSIGN_OR_RETURN(s.throttle_at, lf.number("throttle_at", s.throttle_at, 0, 1));
  SG_ASSIGN_OR_RETURN(s.throttle_cpu_fraction,
                      lf.number("throttle_cpu_fraction", s.throttle_cpu_fraction, 0, 1));
  SG_ASSIGN_OR_RETURN(s.freeze_host_psi, lf.number("freeze_host_psi", s.freeze_host_psi, 0, 100));
  SG_ASSIGN_OR_RETURN(s.thaw_host_psi, lf.number("thaw_host_psi", s.thaw_host_psi, 0, 100));
  auto duration = [&](const char* key, Duration& d) -> Status {
    if (!l.contains(key)) return {};
    SG_ASSIGN_OR_RETURN(uint64_t us, lf.count(key, kMaxMicros));
    d = from_micros(us);
    return {};
  };
  SG_TRY(duration("sample_interval_us", s.sample_interval));
  SG_TRY(duration("freeze_max_us", s.freeze_max));
  SG_TRY(duration("cancel_grace_us", s.cancel_grace));
  SG_TRY(duration("psi_trigger_stall_us", s.psi_trigger_stall));
  SG_TRY(duration("psi_trigger_window_us", s.psi_trigger_window));
  if (s.sample_interval <= Duration(0))
    return logic_error(step, "sample_interval_us: must be greater than 0");
  // Their meters are the host's eBPF programs: nothing in the guest measures either.
  s.runq_throttle_ms_per_s = 0;
  s.net_throttle_bytes_per_s = 0;
  return c;
}

Json guest_observation_to_json(const CallObservation& o) {
  Json actions = Json::array();
  for (const auto& a : o.actions)
    actions.push_back({{"action", a.action}, {"at_us", micros(a.at)}, {"reason", a.reason}});
  return {{"memory_peak_bytes", o.peaks.memory_bytes},
          {"pids_peak", o.peaks.pids},
          {"cpu_peak_cores", o.peaks.cpu_cores},
          {"cpu_usage_us", o.cpu_usage_us},
          {"cpu_throttled_us", o.cpu_throttled_us},
          {"oom_kills", o.oom_kills},
          {"pids_refused", o.pids_refused},
          {"throttled_us", micros(o.throttled_for)},
          {"frozen_us", micros(o.frozen_for)},
          {"actions", actions},
          {"cancelled_by_ladder", o.cancelled_by_ladder},
          {"killed_by_ladder", o.killed_by_ladder},
          {"ladder_reason", o.ladder_reason},
          {"ladder_termination", to_string(o.ladder_termination)},
          {"samples", o.samples}};
}

Result<CallObservation> guest_observation_from_json(const Json& j) {
  Fields f(j, kStep);
  SG_TRY(f.object());
  CallObservation o;
  SG_ASSIGN_OR_RETURN(o.peaks.memory_bytes, f.count("memory_peak_bytes"));
  SG_ASSIGN_OR_RETURN(o.peaks.pids, f.count("pids_peak"));
  SG_ASSIGN_OR_RETURN(o.peaks.cpu_cores, f.number("cpu_peak_cores", 0, 0, 1e6));
  SG_ASSIGN_OR_RETURN(o.cpu_usage_us, f.count("cpu_usage_us"));
  SG_ASSIGN_OR_RETURN(o.cpu_throttled_us, f.count("cpu_throttled_us"));
  SG_ASSIGN_OR_RETURN(o.oom_kills, f.count("oom_kills"));
  SG_ASSIGN_OR_RETURN(o.pids_refused, f.count("pids_refused"));
  SG_ASSIGN_OR_RETURN(uint64_t throttled, f.count("throttled_us", kMaxMicros));
  SG_ASSIGN_OR_RETURN(uint64_t frozen, f.count("frozen_us", kMaxMicros));
  o.throttled_for = from_micros(throttled);
  o.frozen_for = from_micros(frozen);
  SG_ASSIGN_OR_RETURN(o.cancelled_by_ladder, f.boolean("cancelled_by_ladder", false));
  SG_ASSIGN_OR_RETURN(o.killed_by_ladder, f.boolean("killed_by_ladder", false));
  SG_ASSIGN_OR_RETURN(o.ladder_reason, f.text(j, "ladder_reason"));
  SG_ASSIGN_OR_RETURN(std::string termination, f.text(j, "ladder_termination"));
  if (!termination.empty()) {
    SG_ASSIGN_OR_RETURN(o.ladder_termination, termination_from(termination));
  }
  SG_ASSIGN_OR_RETURN(uint64_t samples,
                      f.count("samples", static_cast<uint64_t>(std::numeric_limits<int>::max())));
  o.samples = static_cast<int>(samples);
  if (auto it = j.find("actions"); it != j.end()) {
    if (!it->is_array())
      return logic_error(kStep, "actions: expected an array, got " + describe_json(*it));
    for (const auto& a : *it) {
      if (o.actions.size() == kMaxGuestActions) break;  // the rest are not kept
      Fields af(a, kStep);
      SG_TRY(af.object());
      LadderAction action;
      SG_ASSIGN_OR_RETURN(action.action, af.text(a, "action"));
      SG_ASSIGN_OR_RETURN(action.reason, af.text(a, "reason"));
      SG_ASSIGN_OR_RETURN(uint64_t at, af.count("at_us", kMaxMicros));
      action.at = from_micros(at);
      o.actions.push_back(std::move(action));
    }
  }
  return o;
}

GuestCalls::GuestCalls(std::unique_ptr<CgroupBackend> backend, HostPaths paths,
                       std::string calls_rel)
    : backend_(std::move(backend)),
      paths_(std::move(paths)),
      calls_rel_(std::move(calls_rel)),
      actuator_(*backend_) {
  reaper_ = std::thread([this] { reaper_loop(); });
}

GuestCalls::~GuestCalls() {
  if (monitor_)
    for (auto& [id, c] : calls_)
      if (c.watched) monitor_->unwatch(id);
  monitor_.reset();
  {
    std::lock_guard lock(reap_mu_);
    stopping_ = true;
  }
  reap_cv_.notify_all();
  reaper_.join();  // after the queue is empty
}

void GuestCalls::reaper_loop() {
  for (;;) {
    Cgroup cg;
    {
      std::unique_lock lock(reap_mu_);
      reap_cv_.wait(lock, [&] { return stopping_ || !to_remove_.empty(); });
      if (to_remove_.empty()) return;
      cg = std::move(to_remove_.front());
      to_remove_.pop_front();
    }
    if (auto s = backend_->remove(cg); !s.ok())
      spdlog::warn("revoking {}: {}", cg.rel, s.error().message());
    std::lock_guard lock(reap_mu_);
    if (--pending_ == 0) settled_.notify_all();
  }
}

void GuestCalls::settle() {
  std::unique_lock lock(reap_mu_);
  settled_.wait(lock, [&] { return pending_ == 0; });
}

std::string GuestCalls::cgroup_of(uint64_t call) const {
  return "/" + calls_rel_ + "/call-" + std::to_string(call);
}

Status GuestCalls::begin(uint64_t call, const Json& control) {
  SG_ASSIGN_OR_RETURN(GuestControl c, guest_control_from_json(control));
  if (calls_.count(call)) return logic_error("begin call", "begun twice", cgroup_of(call));
  SG_ASSIGN_OR_RETURN(Cgroup cg, backend_->create(cgroup_of(call).substr(1), nullptr));
  // As the host's controller does (Controller::call_limits): memory.high only where the layout
  // has it; io never here (see guest_control.h).
  Limits limits = c.grant.to_limits();
  if (!backend_->features().memory_high) limits.memory_high.reset();
  limits.io_read_bps.reset();
  limits.io_write_bps.reset();
  if (auto s = backend_->set_limits(cg, limits); !s.ok()) {
    (void)backend_->remove(cg);
    return std::move(s).error().context_add("the call's grant inside the guest");
  }
  if (!monitor_) monitor_ = std::make_unique<Monitor>(*backend_, paths_, c.ladder.sample_interval);
  Call& entry = calls_[call];
  entry.cg = cg;
  entry.ladder =
      std::make_unique<Ladder>(c.ladder, c.grant, backend_->features(), std::move(cg), actuator_);
  return {};
}

Status GuestCalls::place(uint64_t call, pid_t pid) {
  auto it = calls_.find(call);
  if (it == calls_.end()) return logic_error("place call", "not begun", cgroup_of(call));
  Call& c = it->second;
  SG_TRY(backend_->attach(c.cg, pid));
  c.start = std::chrono::steady_clock::now();
  monitor_->watch(call, c.cg, c.ladder.get(), c.start);
  c.watched = true;
  return {};
}

Json GuestCalls::end(uint64_t call) {
  auto it = calls_.find(call);
  if (it == calls_.end()) return nullptr;
  Call& c = it->second;
  if (c.watched) monitor_->unwatch(call);
  auto now = std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - c.start);
  if (!c.watched) now = Duration(0);
  // One last read, as Controller::end_call: the kernel's counters as the call left them.
  if (auto u = backend_->read_usage(c.cg); u.ok()) {
    LadderInput in;
    in.now = now;
    in.usage = std::move(u).value();
    c.ladder->observe(in);
  }
  c.ladder->finish(now);
  Json seen = guest_observation_to_json(c.ladder->observation());
  // Revoked: whatever the call left is killed before its end is sent; an empty cgroup (the
  // usual case) is removed by the reaper, off the call's path.
  auto left = backend_->procs(c.cg);
  if (!left.ok() || !left->empty()) {
    if (auto s = backend_->remove(c.cg); !s.ok())
      spdlog::warn("revoking {}: {}", c.cg.rel, s.error().message());
  } else {
    {
      std::lock_guard lock(reap_mu_);
      to_remove_.push_back(c.cg);
      ++pending_;
    }
    reap_cv_.notify_one();
  }
  calls_.erase(it);
  return seen;
}

Result<std::unique_ptr<GuestCallControl>> make_guest_calls() {
  HostPaths paths;
  SG_ASSIGN_OR_RETURN(CgroupLayout layout, detect_cgroup_layout(paths.proc + "/self/mountinfo"));
  if (layout.kind != CgroupLayoutKind::kV2)
    return logic_error("the guest's calls controller", "the guest is not on pure cgroup v2",
                       describe(layout));
  SG_ASSIGN_OR_RETURN(auto backend, make_cgroup_backend(layout));
  return std::unique_ptr<GuestCallControl>(
      std::make_unique<GuestCalls>(std::move(backend), paths, "calls"));
}

}  // namespace sandgate::controller
