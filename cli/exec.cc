// sandgate exec: one command in a fresh environment; exits with the command's status.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <iostream>

#include "cli/common.h"
#include "cli/exec_client.h"
#include "cli/network.h"
#include "cli/signals.h"
#include "core/json.h"
#include "core/log.h"
#include "core/terminal_text.h"
#include "core/units.h"
#include "session/client.h"
#include "session/export.h"
#include "session/run_session.h"

namespace sandgate::cli {
namespace {

// --trace without --json: what the kernel saw, on stderr after the call's own output.
void print_traced(const controller::CallOutcome& o) {
  // The guard's decisions are printed whenever the run has an allowlist: what was refused is
  // what a user of --net allowlist needs to see first.
  for (const auto& v : o.observed.egress) std::cerr << "sandgate: egress: " << describe(v) << "\n";
  if (!o.observed.traced) return;
  for (const auto& line : describe(*o.observed.traced))
    std::cerr << "sandgate: traced: " << terminal_safe(line) << "\n";
}

Json result_json(const providers::ProviderInfo& info, const std::string& run_id,
                 const ExecResult& r) {
  Json j = {
      {"schema_version", 1},
      {"provider", info.name},
      {"unsafe", info.unsafe},
      {"run_id", run_id},
      {"exit_code", r.status.exited ? Json(r.status.code) : Json(nullptr)},
      {"signal", r.status.exited ? Json(nullptr) : Json(r.status.signal)},
      {"wall_ms", to_millis(r.wall)},
      {"timed_out", r.timed_out},
      {"cancelled", r.cancelled},
      {"stdout_bytes", r.stdout_bytes},
      {"stderr_bytes", r.stderr_bytes},
      {"stdout_truncated", r.stdout_truncated},
      {"stderr_truncated", r.stderr_truncated},
  };
  set_text_field(j, "stdout", r.stdout_data);
  set_text_field(j, "stderr", r.stderr_data);
  if (r.start_failure)
    j["start_failure"] = {{"step", r.start_failure->step},
                          {"errno", errno_name(r.start_failure->err)},
                          {"message", r.start_failure->describe()}};
  return j;
}

// Without the controller: the provider alone, no per-call cgroup or outcome.
int exec_plain(providers::Provider& provider, const providers::EnvSpec& spec, const ExecArgs& a,
               InterruptFd& interrupt) {
  auto env = provider.create(spec);
  if (!env.ok()) return fail(env.error());
  providers::Call call;
  call.argv = a.command;
  call.cancel_fd = interrupt.fd();
  auto sink = std::make_shared<OutputSink>(a.raw_output);
  if (!a.json)
    call.on_output = [sink](int stream, std::string_view data) { sink->write(stream, data); };
  auto result = (*env)->exec(call, {});
  sink->finish();
  std::string run_id = (*env)->run_id();
  Status exported;
  if (result.ok() && (!a.export_.branch.empty() || !a.export_.directory.empty()))
    exported = (*env)->settle_workspace();
  if (result.ok() && exported.ok() && !a.export_.branch.empty())
    exported = session::export_branch((*env)->workspace_host_path(), spec.workspace_recipe,
                                      a.export_.branch, a.export_.force);
  if (result.ok() && exported.ok() && !a.export_.directory.empty())
    exported = session::export_directory((*env)->workspace_host_path(), a.export_.directory);
  auto destroyed = (*env)->destroy();
  if (!result.ok()) return fail(result.error());
  if (!exported.ok())
    return fail(
        std::move(exported).error().context_add("the run was destroyed, its export failed"));
  if (!destroyed.ok())
    return fail(std::move(destroyed).error().context_add("tearing down the run"));
  if (a.json) std::cout << dump_json(result_json(provider.info(), run_id, *result), 2) << "\n";
  if (result->start_failure && !a.json)
    std::cerr << "sandgate: could not start '" << a.command[0]
              << "' in the sandbox: " << result->start_failure->describe() << "\n";
  if (result->cancelled) {
    int sig = interrupt.pending();
    std::cerr << "sandgate: interrupted; run " << run_id << " torn down\n";
    return 128 + (sig ? sig : SIGINT);
  }
  if (result->timed_out) std::cerr << "sandgate: timed out; run " << run_id << " killed\n";
  return result->status.shell_code();
}

int run_exec(Globals& g, const ExecArgs& a) {
  if (!a.socket.empty()) return exec_client(a);
  if (a.provider.empty())
    return fail("exec needs --provider (or --socket to use a server's environment)");
  providers::ProviderOptions options = g.provider_options();
  options.allow_unsafe_host = a.allow_unsafe_host;
  auto provider = g.registry.create(a.provider, options);
  if (!provider.ok()) return fail(provider.error());
  // What the run shares with every run of its provider is made beside the set-up below
  // (the controller, the run's cgroups and workspace) instead of in the run's create.
  providers::WarmUp warm_up(**provider);

  providers::EnvSpec spec;
  spec.workspace_recipe = a.workspace;
  spec.image = a.image;
  auto mode = providers::parse_recipe_mode(a.recipe_mode);
  if (!mode.ok()) return fail(std::move(mode).error().context_add("--recipe-mode"));
  spec.recipe_mode = *mode;
  if (!a.workspace_size.empty()) {
    auto size = parse_bytes(a.workspace_size);
    if (!size.ok()) return fail(std::move(size).error().context_add("--workspace-size"));
    spec.workspace_size = size->value;
  }
  for (const auto& arg : a.secrets) {
    auto secret = providers::parse_secret_arg(arg);
    if (!secret.ok()) return fail(secret.error());
    spec.secrets.push_back(std::move(secret).value());
  }
  if (!a.export_.branch.empty()) {
    if (auto s = session::check_export_branch(a.export_.branch); !s.ok()) return fail(s.error());
    if (a.workspace.empty())
      return fail("--export-branch needs --workspace: the repository the branch goes to");
  }
  spec.env = a.env;
  for (const auto& b : a.ro_binds) spec.readonly_mounts.push_back(providers::parse_bind_mount(b));
  if (!a.timeout.empty()) {
    auto t = parse_duration(a.timeout);
    if (!t.ok()) return fail(std::move(t).error().context_add("--timeout"));
    spec.timeout = *t;
  }
  if ((*provider)->info().unsafe)
    std::cerr << "sandgate: warning: provider " << display_name((*provider)->info())
              << ": the command runs on this host with no isolation\n";

  InterruptFd interrupt;
  if (a.no_controller) {
    auto base = base_paths_arg({}, a.base_paths);
    if (!base.ok()) return fail(base.error());
    spec.base_paths = std::move(base).value();
    if (a.net.mode != "none")
      return fail(
          "--net allowlist needs the controller: the egress guard attaches to the run's cgroup");
    return exec_plain(**provider, spec, a, interrupt);
  }

  StepClock clock("sandgate", "exec");  // SANDGATE_LOG=debug: the whole command, by step
  auto policy = load_policy_arg(a.policy);
  if (!policy.ok()) return fail(policy.error());
  clock.lap("policy");
  controller::ControllerOptions copts;
  copts.paths = options.paths;
  copts.root = g.cgroup_root_name();
  copts.policy = std::move(policy).value();
  auto ctl = controller::Controller::create(std::move(copts));
  if (!ctl.ok())
    return fail(
        std::move(ctl).error().context_add("per-call control needs root and cgroups; "
                                           "--no-controller runs without it"));
  spec.tenant = a.tenant;
  auto base = base_paths_arg((*ctl)->policy().base_allow, a.base_paths);
  if (!base.ok()) return fail(base.error());
  spec.base_paths = std::move(base).value();
  if (auto s = apply_net_args(a.net, (*ctl)->policy().egress, spec); !s.ok())
    return fail(s.error());
  auto guard = open_guard_for(spec);
  if (!guard.ok()) return fail(guard.error());
  session::RunOptions run_options;
  run_options.egress = guard->get();
  // The run's only call follows at once: nothing overlaps a process parked for it ahead (its
  // placement would still be under way when the call begins), and its park is a round trip
  // to the supervisor on the way (about 2 ms of the whole command here).
  run_options.park_ahead = false;
  auto dns_upstream = dns_upstream_of(a.net);
  if (!dns_upstream.ok()) return fail(dns_upstream.error());
  run_options.dns_upstream = *dns_upstream;
  std::unique_ptr<ebpf::ActivityTracer> tracer;
  if (a.trace) {
    auto t = ebpf::ActivityTracer::open();
    if (!t.ok())
      return fail(std::move(t).error().context_add(
          "--trace needs the eBPF activity tracer (sandgate doctor, \"bpf\")"));
    tracer = std::move(t).value();
    run_options.tracer = tracer.get();
  }
  clock.lap("controller");
  auto opened = session::RunSession::open(**ctl, **provider, spec, run_options);
  if (!opened.ok()) return fail(opened.error());
  clock.lap("open");
  session::CallRequest call;
  call.argv = a.command;
  call.last = true;  // the run's only call: no process or cgroup is made ahead for a next one
  if (!a.intent.empty()) call.intent = a.intent;
  call.cancel_fd = interrupt.fd();
  auto sink = std::make_shared<OutputSink>(a.raw_output);
  if (!a.json)
    call.on_output = [sink](int stream, std::string_view data) { sink->write(stream, data); };
  auto outcome = (*opened)->call(call);
  sink->finish();
  clock.lap("call");
  std::string run_id = (*opened)->run_id();
  providers::WorkspaceInfo workspace = (*opened)->workspace_info();
  // What the run hands back, before everything else of it is destroyed.
  Status exported;
  if (outcome.ok()) exported = (*opened)->export_results(a.export_);
  auto closed = (*opened)->close();
  clock.lap("close");
  if (!outcome.ok()) return fail(outcome.error());
  if (!closed.ok()) return fail(std::move(closed).error().context_add("tearing down the run"));
  if (!exported.ok())
    return fail(
        std::move(exported).error().context_add("the run was destroyed, its export failed"));
  const controller::CallOutcome& o = *outcome;
  if (a.json) {
    Json j = result_json((*provider)->info(), run_id, o.exec);
    j["outcome"] = controller::to_json(o, /*with_output=*/false);
    j["workspace"] = {{"kind", workspace.kind}, {"note", workspace.note}};
    std::cout << dump_json(j, 2) << "\n";
  } else if (o.termination == controller::Termination::kNotStarted) {
    print_traced(o);
    // A shell's 127/126, with the step that failed instead of "command not found".
    std::cerr << "sandgate: " << o.reason << "\n";
  } else if (o.termination != controller::Termination::kExited) {
    print_traced(o);
    std::cerr << "sandgate: " << controller::to_string(o.termination) << ": " << o.reason
              << "\nsandgate: advice (" << controller::to_string(o.retry) << "): " << o.advice
              << "\n";
  } else {
    print_traced(o);
  }
  if (int sig = interrupt.pending(); sig && o.termination == controller::Termination::kCancelled) {
    std::cerr << "sandgate: interrupted; run " << run_id << " torn down\n";
    return 128 + sig;
  }
  return o.exec.status.shell_code();
}

}  // namespace

void add_exec_command(CLI::App& app, Globals& g) {
  auto a = std::make_shared<ExecArgs>();
  CLI::App* sub = add_exec_subcommand(app, *a);
  sub->callback([&g, a] { g.exit_code = run_exec(g, *a); });
}

}  // namespace sandgate::cli
