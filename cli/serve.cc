// sandgate serve: the orchestrator protocol (session/protocol.h) as JSON lines on stdin/stdout,
// or on a unix socket (many connections at once, environments shared). Wiring only: the server
// and its transports are session/server.h.
#include <unistd.h>

#include <iostream>

#include "cli/common.h"
#include "cli/network.h"
#include "cli/signals.h"
#include "ebpf/activity_tracer.h"
#include "session/server.h"

namespace sandgate::cli {
namespace {

struct ServeArgs {
  std::string policy;
  std::string socket;
  bool allow_unsafe_host = false;
  bool trace = false;  // --trace: the eBPF activity tracer watches every environment
  NetArgs net;         // --net allowlist: the default of every create, and what makes it possible
  std::vector<std::string> base_paths;  // --base-path: every run's read-only base narrowed
  size_t pool = 0;  // --pool N: runs made ahead per shape of create (session/run_pool.h)
};

int run_serve(Globals& g, const ServeArgs& a) {
  controller::ControllerOptions copts;
  copts.paths = g.paths();
  copts.root = g.cgroup_root_name();
  auto policy = load_policy_arg(a.policy);
  if (!policy.ok()) return fail(policy.error());
  copts.policy = std::move(policy).value();
  // --net allowlist: checked as exec checks it, on a spec that stands for every run's network.
  providers::EnvSpec net_spec;
  if (auto s = apply_net_args(a.net, copts.policy.egress, net_spec); !s.ok())
    return fail(s.error());
  auto dns_upstream = dns_upstream_of(a.net);
  if (!dns_upstream.ok()) return fail(dns_upstream.error());
  auto guard = open_guard_for(net_spec);
  if (!guard.ok()) return fail(guard.error());
  auto base = base_paths_arg(copts.policy.base_allow, a.base_paths);
  if (!base.ok()) return fail(base.error());
  auto ctl = controller::Controller::create(std::move(copts));
  if (!ctl.ok()) return fail(ctl.error());
  std::unique_ptr<ebpf::ActivityTracer> tracer;
  if (a.trace) {
    auto t = ebpf::ActivityTracer::open();
    if (!t.ok())
      return fail(std::move(t).error().context_add(
          "--trace needs the eBPF activity tracer (sandgate doctor, \"bpf\")"));
    tracer = std::move(t).value();
  }
  InterruptFd interrupt;
  session::ServerOptions options;
  options.run_options.tracer = tracer.get();
  if (net_spec.network == providers::NetworkMode::kAllowlist) {
    options.network = session::ServerOptions::Network{net_spec.upstream_netns, net_spec.egress};
    options.run_options.egress = guard->get();
    options.run_options.dns_upstream = *dns_upstream;
  }
  options.base_paths = std::move(base).value();
  options.pool = a.pool;
  options.registry = &g.registry;
  options.provider_options = g.provider_options();
  options.provider_options.allow_unsafe_host = a.allow_unsafe_host;
  // A signal during a call cancels it (the call's outcome says so), then serve stops.
  options.cancel_fd = interrupt.fd();
  session::Server server(**ctl, std::move(options));

  if (a.socket.empty()) {
    session::serve_stream(server, 0, 1, interrupt.fd());
  } else {
    auto listening = listen_unix(a.socket, 16);
    if (!listening.ok()) return fail(std::move(listening).error().context_add("--socket"));
    UniqueFd listener = std::move(listening).value();
    std::cerr << "sandgate: serving on " << a.socket << "\n";
    session::serve_listener(server, listener.get(), interrupt.fd());
    ::unlink(a.socket.c_str());
  }
  server.close_all();
  return interrupt.pending() ? 128 + interrupt.pending() : 0;
}

}  // namespace

void add_serve_command(CLI::App& app, Globals& g) {
  auto a = std::make_shared<ServeArgs>();
  auto* sub = app.add_subcommand(
      "serve",
      "Serve the orchestrator protocol: one JSON request per line in, one JSON response per\n"
      "line out, on stdin/stdout or on --socket. Requests (\"id\" is echoed back):\n"
      "  "
      "{\"id\":1,\"op\":\"create\",\"provider\":\"namespaces\",\"workspace\":\"DIR\",\"env\":["
      "\"TERM\"],\n"
      "   \"secrets\":{\"GH_TOKEN\":\"/path/to/token\"}}\n"
      "  {\"id\":2,\"op\":\"exec\",\"env\":\"<env from "
      "create>\",\"argv\":[\"make\"],\"intent\":\"compile\"}\n"
      "  {\"id\":3,\"op\":\"destroy\",\"env\":\"<env>\",\"export_branch\":\"agent/fix\"}\n"
      "  {\"op\":\"list\"} {\"op\":\"providers\"} {\"op\":\"policy\"}\n"
      "exec answers with the call's structured outcome. Requests for different environments\n"
      "run at once (replies may interleave; match them by id), each environment's in order.\n"
      "The run contract (README): the workspace is a copy-on-write view of DIR (\"recipe_mode\":\n"
      "auto|overlay|copy); each secret is read by the server from FILE and shown to that run\n"
      "alone at /run/secrets/NAME; destroy brings the commit at the workspace's HEAD into DIR's\n"
      "repository as \"export_branch\" (\"export_force\": replace it) or copies the workspace to\n"
      "\"export\" (an absent or empty directory); everything else is destroyed.\n"
      "Network: none unless serve was started with --net allowlist (then the default of every\n"
      "create); a create may say \"net\":\"none\", or add entries with "
      "\"allow\":[\"tcp:HOST:443\"].\n"
      "Where traffic goes (--net-upstream) and the DNS server (--dns-upstream) are serve's only.\n"
      "The read-only base of every run: --base-path and the policy's base.allow (serve's only).\n"
      "destroy answers once the export is done; the run is removed after the answer.\n"
      "End of input (or SIGTERM) destroys every environment still open.");
  sub->add_option("--policy", a->policy, "policy JSON file (default: the built-in policy)");
  sub->add_option("--socket", a->socket, "listen on this unix socket instead of stdin/stdout");
  sub->add_flag("--allow-unsafe-host", a->allow_unsafe_host, "permit the host_dir provider");
  sub->add_flag("--trace", a->trace,
                "watch every environment with the eBPF activity tracer: each exec's outcome gets\n"
                "what the kernel saw the call do (observed.execs, connects, sensitive_opens,\n"
                "runq_delay_ms), and the policy's run-queue rule (ladder.runq_throttle_ms_per_s)\n"
                "can act; fails if the tracer cannot load");
  sub->add_option(
         "--pool", a->pool,
         "N: keep N runs made ahead (cgroups, supervisor, parked first call) for each shape of\n"
         "create serve has answered, and answer a create of that shape with one (its reply\n"
         "says \"pooled\":true); the first create of a shape is made then, and learns it. Only\n"
         "creates identical in everything that shapes the run (provider, tenant, env, ro_binds,\n"
         "image, workspace_size, net, allow) share runs; a create with a workspace recipe,\n"
         "secrets or a timeout is always made then. At most 4 shapes. Runs made ahead are\n"
         "destroyed when serve ends (and by `sandgate gc` after a crash). 0: off")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  add_net_options(sub, a->net);
  add_base_path_option(sub, a->base_paths);
  sub->callback([&g, a] { g.exit_code = run_serve(g, *a); });
}

}  // namespace sandgate::cli
