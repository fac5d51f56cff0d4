// The microvm provider (issue 14), every figure labelled with the accelerator it ran under:
//
//   BM_MicrovmBootToFirstExec   create (QEMU start, kernel boot, agent ready) + exec /bin/true
//                               + destroy (power-off, images removed)
//   BM_MicrovmExecOnly          one call of /bin/true in a live guest through the whole path:
//                               host Supervisor, bridge, virtio-serial, agent, the guest's
//                               supervisor (fork, per-call cgroup, drop, seccomp, exec)
//   BM_MicrovmExecAfterIdle     the same call after 300 ms of idle (untimed), as an agent's calls
//                               come (a burst, then the model thinks)
//   BM_MicrovmBareExecInGuest   the baseline: /bin/true forked and exec'd by a shell inside the
//                               same guest (50 per call; the iteration time is that call's wall
//                               time over 50, so the one call's own overhead is amortised)
//
// Goals: boot to first exec under 5 s with TCG, under 300 ms with KVM; a call under 2 ms more
// than a bare exec in the same guest. The summary prints both, with the accelerator.
//
// Needs root, qemu-system-x86_64 and the guest kernel (ci/bootstrap). Runs keep their state and
// work directories under a fresh temporary directory, removed at the end; if the process is
// killed, `sandgate gc --state-dir <tmp>/state` kills the QEMU it left by its recorded pid.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "bench/bench_support.h"
#include "core/files.h"
#include "core/host_paths.h"
#include "core/log.h"
#include "providers/microvm.h"

namespace sandgate::bench {
namespace {

using providers::Call;
using providers::EnvSpec;
using providers::MicrovmEnvironment;

constexpr int kBareLoop = 50;
HostPaths* g_paths = nullptr;
std::string g_accel;

std::unique_ptr<providers::MicrovmProvider> make_provider(benchmark::State& state) {
  providers::ProviderOptions options;
  options.paths = *g_paths;
  options.supervisor_exe = SANDGATE_SUPERVISOR;
  auto p = std::make_unique<providers::MicrovmProvider>(options);
  if (auto s = p->available(); !s.ok()) {
    state.SkipWithError(("microvm provider unavailable: " + s.error().message()).c_str());
    return nullptr;
  }
  return p;
}

bool exec_ok(benchmark::State& state, providers::Environment& env, std::vector<std::string> argv,
             ExecResult* out = nullptr) {
  Call call;
  call.argv = std::move(argv);
  auto result = env.exec(call, Placement{});
  if (!result.ok()) {
    state.SkipWithError(("exec: " + result.error().message()).c_str());
    return false;
  }
  if (!result->status.exited || result->status.code != 0) {
    state.SkipWithError(("the call ended with " + result->status.describe()).c_str());
    return false;
  }
  if (out) *out = std::move(result).value();
  return true;
}

void BM_MicrovmBootToFirstExec(benchmark::State& state) {
  auto provider = make_provider(state);
  if (!provider) return;
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  for (auto _ : state) {
    auto t0 = Clock::now();
    auto env = provider->create_vm(EnvSpec{});
    if (!env.ok()) {
      state.SkipWithError(("create: " + env.error().message()).c_str());
      break;
    }
    auto t1 = Clock::now();
    g_accel = (*env)->accel() + " " + (*env)->machine();
    if (!exec_ok(state, **env, {"/bin/true"})) break;
    auto t2 = Clock::now();
    if (auto s = (*env)->destroy(); !s.ok()) {
      state.SkipWithError(("destroy: " + s.error().message()).c_str());
      break;
    }
    // The parts of this iteration (one iteration per repetition): host preparation (image
    // cache, workspace image, fork) before QEMU starts, QEMU start to the agent's ready,
    // the first call, power-off and removal.
    double boot = ms((*env)->boot_time());
    state.counters["host_prep_ms"] = ms(t1 - t0) - boot;
    state.counters["qemu_to_ready_ms"] = boot;
    state.counters["first_exec_ms"] = ms(t2 - t1);
    state.counters["destroy_ms"] = ms(Clock::now() - t2);
  }
  state.SetLabel(g_accel);
}

std::unique_ptr<MicrovmEnvironment>& live_env() {
  static std::unique_ptr<MicrovmEnvironment> env;
  return env;
}

MicrovmEnvironment* ensure_live(benchmark::State& state) {
  if (live_env()) return live_env().get();
  auto provider = make_provider(state);
  if (!provider) return nullptr;
  auto env = provider->create_vm(EnvSpec{});
  if (!env.ok()) {
    state.SkipWithError(("create: " + env.error().message()).c_str());
    return nullptr;
  }
  live_env() = std::move(env).value();
  g_accel = live_env()->accel() + " " + live_env()->machine();
  return live_env().get();
}

void BM_MicrovmExecOnly(benchmark::State& state) {
  MicrovmEnvironment* env = ensure_live(state);
  if (!env) return;
  for (auto _ : state) {
    if (!exec_ok(state, *env, {"/bin/true"})) break;
  }
  state.SetLabel(env->accel());
}

// A call after the run was idle for a while, as an agent's calls come (a burst, then the
// model thinks): whatever the guest would do ahead of a call has had time to. Only the call
// is timed.
void BM_MicrovmExecAfterIdle(benchmark::State& state) {
  MicrovmEnvironment* env = ensure_live(state);
  if (!env) return;
  for (auto _ : state) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto t0 = std::chrono::steady_clock::now();
    if (!exec_ok(state, *env, {"/bin/true"})) break;
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.SetLabel(env->accel());
}

void BM_MicrovmBareExecInGuest(benchmark::State& state) {
  MicrovmEnvironment* env = ensure_live(state);
  if (!env) return;
  std::string loop =
      "i=0; while [ $i -lt " + std::to_string(kBareLoop) + " ]; do /bin/true; i=$((i+1)); done";
  for (auto _ : state) {
    ExecResult r;
    if (!exec_ok(state, *env, {"/bin/sh", "-c", loop}, &r)) break;
    state.SetIterationTime(std::chrono::duration<double>(r.wall).count() / kBareLoop);
  }
  state.SetLabel(env->accel());
}

void configure(benchmark::internal::Benchmark* b) {
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

// Three boots, not seven: each is seconds under TCG.
BENCHMARK(BM_MicrovmBootToFirstExec)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1)
    ->Repetitions(3);
BENCHMARK(BM_MicrovmExecOnly)->Apply(configure);
BENCHMARK(BM_MicrovmExecAfterIdle)->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(30);
BENCHMARK(BM_MicrovmBareExecInGuest)->Unit(benchmark::kMillisecond)->UseManualTime();

bool print_summary(const RunCollector& runs, std::ostream& out) {
  const char* names[] = {"BM_MicrovmBootToFirstExec", "BM_MicrovmExecOnly",
                         "BM_MicrovmExecAfterIdle", "BM_MicrovmBareExecInGuest"};
  char line[256];
  out << "\nmicrovm_bench summary (median real time per iteration, this run; accel "
      << (g_accel.empty() ? "?" : g_accel) << ")\n";
  for (const char* n : names) {
    if (auto e = runs.errors().find(n); e != runs.errors().end()) {
      out << "  " << n << ": FAILED: " << e->second << "\n";
    } else if (auto m = runs.median_ms(n)) {
      std::snprintf(line, sizeof line, "  %-30s %10.3f ms (%s)\n", n, *m, g_accel.c_str());
      out << line;
    } else {
      out << "  " << n << ": not run (filtered out)\n";
    }
  }
  auto ok = [&](const char* n) { return runs.median_ms(n) && !runs.failed(n); };
  if (ok("BM_MicrovmBootToFirstExec")) {
    double ms = *runs.median_ms("BM_MicrovmBootToFirstExec");
    double goal = g_accel.starts_with("kvm") ? 300 : 5000;
    std::snprintf(line, sizeof line, "  boot to first exec (%s) %.0f ms  goal < %.0f ms: %s\n",
                  g_accel.c_str(), ms, goal, ms < goal ? "met" : "NOT met");
    out << line;
  }
  // A call against the bare exec in the same guest, with the goal.
  auto per_call = [&](const char* name, const char* what) {
    if (!ok(name) || !ok("BM_MicrovmBareExecInGuest")) return;
    double a = *runs.median_ms(name), b = *runs.median_ms("BM_MicrovmBareExecInGuest");
    std::snprintf(line, sizeof line,
                  "  %s (%s): sandgate %.3f ms, bare exec in the guest %.3f ms, added %.3f ms"
                  "  goal < 2 ms: %s\n",
                  what, g_accel.c_str(), a, b, a - b, a - b < 2.0 ? "met" : "NOT met");
    out << line;
  };
  per_call("BM_MicrovmExecOnly", "per call");
  per_call("BM_MicrovmExecAfterIdle", "per call after 300 ms idle");
  return runs.errors().empty();
}

}  // namespace
}  // namespace sandgate::bench

int main(int argc, char** argv) {
  if (auto rc = sandgate::providers::maybe_run_supervisor(argc, argv)) return *rc;
  sandgate::init_logging("");
  using namespace sandgate::bench;
  auto display = initialize_with_defaults(argc, argv, default_flags());
  if (!display) return 1;
  auto tmp = make_bench_tmp_dir("sandgate-microvm-bench");
  if (!tmp) return 1;
  const std::string tmp_dir = *tmp;
  sandgate::HostPaths paths;
  paths.state_dir = tmp_dir + "/state";
  paths.work_dir = tmp_dir + "/work";
  g_paths = &paths;
  int rc = run_benchmarks(*display, print_summary) ? 0 : 1;
  if (live_env()) {
    if (auto s = live_env()->destroy(); !s.ok()) {
      std::cerr << "microvm_bench: destroying the live run: " << s.error().message() << "\n";
      rc = 1;
    }
    live_env().reset();
  }
  if (auto s = sandgate::remove_tree(tmp_dir); !s.ok()) {
    std::cerr << "microvm_bench: removing " << tmp_dir << ": " << s.error().message() << "\n";
    rc = 1;
  }
  return rc;
}
