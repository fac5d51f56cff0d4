#include "controller/controller.h"

#include <algorithm>

#include "controller/cgroup_layout.h"
#include "core/defer.h"
#include "core/log.h"

namespace sandgate::controller {

Controller::Controller(ControllerOptions options) : options_(std::move(options)) {
  reaper_ = std::thread([this] { reaper_loop(); });
}

Controller::~Controller() {
  {
    // Every queued job still runs: the thread stops only once the queue is empty.
    std::lock_guard lock(reaper_mu_);
    reaper_stop_ = true;
  }
  reaper_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  monitor_.reset();
}

RunScope::~RunScope() { wait_settled(); }

void RunScope::wait_settled() {
  std::unique_lock lock(pending_mu_);
  settled_.wait(lock, [&] { return pending_ == 0; });
}

void Controller::reaper_loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(reaper_mu_);
      reaper_cv_.wait(lock, [&] { return reaper_stop_ || !reaper_jobs_.empty(); });
      if (reaper_jobs_.empty()) return;  // stopping, and nothing left to do
      job = std::move(reaper_jobs_.front());
      reaper_jobs_.pop_front();
    }
    job();
  }
}

void Controller::defer(RunScope& run, std::function<void()> job, bool first) {
  {
    std::lock_guard lock(run.pending_mu_);
    ++run.pending_;
  }
  RunScope* r = &run;
  auto counted = [r, job = std::move(job)] {
    job();
    std::lock_guard lock(r->pending_mu_);
    if (--r->pending_ == 0) r->settled_.notify_all();
  };
  {
    std::lock_guard lock(reaper_mu_);
    if (first) {
      reaper_jobs_.push_front(std::move(counted));
    } else {
      reaper_jobs_.push_back(std::move(counted));
    }
  }
  reaper_cv_.notify_one();
}

void Controller::settle(RunScope& run) { run.wait_settled(); }

void Controller::make_spare(RunScope& run) {
  std::lock_guard lock(run.mu_);
  make_spare_locked(run);
}

void Controller::make_spare_locked(RunScope& run) {
  if (run.closing_ || run.last_call_ || run.spare_ || !run.state_) return;
  std::string id = "call-" + std::to_string(run.next_call_++);
  StepClock clock("run " + run.run_id_, "make_spare");
  Defer lap([&] { clock.lap("create"); });
  // Recorded in the run record before each mkdir (CgroupBackend::create), like every cgroup:
  // a crash with a spare made leaves nothing `sandgate gc` cannot find.
  auto cg = options_.backend->create(run.run_.rel + "/" + id, &*run.state_);
  if (!cg.ok()) {
    // Not fatal: the next call makes its own cgroup, on its critical path.
    spdlog::warn("run {}: making the next call's cgroup ahead: {}", run.run_id_,
                 cg.error().message());
    return;
  }
  run.spare_ = std::move(cg).value();
  run.spare_id_ = std::move(id);
  // Its counter files opened now too: the call's first and last reads are then preads.
  run.spare_reader_ = options_.backend->usage_reader(*run.spare_);
  if (auto s = run.spare_reader_->prepare(); !s.ok())
    spdlog::debug("run {}: the next call's counters not opened ahead: {}", run.run_id_,
                  s.error().message());
}

void Controller::last_call(RunScope& run) {
  std::lock_guard lock(run.mu_);
  run.last_call_ = true;
}

void Controller::adopt_parked(RunScope& run, pid_t pid) {
  if (pid <= 0) return;
  RunScope* r = &run;
  defer(run, [this, r, pid] { place_parked(*r, pid); });
}

void Controller::place_parked(RunScope& run, pid_t pid) {
  // Under the run's lock: begin_call cannot take the spare half-placed. The write is the
  // kernel's slow step (an RCU grace period on a hybrid host); a call that begins meanwhile
  // waits for it, which costs it no more than placing its own process would.
  std::lock_guard lock(run.mu_);
  if (run.placed_parked_ == pid) return;
  // The call that parked it has ended (the provider reports a parked process with the call's
  // end, or later): its spare may not be made yet.
  make_spare_locked(run);
  if (run.closing_ || !run.spare_) return;
  StepClock clock("run " + run.run_id_, "place_parked");
  Defer lap([&] { clock.lap("attach"); });
  if (auto s = options_.backend->attach(*run.spare_, pid); !s.ok()) {
    // Gone (used by a call, or killed): the next call's process is placed by its provider.
    spdlog::debug("run {}: parked process {} not placed ahead: {}", run.run_id_, pid,
                  s.error().message());
    return;
  }
  run.spare_parked_ = pid;
  run.placed_parked_ = pid;
}

void Controller::remove_call_cgroup(RunScope& run, const Cgroup& cg) {
  if (auto s = options_.backend->remove(cg); !s.ok()) {
    // Still recorded: end_run removes the run's whole subtree, gc what a crash leaves.
    spdlog::warn("revoking {}: {}", cg.rel, s.error().message());
    return;
  }
  std::vector<Resource> gone;
  for (const auto& [h, dir] : cg.dirs) gone.push_back({Resource::Kind::kCgroup, dir});
  std::lock_guard lock(run.mu_);
  if (run.state_) (void)run.state_->forget_all(gone);  // one write for every hierarchy
}

Result<std::unique_ptr<Controller>> Controller::create(ControllerOptions options) {
  if (!options.backend) {
    auto layout = detect_cgroup_layout(options.paths.proc + "/self/mountinfo");
    if (!layout.ok()) return std::move(layout).error().context_add("choosing a cgroup backend");
    auto backend = make_cgroup_backend(*layout);
    if (!backend.ok()) return std::move(backend).error();
    options.backend = std::move(backend).value();
  }
  std::unique_ptr<Controller> c(new Controller(std::move(options)));
  if (c->options_.actuator) {
    c->actuator_ = c->options_.actuator;
  } else {
    c->own_actuator_ = std::make_unique<BackendActuator>(*c->options_.backend);
    c->actuator_ = c->own_actuator_.get();
  }
  const CgroupFeatures& f = c->options_.backend->features();
  bool wants_high = false;
  for (const auto& [name, grant] : c->options_.policy.intents)
    wants_high |= grant.memory_high.has_value();
  if (wants_high && !f.memory_high)
    c->absent_.push_back(
        "memory.high: this cgroup layout has no soft memory limit (v1 memory "
        "controller); the ladder throttles with the CPU squeeze only");
  if (!f.psi) c->absent_.push_back("per-call PSI: pressure is sampled, not triggered");
  if (!f.freeze) c->absent_.push_back("freeze: the ladder goes from throttle straight to cancel");
  if (!f.atomic_kill) c->absent_.push_back("atomic kill: kill is freeze + SIGKILL + thaw");
  if (c->policy_wants_io() && !f.io_limits)
    c->absent_.push_back(
        "io limits: no cgroup2 io controller and no v1 blkio hierarchy; "
        "io_read_bps / io_write_bps are not applied");
  for (const auto& a : c->absent_) spdlog::info("controller: absent capability: {}", a);
  const LadderSettings& ladder = c->options_.policy.ladder;
  c->monitor_ = std::make_unique<Monitor>(
      *c->options_.backend, c->options_.paths, ladder.sample_interval,
      ladder.enabled && ladder.runq_throttle_ms_per_s > 0 ? ladder.runq_window : Duration(0),
      // Read whenever a call has a network meter: the outcome's peak rate needs it, rule or not.
      ladder.net_window);
  return c;
}

bool Controller::policy_wants_io() const {
  auto wants = [](const Grant& g) { return g.io_read_bps || g.io_write_bps; };
  if (wants(options_.policy.run)) return true;
  for (const auto& [name, grant] : options_.policy.intents)
    if (wants(grant)) return true;
  return false;
}

Limits Controller::call_limits(const Grant& grant, const std::string& io_device) const {
  Limits l = grant.to_limits();
  const CgroupFeatures& f = options_.backend->features();
  // Reported once as an absent capability, not failed on every call.
  if (!f.memory_high) l.memory_high.reset();
  if (!f.io_limits || io_device.empty()) {
    // No io controller (an absent capability) or no throttlable device (logged per run).
    l.io_read_bps.reset();
    l.io_write_bps.reset();
  } else if (l.io_read_bps || l.io_write_bps) {
    l.io_device = io_device;
  }
  return l;
}

Status Controller::set_io_device(RunScope& run, std::string device) {
  if (!policy_wants_io()) return {};
  if (device.empty()) {
    spdlog::info(
        "run {}: io limits dropped: its workspace is on no block device that can be "
        "throttled",
        run.run_id_);
    run.io_device_.clear();
    return {};
  }
  run.io_device_ = std::move(device);
  if (!options_.backend->features().io_limits) return {};  // reported as absent at create
  Limits l = call_limits(options_.policy.run, run.io_device_);
  Limits io;
  io.io_read_bps = l.io_read_bps;
  io.io_write_bps = l.io_write_bps;
  io.io_device = l.io_device;
  if (!io.io_read_bps && !io.io_write_bps) return {};
  return std::move(options_.backend->set_limits(run.run_, io))
      .context("run ceiling io limits on " + run.io_device_);
}

Result<std::unique_ptr<RunScope>> Controller::begin_run(const std::string& tenant,
                                                        const std::string& run_id) {
  const Policy& p = options_.policy;
  auto t = p.tenants.find(tenant);
  if (t == p.tenants.end()) {
    std::string known;
    for (const auto& [name, tp] : p.tenants) known += (known.empty() ? "" : ", ") + name;
    return logic_error("begin run", "unknown tenant '" + tenant + "' (policy has: " + known + ")");
  }
  StepClock clock("run " + run_id, "begin_run");
  auto run = std::make_unique<RunScope>();
  run->run_id_ = run_id;
  run->tenant_name_ = tenant;
  SG_ASSIGN_OR_RETURN(RunState state,
                      RunState::create(options_.paths, run_id + "-cgroups", "controller"));
  run->state_.emplace(std::move(state));
  CgroupBackend& b = *options_.backend;
  auto fail = [&](Error e) -> Error {
    (void)release_resources(options_.paths, run->state_->resources());
    (void)run->state_->finish();
    e.context.push_back("starting run " + run_id);
    return e;
  };

  // The root and the tenant are shared with other runs: recorded as parents, removed only
  // when empty, never killed. Recorded before they are made, like everything else: once they
  // were recorded only after, and a crash in between (the chaos test's kill at
  // before-record:controller:cgroup_parent#1) left both in every hierarchy, empty, with a
  // record that named nothing. Their directories are known from the mounts before they exist
  // (a parent named in a hierarchy the backend does not use is simply not there to remove).
  std::unique_lock tenants(tenants_mu_);
  std::string tenant_rel = options_.root + "/" + tenant;
  if (auto layout = detect_cgroup_layout(options_.paths.proc + "/self/mountinfo"); layout.ok()) {
    std::vector<std::string> mounts;
    if (!layout->unified_mount.empty()) mounts.push_back(layout->unified_mount);
    for (const auto& [h, m] : layout->v1_mounts)
      if (std::find(mounts.begin(), mounts.end(), m) == mounts.end()) mounts.push_back(m);
    std::vector<Resource> parents;
    for (const auto& m : mounts)
      for (const std::string& d : {m + "/" + options_.root, m + "/" + tenant_rel})
        parents.push_back({Resource::Kind::kCgroupParent, d});
    if (auto s = run->state_->record_all(std::move(parents)); !s.ok())
      return fail(std::move(s).error());
  }
  clock.lap("record");
  auto tenant_cg = b.create(tenant_rel, nullptr);
  if (!tenant_cg.ok()) return fail(std::move(tenant_cg).error());
  kill_point("controller:tenant-made");  // the window that leaked (tests/chaos.py)
  run->tenant_ = *tenant_cg;
  for (const auto& [h, dir] : run->tenant_.dirs) {
    std::string root_dir = dir.substr(0, dir.rfind('/'));
    for (const std::string& d : {root_dir, dir}) {
      Resource r{Resource::Kind::kCgroupParent, d};
      if (std::find(run->state_->resources().begin(), run->state_->resources().end(), r) ==
          run->state_->resources().end())
        if (auto s = run->state_->record(r); !s.ok()) return fail(std::move(s).error());
    }
  }
  Limits tenant_limits;
  tenant_limits.cpu_weight = t->second.cpu_weight;
  tenant_limits.memory_max = t->second.memory_budget;
  if (auto s = b.set_limits(run->tenant_, tenant_limits); !s.ok())
    return fail(std::move(s).error().context_add("tenant " + tenant));

  if (p.mode == PolicyMode::kPerCall) {
    // The tighter of the tenant's budget and the root's limit.
    const auto& tenant_budget = t->second.memory_budget;
    const auto& root_budget = options_.root_memory_budget;
    if (tenant_budget && (!root_budget || tenant_budget->value <= root_budget->value)) {
      run->budget_ = MemoryBudget{run->tenant_, tenant_budget->value};
    } else if (root_budget) {
      auto root_cg = b.create(options_.root, nullptr);  // there already: the tenant is in it
      if (!root_cg.ok()) return fail(std::move(root_cg).error().context_add("the root's budget"));
      run->budget_ = MemoryBudget{*root_cg, root_budget->value};
    }
    // The monitor samples the moment the budget fills to the rule's threshold, not up to an
    // interval later: two bursts that start within one interval both got through before.
    if (run->budget_ && p.ladder.freeze_budget_at > 0)
      run->budget_->wake_at = static_cast<uint64_t>(static_cast<double>(run->budget_->limit) *
                                                    p.ladder.freeze_budget_at);
  }

  clock.lap("tenant");
  auto run_cg = b.create(tenant_rel + "/" + run_id, &*run->state_);
  if (!run_cg.ok()) return fail(std::move(run_cg).error());
  run->run_ = *run_cg;
  if (auto s = b.set_limits(run->run_, call_limits(p.run, run->io_device_)); !s.ok())
    return fail(std::move(s).error().context_add("run ceiling"));
  auto main_cg = b.create(run->run_.rel + "/main", &*run->state_);
  if (!main_cg.ok()) return fail(std::move(main_cg).error());
  run->main_ = *main_cg;
  run->main_placement_ = b.placement(run->main_);
  tenants.unlock();
  clock.lap("run+main");
  // One pressure trigger for the run: a call's stalls show in its parent's pressure too. The
  // monitor makes it once a call has run for the trigger's stall (Monitor::want_trigger), so a
  // run of short calls neither makes one nor pays its teardown's grace period at its end.
  run->trigger_key_ = next_serial_++;
  monitor_->want_trigger(run->trigger_key_, run->run_, p.ladder.psi_trigger_stall,
                         p.ladder.psi_trigger_window);
  clock.lap("trigger");
  // The run's first placements (its supervisor's, its parked process's) are moves after what
  // is usually a quiet spell: their grace period starts now, on the reaper, beside the
  // provider's making of the environment (CgroupBackend::prime_attach), and ahead of any job
  // queued before. Not sooner: the move holds cgroup_mutex while it waits, so the mkdirs above
  // would wait with it.
  RunScope* r = run.get();
  defer(
      *r,
      [this] {
        if (auto s = options_.backend->prime_attach(); !s.ok())
          spdlog::debug("controller: no attach ahead of the run's placements: {}",
                        s.error().message());
      },
      /*first=*/true);
  // The first call's cgroup, made while the provider makes the environment (after the prime's
  // wait: its mkdirs would wait for the same lock).
  defer(*r, [this, r] { make_spare(*r); });
  return run;
}

Result<std::unique_ptr<CallScope>> Controller::begin_call(RunScope& run,
                                                          const std::optional<std::string>& intent,
                                                          const std::vector<std::string>& argv,
                                                          CallHost host) {
  const Policy& p = options_.policy;
  StepClock clock("run " + run.run_id_, "begin_call");
  SG_ASSIGN_OR_RETURN(IntentChoice choice, choose_intent(p, intent, argv));
  auto call = std::make_unique<CallScope>();
  call->serial_ = next_serial_++;
  call->argv_ = argv;
  call->intent_ = choice;
  call->grant_ = grant_for(p, choice.intent);
  call->run_ = &run;
  CgroupBackend& b = *options_.backend;
  if (host == CallHost::kGuest) {
    // Numbered as the host's calls are. The spare begin_run made ahead (it cannot know the run's
    // calls will be a guest's) gives this call its number and is removed off the call's path;
    // no other is made.
    std::optional<Cgroup> unused;
    {
      std::lock_guard lock(run.mu_);
      if (run.spare_) {
        call->id_ = std::move(run.spare_id_);
        unused = std::move(run.spare_);
        run.spare_.reset();
        run.spare_reader_.reset();
      } else {
        call->id_ = "call-" + std::to_string(run.next_call_++);
      }
    }
    RunScope* r = &run;
    if (unused) defer(run, [this, r, cg = *unused] { remove_call_cgroup(*r, cg); });
    if (auto kills = run_oom_kills(run)) call->run_oom_kills_before_ = *kills;
    call->start_ = std::chrono::steady_clock::now();
    return call;
  }
  pid_t placed_pid = 0;  // the run's parked process, already in the spare (adopt_parked)
  std::unique_ptr<UsageReader> reader;  // the spare's, files open
  {
    // The spare made ahead when there is one (the usual case); else made here, on the call's
    // critical path (the first call of a run that came before its spare was made, or a spare
    // that could not be made).
    std::lock_guard lock(run.mu_);
    if (run.spare_) {
      call->cg_ = std::move(*run.spare_);
      call->id_ = std::move(run.spare_id_);
      reader = std::move(run.spare_reader_);
      placed_pid = run.spare_parked_;
      run.spare_.reset();
      run.spare_parked_ = 0;
    } else {
      call->id_ = "call-" + std::to_string(run.next_call_++);
      SG_ASSIGN_OR_RETURN(call->cg_, b.create(run.run_.rel + "/" + call->id_, &*run.state_));
    }
  }
  clock.lap("cgroup");
  call->placement_ = b.placement(call->cg_);
  call->placement_.placed_pid = placed_pid;
  // The grant is written before the call's first process is placed: writing limit files is
  // cheap, and a fresh cgroup has no limit of its own to leave behind.
  Limits limits = call_limits(call->grant_, run.io_device_);
  Grant effective = call->grant_;  // what the ladder measures the call against
  if (p.mode == PolicyMode::kPerCall) {
    if (auto lowered = lower_to_room(run, limits.memory_max)) {
      limits.memory_max = effective.memory_max = lowered->limit;
      if (limits.memory_high && limits.memory_high->value > lowered->limit.value)
        limits.memory_high = effective.memory_high = lowered->limit;
      call->memory_lowered_ = std::move(lowered);
    }
  }
  clock.lap("room");
  if (auto s = b.set_limits(call->cg_, limits); !s.ok()) {
    remove_call_cgroup(run, call->cg_);
    return std::move(s).error().context_add("grant for " + call->id_ + " (" + choice.intent + ")");
  }
  clock.lap("limits");
  if (auto kills = run_oom_kills(run)) call->run_oom_kills_before_ = *kills;
  clock.lap("oom-kills");
  call->ladder_ =
      std::make_unique<Ladder>(p.ladder, effective, b.features(), call->cg_, *actuator_);
  call->start_ = std::chrono::steady_clock::now();
  monitor_->watch(call->serial_, call->cg_, call->ladder_.get(), call->start_, run.budget_,
                  std::move(reader), run.trigger_key_);
  clock.lap("watch");
  return call;
}

// A call's limit is lowered to what its run's ceiling and its budget have left (less a
// margin), rather than leaving the kernel to OOM-kill at the shared limit. Ordered by
// oom_score_adj, the kernel does pick the call first there, but not only the call: a victim
// that exits hides itself from the OOM killer (MMF_OOM_SKIP) before the pages it is freeing
// are uncharged (exit_mmap frees them in one batch, after), and a charge by another process
// of the budget in that window finds it still full and takes the next pick: the run's parked
// process, then a resident one (seen: an agent's 96 MiB holder killed 5 ms after the call
// that filled the budget). With its own limit at the room, the call's OOM stays inside its
// own cgroup, where only its processes are candidates.
//
// The room counts as free: what the limit leaves, the page cache nothing maps (the kernel
// reclaims it first) and what the controller's running calls under it hold (calls contend
// for a budget through the budget rule, which freezes all but the largest, not through
// limits set by who came first). The margin is left for the run's other processes: the
// supervisor forks the next call's process, resident processes fault their pages back in.
std::optional<MemoryLowered> Controller::lower_to_room(RunScope& run,
                                                       std::optional<Bytes> want) const {
  constexpr uint64_t kMinMargin = uint64_t{8} << 20;
  constexpr uint64_t kMinLimit = uint64_t{4} << 20;  // enough to exec something and fail
  const Policy& p = options_.policy;
  std::vector<const Cgroup*> shared;
  if (p.run.memory_max) shared.push_back(&run.run_);
  if (run.budget_) shared.push_back(&run.budget_->cg);
  std::optional<MemoryLowered> lowered;
  for (const Cgroup* cg : shared) {
    const uint64_t limit = lowered ? lowered->limit.value : want ? want->value : UINT64_MAX;
    const uint64_t calls = monitor_->calls_charge(cg->rel);
    auto free_in = [&](const MemoryRoom& r) {
      const uint64_t used = r.charged - std::min(r.charged, calls + r.reclaimable);
      return *r.limit - std::min(*r.limit, used);
    };
    // The limit and charge first (two short files); memory.stat only when they say it may not fit.
    auto room = options_.backend->memory_room(*cg, /*with_reclaimable=*/false);
    if (!room.ok()) {
      spdlog::debug("memory room of {}: {}", cg->rel, room.error().message());
      continue;
    }
    if (!room->limit) continue;
    const uint64_t margin = std::max(kMinMargin, *room->limit / 32);
    if (free_in(*room) >= margin && free_in(*room) - margin >= limit) continue;
    if (auto full = options_.backend->memory_room(*cg, true); full.ok() && full->limit)
      room = std::move(full);
    const uint64_t free = free_in(*room);
    const uint64_t fits = std::max(kMinLimit, free - std::min(free, margin));
    if (fits < limit) lowered = MemoryLowered{Bytes{fits}, cg->rel};
  }
  return lowered;
}

std::optional<uint64_t> Controller::run_oom_kills(RunScope& run) {
  std::lock_guard lock(run.reader_mu_);
  if (!run.reader_) run.reader_ = options_.backend->usage_reader(run.run_);
  // A partial read has them (UsageReader): a kill is an act of a task that ran, so the run's
  // CPU clock has moved by the time its call has ended.
  auto u = run.reader_->read(/*full=*/false);
  if (!u.ok()) return std::nullopt;
  return u->memory_events.oom_kill;
}

void Controller::measure_runq(const CallScope& call, std::unique_ptr<RunqMeter> meter) {
  monitor_->set_runq_meter(call.serial_, std::move(meter));
}

void Controller::measure_net(const CallScope& call, std::unique_ptr<NetMeter> meter) {
  monitor_->set_net_meter(call.serial_, std::move(meter));
}

CallOutcome Controller::end_call(std::unique_ptr<CallScope> call, ExecResult result,
                                 std::optional<CallObservation> observed_inside) {
  StepClock clock("run " + (call->run_ ? call->run_->run_id_ : std::string("-")), "end_call");
  const bool on_host = call->ladder_ != nullptr;  // else CallHost::kGuest: nothing here to read
  std::unique_ptr<UsageReader> reader;            // the monitor's, for the last read (files open)
  if (on_host) reader = monitor_->unwatch(call->serial_);
  clock.lap("unwatch");
  CgroupBackend& b = *options_.backend;
  auto now = std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - call->start_);
  // One last read: the kernel's counters (OOM kills, refused forks, peaks) as the call left them.
  // It also tells whether the call left any task: pids.current counts every task of the
  // cgroup, threads and unreaped zombies included, and nothing can enter an empty one (a task
  // enters by a fork inside it, or placed by us, and the next call's goes to the spare).
  bool left_no_task = false;
  if (on_host) {
    if (auto u = reader ? reader->read(true) : b.read_usage(call->cg_); u.ok()) {
      left_no_task = u->pids_counted && u->pids_current == 0;
      LadderInput in;
      in.now = now;
      in.usage = std::move(u).value();
      call->ladder_->observe(in);
    }
  }
  clock.lap("read-call");
  if (on_host) call->ladder_->finish(now);
  uint64_t run_oom_kills = 0;
  if (call->run_) {
    if (auto kills = this->run_oom_kills(*call->run_);
        kills && *kills > call->run_oom_kills_before_)
      run_oom_kills = *kills - call->run_oom_kills_before_;
  }
  clock.lap("read-run");

  CallOutcome o;
  o.call_id = call->id_;
  o.argv = call->argv_;
  o.intent = call->intent_;
  o.grant = call->grant_;
  o.memory_lowered = call->memory_lowered_;
  if (observed_inside)
    o.observed = std::move(*observed_inside);
  else if (on_host)
    o.observed = call->ladder_->observation();
  o.observed.run_oom_kills = run_oom_kills;
  o.exec = std::move(result);
  classify(o);
  if (!on_host) return o;  // no host cgroup to revoke: the guest's controller removed its own

  // Revoke the grant: nothing the call started survives it. What is still in the call's
  // cgroup is killed now, before the outcome is returned; an empty cgroup (the usual case) is
  // removed by the reaper after it, off the call's critical path. The last read's pids.current
  // answers "empty" without listing every hierarchy's cgroup.procs (0.16-0.21 ms on hybrid);
  // a process a cut-short placement left in some hierarchies only is the removal's to kill.
  clock.lap("classify");
  bool empty = left_no_task;
  if (!empty) {
    auto left = b.procs(call->cg_);
    empty = left.ok() && left->empty();
    clock.lap("procs");
  }
  if (!call->run_) {
    if (auto s = b.remove(call->cg_); !s.ok())
      spdlog::warn("revoking {}: {}", call->cg_.rel, s.error().message());
  } else if (!empty) {
    remove_call_cgroup(*call->run_, call->cg_);
  } else {
    RunScope* r = call->run_;
    defer(*r, [this, r, cg = call->cg_] { remove_call_cgroup(*r, cg); });
  }
  // The next call's cgroup, once this one has ended (with the process it parked, if it did:
  // adopt_parked), ahead of the removal, which nothing waits for.
  if (RunScope* r = call->run_)
    defer(
        *r, [this, r] { make_spare(*r); }, /*first=*/true);
  return o;
}

Status Controller::end_run(std::unique_ptr<RunScope> run) {
  StepClock clock("run " + run->run_id_, "end_run");
  if (run->trigger_key_) monitor_->remove_trigger(run->trigger_key_);
  clock.lap("trigger");
  {
    std::lock_guard lock(run->mu_);
    run->closing_ = true;  // a spare job still queued makes nothing
    run->spare_reader_.reset();
  }
  settle(*run);  // the reaper is done with this run: nothing of it outlives end_run
  clock.lap("settle");
  {
    std::lock_guard lock(run->reader_mu_);
    run->reader_.reset();  // its files closed before the cgroup goes
  }
  std::lock_guard tenants(tenants_mu_);
  Status first = options_.backend->remove(run->run_);
  clock.lap("remove");
  auto released = release_resources(options_.paths, run->state_->resources());
  if (!released.ok()) return released;  // keep the record: gc retries
  SG_TRY(run->state_->finish());
  return first;
}

}  // namespace sandgate::controller
