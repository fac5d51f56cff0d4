// sandgate exec: one command in a fresh environment; exits with the command's status.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <iostream>

#include "cli/common.h"
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

struct ExecArgs {
  std::string provider;
  std::string image;        // --image (podman): a local image for the root filesystem
  bool raw_output = false;  // copy control sequences to a terminal unchanged
  std::string intent;
  std::string policy;
  std::string tenant = "default";
  bool no_controller = false;
  bool trace = false;  // --trace: the kernel's account of the call (eBPF)
  NetArgs net;         // --net, --allow, --net-upstream
  std::string workspace;
  std::vector<std::string> env;
  std::vector<std::string> ro_binds;
  std::vector<std::string> base_paths;  // --base-path
  std::string recipe_mode = "auto";
  std::string workspace_size;        // --workspace-size: "" is the host's filesystem
  std::vector<std::string> secrets;  // NAME=FILE
  session::RunExport export_;        // --export-branch, --export-force, --export
  std::string timeout;
  bool json = false;
  bool allow_unsafe_host = false;
  std::string socket;  // client mode: the call goes to a `serve --socket` / `record` server
  std::string run;     // client mode: the environment there (default $SANDGATE_RUN)
  std::vector<std::string> command;
};

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

// Where a call's output goes: the caller's stdout and stderr, as it comes. A stream that is a
// terminal gets it through TerminalText (its control sequences shown, not obeyed) unless
// --raw-output; a pipe or a file gets the bytes unchanged.
class OutputSink {
 public:
  explicit OutputSink(bool raw) {
    for (int fd : {1, 2}) filtered_[fd] = !raw && ::isatty(fd) == 1;
  }
  void write(int fd, std::string_view data) {
    if (fd != 1 && fd != 2) return;
    if (!filtered_[fd]) return put(fd, data);
    put(fd, text_[fd].feed(data));
  }
  // The end of both streams: what a filter still held.
  void finish() {
    for (int fd : {1, 2})
      if (filtered_[fd]) put(fd, text_[fd].finish());
  }

 private:
  static void put(int fd, std::string_view data) {
    if (!data.empty()) (void)!::write(fd, data.data(), data.size());
  }
  bool filtered_[3] = {false, false, false};
  TerminalText text_[3];
};

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

// `exec --socket PATH`: the call runs in an environment of a `sandgate serve --socket` or
// `sandgate record` server, as a call with its intent; its output and outcome come back in the
// reply. Without --run (or $SANDGATE_RUN) an environment is created for this one call and
// destroyed after it, as plain `exec` does.
int exec_client(const ExecArgs& a) {
  auto client = session::Client::connect(a.socket);
  if (!client.ok()) return fail(std::move(client).error().context_add("--socket"));

  std::string run = a.run;
  if (run.empty())
    if (const char* v = std::getenv("SANDGATE_RUN")) run = v;
  session::ExecRequest req;
  req.argv = a.command;
  if (!a.intent.empty()) req.intent = a.intent;
  if (run.empty()) {
    // A run made for this call and destroyed after it (exporting what it is told to), all in
    // one request: three round trips were 2-3 ms of a warm call's ~20.
    if (a.provider.empty())
      return fail("exec --socket without --run or $SANDGATE_RUN needs --provider");
    session::CreateRequest& create = req.create.emplace();
    create.provider = a.provider;
    create.env = a.env;
    create.tenant = a.tenant;
    create.workspace = a.workspace;
    create.ro_binds = a.ro_binds;
    create.recipe_mode = a.recipe_mode == "auto" ? "" : a.recipe_mode;
    create.workspace_size = a.workspace_size;
    for (const auto& arg : a.secrets) {
      // The server reads FILE: it is on the same host (a unix socket).
      auto eq = arg.find('=');
      if (eq == std::string::npos) return fail("--secret '" + arg + "' is not NAME=FILE");
      create.secrets.emplace_back(arg.substr(0, eq), arg.substr(eq + 1));
    }
    if (!a.timeout.empty()) {
      auto t = parse_duration(a.timeout);
      if (!t.ok()) return fail(std::move(t).error().context_add("--timeout"));
      create.timeout = *t;
    }
    if (!a.export_.branch.empty() || !a.export_.directory.empty())
      req.destroy =
          session::DestroyRequest{"", a.export_.branch, a.export_.force, a.export_.directory};
  } else if (!a.export_.branch.empty() || !a.export_.directory.empty()) {
    return fail(
        "--export-branch and --export apply when the run ends: pass them to the destroy of run " +
        run);
  } else {
    req.env = run;
  }
  auto outcome = client->exec(req);
  if (!outcome.ok()) return fail(outcome.error());
  const Json& o = *outcome;
  if (a.json) {
    std::cout << dump_json(o, 2) << "\n";
  } else {
    OutputSink sink(a.raw_output);
    sink.write(1, o.value("stdout", ""));
    sink.write(2, o.value("stderr", ""));
    sink.finish();
    if (o.value("termination", "exited") != "exited")
      std::cerr << "sandgate: " << o.value("termination", "") << ": " << o.value("reason", "")
                << "\nsandgate: advice (" << o.value("retry", "") << "): " << o.value("advice", "")
                << "\n";
  }
  const Json& exit = o["exit"];
  if (exit.contains("code") && exit["code"].is_number_integer()) return exit["code"].get<int>();
  if (exit.contains("signal") && exit["signal"].is_number_integer())
    return 128 + exit["signal"].get<int>();
  return kExitError;
}

int run_exec(Globals& g, const ExecArgs& a) {
  if (!a.socket.empty()) return exec_client(a);
  if (a.provider.empty())
    return fail("exec needs --provider (or --socket to use a server's environment)");
  providers::ProviderOptions options = g.provider_options();
  options.allow_unsafe_host = a.allow_unsafe_host;
  auto provider = g.registry.create(a.provider, options);
  if (!provider.ok()) return fail(provider.error());

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
  auto* sub = app.add_subcommand(
      "exec",
      "Run one command in a fresh environment and exit with its status.\n"
      "  sandgate exec --provider namespaces -- sh -c 'id; ls /'\n"
      "  sandgate exec --provider namespaces --workspace ./repo --intent compile --json -- make "
      "-j2\n"
      "  sandgate exec --socket \"$SANDGATE_SOCKET\" --intent search -- grep -rn TODO .\n"
      "The command is a tool call: it runs in its own cgroup with the grant of its intent\n"
      "(declared with --intent, else inferred from the command), is watched and degraded\n"
      "gradually (throttle, freeze, cancel, kill), and ends with a structured outcome\n"
      "(--json: \"outcome\"; otherwise a line on stderr when it did not simply exit).\n"
      "The environment is destroyed afterwards: nothing it started or wrote survives, except\n"
      "what is deliberately exported (--export-branch, --export). The run contract:\n"
      "  in:   --workspace (a copy-on-write view of the recipe), --secret NAME=FILE\n"
      "  out:  --export-branch NAME (commits into the recipe's repository), --export DIR\n"
      "  sandgate exec --provider namespaces --workspace ./repo --export-branch agent/fix \\\n"
      "      --secret GH_TOKEN=./token -- sh -c 'make test && git commit -qam fix'");
  sub->add_option("--provider", a->provider,
                  "isolation provider (see `sandgate providers`); required unless --socket");
  sub->add_option("--image", a->image,
                  "podman: a local image for the root filesystem (checked with `podman image\n"
                  "exists`; no registry is contacted). Default: a root sandgate assembles from\n"
                  "the host's /usr, read-only, with a generated /etc");
  sub->add_option("--workspace", a->workspace,
                  "the recipe: a directory the run gets as its fresh workspace, copy-on-write\n"
                  "(the run's writes land in a layer of its own; this directory is never written)")
      ->check(CLI::ExistingDirectory);
  sub->add_option(
         "--recipe-mode", a->recipe_mode,
         "auto: a copy-on-write view where the host allows it, else a copy; overlay: a\n"
         "view or an error saying why not; copy: file by file (--json says which was used)")
      ->check(CLI::IsMember({"auto", "overlay", "copy"}))
      ->capture_default_str();
  sub->add_option(
      "--workspace-size", a->workspace_size,
      "SIZE (16MiB..16TiB, e.g. 2GiB): the workspace on a filesystem of its own, an ext4\n"
      "image of SIZE in the run directory on a loop device (namespaces only). The run's\n"
      "/proc/self/mountinfo then names no host path for it, and its writes stop at ENOSPC\n"
      "at SIZE instead of filling the host's disk. Costs a few ms per run (README)");
  sub->add_option(
      "--secret", a->secrets,
      "NAME=FILE: the run alone reads FILE's bytes at /run/secrets/NAME (memory only,\n"
      "mode 0400, gone when the run ends; $SANDGATE_SECRETS_DIR names the directory).\n"
      "sandgate reads FILE: the secret is never on a command line or in an environment\n"
      "(repeatable)");
  sub->add_option(
      "--export-branch", a->export_.branch,
      "NAME: when the command has run, bring the commit at the workspace's HEAD (and\n"
      "its history) into the --workspace repository as branch NAME. Only objects\n"
      "cross, fsck'ed; the workspace's git config and hooks are never used on the host.\n"
      "An existing branch is refused unless --export-force");
  sub->add_flag("--export-force", a->export_.force,
                "let --export-branch replace an existing branch");
  sub->add_option("--export", a->export_.directory,
                  "DIR (absent or empty): copy the final workspace there (links not followed,\n"
                  "FIFOs/sockets/devices left out). Everything not exported is destroyed");
  sub->add_option(
      "--env", a->env,
      "NAME passes the host's value, NAME=VALUE sets one; nothing else passes (repeatable)");
  sub->add_option("--ro-bind", a->ro_binds, "SRC[:DST] host path mounted read-only (repeatable)");
  add_base_path_option(sub, a->base_paths);
  sub->add_option("--timeout", a->timeout, "wall-clock limit for the run: 250ms, 30s, 5m");
  sub->add_flag("--json", a->json, "print the result as JSON instead of streaming output");
  sub->add_flag("--raw-output", a->raw_output,
                "copy the call's output to a terminal unchanged; by default a terminal gets its\n"
                "control sequences shown as text (\\x1b[2J), not obeyed: the sandbox's output\n"
                "must not retitle the window, clear the screen or write the clipboard (OSC 52)");
  sub->add_flag("--allow-unsafe-host", a->allow_unsafe_host,
                "permit the host_dir provider, which runs the command with no isolation");
  sub->add_option("--intent", a->intent,
                  "compile, test, install, search, edit, run, default (or any the policy defines)");
  sub->add_option("--policy", a->policy, "policy JSON file (default: the built-in policy)");
  sub->add_option("--tenant", a->tenant, "tenant the run belongs to (a policy tenant)")
      ->capture_default_str();
  add_net_options(sub, a->net);
  sub->add_flag("--trace", a->trace,
                "trace the call with eBPF and report what the kernel saw it do: every exec,\n"
                "connect/sendto (address, port, protocol, allowed/denied/failed) and open of a\n"
                "sensitive path (credentials, /proc/*/environ, runtime sockets); --json: in\n"
                "outcome.observed (execs, connects, sensitive_opens)");
  sub->add_flag("--no-controller", a->no_controller,
                "no per-call cgroup, grant or outcome: the provider alone");
  sub->add_option("--socket", a->socket,
                  "client mode: send the call to a `sandgate serve --socket` or `sandgate record`\n"
                  "server at PATH and print its output and outcome (--json: the outcome)");
  sub->add_option("--run", a->run,
                  "client mode: the server's environment to use (default $SANDGATE_RUN; none:\n"
                  "one is created with --provider for this call and destroyed after it)");
  sub->add_option("command", a->command, "the command and its arguments (after --)")->required();
  sub->callback([&g, a] { g.exit_code = run_exec(g, *a); });
}

}  // namespace sandgate::cli
