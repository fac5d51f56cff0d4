// sandgate trace: check, summarise and import burst-silence traces (`sandgate trace v1`,
// README.md "Trace format").
#include "replay/trace.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "cli/common.h"
#include "controller/policy.h"
#include "core/files.h"
#include "core/table.h"
#include "core/terminal_text.h"
#include "core/units.h"
#include "replay/agentcgroup.h"
#include "replay/trace_stats.h"

namespace sandgate::cli {

namespace {

std::string pct(double share) { return fmt::format("{:.1f}%", share * 100); }
std::string bytes(double b) { return human_bytes(Bytes{static_cast<uint64_t>(std::max(0.0, b))}); }
std::string rate(double bps) { return (bps < 0 ? "-" : "") + bytes(std::abs(bps)) + "/s"; }
std::string short_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

bool is_dir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void add_stats_row(TextTable& table, const replay::TraceStats& s, const std::string& name,
                   double ratio_column) {
  table.row({name, fmt::format("{:.1f}", s.duration_s), std::to_string(s.samples),
             std::to_string(s.calls), bytes(s.peak_mem_bytes), bytes(s.avg_mem_bytes),
             ratio_column > 0 ? fmt::format("{:.2f}x", ratio_column) : "-",
             rate(s.max_rise_bytes_per_s), pct(s.time_in_calls_share),
             fmt::format("{}/{}", s.peak_samples_in_calls, s.peak_samples)});
}

struct StatsArgs {
  std::vector<std::string> files;
  bool json = false;
  std::string peak_threshold = "300MB";
};

int run_stats(const StatsArgs& a) {
  auto threshold = parse_bytes(a.peak_threshold);
  if (!threshold.ok()) return fail("--peak-threshold: " + threshold.error().message());
  auto paths = replay::trace_files(a.files);
  if (!paths.ok()) return fail(paths.error());
  std::vector<replay::TraceStats> each;
  for (const auto& path : *paths) {
    auto trace = replay::read_trace(path);
    if (!trace.ok()) return fail(trace.error());
    each.push_back(replay::compute_stats(*trace, path, threshold->value));
  }
  replay::StatsSummary sum = replay::summarize(each);
  if (a.json) {
    Json traces = Json::array();
    for (const auto& s : each) traces.push_back(replay::to_json(s));
    Json out = {{"schema_version", 1},
                {"peak_threshold_bytes", threshold->value},
                {"definitions",
                 "README.md, Trace format: average = mean of samples; change rate between "
                 "consecutive samples; time in calls = union of call intervals over the sampled "
                 "span; peak sample = memory strictly above peak_threshold_bytes, inside a call "
                 "when its time is within [start_ms, end_ms] of any call"},
                {"traces", traces}};
    if (each.size() > 1) out["summary"] = replay::to_json(sum);
    std::cout << dump_json(out, 2) << "\n";
    return 0;
  }
  constexpr auto kRight = TextTable::Align::kRight;
  TextTable table({{"trace", TextTable::Align::kLeft, 44},
                   {"dur s", kRight},
                   {"samples", kRight},
                   {"calls", kRight},
                   {"peak", kRight},
                   {"average", kRight},
                   {"pk/avg", kRight},
                   {"max rise", kRight},
                   {"in call", kRight},
                   {"peaks in", kRight}});
  for (const auto& s : each) add_stats_row(table, s, short_name(s.name), s.peak_to_avg);
  const replay::TraceStats& all = each.size() > 1 ? sum.pooled : each.front();
  if (each.size() > 1)
    add_stats_row(table, sum.pooled, fmt::format("all {} traces (pooled)", each.size()), 0);
  std::cout << table.render();
  if (each.size() > 1) {
    std::cout << fmt::format(
        "peak-to-average: median {:.2f}x, max {:.2f}x ({}); largest rise {} = {:.2f} GB/s ({}); "
        "largest drop {}\n",
        sum.peak_to_avg_median, sum.peak_to_avg_max, short_name(sum.peak_to_avg_max_trace),
        rate(sum.pooled.max_rise_bytes_per_s), sum.pooled.max_rise_bytes_per_s / 1e9,
        short_name(sum.max_rise_trace), rate(sum.pooled.max_drop_bytes_per_s));
  } else {
    std::cout << fmt::format("largest drop {}; cpu peak {} millicores, average {:.0f}\n",
                             rate(all.max_drop_bytes_per_s), all.peak_cpu_millicores,
                             all.avg_cpu_millicores);
  }
  std::cout << fmt::format(
      "time in calls: {} of {:.0f} s sampled (union of call intervals); peak samples (memory "
      "above {} bytes): {} of {} inside a call ({})\n",
      pct(all.time_in_calls_share), all.sampled_s, threshold->value, all.peak_samples_in_calls,
      all.peak_samples, all.peak_samples ? pct(all.peak_samples_in_calls_share) : "-");
  const replay::ObservedStats& o = all.observed;
  for (const auto& why : o.untraced_why)
    std::cout << "observed: not traced (" << terminal_safe(why) << ")\n";
  if (o.traced_calls > 0) {
    std::cout << fmt::format(
        "observed ({} of {} calls traced): {} execs, {} forks, {} connects ({} denied, {} "
        "failed), {} sensitive opens; waited for a CPU {:.2f} s in all{}{}\n",
        o.traced_calls, all.calls, o.execs, o.forks, o.connects, o.connects_denied,
        o.connects_failed, o.sensitive_opens, o.runq_delay_s,
        o.runq_worst_call.empty()
            ? std::string()
            : fmt::format(", most by {} ({:.0f} ms)", terminal_safe(o.runq_worst_call),
                          o.runq_worst_call_ms),
        o.lost ? fmt::format("; {} events lost", o.lost) : std::string());
  }
  if (o.egress_denied || o.net_bytes_out || o.net_bytes_in)
    std::cout << fmt::format("egress: {} refused by the guard; {} out, {} in off loopback\n",
                             o.egress_denied, bytes(o.net_bytes_out), bytes(o.net_bytes_in));
  TextTable intents({{"intent"}, {"calls", kRight}, {"seconds", kRight}});
  for (const auto& [intent, is] : all.by_intent)
    intents.row({intent, std::to_string(is.calls), fmt::format("{:.1f}", is.seconds)});
  std::cout << intents.render() << "seconds: the sum of the calls' durations\n";
  return 0;
}

int run_validate(const std::vector<std::string>& files) {
  auto paths = replay::trace_files(files);
  if (!paths.ok()) return fail(paths.error());
  int rc = 0;
  for (const auto& path : *paths) {
    auto trace = replay::read_trace(path);
    if (!trace.ok()) {
      rc = fail(trace.error());
      continue;
    }
    std::cout << fmt::format("{}: ok, {} samples, {} calls, {:.1f} s ({})\n", path,
                             trace->samples.size(), trace->calls.size(),
                             trace->duration_ms() / 1000.0, trace->header.source);
  }
  return rc;
}

struct ImportArgs {
  std::string from;
  std::vector<std::string> files;
  std::string out;
  std::string policy;
};

// One output per input, so each run stays a trace of its own (the planner and the statistics
// draw whole runs; runs appended into one file would read as one run). --out names a file
// (*.jsonl or *.trace) only for a single input file; anything else is a directory.
// A bad input file does not stop the others: each good one is imported, each bad one gets
// its one line (file:line: field), and the exit status is 2 at the end if any failed, so
// nothing is lost in silence.
int run_import(const ImportArgs& a) {
  if (a.from != "agentcgroup")
    return fail("--from: unknown format '" + a.from + "' (known: agentcgroup)");
  auto policy = load_policy_arg(a.policy);
  if (!policy.ok()) return fail(policy.error());
  auto paths = replay::trace_files(a.files);
  if (!paths.ok()) return fail(paths.error());
  bool out_is_file_name =
      !is_dir(a.out) && (a.out.ends_with(".jsonl") || a.out.ends_with(".trace"));
  bool single_file = a.files.size() == 1 && paths->size() == 1 && !is_dir(a.files.front());
  if (out_is_file_name && !single_file) {
    return fail(fmt::format(
        "--out {}: names a file, but {} input files need a directory (one trace per input); "
        "give --out DIR",
        a.out, paths->size()));
  }
  bool to_file = out_is_file_name;
  if (!to_file) {
    if (auto s = make_dirs(a.out); !s.ok()) return fail(s.error());
  }
  size_t failed = 0;
  for (const auto& path : *paths) {
    auto trace = replay::import_agentcgroup(path, *policy);
    if (!trace.ok()) {
      fail(trace.error());
      ++failed;
      continue;
    }
    std::string dest = to_file ? a.out : a.out + "/" + short_name(path);
    if (auto s = replay::write_trace(dest, *trace); !s.ok()) {
      fail(s.error());
      ++failed;
      continue;
    }
    std::cout << fmt::format("{} -> {}: {} samples, {} calls\n", path, dest, trace->samples.size(),
                             trace->calls.size());
  }
  if (failed) {
    return fail(fmt::format("imported {} of {} files; {} failed (each named above)",
                            paths->size() - failed, paths->size(), failed));
  }
  return 0;
}

}  // namespace

void add_trace_command(CLI::App& app, Globals& g) {
  auto* sub = app.add_subcommand(
      "trace",
      "Burst-silence traces (`sandgate trace v1`: JSON lines, a header, call events, samples;\n"
      "README.md \"Trace format\").\n"
      "  sandgate trace validate FILE|DIR...    strict check; errors name file:line and field\n"
      "  sandgate trace stats FILE|DIR... [--json] [--peak-threshold 300MB]\n"
      "  sandgate trace import --from agentcgroup FILE|DIR... --out DIR|FILE.jsonl\n"
      "A DIR stands for its *.jsonl and *.trace files (not recursive). Inputs must be regular\n"
      "files: a FIFO or a device is refused.\n"
      "Example: sandgate trace validate traces/\n"
      "Example: sandgate trace stats traces/");
  sub->require_subcommand(1);

  auto* validate = sub->add_subcommand(
      "validate", "Read each trace strictly; one line per file, exit 2 if any is bad");
  auto files = std::make_shared<std::vector<std::string>>();
  validate->add_option("files", *files, "trace files, or directories of *.jsonl / *.trace")
      ->required();
  validate->callback([&g, files] { g.exit_code = run_validate(*files); });

  auto* stats = sub->add_subcommand(
      "stats",
      "Duration, calls by intent, peak and average memory, peak-to-average, largest change\n"
      "rate, share of time in calls (union of call intervals: overlapping calls count once),\n"
      "share of peak samples inside calls, and what the kernel saw the traced calls do (execs,\n"
      "connects and their verdicts, sensitive opens, run-queue delay: `record`'s \"observed\").\n"
      "A peak sample is one whose memory is strictly above\n"
      "--peak-threshold (default 300MB = 300,000,000 bytes, the AgentCgroup paper's). With\n"
      "several traces, a pooled row and the median/max peak-to-average follow.");
  auto sa = std::make_shared<StatsArgs>();
  stats->add_option("files", sa->files, "trace files, or directories of *.jsonl / *.trace")
      ->required();
  stats->add_flag("--json", sa->json, "print every figure as JSON instead of the table");
  stats->add_option("--peak-threshold", sa->peak_threshold,
                    "memory above which a sample is a peak: 300MB, 1GiB");
  stats->callback([&g, sa] { g.exit_code = run_stats(*sa); });

  auto* import = sub->add_subcommand(
      "import",
      "Convert traces from another format. agentcgroup: the AgentCgroup paper's per-run files\n"
      "(samples with t_ms, mem_bytes, cpu_pct_interval_est; tool calls with name, cmd, start_ms,\n"
      "end_ms, sidechain). cpu millicores = cpu_pct_interval_est x 10; pids and io are not in\n"
      "the data (0, listed in the header's \"unmeasured\"). Intents: Bash commands by the\n"
      "policy's inference rules (as `exec` without --intent), Read/Grep/Glob search,\n"
      "Edit/Write/MultiEdit/NotebookEdit edit, anything else default.");
  auto ia = std::make_shared<ImportArgs>();
  import->add_option("--from", ia->from, "source format: agentcgroup")->required();
  import->add_option("files", ia->files, "source files, or directories of *.jsonl / *.trace")
      ->required();
  import
      ->add_option("--out", ia->out,
                   "output directory (one trace per input, same name), or FILE.jsonl when the "
                   "only input is one file; a bad input is reported and skipped, exit 2 at the end")
      ->required();
  import->add_option("--policy", ia->policy,
                     "policy whose inference rules name Bash intents (default: built-in)");
  import->callback([&g, ia] { g.exit_code = run_import(*ia);
});
}  // namespace sandgate::cli

}  // namespace sandgate::cli
