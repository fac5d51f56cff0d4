// The v2 backend against a fake cgroup2 tree: what it writes, what it parses, what it refuses.
#include "controller/cgroup_v2.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "controller/cgroup_fake_fs.h"
#include "core/fd.h"
#include "core/proc_cgroup.h"

namespace sandgate::controller {
namespace {

using ::testing::ElementsAre;
using testing::FakeCgroupFs;
using ::testing::HasSubstr;
using testing::kModern;

const std::vector<std::string> kAll = {"cpuset", "cpu", "io", "memory", "hugetlb", "pids"};

class V2BackendTest : public ::testing::Test {
 protected:
  // The run's ancestors exist already (as a previous call left them); the leaf is new.
  Cgroup make_call(const std::vector<std::string>& leaf_controllers = {"cpu", "io", "memory",
                                                                       "pids"}) {
    fs_.v2_node("v2/sandgate", kAll);
    fs_.v2_node("v2/sandgate/r1", kAll);
    auto cg = backend_.create("sandgate/r1/call-1", nullptr);
    EXPECT_TRUE(cg.ok()) << cg.error().message();
    if (!cg.ok()) return {};
    fs_.populate(*cg, leaf_controllers, /*pure_v2=*/true);
    return *cg;
  }

  FakeCgroupFs fs_;
  CgroupLayout layout_ = fs_.v2_layout();
  V2Backend backend_{layout_, kModern};
};

TEST_F(V2BackendTest, CreateEnablesControllersInEveryAncestorButNotTheLeaf) {
  Cgroup cg = make_call();
  EXPECT_EQ(cg.rel, "sandgate/r1/call-1");
  EXPECT_EQ(cg.dirs.size(), 1u);
  EXPECT_EQ(cg.dirs.at("unified"), fs_.path("v2/sandgate/r1/call-1"));
  // Only wanted controllers the parent offers, in one write.
  EXPECT_EQ(fs_.read("v2/cgroup.subtree_control"), "+memory +cpu +pids +io");
  EXPECT_EQ(fs_.read("v2/sandgate/cgroup.subtree_control"), "+memory +cpu +pids +io");
  EXPECT_EQ(fs_.read("v2/sandgate/r1/cgroup.subtree_control"), "+memory +cpu +pids +io");
  // The leaf holds processes: no controller is enabled below it ("no internal processes").
  EXPECT_EQ(fs_.read("v2/sandgate/r1/call-1/cgroup.subtree_control"), "");
}

TEST_F(V2BackendTest, CreateEnablesOnlyWhatTheParentOffers) {
  FakeCgroupFs fs;
  CgroupLayout layout = fs.v2_layout({"memory", "pids"});
  V2Backend backend(layout, kModern);
  auto cg = backend.create("sandgate", nullptr);
  ASSERT_TRUE(cg.ok()) << cg.error().message();
  EXPECT_EQ(fs.read("v2/cgroup.subtree_control"), "+memory +pids");
}

TEST_F(V2BackendTest, CreateLeavesAlreadyEnabledControllersAlone) {
  fs_.write("v2/cgroup.subtree_control", "cpu io memory pids\n");
  auto cg = backend_.create("sandgate", nullptr);
  ASSERT_TRUE(cg.ok()) << cg.error().message();
  EXPECT_EQ(fs_.read("v2/cgroup.subtree_control"), "cpu io memory pids\n");  // not rewritten
}

TEST_F(V2BackendTest, CreateRecordsOnlyTheDirectoriesItMakes) {
  ::sandgate::testing::TempDir state_tmp;
  HostPaths paths;
  paths.state_dir = state_tmp / "state";
  auto state = RunState::create(paths, "r-test", "host_dir");
  ASSERT_TRUE(state.ok()) << state.error().message();
  fs_.v2_node("v2/sandgate", kAll);
  fs_.v2_node("v2/sandgate/r1", kAll);
  auto cg = backend_.create("sandgate/r1/call-1", &*state);
  ASSERT_TRUE(cg.ok()) << cg.error().message();
  EXPECT_THAT(state->resources(),
              ElementsAre(Resource{Resource::Kind::kCgroup, fs_.path("v2/sandgate/r1/call-1")}));
  // Reusing it records nothing more.
  ASSERT_TRUE(backend_.create("sandgate/r1/call-1", &*state).ok());
  EXPECT_EQ(state->resources().size(), 1u);
}

TEST_F(V2BackendTest, CreateRefusesPathsThatLeaveTheMount) {
  for (const char* rel : {"", "/abs", "a/../b", "a//b", "./a", "a/"}) {
    auto cg = backend_.create(rel, nullptr);
    ASSERT_FALSE(cg.ok()) << "'" << rel << "'";
    EXPECT_THAT(cg.error().message(), HasSubstr("cgroup path"));
  }
}

TEST_F(V2BackendTest, SetLimitsWritesExactValues) {
  Cgroup cg = make_call();
  Limits l;
  l.memory_max = MiB(512);
  l.memory_high = MiB(384);
  l.cpu_cores = 1.5;
  l.cpu_weight = 100;
  l.pids_max = 64;
  auto s = backend_.set_limits(cg, l);
  ASSERT_TRUE(s.ok()) << s.error().message();
  std::string d = cg.dirs.at("unified");
  EXPECT_EQ(FakeCgroupFs::read_abs(d + "/memory.max"), "536870912");
  EXPECT_EQ(FakeCgroupFs::read_abs(d + "/memory.high"), "402653184");
  EXPECT_EQ(FakeCgroupFs::read_abs(d + "/cpu.max"), "150000 100000");
  EXPECT_EQ(FakeCgroupFs::read_abs(d + "/cpu.weight"), "100");
  EXPECT_EQ(FakeCgroupFs::read_abs(d + "/pids.max"), "64");
}

TEST_F(V2BackendTest, SetLimitsLeavesUnsetFieldsAlone) {
  Cgroup cg = make_call();
  Limits l;
  l.pids_max = 5;
  ASSERT_TRUE(backend_.set_limits(cg, l).ok());
  std::string d = cg.dirs.at("unified");
  EXPECT_EQ(FakeCgroupFs::read_abs(d + "/pids.max"), "5");
  EXPECT_EQ(FakeCgroupFs::read_abs(d + "/memory.max"), "");
  EXPECT_EQ(FakeCgroupFs::read_abs(d + "/cpu.max"), "");
}

TEST_F(V2BackendTest, SmallCpuGrantsGetTheKernelMinimumQuota) {
  Cgroup cg = make_call();
  Limits l;
  l.cpu_cores = 0.001;  // 100 us per 100 ms: under the kernel's 1 ms floor
  ASSERT_TRUE(backend_.set_limits(cg, l).ok());
  EXPECT_EQ(FakeCgroupFs::read_abs(cg.dirs.at("unified") + "/cpu.max"), "1000 100000");
}

TEST_F(V2BackendTest, LimitWithoutItsControllerIsAnErrorNamingTheFieldAndWritesNothing) {
  Cgroup cg = make_call({"cpu", "pids"});  // no memory controller for this cgroup
  Limits l;
  l.pids_max = 10;
  l.memory_max = MiB(64);
  auto s = backend_.set_limits(cg, l);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("memory_max"));
  EXPECT_EQ(FakeCgroupFs::read_abs(cg.dirs.at("unified") + "/pids.max"), "");
}

TEST_F(V2BackendTest, IoLimitsWriteIoMaxWithMaxForTheUnsetRate) {
  Cgroup cg = make_call();
  std::string io_max = cg.dirs.at("unified") + "/io.max";
  Limits l;
  l.io_read_bps = 52428800;
  l.io_device = "252:0";
  auto s = backend_.set_limits(cg, l);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(FakeCgroupFs::read_abs(io_max), "252:0 rbps=52428800 wbps=max");
  fs_.write_abs(io_max, "");
  l.io_read_bps.reset();
  l.io_write_bps = 1048576;
  ASSERT_TRUE(backend_.set_limits(cg, l).ok());
  EXPECT_EQ(FakeCgroupFs::read_abs(io_max), "252:0 rbps=max wbps=1048576");
  fs_.write_abs(io_max, "");
  l.io_read_bps = 2097152;
  ASSERT_TRUE(backend_.set_limits(cg, l).ok());
  EXPECT_EQ(FakeCgroupFs::read_abs(io_max), "252:0 rbps=2097152 wbps=1048576");
}

TEST_F(V2BackendTest, IoLimitWithoutADeviceIsAnErrorNamingItAndWritesNothing) {
  Cgroup cg = make_call();
  Limits l;
  l.pids_max = 10;
  l.io_write_bps = 52428800;
  auto s = backend_.set_limits(cg, l);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("io_device"));
  EXPECT_THAT(s.error().message(), HasSubstr("io_write_bps"));
  l.io_device = "sda1";
  s = backend_.set_limits(cg, l);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("io_device"));
  EXPECT_EQ(FakeCgroupFs::read_abs(cg.dirs.at("unified") + "/pids.max"), "");
  EXPECT_EQ(FakeCgroupFs::read_abs(cg.dirs.at("unified") + "/io.max"), "");
}

TEST_F(V2BackendTest, IoLimitWithoutTheIoControllerIsAnErrorNamingIo) {
  Cgroup cg = make_call({"cpu", "memory", "pids"});  // io not enabled for this cgroup
  Limits l;
  l.io_read_bps = 52428800;
  l.io_device = "252:0";
  auto s = backend_.set_limits(cg, l);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("io_read_bps"));
  EXPECT_THAT(s.error().message(), HasSubstr("the io controller"));

  FakeCgroupFs fs;
  V2Backend without(fs.v2_layout({"cpu", "memory", "pids"}), kModern);
  EXPECT_FALSE(without.features().io_limits);
  EXPECT_TRUE(backend_.features().io_limits);
}

TEST_F(V2BackendTest, BadCpuValuesAreErrorsNamingTheField) {
  Cgroup cg = make_call();
  Limits zero;
  zero.cpu_cores = 0;
  auto s = backend_.set_limits(cg, zero);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("cpu_cores"));
  Limits weight;
  weight.cpu_weight = 10001;
  s = backend_.set_limits(cg, weight);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("cpu_weight"));
}

// Without the pids controller a read cannot say how many tasks the cgroup has: pids_counted
// stays false, so a zero there is not taken for "empty" (Controller::end_call).
TEST_F(V2BackendTest, ReadUsageWithoutThePidsControllerDoesNotCountTasks) {
  Cgroup cg = make_call({"cpu", "io", "memory"});
  auto u = backend_.read_usage(cg);
  ASSERT_TRUE(u.ok()) << u.error().message();
  EXPECT_FALSE(u->pids_counted);
  EXPECT_EQ(u->memory_current, 41943040u);  // the rest is read as before
}

TEST_F(V2BackendTest, ReadUsageParsesEveryCounter) {
  Cgroup cg = make_call();
  auto u = backend_.read_usage(cg);
  ASSERT_TRUE(u.ok()) << u.error().message();
  EXPECT_EQ(u->memory_current, 41943040u);
  EXPECT_EQ(u->memory_peak, 136314880u);
  EXPECT_EQ(u->cpu_usage_us, 4511234u);
  EXPECT_EQ(u->cpu_throttled_us, 987654u);
  EXPECT_EQ(u->cpu_nr_throttled, 45u);
  EXPECT_TRUE(u->pids_counted);
  EXPECT_EQ(u->pids_current, 4u);
  EXPECT_EQ(u->pids_max_events, 9u);
  EXPECT_EQ(u->memory_events.high, 12u);
  EXPECT_EQ(u->memory_events.max, 34u);
  EXPECT_EQ(u->memory_events.oom, 3u);
  EXPECT_EQ(u->memory_events.oom_kill, 1u);
  ASSERT_TRUE(u->memory_pressure.has_value());
  EXPECT_DOUBLE_EQ(u->memory_pressure->some.avg10, 1.53);
  EXPECT_EQ(u->memory_pressure->some.total_us, 2875401u);
  ASSERT_TRUE(u->memory_pressure->full.has_value());
  EXPECT_EQ(u->memory_pressure->full->total_us, 1539880u);
  ASSERT_TRUE(u->cpu_pressure.has_value());
  EXPECT_EQ(u->cpu_pressure->some.total_us, 91133212u);
}

TEST_F(V2BackendTest, ReadUsageWithoutPeakOrPsiLeavesThemUnset) {
  Cgroup cg = make_call();
  std::string d = cg.dirs.at("unified");
  for (const char* f : {"memory.peak", "memory.pressure", "cpu.pressure"})
    ASSERT_EQ(::unlink((d + "/" + f).c_str()), 0);
  auto u = backend_.read_usage(cg);
  ASSERT_TRUE(u.ok()) << u.error().message();
  EXPECT_FALSE(u->memory_peak.has_value());
  EXPECT_FALSE(u->memory_pressure.has_value());
  EXPECT_FALSE(u->cpu_pressure.has_value());
  EXPECT_EQ(u->memory_current, 41943040u);
}

TEST_F(V2BackendTest, ReadUsageNamesAMalformedFile) {
  Cgroup cg = make_call();
  fs_.write_abs(cg.dirs.at("unified") + "/memory.events", "low 0\nhigh twelve\n");
  auto u = backend_.read_usage(cg);
  ASSERT_FALSE(u.ok());
  EXPECT_THAT(u.error().message(), HasSubstr("memory.events"));
  EXPECT_THAT(u.error().message(), HasSubstr("line 2"));
}

TEST_F(V2BackendTest, UsageReaderSeesNewValuesAndPartialReadsKeepThePeak) {
  Cgroup cg = make_call();
  auto reader = backend_.usage_reader(cg);
  auto first = reader->read(/*full=*/false);  // the first read is a full one anyway
  ASSERT_TRUE(first.ok()) << first.error().message();
  EXPECT_EQ(first->memory_current, 41943040u);
  EXPECT_EQ(first->memory_peak, 136314880u);
  // The cgroup's own pressure is read_usage's only: no sample acts on it.
  EXPECT_FALSE(first->memory_pressure.has_value());

  const std::string d = cg.dirs.at("unified");
  fs_.write_abs(d + "/memory.current", "52428800\n");
  fs_.write_abs(d + "/memory.peak", "157286400\n");
  fs_.write_abs(d + "/memory.events", "low 0\nhigh 13\nmax 35\noom 4\noom_kill 2\n");
  fs_.write_abs(d + "/cpu.stat", "usage_usec 5000000\nnr_throttled 46\nthrottled_usec 990000\n");
  fs_.write_abs(d + "/pids.current", "6\n");
  fs_.write_abs(d + "/pids.events", "max 10\n");
  fs_.write_abs(d + "/memory.pressure",
                "some avg10=9.00 avg60=1.00 avg300=0.50 total=3000000\n"
                "full avg10=4.00 avg60=0.50 avg300=0.10 total=1600000\n");

  auto partial = reader->read(false);
  ASSERT_TRUE(partial.ok()) << partial.error().message();
  EXPECT_EQ(partial->memory_current, 52428800u);
  EXPECT_EQ(partial->memory_events.oom_kill, 2u);
  EXPECT_EQ(partial->memory_events.high, 13u);  // the same file
  EXPECT_EQ(partial->cpu_usage_us, 5000000u);
  EXPECT_EQ(partial->cpu_throttled_us, 990000u);  // the same file
  EXPECT_EQ(partial->pids_current, 6u);
  EXPECT_EQ(partial->pids_max_events, 10u);
  // The peak is read on full reads only: the last full read's, not unset.
  EXPECT_EQ(partial->memory_peak, 136314880u);
  EXPECT_FALSE(partial->memory_pressure.has_value());

  auto full = reader->read(true);
  ASSERT_TRUE(full.ok()) << full.error().message();
  EXPECT_FALSE(full->memory_pressure.has_value());
  EXPECT_FALSE(full->cpu_pressure.has_value());
  EXPECT_EQ(full->memory_peak, 157286400u);
  EXPECT_EQ(full->memory_current, 52428800u);
  auto once = backend_.read_usage(cg);
  ASSERT_TRUE(once.ok()) << once.error().message();
  ASSERT_TRUE(once->memory_pressure.has_value());
  EXPECT_EQ(once->memory_pressure->some.total_us, 3000000u);
}

TEST_F(V2BackendTest, UsageReaderReadsOnlyTheControllersTheCgroupHas) {
  Cgroup cg = make_call({"cpu"});
  // Files of controllers the cgroup lacks are not even opened (the kernel has none).
  for (const char* f : {"memory.current", "memory.peak", "memory.events", "pids.current",
                        "pids.events", "memory.pressure"})
    ASSERT_EQ(::unlink((cg.dirs.at("unified") + "/" + f).c_str()), 0);
  auto reader = backend_.usage_reader(cg);
  for (bool full : {true, false}) {
    auto u = reader->read(full);
    ASSERT_TRUE(u.ok()) << u.error().message();
    EXPECT_EQ(u->memory_current, 0u);
    EXPECT_FALSE(u->memory_peak.has_value());
    EXPECT_FALSE(u->memory_pressure.has_value());
    EXPECT_EQ(u->cpu_usage_us, 4511234u);
  }
}

TEST_F(V2BackendTest, UsageReaderNamesAMalformedFile) {
  Cgroup cg = make_call();
  auto reader = backend_.usage_reader(cg);
  ASSERT_TRUE(reader->read(true).ok());
  fs_.write_abs(cg.dirs.at("unified") + "/memory.events", "low 0\nhigh twelve\n");
  auto u = reader->read(false);
  ASSERT_FALSE(u.ok());
  EXPECT_THAT(u.error().message(), HasSubstr("memory.events"));
  EXPECT_THAT(u.error().message(), HasSubstr("line 2"));
}

TEST_F(V2BackendTest, PlacementIsTheOneUnifiedDirectory) {
  Cgroup cg = make_call();
  EXPECT_THAT(backend_.placement(cg).cgroup_dirs, ElementsAre(fs_.path("v2/sandgate/r1/call-1")));
}

TEST_F(V2BackendTest, ProcsReadsCgroupProcs) {
  Cgroup cg = make_call();
  fs_.write_abs(cg.dirs.at("unified") + "/cgroup.procs", "12\n345\n");
  auto p = backend_.procs(cg);
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_THAT(*p, ElementsAre(12, 345));
  fs_.write_abs(cg.dirs.at("unified") + "/cgroup.procs", "12\nx\n");
  EXPECT_FALSE(backend_.procs(cg).ok());
}

TEST_F(V2BackendTest, FreezeWritesCgroupFreezeAndWaitsForTheEvent) {
  Cgroup cg = make_call();
  std::string d = cg.dirs.at("unified");
  fs_.write_abs(d + "/cgroup.events", "populated 1\nfrozen 1\n");
  auto s = backend_.freeze(cg, true);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(FakeCgroupFs::read_abs(d + "/cgroup.freeze"), "1");
}

TEST_F(V2BackendTest, FreezeThatTheKernelNeverReportsTimesOut) {
  Cgroup cg = make_call();  // cgroup.events keeps saying "frozen 0"
  auto s = backend_.freeze(cg, true);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("not reached"));
}

TEST_F(V2BackendTest, KillWritesCgroupKill) {
  Cgroup cg = make_call();
  ASSERT_TRUE(backend_.kill(cg).ok());
  EXPECT_EQ(FakeCgroupFs::read_abs(cg.dirs.at("unified") + "/cgroup.kill"), "1");
}

TEST_F(V2BackendTest, MemoryPressureTriggerWritesThePsiSpec) {
  Cgroup cg = make_call();
  std::string d = cg.dirs.at("unified");
  fs_.write_abs(d + "/memory.pressure", "");
  auto fd =
      backend_.memory_pressure_trigger(cg, std::chrono::milliseconds(150), std::chrono::seconds(2));
  ASSERT_TRUE(fd.ok()) << fd.error().message();
  EXPECT_TRUE(fd->valid());
  EXPECT_EQ(FakeCgroupFs::read_abs(d + "/memory.pressure"),
            std::string("some 150000 2000000\0", 20));
}

TEST_F(V2BackendTest, MemoryPressureTriggerRefusesWindowsPsiRejects) {
  Cgroup cg = make_call();
  using std::chrono::milliseconds;
  auto s = backend_.memory_pressure_trigger(cg, milliseconds(50), milliseconds(100));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("500ms..10s"));
}

TEST(PsiTriggerRules, FollowTheKernel) {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  using unified::check_trigger;
  EXPECT_TRUE(check_trigger(milliseconds(150), seconds(1), true).ok());
  EXPECT_TRUE(check_trigger(milliseconds(500), milliseconds(500), true).ok());
  EXPECT_TRUE(check_trigger(seconds(1), seconds(10), true).ok());
  EXPECT_FALSE(check_trigger(milliseconds(50), milliseconds(100), true).ok());   // window < 500ms
  EXPECT_FALSE(check_trigger(milliseconds(50), seconds(11), true).ok());         // window > 10s
  EXPECT_FALSE(check_trigger(milliseconds(600), milliseconds(500), true).ok());  // stall > window
  EXPECT_FALSE(check_trigger(milliseconds(0), milliseconds(500), true).ok());
  // Without CAP_SYS_RESOURCE only multiples of 2 s.
  EXPECT_TRUE(check_trigger(milliseconds(150), seconds(2), false).ok());
  EXPECT_TRUE(check_trigger(milliseconds(150), seconds(4), false).ok());
  auto s = check_trigger(milliseconds(150), seconds(1), false);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("CAP_SYS_RESOURCE"));
}

// The prime writes this process's pid into the cgroup.procs of the unified cgroup it is in
// (its /proc/self/cgroup "0::" line) under the mount it is given: a fake mount here, whose
// file takes the write as the kernel's would.
TEST(MoveSelfInPlace, WritesThisProcessIntoItsOwnUnifiedCgroup) {
  FakeCgroupFs fs;
  const std::string mount = fs.v2_layout().unified_mount;
  auto own = read_file("/proc/self/cgroup");
  ASSERT_TRUE(own.ok()) << own.error().message();
  const std::string path = cgroup_path_in(*own, "");
  ASSERT_FALSE(path.empty()) << "no unified line in " << *own;
  const std::string dir = mount + (path == "/" ? "" : path);
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(write_file(dir + "/cgroup.procs", "", O_WRONLY | O_CREAT | O_TRUNC).ok());
  auto s = unified::move_self_in_place(mount);
  ASSERT_TRUE(s.ok()) << s.error().message();
  auto written = read_file(dir + "/cgroup.procs");
  ASSERT_TRUE(written.ok()) << written.error().message();
  EXPECT_EQ(*written, std::to_string(::getpid()));
  // No unified mount: an error, nothing written anywhere.
  EXPECT_FALSE(unified::move_self_in_place("").ok());
}

TEST(V2Features, ModernKernelCanDoEverything) {
  FakeCgroupFs fs;
  V2Backend b(fs.v2_layout(), kModern);
  const CgroupFeatures& f = b.features();
  EXPECT_EQ(b.kind(), CgroupLayoutKind::kV2);
  EXPECT_TRUE(f.memory_high);
  EXPECT_TRUE(f.memory_peak);
  EXPECT_TRUE(f.psi);
  EXPECT_TRUE(f.psi_triggers);
  EXPECT_TRUE(f.freeze);
  EXPECT_TRUE(f.atomic_kill);
}

TEST(V2Features, OlderKernelsLackPeakAndKill) {
  FakeCgroupFs fs;
  V2Backend b(fs.v2_layout(), {5, 10});
  EXPECT_FALSE(b.features().memory_peak);
  EXPECT_FALSE(b.features().atomic_kill);
  EXPECT_TRUE(b.features().freeze);
  V2Backend old(fs.v2_layout(), {4, 19});
  EXPECT_FALSE(old.features().freeze);
  EXPECT_FALSE(old.features().psi_triggers);
}

TEST(V2Features, NoMemoryControllerNoPsi) {
  FakeCgroupFs fs;
  V2Backend b(fs.v2_layout({"cpu", "pids"}, /*psi=*/false), kModern);
  EXPECT_FALSE(b.features().memory_high);
  EXPECT_FALSE(b.features().memory_peak);
  EXPECT_FALSE(b.features().psi);
  EXPECT_FALSE(b.features().psi_triggers);
}

TEST(V2Features, FreezeWithoutKernelSupportIsAnError) {
  FakeCgroupFs fs;
  V2Backend b(fs.v2_layout(), {4, 19});
  Cgroup cg{"x", {{"unified", fs.path("v2")}}};
  auto s = b.freeze(cg, true);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("5.2"));
}

}  // namespace
}  // namespace sandgate::controller
