// Load through one `sandgate serve` (issue 16): many runs at once, each an orchestrator client
// on its own connection replaying the calls of a recorded trace, and the server watched from
// outside meanwhile. Shared by the benchmark (load_bench's BM_Serve, `make load`: 50 runs,
// 10,000 calls, figures) and the short check in `make test` (tests/chaos_load_test.cc: no call
// lost, no descriptor growth over a few hundred calls).
//
// What is measured:
//   lost         calls that got no outcome (an error reply, a broken connection): must be 0
//   interval     per call, the monitor's mean sampling interval: its wall time over the samples
//                it got (observed.samples counts the monitor's samples plus one last read at
//                the end), against the policy's 20 ms; lag = interval - 20 ms
//   rss, fds     the server's resident set (/proc/PID/statm) and open descriptors
//                (/proc/PID/fd) every 100 ms, with the calls completed and the runs open by
//                then; a leak shows as a slope, fitted by least squares over the calls after
//                the warm-up (the first 10%: allocator arenas and per-thread caches grow once)
//                while every run is open (descriptors follow the runs open: a fit across the
//                ramp-up measured how fast runs were created)
//
// The calls are the traces' calls as shapes: each keeps its intent, and its duration (divided
// by `time_scale`, clamped to [min_call, max_call]) is spent in `sleep` inside the namespaces
// jail, so that the server's own work (cgroups, placement, the monitor, the protocol) is what
// loads the machine.
#pragma once

#include <dirent.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/files.h"
#include "core/json.h"
#include "core/process.h"
#include "core/stats.h"
#include "session/client.h"

namespace sandgate::bench {

struct ServeLoadOptions {
  std::string sandgate;    // the binary
  std::string source_dir;  // for traces/*.trace
  std::string tmp_dir;     // state, work and socket live here
  std::string cgroup_root;
  int runs = 50;
  int calls = 10000;
  double time_scale = 10;
  int min_call_ms = 60;
  int max_call_ms = 400;
  double interval_ms = 20;  // the policy's monitor interval (built-in policy)
};

struct ServeLoadSample {
  double calls = 0;  // completed by then
  double rss_kib = 0;
  double fds = 0;
  int open_runs = 0;  // created and not yet destroyed, by then
};

struct ServeLoadResult {
  int calls_done = 0;  // got an outcome
  int lost = 0;
  std::vector<std::string> lost_examples;
  int runs_failed = 0;              // create refused (their calls are counted as lost)
  std::vector<double> interval_ms;  // per call with >= 3 samples
  std::vector<ServeLoadSample> samples;
  double wall_s = 0;
  double rss_slope_kib_per_1000 = 0;
  double fd_slope_per_1000 = 0;
  double rss_first_kib = 0, rss_last_kib = 0, fds_first = 0, fds_last = 0, fds_max = 0;
  // The first sample after the warm-up: what the server opens once (the monitor's host PSI
  // file, a connection's first buffers) is open by then.
  double fds_warm = 0, rss_warm_kib = 0;
  // What the server's descriptors lead to ("socket:[..]", a path), sorted: in the first sample
  // and once every run was destroyed. What the second has more of is what stayed open.
  std::vector<std::string> fd_targets_first, fd_targets_last;
  int server_exit = -1;  // the server's exit code after end of input (0 expected)
  std::string error;     // the benchmark itself could not run
};

// Least-squares slope of y over x for the samples with x >= from and `open_runs` runs open
// (the server's descriptors follow how many runs are open: a fit across the ramp-up or the
// end, when runs open and close, measures that, not a leak).
inline double fitted_slope(const std::vector<ServeLoadSample>& s, double from, int open_runs,
                           double ServeLoadSample::*y) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& p : s) {
    if (p.calls < from || p.open_runs != open_runs) continue;
    n += 1;
    sx += p.calls;
    sy += p.*y;
    sxx += p.calls * p.calls;
    sxy += p.calls * (p.*y);
  }
  double d = n * sxx - sx * sx;
  return n >= 3 && d > 0 ? (n * sxy - sx * sy) / d : 0;
}

// (intent, duration ms) of every call in the traces under <source>/traces, one list per trace.
inline std::vector<std::vector<std::pair<std::string, int>>> trace_call_shapes(
    const std::string& source_dir) {
  std::vector<std::vector<std::pair<std::string, int>>> out;
  std::string dir = source_dir + "/traces";
  std::vector<std::string> files;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.ends_with(".trace")) files.push_back(dir + "/" + n);
    }
    ::closedir(d);
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    auto text = read_file(f, 64 << 20);
    if (!text.ok()) continue;
    std::vector<std::pair<std::string, int>> calls;
    size_t pos = 0;
    while (pos < text->size()) {
      size_t nl = text->find('\n', pos);
      if (nl == std::string::npos) nl = text->size();
      auto j = Json::parse(text->substr(pos, nl - pos), nullptr, false);
      pos = nl + 1;
      if (j.is_discarded() || !j.is_object() || j.value("type", "") != "call") continue;
      calls.emplace_back(j.value("intent", "default"),
                         static_cast<int>(j.value("end_ms", 0LL) - j.value("start_ms", 0LL)));
    }
    if (!calls.empty()) out.push_back(std::move(calls));
  }
  return out;
}

inline double resident_kib(pid_t pid) {
  auto statm = read_file("/proc/" + std::to_string(pid) + "/statm", 256);
  unsigned long long size = 0, resident = 0;
  if (!statm.ok() || std::sscanf(statm->c_str(), "%llu %llu", &size, &resident) != 2) return 0;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / 1024.0;
}

// "socket:[123]" -> "socket", "anon_inode:[eventfd]" stays, a path stays: sorted.
inline std::vector<std::string> fd_targets(pid_t pid) {
  std::vector<std::string> out;
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = ::opendir(dir.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      char buf[512];
      ssize_t n = ::readlink((dir + "/" + e->d_name).c_str(), buf, sizeof buf - 1);
      if (n < 0) continue;
      std::string t(buf, static_cast<size_t>(n));
      for (const char* kind : {"socket:[", "pipe:[", "pidfd:["})
        if (t.rfind(kind, 0) == 0) t = std::string(kind).substr(0, std::strlen(kind) - 2);
      out.push_back(t);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

inline int count_dir_entries(const std::string& dir) {
  int n = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (struct dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n;
}

inline double open_fds(pid_t pid) {
  double n = 0;
  if (DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str())) {
    while (struct dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n;
}

inline ServeLoadResult run_serve_load(const ServeLoadOptions& o) {
  ServeLoadResult res;
  auto shapes = trace_call_shapes(o.source_dir);
  if (shapes.empty()) {
    res.error = "no trace with calls under " + o.source_dir + "/traces";
    return res;
  }
  std::string socket = o.tmp_dir + "/serve.sock";
  auto server =
      spawn({o.sandgate, "--state-dir", o.tmp_dir + "/state", "--work-dir", o.tmp_dir + "/work",
             "--cgroup-root", o.cgroup_root, "serve", "--socket", socket});
  if (!server.ok()) {
    res.error = server.error().message();
    return res;
  }
  for (int i = 0; i < 1000 && ::access(socket.c_str(), F_OK) != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (::access(socket.c_str(), F_OK) != 0) {
    res.error = "serve made no socket in 10 s";
    server->kill_and_reap();
    return res;
  }
  const pid_t pid = server->pid();
  std::atomic<int> claimed{0}, done{0}, open_runs{0};
  std::atomic<bool> stop_sampling{false};
  std::mutex mu;  // res.lost_examples, res.interval_ms, res.lost, res.runs_failed
  auto lose = [&](const std::string& why) {
    std::lock_guard lock(mu);
    ++res.lost;
    if (res.lost_examples.size() < 5) res.lost_examples.push_back(why);
  };
  std::thread sampler([&] {
    while (!stop_sampling.load()) {
      ServeLoadSample s{static_cast<double>(done.load()), resident_kib(pid), open_fds(pid),
                        open_runs.load()};
      if (s.rss_kib > 0) {
        std::lock_guard lock(mu);
        if (res.samples.empty()) res.fd_targets_first = fd_targets(pid);
        res.samples.push_back(s);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> clients;
  for (int r = 0; r < o.runs; ++r) {
    clients.emplace_back([&, r] {
      const auto& calls = shapes[static_cast<size_t>(r) % shapes.size()];
      auto client = session::Client::connect(socket);
      std::string env;
      if (client.ok()) {
        session::CreateRequest create;
        create.provider = "namespaces";
        auto created = client->create(create);
        if (created.ok()) {
          env = created->env;
          open_runs.fetch_add(1);
        } else {
          std::lock_guard lock(mu);
          ++res.runs_failed;
          if (res.lost_examples.size() < 5)
            res.lost_examples.push_back("create: " + created.error().message());
        }
      } else {
        std::lock_guard lock(mu);
        ++res.runs_failed;
        if (res.lost_examples.size() < 5)
          res.lost_examples.push_back("connect: " + client.error().message());
      }
      // A run that could not be made makes no call (counted in runs_failed): its share goes
      // to the others, so that `calls` are all made and `lost` counts calls that were sent.
      for (size_t k = static_cast<size_t>(r); !env.empty(); k += 7) {  // each run starts elsewhere
        if (claimed.fetch_add(1) >= o.calls) break;
        const auto& [intent, ms] = calls[k % calls.size()];
        int scaled = std::clamp(static_cast<int>(ms / o.time_scale), o.min_call_ms, o.max_call_ms);
        char secs[32];
        std::snprintf(secs, sizeof secs, "%.3f", scaled / 1000.0);
        session::ExecRequest call;
        call.env = env;
        call.argv = {"sleep", secs};
        call.intent = intent;
        auto outcome = client->exec(call);
        if (!outcome.ok()) {
          lose("exec: " + outcome.error().message());
          continue;
        }
        if (!outcome->is_object() || !outcome->contains("termination")) {
          lose("exec: a reply without an outcome: " + outcome->dump().substr(0, 200));
          continue;
        }
        int samples = outcome->value("/observed/samples"_json_pointer, 0);
        double wall = outcome->value("wall_ms", 0.0);
        if (samples >= 3) {
          std::lock_guard lock(mu);
          res.interval_ms.push_back(wall / (samples - 1));
        }
        done.fetch_add(1);
      }
      if (!env.empty()) {
        if (auto s = client->destroy(env); !s.ok()) lose("destroy: " + s.error().message());
        open_runs.fetch_sub(1);
      }
    });
  }
  for (auto& c : clients) c.join();
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stop_sampling = true;
  sampler.join();
  res.calls_done = done.load();
  // The server answers a destroy before it has removed the run (session/server.cc: up to four
  // are removed after their answer): wait until no run record is left, so that the last
  // sample sees what the server keeps, not what it is still taking down.
  for (int i = 0; i < 300 && count_dir_entries(o.tmp_dir + "/state/runs") > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // One more, every run destroyed and every client gone: where the server ends up.
  res.samples.push_back(
      {static_cast<double>(res.calls_done), resident_kib(pid), open_fds(pid), open_runs.load()});
  res.fd_targets_last = fd_targets(pid);
  // SIGTERM: serve destroys what is still open and exits 128+15 (cli/serve.cc).
  (void)server->signal(SIGTERM);
  auto st = server->wait_for(std::chrono::seconds(60));
  if (st.ok() && st->has_value())
    res.server_exit = (*st)->shell_code();
  else
    server->kill_and_reap();
  if (!res.samples.empty()) {
    res.rss_first_kib = res.samples.front().rss_kib;
    res.rss_last_kib = res.samples.back().rss_kib;
    res.fds_first = res.samples.front().fds;
    res.fds_last = res.samples.back().fds;
    for (const auto& s : res.samples) res.fds_max = std::max(res.fds_max, s.fds);
  }
  double warm = 0.1 * o.calls;
  for (const auto& s : res.samples) {
    if (s.calls < warm) continue;
    res.fds_warm = s.fds;
    res.rss_warm_kib = s.rss_kib;
    break;
  }
  res.rss_slope_kib_per_1000 =
      1000 * fitted_slope(res.samples, warm, o.runs, &ServeLoadSample::rss_kib);
  res.fd_slope_per_1000 = 1000 * fitted_slope(res.samples, warm, o.runs, &ServeLoadSample::fds);
  return res;
}

}  // namespace sandgate::bench
