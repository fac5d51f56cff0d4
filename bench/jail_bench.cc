// A/B benchmark of the namespace jail, all in one run (docs/STYLE.md: performance is judged A/B
// against a baseline, not against an absolute number; firecracker's A/B tests):
//
//   BM_BareForkExec                 fork+exec /bin/true and wait: the floor
//   BM_Bwrap                        the same /bin/true in a bubblewrap sandbox: the baseline
//   BM_SupervisorBinaryStart        fork+exec the run's supervisor binary, which exits at once
//                                   without its arguments: what starting it costs every run
//                                   (twice: the supervisor and its /proc views server), as a
//                                   ratio to BM_BareForkExec
//   BM_SandgateBinaryStart          fork+exec `sandgate` with no subcommand (it says one is
//                                   required and exits 2): what a command (a client of
//                                   `serve`, say) pays before it does anything
//   BM_NamespacesCreateExecDestroy  a whole namespaces run for one call: the subject
//   BM_NamespacesExecOnly           one more call in a run that already exists
//   BM_NamespacesExecOnlyHeld       the same call held by the host before its exec (as for a
//                                   placement): its process is a fork of the supervisor, where
//                                   the call above shares its memory until the exec (a vfork,
//                                   providers/call_child.h): the baseline of that
//   BM_HostDirCreateExecDestroy     host_dir (no isolation): the run bookkeeping alone
//   BM_NamespacesNoLandlockCreateExecDestroy, BM_NamespacesNoLandlockExecOnly
//                                   the same two without the Landlock layer (the no_landlock
//                                   weakening): the baseline of Landlock's own cost
//   BM_NamespacesNoProcViewsCreateExecDestroy
//                                   the subject without the run's own /proc views
//                                   (--no-proc-views): the baseline of the views' per-run cost
//                                   (a FUSE server started, mounted, stopped per run)
//   BM_NamespacesNoSysinfoExecOnly  one more call with the views but without the sysinfo(2)
//                                   listener (ProviderOptions::answer_sysinfo false): the
//                                   baseline of its per-call cost (the third seccomp program
//                                   installed with a listener, the listener sent to the views
//                                   server, which takes it and later closes it)
//   BM_NamespacesNoProcViewsExecOnly
//                                   one more call without the views (and so without the
//                                   listener either)
//   BM_RecordRewrite                one rewrite of a run record (RunState::save: written, then
//                                   exchanged with the old file, which is removed), several of
//                                   which every run makes
//   BM_RecordRenameOver             the same bytes renamed over the old file: the baseline (on
//                                   ext4, auto_da_alloc starts writeback inside that rename)
//   BM_NamespacesWorkspaceFsCreateExecDestroy
//                                   the subject with --workspace-size 1GiB (an ext4 image on a
//                                   loop device per run): the cost of the workspace filesystem,
//                                   as a ratio to BM_NamespacesCreateExecDestroy
//
// The goal the subject is held to: no slower than bubblewrap while also applying seccomp, a
// generated /etc, a workspace and the run record. After the run, the medians and the ratios
// namespaces/bwrap and namespaces/bare are printed from the same run's results.
//
// Needs root (the namespaces provider maps ids and assembles mounts). Runs keep their state
// and work directories under a fresh temporary directory, removed at the end; if the process
// is killed, `sandgate gc --state-dir <tmp>/state` cleans up after it.
#include <benchmark/benchmark.h>
#include <fcntl.h>
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

#include "bench/bench_support.h"
#include "bench/bwrap_baseline.h"
#include "core/files.h"
#include "core/host_features.h"
#include "core/host_paths.h"
#include "core/json.h"
#include "core/log.h"
#include "core/process.h"
#include "providers/provider.h"
#include "providers/registry.h"
#include "providers/supervisor.h"
#include "providers/weakening.h"

namespace sandgate::bench {
namespace {

using providers::Call;
using providers::Environment;
using providers::EnvSpec;
using providers::Provider;
using providers::ProviderOptions;

// The bubblewrap baseline: bench/bwrap_baseline.h (`sandgate bench` runs the same one).
const std::vector<std::string>& kBwrapArgv = kBwrapBaselineArgv;

// Set up by main() before any benchmark runs.
struct BenchContext {
  HostPaths paths;                   // state_dir and work_dir under a temporary directory
  std::optional<std::string> bwrap;  // absolute path, if installed
};
BenchContext* g_context = nullptr;

// Runs argv on the host and waits; false (with the benchmark marked as failed) unless it
// exited with `expect`.
bool run_host(benchmark::State& state, const std::vector<std::string>& argv, int expect = 0,
              const SpawnOptions& options = {}) {
  auto child = spawn(argv, options);
  if (!child.ok()) {
    state.SkipWithError(("spawn " + argv[0] + ": " + child.error().message()).c_str());
    return false;
  }
  auto status = child->wait();
  if (!status.ok()) {
    state.SkipWithError(("wait " + argv[0] + ": " + status.error().message()).c_str());
    return false;
  }
  if (!status->exited || status->code != expect) {
    state.SkipWithError((argv[0] + " ended with " + status->describe()).c_str());
    return false;
  }
  return true;
}

// `weakenings`: only the no_landlock A/B pair sets one. This binary is a measurement, not a
// command: no user reaches ProviderOptions::self_test_weakenings through it.
std::unique_ptr<Provider> make_provider(benchmark::State& state, const std::string& name,
                                        bool weakenings = false, bool proc_views = true,
                                        bool answer_sysinfo = true) {
  providers::Registry registry;
  providers::register_builtin_providers(registry);
  ProviderOptions options;
  options.paths = g_context->paths;
  options.allow_unsafe_host = name == "host_dir";
  options.self_test_weakenings = weakenings;
  options.proc_views = proc_views;
  options.answer_sysinfo = answer_sysinfo;
#ifdef SANDGATE_SUPERVISOR
  // The production supervisor is sandgate-supervisor, not this benchmark binary re-executed
  // (which also loads libbenchmark): measure that one.
  options.supervisor_exe = SANDGATE_SUPERVISOR;
#endif
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

// One /bin/true call in `env`; false (benchmark failed) unless it exited 0. `held`: the host
// holds the call's process before its exec (Call::on_started, here doing nothing), as it does
// to place a call in its cgroups, so the supervisor forks it (call_child.h).
bool exec_true(benchmark::State& state, Environment& env, bool held = false) {
  Call call;
  call.argv = {"/bin/true"};
  if (held) call.on_started = [](pid_t) {};
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
void create_exec_destroy(benchmark::State& state, const std::string& provider_name,
                         const EnvSpec& spec = {}, bool proc_views = true) {
  auto provider = make_provider(state, provider_name, !spec.weakenings.empty(), proc_views);
  if (!provider) return;
  for (auto _ : state) {
    auto env = provider->create(spec);
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

void BM_SupervisorBinaryStart(benchmark::State& state) {
  // Without the supervisor's arguments it exits 2 before doing anything (cli/supervisor_main.cc).
  for (auto _ : state) {
    if (!run_host(state, {SANDGATE_SUPERVISOR}, 2)) break;
  }
}

void BM_SandgateBinaryStart(benchmark::State& state) {
  UniqueFd null(::open("/dev/null", O_WRONLY | O_CLOEXEC));
  if (!null.valid()) {
    state.SkipWithError("open /dev/null for sandgate's usage message");
    return;
  }
  for (auto _ : state) {
    if (!run_host(state, {SANDGATE_BIN}, 2, {.out_fd = null.get()})) break;
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

void exec_only(benchmark::State& state, const EnvSpec& spec = {}, bool proc_views = true,
               bool answer_sysinfo = true, bool held = false) {
  auto provider =
      make_provider(state, "namespaces", !spec.weakenings.empty(), proc_views, answer_sysinfo);
  if (!provider) return;
  auto env = provider->create(spec);
  if (!env.ok()) {
    state.SkipWithError(("create: " + env.error().message()).c_str());
    return;
  }
  for (auto _ : state) {
    if (!exec_true(state, **env, held)) break;
  }
  if (auto s = (*env)->destroy(); !s.ok())
    state.SkipWithError(("destroy: " + s.error().message()).c_str());
}

void BM_NamespacesExecOnly(benchmark::State& state) { exec_only(state); }

void BM_NamespacesExecOnlyHeld(benchmark::State& state) {
  exec_only(state, {}, true, true, /*held=*/true);
}

EnvSpec without_landlock() {
  EnvSpec spec;
  spec.weakenings = {providers::Weakening::kNoLandlock};
  return spec;
}

void BM_NamespacesNoLandlockCreateExecDestroy(benchmark::State& state) {
  create_exec_destroy(state, "namespaces", without_landlock());
}

void BM_NamespacesNoLandlockExecOnly(benchmark::State& state) {
  exec_only(state, without_landlock());
}

void BM_NamespacesNoProcViewsCreateExecDestroy(benchmark::State& state) {
  create_exec_destroy(state, "namespaces", {}, /*proc_views=*/false);
}

void BM_NamespacesNoSysinfoExecOnly(benchmark::State& state) {
  exec_only(state, {}, /*proc_views=*/true, /*answer_sysinfo=*/false);
}

void BM_NamespacesNoProcViewsExecOnly(benchmark::State& state) {
  exec_only(state, {}, /*proc_views=*/false);
}

void BM_NamespacesWorkspaceFsCreateExecDestroy(benchmark::State& state) {
  EnvSpec spec;
  spec.workspace_size = uint64_t{1} << 30;
  create_exec_destroy(state, "namespaces", spec);
}

void BM_HostDirCreateExecDestroy(benchmark::State& state) {
  create_exec_destroy(state, "host_dir");
}

// What a run record looks like (RunState::save): a run with the resources of a namespaces run.
Json record_like() {
  Json resources = Json::array();
  for (const char* kind : {"directory", "id_range", "cgroup", "cgroup", "process", "process"})
    resources.push_back({{"kind", kind},
                         {"path", g_context->paths.work_dir + "/rmxb6eh629w1b/something"},
                         {"pid", 12345},
                         {"start_time", 1234567}});
  return {{"schema_version", 1}, {"run_id", "rmxb6eh629w1b"}, {"provider", "namespaces"},
          {"owner_pid", 1234},   {"owner_start", 1234567},    {"resources", resources}};
}

// One rewrite of a run record as RunState does it (write_json_file_atomic, kCrashSafe: the new
// file exchanged with the old, which is then removed), in the state directory.
void BM_RecordRewrite(benchmark::State& state) {
  const std::string path = g_context->paths.state_dir + "/bench-record.json";
  if (auto s = make_dirs(g_context->paths.state_dir, 0755); !s.ok()) {
    state.SkipWithError(s.error().message().c_str());
    return;
  }
  const Json record = record_like();
  for (auto _ : state) {
    if (auto s = write_json_file_atomic(path, record, Durability::kCrashSafe); !s.ok()) {
      state.SkipWithError(s.error().message().c_str());
      break;
    }
  }
  ::unlink(path.c_str());
}

// The baseline: the same bytes written to a temporary file renamed over the old one (as every
// rewrite did before), which on ext4 (auto_da_alloc) starts the new file's writeback inside
// rename(2).
void BM_RecordRenameOver(benchmark::State& state) {
  const std::string path = g_context->paths.state_dir + "/bench-record-renamed.json";
  if (auto s = make_dirs(g_context->paths.state_dir, 0755); !s.ok()) {
    state.SkipWithError(s.error().message().c_str());
    return;
  }
  const std::string tmp = path + ".tmp";
  const std::string text = dump_json(record_like(), 2) + "\n";
  for (auto _ : state) {
    auto s = write_file(tmp, text, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (!s.ok() || std::rename(tmp.c_str(), path.c_str()) != 0) {
      state.SkipWithError(s.ok() ? "rename" : s.error().message().c_str());
      break;
    }
  }
  ::unlink(path.c_str());
}

// Repetitions, min time and aggregates-only are defaults given as flags (see main), not fixed
// here, so that --benchmark_repetitions and --benchmark_min_time still work on the command line.
void configure(benchmark::internal::Benchmark* b) {
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_BareForkExec)->Apply(configure);
BENCHMARK(BM_Bwrap)->Apply(configure);
BENCHMARK(BM_SupervisorBinaryStart)->Apply(configure);
BENCHMARK(BM_SandgateBinaryStart)->Apply(configure);
BENCHMARK(BM_NamespacesCreateExecDestroy)->Apply(configure);
BENCHMARK(BM_NamespacesExecOnly)->Apply(configure);
BENCHMARK(BM_NamespacesExecOnlyHeld)->Apply(configure);
BENCHMARK(BM_HostDirCreateExecDestroy)->Apply(configure);
BENCHMARK(BM_RecordRewrite)->Apply(configure);
BENCHMARK(BM_RecordRenameOver)->Apply(configure);
BENCHMARK(BM_NamespacesNoLandlockCreateExecDestroy)->Apply(configure);
BENCHMARK(BM_NamespacesNoLandlockExecOnly)->Apply(configure);
BENCHMARK(BM_NamespacesNoProcViewsCreateExecDestroy)->Apply(configure);
BENCHMARK(BM_NamespacesNoProcViewsExecOnly)->Apply(configure);
BENCHMARK(BM_NamespacesNoSysinfoExecOnly)->Apply(configure);
BENCHMARK(BM_NamespacesWorkspaceFsCreateExecDestroy)->Apply(configure);

// The summary: the medians and the ratios namespaces/bwrap and namespaces/bare, from the same
// run's results. Returns false if a benchmark failed (so the binary exits non-zero: never pass
// quietly).
bool print_summary(const RunCollector& runs, std::ostream& out) {
  const char* names[] = {"BM_BareForkExec",
                         "BM_Bwrap",
                         "BM_SupervisorBinaryStart",
                         "BM_SandgateBinaryStart",
                         "BM_NamespacesCreateExecDestroy",
                         "BM_NamespacesExecOnly",
                         "BM_NamespacesExecOnlyHeld",
                         "BM_HostDirCreateExecDestroy",
                         "BM_NamespacesNoLandlockCreateExecDestroy",
                         "BM_NamespacesNoLandlockExecOnly",
                         "BM_NamespacesNoProcViewsCreateExecDestroy",
                         "BM_NamespacesNoProcViewsExecOnly",
                         "BM_NamespacesNoSysinfoExecOnly",
                         "BM_NamespacesWorkspaceFsCreateExecDestroy"};
  char line[256];
  out << "\njail_bench summary (median real time per iteration, this run)\n";
  for (const char* n : names) {
    if (auto e = runs.errors().find(n); e != runs.errors().end()) {
      out << "  " << n << ": FAILED: " << e->second << "\n";
    } else if (auto m = runs.median_ms(n)) {
      std::snprintf(line, sizeof line, "  %-42s %9.3f ms\n", n, *m);
      out << line;
    } else {
      out << "  " << n << ": not run (filtered out)\n";
    }
  }
  auto ratio = [&](const char* label, const char* a, const char* b) {
    auto x = runs.median_ms(a), y = runs.median_ms(b);
    if (!x || !y || runs.failed(a) || runs.failed(b) || *y <= 0) return;
    std::snprintf(line, sizeof line, "  %-44s %7.2fx\n", label, *x / *y);
    out << line;
  };
  out << "ratios\n";
  ratio("namespaces/bwrap (create+exec+destroy)", "BM_NamespacesCreateExecDestroy", "BM_Bwrap");
  ratio("namespaces/bare  (create+exec+destroy)", "BM_NamespacesCreateExecDestroy",
        "BM_BareForkExec");
  ratio("namespaces exec-only/bwrap", "BM_NamespacesExecOnly", "BM_Bwrap");
  ratio("namespaces exec-only/bare", "BM_NamespacesExecOnly", "BM_BareForkExec");
  ratio("exec-only: vfork child/held (forked) one", "BM_NamespacesExecOnly",
        "BM_NamespacesExecOnlyHeld");
  ratio("bwrap/bare", "BM_Bwrap", "BM_BareForkExec");
  ratio("supervisor binary start/bare", "BM_SupervisorBinaryStart", "BM_BareForkExec");
  ratio("sandgate binary start/bare", "BM_SandgateBinaryStart", "BM_BareForkExec");
  ratio("host_dir/bare    (create+exec+destroy)", "BM_HostDirCreateExecDestroy", "BM_BareForkExec");
  ratio("landlock/no landlock (create+exec+destroy)", "BM_NamespacesCreateExecDestroy",
        "BM_NamespacesNoLandlockCreateExecDestroy");
  ratio("landlock/no landlock (exec only)", "BM_NamespacesExecOnly",
        "BM_NamespacesNoLandlockExecOnly");
  ratio("proc views/no proc views (create+exec+destroy)", "BM_NamespacesCreateExecDestroy",
        "BM_NamespacesNoProcViewsCreateExecDestroy");
  ratio("sysinfo listener/none (exec only)", "BM_NamespacesExecOnly",
        "BM_NamespacesNoSysinfoExecOnly");
  ratio("proc views/no proc views (exec only)", "BM_NamespacesExecOnly",
        "BM_NamespacesNoProcViewsExecOnly");
  ratio("workspace fs/host dir (create+exec+destroy)", "BM_NamespacesWorkspaceFsCreateExecDestroy",
        "BM_NamespacesCreateExecDestroy");
  ratio("run record rewrite: exchange/rename over", "BM_RecordRewrite", "BM_RecordRenameOver");
  auto ns = runs.median_ms("BM_NamespacesCreateExecDestroy"), bw = runs.median_ms("BM_Bwrap");
  if (ns && bw && !runs.failed("BM_NamespacesCreateExecDestroy") && !runs.failed("BM_Bwrap"))
    out << "goal (namespaces no slower than bwrap): " << (*ns <= *bw ? "met" : "NOT met") << "\n";
  return runs.errors().empty();
}

}  // namespace
}  // namespace sandgate::bench

int main(int argc, char** argv) {
  // The providers' supervisor is this binary re-executed: it must not parse benchmark flags.
  if (auto rc = sandgate::providers::maybe_run_supervisor(argc, argv)) return *rc;
  sandgate::init_logging("");
  using namespace sandgate::bench;

  auto display = initialize_with_defaults(argc, argv, default_flags());
  if (!display) return 1;

  // State and work directories of every run (traversable by the jail's mapped root).
  auto tmp = make_bench_tmp_dir("sandgate-jail-bench");
  if (!tmp) return 1;
  const std::string tmp_dir = *tmp;
  BenchContext context;
  context.paths = sandgate::HostPaths{};
  context.paths.state_dir = tmp_dir + "/state";
  context.paths.work_dir = tmp_dir + "/work";
  context.bwrap = sandgate::find_on_path(
      "bwrap", std::getenv("PATH") ? std::getenv("PATH") : "/usr/local/bin:/usr/bin:/bin");
  g_context = &context;

  int rc = run_benchmarks(*display, print_summary) ? 0 : 1;
  if (auto s = sandgate::remove_tree(tmp_dir); !s.ok()) {
    std::cerr << "jail_bench: removing " << tmp_dir << ": " << s.error().message() << "\n";
    rc = 1;
  }
  return rc;
}
