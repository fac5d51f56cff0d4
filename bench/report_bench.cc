// How long each writer takes to render one report (issue 12), all in one run:
//
//   BM_Render/json    the model dumped as JSON: the baseline, the least any rendering can cost
//   BM_Render/html, /junit, /sarif, /md
//                     each writer on the same report; counter bytes = the output's size
//   BM_Load           reading the report back: qualify.json + its probe files, checked
//
// The report is $SANDGATE_REPORT (a qualify.json with its probe files beside it, or a
// report.json), by default the small real one committed under reports/testdata (two providers,
// the creds boundary). For the figure that matters, point it at a full qualify run:
//   SANDGATE_REPORT=reports/out/qualify.json build/release/bench/report_bench
// Needs no privilege, writes nothing.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <iostream>

#include "reports/from_qualify.h"
#include "reports/writers.h"

namespace {

using namespace sandgate::reports;

std::string report_path() {
  const char* env = std::getenv("SANDGATE_REPORT");
  return env && *env ? env : SANDGATE_SOURCE_DIR "/reports/testdata/qualify-creds/qualify.json";
}

const Report& report() {
  static const Report r = [] {
    auto loaded = load_report(report_path());
    if (!loaded.ok()) {
      std::cerr << "report_bench: " << loaded.error().message() << "\n";
      std::exit(2);
    }
    size_t verdicts = 0;
    for (const auto& p : loaded->providers) verdicts += p.probes ? p.probes->size() : 0;
    std::cerr << "report_bench: " << report_path() << ": " << loaded->providers.size()
              << " providers, " << verdicts << " verdicts\n";
    return std::move(loaded).value();
  }();
  return r;
}

void BM_Render(benchmark::State& state, Format format) {
  const Report& r = report();
  size_t bytes = 0;
  for (auto _ : state) {
    std::string out = render(r, format);
    bytes = out.size();
    benchmark::DoNotOptimize(out);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK_CAPTURE(BM_Render, json, Format::kJson)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Render, html, Format::kHtml)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Render, junit, Format::kJunit)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Render, sarif, Format::kSarif)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Render, md, Format::kMarkdown)->Unit(benchmark::kMillisecond);

void BM_Load(benchmark::State& state) {
  report();  // the path is checked once, outside the timing
  for (auto _ : state) {
    auto r = load_report(report_path());
    if (!r.ok()) state.SkipWithError(r.error().message().c_str());
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_Load)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
