// What every *_bench binary shares: the reporter that keeps this run's medians (and counters)
// for the A/B summary printed after it, the display flags Google Benchmark would have applied
// to its own reporter, the default flags, and the private temporary directory runs live in.
#pragma once

#include <benchmark/benchmark.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/stats.h"

namespace sandgate::bench {

// Wraps the display reporter and keeps the median real time of each benchmark, and its
// counters, so the summary comes from the very run that was displayed. Benchmarks are keyed by
// their registered name (run_name.function_name: "BM_X", or "BM_X/case" for BENCHMARK_CAPTURE).
class RunCollector : public benchmark::BenchmarkReporter {
 public:
  explicit RunCollector(std::unique_ptr<benchmark::BenchmarkReporter> display)
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
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "median") {
        medians_[name] = ms;
        for (const auto& [key, c] : run.counters) median_counters_[name][key] = c.value;
      }
      if (run.run_type == Run::RT_Iteration) {
        samples_[name].push_back(ms);
        for (const auto& [key, c] : run.counters) last_counters_[name][key] = c.value;
      }
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
    return stats::median(it->second);
  }

  // A user counter: its median over repetitions, or (one repetition) its value.
  std::optional<double> counter(const std::string& name, const std::string& key) const {
    for (const auto* m : {&median_counters_, &last_counters_}) {
      auto it = m->find(name);
      if (it == m->end()) continue;
      if (auto c = it->second.find(key); c != it->second.end()) return c->second;
    }
    return std::nullopt;
  }

  // Benchmarks that failed (SkipWithError), with the reason.
  const std::map<std::string, std::string>& errors() const { return errors_; }
  bool failed(const std::string& name) const { return errors_.count(name) != 0; }

 private:
  std::unique_ptr<benchmark::BenchmarkReporter> display_;
  std::map<std::string, double> medians_;
  std::map<std::string, std::vector<double>> samples_;
  std::map<std::string, std::map<std::string, double>> median_counters_, last_counters_;
  std::map<std::string, std::string> errors_;
};

// The display flags Google Benchmark would apply to its own default reporter, which we replace
// (Initialize() consumes them, so they are read first). Last occurrence wins, as in the library.
struct DisplayFlags {
  std::string format = "console";
  std::string color = "auto";
  bool tabular = false;
};

inline DisplayFlags read_display_flags(int argc, char** argv) {
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

inline std::unique_ptr<benchmark::BenchmarkReporter> make_display_reporter(const DisplayFlags& f) {
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

// The flags every *_bench binary starts from (the command line overrides them). Each repetition
// runs at least min_time; the median of the repetitions is what counts. Random interleaving
// shuffles the repetitions of all benchmarks, so a noisy second on a 2-core VM is shared out
// instead of landing on one side of the comparison.
inline std::vector<std::string> default_flags() {
  return {"--benchmark_repetitions=7", "--benchmark_min_time=0.5",
          "--benchmark_report_aggregates_only=true", "--benchmark_enable_random_interleaving=true"};
}

// Runs the benchmarks the command line selected, displayed as `display` says, then
// `summary(reporter, out)` (the A/B figures of this very run): on stdout for the console format,
// on stderr for the others so that JSON or CSV on stdout stays parseable. Its result.
template <class Summary>
bool run_benchmarks(const DisplayFlags& display, Summary summary) {
  RunCollector reporter(make_display_reporter(display));
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return summary(reporter, display.format == "console" ? std::cout : std::cerr);
}

// Puts `defaults` before the command line's own flags (the last occurrence of a flag wins, so
// the command line still overrides them), reads the display flags and initialises Google
// Benchmark. nullopt: an unrecognised argument (already reported); exit 1.
inline std::optional<DisplayFlags> initialize_with_defaults(int argc, char** argv,
                                                           std::vector<std::string> defaults) {
  // Initialize() copies the flag values, but keep the strings alive for the whole run anyway.
  static std::vector<std::string> storage;
  storage = std::move(defaults);
  std::vector<char*> args(argv, argv + argc);
  for (auto it = storage.rbegin(); it != storage.rend(); ++it) args.insert(args.begin() + 1, it->data());
  int args_count = static_cast<int>(args.size());
  args.push_back(nullptr);
  DisplayFlags display = read_display_flags(args_count, args.data());
  benchmark::Initialize(&args_count, args.data());
  if (benchmark::ReportUnrecognizedArguments(args_count, args.data())) return std::nullopt;
  return display;
}

// A fresh directory for the runs' state and work directories: $TMPDIR (else /var/tmp)/<prefix>.
// XXXXXX, traversable (0711) by a jail's mapped root (host uid id_map_base), which is not host
// root and has no DAC override. nullopt: failed (already reported with perror).
inline std::optional<std::string> make_bench_tmp_dir(const std::string& prefix) {
  const char* tmp_base = std::getenv("TMPDIR");
  std::string tmp_template =
      std::string(tmp_base && *tmp_base ? tmp_base : "/var/tmp") + "/" + prefix + ".XXXXXX";
  if (!::mkdtemp(tmp_template.data())) {
    std::perror(("mkdtemp " + tmp_template).c_str());
    return std::nullopt;
  }
  if (::chmod(tmp_template.c_str(), 0711) != 0) {
    std::perror(("chmod " + tmp_template).c_str());
    ::rmdir(tmp_template.c_str());
    return std::nullopt;
  }
  return tmp_template;
}

}  // namespace sandgate::bench
