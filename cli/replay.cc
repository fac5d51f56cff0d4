// sandgate replay: recorded traces replayed as real resource effects through a provider and
// the controller, once per policy, scored side by side (replay/experiment.h).
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <iostream>
#include <thread>

#include "cli/common.h"
#include "cli/signals.h"
#include "core/progress.h"
#include "core/units.h"
#include "ebpf/activity_tracer.h"
#include "probes/lab/lab.h"
#include "replay/experiment.h"
#include "replay/trace_stats.h"
#include "reports/job_report.h"
#include "reports/writers.h"

namespace sandgate::cli {
namespace {

struct ReplayArgs {
  std::string provider = "namespaces";
  std::vector<std::string> policies;
  size_t concurrency = 0;
  double time_scale = 1.0;
  bool compress_silence = false;
  std::string max_silence = "1s";
  bool victim = false;
  size_t trials = 0;  // 0: 5 with --victim, else 1
  bool enforce_budget = false;
  bool no_runq = false;
  std::string host_budget;
  std::string json;
  std::string report;
  std::string load;
  bool allow_unsafe_host = false;
  std::string split = "all";
  std::vector<std::string> traces;
};

std::string seconds(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fs", ms / 1000.0);
  return buf;
}

reports::LatencySummary latency(const replay::VictimLatency& v) {
  return {v.count, v.p50_us, v.p90_us, v.p99_us, v.max_us, v.missed_deadlines};
}

// One replayed run as the report's burst timeline: its sampled usage, its calls (host side,
// on the run's replay clock), the ladder's actions moved onto that clock.
reports::TraceTimeline timeline_of(const replay::ReplayedRun& run,
                                   const std::vector<replay::RunUsage>& usage) {
  reports::TraceTimeline t;
  t.trace = run.name;
  t.error = run.error;
  for (const auto& u : usage)
    if (u.run == run.name)
      for (const auto& p : u.series) t.samples.push_back({p.t_ms, p.memory_bytes, p.cpu_cores});
  for (const auto& c : run.calls) {
    std::string ended = c.error.empty() ? controller::to_string(c.outcome.termination) : "not run";
    t.calls.push_back(
        {c.id, c.intent, c.actual_start_ms, std::max(c.actual_start_ms, c.actual_end_ms), ended});
    for (const auto& a : c.outcome.observed.actions)
      t.actions.push_back(
          {c.id, a.action, c.actual_start_ms + static_cast<double>(to_millis(a.at)), a.reason});
  }
  return t;
}

int run_replay(Globals& g, const ReplayArgs& a) {
  // stderr: a status line on a terminal, plain lines in a CI log (core/progress.h); the
  // watcher thread and the replay's workers report through it too.
  Progress progress;
  // An error goes on a line of its own, not onto the end of the status line.
  auto fail = [&progress](const auto& error) {
    progress.clear();
    return cli::fail(error);
  };
  if (a.policies.empty())
    return fail(
        "replay needs at least one --policy (none, static, static-peak, default or a file)");
  if (!(a.time_scale > 0)) return fail("--time-scale must be positive");
  replay::ReplayTiming timing;
  timing.time_scale = a.time_scale;
  timing.compress_silence = a.compress_silence;
  auto ms = parse_duration(a.max_silence);
  if (!ms.ok()) return fail(std::move(ms).error().context_add("--max-silence"));
  timing.max_silence = *ms;

  replay::ExperimentOptions o;
  o.provider = a.provider;
  o.provider_options = g.provider_options();
  o.provider_options.allow_unsafe_host = a.allow_unsafe_host;
  o.cgroup_root = g.cgroup_root_name();
  o.concurrency = a.concurrency;
  o.victim = a.victim;
  o.load_binary = a.load.empty() ? companion_binary("sandgate-load") : a.load;
  if (o.load_binary.empty())
    return fail(
        "sandgate-load not found beside sandgate (build the sandgate-load target, or give --load "
        "PATH)");
  if (!a.host_budget.empty()) {
    auto b = parse_bytes(a.host_budget);
    if (!b.ok()) return fail(std::move(b).error().context_add("--host-budget"));
    o.host_budget_bytes = b->value;
  }
  if (a.enforce_budget && a.host_budget.empty())
    return fail("--enforce-budget needs --host-budget SIZE (the budget cgroup's memory limit)");
  o.enforce_budget = a.enforce_budget;
  const size_t trials = a.trials ? a.trials : (a.victim ? 5 : 1);

  // The traces: directories stand for their trace files; --split takes a deterministic half
  // (the other half of what `policy suggest --split` sized on).
  auto split = replay::parse_trace_split(a.split);
  if (!split.ok()) return fail(split.error());
  auto files = replay::trace_files(a.traces);
  if (!files.ok()) return fail(files.error());
  std::vector<std::string> paths =
      *split == replay::TraceSplit::kAll ? *files : replay::select_split(*files, *split);
  if (paths.empty())
    return fail(fmt::format("--split {}: no traces in that part of {} file(s)",
                            replay::to_string(*split), files->size()));

  // Plans first: every trace is read and checked before anything runs.
  std::vector<replay::ReplayPlan> plans;
  uint64_t avg = 0, peak = 0;
  Json traces_json = Json::array();
  for (const auto& path : paths) {
    auto t = replay::read_trace(path);
    if (!t.ok()) return fail(t.error());
    auto stats = replay::compute_stats(*t, path);
    avg = std::max(avg, static_cast<uint64_t>(stats.avg_mem_bytes));
    peak = std::max(peak, stats.peak_mem_bytes);
    std::string name = path.substr(path.rfind('/') + 1);
    auto plan = replay::plan_replay(*t, name, timing);
    if (!plan.ok()) return fail(plan.error());
    std::string absorbed = plan->absorbed_calls
                               ? " (+" + std::to_string(plan->absorbed_calls) + " nested, absorbed)"
                               : "";
    progress.line(fmt::format(
        "replay: {}: {} calls{}, trace {} -> replay {} ({:g}x), peak {}, average {}", name,
        plan->calls.size(), absorbed, seconds(static_cast<double>(plan->trace_duration_ms)),
        seconds(static_cast<double>(plan->duration_ms)), plan->speedup(),
        human_bytes(Bytes{stats.peak_mem_bytes}),
        human_bytes(Bytes{static_cast<uint64_t>(stats.avg_mem_bytes)})));
    traces_json.push_back({{"trace", path},
                           {"calls", plan->calls.size()},
                           {"trace_calls", plan->trace_calls},
                           {"absorbed_calls", plan->absorbed_calls},
                           {"trace_duration_ms", plan->trace_duration_ms},
                           {"replay_duration_ms", plan->duration_ms},
                           {"speedup", plan->speedup()},
                           {"peak_mem_bytes", stats.peak_mem_bytes},
                           {"avg_mem_bytes", stats.avg_mem_bytes}});
    plans.push_back(std::move(plan).value());
  }
  std::vector<replay::PolicyChoice> choices;
  for (const auto& p : a.policies) {
    auto c = replay::resolve_policy(p, avg, peak);
    if (!c.ok()) return fail(std::move(c).error().context_add("--policy " + p));
    choices.push_back(std::move(c).value());
  }

  // The host's facts for the report, taken before the lab is entered (as qualify does).
  Json host = a.report.empty() ? Json::object() : doctor_report(g);

  // docs/DESIGN.md, safety rules: replay enters a fresh lab before any provider starts, so whatever
  // a replayed call sends (even under host_dir, which shares sandgate's namespace) lands on the
  // lab's decoys, never off the machine. Threads started below inherit it.
  auto lab = probes::lab::Lab::create(g.paths());
  if (!lab.ok()) return fail(std::move(lab).error().context_add("the replay's network lab"));
  auto in_lab = (*lab)->enter();
  if (!in_lab.ok()) return fail(std::move(in_lab).error().context_add("entering the lab"));

  InterruptFd interrupt;
  std::atomic<bool> stop{false};
  auto stop_pipe = make_pipe(O_CLOEXEC);
  if (!stop_pipe.ok()) return fail(stop_pipe.error());
  std::thread watcher([&] {
    struct pollfd fds[2] = {{interrupt.fd(), POLLIN, 0}, {stop_pipe->read.get(), POLLIN, 0}};
    while (::poll(fds, 2, -1) < 0 && errno == EINTR) {
    }
    if (fds[0].revents) {
      stop = true;
      progress.line("replay: interrupted; finishing the calls in progress");
    }
  });
  auto end_watcher = [&] {
    (void)write_all(stop_pipe->write.get(), "x");
    if (watcher.joinable()) watcher.join();
  };
  o.stop = &stop;

  int64_t longest = 0;
  for (const auto& p : plans) longest = std::max(longest, p.duration_ms);
  const Duration solo_duration =
      std::min<Duration>(std::chrono::milliseconds(longest + 1000), o.solo_max);

  // The victim's run-queue delay, where the kernel lets the activity tracer load (optional).
  std::unique_ptr<ebpf::ActivityTracer> tracer;
  Json runq_note = nullptr;
  if (a.victim && !a.no_runq) {
    auto t = ebpf::ActivityTracer::open();
    if (t.ok()) {
      tracer = std::move(t).value();
      o.tracer = tracer.get();
    } else {
      runq_note = "not measured: " + t.error().message();
      progress.line("replay: the victim's run-queue delay is not measured (" + t.error().message() +
                    ")");
    }
  }

  // Trials interleaved across policies: trial t runs every policy once (and the victim alone,
  // with --victim), in an order rotated by t, so a drift of the machine over the invocation
  // falls on every policy alike instead of on the one that happens to run last.
  std::vector<replay::TrialFigures> figures(choices.size());
  for (size_t i = 0; i < choices.size(); ++i) figures[i].policy = choices[i].label;
  std::vector<std::optional<replay::VictimLatency>> solos(trials);
  std::vector<replay::PolicyScores> scores;  // the first trial's, for the per-pass table
  Json runs_json = Json::object();
  Json trials_json = Json::array();
  reports::ReplaySection section;
  section.provider = a.provider;
  section.time_scale = a.time_scale;
  section.compress_silence = a.compress_silence;
  const size_t slots = choices.size() + (a.victim ? 1 : 0);  // the last slot: the victim alone
  for (size_t t = 0; t < trials && !stop; ++t) {
    Json trial_json = {{"trial", t + 1}, {"order", Json::array()}, {"policies", Json::array()}};
    std::vector<std::optional<replay::PolicyScores>> trial_scores(choices.size());
    for (size_t k = 0; k < slots && !stop; ++k) {
      size_t slot = (k + t) % slots;
      const std::string tag = trials > 1 ? fmt::format(" (trial {}/{})", t + 1, trials) : "";
      if (slot == choices.size()) {
        progress.status("replay: victim alone for " + format_duration(solo_duration) + tag);
        trial_json["order"].push_back("solo");
        auto s = replay::measure_victim_solo(g.registry, solo_duration, o);
        if (!s.ok()) {
          end_watcher();
          return fail(std::move(s).error().context_add("victim solo baseline" + tag));
        }
        solos[t] = *s;
        continue;
      }
      const auto& c = choices[slot];
      trial_json["order"].push_back(c.label);
      // Each finished call is a detail of the policy's step: counted on a terminal's status
      // line, left out of a log (--json has every call); the pass ends with a line of its own.
      const std::string step =
          "replay: policy " + c.label + " (" + replay::to_string(c.kind) + ")" + tag;
      progress.status(step);
      o.progress = [&progress, step](const std::string& call) { progress.status(step, call); };
      auto pass = replay::run_policy_pass(g.registry, c, plans, o, std::nullopt);
      if (!pass.ok()) {
        end_watcher();
        return fail(std::move(pass).error().context_add("policy " + c.label + tag));
      }
      for (const auto& r : pass->runs)
        if (!r.error.empty())
          progress.line("replay: warning: " + c.label + ": " + r.name + ": " + r.error);
      const auto& sc = pass->scores;
      if (!sc.victim_lost.empty())
        progress.line("replay: warning: " + c.label + ": the victim died: " + sc.victim_lost);
      std::string victim_line = sc.victim ? fmt::format(", victim p99 {:.0f}us, alloc P95 {:.0f}us",
                                                        sc.victim->p99_us, sc.victim->alloc_p95_us)
                                : !sc.victim_lost.empty() ? std::string(", victim died")
                                                          : std::string();
      std::string budget_line =
          sc.budget_oom_kills ? fmt::format(", {} OOM kills in the budget", *sc.budget_oom_kills)
                              : "";
      progress.line(
          fmt::format("replay: policy {}{}: {}/{} calls completed, {} killed, {} cancelled, {} "
                      "timed out{}{} in "
                      "{:.1f}s",
                      c.label, tag, sc.completed, sc.calls, sc.killed, sc.cancelled, sc.timed_out,
                      victim_line, budget_line, sc.wall_s));
      if (t == 0) {
        Json rj = Json::array();
        for (const auto& r : pass->runs) rj.push_back(replay::to_json(r));
        runs_json[c.label] = std::move(rj);
        reports::ReplayPolicy rp;
        rp.label = pass->scores.label;
        if (pass->scores.victim) rp.victim = latency(*pass->scores.victim);
        for (const auto& r : pass->runs) rp.timelines.push_back(timeline_of(r, pass->usage));
        section.policies.push_back(std::move(rp));
      }
      trial_scores[slot] = std::move(pass->scores);
    }
    // The trial's solo run is known now (it may have run after some policies).
    for (size_t i = 0; i < choices.size(); ++i) {
      if (!trial_scores[i]) continue;
      auto& sc = *trial_scores[i];
      if (sc.victim && solos[t]) {
        if (solos[t]->p50_us > 0) sc.victim_p50_inflation = sc.victim->p50_us / solos[t]->p50_us;
        if (solos[t]->p99_us > 0) sc.victim_p99_inflation = sc.victim->p99_us / solos[t]->p99_us;
      }
      trial_json["policies"].push_back(replay::to_json(sc));
      figures[i].trials.push_back(sc);
      figures[i].solo.push_back(solos[t]);
    }
    trial_json["victim_solo"] = solos[t] ? replay::to_json(*solos[t]) : Json(nullptr);
    trials_json.push_back(std::move(trial_json));
    if (t == 0) {
      for (auto& sc : trial_scores)
        if (sc) scores.push_back(*sc);
      size_t i = 0;
      for (auto& rp : section.policies) {
        while (i < trial_scores.size() && !trial_scores[i]) ++i;
        if (i < trial_scores.size()) rp.scores = replay::to_json(*trial_scores[i++]);
      }
    }
  }
  std::optional<replay::VictimLatency> solo = solos.empty() ? std::nullopt : solos.front();
  if (solo) section.victim_solo = latency(*solo);
  auto summary = replay::summarize_trials(figures);
  end_watcher();

  progress.clear();  // the table, on stdout, starts on a clean line
  if (trials > 1) {
    std::cout << "Over " << figures.front().trials.size() << " interleaved trials:\n"
              << replay::format_summary(summary);
  } else {
    std::cout << replay::format_table(scores, solo);
  }
  if (!a.json.empty()) {
    Json summary_json = Json::array();
    for (const auto& m : summary) summary_json.push_back(replay::to_json(m));
    Json j = {{"schema_version", 2},
              {"trials", trials_json},
              {"summary", summary_json},
              {"enforce_budget", a.enforce_budget},
              {"host_budget_bytes", o.host_budget_bytes},
              {"victim_runq", runq_note},
              {"provider", a.provider},
              {"timing",
               {{"time_scale", a.time_scale},
                {"compress_silence", a.compress_silence},
                {"max_silence_ms", to_millis(timing.max_silence)}}},
              {"traces", traces_json},
              {"victim_solo", solo ? Json{{"p50_us", solo->p50_us},
                                          {"p90_us", solo->p90_us},
                                          {"p99_us", solo->p99_us},
                                          {"max_us", solo->max_us},
                                          {"count", solo->count}}
                                   : Json(nullptr)},
              {"policies", Json::array()},
              {"runs", runs_json}};
    // The first trial's (every trial's are under "trials"; runs are the first trial's).
    for (const auto& s : scores) j["policies"].push_back(replay::to_json(s));
    if (auto s = write_json_file_atomic(a.json, j); !s.ok()) return fail(s.error());
    progress.line("replay: wrote " + a.json);
  }
  if (!a.report.empty()) {
    reports::Report report = reports::job_report("replay", std::move(host));
    report.replay = std::move(section);
    std::error_code ec;
    std::filesystem::create_directories(a.report, ec);
    if (ec) return fail("--report " + a.report + ": " + ec.message());
    if (auto s = reports::write_all_formats(report, a.report); !s.ok())
      return fail(std::move(s).error().context_add("writing the report"));
    std::cerr << "replay: wrote the report into " << a.report << "\n";
  }
  if (stop) return 128 + (interrupt.pending() ? interrupt.pending() : SIGINT);
  return 0;
}

}  // namespace

void add_replay_command(CLI::App& app, Globals& g) {
  auto a = std::make_shared<ReplayArgs>();
  auto* sub = app.add_subcommand(
      "replay",
      "Replay traces as real resource effects and score what they do to a neighbour.\n"
      "Each trace becomes a run; each call a controller call with its intent that runs\n"
      "`sandgate-load run` for the call's slice of the trace; the run's memory between calls\n"
      "is held by a run-level `sandgate-load hold`. Each --policy replays all traces once:\n"
      "  none         no limits, no ladder, no timeouts, no tenant weights\n"
      "  static       one run limit sized on the traces' average memory (what people do)\n"
      "  static-peak  one run limit sized on their peak (+10%)\n"
      "  default      the built-in per-call policy;  FILE  a policy file\n"
      "--victim runs `sandgate-load victim` beside the aggressors, in a tenant of its own\n"
      "(`interactive`: the policy's tenant of that name, weighted 1000 against the agents'\n"
      "100 in the built-in policy; else the default tenant's weight), and\n"
      "reports its latency (p50/p99 and inflation over it running alone), its allocation\n"
      "latency (P95), its cgroup's pressure stall (cpu and memory, some and full) and its\n"
      "run-queue delay (eBPF, where the kernel allows it).\n"
      "--trials N repeats every policy N times (default 5 with --victim, else 1), interleaved\n"
      "(trial t runs the policies and the victim alone in an order rotated by t); each figure\n"
      "is then a median over the trials with a 95% bootstrap interval, and one policy is\n"
      "ranked below another only where the intervals do not overlap; otherwise the output\n"
      "says \"no significant difference\". With one trial: a table, policies side by side.\n"
      "--enforce-budget puts every run and the victim under one cgroup limited to\n"
      "--host-budget and counts its OOM kills (AgentCgroup's experiment; README, \"Replay\").\n"
      "--json FILE has every figure, per trial, and every call of the first trial.\n"
      "  sandgate replay --policy none --policy static --policy default --victim \\\n"
      "      --compress-silence --json out.json traces/*.trace\n"
      "A policy sized on half of a set of traces, replayed on the other half:\n"
      "  sandgate policy suggest --traces runs/ --split even -o suggested.json\n"
      "  sandgate replay --split odd --policy static-peak --policy suggested.json runs/");
  sub->add_option("--provider", a->provider, "isolation provider")->capture_default_str();
  sub->add_option("--policy", a->policies,
                  "none, static, static-peak, default or a policy file (repeatable)");
  sub->add_option("--concurrency", a->concurrency,
                  "runs at once (default: one per trace; more than the traces repeats them)");
  sub->add_option("--time-scale", a->time_scale, "divide every time by X (2 = twice as fast)")
      ->capture_default_str();
  sub->add_flag("--compress-silence", a->compress_silence,
                "shorten every gap between calls longer than --max-silence to --max-silence");
  sub->add_option("--max-silence", a->max_silence, "with --compress-silence")
      ->capture_default_str();
  sub->add_flag("--victim", a->victim, "run the latency victim beside the aggressors");
  sub->add_option("--trials", a->trials,
                  "interleaved repetitions of every policy (default: 5 with --victim, else 1)")
      ->check(CLI::Range(1, 1000));
  sub->add_flag("--enforce-budget", a->enforce_budget,
                "a cgroup limited to --host-budget holds every run and the victim; its OOM kills "
                "are counted");
  sub->add_flag("--no-runq", a->no_runq,
                "do not load the eBPF tracer for the victim's run-queue delay");
  sub->add_option("--host-budget", a->host_budget,
                  "host memory budget, e.g. 16GiB (default: MemTotal)");
  sub->add_option("--json", a->json, "write every figure to this file");
  sub->add_option("--report", a->report,
                  "write the report (report.json, report.html with a burst timeline per run and "
                  "the victim's latency, ...) into this directory, with the host's facts (doctor)");
  sub->add_option("--load", a->load, "sandgate-load binary (default: beside sandgate)");
  sub->add_flag("--allow-unsafe-host", a->allow_unsafe_host, "permit the host_dir provider");
  sub->add_option("--split", a->split,
                  "all, even or odd: every other trace, sorted by path (as policy suggest "
                  "--split), to replay traces a suggested policy was not sized on")
      ->capture_default_str();
  sub->add_option("traces", a->traces,
                  "trace files (sandgate trace v1), or directories of *.jsonl / *.trace")
      ->required()
      ->check(CLI::ExistingPath);
  sub->callback([&g, a] { g.exit_code = run_replay(g, *a); });
}

}  // namespace sandgate::cli
