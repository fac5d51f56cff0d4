// sandgate record: one run, recorded as a `sandgate trace v1` while a command on the host
// drives its calls.
//
// The run (provider + controller, as `exec` and `serve` make it) is served on a unix socket
// with the orchestrator protocol of `sandgate serve`; CMD runs on the host with
// SANDGATE_SOCKET, SANDGATE_RUN and SANDGATE_BIN set and makes its calls through it, typically
// with `"$SANDGATE_BIN" exec --socket "$SANDGATE_SOCKET" [--intent X] -- CMD...` (or
// examples/orchestrator.py speaking the protocol itself). Every exec is a call event with its
// intent and what the kernel saw it do (the eBPF activity tracer: execs, connects, sensitive
// opens, run-queue delay; the egress guard's decisions with --net allowlist); the run's cgroup
// is sampled at --interval meanwhile. The trace is written atomically when CMD exits.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <iostream>
#include <thread>

#include "cli/common.h"
#include "cli/network.h"
#include "cli/signals.h"
#include "core/defer.h"
#include "core/fd.h"
#include "core/files.h"
#include "core/log.h"
#include "core/meminfo.h"
#include "core/process.h"
#include "core/state.h"
#include "core/units.h"
#include "ebpf/activity_tracer.h"
#include "replay/recorder.h"
#include "session/server.h"

extern char** environ;

namespace sandgate::cli {
namespace {

struct RecordArgs {
  std::string out;
  std::string interval = "50ms";
  std::string provider = "namespaces";
  std::string policy;
  std::vector<std::string> base_paths;  // --base-path
  std::string workspace;
  std::vector<std::string> env;
  std::vector<std::string> ro_binds;
  std::string socket;
  std::string notes;
  std::string tenant = "default";
  bool allow_unsafe_host = false;
  bool no_trace = false;  // --no-trace: do not load the activity tracer
  NetArgs net;            // --net, --allow, --net-upstream
  std::vector<std::string> command;
};

// The sandgate the agent's calls run: the front beside this binary (cli/front_main.cc), which
// answers `exec --socket` without loading the full sandgate; this binary where there is none.
std::string calls_binary() {
  if (std::string front = companion_binary("sandgate"); !front.empty()) return front;
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "sandgate";
}

void print_progress(const replay::RecorderProgress& p, bool tty, bool final_line) {
  std::string line = "record: " + std::to_string(static_cast<int>(to_seconds(p.elapsed))) + "s  calls " +
                     std::to_string(p.calls) + "  samples " + std::to_string(p.samples) + "  memory " +
                     human_bytes(Bytes{p.mem_bytes}) + (p.open_call ? "  (in " + *p.open_call + ")" : "");
  if (tty) std::cerr << "\r" << line << "\033[K" << (final_line ? "\n" : "") << std::flush;
  else std::cerr << line << "\n";
}

Json host_description(const std::string& provider, controller::Controller& ctl,
                      const HostPaths& paths) {
  Json host = {{"cpus", std::thread::hardware_concurrency()}, {"provider", provider}};
  if (auto mem = read_meminfo(paths); mem.ok()) host["memory_bytes"] = mem->total_bytes;
  if (auto k = read_file("/proc/sys/kernel/osrelease", 256); k.ok()) {
    std::string v = *k;
    while (!v.empty() && v.back() == '\n') v.pop_back();
    host["kernel"] = v;
  }
  host["cgroup_layout"] = controller::to_string(ctl.backend().kind());
  return host;
}

int run_record(Globals& g, const RecordArgs& a) {
  auto interval = parse_duration(a.interval);
  if (!interval.ok()) return fail(std::move(interval).error().context_add("--interval"));
  if (*interval < std::chrono::milliseconds(5))
    return fail("--interval " + a.interval + ": at least 5ms (each sample reads several cgroup files)");

  providers::ProviderOptions options = g.provider_options();
  options.allow_unsafe_host = a.allow_unsafe_host;
  auto loaded = load_policy_arg(a.policy);
  if (!loaded.ok()) return fail(loaded.error());
  const controller::Policy policy = std::move(loaded).value();
  auto base = base_paths_arg(policy.base_allow, a.base_paths);
  if (!base.ok()) return fail(base.error());
  auto provider = g.registry.create(a.provider, options);
  if (!provider.ok()) return fail(provider.error());
  controller::ControllerOptions copts;
  copts.paths = options.paths;
  copts.root = g.cgroup_root_name();
  copts.policy = policy;
  auto ctl = controller::Controller::create(std::move(copts));
  if (!ctl.ok()) return fail(std::move(ctl).error().context_add("recording needs root and cgroups"));

  providers::EnvSpec spec;
  spec.workspace_recipe = a.workspace;
  spec.env = a.env;
  spec.tenant = a.tenant;
  for (const auto& b : a.ro_binds) spec.readonly_mounts.push_back(providers::parse_bind_mount(b));
  spec.base_paths = std::move(base).value();
  if (auto s = apply_net_args(a.net, (*ctl)->policy().egress, spec); !s.ok())
    return fail(s.error());
  auto guard = open_guard_for(spec);
  if (!guard.ok()) return fail(guard.error());
  session::RunOptions run_options;
  run_options.egress = guard->get();
  // The kernel's account of each call, when the tracer loads; a trace without it says why in
  // its header (never silently absent).
  std::unique_ptr<ebpf::ActivityTracer> tracer;
  replay::TraceHeader::Activity activity{false, "not traced: record --no-trace"};
  if (!a.no_trace) {
    auto t = ebpf::ActivityTracer::open();
    if (t.ok()) {
      tracer = std::move(t).value();
      run_options.tracer = tracer.get();
      activity = {true, ""};
    } else {
      activity.why = "the eBPF activity tracer could not be loaded: " + t.error().message();
      std::cerr << "sandgate: warning: recording without the kernel's account of each call: "
                << activity.why << "\n";
    }
  }
  auto opened = session::RunSession::open(**ctl, **provider, spec, run_options);
  if (!opened.ok()) return fail(opened.error());
  const std::string run_id = (*opened)->run_id();

  std::string socket_path = a.socket;
  if (socket_path.empty()) {
    if (auto s = make_dirs(options.paths.state_dir, 0700); !s.ok()) return fail(s.error());
    socket_path = options.paths.state_dir + "/record-" + run_id + ".sock";
  }
  // The socket and the driver are this command's own, beside the run's resources: recorded
  // before they exist, like those, so that `sandgate gc` removes them after a kill -9 (the
  // chaos test found the socket left in the state directory, and the driver running on).
  auto own = RunState::create(options.paths, run_id + "-record", "record",
                              {{Resource::Kind::kDirectory, socket_path}});
  if (!own.ok()) return fail(own.error());
  Defer finish_own([&] { (void)own->finish(); });
  auto listener = listen_unix(socket_path);
  if (!listener.ok()) return fail(listener.error());
  Defer unlink_socket([&] { ::unlink(socket_path.c_str()); });

  replay::RecorderOptions ropts;
  ropts.interval = *interval;
  ropts.header.source = "sandgate record";
  ropts.header.host = host_description(a.provider, **ctl, options.paths);
  ropts.header.notes = a.notes.empty() ? "command: " + replay::join_command(a.command) : a.notes;
  ropts.header.activity = activity;
  replay::Recorder recorder((*ctl)->backend(), (*opened)->run().cgroup(), ropts);

  InterruptFd interrupt;
  auto stop = make_pipe(O_CLOEXEC);
  if (!stop.ok()) return fail(stop.error());
  // The orchestrator protocol's one server, serving this run: each exec is a call event with
  // the intent the controller grants it (declared, or inferred by the very rules begin_call
  // applies), from the request to the outcome.
  session::ServerOptions sopts;
  sopts.recorded_run = opened->get();
  sopts.cancel_fd = interrupt.fd();
  sopts.before_call = [&](const session::ExecRequest& r) {
    auto choice = controller::choose_intent(policy, r.intent, r.argv);
    // An intent the policy does not know: the call fails without running, and is no event.
    if (!choice.ok()) return std::string();
    return recorder.begin_call(choice->intent, "exec", replay::join_command(r.argv));
  };
  sopts.after_call = [&](const std::string& id, const controller::CallOutcome* outcome) {
    if (!id.empty())
      recorder.end_call(id, outcome ? replay::observed_of(outcome->observed) : std::nullopt);
  };
  session::Server server(**ctl, std::move(sopts));
  std::thread server_thread([&] { session::serve_listener(server, listener->get(), stop->read.get()); });
  auto stop_server = [&] {
    if (!server_thread.joinable()) return;
    (void)write_all(stop->write.get(), "x");
    server_thread.join();
    server.close_all();
  };

  // CMD on the host, in a process group of its own (so an interrupt can end all of it), with
  // the socket named in its environment.
  auto driver =
      spawn(a.command, {.env_set = {"SANDGATE_SOCKET=" + socket_path, "SANDGATE_RUN=" + run_id,
                                    "SANDGATE_BIN=" + calls_binary()},
                        .new_process_group = true});
  if (!driver.ok()) {
    stop_server();
    (void)recorder.finish();
    (void)(*opened)->close();
    return fail(driver.error());
  }
  // Its own process group, killed at the end; by pid (and start time) after a crash.
  if (auto st = own->record({Resource::Kind::kProcess, "", driver->pid(),
                             process_start_time(options.paths.proc, driver->pid()).value_or(0)});
      !st.ok()) {
    ::kill(-driver->pid(), SIGKILL);
    stop_server();
    (void)recorder.finish();
    (void)(*opened)->close();
    return fail(st.error());
  }
  std::cerr << "sandgate: recording run " << run_id << " on " << socket_path << "\n";

  bool tty = ::isatty(2);
  auto last_print = std::chrono::steady_clock::now();
  ExitStatus status;
  int interrupted = 0;
  for (;;) {
    struct pollfd fds[2] = {{driver->pidfd(), POLLIN, 0}, {interrupt.fd(), POLLIN, 0}};
    int r = ::poll(fds, 2, 1000);
    if (r < 0 && errno != EINTR) break;
    if (fds[1].revents && !interrupted) {
      // The call in progress is cancelled through the same fd; end the driver too.
      interrupted = interrupt.pending() ? interrupt.pending() : SIGINT;
      ::kill(-driver->pid(), SIGTERM);
      auto st = driver->wait_for(std::chrono::seconds(3));
      if (!st.ok() || !st->has_value()) ::kill(-driver->pid(), SIGKILL);
    }
    if (fds[0].revents || interrupted) {
      auto st = driver->wait();
      if (st.ok()) status = *st;
      break;
    }
    auto now = std::chrono::steady_clock::now();
    if (now - last_print >= std::chrono::seconds(tty ? 1 : 5)) {
      print_progress(recorder.progress(), tty, false);
      last_print = now;
    }
  }
  // Whatever CMD left in its process group (a background job) ends with it.
  ::kill(-driver->pid(), SIGKILL);
  stop_server();
  replay::Trace trace = recorder.finish();
  print_progress(recorder.progress(), tty, true);
  auto closed = (*opened)->close();

  std::string tmp = a.out + ".tmp-" + std::to_string(::getpid());
  Status written = replay::write_trace(tmp, trace);
  if (written.ok() && ::rename(tmp.c_str(), a.out.c_str()) != 0) written = sys_error("rename", a.out);
  if (!written.ok()) {
    ::unlink(tmp.c_str());
    return fail(std::move(written).error().context_add("writing the trace"));
  }
  std::cerr << "sandgate: wrote " << a.out << ": " << trace.calls.size() << " calls, "
            << trace.samples.size() << " samples, " << format_duration(std::chrono::milliseconds(trace.duration_ms()))
            << "\n";
  if (!closed.ok()) return fail(std::move(closed).error().context_add("tearing down the run"));
  if (interrupted) {
    std::cerr << "sandgate: interrupted; run " << run_id << " torn down, trace kept\n";
    return 128 + interrupted;
  }
  if (status.shell_code() != 0)
    std::cerr << "sandgate: warning: the recorded command ended with " << status.describe()
              << " (trace written anyway)\n";
  return status.shell_code();
}

}  // namespace

void add_record_command(CLI::App& app, Globals& g) {
  auto a = std::make_shared<RecordArgs>();
  auto* sub = app.add_subcommand(
      "record",
      "Record a run as a `sandgate trace v1` (JSON lines: calls and resource samples).\n"
      "One environment is made (provider + per-call controller) and served on a unix socket;\n"
      "CMD runs on the host with SANDGATE_SOCKET, SANDGATE_RUN and SANDGATE_BIN set and makes\n"
      "its tool calls through it, for example a script of\n"
      "  \"$SANDGATE_BIN\" exec --socket \"$SANDGATE_SOCKET\" --intent compile -- make -j2\n"
      "(or anything speaking the `sandgate serve` protocol: `create` answers with the recorded\n"
      "run). Each call is a call event with its intent and what the kernel saw it do (its\n"
      "\"observed\": execs, connects with verdicts, sensitive opens, run-queue delay, from the\n"
      "eBPF activity tracer; with --net allowlist the egress guard's decisions and bytes). When\n"
      "the tracer cannot load, the trace's header says why (\"activity\"). The run's cgroup\n"
      "(memory, CPU, pids, io) is sampled every --interval, and samples taken during a call\n"
      "carry its id. The trace is written atomically when CMD exits; sandgate exits with\n"
      "CMD's status. --no-trace records without the tracer (the header says so).\n"
      "  sandgate record --out build.trace --interval 100ms --workspace ./src -- ./drive.sh");
  sub->add_option("--out", a->out, "trace file to write")->required();
  sub->add_option("--interval", a->interval, "sample interval (at least 5ms)")->capture_default_str();
  sub->add_option("--provider", a->provider, "isolation provider")->capture_default_str();
  sub->add_option("--policy", a->policy, "policy JSON file (default: the built-in policy)");
  sub->add_option("--workspace", a->workspace, "directory copied into the fresh workspace")
      ->check(CLI::ExistingDirectory);
  sub->add_option("--env", a->env, "NAME or NAME=VALUE passed into the environment (repeatable)");
  sub->add_option("--ro-bind", a->ro_binds, "SRC[:DST] host path mounted read-only (repeatable)");
  add_base_path_option(sub, a->base_paths);
  sub->add_option("--socket", a->socket, "socket path (default: <state-dir>/record-<run>.sock)");
  sub->add_option("--notes", a->notes, "free text for the trace header (default: the command)");
  sub->add_option("--tenant", a->tenant, "tenant the run belongs to")->capture_default_str();
  sub->add_flag("--allow-unsafe-host", a->allow_unsafe_host, "permit the host_dir provider");
  sub->add_flag("--no-trace", a->no_trace,
                "do not load the eBPF activity tracer (calls carry no \"observed\"; the header "
                "says so)");
  add_net_options(sub, a->net);
  sub->add_option("command", a->command, "the driving command on the host (after --)")->required();
  sub->callback([&g, a] { g.exit_code = run_record(g, *a); });
}

}  // namespace sandgate::cli
