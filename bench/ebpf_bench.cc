// A/B benchmark of the eBPF programs, all in one run (docs/STYLE.md: performance is judged A/B
// against a baseline in the same run). Each syscall-heavy workload runs four ways:
//   /none      no program loaded: the baseline
//   /floor     empty programs on the tracer's tracepoints (ebpf/overhead_floor.bpf.c): what the
//              kernel charges for any program there, the part no optimisation of ours removes
//   /attached  the activity tracer attached, this process not watched: what every other
//              process on the host pays while sandgate traces runs
//   /watched   the activity tracer attached and this process's cgroup watched: what a traced
//              call pays
// and the egress guard's added connect latency, /none without and /guarded with the guard on
// this process's cgroup, and the run's DNS resolver's added latency per allowed query
// (BM_DnsQuery /direct against /resolver). BM_ForkStorm reports the events a fork storm produces
// and how many the ring buffer lost (counters), with the default 4 MiB ring drained only
// afterwards.
//
// Needs root: the process moves itself into a cgroup2 directory of its own (removed at the end)
// and into a network namespace of its own with only loopback up, so the connect loop reaches
// nothing outside it.
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <memory>
#include <thread>

#include "bench/bench_support.h"
#include "core/dns.h"
#include "core/fd.h"
#include "core/mounts.h"
#include "ebpf/activity_tracer.h"
#include "ebpf/egress.h"
#include "ebpf/overhead_floor.skel.h"
#include "session/dns_resolver.h"

namespace sandgate::bench {
namespace {

std::string g_cgroup;  // this process's own cgroup2 directory
uint64_t g_cgroup_id = 0;

// What a benchmark runs with: nothing, the empty floor programs, the tracer attached, or the
// tracer attached and watching this process.
enum Mode { kNone = 0, kAttached = 1, kWatched = 2, kFloor = 3 };

struct FloorDeleter {
  void operator()(overhead_floor_bpf* f) const { overhead_floor_bpf::destroy(f); }
};
struct Loaded {
  std::unique_ptr<ebpf::ActivityTracer> tracer;
  std::unique_ptr<overhead_floor_bpf, FloorDeleter> floor;
  ebpf::ActivityTracer* get() const { return tracer.get(); }
};

Loaded tracer_for(benchmark::State& state, int mode) {
  Loaded l;
  if (mode == kNone) return l;
  if (mode == kFloor) {
    l.floor.reset(overhead_floor_bpf::open_and_load());
    if (!l.floor || overhead_floor_bpf::attach(l.floor.get()) != 0)
      state.SkipWithError("cannot load or attach ebpf/overhead_floor.bpf.c");
    return l;
  }
  auto t = ebpf::ActivityTracer::open();
  if (!t.ok()) {
    state.SkipWithError(t.error().message().c_str());
    return l;
  }
  if (mode == kWatched) {
    (void)(*t)->watch(g_cgroup_id);
    (*t)->begin(g_cgroup_id);
  }
  l.tracer = std::move(t).value();
  return l;
}

// Each workload four ways: BM_X/none, BM_X/floor, BM_X/attached, BM_X/watched.
#define CASES(fn)                                            \
  BENCHMARK_CAPTURE(fn, none, kNone)->UseRealTime();         \
  BENCHMARK_CAPTURE(fn, floor, kFloor)->UseRealTime();       \
  BENCHMARK_CAPTURE(fn, attached, kAttached)->UseRealTime(); \
  BENCHMARK_CAPTURE(fn, watched, kWatched)->UseRealTime()

// Empties the ring buffer now and then, as a session does at each call's end.
void maybe_drain(ebpf::ActivityTracer* t, int64_t i) {
  if (t && (i & 1023) == 0) {
    (void)t->end(g_cgroup_id);
    t->begin(g_cgroup_id);
  }
}

void BM_ForkExec(benchmark::State& state, int mode) {
  auto t = tracer_for(state, mode);
  int64_t i = 0;
  for (auto _ : state) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/true", "true", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    int st;
    ::waitpid(pid, &st, 0);
    maybe_drain(t.get(), ++i);
  }
}
CASES(BM_ForkExec);

void open_close(benchmark::State& state, int mode, const char* path) {
  auto t = tracer_for(state, mode);
  int64_t i = 0;
  for (auto _ : state) {
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) ::close(fd);
    maybe_drain(t.get(), ++i);
  }
}
// An ordinary path: the sys_enter filter, the path copy and the prefix compare, no event.
void BM_Open(benchmark::State& state, int mode) { open_close(state, mode, "/etc/hostname"); }
CASES(BM_Open);
// A sensitive path: an event per open.
void BM_OpenSensitive(benchmark::State& state, int mode) {
  open_close(state, mode, "/proc/self/environ");
}
CASES(BM_OpenSensitive);

// socket + connect to a closed loopback port (refused at once) + close; `after(i)` once per
// iteration (the drain of whichever program is measured).
template <class After>
void connect_loop(benchmark::State& state, After after) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(1);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int64_t i = 0;
  for (auto _ : state) {
    int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    (void)::connect(s, reinterpret_cast<sockaddr*>(&to), sizeof to);
    ::close(s);
    after(++i);
  }
}

void BM_Connect(benchmark::State& state, int mode) {
  auto t = tracer_for(state, mode);
  connect_loop(state, [&](int64_t i) { maybe_drain(t.get(), i); });
}
CASES(BM_Connect);

void BM_GuardConnect(benchmark::State& state, bool guarded) {
  std::unique_ptr<ebpf::EgressGuard> guard;
  if (guarded) {
    auto g = ebpf::EgressGuard::open();
    if (!g.ok()) return state.SkipWithError(g.error().message().c_str());
    guard = std::move(g).value();
    if (auto run = guard->guard(g_cgroup, {}); !run.ok())
      return state.SkipWithError(run.error().message().c_str());
  }
  connect_loop(state, [&](int64_t i) {
    if (guard && (i & 1023) == 0) guard->drain([](const ebpf::EgressDecision&) {});
  });
}
BENCHMARK_CAPTURE(BM_GuardConnect, none, false)->UseRealTime();
BENCHMARK_CAPTURE(BM_GuardConnect, guarded, true)->UseRealTime();

// The run's DNS resolver (session/dns_resolver.h): one A query for an allowlisted name and its
// answer, /direct to a DNS server of the benchmark's own on loopback, /resolver through the
// resolver, which asks that same server and admits the answer's address into the guard (the
// real EgressGuard::add on this process's guarded cgroup) before it answers. The difference is
// what the resolver adds to each allowed lookup.
struct LoopbackDns {
  UniqueFd fd, stop;
  std::thread thread;
  sockaddr_in address{};
  bool start() {
    fd = UniqueFd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) return false;
    socklen_t len = sizeof address;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &len);
    stop = UniqueFd(::eventfd(0, EFD_CLOEXEC));
    thread = std::thread([this] {
      char buf[1500];
      for (;;) {
        pollfd p[2] = {{fd.get(), POLLIN, 0}, {stop.get(), POLLIN, 0}};
        if (::poll(p, 2, -1) < 0 || (p[1].revents & POLLIN)) return;
        sockaddr_in from{};
        socklen_t flen = sizeof from;
        ssize_t n =
            ::recvfrom(fd.get(), buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &flen);
        auto q = dns::parse_message(std::string_view(buf, n > 0 ? static_cast<size_t>(n) : 0));
        if (!q.ok() || q->questions.size() != 1) continue;
        std::string reply = dns::encode_reply(*q, dns::kNoError,
                                              {{q->questions[0].name, dns::kTypeA, dns::kClassIn,
                                                60, std::string("\xcb\x00\x71\x14", 4), ""}});
        (void)::sendto(fd.get(), reply.data(), reply.size(), 0, reinterpret_cast<sockaddr*>(&from),
                       flen);
      }
    });
    return true;
  }
  ~LoopbackDns() {
    if (thread.joinable()) {
      uint64_t one = 1;
      (void)!::write(stop.get(), &one, sizeof one);
      thread.join();
    }
  }
};

void dns_loop(benchmark::State& state, const sockaddr_in& server) {
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  timeval tv{2, 0};
  ::setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&server), sizeof server) != 0)
    return state.SkipWithError("connect to the DNS server");
  uint16_t id = 0;
  char buf[1500];
  for (auto _ : state) {
    auto q = dns::encode_query(++id, "registry.sandgate.test", dns::kTypeA);
    (void)::send(s.get(), q->data(), q->size(), 0);
    if (::recv(s.get(), buf, sizeof buf, 0) <= 0) return state.SkipWithError("no answer");
  }
}

void BM_DnsQuery(benchmark::State& state, bool through_resolver) {
  LoopbackDns upstream;
  if (!upstream.start()) return state.SkipWithError("loopback DNS server");
  if (!through_resolver) return dns_loop(state, upstream.address);
  auto g = ebpf::EgressGuard::open();
  if (!g.ok()) return state.SkipWithError(g.error().message().c_str());
  auto run = (*g)->guard(g_cgroup, {});
  if (!run.ok()) return state.SkipWithError(run.error().message().c_str());
  session::DnsResolverConfig c;
  c.listen.sin_family = AF_INET;
  c.listen.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  c.upstream = upstream.address;
  c.names = *parse_egress_rules({"tcp:registry.sandgate.test:443"});
  ebpf::EgressGuard* guard = g->get();
  uint64_t id = *run;
  auto r = session::DnsResolver::start(
      std::move(c),
      [guard, id](const std::vector<EgressRule>& rules) { return guard->add(id, rules); });
  if (!r.ok()) return state.SkipWithError(r.error().message().c_str());
  (*r)->begin_call(1);
  dns_loop(state, (*r)->listen_address());
  (void)(*r)->end_call(1);
  (*r)->stop();
  guard->release(id);
}
BENCHMARK_CAPTURE(BM_DnsQuery, direct, false)->UseRealTime();
BENCHMARK_CAPTURE(BM_DnsQuery, resolver, true)->UseRealTime();

// 4000 processes forked as fast as one parent can, each exiting at once: 8000 events (fork and
// exit) into the ring buffer before anything drains it.
void BM_ForkStorm(benchmark::State& state) {
  auto t = ebpf::ActivityTracer::open();
  if (!t.ok()) return state.SkipWithError(t.error().message().c_str());
  (void)(*t)->watch(g_cgroup_id);
  constexpr int kForks = 4000;
  uint64_t events = 0, lost = 0;
  for (auto _ : state) {
    (*t)->begin(g_cgroup_id);
    uint64_t lost_before = (*t)->lost();
    for (int i = 0; i < kForks; ++i) {
      pid_t pid = ::fork();
      if (pid == 0) ::_exit(0);
      if (pid < 0) break;
    }
    while (::wait(nullptr) > 0) {
    }
    TracedActivity a = (*t)->end(g_cgroup_id);
    events += a.forks + a.exits;
    lost += (*t)->lost() - lost_before;
  }
  state.counters["events"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kAvgIterations);
  state.counters["lost"] =
      benchmark::Counter(static_cast<double>(lost), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_ForkStorm)->Iterations(3)->UseRealTime();

bool setup() {
  std::string unified = cgroup2_mount_point();
  if (unified.empty()) return std::cerr << "ebpf_bench: no cgroup2 mount\n", false;
  g_cgroup = unified + "/sandgate-ebpf-bench-" + std::to_string(::getpid());
  if (::mkdir(g_cgroup.c_str(), 0755) != 0) return std::perror(g_cgroup.c_str()), false;
  std::string me = std::to_string(::getpid());
  if (!write_file(g_cgroup + "/cgroup.procs", me, O_WRONLY).ok())
    return std::cerr << "ebpf_bench: cannot join " << g_cgroup << "\n", false;
  auto id = ebpf::cgroup_id_of(g_cgroup);
  if (!id.ok()) return std::cerr << "ebpf_bench: " << id.error().message() << "\n", false;
  g_cgroup_id = *id;
  if (::unshare(CLONE_NEWNET) != 0) return std::perror("unshare(CLONE_NEWNET)"), false;
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq ifr{};
  std::strcpy(ifr.ifr_name, "lo");
  ifr.ifr_flags = IFF_UP | IFF_RUNNING;
  if (::ioctl(s, SIOCSIFFLAGS, &ifr) != 0) return std::perror("bring lo up"), false;
  ::close(s);
  return true;
}

void teardown() {
  if (g_cgroup.empty()) return;
  // Back to the parent cgroup, so that ours can go.
  std::string parent = g_cgroup.substr(0, g_cgroup.rfind('/'));
  std::string me = std::to_string(::getpid());
  (void)write_file(parent + "/cgroup.procs", me, O_WRONLY);
  ::rmdir(g_cgroup.c_str());
}

bool summary(const RunCollector& r, std::ostream& out) {
  out << "\n== eBPF overhead (median, this run): ratio to no program loaded\n";
  bool ok = true;
  for (const char* name : {"BM_ForkExec", "BM_Open", "BM_OpenSensitive", "BM_Connect"}) {
    auto base = r.median_ms(std::string(name) + "/none");
    auto floor = r.median_ms(std::string(name) + "/floor");
    auto loaded = r.median_ms(std::string(name) + "/attached");
    auto watched = r.median_ms(std::string(name) + "/watched");
    if (!base || !floor || !loaded || !watched) {
      out << name << ": not measured\n";
      ok = false;
      continue;
    }
    char line[200];
    std::snprintf(line, sizeof line,
                  "%-18s base %9.4f ms  floor %.3fx  attached %.3fx  watched %.3fx\n", name, *base,
                  *floor / *base, *loaded / *base, *watched / *base);
    out << line;
  }
  auto g0 = r.median_ms("BM_GuardConnect/none"), g1 = r.median_ms("BM_GuardConnect/guarded");
  if (g0 && g1) {
    char line[200];
    std::snprintf(line, sizeof line, "egress guard: connect %.4f ms -> %.4f ms (%.3fx, +%.1f us)\n",
                  *g0, *g1, *g1 / *g0, (*g1 - *g0) * 1e3);
    out << line;
  }
  auto d0 = r.median_ms("BM_DnsQuery/direct"), d1 = r.median_ms("BM_DnsQuery/resolver");
  if (d0 && d1) {
    char line[200];
    std::snprintf(
        line, sizeof line,
        "dns resolver: allowed A query %.4f ms direct -> %.4f ms through it (%.3fx, +%.1f us)\n",
        *d0, *d1, *d1 / *d0, (*d1 - *d0) * 1e3);
    out << line;
  }
  if (auto ev = r.counter("BM_ForkStorm", "events"), lost = r.counter("BM_ForkStorm", "lost");
      ev && lost)
    out << "fork storm: " << *ev << " events kept, " << *lost
        << " lost (4 MiB ring, drained after)\n";
  return ok;
}

}  // namespace
}  // namespace sandgate::bench

int main(int argc, char** argv) {
  using namespace sandgate::bench;
  if (::geteuid() != 0) {
    std::cerr << "ebpf_bench: needs root (BPF programs, a cgroup and a network namespace)\n";
    return 1;
  }
  auto display = initialize_with_defaults(argc, argv, default_flags());
  if (!display) return 1;
  if (!setup()) {
    teardown();
    return 1;
  }
  bool ok = run_benchmarks(*display, summary);
  teardown();
  return ok ? 0 : 1;
}
