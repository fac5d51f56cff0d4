// sandgate-load: the effect generator and the victim, a static binary that runs inside any
// sandbox (the replayer puts it beside sandgate and binds it into the environment).
//
//   sandgate-load run --segment FILE
//       Reproduces a Segment (workloads/segment.h): memory following the target curve, CPU
//       following millicores (threads with a 10 ms duty cycle, capped at the cores available),
//       fan-out to the pids target, fdatasync'ed file I/O under workdir. Targets are held
//       step-wise between points. At end_ms, or on SIGTERM/SIGINT, prints one Achieved JSON
//       object on stdout (target vs achieved peak memory and its time, CPU time, pids, io).
//   sandgate-load hold (--follow FILE | --mem BYTES) [--seconds S] [--detach [--pid-file F]]
//       Holds resident memory at a level: fixed, or the byte count written in FILE (re-read
//       every 20 ms and on inotify events) until FILE says "stop", S seconds pass or SIGTERM.
//       --detach returns once the holder runs on its own (double fork, setsid, stdio on
//       /dev/null); --pid-file gets its pid before the call returns.
//   sandgate-load victim --duration D [--interval 10ms] [--work-bytes 4MiB] [--alloc-bytes 1MiB]
//                        [--cpu N] [--json]
//       Runs one fixed unit of work every interval and prints the latency histogram summary
//       (count, p50/p90/p99/max, missed deadlines), latency counted from each unit's
//       scheduled start.
//
// Exit status: 0 when the work ran (what it achieved is in the report, shortfalls included);
// 2 on bad input, with one line on stderr naming the file and field.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>

#include "core/fd.h"
#include "core/json.h"
#include "core/units.h"
#include "workloads/hold.h"
#include "workloads/load.h"
#include "workloads/segment.h"
#include "workloads/victim.h"

namespace {

using namespace sandgate;
using namespace sandgate::workloads;

constexpr int kExitBadInput = 2;

std::atomic<bool> g_stop{false};

void on_stop_signal(int) { g_stop.store(true); }

// SIGTERM / SIGINT end the work early and still print the report. No SA_RESTART: a sleep in
// progress returns at once.
void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
}

int fail(const std::string& message) {
  std::cerr << "sandgate-load: error: " << message << "\n";
  return kExitBadInput;
}

int cmd_run(const std::string& segment_path) {
  auto j = read_json_file(segment_path);
  if (!j.ok()) return fail(j.error().message());
  auto seg = Segment::from_json(*j);
  if (!seg.ok()) {
    Error e = std::move(seg).error();
    e.path = segment_path;
    return fail(e.message());
  }
  install_stop_handlers();
  auto a = run_segment(*seg, LoadOptions{}, g_stop);
  if (!a.ok()) return fail(a.error().message());
  std::cout << a->to_json().dump() << std::endl;
  return 0;
}

// Detaches: the caller gets control back once the grandchild runs on its own; `pid_file`
// holds the grandchild's pid by then. Returns true in the grandchild, exits in the others.
bool detach(const std::string& pid_file) {
  std::cout.flush();
  pid_t first = ::fork();
  if (first < 0) {
    std::exit(fail(sys_error("fork").message()));
  }
  if (first > 0) {
    int status = 0;
    while (::waitpid(first, &status, 0) < 0 && errno == EINTR) {
    }
    std::exit(WIFEXITED(status) ? WEXITSTATUS(status) : kExitBadInput);
  }
  ::setsid();  // no controlling terminal: a hangup of the caller's session does not reach it
  pid_t second = ::fork();
  if (second < 0) ::_exit(kExitBadInput);
  if (second > 0) {
    if (!pid_file.empty()) {
      auto st = write_file(pid_file, std::to_string(second) + "\n",
                           O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (!st.ok()) {
        std::cerr << "sandgate-load: error: " << st.error().message() << "\n";
        ::kill(second, SIGTERM);
        ::_exit(kExitBadInput);
      }
    }
    ::_exit(0);
  }
  int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull >= 0) {
    ::dup2(devnull, 0);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    if (devnull > 2) ::close(devnull);
  }
  return true;
}

int cmd_hold(const std::string& follow, const std::string& mem, double seconds, bool detached,
             const std::string& pid_file) {
  HoldOptions o;
  if (follow.empty() == mem.empty())
    return fail("hold: give exactly one of --follow FILE or --mem BYTES");
  if (!follow.empty()) {
    // Read once before detaching, so a bad file is an error the caller sees.
    auto level = read_hold_level(follow);
    if (!level.ok()) return fail(level.error().message());
    o.follow = follow;
  } else {
    auto b = parse_bytes(mem);
    if (!b.ok()) return fail("--mem: " + b.error().message());
    o.mem = b->value;
  }
  if (seconds < 0 || std::isnan(seconds)) return fail("--seconds: must be >= 0");
  if (seconds > 0)
    o.limit = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(seconds));
  if (!pid_file.empty() && !detached) return fail("--pid-file needs --detach");
  if (detached) detach(pid_file);
  install_stop_handlers();
  auto a = run_hold(o, g_stop);
  if (!a.ok()) return fail(a.error().message());
  if (!detached) std::cout << a->to_json().dump() << std::endl;
  return 0;
}

int cmd_victim(const std::string& duration, const std::string& interval,
               const std::string& work_bytes, const std::string& alloc_bytes, int cpu, bool json) {
  VictimOptions o;
  auto d = parse_duration(duration);
  if (!d.ok()) return fail("--duration: " + d.error().message());
  auto i = parse_duration(interval);
  if (!i.ok()) return fail("--interval: " + i.error().message());
  auto w = parse_bytes(work_bytes);
  if (!w.ok()) return fail("--work-bytes: " + w.error().message());
  if (*i <= Duration::zero()) return fail("--interval: must be greater than 0");
  if (w->value == 0) return fail("--work-bytes: must be greater than 0");
  auto al = parse_bytes(alloc_bytes);
  if (!al.ok()) return fail("--alloc-bytes: " + al.error().message());
  o.alloc_bytes = al->value;
  o.duration = *d;
  o.interval = *i;
  o.work_bytes = w->value;
  o.cpu = cpu;
  install_stop_handlers();
  auto s = run_victim(o, g_stop);
  if (!s.ok()) return fail(s.error().message());
  if (json) {
    std::cout << s->to_json().dump() << std::endl;
  } else {
    std::printf(
        "victim: %llu units every %s, p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms, "
        "%llu missed deadlines; allocation of %llu bytes p95 %.3f ms\n",
        static_cast<unsigned long long>(s->count), format_duration(o.interval).c_str(),
        s->p50_us / 1000.0, s->p90_us / 1000.0, s->p99_us / 1000.0, s->max_us / 1000.0,
        static_cast<unsigned long long>(s->missed_deadlines),
        static_cast<unsigned long long>(s->alloc_bytes), s->alloc_p95_us / 1000.0);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "sandgate-load: reproduces a trace segment as real resource use inside a sandbox, holds a "
      "run's baseline memory, and measures a latency-sensitive victim.\n"
      "Exit 0 when the work ran (shortfalls are in the report), 2 on bad input."};
  app.require_subcommand(1);

  std::string segment;
  auto* run = app.add_subcommand(
      "run",
      "Reproduce a segment (JSON: {name, points:[{t_ms, mem_bytes, cpu_millicores, pids, "
      "io_bytes}], end_ms, workdir}); targets are held step-wise between points, io_bytes is "
      "cumulative and paced. Prints one Achieved JSON object at end_ms or on SIGTERM/SIGINT.");
  run->add_option("--segment", segment, "the segment file")->required();

  std::string follow, mem, pid_file;
  double seconds = 0;
  bool detached = false;
  auto* hold = app.add_subcommand(
      "hold",
      "Hold resident memory (the whole process counts) at a fixed level or the level in a file "
      "(bytes or \"100MiB\"; \"stop\" ends it), re-read every 20 ms and on change.");
  hold->add_option("--follow", follow, "file holding the level to follow");
  hold->add_option("--mem", mem, "fixed level, e.g. 512MiB");
  hold->add_option("--seconds", seconds, "end after this many seconds (default: until stopped)");
  hold->add_flag("--detach", detached,
                 "return at once and keep holding in the background (double fork, setsid, stdio "
                 "on /dev/null); no report is printed");
  hold->add_option("--pid-file", pid_file, "with --detach: write the holder's pid here");

  std::string duration, interval = "10ms", work_bytes = "4MiB", alloc_bytes = "1MiB";
  int cpu = -1;
  bool json = false;
  auto* victim = app.add_subcommand(
      "victim",
      "Latency-sensitive workload: one fixed unit of work (touch the working set, a little "
      "compute, one timed allocation) every interval; latency from each unit's scheduled start "
      "to its end, and each allocation's from the map to its last page written.");
  victim->add_option("--duration", duration, "how long to run, e.g. 10s")->required();
  victim->add_option("--interval", interval, "period of the units (default 10ms)");
  victim->add_option("--work-bytes", work_bytes, "working set touched by each unit (default 4MiB)");
  victim->add_option("--alloc-bytes", alloc_bytes,
                     "fresh memory mapped, touched page by page and unmapped by each unit, timed "
                     "(default 1MiB; 0: none)");
  victim->add_option("--cpu", cpu, "pin to this CPU (default: not pinned)");
  victim->add_flag("--json", json, "print the summary as one JSON object");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "sandgate-load: error: " << e.what() << " (see --help)\n";
    return kExitBadInput;
  }
  if (run->parsed()) return cmd_run(segment);
  if (hold->parsed()) return cmd_hold(follow, mem, seconds, detached, pid_file);
  return cmd_victim(duration, interval, work_bytes, alloc_bytes, cpu, json);
}
