#include "session/run_session.h"

#include <arpa/inet.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "controller/guest_control.h"
#include "core/fd.h"
#include "core/log.h"
#include "core/state.h"
#include "providers/egress_link.h"

namespace sandgate::session {

std::string io_device_of(const std::string& path, const std::string& sysfs) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    spdlog::warn("io limits: cannot stat workspace {}: {}", path, std::strerror(errno));
    return "";
  }
  // Major 0 is an anonymous device (tmpfs, overlayfs, btrfs subvolumes): nothing to throttle.
  if (major(st.st_dev) == 0) return "";
  std::string dev = std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  // io.max and blkio.throttle.* take whole disks only: the kernel refuses a partition with
  // ENODEV (block/blk-cgroup.c, blkcg_conf_open_bdev). A partition's sysfs directory has a
  // "partition" file and sits in its disk's directory, whose "dev" is the disk's MAJ:MIN.
  std::error_code ec;
  std::filesystem::path node = std::filesystem::path(sysfs) / "dev/block" / dev;
  if (!std::filesystem::exists(node / "partition", ec)) return dev;
  auto real = std::filesystem::canonical(node, ec);
  if (ec) return dev;
  auto disk = read_file((real.parent_path() / "dev").string());
  if (!disk.ok()) return dev;
  std::string d = *disk;
  while (!d.empty() && (d.back() == '\n' || d.back() == ' ')) d.pop_back();
  return d.empty() ? dev : d;
}

namespace {

// Attaches the guard to the run's cgroup2 directory with its allowlist; the run's cgroup id.
Result<uint64_t> guard_egress(const controller::RunScope& run, ebpf::EgressGuard* guard,
                              const std::vector<EgressRule>& rules) {
  if (!guard)
    return Error{ENOTSUP, "guard the run's egress", "",
                 "--net allowlist needs the kernel's egress guard (eBPF cgroup/connect4|6, "
                 "sendmsg4|6), and none is loaded (`sandgate doctor` says whether it can be)"};
  auto dir = run.cgroup().dirs.find("unified");
  if (dir == run.cgroup().dirs.end())
    return Error{ENOTSUP, "guard the run's egress", "",
                 "the egress guard attaches to a cgroup2 directory, and this layout has none"};
  auto id = guard->guard(dir->second, rules);
  if (!id.ok()) return std::move(id).error().context_add("guard the run's egress");
  return id;
}

// The run-queue rule's view of a traced call (controller/runq.h): the tracer's per-cgroup sums.
class TracedRunqMeter : public controller::RunqMeter {
 public:
  TracedRunqMeter(const ebpf::ActivityTracer& tracer, uint64_t cgroup_id)
      : tracer_(tracer), cgroup_id_(cgroup_id) {}
  std::optional<controller::RunqTotals> read() override {
    ebpf::RunqSoFar q = tracer_.runq(cgroup_id_);
    return controller::RunqTotals{q.delay_ns, q.waits};
  }

 private:
  const ebpf::ActivityTracer& tracer_;
  uint64_t cgroup_id_;
};

// The network rule's view of a call of a guarded run (controller/net_meter.h): the guard's
// per-cgroup byte counts, peeked (the call's end takes them for observed.net).
class GuardNetMeter : public controller::NetMeter {
 public:
  GuardNetMeter(const ebpf::EgressGuard& guard, uint64_t cgroup_id)
      : guard_(guard), cgroup_id_(cgroup_id) {}
  std::optional<controller::NetTotals> read() override {
    auto n = guard_.peek_net_bytes(cgroup_id_);
    if (!n) return std::nullopt;
    return controller::NetTotals{n->bytes_out, n->bytes_in};
  }

 private:
  const ebpf::EgressGuard& guard_;
  uint64_t cgroup_id_;
};

// The run's resolver, on the upstream side of its link (env.dns_address()), with the guard
// admitting the run's UDP to it, and the addresses of every listed name it answers.
Result<std::unique_ptr<DnsResolver>> start_resolver(const providers::Environment& env,
                                                    const providers::EnvSpec& spec,
                                                    const RunOptions& options,
                                                    ebpf::EgressGuard& guard, uint64_t run) {
  const std::string address = env.dns_address();
  if (address.empty())
    return logic_error("start the run's DNS resolver",
                       "the provider wired the run's network but named no resolver address");
  DnsResolverConfig config;
  config.listen.sin_family = AF_INET;
  config.listen.sin_port = htons(53);
  if (::inet_pton(AF_INET, address.c_str(), &config.listen.sin_addr) != 1)
    return logic_error("start the run's DNS resolver", "not an IPv4 address", address);
  for (const auto& r : spec.egress)
    if (r.is_name()) config.names.push_back(r);
  config.upstream = options.dns_upstream;
  SG_ASSIGN_OR_RETURN(auto netns, providers::open_upstream_netns(spec.upstream_netns));
  config.netns_fd = netns.get();
  auto to_resolver = parse_egress_rule("udp:" + address + ":53");
  if (!to_resolver.ok()) return std::move(to_resolver).error();
  to_resolver->text = "udp:" + address + ":53 (the run's resolver)";
  SG_TRY(std::move(guard.add(run, {*to_resolver})).context("admit the run's DNS to its resolver"));
  auto started = DnsResolver::start(
      std::move(config),
      [&guard, run](const std::vector<EgressRule>& r) { return guard.add(run, r); });
  if (!started.ok()) return std::move(started).error().context_add("start the run's DNS resolver");
  return started;
}

// The cgroup2 id of a call's cgroup, for the tracer and the guard's decisions.
Result<uint64_t> call_cgroup_id(const controller::CallScope& scope) {
  auto dir = scope.cgroup().dirs.find("unified");
  if (dir == scope.cgroup().dirs.end())
    return Error{ENOENT, "identify the call's cgroup", "", "no cgroup2 directory"};
  return ebpf::cgroup_id_of(dir->second);
}

}  // namespace

Result<std::unique_ptr<RunSession>> RunSession::open(controller::Controller& controller,
                                                     providers::Provider& provider,
                                                     providers::EnvSpec spec,
                                                     const RunOptions& options) {
  // Before anything is made: a provider that cannot honour the policy is refused outright.
  SG_TRY(providers::check_requirements(provider, controller.policy().required_capabilities));
  if (spec.run_id.empty()) spec.run_id = new_run_id();
  std::unique_ptr<RunSession> s(new RunSession(controller));
  s->provider_info_ = provider.info();
  SG_ASSIGN_OR_RETURN(s->run_, controller.begin_run(spec.tenant, spec.run_id));
  spec.placement = s->run_->main_placement();
  if (options.tracer) {
    // Everything under the run's cgroup, its supervisor included, is traced from here on.
    auto dir = s->run_->cgroup().dirs.find("unified");
    if (dir == s->run_->cgroup().dirs.end()) {
      (void)controller.end_run(std::move(s->run_));
      s->closed_ = true;
      return Error{ENOTSUP, "trace the run", "",
                   "the activity tracer keys events by cgroup2 id, and this layout has no cgroup2 "
                   "hierarchy (pure v1)"};
    }
    auto id = ebpf::cgroup_id_of(dir->second);
    Status watched = id.ok() ? options.tracer->watch(*id) : Status(id.error());
    if (!watched.ok()) {
      (void)controller.end_run(std::move(s->run_));
      s->closed_ = true;
      return std::move(watched).error().context_add("trace the run");
    }
    s->tracer_ = options.tracer;
    s->traced_run_ = *id;
  }
  if (spec.network == providers::NetworkMode::kAllowlist && has_names(spec.egress) &&
      !options.dns_upstream) {
    std::string first;
    for (const auto& r : spec.egress)
      if (r.is_name() && first.empty()) first = r.text;
    (void)controller.end_run(std::move(s->run_));
    s->closed_ = true;
    if (s->tracer_) s->tracer_->unwatch(s->traced_run_);
    return logic_error("resolve the allowlist's names",
                       "the allowlist names a host (" + first +
                           "): --dns-upstream ADDR[:PORT] must name the DNS server the run's "
                           "resolver asks (reachable from --net-upstream)");
  }
  if (spec.network == providers::NetworkMode::kAllowlist) {
    // Before the provider makes anything: the supervisor and every call start guarded.
    auto guarded = guard_egress(*s->run_, options.egress, spec.egress);
    if (!guarded.ok()) {
      if (s->tracer_) s->tracer_->unwatch(s->traced_run_);
      (void)controller.end_run(std::move(s->run_));
      s->closed_ = true;
      return std::move(guarded).error();
    }
    s->egress_ = options.egress;
    s->guarded_run_ = *guarded;
  }
  // The same ceiling for a provider that also enforces it itself (a container's limits).
  const auto& ceiling = controller.policy().run;
  if (!spec.ceiling.memory_bytes && ceiling.memory_max)
    spec.ceiling.memory_bytes = ceiling.memory_max->value;
  if (!spec.ceiling.cpus && ceiling.cpu_cores) spec.ceiling.cpus = ceiling.cpu_cores;
  if (!spec.ceiling.pids && ceiling.pids_max) spec.ceiling.pids = ceiling.pids_max;
  auto env = provider.create(spec);
  if (!env.ok()) {
    (void)controller.end_run(std::move(s->run_));
    s->closed_ = true;
    return std::move(env).error();
  }
  s->env_ = std::move(env).value();
  s->run_id_ = s->env_->run_id();
  s->workspace_path_ = s->env_->workspace_path();
  s->workspace_host_path_ = s->env_->workspace_host_path();
  s->recipe_ = spec.workspace_recipe;
  if (s->egress_) {
    // Before the first call: the run's resolv.conf names this resolver.
    auto resolver = start_resolver(*s->env_, spec, options, *s->egress_, s->guarded_run_);
    if (!resolver.ok()) {
      (void)s->close();
      return std::move(resolver).error();
    }
    s->resolver_ = std::move(resolver).value();
  }
  // io grants apply to the block device the workspace's writes land on (a copy-on-write
  // view's upper layer: the view itself is an anonymous device); only the provider knows
  // where that is, so the run learns it once the environment exists.
  std::string storage = s->env_->workspace_info().storage;
  if (storage.empty()) storage = s->workspace_host_path_;
  if (auto st = controller.set_io_device(*s->run_, io_device_of(storage)); !st.ok()) {
    (void)s->close();
    return std::move(st).error();
  }
  // The first call's process, parked now and placed by the controller's reaper in the first
  // call's cgroup while the caller prepares its call; each call then parks the next one's.
  // Moving a process between cgroups is the kernel's slow step on a call's start (a grace
  // period per move here), and this takes it off the call's path. A provider that cannot
  // park answers 0: its calls start and are placed as before.
  if (!options.park_ahead) {
    // Calls start and are placed on their own path (a benchmark's baseline).
  } else if (auto parked = s->env_->park(); !parked.ok()) {
    spdlog::debug("run {}: no process parked ahead: {}", s->run_id_, parked.error().message());
  } else if (*parked > 0) {
    s->parking_ = true;
    controller.adopt_parked(*s->run_, *parked);
  }
  return s;
}

Status RunSession::export_results(const RunExport& what) {
  if (closed_) return logic_error("export", "the run is closed", run_id_);
  if (!what.branch.empty() || !what.directory.empty())
    SG_TRY(std::move(env_->settle_workspace()).context("reading the run's workspace back"));
  if (!what.branch.empty())
    SG_TRY(export_branch(workspace_host_path_, recipe_, what.branch, what.force));
  if (!what.directory.empty()) SG_TRY(export_directory(workspace_host_path_, what.directory));
  return {};
}

RunSession::~RunSession() {
  if (auto st = close(); !st.ok())
    spdlog::error("closing run {}: {}", run_id_, st.error().message());
}

Result<controller::CallOutcome> RunSession::call(const CallRequest& request) {
  if (closed_) return logic_error("call", "the run is closed", run_id_);
  StepClock clock("run " + run_id_, "call");  // SANDGATE_LOG=debug: where the call's time went
  // A provider whose calls run under a kernel of their own (microvm): the host cannot hold
  // them in a cgroup (the run's host processes are QEMU's), so the controller makes none; the
  // call's grant and the ladder's settings go with it, and the controller's part inside the
  // guest gives the call a cgroup there, applies them and watches it
  // (controller/guest_control.h). Its observation comes back for the outcome.
  const bool inside = provider_info_.capabilities.count(Capability::kKernelSeparate) > 0;
  // A process the last call parked for this one whose word came after that call ended: the
  // reaper places it in a spare, this call's if it gets there before begin_call takes the
  // spare, else the next call's. Without this it was dropped, and replaced by a fresh park.
  if (parking_)
    if (pid_t late = env_->take_late_parked(); late > 0) controller_.adopt_parked(*run_, late);
  if (request.last) controller_.last_call(*run_);
  SG_ASSIGN_OR_RETURN(auto scope,
                      controller_.begin_call(*run_, request.intent, request.argv,
                                             inside ? controller::CallHost::kGuest
                                                    : controller::CallHost::kCgroup));
  clock.lap("begin");
  providers::Call call;
  call.argv = request.argv;
  call.env = request.env;
  call.cwd = request.cwd;
  call.timeout = scope->timeout();
  call.output_limit = request.output_limit;
  call.rlimits = scope->grant().to_process_limits();  // the grant's per-process part
  call.cancel_fd = request.cancel_fd;
  call.stdin_fd = request.stdin_fd;
  call.on_output = request.on_output;
  call.park_next = parking_ && !request.last;
  if (inside)
    call.guest_control =
        controller::guest_control_to_json(scope->grant(), controller_.policy().ladder);
  if (request.on_started) {
    const controller::CallScope& placed = *scope;
    call.on_started = [&](pid_t pid) { request.on_started(placed, pid); };
  }
  uint64_t call_id = 0;  // the call's cgroup2 id, for the tracer and the guard
  // A guest's call has no host cgroup, and nothing of it the host's eBPF programs could see.
  if ((tracer_ || egress_) && !inside) {
    auto id = call_cgroup_id(*scope);
    if (!id.ok()) {
      (void)controller_.end_call(std::move(scope), ExecResult{});
      return std::move(id).error().context_add(tracer_ ? "trace the call" : "attribute egress");
    }
    call_id = *id;
  }
  // Until end_call: the monitor reads the call's network bytes (its peak rate in the outcome,
  // the ladder's network rule).
  if (egress_ && call_id)
    controller_.measure_net(*scope, std::make_unique<GuardNetMeter>(*egress_, call_id));
  uint64_t traced = tracer_ ? call_id : 0;  // while the tracer keeps the call's events
  if (traced) {
    tracer_->begin(traced);
    // Until end_call: the monitor reads the call's run-queue delay (the ladder's run-queue rule).
    controller_.measure_runq(*scope, std::make_unique<TracedRunqMeter>(*tracer_, traced));
  }
  const uint64_t call_number = ++calls_;
  if (resolver_) resolver_->begin_call(call_number);
  clock.lap("meters");
  auto result = env_->exec(call, scope->placement());
  clock.lap("exec");
  if (result.ok() && result->parked_next_pid > 0)
    controller_.adopt_parked(*run_, result->parked_next_pid);
  if (!result.ok()) {
    // Not run at all: still revoke the grant and remove the call's cgroup.
    (void)controller_.end_call(std::move(scope), ExecResult{});
    if (traced) (void)tracer_->end(traced);
    if (resolver_) (void)resolver_->end_call(call_number);
    return std::move(result).error();
  }
  std::optional<controller::CallObservation> seen_inside;
  if (inside) {
    auto seen = result->guest_observation.is_null()
                    ? Result<controller::CallObservation>(logic_error(
                          "read the guest's call observation", "none came with the call's end"))
                    : controller::guest_observation_from_json(result->guest_observation);
    if (seen.ok())
      seen_inside = std::move(seen).value();
    else  // the outcome then has the host's view only: no peaks, no ladder
      spdlog::warn("run {}: {}", run_id_, seen.error().message());
  }
  auto outcome =
      controller_.end_call(std::move(scope), std::move(result).value(), std::move(seen_inside));
  clock.lap("end");
  // After end_call: what it killed of the call's leftovers has exited by now, and every event
  // of the call's processes is in the ring buffer.
  if (traced) {
    TracedActivity seen = tracer_->end(traced);
    outcome.observed.traced = std::move(seen);
  }
  if (egress_) {
    // Calls of a run follow each other: what the guard decided since the last take is this
    // call's, but for the run's resident processes (another cgroup id), left out here.
    uint64_t not_kept = 0;
    // The guard's decisions and the resolver's, merged in the order they were made.
    std::vector<DnsResolver::Decision> decided;
    for (auto& d : egress_->take(guarded_run_, &not_kept)) {
      if (d.cgroup_id != call_id) continue;
      decided.push_back({d.ts_ns, {d.pid, d.hook, d.address, d.port, d.protocol, d.allowed}});
    }
    if (resolver_) {
      uint64_t dns_not_kept = 0;
      for (auto& d : resolver_->end_call(call_number, &dns_not_kept))
        decided.push_back(std::move(d));
      not_kept += dns_not_kept;
    }
    std::stable_sort(decided.begin(), decided.end(),
                     [](const auto& a, const auto& b) { return a.ts_ns < b.ts_ns; });
    for (auto& d : decided) {
      if (outcome.observed.egress.size() >= kTracedKeep) {
        ++outcome.observed.egress_not_kept;
        continue;
      }
      outcome.observed.egress.push_back(std::move(d.verdict));
    }
    outcome.observed.egress_not_kept += not_kept;
    auto n = egress_->take_net_bytes(call_id);
    outcome.observed.net =
        controller::CallObservation::NetBytes{n.bytes_out, n.bytes_in, n.packets_out, n.packets_in};
  }
  clock.lap("observed");
  return outcome;
}

Result<ExecResult> RunSession::run_resident(const providers::Call& call) {
  if (closed_) return logic_error("run a resident process", "the run is closed", run_id_);
  providers::Call resident = call;
  resident.resident = true;  // not the OOM killer's first choice, as the calls are
  return env_->exec(resident, run_->main_placement());
}

Status RunSession::put_file(const std::string& name, std::string_view data) {
  if (closed_) return logic_error("put a file in the workspace", "the run is closed", run_id_);
  return env_->put_file(name, data);
}

Result<std::optional<std::string>> RunSession::get_file(const std::string& name, size_t max_bytes) {
  if (closed_) return logic_error("read a file in the workspace", "the run is closed", run_id_);
  return env_->get_file(name, max_bytes);
}

Result<ResidentUsage> RunSession::resident_usage() {
  if (closed_) return logic_error("read the run's resident usage", "the run is closed", run_id_);
  if (auto guest = env_->guest_resident_usage()) return *guest;
  SG_ASSIGN_OR_RETURN(auto run, controller_.backend().read_usage(run_->cgroup()));
  SG_ASSIGN_OR_RETURN(auto main, controller_.backend().read_usage(run_->main_cgroup()));
  return ResidentUsage{run.memory_current, main.memory_events.oom_kill};
}

Status RunSession::alive() const {
  if (closed_ || !env_) return logic_error("alive", "the run was closed", run_id_);
  return env_->alive();
}

Status RunSession::close() {
  if (closed_) return {};
  closed_ = true;
  if (tracer_ && traced_run_) tracer_->unwatch(traced_run_);
  Status first;
  StepClock clock("run " + run_id_, "close");
  if (env_) first = env_->destroy();
  clock.lap("destroy");
  // After destroy: nothing of the run is left to ask or to connect.
  if (resolver_) resolver_->stop();
  resolver_.reset();
  if (egress_ && guarded_run_) egress_->release(guarded_run_);
  clock.lap("network");
  if (run_) {
    auto s = controller_.end_run(std::move(run_));
    clock.lap("end_run");
    if (first.ok()) first = std::move(s);
  }
  return first;
}

}  // namespace sandgate::session
