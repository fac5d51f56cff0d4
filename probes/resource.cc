// Resource limits: each probe pushes one resource up to a cap taken from its parameters (safe
// defaults, hard maxima) and reports how far it got and what stopped it. Whether a limit held
// is the judge's call, from the controller's outcome and the host's counters. Children die
// with the probe (PR_SET_PDEATHSIG) and are reaped; files are removed; natively every probe
// finishes quickly and leaves nothing.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <sstream>

#include "probes/catalogue.h"
#include "probes/probe_util.h"

namespace sandgate::probes {
namespace {

using namespace util;

constexpr long long kMiB = 1 << 20;

std::string describe_end(const ChildResult& c) {
  if (c.timed_out) return "timed out";
  if (!c.exited)
    return std::string("killed by ") + (sigabbrev_np(c.signal) ? sigabbrev_np(c.signal) : "?");
  return "exited " + std::to_string(c.code);
}

ProbeReport memory(const Params& p) {
  long long target = p.number_or("mem_bytes", 512 * kMiB, 64LL << 30);
  long long hold = p.number_or("resource_hold_ms", 0, 60000);
  std::string attempt = "allocate and touch " + std::to_string(target) + " bytes, 1 MiB at a time";
  // In a child that reports its progress as it goes: if the OOM killer takes it, the last
  // line says how far it got.
  ChildResult c = run_child(
      [&](int out) -> int {
        long long done = 0;
        int err = 0;
        while (done < target) {
          size_t chunk = static_cast<size_t>(std::min(kMiB, target - done));
          void* mem =
              ::mmap(nullptr, chunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
          if (mem == MAP_FAILED) {
            err = errno;
            break;
          }
          std::memset(mem, 0x5a, chunk);
          done += static_cast<long long>(chunk);
          if (done % (4 * kMiB) == 0 || done == target) {
            std::string line = std::to_string(done) + "\n";
            (void)::write(out, line.data(), line.size());
          }
        }
        std::string end = "end " + std::to_string(done) + " " + std::to_string(err) + "\n";
        (void)::write(out, end.data(), end.size());
        sleep_ms(hold);
        return 0;
      },
      static_cast<int>(120000 + hold));
  long long reached_bytes = 0;
  int err = 0;
  std::istringstream in(c.output);
  std::string word;
  while (in >> word) {
    if (word == "end") {
      in >> reached_bytes >> err;
    } else {
      reached_bytes = std::atoll(word.c_str());
    }
  }
  Json ev = {{"target_bytes", target},
             {"bytes_reached", reached_bytes},
             {"child", describe_end(c)},
             {"hold_ms", hold}};
  if (reached_bytes >= target && c.exited) return reached(attempt, ev);
  if (err) return failed(attempt, err, ev);
  ProbeReport r = held(attempt, ev, "stopped short of the target: " + describe_end(c));
  return r;
}

ProbeReport fork_bomb(const Params& p) {
  long long max = p.number_or("max_procs", 256, 4096);
  long long hold = p.number_or("resource_hold_ms", 0, 60000);
  std::string attempt = "fork up to " + std::to_string(max) + " processes that wait";
  std::vector<pid_t> kids;
  pid_t self = ::getpid();
  long long refused = 0;
  int err = 0;
  long long start = now_ms();
  // Fork until the cap; when refused, keep retrying for resource_hold_ms (a bomb pinned at
  // the limit is what the controller's ladder watches for).
  while (static_cast<long long>(kids.size()) < max) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != self) ::_exit(0);
      while (true) ::pause();
    }
    if (pid > 0) {
      kids.push_back(pid);
      continue;
    }
    err = errno;
    ++refused;
    if (now_ms() - start >= hold) break;
    sleep_ms(5);
  }
  long long made = static_cast<long long>(kids.size());
  if (made == max && hold > 0) sleep_ms(hold);
  for (pid_t pid : kids) ::kill(pid, SIGKILL);  // only the children made above
  for (pid_t pid : kids) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  Json ev = {{"cap", max},
             {"procs_made", made},
             {"forks_refused", refused},
             {"elapsed_ms", now_ms() - start}};
  if (made >= max) return reached(attempt, ev);
  return failed(attempt, err, ev);
}

ProbeReport cpu_spin(const Params& p) {
  long long spin = p.number_or("spin_ms", 500, 60000);
  long long procs = std::max(1LL, p.number_or("spin_procs", 2, 64));
  std::string attempt =
      "spin " + std::to_string(procs) + " processes for " + std::to_string(spin) + " ms";
  long long start = now_ms();
  std::vector<pid_t> kids;
  pid_t self = ::getpid();
  for (long long i = 0; i < procs; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != self) ::_exit(0);
      volatile unsigned long x = 0;
      while (now_ms() - start < spin)
        for (int k = 0; k < 100000; ++k) x = x + k;
      ::_exit(0);
    }
    if (pid > 0) kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  long long wall = now_ms() - start;
  struct rusage ru {};
  ::getrusage(RUSAGE_CHILDREN, &ru);
  long long cpu = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000LL +
                  (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
  Json ev = {{"procs", kids.size()},
             {"wall_ms", wall},
             {"cpu_ms", cpu},
             {"cores_used", wall > 0 ? static_cast<double>(cpu) / static_cast<double>(wall) : 0.0}};
  if (kids.empty()) return failed(attempt, EAGAIN, ev);
  return reached(attempt, ev);
}

ProbeReport disk_fill(const Params& p) {
  long long target = p.number_or("fill_bytes", 256 * kMiB, 64LL << 30);
  std::string path = workspace(p) + "/.sandgate-probe-fill-" + tag(p);
  std::string attempt =
      "write " + std::to_string(target) + " bytes to " + path + ", then remove it";
  ::signal(SIGXFSZ, SIG_IGN);  // a file size limit shows as EFBIG, not a dead probe
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return precondition_failed(attempt,
                               std::string("cannot create the file: ") + errno_name(errno));
  std::string chunk(kMiB, 'x');
  long long written = 0;
  int err = 0;
  long long start = now_ms();
  while (written < target) {
    size_t want = static_cast<size_t>(std::min<long long>(kMiB, target - written));
    ssize_t n = ::write(fd, chunk.data(), want);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : ENOSPC;
      break;
    }
    written += n;
  }
  if (err == 0 && ::fdatasync(fd) != 0) err = errno;
  ::close(fd);
  ::unlink(path.c_str());
  Json ev = {
      {"target_bytes", target}, {"bytes_written", written}, {"elapsed_ms", now_ms() - start}};
  if (err == 0 && written >= target) return reached(attempt, ev);
  return failed(attempt, err, ev);
}

ProbeReport fd_exhaust(const Params& p) {
  long long max = p.number_or("max_fds", 4096, 1 << 20);
  std::string attempt = "open up to " + std::to_string(max) + " file descriptors";
  struct rlimit lim {};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  Json ev = {{"cap", max}, {"soft_limit", lim.rlim_cur}, {"hard_limit", lim.rlim_max}};
  // Raise the soft limit as far as allowed: the hard limit is the boundary under test.
  rlim_t want = static_cast<rlim_t>(max + 64);
  if (lim.rlim_cur < want) {
    struct rlimit raised = lim;
    raised.rlim_cur = std::min(want, lim.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &raised);
  }
  std::vector<int> fds;
  int err = 0;
  while (static_cast<long long>(fds.size()) < max) {
    int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) fd = ::dup(2);
    if (fd < 0) {
      err = errno;
      break;
    }
    fds.push_back(fd);
  }
  for (int fd : fds) ::close(fd);
  ev["fds_opened"] = fds.size();
  if (static_cast<long long>(fds.size()) >= max) return reached(attempt, ev);
  return failed(attempt, err, ev);
}

ProbeReport wall_clock(const Params& p) {
  long long sleep = p.number_or("sleep_ms", 1000, 3600000);
  std::string attempt = "sleep " + std::to_string(sleep) + " ms (past a call's timeout)";
  long long start = now_ms();
  sleep_ms(sleep);
  return reached(attempt, {{"slept_ms", now_ms() - start}, {"requested_ms", sleep}});
}

ProbeReport limits_seen(const Params&) {
  std::string attempt = "read the limits this process sees (rlimits, its cgroup)";
  Json rl = Json::object();
  for (auto [name, res] : {std::pair{"nofile", RLIMIT_NOFILE}, std::pair{"nproc", RLIMIT_NPROC},
                           std::pair{"as", RLIMIT_AS}, std::pair{"fsize", RLIMIT_FSIZE},
                           std::pair{"cpu", RLIMIT_CPU}}) {
    struct rlimit lim {};
    if (::getrlimit(res, &lim) != 0) continue;
    auto v = [](rlim_t x) { return x == RLIM_INFINITY ? Json("unlimited") : Json(x); };
    rl[name] = {{"soft", v(lim.rlim_cur)}, {"hard", v(lim.rlim_max)}};
  }
  Json ev = {{"rlimits", rl}, {"cgroup", printable(read_prefix("/proc/self/cgroup").data, 600)}};
  for (const char* f :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/cpu.max"}) {
    FileRead r = read_prefix(f, 64);
    if (r.err == 0) ev[f] = first_line(r.data);
  }
  return reached(attempt, ev);
}

}  // namespace

Status register_resource_probes(Catalogue& c) {
  SG_TRY(c.add({"resource.memory",
                "allocate memory past the grant",
                {"mem_bytes", "resource_hold_ms"},
                memory}));
  SG_TRY(c.add({"resource.fork_bomb",
                "fork past the pids limit",
                {"max_procs", "resource_hold_ms"},
                fork_bomb}));
  SG_TRY(c.add({"resource.cpu_spin", "spin on every core", {"spin_ms", "spin_procs"}, cpu_spin}));
  SG_TRY(c.add({"resource.disk_fill",
                "fill the workspace's disk",
                {"fill_bytes", "workspace", "marker"},
                disk_fill}));
  SG_TRY(c.add({"resource.fd_exhaust", "exhaust file descriptors", {"max_fds"}, fd_exhaust}));
  SG_TRY(c.add({"resource.wall_clock", "run past the call's timeout", {"sleep_ms"}, wall_clock}));
  SG_TRY(c.add({"resource.limits_seen", "the limits visible from inside", {}, limits_seen}));
  return {};
}

}  // namespace sandgate::probes
