// The probe suite end to end, on this host's kernel: the hardened namespaces provider shows
// nothing exposed, host_dir (the bypass cable) is exposed on every boundary it opens, the
// self-test's weakenings are each caught, and nothing is left behind (netns, cgroups, processes,
// files, run records).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include "core/files.h"
#include "core/id_ranges.h"
#include "core/mounts.h"
#include "core/process.h"
#include "ebpf/egress.h"
#include "probes/plan.h"
#include "probes/suite.h"
#include "probes/witness.h"
#include "providers/landlock.h"
#include "providers/microvm.h"
#include "providers/podman.h"
#include "providers/weakening.h"
#include "tests/support/cgroup_dirs.h"
#include "tests/support/provider_fixture.h"

namespace sandgate::providers {
// The weakening's name where GoogleTest prints a test's parameter (ctest's list, failures).
void PrintTo(Weakening w, std::ostream* os) { *os << to_string(w); }
}  // namespace sandgate::providers

namespace sandgate::testing {
namespace {

class ProbeSuiteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/var/tmp/sgprobe-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmp_ = tmpl;
    ::chmod(tmp_.c_str(), 0711);
    options_.paths.state_dir = tmp_ + "/state";
    options_.paths.work_dir = tmp_ + "/work";
    options_.cgroup_root = "sgtest-probe-" + std::to_string(::getpid());
    options_.probe_binary = SANDGATE_PROBE_BINARY;
    providers::register_builtin_providers(registry_);
  }
  void TearDown() override {
    EXPECT_EQ(count_entries(options_.paths.state_dir + "/runs"), 0u) << "a run record was left";
    EXPECT_EQ(count_entries(options_.paths.state_dir + "/netns"), 0u) << "a lab namespace was left";
    EXPECT_EQ(count_entries(options_.paths.work_dir), 0u) << "a run directory was left";
    EXPECT_THAT(id_range_locks_of(options_.paths), ::testing::IsEmpty()) << "an id range was left";
    expect_no_cgroup_left(options_.cgroup_root);  // every hierarchy of this host's layout
    if (!marker_.empty()) {
      EXPECT_TRUE(probes::marked_processes("/proc", marker_, {::getpid()}).empty())
          << "a process was left";
      // /etc/cron.d: persist.plant plants a crontab only where it is provably sandboxed (its
      // mount namespace is not sandgate's); the native baseline must never be taken for one.
      for (const char* dir : {"/tmp", "/var/tmp", "/dev/shm", "/etc/cron.d"})
        EXPECT_TRUE(probes::marked_entries(dir, marker_).empty()) << "a file was left in " << dir;
      // The base canaries, in the host's /usr and its configuration directories.
      for (const auto& dir : probes::Canaries::base_canary_sites())
        EXPECT_TRUE(probes::marked_entries(dir, marker_).empty()) << "a file was left in " << dir;
    }
    (void)remove_tree(tmp_);
  }

  std::unique_ptr<providers::Provider> provider(const std::string& name, bool weakenings = false) {
    providers::ProviderOptions o;
    o.paths = options_.paths;
    o.allow_unsafe_host = true;
    o.self_test_weakenings = weakenings;
    auto p = registry_.create(name, o);
    EXPECT_TRUE(p.ok()) << p.error().message();
    return p.ok() ? std::move(p).value() : nullptr;
  }

  std::unique_ptr<probes::Suite> suite() {
    auto s = probes::Suite::create(options_);
    EXPECT_TRUE(s.ok()) << s.error().message();
    if (!s.ok()) return nullptr;
    marker_ = (*s)->marker();
    return std::move(s).value();
  }

  static std::map<std::string, const probes::Judgement*> by_id(const probes::ProviderRun& run) {
    std::map<std::string, const probes::Judgement*> m;
    for (const auto& j : run.judgements) m[j.id] = &j;
    return m;
  }

  std::string tmp_;
  std::string marker_;
  probes::SuiteOptions options_;
  providers::Registry registry_;
};

TEST_F(ProbeSuiteTest, NamespacesShowsNothingExposed) {
  SANDGATE_REQUIRE_ROOT();
  auto s = suite();
  ASSERT_TRUE(s);
  auto p = provider("namespaces");
  ASSERT_TRUE(p);
  auto run = s->run(*p);
  ASSERT_TRUE(run.ok()) << run.error().message();
  for (const auto* j : run->failing()) ADD_FAILURE() << j->id << ": " << j->why;
  // What a shared kernel shows anyway is exposed, each with the known limit that says so, and
  // so are the base canaries under the default base's /usr (what a narrowed base hides:
  // tests/base_canary_test.cc); nothing else is.
  std::set<std::string> known;
  for (const auto* j : run->exposed()) {
    known.insert(j->id);
    EXPECT_NE(j->known_limit.find("hides it"), std::string::npos) << j->id;
  }
  EXPECT_EQ(known, (std::set<std::string>{"disclosure.kernel_release",
                                          "disclosure.mountinfo_host_path",
                                          "fs.read_base_canary"}));
  // Not vacuous: most probes ran and were blocked, on every boundary, for a stated layer.
  auto t = probes::tally(run->judgements);
  EXPECT_GT(t.blocked, 50) << t.inconclusive << " inconclusive";
  std::set<std::string> blocked_boundaries;
  for (const auto& j : run->judgements)
    if (j.verdict == probes::Verdict::kBlocked) {
      blocked_boundaries.insert(j.boundary);
      EXPECT_NE(j.layer, probes::Layer::kNone) << j.id;
    }
  EXPECT_EQ(blocked_boundaries.size(), 8u);
  auto m = by_id(*run);
  // Masked by the jail (an empty or per-run file bound over each), compared with the host's.
  for (const char* id : {"disclosure.proc_cmdline", "disclosure.proc_version", "disclosure.boot_id",
                         "disclosure.block_devices", "disclosure.interrupts"}) {
    ASSERT_TRUE(m.count(id)) << id;
    EXPECT_EQ(m[id]->verdict, probes::Verdict::kBlocked) << id << ": " << m[id]->why;
    EXPECT_EQ(m[id]->layer, probes::Layer::kMount) << id << ": " << m[id]->why;
  }
  // The host's own copy is the witness: its release, the workspace's path.
  EXPECT_FALSE(m["disclosure.mountinfo_host_path"]->host.disclosed.empty());
  // The run's own /proc views (providers/proc_views.h): /proc/meminfo is the run's grant, not
  // the host's total (the host's copy differs), and run B no longer sees run A's burst in
  // /proc/loadavg. Both were exposed before the views; natively both still are.
  ASSERT_TRUE(m.count("disclosure.meminfo"));
  EXPECT_EQ(m["disclosure.meminfo"]->verdict, probes::Verdict::kBlocked)
      << m["disclosure.meminfo"]->why;
  EXPECT_TRUE(m["disclosure.meminfo"]->host.disclosed.empty());
  // /proc/vmstat too: the run's own faults, not the host's count (natively the host's).
  ASSERT_TRUE(m.count("disclosure.vmstat"));
  EXPECT_EQ(m["disclosure.vmstat"]->verdict, probes::Verdict::kBlocked)
      << m["disclosure.vmstat"]->why;
  EXPECT_TRUE(m["disclosure.vmstat"]->host.disclosed.empty());
  ASSERT_TRUE(m["disclosure.vmstat"]->baseline.has_value());
  EXPECT_EQ(m["disclosure.vmstat"]->baseline->result, probes::ProbeResult::kReached);
  // sysinfo(2) too (issue 16): the run's views server answers it through the filter's
  // listener with the call's grant; natively it is the kernel's, the host's memory.
  ASSERT_TRUE(m.count("disclosure.sysinfo"));
  EXPECT_EQ(m["disclosure.sysinfo"]->verdict, probes::Verdict::kBlocked)
      << m["disclosure.sysinfo"]->why;
  EXPECT_EQ(m["disclosure.sysinfo"]->layer, probes::Layer::kSeccomp);
  EXPECT_TRUE(m["disclosure.sysinfo"]->host.disclosed.empty());
  ASSERT_TRUE(m["disclosure.sysinfo"]->baseline.has_value());
  EXPECT_EQ(m["disclosure.sysinfo"]->baseline->result, probes::ProbeResult::kReached);
  ASSERT_TRUE(m.count("crossrun.load_side_channel"));
  EXPECT_EQ(m["crossrun.load_side_channel"]->verdict, probes::Verdict::kBlocked)
      << m["crossrun.load_side_channel"]->why;
  ASSERT_TRUE(m["crossrun.load_side_channel"]->baseline.has_value());
  EXPECT_EQ(m["crossrun.load_side_channel"]->baseline->result, probes::ProbeResult::kReached)
      << "natively B sees A's burst: the baseline holds";
  // Each run has its own host ids and owns its user namespace: run A holding every inotify
  // instance it may have does not starve run B.
  ASSERT_TRUE(m.count("crossrun.user_inotify"));
  EXPECT_EQ(m["crossrun.user_inotify"]->verdict, probes::Verdict::kBlocked)
      << m["crossrun.user_inotify"]->why;
  ASSERT_TRUE(m["crossrun.user_inotify"]->baseline.has_value());
  EXPECT_EQ(m["crossrun.user_inotify"]->baseline->result, probes::ProbeResult::kReached)
      << "natively (one uid) A starves B: the baseline holds";
  // Proven natively, blocked here: the decoy SSH agent and runtime socket (canaries.h), a
  // directory fd the baseline's launcher leaks on purpose, and the lab's own veth pair.
  for (const char* id :
       {"net.ssh_agent", "net.runtime_sockets", "fs.leaked_fds", "net.interfaces"}) {
    ASSERT_TRUE(m.count(id)) << id;
    ASSERT_TRUE(m[id]->baseline.has_value()) << id;
    EXPECT_EQ(m[id]->baseline->result, probes::ProbeResult::kReached)
        << id << " natively: " << m[id]->baseline->detail << " "
        << m[id]->baseline->evidence.dump();
    EXPECT_EQ(m[id]->verdict, probes::Verdict::kBlocked) << id << ": " << m[id]->why;
  }
  ASSERT_TRUE(m.count("net.metadata_v4_get"));
  EXPECT_EQ(m["net.metadata_v4_get"]->verdict, probes::Verdict::kBlocked);
  // The run's own network namespace has no route; Landlock leaves TCP to it (jail.cc).
  EXPECT_EQ(m["net.metadata_v4_get"]->layer, probes::Layer::kNamespace)
      << m["net.metadata_v4_get"]->why;
  // Run A's loopback listener (its own namespace's, bound since Landlock no longer refuses
  // the bind) is not in run B's namespace.
  ASSERT_TRUE(m.count("crossrun.loopback_port"));
  EXPECT_EQ(m["crossrun.loopback_port"]->verdict, probes::Verdict::kBlocked)
      << m["crossrun.loopback_port"]->why;
  auto abi = providers::landlock::abi_version();
  // Landlock keeps the call from writing procfs; the mount would let it.
  ASSERT_TRUE(m.count("proc.lower_oom_priority"));
  if (abi.ok()) {
    EXPECT_EQ(m["proc.lower_oom_priority"]->layer, probes::Layer::kLandlock)
        << m["proc.lower_oom_priority"]->why;
  }
  ASSERT_TRUE(m.count("proc.bpf_prog_load"));
  EXPECT_EQ(m["proc.bpf_prog_load"]->layer, probes::Layer::kSeccomp);
  // Syscalls the kernel has but the filter refuses (ENOSYS or EPERM), attributed by the
  // evidence: the baseline ran them, and the probe saw its own filter (Seccomp: 2).
  for (const char* id : {"proc.newer_syscall", "proc.open_tree_attr", "proc.listmount",
                         "proc.statmount", "proc.mseal", "proc.memfd_secret", "proc.modify_ldt"}) {
    ASSERT_TRUE(m.count(id)) << id;
    EXPECT_EQ(m[id]->verdict, probes::Verdict::kBlocked) << id << ": " << m[id]->why;
    EXPECT_EQ(m[id]->layer, probes::Layer::kSeccomp) << id << ": " << m[id]->why;
  }
  // Argument-filtered calls, with their high-bit twins. proc.tiocsti runs on the host's pty,
  // given as its stdin (the jail's /dev has none to make one from); natively (root) it works
  // whatever dev.tty.legacy_tiocsti says, and here the filter answers before the kernel would.
  for (const char* id : {"net.vsock", "net.packet_socket", "proc.clone_newuser", "proc.tiocsti"}) {
    ASSERT_TRUE(m.count(id)) << id;
    EXPECT_EQ(m[id]->verdict, probes::Verdict::kBlocked) << id << ": " << m[id]->why;
    EXPECT_EQ(m[id]->layer, probes::Layer::kSeccomp) << id << ": " << m[id]->why;
  }
  ASSERT_TRUE(m["proc.tiocsti"]->baseline.has_value());
  EXPECT_EQ(m["proc.tiocsti"]->baseline->result, probes::ProbeResult::kReached)
      << m["proc.tiocsti"]->baseline->evidence.dump();
  EXPECT_EQ(m["proc.tiocsti"]->baseline->evidence["terminal"], "stdin (the launcher's pty)");
  ASSERT_TRUE(m.count("resource.memory"));
  EXPECT_EQ(m["resource.memory"]->layer, probes::Layer::kLimit);
  // The rlimit grants: judged against the grant, with the value read back from the host
  // (prlimit(2) on the parked call), not "no limit is declared".
  for (const char* id : {"resource.fd_exhaust", "resource.disk_fill"}) {
    ASSERT_TRUE(m.count(id)) << id;
    EXPECT_EQ(m[id]->verdict, probes::Verdict::kBlocked) << id << ": " << m[id]->why;
    EXPECT_EQ(m[id]->layer, probes::Layer::kLimit) << id;
    bool read_back = false;
    for (const auto& note : m[id]->host.notes)
      read_back |= note.find(" of pid ") != std::string::npos;
    EXPECT_TRUE(read_back) << id << ": no host read-back among the notes";
  }
  // Planting a git hook inside the workspace is allowed, and flagged as a vector.
  ASSERT_TRUE(m.count("persist.git_hooks"));
  EXPECT_EQ(m["persist.git_hooks"]->verdict, probes::Verdict::kWarning)
      << m["persist.git_hooks"]->why;
  EXPECT_EQ(t.warning, 1);
  // The run's secret: not readable from another run, gone with its run.
  for (const char* id : {"crossrun.secret", "persist.secret"}) {
    ASSERT_TRUE(m.count(id)) << id;
    EXPECT_EQ(m[id]->verdict, probes::Verdict::kBlocked) << id << ": " << m[id]->why;
  }
  ASSERT_TRUE(s->close().ok());
}

// The podman provider's runs get the run's own /proc views too (providers/proc_views.h: the
// files runc binds): /proc/meminfo is the run's grant and run B no longer sees run A's burst in
// /proc/loadavg, in both modes, where natively both are exposed (/proc/vmstat is not among
// those files: exposed, as a known limit). And proc.tiocsti on the host's
// pty, given as the call's stdin over the supervisor's socket: reached natively, refused here by
// sandgate's own filter, which the podman supervisor installs for each call.
class PodmanProbeSuiteTest : public ProbeSuiteTest {
 protected:
  void check(providers::PodmanMode mode) {
    SANDGATE_REQUIRE_ROOT();
    providers::ProviderOptions o;
    o.paths = options_.paths;
    o.podman_mode = mode;
    auto resolved = providers::resolve_podman_mode(o, "");
    SANDGATE_REQUIRE(resolved.ok() && *resolved == mode,
                     "podman " + providers::to_string(mode) + ": " +
                         (resolved.ok() ? "resolves to another mode" : resolved.error().message()));
    options_.only = {"proc", "disclosure", "crossrun"};
    auto s = suite();
    ASSERT_TRUE(s);
    auto p = registry_.create("podman", o);
    ASSERT_TRUE(p.ok()) << p.error().message();
    auto run = s->run(**p);
    ASSERT_TRUE(run.ok()) << run.error().message();
    auto m = by_id(*run);
    for (const char* id : {"disclosure.meminfo", "crossrun.load_side_channel"}) {
      ASSERT_TRUE(m.count(id)) << id;
      EXPECT_EQ(m[id]->verdict, probes::Verdict::kBlocked) << id << ": " << m[id]->why;
      ASSERT_TRUE(m[id]->baseline.has_value()) << id;
      EXPECT_EQ(m[id]->baseline->result, probes::ProbeResult::kReached)
          << id << " natively: the baseline must hold";
    }
    EXPECT_TRUE(m["disclosure.meminfo"]->host.disclosed.empty());
    // /proc/interrupts is masked (maskedPaths); /proc/vmstat is the host's, as runc refuses the
    // view's bind there: exposed, with the limit that says what alone hides it.
    ASSERT_TRUE(m.count("disclosure.interrupts") && m.count("disclosure.vmstat"));
    EXPECT_EQ(m["disclosure.interrupts"]->verdict, probes::Verdict::kBlocked)
        << m["disclosure.interrupts"]->why;
    EXPECT_EQ(m["disclosure.vmstat"]->verdict, probes::Verdict::kExposed)
        << m["disclosure.vmstat"]->why;
    EXPECT_NE(m["disclosure.vmstat"]->known_limit.find("runc refuses"), std::string::npos)
        << m["disclosure.vmstat"]->known_limit;
    // sysinfo(2) is the run's views server's answer here too (issue 16): runc's profile lets
    // the call's child add its listener, and the server is on the host as for the jail.
    ASSERT_TRUE(m.count("disclosure.sysinfo"));
    EXPECT_EQ(m["disclosure.sysinfo"]->verdict, probes::Verdict::kBlocked)
        << m["disclosure.sysinfo"]->why;
    EXPECT_EQ(m["disclosure.sysinfo"]->layer, probes::Layer::kSeccomp);
    EXPECT_TRUE(m["disclosure.sysinfo"]->host.disclosed.empty());
    ASSERT_TRUE(m.count("proc.tiocsti"));
    const auto& tiocsti = *m["proc.tiocsti"];
    EXPECT_EQ(tiocsti.verdict, probes::Verdict::kBlocked) << tiocsti.why;
    EXPECT_EQ(tiocsti.layer, probes::Layer::kSeccomp) << tiocsti.why;
    ASSERT_TRUE(tiocsti.baseline.has_value());
    EXPECT_EQ(tiocsti.baseline->result, probes::ProbeResult::kReached);
    ASSERT_TRUE(tiocsti.sandbox.has_value());
    EXPECT_EQ(tiocsti.sandbox->evidence["terminal"], "stdin (the launcher's pty)");
    EXPECT_EQ(tiocsti.sandbox->evidence["plain"], "EPERM") << tiocsti.sandbox->evidence.dump();
    EXPECT_EQ(tiocsti.sandbox->evidence["high_bits"], "EPERM") << tiocsti.sandbox->evidence.dump();
    ASSERT_TRUE(s->close().ok());
  }
};

TEST_F(PodmanProbeSuiteTest, RootfulRunsHaveTheirOwnProcViewsAndNoTiocsti) {
  check(providers::PodmanMode::kRootful);
}

TEST_F(PodmanProbeSuiteTest, RootlessRunsHaveTheirOwnProcViewsAndNoTiocsti) {
  check(providers::PodmanMode::kRootless);
}

// The allowlist variant of the network probes: the jail wired to the lab, only the registry
// decoy's TCP 443 allowed. The allowed endpoint is reached (a warning: allowed by design, with
// the decoy's own log as witness); the production host on the same port, UDP and DNS
// exfiltration are refused by the egress guard (layer egress); nothing is exposed.
// Natively, run A's inotify hold used to be host root's: for as long as it lasted, no root
// process on the host could make an inotify instance. The baseline now takes it as a throwaway
// uid of the id pool. Root tries all through the baseline here and must never get EMFILE,
// while the baseline still shows the starvation (as that uid).
TEST_F(ProbeSuiteTest, NativeInotifyHoldNeverStarvesHostRoot) {
  SANDGATE_REQUIRE_ROOT();
  options_.only = {"crossrun"};
  std::atomic<bool> stop{false};
  std::atomic<int> tries{0}, starved{0};
  std::thread root_watch([&] {
    while (!stop) {
      int fd = ::inotify_init1(IN_CLOEXEC);
      if (fd >= 0)
        ::close(fd);
      else if (errno == EMFILE)
        ++starved;
      ++tries;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  auto s = suite();
  stop = true;
  root_watch.join();
  ASSERT_TRUE(s);
  EXPECT_GT(tries.load(), 10);
  EXPECT_EQ(starved.load(), 0)
      << "host root could not make an inotify instance during the baseline";
  const auto& base = s->baseline();
  ASSERT_TRUE(base.count("crossrun.user_inotify"));
  const auto& b = base.at("crossrun.user_inotify");
  EXPECT_EQ(b.result, probes::ProbeResult::kReached) << b.detail << " " << b.evidence.dump();
  ASSERT_TRUE(b.evidence.contains("uid")) << b.evidence.dump();
  EXPECT_GE(b.evidence["uid"].get<long long>(), static_cast<long long>(IdPool{}.first));
  // Reached as that uid: A's instances, held as the same uid, are what starved it.
  EXPECT_GT(b.evidence.value("other_inotify_held", 0), 0) << b.evidence.dump();
  ASSERT_TRUE(s->close().ok());
}

TEST_F(ProbeSuiteTest, NamespacesWithAnAllowlistReachesOnlyTheRegistry) {
  SANDGATE_REQUIRE_ROOT();
  auto guard = ebpf::EgressGuard::open();
  SANDGATE_REQUIRE(guard.ok(), "the eBPF egress guard cannot load here: " +
                                   (guard.ok() ? std::string() : guard.error().message()));
  auto rules = parse_egress_rules({"tcp:203.0.113.20:443", "tcp:registry.sandgate.test:443"});
  ASSERT_TRUE(rules.ok());
  options_.only = {"net"};
  options_.egress_allow = *rules;
  options_.egress_guard = guard->get();
  auto s = suite();
  ASSERT_TRUE(s);
  auto p = provider("namespaces");
  ASSERT_TRUE(p);
  auto run = s->run(*p);
  ASSERT_TRUE(run.ok()) << run.error().message();
  EXPECT_EQ(run->egress_allow,
            (std::vector<std::string>{"tcp:203.0.113.20:443", "tcp:registry.sandgate.test:443"}));
  for (const auto* j : run->exposed()) ADD_FAILURE() << j->id << ": " << j->why;
  auto m = by_id(*run);
  ASSERT_TRUE(m.count("net.registry_allowed"));
  EXPECT_EQ(m["net.registry_allowed"]->verdict, probes::Verdict::kWarning)
      << m["net.registry_allowed"]->why;
  EXPECT_NE(m["net.registry_allowed"]->why.find("egress allowlist permits"), std::string::npos)
      << m["net.registry_allowed"]->why;
  for (const char* id : {"net.production_tcp", "net.udp_exfil", "net.dns_exfil"}) {
    ASSERT_TRUE(m.count(id)) << id;
    EXPECT_EQ(m[id]->verdict, probes::Verdict::kBlocked) << id << ": " << m[id]->why;
    EXPECT_EQ(m[id]->layer, probes::Layer::kEgress) << id << ": " << m[id]->why;
  }
  // The run's own resolver: the registry's name resolves and the connect that follows is
  // allowed by design; DNS exfiltration through it is refused there (REFUSED, its log says so)
  // and the lab's DNS, its upstream, never sees the marker.
  ASSERT_TRUE(m.count("net.registry_by_name"));
  EXPECT_EQ(m["net.registry_by_name"]->verdict, probes::Verdict::kWarning) << m["net.registry_by_name"]->why;
  EXPECT_NE(m["net.registry_by_name"]->why.find("egress allowlist permits"), std::string::npos)
      << m["net.registry_by_name"]->why;
  ASSERT_TRUE(m.count("net.dns_exfil_resolver"));
  const auto& exfil = *m["net.dns_exfil_resolver"];
  EXPECT_EQ(exfil.verdict, probes::Verdict::kBlocked) << exfil.why;
  EXPECT_EQ(exfil.layer, probes::Layer::kEgress) << exfil.why;
  EXPECT_TRUE(exfil.host.decoy_events.empty());
  bool refused_logged = false, upstream_clean = false;
  for (const auto& note : exfil.host.notes) {
    if (note.find("refused A") != std::string::npos && note.find(s->marker()) != std::string::npos)
      refused_logged = true;
    if (note.find("saw no query carrying the marker") != std::string::npos) upstream_clean = true;
  }
  EXPECT_TRUE(refused_logged) << exfil.to_json().dump(2);
  EXPECT_TRUE(upstream_clean) << exfil.to_json().dump(2);
  // Ports outside the list: Landlock's TCP rule refuses them first where the kernel has it.
  for (const char* id : {"net.registry_other_port", "net.metadata_v4_get"}) {
    ASSERT_TRUE(m.count(id)) << id;
    EXPECT_EQ(m[id]->verdict, probes::Verdict::kBlocked) << id << ": " << m[id]->why;
    EXPECT_TRUE(m[id]->layer == probes::Layer::kLandlock || m[id]->layer == probes::Layer::kEgress)
        << id << ": " << m[id]->why;
  }
  ASSERT_TRUE(s->close().ok());
}

TEST_F(ProbeSuiteTest, HostDirIsExposedOnEveryBoundaryItOpens) {
  SANDGATE_REQUIRE_ROOT();
  auto s = suite();
  ASSERT_TRUE(s);
  auto p = provider("host_dir");
  ASSERT_TRUE(p);
  auto run = s->run(*p);
  ASSERT_TRUE(run.ok()) << run.error().message();
  auto m = by_id(*run);
  for (const char* id :
       {"net.metadata_v4_get", "net.metadata_v6_get", "fs.read_host_canary", "fs.write_host_dir",
        "creds.env_tokens", "creds.home_files", "crossrun.workspace_canary", "crossrun.tmp_canary",
        "persist.after_destroy", "disclosure.proc_cmdline", "disclosure.boot_id",
        "disclosure.mountinfo_host_path", "disclosure.vmstat", "disclosure.interrupts",
        "disclosure.sysinfo", "crossrun.user_inotify", "net.ssh_agent", "net.runtime_sockets",
        "net.interfaces", "proc.tiocsti"}) {
    ASSERT_TRUE(m.count(id)) << id;
    EXPECT_EQ(m[id]->verdict, probes::Verdict::kExposed) << id << ": " << m[id]->why;
  }
  // The decoy itself witnessed the metadata request: the second witness, not the probe's word.
  EXPECT_FALSE(m["net.metadata_v4_get"]->host.decoy_events.empty());
  EXPECT_FALSE(m["fs.write_host_dir"]->host.files_appeared.empty());
  // Its secret: any other host_dir run (root on the host) reads it by its path; it still dies
  // with its run (unmounted at destroy), which the probe shows too.
  ASSERT_TRUE(m.count("crossrun.secret") && m.count("persist.secret"));
  EXPECT_EQ(m["crossrun.secret"]->verdict, probes::Verdict::kExposed) << m["crossrun.secret"]->why;
  EXPECT_EQ(m["persist.secret"]->verdict, probes::Verdict::kBlocked) << m["persist.secret"]->why;
  ASSERT_TRUE(s->close().ok());
}

// A microVM given share_host_network (its one test-only weakening): its guest's one network
// device is a tap in the lab, every route there ends in the lab (lab_routed), and the net
// probes catch it, witnessed by the lab's decoys seeing the guest's address. Landlock holds
// nothing of it in a guest whose kernel's ABI lacks the rules (Debian 12's 6.1: ABI 2), and
// the holders expected are exactly those the reported ABI has.
TEST_F(ProbeSuiteTest, MicrovmWithATapOnTheLabIsCaughtByTheNetProbes) {
  SANDGATE_REQUIRE_ROOT();
  auto vm = providers::microvm_host(options_.paths);
  SANDGATE_REQUIRE(vm.ready.ok(), "microvm provider: " +
                                      (vm.ready.ok() ? std::string() : vm.ready.error().message()));
  options_.only = {"net"};
  auto s = suite();
  ASSERT_TRUE(s);
  providers::ProviderOptions o;
  o.paths = options_.paths;
  o.self_test_weakenings = true;
  o.supervisor_exe = SANDGATE_SUPERVISOR_BIN;
  auto p = registry_.create("microvm", o);
  ASSERT_TRUE(p.ok()) << p.error().message();
  const auto w = providers::Weakening::kShareHostNetwork;
  auto run = s->run(**p, {w});
  ASSERT_TRUE(run.ok()) << run.error().message();
  EXPECT_GE(run->landlock_abi, 1) << "the guest's supervisor says which Landlock it built for";
  auto m = by_id(*run);
  for (const auto& id : probes::probes_catching(w)) {
    ASSERT_TRUE(m.count(id)) << id << " did not run";
    EXPECT_EQ(probes::to_string(m[id]->verdict), "exposed") << id << ": " << m[id]->why;
  }
  ASSERT_TRUE(m.count("net.udp_exfil"));
  EXPECT_NE(m["net.udp_exfil"]->why.find("from 203.0.113."), std::string::npos)
      << "the decoy saw the guest's address: " << m["net.udp_exfil"]->why;
  for (const auto& line :
       probes::missing_holders(w, (*p)->capabilities(), run->judgements, run->landlock_abi))
    ADD_FAILURE() << "not held: " << line;
  ASSERT_TRUE(s->close().ok());
}

// Crossrun on microvm: run A's holder detaches in A's guest (A takes one exec at a time and the
// host cannot see its workspace live), its ready file is read and its signals written by execs
// of A's, and its report comes back from a file of A's workspace. Every probe of the boundary
// then has A's parameters and a verdict, and A's own account (crossrun.plant) says nobody
// touched what it held: two kernels share nothing of it.
TEST_F(ProbeSuiteTest, MicrovmCrossrunHasRunAsHolderAndAVerdictForEveryProbe) {
  SANDGATE_REQUIRE_ROOT();
  auto vm = providers::microvm_host(options_.paths);
  SANDGATE_REQUIRE(vm.ready.ok(), "microvm provider: " +
                                      (vm.ready.ok() ? std::string() : vm.ready.error().message()));
  options_.only = {"crossrun"};
  auto s = suite();
  ASSERT_TRUE(s);
  providers::ProviderOptions o;
  o.paths = options_.paths;
  o.supervisor_exe = SANDGATE_SUPERVISOR_BIN;
  auto p = registry_.create("microvm", o);
  ASSERT_TRUE(p.ok()) << p.error().message();
  auto run = s->run(**p, {});
  ASSERT_TRUE(run.ok()) << run.error().message();
  auto m = by_id(*run);
  size_t seen = 0;
  for (const auto& j : run->judgements) {
    if (j.id.rfind("crossrun.", 0) != 0) continue;
    ++seen;
    EXPECT_NE(j.verdict, probes::Verdict::kInconclusive) << j.id << ": " << j.why;
    EXPECT_NE(j.verdict, probes::Verdict::kExposed) << j.id << ": " << j.why;
  }
  EXPECT_GE(seen, 10u) << "the boundary's probes";
  ASSERT_TRUE(m.count("crossrun.plant"));
  ASSERT_TRUE(m["crossrun.plant"]->sandbox.has_value()) << m["crossrun.plant"]->why;
  // A held its objects while B ran: its listener's port and SysV keys reached B's parameters.
  ASSERT_TRUE(m.count("crossrun.loopback_port") && m["crossrun.loopback_port"]->sandbox);
  EXPECT_NE(m["crossrun.loopback_port"]->sandbox->result, probes::ProbeResult::kError)
      << m["crossrun.loopback_port"]->why;
  EXPECT_NE(m["crossrun.loopback_port"]->sandbox->result, probes::ProbeResult::kReached)
      << m["crossrun.loopback_port"]->why;
  const Json& ev = m["crossrun.plant"]->sandbox->evidence;
  EXPECT_TRUE(ev.contains("observed")) << ev.dump();
  // Not a namespace's doing: A's processes and objects are in another kernel (judge.h).
  for (const char* id : {"crossrun.plant", "crossrun.see_processes", "crossrun.signal_process",
                         "crossrun.sysv_shm", "crossrun.loopback_port"}) {
    ASSERT_TRUE(m.count(id)) << id;
    EXPECT_EQ(probes::to_string(m[id]->layer), "kernel") << id << ": " << m[id]->why;
  }
  ASSERT_TRUE(s->close().ok());
}

// Each weakening must be flagged exposed by every probe its plan names (probes/plan.cc: the
// probes that test directly what it opens), not merely by something. One test per weakening,
// each a whole probe run (15-20 s here), so that a parallel ctest spreads them.
class ProbeSelfTest : public ProbeSuiteTest,
                      public ::testing::WithParamInterface<providers::Weakening> {};

TEST_P(ProbeSelfTest, CatchesTheWeakening) {
  SANDGATE_REQUIRE_ROOT();
  const providers::Weakening w = GetParam();
  auto s = suite();
  ASSERT_TRUE(s);
  auto p = provider("namespaces", /*weakenings=*/true);
  ASSERT_TRUE(p);
  auto expected = probes::probes_catching(w);
  EXPECT_FALSE(expected.empty()) << "no probe is planned to catch it (probes/plan.cc)";
  auto run = s->run(*p, {w});
  EXPECT_TRUE(providers::remove_shared_dirs(options_.paths).ok());
  ASSERT_TRUE(run.ok()) << run.error().message();
  EXPECT_FALSE(run->exposed().empty()) << "was not caught";
  auto m = by_id(*run);
  for (const auto& id : expected) {
    ASSERT_TRUE(m.count(id)) << id << " did not run";
    EXPECT_EQ(probes::to_string(m[id]->verdict), "exposed")
        << "not caught by " << id << ": " << m[id]->why;
  }
  std::string also;
  for (const auto* j : run->exposed())
    if (std::find(expected.begin(), expected.end(), j->id) == expected.end()) also += " " + j->id;
  if (!also.empty()) std::cout << providers::to_string(w) << " also flagged by:" << also << "\n";
  // The layers the weakening leaves still hold what each holds alone (probes/plan.cc).
  for (const auto& line :
       probes::missing_holders(w, p->capabilities(), run->judgements, run->landlock_abi))
    ADD_FAILURE() << "not held: " << line;
  if (w == providers::Weakening::kSeccompFullWidthCompare) {
    // Caught by the twin with a high bit set: the plain call is still refused by the filter.
    for (const auto& id : expected) {
      ASSERT_TRUE(m[id]->sandbox.has_value()) << id;
      Json plain = m[id]->sandbox->evidence.value("plain", Json());
      if (plain.is_object()) plain = plain.value("socket", Json());
      EXPECT_EQ(plain, "EPERM") << id << ": " << m[id]->why;
    }
  }
  ASSERT_TRUE(s->close().ok());
}

INSTANTIATE_TEST_SUITE_P(Every, ProbeSelfTest, ::testing::ValuesIn(providers::all_weakenings()),
                         [](const ::testing::TestParamInfo<providers::Weakening>& info) {
                           std::string name = providers::to_string(info.param);
                           std::replace_if(
                               name.begin(), name.end(),
                               [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); },
                               '_');
                           return name;
                         });

// The ids of every probe sandgate-probe has (`sandgate-probe list`).
std::set<std::string> catalogue_ids() {
  std::set<std::string> ids;
  auto listed = run_command({SANDGATE_PROBE_BINARY, "list"}, std::chrono::seconds(30), 1 << 20);
  EXPECT_TRUE(listed.ok()) << listed.error().message();
  if (!listed.ok()) return ids;
  EXPECT_EQ(listed->status.shell_code(), 0) << listed->output;
  for (const auto& line : split(listed->output, '\n')) {
    if (line.empty()) continue;
    auto j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(j.is_object() && j.contains("id")) << line;
    if (j.is_object() && j.contains("id")) ids.insert(j["id"].get<std::string>());
  }
  EXPECT_GT(ids.size(), 50u);
  return ids;
}

// A plan for a misspelt id is silently unused: the probe falls back to a self-witnessed
// default (plan_for), and its witness, grant and parameters are not the ones planned.
TEST(ProbePlans, NameOnlyProbesOfTheCatalogue) {
  auto ids = catalogue_ids();
  for (const auto& plan : probes::probe_plans())
    EXPECT_TRUE(ids.count(plan.id)) << plan.id << " is not a probe";
}

// Every weakening has probes planned to catch it, each a probe that exists; a catcher that had
// no plan of its own keeps the default plan's witness and grant.
TEST(ProbePlans, EveryWeakeningHasCatchersThatExist) {
  auto ids = catalogue_ids();
  for (auto w : providers::all_weakenings()) {
    auto catching = probes::probes_catching(w);
    EXPECT_FALSE(catching.empty())
        << providers::to_string(w) << ": no probe is planned to catch it";
    for (const auto& id : catching) EXPECT_TRUE(ids.count(id)) << id << " is not a probe";
  }
  const auto& seccomp = probes::plan_for("proc.seccomp");
  EXPECT_EQ(seccomp.witness, probes::Witness::kSelf);
  EXPECT_EQ(seccomp.intent, "probe");
  EXPECT_EQ(seccomp.grant.memory_max, probes::plan_for("no.such_probe").grant.memory_max);
  EXPECT_EQ(probes::plan_for("creds.env_tokens").witness, probes::Witness::kCanary);
}

TEST_F(ProbeSuiteTest, UnknownBoundaryIsRefusedBeforeAnythingIsMade) {
  options_.only = {"filesystem"};
  auto s = probes::Suite::create(options_);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("unknown boundary 'filesystem'"), std::string::npos)
      << s.error().message();
}

}  // namespace
}  // namespace sandgate::testing
