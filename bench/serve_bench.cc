// The whole `sandgate exec --socket` process against bubblewrap (issue 15: "no slower than
// bubblewrap for a warm start, within 2x cold"), all in one run, interleaved:
//
//   BM_Bwrap                 bwrap with the baseline jail_bench holds the namespaces provider
//                            to (bwrap_baseline.h), /bin/true: the baseline
//   BM_BwrapRootBind         `bwrap --unshare-all --ro-bind / / /bin/true`: the issue's own
//   BM_ExecSocketPooled      `sandgate exec --socket S --provider namespaces -- /bin/true` on a
//                            `serve --pool 2` that has learned the shape: the create is answered
//                            by a run made ahead (warm start)
//   BM_ExecSocketCold        the same on a serve without a pool: the run is opened on the call's
//                            path (cold start through a server)
//   BM_ExecCold              `sandgate exec --provider namespaces -- /bin/true`: no server at all
//
// Each iteration is one whole process, from spawn to reaped, and is followed by an untimed pause
// (kPause) in every benchmark alike: the pool refills and the run just destroyed is removed
// while nothing is timed, as between the calls of an agent. The summary prints the medians and
// their ratios to bwrap, from this very run.
//
// Needs root; uses the sandgate and sandgate-supervisor binaries of this build. Servers keep
// their state and work directories under a fresh temporary directory, removed at the end; if
// the process is killed, `sandgate gc --state-dir <tmp>/state-*` cleans up after it.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_support.h"
#include "bench/bwrap_baseline.h"
#include "core/files.h"
#include "core/host_features.h"
#include "core/process.h"

namespace sandgate::bench {
namespace {

constexpr auto kPause = std::chrono::milliseconds(100);

struct Server {
  std::string socket;
  std::vector<std::string> globals;  // --state-dir, --work-dir
  ChildProcess process;
};

struct BenchContext {
  std::string tmp_dir;
  std::optional<std::string> bwrap;
  std::optional<Server> pooled, plain;
  std::string error;  // why the servers could not start
};
BenchContext* g_context = nullptr;

std::vector<std::string> globals_for(const std::string& tmp, const std::string& name) {
  return {SANDGATE_BINARY, "--state-dir", tmp + "/state-" + name, "--work-dir",
          tmp + "/work-" + name};
}

Result<Server> start_server(const std::string& tmp, const std::string& name,
                            std::vector<std::string> extra) {
  Server s;
  s.socket = tmp + "/" + name + ".sock";
  s.globals = globals_for(tmp, name);
  std::vector<std::string> argv = s.globals;
  argv.insert(argv.end(), {"serve", "--socket", s.socket});
  argv.insert(argv.end(), extra.begin(), extra.end());
  SpawnOptions options;
  options.out_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  auto child = spawn(argv, options);
  ::close(options.out_fd);
  if (!child.ok()) return std::move(child).error();
  s.process = std::move(child).value();
  for (int i = 0; i < 500 && ::access(s.socket.c_str(), F_OK) != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (::access(s.socket.c_str(), F_OK) != 0) return logic_error("serve", "no socket after 5 s");
  return s;
}

void stop_server(Server& s) {
  (void)s.process.signal(SIGTERM);
  (void)s.process.wait_for(std::chrono::seconds(30));
  s.process.kill_and_reap();
  std::vector<std::string> gc = s.globals;
  gc.push_back("gc");
  (void)run_command(gc);
}

// One whole process, timed from spawn to reaped; false (and the benchmark's error) if it failed.
bool timed(benchmark::State& state, const std::vector<std::string>& argv) {
  auto start = std::chrono::steady_clock::now();
  auto child = spawn(argv);
  if (!child.ok()) {
    state.SkipWithError(("spawn: " + child.error().message()).c_str());
    return false;
  }
  auto status = child->wait();
  auto took = std::chrono::steady_clock::now() - start;
  if (!status.ok() || status->shell_code() != 0) {
    state.SkipWithError((argv[0] + " " + argv[1] + ": did not exit 0").c_str());
    return false;
  }
  state.SetIterationTime(std::chrono::duration<double>(took).count());
  std::this_thread::sleep_for(kPause);
  return true;
}

void run_all(benchmark::State& state, const std::vector<std::string>& argv) {
  for (auto _ : state)
    if (!timed(state, argv)) break;
}

void BM_Bwrap(benchmark::State& state) {
  if (!g_context->bwrap) return state.SkipWithError("bwrap is not installed: no baseline");
  std::vector<std::string> argv = kBwrapBaselineArgv;
  argv[0] = *g_context->bwrap;
  run_all(state, argv);
}

void BM_BwrapRootBind(benchmark::State& state) {
  if (!g_context->bwrap) return state.SkipWithError("bwrap is not installed: no baseline");
  run_all(state, {*g_context->bwrap, "--unshare-all", "--ro-bind", "/", "/", "/bin/true"});
}

std::vector<std::string> exec_socket(const Server& s) {
  return {SANDGATE_BINARY, "exec",       "--socket", s.socket,
          "--provider",    "namespaces", "--",       "/bin/true"};
}

void BM_ExecSocketPooled(benchmark::State& state) {
  if (!g_context->pooled || !g_context->error.empty())
    return state.SkipWithError(g_context->error.c_str());
  run_all(state, exec_socket(*g_context->pooled));
}

void BM_ExecSocketCold(benchmark::State& state) {
  if (!g_context->plain) return state.SkipWithError(g_context->error.c_str());
  run_all(state, exec_socket(*g_context->plain));
}

void BM_ExecCold(benchmark::State& state) {
  std::vector<std::string> argv = globals_for(g_context->tmp_dir, "exec");
  argv.insert(argv.end(), {"exec", "--provider", "namespaces", "--", "/bin/true"});
  run_all(state, argv);
}

BENCHMARK(BM_Bwrap)->UseManualTime()->Iterations(20)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BwrapRootBind)->UseManualTime()->Iterations(20)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExecSocketPooled)->UseManualTime()->Iterations(20)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExecSocketCold)->UseManualTime()->Iterations(20)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExecCold)->UseManualTime()->Iterations(20)->Unit(benchmark::kMillisecond);

bool print_summary(const RunCollector& runs, std::ostream& out) {
  const char* names[] = {"BM_Bwrap", "BM_BwrapRootBind", "BM_ExecSocketPooled", "BM_ExecSocketCold",
                         "BM_ExecCold"};
  char line[256];
  out << "\nserve_bench summary (median whole-process time, this run)\n";
  for (const char* n : names) {
    if (auto e = runs.errors().find(n); e != runs.errors().end()) {
      out << "  " << n << ": FAILED: " << e->second << "\n";
    } else if (auto m = runs.median_ms(n)) {
      std::snprintf(line, sizeof line, "  %-22s %8.2f ms\n", n, *m);
      out << line;
    } else {
      out << "  " << n << ": not run (filtered out)\n";
    }
  }
  auto ratio = [&](const char* label, const char* a, const char* b, const char* goal) {
    auto x = runs.median_ms(a), y = runs.median_ms(b);
    if (!x || !y || runs.failed(a) || runs.failed(b) || *y <= 0) return;
    std::snprintf(line, sizeof line, "  %-36s %6.2fx  (goal %s)\n", label, *x / *y, goal);
    out << line;
  };
  out << "ratios to bwrap\n";
  ratio("exec --socket, pool / bwrap", "BM_ExecSocketPooled", "BM_Bwrap", "<= 1");
  ratio("exec --socket, pool / bwrap / ro", "BM_ExecSocketPooled", "BM_BwrapRootBind", "<= 1");
  ratio("exec --socket, no pool / bwrap", "BM_ExecSocketCold", "BM_Bwrap", "<= 2");
  ratio("exec, no server / bwrap", "BM_ExecCold", "BM_Bwrap", "<= 2");
  return runs.errors().empty();
}

}  // namespace
}  // namespace sandgate::bench

int main(int argc, char** argv) {
  using namespace sandgate::bench;
  // Each iteration is a whole process of 5-80 ms: repetitions of 20 iterations (registered).
  auto display = initialize_with_defaults(
      argc, argv,
      {"--benchmark_repetitions=5", "--benchmark_report_aggregates_only=true",
       "--benchmark_enable_random_interleaving=true"});
  if (!display) return 1;
  if (::geteuid() != 0) {
    std::cerr << "serve_bench: needs root (the namespaces provider, cgroups)\n";
    return 1;
  }
  auto tmp = make_bench_tmp_dir("sandgate-serve-bench");
  if (!tmp) return 1;
  // Its own cgroup root: never the real "sandgate" tree.
  ::setenv("SANDGATE_CGROUP_ROOT", ("sandgate-bench-" + std::to_string(::getpid())).c_str(), 1);
  BenchContext context;
  context.tmp_dir = *tmp;
  context.bwrap = sandgate::find_on_path(
      "bwrap", std::getenv("PATH") ? std::getenv("PATH") : "/usr/local/bin:/usr/bin:/bin");
  auto pooled = start_server(*tmp, "pooled", {"--pool", "2"});
  auto plain = start_server(*tmp, "plain", {});
  if (pooled.ok() && plain.ok()) {
    context.pooled.emplace(std::move(pooled).value());
    context.plain.emplace(std::move(plain).value());
    // The pooled server learns the shape from one create made cold.
    auto learn = sandgate::run_command(exec_socket(*context.pooled));
    if (!learn.ok() || learn->status.shell_code() != 0) context.error = "the first exec failed";
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  } else {
    context.error = "serve: " + (pooled.ok() ? plain.error() : pooled.error()).message();
  }
  g_context = &context;

  int rc = run_benchmarks(*display, print_summary) ? 0 : 1;
  for (auto* s : {&context.pooled, &context.plain})
    if (*s) stop_server(**s);
  (void)sandgate::run_command([&] {
    auto gc = globals_for(*tmp, "exec");
    gc.push_back("gc");
    return gc;
  }());
  if (auto s = sandgate::remove_tree(*tmp); !s.ok()) {
    std::cerr << "serve_bench: removing " << *tmp << ": " << s.error().message() << "\n";
    rc = 1;
  }
  return rc;
}
