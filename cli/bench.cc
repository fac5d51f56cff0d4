// sandgate bench: the fixed benchmark set, measured in-process and written into the report
// model (job "bench", reports/bench_model.h), so that `sandgate gate` compares two commits'
// figures measured on the same machine. `make bench` (the Google Benchmark binaries) is the
// place for exploring a figure; this is the place for holding a commit to it.
//
// Every figure that has an honest baseline is paired: in each round the subject and its
// baseline are measured side by side (as qualify does), and the gate compares the ratios. The
// others are absolute and say so: they compare only between runs on one machine.
#include <fmt/format.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <optional>
#include <thread>

#include "bench/burst.h"
#include "bench/bwrap_baseline.h"
#include "cli/common.h"
#include "cli/measure.h"
#include "cli/qualify_trace.h"
#include "core/files.h"
#include "core/guards.h"
#include "core/host_features.h"
#include "core/stats.h"
#include "core/strings.h"
#include "core/table.h"
#include "core/units.h"
#include "probes/lab/lab.h"
#include "probes/suite.h"
#include "reports/writers.h"
#include "session/run_session.h"

namespace sandgate::cli {
namespace {

// The set, in the order it runs and prints.
constexpr const char* kRun = "run.namespaces_vs_bwrap";
constexpr const char* kCall = "call.controller_vs_exec";
constexpr const char* kBurst = "burst.reaction_p95";
constexpr const char* kMonitor = "monitor.cpu";
constexpr const char* kProbes = "probes.wall";
constexpr const char* kReplay = "replay.fidelity";
const std::vector<std::string> kFigures = {kRun, kCall, kBurst, kMonitor, kProbes, kReplay};

// The slow figures (seconds a sample) take at most this many rounds: 3 gives the median's
// widest interval [min, max] at 75% coverage (core/stats.h), which the gate reads as such.
constexpr int kSlowRounds = 3;
// monitor.cpu: idle calls watched at once, and the window each sample is taken over
// (controller_bench BM_MonitorCpu takes 20 calls over 10 s; 1 s windows keep bench short).
constexpr int kMonitorCalls = 20;
constexpr auto kMonitorWarmup = std::chrono::milliseconds(1500);
constexpr auto kMonitorWindow = std::chrono::seconds(1);
// probes.wall: one small boundary (the suite's native baseline is made once, not timed).
constexpr const char* kProbeBoundary = "creds";

struct BenchArgs {
  std::string out = "reports/bench";
  int rounds = 9;  // 9: the median's 95% interval is the 2nd to the 8th sample (core/stats.h)
  std::vector<std::string> only;
};

bool wanted(const BenchArgs& a, const std::string& name) {
  return a.only.empty() || std::find(a.only.begin(), a.only.end(), name) != a.only.end();
}

// One status line for the whole job (core/progress.h): updated in place on a terminal, a plain
// line per step in a log.
Progress& progress_line() {
  static Progress p;
  return p;
}
void progress(const std::string& step) { progress_line().status("bench: " + step); }

// A figure that could not be measured because of an error: recorded with the error (so the
// report says what happened) and counted, so that bench exits 2.
struct Failures {
  int count = 0;
  void fail(reports::BenchFigure& f, const Error& e) {
    f.samples.clear();
    f.baseline_samples.clear();
    f.skipped = "failed: " + e.message();
    ++count;
  }
};

reports::BenchFigure run_vs_bwrap(providers::Provider& ns, int rounds, Failures& failures) {
  reports::BenchFigure f{kRun,
                         "namespaces: create + exec(true) + destroy",
                         "ms",
                         {},
                         {},
                         "bwrap --unshare-all --die-with-parent --ro-bind /usr /usr ... "
                         "/bin/true (bench/bwrap_baseline.h)",
                         {}};
  auto bwrap = find_on_path(
      "bwrap", std::getenv("PATH") ? std::getenv("PATH") : "/usr/local/bin:/usr/bin:/bin");
  if (!bwrap) {
    f.skipped = "bwrap is not installed (ci/bootstrap installs bubblewrap): no baseline";
    return f;
  }
  std::vector<std::string> argv = bench::kBwrapBaselineArgv;
  argv[0] = *bwrap;
  for (int i = 0; i < rounds; ++i) {
    progress(fmt::format("{}: round {}/{}", kRun, i + 1, rounds));
    auto start = Clock::now();
    auto child = spawn(argv);
    auto status = child.ok() ? child->wait() : Result<ExitStatus>(std::move(child).error());
    if (!status.ok()) return failures.fail(f, status.error()), f;
    if (auto s = expect_true(*status, "bwrap /bin/true"); !s.ok())
      return failures.fail(f, s.error()), f;
    double base = ms_since(start);
    auto t = cycle(ns);
    if (!t.ok()) return failures.fail(f, t.error()), f;
    f.baseline_samples.push_back(base);
    f.samples.push_back(*t);
  }
  return f;
}

reports::BenchFigure controller_vs_exec(providers::Provider& ns, controller::Controller& c,
                                        int rounds, Failures& failures) {
  reports::BenchFigure f{kCall,
                         "a call of /bin/true through the controller (RunSession::call)",
                         "ms",
                         {},
                         {},
                         "the provider's own Environment::exec of /bin/true in the same live run, "
                         "alternating",
                         {}};
  progress(fmt::format("{}: {} alternating pairs", kCall, rounds));
  auto costs = call_costs(ns, c, rounds);
  if (!costs.ok()) return failures.fail(f, costs.error()), f;
  f.samples = costs->call_ms;
  f.baseline_samples = costs->exec_ms;
  return f;
}

// The burst: bench/burst.h (controller_bench BM_Reaction's, the same one).
using bench::kGrantMiB;
using bench::kStepIntervalMs;
using bench::kStepMiB;
using bench::kSteps;
using bench::kThrottleAt;
using bench::kTryInJail;
constexpr char kBurstIntent[] = "bench_burst";

// The time from the step that takes the burst past throttle_at to the ladder's first action,
// one burst a round, at the default sample interval. Both clocks are CLOCK_MONOTONIC (the jail
// makes no time namespace; steady_clock is CLOCK_MONOTONIC in libstdc++), as controller_bench
// measures it. Absolute: no honest baseline exists in the same round (the sample interval bounds
// it from below, but it is a setting, not a measurement; a 1 s sampler as controller_bench's
// baseline takes seconds a burst).
reports::BenchFigure burst_reaction(Globals& g, const providers::ProviderOptions& options,
                                    providers::Provider& ns, int rounds, Failures& failures) {
  controller::Policy policy = controller::default_policy();
  reports::BenchFigure f{
      kBurst,
      fmt::format("the controller's first ladder action after a burst ({} MiB every {} ms) "
                  "crosses {} x its {} MiB grant, each burst's reaction; the goal is on the "
                  "p95 (controller_bench)",
                  kStepMiB, kStepIntervalMs, kThrottleAt, kGrantMiB),
      "ms",
      {},
      {},
      fmt::format(
          "none: absolute, machine-dependent; the {} ms sample interval bounds it",
          std::chrono::duration_cast<std::chrono::milliseconds>(policy.ladder.sample_interval)
              .count()),
      {}};
  std::string try_binary = companion_binary("sandgate-try");
  if (try_binary.empty()) {
    f.skipped =
        "sandgate-try is not installed beside sandgate (a build with the tests puts it there; "
        "without them `make bench` measures it: controller_bench)";
    return f;
  }
  bench::add_burst_intent(policy, kBurstIntent);
  controller::ControllerOptions copts;
  copts.paths = options.paths;
  copts.root = g.cgroup_root_name();
  copts.policy = policy;
  auto c = controller::Controller::create(std::move(copts));
  if (!c.ok()) return failures.fail(f, c.error()), f;
  providers::EnvSpec spec;
  spec.readonly_mounts.push_back({try_binary, kTryInJail});
  auto run = session::RunSession::open(**c, ns, spec);
  if (!run.ok()) return failures.fail(f, run.error()), f;
  const long threshold_mib = bench::burst_threshold_mib();
  const long interval_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(policy.ladder.sample_interval).count();
  std::optional<Error> error;
  for (int i = 0; i < rounds && !error; ++i) {
    progress(fmt::format("{}: burst {}/{}", kBurst, i + 1, rounds));
    session::CallRequest request;
    // A burst starts at a phase of the sampler that varies round by round (a call's start is
    // not in step with it), and holds its memory long enough for the sampler to see it.
    long phase = (i * 7) % std::max(interval_ms, 1L);
    request.argv = {kTryInJail,
                    "ramp",
                    std::to_string(kStepMiB),
                    std::to_string(kStepIntervalMs),
                    std::to_string(kSteps),
                    std::to_string(interval_ms + 250),
                    std::to_string(phase)};
    request.intent = kBurstIntent;
    Clock::time_point start{};
    request.on_started = [&](const controller::CallScope& scope, pid_t) { start = scope.start(); };
    auto called = (*run)->call(request);
    if (!called.ok()) {
      error = std::move(called).error();
      break;
    }
    const controller::CallOutcome& o = *called;
    if (o.termination != controller::Termination::kExited || o.exec.status.shell_code() != 0) {
      error = logic_error(kBurst, "the burst ended as " + to_string(o.termination) + " (" +
                                      o.exec.status.describe() + "): " + o.reason);
      break;
    }
    auto steps = bench::parse_ramp(o.exec.stdout_data);
    auto crossing = std::find_if(steps.begin(), steps.end(), [&](const bench::RampStep& s) {
      return s.total_mib >= threshold_mib;
    });
    if (crossing == steps.end()) {
      error = logic_error(kBurst, fmt::format("the burst never reached {} MiB", threshold_mib));
      break;
    }
    if (o.observed.actions.empty() || o.observed.actions.front().action != "throttle") {
      error = logic_error(kBurst, o.observed.actions.empty()
                                      ? "no ladder action for the burst"
                                      : "the first ladder action was " +
                                            o.observed.actions.front().action + ", not throttle");
      break;
    }
    const int64_t action_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  (start + o.observed.actions.front().at).time_since_epoch())
                                  .count();
    f.samples.push_back(static_cast<double>(action_ns - crossing->end_ns) / 1e6);
  }
  if (auto s = (*run)->close(); !s.ok() && !error) error = std::move(s).error();
  if (error) failures.fail(f, *error);
  return f;
}

// The monitor thread's CPU share of one core over kMonitorWindow windows, kMonitorCalls idle
// calls (sleep) watched, each in its own run. Absolute: an idle monitor's share is near zero,
// and a ratio to near zero is noise, not a baseline.
reports::BenchFigure monitor_cpu(providers::Provider& ns, controller::Controller& c, int rounds,
                                 Failures& failures) {
  reports::BenchFigure f{kMonitor,
                         fmt::format("the monitor thread's CPU, % of one core, {} idle calls "
                                     "watched at the default interval",
                                     kMonitorCalls),
                         "%",
                         {},
                         {},
                         "none: absolute, machine-dependent (an idle monitor's share is near 0, "
                         "a ratio to it would be noise)",
                         {}};
  progress(fmt::format("{}: {} idle calls, {} windows of {} s", kMonitor, kMonitorCalls, rounds,
                       kMonitorWindow.count()));
  struct Running {
    std::unique_ptr<session::RunSession> run;
    UniqueFd cancel;
    std::thread thread;
    std::optional<Result<controller::CallOutcome>> outcome;
    std::atomic<bool> returned{false};
  };
  std::vector<std::unique_ptr<Running>> calls;
  std::optional<Error> error;
  for (int i = 0; i < kMonitorCalls && !error; ++i) {
    auto r = std::make_unique<Running>();
    auto run = session::RunSession::open(c, ns, {});
    if (!run.ok()) {
      error = std::move(run).error();
      break;
    }
    r->run = std::move(run).value();
    r->cancel = UniqueFd(::eventfd(0, EFD_CLOEXEC));
    if (!r->cancel.valid()) {
      error = sys_error("eventfd for a call's cancel");
      calls.push_back(std::move(r));
      break;
    }
    Running* raw = r.get();
    r->thread = std::thread([raw] {
      session::CallRequest request;
      request.argv = {"sleep", "600"};
      request.intent = "default";
      request.cancel_fd = raw->cancel.get();
      raw->outcome = raw->run->call(request);
      raw->returned = true;
    });
    calls.push_back(std::move(r));
  }
  const controller::Monitor& monitor = c.monitor();
  if (!error) {
    std::this_thread::sleep_for(kMonitorWarmup);  // every call has its cgroup and is watched
    for (int i = 0; i < rounds && !error; ++i) {
      auto cpu0 = monitor.cpu_time();
      auto t0 = Clock::now();
      std::this_thread::sleep_for(kMonitorWindow);
      auto cpu1 = monitor.cpu_time();
      double wall_ms = ms_since(t0);
      if (!cpu0 || !cpu1) {
        error = logic_error("monitor.cpu", "the monitor thread's CPU clock could not be read");
        break;
      }
      double cpu_ms = std::chrono::duration<double, std::milli>(*cpu1 - *cpu0).count();
      f.samples.push_back(100.0 * cpu_ms / wall_ms);
    }
  }
  // A call that ended by itself was not idle load for the whole window.
  for (auto& r : calls)
    if (r->returned && !error)
      error = logic_error("monitor.cpu", "an idle sleep call ended during the windows");
  for (auto& r : calls) {
    uint64_t one = 1;
    if (r->cancel.valid()) (void)!::write(r->cancel.get(), &one, sizeof one);
  }
  for (auto& r : calls) {
    if (r->thread.joinable()) r->thread.join();
    if (r->run)
      if (auto s = r->run->close(); !s.ok() && !error) error = std::move(s).error();
  }
  if (error) failures.fail(f, *error);
  return f;
}

reports::BenchFigure probes_wall(probes::Suite& suite, providers::Provider& ns, int rounds,
                                 Failures& failures) {
  reports::BenchFigure f{
      kProbes,
      fmt::format("the escape probes of one boundary ({}) against namespaces, wall time",
                  kProbeBoundary),
      "ms",
      {},
      {},
      fmt::format("none: absolute, machine-dependent; {} rounds of one small boundary (the "
                  "whole suite a round would take minutes)",
                  rounds),
      {}};
  for (int i = 0; i < rounds; ++i) {
    progress(fmt::format("{}: round {}/{}", kProbes, i + 1, rounds));
    auto run = suite.run(ns);
    if (!run.ok()) return failures.fail(f, run.error()), f;
    f.samples.push_back(std::chrono::duration<double, std::milli>(run->wall).count());
  }
  return f;
}

reports::BenchFigure replay_fidelity(Globals& g, const providers::ProviderOptions& options,
                                     int rounds, Failures& failures) {
  reports::BenchFigure f{kReplay,
                         "the short replay (qualify's built-in burst, namespaces, the built-in "
                         "policy): p95 of |replayed call end - recorded end|",
                         "ms",
                         {},
                         {},
                         "none: absolute, machine-dependent; one replay a round",
                         {}};
  auto trace = replay::parse_trace(qualify_trace_text(), "built-in burst");
  if (!trace.ok()) return failures.fail(f, trace.error()), f;
  replay::ReplayTiming timing;
  timing.compress_silence = true;
  auto plan = replay::plan_replay(*trace, "burst", timing);
  if (!plan.ok()) return failures.fail(f, plan.error()), f;
  auto policy = replay::resolve_policy("default", 0, 0);
  if (!policy.ok()) return failures.fail(f, policy.error()), f;
  for (int i = 0; i < rounds; ++i) {
    progress(fmt::format("{}: replay {}/{}", kReplay, i + 1, rounds));
    auto scores = short_replay(g, "namespaces", options, *plan, *policy, progress_line(), "bench");
    if (!scores.ok()) return failures.fail(f, scores.error()), f;
    f.samples.push_back(replay_summary(*scores).end_error_p95_ms);
  }
  return f;
}

// One row a figure: its median, the spread of what the median came from, and its baseline.
std::string render_table(const std::vector<reports::BenchFigure>& figures) {
  constexpr auto kRight = TextTable::Align::kRight;
  TextTable t({{"figure"},
               {"median", kRight},
               {"min-max", kRight},
               {"n", kRight},
               {"raw: subject / baseline (medians)"},
               {"against", TextTable::Align::kLeft, 60}});
  for (const auto& f : figures) {
    if (f.skipped) {
      t.row({f.name, "-", "-", "0", "not measured", *f.skipped});
      continue;
    }
    std::vector<double> values =
        f.paired() ? reports::paired_ratios(f.samples, f.baseline_samples) : f.samples;
    stats::Distribution<double> d(values);
    std::string suffix = f.paired() ? "x" : " " + f.unit;
    std::string raw =
        f.paired() ? fmt::format("{:.2f} / {:.2f} {}", stats::median(f.samples),
                                 stats::median(f.baseline_samples), f.unit)
                   : fmt::format("{:.2f} {} (p95 {:.2f})", d.median(), f.unit, d.percentile(95));
    t.row({f.name, fmt::format("{:.2f}{}", d.median(), suffix),
           fmt::format("{:.2f}-{:.2f}", d.min(), d.max()), std::to_string(d.size()), raw,
           f.paired() ? f.baseline_what : "absolute"});
  }
  return t.render();
}

int run_bench(Globals& g, const BenchArgs& a) {
  for (const auto& name : a.only)
    if (std::find(kFigures.begin(), kFigures.end(), name) == kFigures.end())
      return fail("--only " + name + ": no such figure; the set: " + join(kFigures, ", "));
  if (::geteuid() != 0)
    return fail("sandgate bench runs as root (the namespaces provider, the controller's cgroups)");
  if (auto s = make_dirs(a.out, 0755); !s.ok()) return fail(s.error());
  providers::ProviderOptions options = g.provider_options();
  auto ns = g.registry.create("namespaces", options);
  if (!ns.ok()) return fail(std::move(ns).error().context_add("the namespaces provider"));
  if (auto s = (*ns)->available(); !s.ok())
    return fail(std::move(s).error().context_add("the namespaces provider"));
  controller::ControllerOptions copts;
  copts.paths = options.paths;
  copts.root = g.cgroup_root_name();
  copts.policy = controller::default_policy();
  auto controller = controller::Controller::create(std::move(copts));
  if (!controller.ok()) return fail(std::move(controller).error().context_add("the controller"));

  // docs/DESIGN.md, safety rules: the lab is made and entered before any run starts (the
  // suite does it; without the probes, the replay's own lab), so nothing leaves the machine.
  std::unique_ptr<probes::Suite> suite;
  std::unique_ptr<probes::lab::Lab> lab;
  std::optional<NetnsGuard> in_lab;
  if (wanted(a, kProbes)) {
    probes::SuiteOptions so;
    so.paths = g.paths();
    so.cgroup_root = g.cgroup_root_name();
    so.probe_binary = companion_binary("sandgate-probe");
    if (so.probe_binary.empty()) return fail("sandgate-probe is not installed beside sandgate");
    so.only = {kProbeBoundary};
    so.progress = [](const std::string& line) { progress("probes: " + line); };
    auto made = probes::Suite::create(so);
    if (!made.ok())
      return fail(std::move(made).error().context_add("setting up the escape probes"));
    suite = std::move(made).value();
  } else {
    auto made = probes::lab::Lab::create(g.paths());
    if (!made.ok()) return fail(std::move(made).error().context_add("the network lab"));
    lab = std::move(made).value();
    auto entered = lab->enter();
    if (!entered.ok()) return fail(std::move(entered).error().context_add("entering the lab"));
    in_lab.emplace(std::move(entered).value());
  }

  reports::Report report = reports::bench_report_skeleton();
  report.created = utc_now();
  progress("checking the host (doctor)...");
  report.host = doctor_report(g);
  Failures failures;
  const int slow = std::min(a.rounds, kSlowRounds);
  auto& figures = *report.bench;
  if (wanted(a, kRun)) figures.push_back(run_vs_bwrap(**ns, a.rounds, failures));
  if (wanted(a, kCall))
    figures.push_back(controller_vs_exec(**ns, **controller, a.rounds, failures));
  if (wanted(a, kBurst)) figures.push_back(burst_reaction(g, options, **ns, a.rounds, failures));
  if (wanted(a, kMonitor)) figures.push_back(monitor_cpu(**ns, **controller, a.rounds, failures));
  if (wanted(a, kProbes)) figures.push_back(probes_wall(*suite, **ns, slow, failures));
  if (wanted(a, kReplay)) figures.push_back(replay_fidelity(g, options, slow, failures));

  in_lab.reset();
  if (lab)
    if (auto s = lab->destroy(); !s.ok())
      return fail(std::move(s).error().context_add("removing the lab"));
  if (suite)
    if (auto s = suite->close(); !s.ok())
      return fail(std::move(s).error().context_add("cleaning up the probes"));
  if (auto s = reports::write_all_formats(report, a.out); !s.ok())
    return fail(std::move(s).error().context_add("writing the report"));

  progress_line().clear();
  std::cout << render_table(figures);
  std::cout << "\npaired: median of subject[i] / baseline[i], measured side by side in round i; "
               "absolute: compares only on this machine\n";
  std::cout << "report: " << a.out
            << "/report.json (and report.html, junit.xml, report.sarif, summary.md)\n";
  if (failures.count > 0) {
    std::cerr << "sandgate: error: " << failures.count << " figure"
              << (failures.count == 1 ? "" : "s") << " failed (in the report as skipped)\n";
    return kExitError;
  }
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, Globals& g) {
  auto a = std::make_shared<BenchArgs>();
  auto* sub = app.add_subcommand(
      "bench",
      "Regression benchmarking: the fixed benchmark set, measured in this process, written as\n"
      "the report model (job \"bench\") in every format. Each figure with an honest baseline is\n"
      "paired: subject and baseline measured side by side in each round, compared as ratios:\n"
      "  run.namespaces_vs_bwrap   namespaces create+exec(true)+destroy / the same in bwrap\n"
      "  call.controller_vs_exec   a call through the controller / the provider's own exec\n"
      "  burst.reaction_p95        a memory burst to the first ladder action, each burst\n"
      "                            (absolute; needs sandgate-try beside sandgate)\n"
      "  monitor.cpu               the monitor's CPU share with 20 idle calls (absolute)\n"
      "  probes.wall               the creds probes' wall time, 3 rounds (absolute)\n"
      "  replay.fidelity           the short replay's call end error p95, 3 rounds (absolute)\n"
      "Absolute figures compare only between runs on the same machine. Needs root.\n"
      "To hold a commit to its parent, on one machine:\n"
      "  git checkout A && make release && sudo build/release/cli/sandgate bench --out /tmp/A\n"
      "  git checkout B && make release && sudo build/release/cli/sandgate bench --out /tmp/B\n"
      "  sandgate gate --baseline /tmp/A/report.json /tmp/B/report.json\n"
      "Exit status 0 when measured (a figure skipped for a missing tool says why in the\n"
      "report), 2 on errors.");
  sub->add_option("--out", a->out, "report directory")->capture_default_str();
  sub->add_option("--rounds", a->rounds,
                  "rounds of each figure (the slow ones take at most 3); 9 gives a 95% interval")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  sub->add_option("--only", a->only, "measure only this figure (repeatable)");
  sub->callback([&g, a] { g.exit_code = run_bench(g, *a); });
}

}  // namespace sandgate::cli
