// A/B benchmark of the namespace jail, all in one run (STYLE.md: performance is judged A/B
// against a baseline, not against an absolute number; firecracker's A/B tests):
//
//   BM_BareForkExec                 fork+exec /bin/true and wait: the floor
//   BM_Bwrap                        the same /bin/true in a bubblewrap sandbox: the baseline
//   BM_NamespacesCreateExecDestroy  a whole namespaces run for one call: the subject
//   BM_NamespacesExecOnly           one more call in a run that already exists
//   BM_HostDirCreateExecDestroy     host_dir (no isolation): the run bookkeeping alone
//
// The goal the subject is held to: no slower than bubblewrap while also applying seccomp, a
// generated /etc, a workspace and the run record. After the run, the medians and the ratios
// namespaces/bwrap and namespaces/bare are printed from the same run's results.
//
// Needs root (the namespaces provider maps ids and assembles mounts). Runs keep their state
// and work directories under a fresh temporary directory, removed at the end; if the process
// is killed, `sandgate gc --state-dir <tmp>/state` cleans up after it.
#include <benchmark/benchmark.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/files.h"
#include "core/host_paths.h"
#include "core/log.h"
#include "core/process.h"
#include "providers/provider.h"
#include "providers/registry.h"
#include "providers/supervisor.h"

namespace sandgate::bench {
namespace {

using providers::Call;
using providers::Environment;
using providers::EnvSpec;
using providers::Placement;
using providers::Provider;
using providers::ProviderOptions;

// The bubblewrap baseline, exactly as the issue states it: a read-only /usr, the merged-/usr
// symlinks, fresh /proc, /dev and /tmp, every namespace unshared.
// clang-format off
const std::vector<std::string> kBwrapArgv = {
    "bwrap",
    "--ro-bind", "/usr", "/usr",
    "--symlink", "usr/bin", "/bin",
    "--symlink", "usr/lib", "/lib",
    "--symlink", "usr/lib64", "/lib64",
    "--proc", "/proc",
    "--dev", "/dev",
    "--tmpfs", "/tmp",
    "--unshare-all",
    "--die-with-parent",
    "/bin/true"};
// clang-format on

// Set up by main() before any benchmark runs.
struct BenchContext {
  HostPaths paths;                   // state_dir and work_dir under a temporary directory
  std::optional<std::string> bwrap;  // absolute path, if installed
};
BenchContext* g_context = nullptr;

std::optional<std::string> find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t pos = 0;
  while (pos <= dirs.size()) {
    size_t end = dirs.find(':', pos);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = (end > pos ? dirs.substr(pos, end - pos) : ".") + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    pos = end + 1;
  }
  return std::nullopt;
}

// Runs argv on the host and waits; false (with the benchmark marked as failed) unless it
// exited 0.
bool run_host(benchmark::State& state, const std::vector<std::string>& argv) {
  auto child = spawn(argv);
  if (!child.ok()) {
    state.SkipWithError(("spawn " + argv[0] + ": " + child.error().message()).c_str());
    return false;
  }
  auto status = child->wait();
  if (!status.ok()) {
    state.SkipWithError(("wait " + argv[0] + ": " + status.error().message()).c_str());
    return false;
  }
  if (!status->exited || status->code != 0) {
    state.SkipWithError((argv[0] + " ended with " + status->describe()).c_str());
    return false;
  }
  return true;
}

std::unique_ptr<Provider> make_provider(benchmark::State& state, const std::string& name) {
  providers::Registry registry;
  providers::register_builtin_providers(registry);
  ProviderOptions options;
  options.paths = g_context->paths;
  options.allow_unsafe_host = name == "host_dir";
  auto provider = registry.create(name, options);
  if (!provider.ok()) {
    state.SkipWithError(("provider " + name + ": " + provider.error().message()).c_str());
    return nullptr;
  }
  if (auto s = (*provider)->available(); !s.ok()) {
    state.SkipWithError(("provider " + name + " unavailable: " + s.error().message()).c_str());
    return nullptr;
  }
  return std::move(provider).value();
}

// One /bin/true call in `env`; false (benchmark failed) unless it exited 0.
bool exec_true(benchmark::State& state, Environment& env) {
  Call call;
  call.argv = {"/bin/true"};
  auto result = env.exec(call, Placement{});
  if (!result.ok()) {
    state.SkipWithError(("exec /bin/true: " + result.error().message()).c_str());
    return false;
  }
  if (!result->status.exited || result->status.code != 0) {
    state.SkipWithError(("/bin/true in the environment ended with " + result->status.describe() +
                         "; stderr: " + result->stderr_data)
                            .c_str());
    return false;
  }
  return true;
}

// create + exec /bin/true + destroy, every iteration.
void create_exec_destroy(benchmark::State& state, const std::string& provider_name) {
  auto provider = make_provider(state, provider_name);
  if (!provider) return;
  for (auto _ : state) {
    auto env = provider->create(EnvSpec{});
    if (!env.ok()) {
      state.SkipWithError(("create: " + env.error().message()).c_str());
      break;
    }
    if (!exec_true(state, **env)) break;
    if (auto s = (*env)->destroy(); !s.ok()) {
      state.SkipWithError(("destroy: " + s.error().message()).c_str());
      break;
    }
  }
}

void BM_BareForkExec(benchmark::State& state) {
  for (auto _ : state) {
    if (!run_host(state, {"/bin/true"})) break;
  }
}

void BM_Bwrap(benchmark::State& state) {
  if (!g_context->bwrap) {
    state.SkipWithError("bwrap is not installed (ci/bootstrap installs bubblewrap): no baseline");
    return;
  }
  std::vector<std::string> argv = kBwrapArgv;
  argv[0] = *g_context->bwrap;
  for (auto _ : state) {
    if (!run_host(state, argv)) break;
  }
}

void BM_NamespacesCreateExecDestroy(benchmark::State& state) {
  create_exec_destroy(state, "namespaces");
}

void BM_NamespacesExecOnly(benchmark::State& state) {
  auto provider = make_provider(state, "namespaces");
  if (!provider) return;
  auto env = provider->create(EnvSpec{});
  if (!env.ok()) {
    state.SkipWithError(("create: " + env.error().message()).c_str());
    return;
  }
  for (auto _ : state) {
    if (!exec_true(state, **env)) break;
  }
  if (auto s = (*env)->destroy(); !s.ok())
    state.SkipWithError(("destroy: " + s.error().message()).c_str());
}

void BM_HostDirCreateExecDestroy(benchmark::State& state) {
  create_exec_destroy(state, "host_dir");
}

// Repetitions, min time and aggregates-only are defaults given as flags (see main), not fixed
// here, so that --benchmark_repetitions and --benchmark_min_time still work on the command line.
void configure(benchmark::internal::Benchmark* b) {
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_BareForkExec)->Apply(configure);
BENCHMARK(BM_Bwrap)->Apply(configure);
BENCHMARK(BM_NamespacesCreateExecDestroy)->Apply(configure);
BENCHMARK(BM_NamespacesExecOnly)->Apply(configure);
BENCHMARK(BM_HostDirCreateExecDestroy)->Apply(configure);

// Wraps the display reporter and keeps the median real time of each benchmark, so the ratios
// come from the very run that was displayed.
class RatioReporter : public benchmark::BenchmarkReporter {
 public:
  explicit RatioReporter(std::unique_ptr<benchmark::BenchmarkReporter> display)
      : display_(std::move(display)) {}

  bool ReportContext(const Context& context) override { return display_->ReportContext(context); }

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      const std::string& name = run.run_name.function_name;
      if (run.error_occurred) {
        errors_[name] = run.error_message;
        continue;
      }
      double ms = run.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(run.time_unit) * 1e3;
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "median") medians_[name] = ms;
      if (run.run_type == Run::RT_Iteration) samples_[name].push_back(ms);
    }
    display_->ReportRuns(runs);
  }

  void Finalize() override { display_->Finalize(); }

  // Median real time in ms: the median aggregate, or (one repetition, or aggregates not
  // reported) the median of the individual runs.
  std::optional<double> median_ms(const std::string& name) const {
    if (auto it = medians_.find(name); it != medians_.end()) return it->second;
    auto it = samples_.find(name);
    if (it == samples_.end() || it->second.empty()) return std::nullopt;
    std::vector<double> v = it->second;
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  }

  // Returns false if a benchmark failed (so the binary exits non-zero: never pass quietly).
  bool print_summary(std::ostream& out) const {
    const char* names[] = {"BM_BareForkExec", "BM_Bwrap", "BM_NamespacesCreateExecDestroy",
                           "BM_NamespacesExecOnly", "BM_HostDirCreateExecDestroy"};
    char line[256];
    out << "\njail_bench summary (median real time per iteration, this run)\n";
    for (const char* n : names) {
      if (auto e = errors_.find(n); e != errors_.end()) {
        out << "  " << n << ": FAILED: " << e->second << "\n";
      } else if (auto m = median_ms(n)) {
        std::snprintf(line, sizeof line, "  %-32s %9.3f ms\n", n, *m);
        out << line;
      } else {
        out << "  " << n << ": not run (filtered out)\n";
      }
    }
    auto ratio = [&](const char* label, const char* a, const char* b) {
      auto x = median_ms(a), y = median_ms(b);
      if (!x || !y || errors_.count(a) || errors_.count(b) || *y <= 0) return;
      std::snprintf(line, sizeof line, "  %-40s %7.2fx\n", label, *x / *y);
      out << line;
    };
    out << "ratios\n";
    ratio("namespaces/bwrap (create+exec+destroy)", "BM_NamespacesCreateExecDestroy", "BM_Bwrap");
    ratio("namespaces/bare  (create+exec+destroy)", "BM_NamespacesCreateExecDestroy",
          "BM_BareForkExec");
    ratio("namespaces exec-only/bwrap", "BM_NamespacesExecOnly", "BM_Bwrap");
    ratio("namespaces exec-only/bare", "BM_NamespacesExecOnly", "BM_BareForkExec");
    ratio("bwrap/bare", "BM_Bwrap", "BM_BareForkExec");
    ratio("host_dir/bare    (create+exec+destroy)", "BM_HostDirCreateExecDestroy",
          "BM_BareForkExec");
    auto ns = median_ms("BM_NamespacesCreateExecDestroy"), bw = median_ms("BM_Bwrap");
    if (ns && bw && !errors_.count("BM_NamespacesCreateExecDestroy") && !errors_.count("BM_Bwrap"))
      out << "goal (namespaces no slower than bwrap): " << (*ns <= *bw ? "met" : "NOT met") << "\n";
    return errors_.empty();
  }

 private:
  std::unique_ptr<benchmark::BenchmarkReporter> display_;
  std::map<std::string, double> medians_;
  std::map<std::string, std::vector<double>> samples_;
  std::map<std::string, std::string> errors_;
};

// The display flags Google Benchmark would apply to its own default reporter, which we replace
// (Initialize() consumes them, so they are read first). Last occurrence wins, as in the library.
struct DisplayFlags {
  std::string format = "console";
  std::string color = "auto";
  bool tabular = false;
};

DisplayFlags read_display_flags(int argc, char** argv) {
  DisplayFlags f;
  auto value = [](const char* arg, const char* flag) -> const char* {
    size_t n = std::strlen(flag);
    if (std::strncmp(arg, flag, n) != 0) return nullptr;
    if (arg[n] == '=') return arg + n + 1;
    if (arg[n] == 0) return "true";  // a bare boolean flag
    return nullptr;
  };
  auto truthy = [](std::string v) {
    return v == "true" || v == "yes" || v == "1" || v == "t" || v == "y";
  };
  for (int i = 1; i < argc; ++i) {
    if (const char* v = value(argv[i], "--benchmark_format")) f.format = v;
    if (const char* v = value(argv[i], "--benchmark_color")) f.color = v;
    if (const char* v = value(argv[i], "--benchmark_counters_tabular")) f.tabular = truthy(v);
  }
  return f;
}

std::unique_ptr<benchmark::BenchmarkReporter> make_display_reporter(const DisplayFlags& f) {
  if (f.format == "json") return std::make_unique<benchmark::JSONReporter>();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // deprecated upstream, still a flag
  if (f.format == "csv") return std::make_unique<benchmark::CSVReporter>();
#pragma GCC diagnostic pop
  bool color = f.color == "auto" ? ::isatty(STDOUT_FILENO) && std::getenv("TERM") &&
                                       std::strcmp(std::getenv("TERM"), "dumb") != 0
                                 : f.color == "true" || f.color == "yes" || f.color == "1";
  int opts = benchmark::ConsoleReporter::OO_None;
  if (color) opts |= benchmark::ConsoleReporter::OO_Color;
  if (f.tabular) opts |= benchmark::ConsoleReporter::OO_Tabular;
  return std::make_unique<benchmark::ConsoleReporter>(
      static_cast<benchmark::ConsoleReporter::OutputOptions>(opts));
}

}  // namespace
}  // namespace sandgate::bench

int main(int argc, char** argv) {
  // The providers' supervisor is this binary re-executed: it must not parse benchmark flags.
  if (auto rc = sandgate::providers::maybe_run_supervisor(argc, argv)) return *rc;
  sandgate::init_logging("");
  using namespace sandgate::bench;

  // Defaults, overridden by the same flags given on the command line (the last one wins). Each
  // repetition runs at least min_time; the median of the repetitions is what counts. Random
  // interleaving shuffles the repetitions of all benchmarks, so a noisy second on a 2-core VM
  // is shared out instead of landing on one side of the comparison.
  std::string defaults[] = {"--benchmark_repetitions=7", "--benchmark_min_time=0.5",
                            "--benchmark_report_aggregates_only=true",
                            "--benchmark_enable_random_interleaving=true"};
  std::vector<char*> args(argv, argv + argc);
  for (auto it = std::rbegin(defaults); it != std::rend(defaults); ++it)
    args.insert(args.begin() + 1, it->data());
  int args_count = static_cast<int>(args.size());
  args.push_back(nullptr);
  DisplayFlags display = read_display_flags(args_count, args.data());
  benchmark::Initialize(&args_count, args.data());
  if (benchmark::ReportUnrecognizedArguments(args_count, args.data())) return 1;

  // State and work directories of every run. The directory must be traversable (0711) by the
  // jail's mapped root (host uid id_map_base), which is not host root and has no DAC override.
  const char* tmp_base = std::getenv("TMPDIR");
  std::string tmp_template =
      std::string(tmp_base && *tmp_base ? tmp_base : "/var/tmp") + "/sandgate-jail-bench.XXXXXX";
  if (!::mkdtemp(tmp_template.data())) {
    std::perror(("mkdtemp " + tmp_template).c_str());
    return 1;
  }
  const std::string tmp_dir = tmp_template;
  if (::chmod(tmp_dir.c_str(), 0711) != 0) {
    std::perror(("chmod " + tmp_dir).c_str());
    (void)sandgate::remove_tree(tmp_dir);
    return 1;
  }
  BenchContext context;
  context.paths = sandgate::HostPaths{};
  context.paths.state_dir = tmp_dir + "/state";
  context.paths.work_dir = tmp_dir + "/work";
  context.bwrap = find_in_path("bwrap");
  g_context = &context;

  RatioReporter reporter(make_display_reporter(display));
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  // Console output carries the summary; machine-readable formats keep stdout parseable.
  bool ok = reporter.print_summary(display.format == "console" ? std::cout : std::cerr);

  int rc = ok ? 0 : 1;
  if (auto s = sandgate::remove_tree(tmp_dir); !s.ok()) {
    std::cerr << "jail_bench: removing " << tmp_dir << ": " << s.error().message() << "\n";
    rc = 1;
  }
  return rc;
}
