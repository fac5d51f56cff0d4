// Host-side collectors against fake trees (cgroupfs, procfs, directories) and fabricated decoy
// events; each with its negative twin.
#include "probes/witness.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sched.h>
#include <signal.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/defer.h"
#include "core/fd.h"
#include "core/files.h"
#include "probes/disclosure.h"
#include "tests/support/privileged.h"

namespace sandgate::probes {
namespace {

class WitnessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sgwitness-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmp_ = tmpl;
  }
  void TearDown() override { (void)remove_tree(tmp_); }
  void put(const std::string& rel, const std::string& text) {
    std::string path = tmp_ + "/" + rel;
    ASSERT_TRUE(make_dirs(path.substr(0, path.rfind('/'))).ok());
    ASSERT_TRUE(write_file(path, text, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC).ok());
  }
  std::string tmp_;
};

controller::Grant grant() {
  controller::Grant g;
  g.memory_max = MiB(64);
  g.pids_max = 32;
  g.cpu_cores = 0.5;
  return g;
}

TEST_F(WitnessTest, V1LimitsMatchingTheGrant) {
  put("memory/call/memory.limit_in_bytes", "67108864\n");
  put("pids/call/pids.max", "32\n");
  put("cpu/call/cpu.cfs_quota_us", "50000\n");
  put("cpu/call/cpu.cfs_period_us", "100000\n");
  controller::Cgroup cg{"x", {{"memory", tmp_ + "/memory/call"}, {"pids", tmp_ + "/pids/call"},
                              {"cpu", tmp_ + "/cpu/call"}}};
  auto r = read_back_limits(cg, grant());
  EXPECT_TRUE(r.mismatches.empty()) << r.mismatches.front();
  EXPECT_EQ(r.checked.size(), 3u);
}
TEST_F(WitnessTest, V1DroppedLimitsAreMismatches) {
  put("memory/call/memory.limit_in_bytes", "9223372036854771712\n");
  put("pids/call/pids.max", "max\n");
  put("cpu/call/cpu.cfs_quota_us", "-1\n");
  put("cpu/call/cpu.cfs_period_us", "100000\n");
  controller::Cgroup cg{"x", {{"memory", tmp_ + "/memory/call"}, {"pids", tmp_ + "/pids/call"},
                              {"cpu", tmp_ + "/cpu/call"}}};
  auto r = read_back_limits(cg, grant());
  ASSERT_EQ(r.mismatches.size(), 3u);
  EXPECT_NE(r.mismatches[0].find("granted 64MiB, host has 9223372036854771712"), std::string::npos)
      << r.mismatches[0];
}
TEST_F(WitnessTest, V2LimitsAndAMissingFile) {
  put("unified/call/memory.max", "67108864\n");
  put("unified/call/cpu.max", "50000 100000\n");
  controller::Cgroup cg{"x", {{"unified", tmp_ + "/unified/call"}}};
  auto r = read_back_limits(cg, grant());
  EXPECT_EQ(r.checked.size(), 2u);
  ASSERT_EQ(r.mismatches.size(), 1u);
  EXPECT_NE(r.mismatches[0].find("pids.max"), std::string::npos);
  EXPECT_NE(r.mismatches[0].find("not found"), std::string::npos);
}

TEST_F(WitnessTest, MarkedEntriesAndRemainingCgroups) {
  put("dir/sandgate-probe-M1", "x");
  put("dir/unrelated", "x");
  auto found = marked_entries(tmp_ + "/dir", "M1");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], tmp_ + "/dir/sandgate-probe-M1");
  EXPECT_TRUE(marked_entries(tmp_ + "/dir", "M2").empty());
  controller::Cgroup cg{"x", {{"memory", tmp_ + "/dir"}, {"pids", tmp_ + "/gone"}}};
  EXPECT_EQ(remaining_cgroups(cg), std::vector<std::string>{tmp_ + "/dir"});
}

TEST_F(WitnessTest, TreeChangesSeeNewAndAppendedFiles) {
  put("home/.bashrc", "a\n");
  put("home/.ssh/id", "k\n");
  auto before = snapshot_tree(tmp_ + "/home");
  EXPECT_TRUE(tree_changes(tmp_ + "/home", before, snapshot_tree(tmp_ + "/home")).empty());
  ::usleep(2000);
  put("home/.bashrc", "a\n# sandgate-persist M\n");
  put("home/.sandgate-persist-M", "M\n");
  auto changes = tree_changes(tmp_ + "/home", before, snapshot_tree(tmp_ + "/home"));
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0], tmp_ + "/home/.bashrc (changed)");
  EXPECT_EQ(changes[1], tmp_ + "/home/.sandgate-persist-M (new)");
}

TEST_F(WitnessTest, TreeSnapshotOfA100000LevelTreeIsBoundedAndReported) {
  // What a sandbox may leave in a canary home. The old walk (recursive_directory_iterator and
  // a full path per entry) took 112 s and 21 GB of memory on this tree under ASan before EMFILE
  // stopped it.
  // On tmpfs where there is one: this machine's ext4 is mounted with `discard`, and removing
  // 100,000 directories there takes minutes whatever removes them.
  struct statfs fs;
  std::string base =
      ::statfs("/dev/shm", &fs) == 0 && fs.f_type == TMPFS_MAGIC ? "/dev/shm" : "/tmp";
  std::string tmpl = base + "/sgwitness-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  Defer cleanup([&] { EXPECT_TRUE(remove_tree(tmpl).ok()); });
  std::string home = tmpl + "/home";
  ASSERT_TRUE(make_dirs(home).ok());
  ASSERT_TRUE(write_file(home + "/.bashrc", "a\n", O_WRONLY | O_CREAT | O_CLOEXEC).ok());
  auto before = snapshot_tree(home);
  EXPECT_TRUE(before.stopped.empty()) << before.stopped;
  {
    UniqueFd fd(::open(home.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    for (int i = 0; i < 100'000 && fd; ++i) {
      ASSERT_EQ(::mkdirat(fd.get(), "d", 0755), 0) << i;
      fd = UniqueFd(::openat(fd.get(), "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    }
    ASSERT_TRUE(fd.valid());
  }
  auto after = snapshot_tree(home);
  EXPECT_EQ(after.stopped, "deeper than " + std::to_string(kSnapshotMaxDepth) + " levels");
  // .bashrc and d, d/d, ... down to kSnapshotMaxDepth levels.
  EXPECT_EQ(after.entries.size(), 1u + kSnapshotMaxDepth);
  auto changes = tree_changes(home, before, after);
  ASSERT_FALSE(changes.empty());
  EXPECT_EQ(changes.back(), home + " (snapshot stopped: deeper than " +
                                std::to_string(kSnapshotMaxDepth) + " levels)");
  EXPECT_EQ(changes.front(), home + "/d (new)");
}

TEST_F(WitnessTest, TreeSnapshotOfAWideTreeIsBoundedAndReported) {
  put("home/.bashrc", "a\n");
  auto before = snapshot_tree(tmp_ + "/home");
  ASSERT_TRUE(make_dirs(tmp_ + "/home/many").ok());
  for (size_t i = 0; i < kSnapshotMaxEntries; ++i)
    ASSERT_TRUE(
        write_file(tmp_ + "/home/many/" + std::to_string(i), "", O_WRONLY | O_CREAT | O_CLOEXEC)
            .ok());
  auto after = snapshot_tree(tmp_ + "/home");
  EXPECT_EQ(after.stopped, "more than " + std::to_string(kSnapshotMaxEntries) + " entries");
  EXPECT_EQ(after.entries.size(), kSnapshotMaxEntries);
  auto changes = tree_changes(tmp_ + "/home", before, after);
  ASSERT_FALSE(changes.empty());
  EXPECT_EQ(changes.back(), tmp_ + "/home (snapshot stopped: more than " +
                                std::to_string(kSnapshotMaxEntries) + " entries)");
  // Its negative twin: the same bound hit before and after is no change by itself.
  EXPECT_TRUE(tree_changes(tmp_ + "/home", after, snapshot_tree(tmp_ + "/home")).empty());
}

TEST_F(WitnessTest, MarkedProcessesFromAFakeProc) {
  put("proc/100/cmdline", std::string("sandgate-probe\0linger\0M1\0" "60\0", 28));
  put("proc/100/environ", "");
  put("proc/200/cmdline", std::string("sh\0", 3));
  put("proc/200/environ", std::string("TOKEN=x-M1\0", 11));
  put("proc/300/cmdline", std::string("bash\0", 5));
  put("proc/300/environ", "");
  put("proc/self/cmdline", "M1");  // not a pid
  auto found = marked_processes(tmp_ + "/proc", "M1", {});
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0], "100 sandgate-probe linger M1 60");
  EXPECT_EQ(found[1], "200 sh (marker in its environment)");
  EXPECT_EQ(marked_processes(tmp_ + "/proc", "M1", {100, 200}).size(), 0u);
  EXPECT_TRUE(marked_processes(tmp_ + "/proc", "", {}).empty());
}

TEST_F(WitnessTest, PidnsOfTheCallerIsNeverScanned) {
  // host_dir runs share the host's pid namespace: scanning it would name every process.
  EXPECT_TRUE(processes_in_pidns("/proc", pidns_inode("/proc", ::getpid())).empty());
  EXPECT_TRUE(processes_in_pidns("/proc", 0).empty());
  EXPECT_GT(pidns_inode("/proc", ::getpid()), 0u);
}

TEST(DecoyEvidence, MarkedEventsOnlyUnlessTheWindowIsTheProbes) {
  lab::LabEvent http;
  http.kind = lab::LabEvent::Kind::kHttpRequest;
  http.decoy = "metadata";
  http.local_address = "169.254.169.254";
  http.local_port = 80;
  http.request_line = "GET /latest/meta-data/?sandgate=M1 HTTP/1.1";
  lab::LabEvent header = http;
  header.request_line = "GET / HTTP/1.1";
  header.headers = {{"X-Sandgate-Marker", "M1"}};
  lab::LabEvent dns;
  dns.kind = lab::LabEvent::Kind::kDnsQuery;
  dns.decoy = "dns";
  dns.dns_name = "M1.exfil.sandgate.test";
  lab::LabEvent bare;
  bare.kind = lab::LabEvent::Kind::kTcpConnect;
  bare.decoy = "production";
  auto marked = decoy_evidence({http, header, dns, bare}, "M1", false);
  ASSERT_EQ(marked.size(), 3u);
  EXPECT_NE(marked[0].find("metadata"), std::string::npos);
  EXPECT_NE(marked[0].find("sandgate=M1"), std::string::npos);
  EXPECT_NE(marked[2].find("M1.exfil.sandgate.test"), std::string::npos);
  EXPECT_EQ(decoy_evidence({http, header, dns, bare}, "M1", true).size(), 4u);
  EXPECT_TRUE(decoy_evidence({http}, "M2", false).empty());
}

TEST(Witness, TakeAllowlistedSplitsByAddressPortAndProtocol) {
  auto rules = parse_egress_rules({"tcp:203.0.113.20:443", "udp:203.0.113.53:53"});
  ASSERT_TRUE(rules.ok());
  auto event = [](const char* addr, uint16_t port, lab::LabEvent::Kind kind) {
    lab::LabEvent e;
    e.local_address = addr;
    e.local_port = port;
    e.kind = kind;
    return e;
  };
  using K = lab::LabEvent::Kind;
  std::vector<lab::LabEvent> events = {
      event("203.0.113.20", 443, K::kTcpConnect), event("203.0.113.20", 443, K::kUdpDatagram),
      event("203.0.113.20", 8080, K::kTcpConnect), event("203.0.113.53", 53, K::kDnsQuery),
      event("203.0.113.10", 443, K::kHttpRequest)};
  auto allowed = take_allowlisted(events, *rules);
  ASSERT_EQ(allowed.size(), 2u);
  EXPECT_EQ(allowed[0].local_port, 443);
  EXPECT_EQ(allowed[1].kind, K::kDnsQuery);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].kind, K::kUdpDatagram);
  EXPECT_TRUE(take_allowlisted(events, {}).empty());
  EXPECT_EQ(events.size(), 3u);
}

// A DNS query for a name of the list reaches the lab's DNS from the run's resolver by design;
// any other name asked there (the marker's) stays a crossing.
TEST(Witness, TakeAllowlistedKeepsTheResolversQueriesForListedNames) {
  auto rules = parse_egress_rules({"tcp:registry.sandgate.test:443"});
  ASSERT_TRUE(rules.ok());
  lab::LabEvent listed, other;
  listed.kind = other.kind = lab::LabEvent::Kind::kDnsQuery;
  listed.local_address = other.local_address = "203.0.113.53";
  listed.local_port = other.local_port = 53;
  listed.dns_name = "Registry.Sandgate.Test";
  other.dns_name = "M1.exfil.sandgate.test";
  std::vector<lab::LabEvent> events = {listed, other};
  auto allowed = take_allowlisted(events, *rules);
  ASSERT_EQ(allowed.size(), 1u);
  EXPECT_EQ(allowed[0].dns_name, "Registry.Sandgate.Test");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].dns_name, "M1.exfil.sandgate.test");
}
// --- Disclosure: the host's own copy of what the probe read (a fake /proc) ---

ProbeReport disclosure_report(const std::string& id, Json evidence) {
  ProbeReport r;
  r.id = id;
  r.boundary = "disclosure";
  r.result = ProbeResult::kReached;
  r.evidence = std::move(evidence);
  return r;
}

TEST_F(WitnessTest, DisclosureOfTheSameBytesIsSeenAndADifferentViewIsNot) {
  put("proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/vda1 secret=hunter2\n");
  put("proc/sys/kernel/random/boot_id", "0f1e2d3c-aaaa-4bbb-8ccc-123456789abc\n");
  put("proc/meminfo", "MemTotal:       24576000 kB\nMemFree:  1 kB\n");
  put("proc/partitions", "major minor  #blocks  name\n\n 252        0   52428800 vda\n");
  std::string proc = tmp_ + "/proc";
  auto same = disclosure_host_view(
      "disclosure.proc_cmdline",
      disclosure_report(
          "disclosure.proc_cmdline",
          {{"digest", content_digest("BOOT_IMAGE=/vmlinuz root=/dev/vda1 secret=hunter2")}}),
      proc, "6.1", {});
  ASSERT_EQ(same.disclosed.size(), 1u);
  EXPECT_NE(same.disclosed[0].find("/proc/cmdline"), std::string::npos);
  EXPECT_EQ(same.disclosed[0].find("hunter2"), std::string::npos)
      << "the host's copy is not quoted";
  // The negative twin: a per-run boot id is not the host's.
  auto other = disclosure_host_view(
      "disclosure.boot_id",
      disclosure_report("disclosure.boot_id",
                        {{"digest", content_digest("11111111-2222-4333-8444-555555555555")}}),
      proc, "6.1", {});
  EXPECT_TRUE(other.disclosed.empty());
  auto mem = disclosure_host_view(
      "disclosure.meminfo",
      disclosure_report("disclosure.meminfo",
                        {{"digest", content_digest("MemTotal:       24576000 kB")}}),
      proc, "6.1", {});
  ASSERT_EQ(mem.disclosed.size(), 1u);
  EXPECT_FALSE(mem.notes.empty()) << "says what alone would hide it";
  // sysinfo(2), which no /proc view covers: a note where it is the host's total, none where
  // it is not.
  auto sysinfo_note = [&](uint64_t bytes) {
    auto v = disclosure_host_view(
        "disclosure.meminfo",
        disclosure_report("disclosure.meminfo", {{"digest", content_digest("MemTotal: 1 kB")},
                                                 {"sysinfo_totalram_bytes", bytes}}),
        proc, "6.1", {});
    for (const auto& n : v.notes)
      if (n.find("sysinfo(2) in the sandbox") != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(sysinfo_note(24576000ull * 1024));
  EXPECT_FALSE(sysinfo_note(262144ull * 1024));
  auto dev = disclosure_host_view(
      "disclosure.block_devices",
      disclosure_report("disclosure.block_devices", {{"devices", {"loop9", "vda"}}}), proc, "6.1",
      {});
  ASSERT_EQ(dev.disclosed.size(), 1u);
  EXPECT_NE(dev.disclosed[0].find("vda"), std::string::npos);
  EXPECT_EQ(dev.disclosed[0].find("loop9"), std::string::npos);
  auto rel = disclosure_host_view(
      "disclosure.kernel_release",
      disclosure_report("disclosure.kernel_release", {{"release", "6.1"}}), proc, "6.1", {});
  EXPECT_EQ(rel.disclosed.size(), 1u);
  auto rel_vm = disclosure_host_view(
      "disclosure.kernel_release",
      disclosure_report("disclosure.kernel_release", {{"release", "5.10-guest"}}), proc, "6.1", {});
  EXPECT_TRUE(rel_vm.disclosed.empty()) << "a guest kernel's release is not the host's";
}

// disclosure.sysinfo (issue 16): sysinfo(2)'s total is the host's MemTotal (exposed), the
// call's grant (the run's own answer, noted), or neither (noted, with both numbers).
TEST_F(WitnessTest, SysinfoIsTheHostsWhenItsTotalIsTheHostsMemTotal) {
  put("proc/meminfo", "MemTotal:       24576000 kB\nMemFree:  1 kB\n");
  std::string proc = tmp_ + "/proc";
  const uint64_t grant = 256ull << 20;
  auto view = [&](Json total, std::optional<uint64_t> g) {
    return disclosure_host_view(
        "disclosure.sysinfo", disclosure_report("disclosure.sysinfo", {{"totalram_bytes", total}}),
        proc, "6.1", {}, g);
  };
  auto has_note = [](const HostView& v, const std::string& text) {
    for (const auto& n : v.notes)
      if (n.find(text) != std::string::npos) return true;
    return false;
  };
  auto host = view(24576000ull * 1024, grant);
  ASSERT_EQ(host.disclosed.size(), 1u);
  EXPECT_NE(host.disclosed[0].find("24576000 kB"), std::string::npos) << host.disclosed[0];
  EXPECT_TRUE(has_note(host, "unless the sandbox answers it")) << "says what alone would hide it";
  auto own = view(grant, grant);
  EXPECT_TRUE(own.disclosed.empty());
  EXPECT_TRUE(has_note(own, "the call's memory grant"));
  auto neither = view(512ull << 20, grant);
  EXPECT_TRUE(neither.disclosed.empty());
  EXPECT_TRUE(has_note(neither, "neither the host's MemTotal (24576000 kB)"));
  EXPECT_TRUE(view(grant, std::nullopt).disclosed.empty())
      << "no grant known: still not the host's";
  EXPECT_TRUE(view("25165824000", grant).disclosed.empty()) << "hostile evidence of the wrong type";
  EXPECT_TRUE(view(-1, grant).disclosed.empty());
}

// /proc/vmstat moves between the probe's read and the host's: the host's count of faults since
// boot, read after, decides. The host's own text (read a moment earlier) is at most that and
// near it; a run's own count from a view is far below; a count above the host's is no read of
// the host's.
TEST_F(WitnessTest, VmstatIsTheHostsWhenItsFaultCountIsTheHosts) {
  put("proc/vmstat", "nr_free_pages 100\npgfault 1000000\npgmajfault 5\n");
  std::string proc = tmp_ + "/proc";
  auto view = [&](Json pgfault) {
    return disclosure_host_view("disclosure.vmstat",
                                disclosure_report("disclosure.vmstat", {{"pgfault", pgfault}}),
                                proc, "6.1", {});
  };
  auto host = view(999'000u);
  ASSERT_EQ(host.disclosed.size(), 1u);
  EXPECT_NE(host.disclosed[0].find("pgfault 999000"), std::string::npos) << host.disclosed[0];
  EXPECT_FALSE(host.notes.empty()) << "says what alone would hide it";
  EXPECT_TRUE(view(4'321u).disclosed.empty()) << "the run's own faults";
  EXPECT_TRUE(view(2'000'000u).disclosed.empty()) << "more than the host's: not the host's";
  EXPECT_TRUE(view("999000").disclosed.empty()) << "hostile evidence of the wrong type";
  EXPECT_TRUE(view(-5).disclosed.empty());
}

// /proc/interrupts: the sources the host's copy names, without the counts that move.
TEST_F(WitnessTest, InterruptsAreTheHostsWhenTheirSourcesAreTheHosts) {
  const std::string host_text =
      "           CPU0       CPU1       \n"
      " 24:          2          0  IO-APIC   5-edge      ACPI:Ged\n"
      " 29:     150123     200456  PCI-MSI 49152-edge      virtio0-input.0\n"
      "NMI:          0          0   Non-maskable interrupts\n"
      "ERR:          0\n";
  put("proc/interrupts", host_text);
  std::string proc = tmp_ + "/proc";
  // The same host a moment later: every count moved, the sources did not.
  const std::string later =
      "           CPU0       CPU1       \n"
      " 24:          3          0  IO-APIC   5-edge      ACPI:Ged\n"
      " 29:     150999     201000  PCI-MSI 49152-edge      virtio0-input.0\n"
      "NMI:          1          0   Non-maskable interrupts\n"
      "ERR:          0\n";
  EXPECT_EQ(interrupt_sources(later), interrupt_sources(host_text));
  EXPECT_EQ(interrupt_sources(host_text),
            "cpus 2\n24: IO-APIC 5-edge ACPI:Ged\n29: PCI-MSI 49152-edge virtio0-input.0\n"
            "NMI: Non-maskable interrupts\nERR:\n");
  auto seen = disclosure_host_view(
      "disclosure.interrupts",
      disclosure_report("disclosure.interrupts",
                        {{"digest", content_digest(interrupt_sources(later))}}),
      proc, "6.1", {});
  EXPECT_EQ(seen.disclosed.size(), 1u);
  // A guest's (another machine's devices) is not the host's.
  auto guest = disclosure_host_view(
      "disclosure.interrupts",
      disclosure_report(
          "disclosure.interrupts",
          {{"digest", content_digest(interrupt_sources("CPU0\n 1: 9 IO-APIC 1-edge i8042\n"))}}),
      proc, "6.1", {});
  EXPECT_TRUE(guest.disclosed.empty());
  EXPECT_EQ(vmstat_value("pgfaultx 1\npgfault 42\n", "pgfault"), 42u);
  EXPECT_FALSE(vmstat_value("pgfault\n", "pgfault").has_value());
}

TEST_F(WitnessTest, DisclosureOfTheWorkspacesHostPathInMountinfo) {
  std::vector<std::string> host_paths = {"/var/tmp/sandgate/r1/workspace", "/var/tmp/sandgate/r1",
                                         "/var/tmp/sandgate", "/r1/"};
  auto overlay = disclosure_host_view(
      "disclosure.mountinfo_host_path",
      disclosure_report("disclosure.mountinfo_host_path",
                        {{"workspace", "/workspace"},
                         {"workspace_mount",
                          "612 600 0:88 / /workspace rw - overlay overlay "
                          "rw,lowerdir=/src,upperdir=/var/tmp/sandgate/r1/upper,workdir=/x"}}),
      tmp_, "", host_paths);
  ASSERT_EQ(overlay.disclosed.size(), 1u);
  EXPECT_NE(overlay.disclosed[0].find("/var/tmp/sandgate/r1"), std::string::npos);
  // A bind from a separately mounted /var/tmp names the path below that mount only.
  auto bind = disclosure_host_view(
      "disclosure.mountinfo_host_path",
      disclosure_report("disclosure.mountinfo_host_path",
                        {{"workspace", "/workspace"},
                         {"workspace_mount",
                          "612 600 8:1 /sandgate/r1/workspace /workspace rw - ext4 /dev/vda1 rw"}}),
      tmp_, "", host_paths);
  EXPECT_EQ(bind.disclosed.size(), 1u);
  auto hidden = disclosure_host_view(
      "disclosure.mountinfo_host_path",
      disclosure_report("disclosure.mountinfo_host_path",
                        {{"workspace", "/workspace"},
                         {"workspace_mount", "612 600 7:3 / /workspace rw - ext4 /dev/loop3 rw"}}),
      tmp_, "", host_paths);
  EXPECT_TRUE(hidden.disclosed.empty()) << "a per-run image names no host path";
  // host_dir: the workspace is its host path.
  auto direct =
      disclosure_host_view("disclosure.mountinfo_host_path",
                           disclosure_report("disclosure.mountinfo_host_path",
                                             {{"workspace", "/var/tmp/sandgate/r1/workspace"}}),
                           tmp_, "", host_paths);
  EXPECT_EQ(direct.disclosed.size(), 1u);
}

// A pid namespace of its own: a child unshares one and forks its pid 1, which waits. Returns
// {child, its pid 1's host pid}; killing the pid 1 ends the namespace.
std::pair<pid_t, pid_t> start_pidns() {
  int p[2];
  if (::pipe(p) != 0) return {-1, -1};
  pid_t child = ::fork();
  if (child == 0) {
    ::close(p[0]);
    if (::unshare(CLONE_NEWPID) != 0) ::_exit(1);
    pid_t init = ::fork();
    if (init == 0) {
      ::pause();
      ::_exit(0);
    }
    (void)!::write(p[1], &init, sizeof init);
    ::waitpid(init, nullptr, 0);
    ::_exit(0);
  }
  ::close(p[1]);
  pid_t init = -1;
  if (::read(p[0], &init, sizeof init) != sizeof init) init = -1;
  ::close(p[0]);
  return {child, init};
}

void end_pidns(std::pair<pid_t, pid_t> ns) {
  if (ns.second > 0) ::kill(ns.second, SIGKILL);  // the test's own processes, by pid
  if (ns.first > 0) ::waitpid(ns.first, nullptr, 0);
}

// The persist probe looks for the run's processes by its pid namespace's number after the run
// is destroyed. The kernel gives a freed number to the next namespace made: held open, the
// run's namespace keeps its own, and the namespaces made after it get others.
TEST(HeldPidns, ItsNumberIsNotGivenToTheNamespacesMadeAfterIt) {
  SANDGATE_REQUIRE_ROOT();
  auto first = start_pidns();
  ASSERT_GT(first.second, 0);
  HeldPidns held = hold_pidns("/proc", first.second);
  ASSERT_GT(held.inode, 0u);
  end_pidns(first);
  for (int i = 0; i < 5; ++i) {
    auto next = start_pidns();
    ASSERT_GT(next.second, 0);
    unsigned long long inode = pidns_inode("/proc", next.second);
    end_pidns(next);
    ASSERT_GT(inode, 0u);
    EXPECT_NE(inode, held.inode) << "a later namespace got the held one's number";
    EXPECT_TRUE(processes_in_pidns("/proc", held.inode).empty());
  }
}

}  // namespace
}  // namespace sandgate::probes
