// The v1 backend against fake v1 hierarchies: directories per controller, the exact values it
// writes, the counters it parses, the freezer and the pressure_level registration.
#include "controller/cgroup_v1.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <regex>

#include "controller/cgroup_fake_fs.h"

namespace sandgate::controller {
namespace {

using ::testing::ElementsAre;
using testing::FakeCgroupFs;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

class V1BackendTest : public ::testing::Test {
 protected:
  Cgroup make_call(V1Backend& backend) {
    auto cg = backend.create("sandgate/r1/call-1", nullptr);
    EXPECT_TRUE(cg.ok()) << cg.error().message();
    if (!cg.ok()) return {};
    fs_.populate(*cg);
    return *cg;
  }
  std::string file(const Cgroup& cg, const std::string& hierarchy, const std::string& name) {
    return FakeCgroupFs::read_abs(cg.dirs.at(hierarchy) + "/" + name);
  }
  // What the kernel would show next in a counter file of the fake tree.
  void put(const Cgroup& cg, const std::string& hierarchy, const std::string& name,
           const std::string& text) {
    fs_.write_abs(cg.dirs.at(hierarchy) + "/" + name, text);
  }

  FakeCgroupFs fs_;
  CgroupLayout layout_ = fs_.v1_layout();
  V1Backend backend_{layout_};
};

TEST_F(V1BackendTest, CreateMakesTheCgroupInEveryHierarchyButCpuset) {
  Cgroup cg = make_call(backend_);
  EXPECT_EQ(cg.rel, "sandgate/r1/call-1");
  EXPECT_EQ(cg.dirs.size(), 5u);
  for (const char* h : {"memory", "cpu", "cpuacct", "pids", "freezer"})
    EXPECT_EQ(cg.dirs.at(h), fs_.path(std::string("v1/") + h + "/sandgate/r1/call-1")) << h;
  EXPECT_FALSE(std::filesystem::exists(fs_.path("v1/cpuset/sandgate")));
}

TEST_F(V1BackendTest, ComountedHierarchiesShareOneDirectoryAndOnePlacement) {
  FakeCgroupFs fs;
  V1Backend backend(fs.v1_layout(/*comount_cpu=*/true));
  auto cg = backend.create("sandgate/call-1", nullptr);
  ASSERT_TRUE(cg.ok()) << cg.error().message();
  std::string both = fs.path("v1/cpu,cpuacct/sandgate/call-1");
  EXPECT_EQ(cg->dirs.at("cpu"), both);
  EXPECT_EQ(cg->dirs.at("cpuacct"), both);
  EXPECT_THAT(backend.placement(*cg).cgroup_dirs,
              UnorderedElementsAre(both, fs.path("v1/memory/sandgate/call-1"),
                                   fs.path("v1/pids/sandgate/call-1"),
                                   fs.path("v1/freezer/sandgate/call-1")));
}

TEST_F(V1BackendTest, PlacementListsEveryHierarchyOnce) {
  Cgroup cg = make_call(backend_);
  EXPECT_THAT(backend_.placement(cg).cgroup_dirs,
              UnorderedElementsAre(cg.dirs.at("memory"), cg.dirs.at("cpu"), cg.dirs.at("cpuacct"),
                                   cg.dirs.at("pids"), cg.dirs.at("freezer")));
}

TEST_F(V1BackendTest, CreateRecordsEveryNewDirectoryInEveryHierarchy) {
  ::sandgate::testing::TempDir state_tmp;
  HostPaths paths;
  paths.state_dir = state_tmp / "state";
  auto state = RunState::create(paths, "r-test", "host_dir");
  ASSERT_TRUE(state.ok()) << state.error().message();
  fs_.write("v1/memory/sandgate/keep", "");  // v1/memory/sandgate exists already: not ours
  auto cg = backend_.create("sandgate/r1", &*state);
  ASSERT_TRUE(cg.ok()) << cg.error().message();
  std::vector<std::string> recorded;
  for (const auto& r : state->resources()) {
    EXPECT_EQ(r.kind, Resource::Kind::kCgroup);
    recorded.push_back(r.path);
  }
  EXPECT_THAT(recorded,
              UnorderedElementsAre(fs_.path("v1/memory/sandgate/r1"), fs_.path("v1/cpu/sandgate"),
                                   fs_.path("v1/cpu/sandgate/r1"), fs_.path("v1/cpuacct/sandgate"),
                                   fs_.path("v1/cpuacct/sandgate/r1"), fs_.path("v1/pids/sandgate"),
                                   fs_.path("v1/pids/sandgate/r1"), fs_.path("v1/freezer/sandgate"),
                                   fs_.path("v1/freezer/sandgate/r1")));
}

TEST_F(V1BackendTest, AFailedMkdirIsNotLeftRecorded) {
  ::sandgate::testing::TempDir state_tmp;
  HostPaths paths;
  paths.state_dir = state_tmp / "state";
  auto state = RunState::create(paths, "r-test", "host_dir");
  ASSERT_TRUE(state.ok());
  auto cg = backend_.create(std::string(300, 'x'), &*state);  // ENAMETOOLONG
  ASSERT_FALSE(cg.ok());
  EXPECT_EQ(cg.error().err, ENAMETOOLONG) << cg.error().message();
  EXPECT_TRUE(state->resources().empty());
}

TEST_F(V1BackendTest, SetLimitsWritesExactValues) {
  Cgroup cg = make_call(backend_);
  Limits l;
  l.memory_max = MiB(512);
  l.cpu_cores = 1.5;
  l.cpu_weight = 100;
  l.pids_max = 64;
  auto s = backend_.set_limits(cg, l);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(file(cg, "memory", "memory.limit_in_bytes"), "536870912");
  EXPECT_EQ(file(cg, "cpu", "cpu.cfs_period_us"), "100000");
  EXPECT_EQ(file(cg, "cpu", "cpu.cfs_quota_us"), "150000");
  EXPECT_EQ(file(cg, "cpu", "cpu.shares"), "1024");
  EXPECT_EQ(file(cg, "pids", "pids.max"), "64");
}

TEST_F(V1BackendTest, WeightMapsToShares) {
  Cgroup cg = make_call(backend_);
  for (auto [weight, shares] :
       {std::pair{1u, "10"}, std::pair{50u, "512"}, std::pair{10000u, "102400"}}) {
    fs_.write_abs(cg.dirs.at("cpu") + "/cpu.shares", "");
    Limits l;
    l.cpu_weight = weight;
    ASSERT_TRUE(backend_.set_limits(cg, l).ok());
    EXPECT_EQ(file(cg, "cpu", "cpu.shares"), shares) << "weight " << weight;
  }
}

TEST_F(V1BackendTest, MemoryHighIsAnErrorNamingItAndWritesNothing) {
  Cgroup cg = make_call(backend_);
  Limits l;
  l.memory_max = MiB(64);
  l.memory_high = MiB(32);
  auto s = backend_.set_limits(cg, l);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("memory_high"));
  EXPECT_EQ(file(cg, "memory", "memory.limit_in_bytes"), "");
}

TEST(V1BackendIo, BlkioIsManagedPlacedAndThrottled) {
  FakeCgroupFs fs;
  V1Backend backend(fs.v1_layout(/*comount_cpu=*/false, /*freezer=*/true, /*blkio=*/true));
  EXPECT_TRUE(backend.features().io_limits);
  auto cg = backend.create("sandgate/r1/call-1", nullptr);
  ASSERT_TRUE(cg.ok()) << cg.error().message();
  fs.populate(*cg);
  ASSERT_EQ(cg->dirs.at("blkio"), fs.path("v1/blkio/sandgate/r1/call-1"));
  EXPECT_THAT(backend.placement(*cg).cgroup_dirs, ::testing::Contains(cg->dirs.at("blkio")));
  Limits l;
  l.io_read_bps = 52428800;
  l.io_write_bps = 10485760;
  l.io_device = "252:0";
  auto s = backend.set_limits(*cg, l);
  ASSERT_TRUE(s.ok()) << s.error().message();
  std::string dir = cg->dirs.at("blkio");
  EXPECT_EQ(FakeCgroupFs::read_abs(dir + "/blkio.throttle.read_bps_device"), "252:0 52428800");
  EXPECT_EQ(FakeCgroupFs::read_abs(dir + "/blkio.throttle.write_bps_device"), "252:0 10485760");
}

TEST(V1BackendIo, OnlyTheSetRateIsWritten) {
  FakeCgroupFs fs;
  V1Backend backend(fs.v1_layout(false, true, /*blkio=*/true));
  auto cg = backend.create("sandgate/call-1", nullptr);
  ASSERT_TRUE(cg.ok()) << cg.error().message();
  fs.populate(*cg);
  Limits l;
  l.io_read_bps = 52428800;
  l.io_device = "252:0";
  ASSERT_TRUE(backend.set_limits(*cg, l).ok());
  std::string dir = cg->dirs.at("blkio");
  EXPECT_EQ(FakeCgroupFs::read_abs(dir + "/blkio.throttle.read_bps_device"), "252:0 52428800");
  EXPECT_EQ(FakeCgroupFs::read_abs(dir + "/blkio.throttle.write_bps_device"), "");
}

TEST(V1BackendIo, MissingDeviceOrHierarchyIsAnErrorNamingItAndWritesNothing) {
  FakeCgroupFs fs;
  V1Backend backend(fs.v1_layout(false, true, /*blkio=*/true));
  auto cg = backend.create("sandgate/call-1", nullptr);
  ASSERT_TRUE(cg.ok()) << cg.error().message();
  fs.populate(*cg);
  Limits l;
  l.pids_max = 5;
  l.io_read_bps = 52428800;
  auto s = backend.set_limits(*cg, l);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("io_device"));
  EXPECT_EQ(FakeCgroupFs::read_abs(cg->dirs.at("pids") + "/pids.max"), "");
  EXPECT_EQ(FakeCgroupFs::read_abs(cg->dirs.at("blkio") + "/blkio.throttle.read_bps_device"), "");

  // No blkio hierarchy: the field is named, and so is the hierarchy.
  V1Backend without(fs.v1_layout());
  EXPECT_FALSE(without.features().io_limits);
  auto cg2 = without.create("sandgate/call-2", nullptr);
  ASSERT_TRUE(cg2.ok()) << cg2.error().message();
  l.pids_max.reset();
  l.io_device = "252:0";
  s = without.set_limits(*cg2, l);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("io_read_bps"));
  EXPECT_THAT(s.error().message(), HasSubstr("blkio"));
}

TEST_F(V1BackendTest, LimitWhoseHierarchyIsMissingNamesTheField) {
  CgroupLayout layout = fs_.v1_layout();
  layout.v1_mounts.erase("pids");
  V1Backend backend(layout);
  auto cg = backend.create("sandgate/call-1", nullptr);
  ASSERT_TRUE(cg.ok());
  EXPECT_EQ(cg->dirs.count("pids"), 0u);
  Limits l;
  l.pids_max = 5;
  auto s = backend.set_limits(*cg, l);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("pids_max"));
}

TEST_F(V1BackendTest, ReadUsageParsesEveryCounter) {
  Cgroup cg = make_call(backend_);
  auto u = backend_.read_usage(cg);
  ASSERT_TRUE(u.ok()) << u.error().message();
  EXPECT_EQ(u->memory_current, 33554432u);
  EXPECT_EQ(u->memory_peak, 67108864u);
  EXPECT_EQ(u->memory_events.max, 5u);       // memory.failcnt
  EXPECT_EQ(u->memory_events.oom_kill, 2u);  // memory.oom_control
  EXPECT_EQ(u->memory_events.oom, 0u);       // v1 cannot say
  EXPECT_EQ(u->memory_events.high, 0u);
  EXPECT_EQ(u->cpu_usage_us, 98765432u);     // cpuacct.usage 98765432109 ns
  EXPECT_EQ(u->cpu_throttled_us, 1234567u);  // throttled_time 1234567890 ns
  EXPECT_EQ(u->cpu_nr_throttled, 37u);
  EXPECT_TRUE(u->pids_counted);
  EXPECT_EQ(u->pids_current, 3u);
  EXPECT_EQ(u->pids_max_events, 7u);
  EXPECT_FALSE(u->memory_pressure.has_value());
  EXPECT_FALSE(u->cpu_pressure.has_value());
}

TEST_F(V1BackendTest, ReadUsageOfAComountedCpuDirectory) {
  FakeCgroupFs fs;
  V1Backend backend(fs.v1_layout(/*comount_cpu=*/true));
  auto cg = backend.create("c", nullptr);
  ASSERT_TRUE(cg.ok());
  fs.populate(*cg);
  auto u = backend.read_usage(*cg);
  ASSERT_TRUE(u.ok()) << u.error().message();
  EXPECT_EQ(u->cpu_usage_us, 98765432u);
  EXPECT_EQ(u->cpu_nr_throttled, 37u);
}

// The monitor's reader: the files stay open, every read sees what the kernel (here the test)
// wrote since, and a partial read leaves the full-only counters at their last full values.
TEST_F(V1BackendTest, UsageReaderSeesNewValuesAndPartialReadsKeepFullOnlyOnes) {
  Cgroup cg = make_call(backend_);
  auto reader = backend_.usage_reader(cg);
  ASSERT_NE(reader, nullptr);
  auto first = reader->read(/*full=*/false);  // the first read is a full one anyway
  ASSERT_TRUE(first.ok()) << first.error().message();
  EXPECT_EQ(first->memory_current, 33554432u);
  EXPECT_EQ(first->memory_events.max, 5u);
  EXPECT_EQ(first->cpu_nr_throttled, 37u);
  EXPECT_EQ(first->cpu_throttled_us, 1234567u);

  put(cg, "memory", "memory.usage_in_bytes", "50331648\n");
  put(cg, "memory", "memory.max_usage_in_bytes", "83886080\n");
  put(cg, "memory", "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
  put(cg, "memory", "memory.failcnt", "6\n");
  put(cg, "cpuacct", "cpuacct.usage", "99000000000\n");
  put(cg, "cpu", "cpu.stat", "nr_periods 500\nnr_throttled 40\nthrottled_time 2000000000\n");
  put(cg, "pids", "pids.current", "5\n");
  put(cg, "pids", "pids.events", "max 8\n");

  auto partial = reader->read(false);
  ASSERT_TRUE(partial.ok()) << partial.error().message();
  EXPECT_EQ(partial->memory_current, 50331648u);
  EXPECT_EQ(partial->memory_events.oom_kill, 3u);
  EXPECT_EQ(partial->cpu_usage_us, 99000000u);
  EXPECT_EQ(partial->pids_current, 5u);
  EXPECT_EQ(partial->pids_max_events, 8u);
  // Full reads only: still the first read's values, not zero.
  EXPECT_EQ(partial->memory_peak, 67108864u);
  EXPECT_EQ(partial->memory_events.max, 5u);
  EXPECT_EQ(partial->cpu_nr_throttled, 37u);
  EXPECT_EQ(partial->cpu_throttled_us, 1234567u);

  auto full = reader->read(true);
  ASSERT_TRUE(full.ok()) << full.error().message();
  EXPECT_EQ(full->memory_events.max, 6u);
  EXPECT_EQ(full->memory_peak, 83886080u);
  EXPECT_EQ(full->cpu_nr_throttled, 40u);
  EXPECT_EQ(full->cpu_throttled_us, 2000000u);
  EXPECT_EQ(full->memory_current, 50331648u);
  // The same as a read_usage of the cgroup.
  auto once = backend_.read_usage(cg);
  ASSERT_TRUE(once.ok()) << once.error().message();
  EXPECT_EQ(once->memory_events.max, 6u);
  EXPECT_EQ(once->cpu_usage_us, full->cpu_usage_us);
  EXPECT_EQ(once->memory_peak, full->memory_peak);
}

// An idle call, the usual state of an agent's calls: while its CPU time stands still, a read
// skips the counters only its own tasks can move, and reads them again once it moves.
TEST_F(V1BackendTest, UsageReaderSkipsWhatOnlyTheTasksMoveWhileTheCpuClockStandsStill) {
  Cgroup cg = make_call(backend_);
  auto reader = backend_.usage_reader(cg);
  auto first = reader->read(true);
  ASSERT_TRUE(first.ok()) << first.error().message();
  // Moved by others (a reclaim, a parent reaping): read; moved by the tasks: not, since the
  // clock has not moved. (The fake can do what the kernel cannot, which shows the skip.)
  put(cg, "memory", "memory.usage_in_bytes", "50331648\n");
  put(cg, "pids", "pids.current", "1\n");
  put(cg, "memory", "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
  put(cg, "pids", "pids.events", "max 8\n");
  put(cg, "cpu", "cpu.stat", "nr_periods 500\nnr_throttled 40\nthrottled_time 2000000000\n");
  for (bool full : {false, true}) {
    auto idle = reader->read(full);
    ASSERT_TRUE(idle.ok()) << idle.error().message();
    EXPECT_EQ(idle->memory_current, 50331648u);
    EXPECT_EQ(idle->pids_current, 1u);
    EXPECT_EQ(idle->memory_events.oom_kill, first->memory_events.oom_kill);
    EXPECT_EQ(idle->pids_max_events, first->pids_max_events);
    EXPECT_EQ(idle->cpu_nr_throttled, first->cpu_nr_throttled);
  }
  // The clock moves: a partial read reads the every-read ones, a full read the others too.
  put(cg, "cpuacct", "cpuacct.usage", "99000000000\n");
  auto moved = reader->read(false);
  ASSERT_TRUE(moved.ok()) << moved.error().message();
  EXPECT_EQ(moved->cpu_usage_us, 99000000u);
  EXPECT_EQ(moved->memory_events.oom_kill, 3u);
  EXPECT_EQ(moved->pids_max_events, 8u);
  EXPECT_EQ(moved->cpu_nr_throttled, first->cpu_nr_throttled);  // full reads only
  auto full = reader->read(true);
  ASSERT_TRUE(full.ok()) << full.error().message();
  EXPECT_EQ(full->cpu_nr_throttled, 40u);
  EXPECT_EQ(full->pids_max_events, 8u);
}

// A read that fails halfway returns no figures: a counter it read before the failure must be
// read again next time, not skipped as read at this clock with the value that read dropped.
TEST_F(V1BackendTest, UsageReaderRereadsWhatAFailedReadReadBeforeItFailed) {
  Cgroup cg = make_call(backend_);
  auto reader = backend_.usage_reader(cg);
  auto first = reader->read(true);
  ASSERT_TRUE(first.ok()) << first.error().message();
  ASSERT_NE(first->memory_events.oom_kill, 3u);
  put(cg, "cpuacct", "cpuacct.usage", "99000000000\n");
  put(cg, "memory", "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
  put(cg, "pids", "pids.events", "max eight\n");  // read after memory.oom_control, and fails
  EXPECT_FALSE(reader->read(false).ok());
  put(cg, "pids", "pids.events", "max 8\n");  // the clock has not moved since
  auto next = reader->read(false);
  ASSERT_TRUE(next.ok()) << next.error().message();
  EXPECT_EQ(next->memory_events.oom_kill, 3u);
  EXPECT_EQ(next->pids_max_events, 8u);
}

TEST_F(V1BackendTest, UsageReaderWithoutACpuClockSkipsNothing) {
  FakeCgroupFs fs;
  CgroupLayout layout = fs.v1_layout();
  layout.v1_mounts.erase("cpuacct");
  V1Backend backend(layout);
  auto cg = backend.create("c", nullptr);
  ASSERT_TRUE(cg.ok()) << cg.error().message();
  fs.populate(*cg);
  auto reader = backend.usage_reader(*cg);
  ASSERT_TRUE(reader->read(true).ok());
  fs.write_abs(cg->dirs.at("pids") + "/pids.events", "max 8\n");
  fs.write_abs(cg->dirs.at("memory") + "/memory.oom_control",
               "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
  auto u = reader->read(false);
  ASSERT_TRUE(u.ok()) << u.error().message();
  EXPECT_EQ(u->cpu_usage_us, 0u);
  EXPECT_EQ(u->pids_max_events, 8u);
  EXPECT_EQ(u->memory_events.oom_kill, 3u);
}

TEST_F(V1BackendTest, UsageReaderKeepsItsFilesOpen) {
  Cgroup cg = make_call(backend_);
  auto reader = backend_.usage_reader(cg);
  ASSERT_TRUE(reader->read(true).ok());
  // Gone by path, still read through the open fd: no path lookup per sample.
  std::string usage = cg.dirs.at("memory") + "/memory.usage_in_bytes";
  ASSERT_EQ(::unlink(usage.c_str()), 0);
  EXPECT_FALSE(backend_.read_usage(cg).ok());
  auto u = reader->read(false);
  ASSERT_TRUE(u.ok()) << u.error().message();
  EXPECT_EQ(u->memory_current, 33554432u);
}

TEST_F(V1BackendTest, AReaderOfAMissingCgroupFailsAsGone) {
  Cgroup cg{"gone", {{"memory", fs_.path("v1/memory/gone")}}};
  auto u = backend_.usage_reader(cg)->read(false);
  ASSERT_FALSE(u.ok());
  EXPECT_TRUE(cgroup_detail::is_gone(u.error())) << u.error().message();
}

TEST_F(V1BackendTest, UsageReaderOfAComountedCpuDirectory) {
  FakeCgroupFs fs;
  V1Backend backend(fs.v1_layout(/*comount_cpu=*/true));
  auto cg = backend.create("c", nullptr);
  ASSERT_TRUE(cg.ok());
  fs.populate(*cg);
  auto u = backend.usage_reader(*cg)->read(true);
  ASSERT_TRUE(u.ok()) << u.error().message();
  EXPECT_EQ(u->cpu_usage_us, 98765432u);
  EXPECT_EQ(u->cpu_nr_throttled, 37u);
}

TEST_F(V1BackendTest, Features) {
  const CgroupFeatures& f = backend_.features();
  EXPECT_EQ(backend_.kind(), CgroupLayoutKind::kV1);
  EXPECT_FALSE(f.memory_high);
  EXPECT_TRUE(f.memory_peak);
  EXPECT_FALSE(f.psi);
  EXPECT_FALSE(f.psi_triggers);
  EXPECT_TRUE(f.freeze);
  EXPECT_FALSE(f.atomic_kill);
  V1Backend no_freezer(fs_.v1_layout(false, /*freezer=*/false));
  EXPECT_FALSE(no_freezer.features().freeze);
}

TEST_F(V1BackendTest, FreezeWritesFreezerState) {
  Cgroup cg = make_call(backend_);
  ASSERT_TRUE(backend_.freeze(cg, true).ok());
  EXPECT_EQ(file(cg, "freezer", "freezer.state"), "FROZEN");
  ASSERT_TRUE(backend_.freeze(cg, false).ok());
  EXPECT_EQ(file(cg, "freezer", "freezer.state"), "THAWED");
}

TEST_F(V1BackendTest, FreezeWithoutAFreezerIsAnError) {
  V1Backend backend(fs_.v1_layout(false, /*freezer=*/false));
  Cgroup cg = make_call(backend);
  auto s = backend.freeze(cg, true);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("freezer"));
}

TEST_F(V1BackendTest, PressureTriggerRegistersAnEventfdForMedium) {
  Cgroup cg = make_call(backend_);
  auto fd =
      backend_.memory_pressure_trigger(cg, std::chrono::milliseconds(100), std::chrono::seconds(1));
  ASSERT_TRUE(fd.ok()) << fd.error().message();
  std::string line = file(cg, "memory", "cgroup.event_control");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(line, m, std::regex("(\\d+) (\\d+) medium"))) << line;
  EXPECT_EQ(std::stoi(m[1]), fd->get());  // the eventfd handed back is the one registered
}

TEST_F(V1BackendTest, ProcsIsTheUnionOfEveryHierarchy) {
  Cgroup cg = make_call(backend_);
  fs_.write_abs(cg.dirs.at("memory") + "/cgroup.procs", "40\n41\n");
  fs_.write_abs(cg.dirs.at("pids") + "/cgroup.procs", "41\n42\n");
  auto p = backend_.procs(cg);
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_THAT(*p, ElementsAre(40, 41, 42));
}

}  // namespace
}  // namespace sandgate::controller
