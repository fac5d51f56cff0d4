// A/B benchmark of "recipe in" (issue 11), all in one run: how long a namespaces run takes to
// start (create + exec /bin/true + destroy) with
//
//   BM_EmptyRecipe        no recipe: the baseline
//   BM_RecipeOverlay      a 1 GiB / 50,000-file recipe as a copy-on-write view (the subject)
//   BM_RecipeCopy         the same recipe copied file by file (the old way, the fallback)
//   BM_RecipeSurvey       the walk that finds FIFOs, sockets and devices alone: its share
//
// The goal: a view of the large recipe starts within 50 ms of an empty one. The recipe is
// generated under $TMPDIR (else /var/tmp) before the benchmarks and removed after them;
// SANDGATE_BENCH_RECIPE_FILES and SANDGATE_BENCH_RECIPE_MIB make it smaller for a quick look.
// The page cache is warm (the generator just wrote it), as it is for a recipe used run after run.
//
// Needs root. If the process is killed, `sandgate gc --state-dir <tmp>/state` cleans up.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "core/fd.h"
#include "core/files.h"
#include "core/host_paths.h"
#include "core/log.h"
#include "providers/provider.h"
#include "providers/registry.h"
#include "providers/supervisor.h"
#include "providers/workspace.h"

namespace sandgate::bench {
namespace {

struct Context {
  HostPaths paths;
  std::string recipe;
  uint64_t files = 50'000;
  uint64_t bytes = uint64_t{1} << 30;
};
Context* g = nullptr;

// files regular files in directories of 100, `bytes` in all (one block of random-ish bytes
// written again and again: the copy's cost is the bytes, not their entropy).
Status generate_recipe(const std::string& dir, uint64_t files, uint64_t bytes) {
  SG_TRY(make_dirs(dir, 0755));
  std::string block(bytes / files, '\0');
  uint32_t x = 2463534242u;
  for (char& c : block) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    c = static_cast<char>(x);
  }
  for (uint64_t i = 0; i < files; ++i) {
    std::string sub = dir + "/d" + std::to_string(i / 100);
    if (i % 100 == 0) SG_TRY(make_dirs(sub, 0755));
    SG_TRY(write_file(sub + "/f" + std::to_string(i % 100), block,
                      O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  }
  return {};
}

std::unique_ptr<providers::Provider> make_provider(benchmark::State& state) {
  providers::Registry registry;
  providers::register_builtin_providers(registry);
  providers::ProviderOptions options;
  options.paths = g->paths;
#ifdef SANDGATE_SUPERVISOR
  options.supervisor_exe = SANDGATE_SUPERVISOR;
#endif
  auto provider = registry.create("namespaces", options);
  if (!provider.ok() || !(*provider)->available().ok()) {
    state.SkipWithError("the namespaces provider is not available here (needs root)");
    return nullptr;
  }
  return std::move(provider).value();
}

void start_run(benchmark::State& state, const std::string& recipe, providers::RecipeMode mode,
               const std::string& expect_kind) {
  auto provider = make_provider(state);
  if (!provider) return;
  providers::EnvSpec spec;
  spec.workspace_recipe = recipe;
  spec.recipe_mode = mode;
  for (auto _ : state) {
    auto env = provider->create(spec);
    if (!env.ok()) {
      state.SkipWithError(("create: " + env.error().message()).c_str());
      break;
    }
    if ((*env)->workspace_info().kind != expect_kind) {
      state.SkipWithError(("workspace is " + (*env)->workspace_info().kind + ", not " +
                           expect_kind + ": " + (*env)->workspace_info().note)
                              .c_str());
      break;
    }
    providers::Call call;
    call.argv = {"/bin/true"};
    auto r = (*env)->exec(call, {});
    if (!r.ok() || !r->status.exited || r->status.code != 0) {
      state.SkipWithError("exec /bin/true in the run failed");
      break;
    }
    if (auto s = (*env)->destroy(); !s.ok()) {
      state.SkipWithError(("destroy: " + s.error().message()).c_str());
      break;
    }
  }
}

void BM_EmptyRecipe(benchmark::State& state) {
  start_run(state, "", providers::RecipeMode::kAuto, "empty");
}
void BM_RecipeOverlay(benchmark::State& state) {
  start_run(state, g->recipe, providers::RecipeMode::kOverlay, "overlay");
}
void BM_RecipeCopy(benchmark::State& state) {
  start_run(state, g->recipe, providers::RecipeMode::kCopy, "copy");
}
void BM_RecipeSurvey(benchmark::State& state) {
  for (auto _ : state) {
    auto s = providers::survey_recipe(g->recipe, 1'000'000);
    if (!s.ok()) {
      state.SkipWithError(s.error().message().c_str());
      break;
    }
    benchmark::DoNotOptimize(s->entries);
  }
}

void configure(benchmark::internal::Benchmark* b) {
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_EmptyRecipe)->Apply(configure);
BENCHMARK(BM_RecipeOverlay)->Apply(configure);
BENCHMARK(BM_RecipeSurvey)->Apply(configure);
// Tens of seconds an iteration for 1 GiB: one iteration per repetition, three repetitions.
BENCHMARK(BM_RecipeCopy)->Apply(configure)->Iterations(1)->Repetitions(3);

bool print_summary(const RunCollector& runs, std::ostream& out) {
  char line[256];
  std::snprintf(
      line, sizeof line,
      "\nrecipe_bench summary (median per run start, this run; recipe %llu files, %.0f MiB)\n",
      static_cast<unsigned long long>(g->files), static_cast<double>(g->bytes) / (1 << 20));
  out << line;
  for (const char* n : {"BM_EmptyRecipe", "BM_RecipeOverlay", "BM_RecipeSurvey", "BM_RecipeCopy"}) {
    if (auto e = runs.errors().find(n); e != runs.errors().end()) {
      out << "  " << n << ": FAILED: " << e->second << "\n";
    } else if (auto m = runs.median_ms(n)) {
      std::snprintf(line, sizeof line, "  %-20s %10.2f ms\n", n, *m);
      out << line;
    } else {
      out << "  " << n << ": not run (filtered out)\n";
    }
  }
  auto empty = runs.median_ms("BM_EmptyRecipe"), view = runs.median_ms("BM_RecipeOverlay"),
       copy = runs.median_ms("BM_RecipeCopy");
  if (empty && view && !runs.failed("BM_EmptyRecipe") && !runs.failed("BM_RecipeOverlay")) {
    std::snprintf(line, sizeof line, "  overlay - empty      %10.2f ms (goal: within 50 ms: %s)\n",
                  *view - *empty, *view - *empty <= 50 ? "met" : "NOT met");
    out << line;
  }
  if (view && copy && !runs.failed("BM_RecipeCopy") && *view > 0) {
    std::snprintf(line, sizeof line, "  copy / overlay       %10.1fx\n", *copy / *view);
    out << line;
  }
  return runs.errors().empty();
}

uint64_t env_number(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

}  // namespace
}  // namespace sandgate::bench

int main(int argc, char** argv) {
  if (auto rc = sandgate::providers::maybe_run_supervisor(argc, argv)) return *rc;
  sandgate::init_logging("");
  using namespace sandgate::bench;
  auto display = initialize_with_defaults(argc, argv, default_flags());
  if (!display) return 1;
  auto tmp = make_bench_tmp_dir("sandgate-recipe-bench");
  if (!tmp) return 1;
  Context context;
  context.paths.state_dir = *tmp + "/state";
  context.paths.work_dir = *tmp + "/work";
  context.recipe = *tmp + "/recipe";
  context.files = std::max<uint64_t>(1, env_number("SANDGATE_BENCH_RECIPE_FILES", context.files));
  context.bytes = env_number("SANDGATE_BENCH_RECIPE_MIB", 1024) << 20;
  g = &context;
  int rc = 0;
  if (auto s = generate_recipe(context.recipe, context.files, context.bytes); !s.ok()) {
    std::cerr << "recipe_bench: generating the recipe: " << s.error().message() << "\n";
    rc = 1;
  } else {
    rc = run_benchmarks(*display, print_summary) ? 0 : 1;
  }
  if (auto s = sandgate::remove_tree(*tmp); !s.ok()) {
    std::cerr << "recipe_bench: removing " << *tmp << ": " << s.error().message() << "\n";
    rc = 1;
  }
  return rc;
}
