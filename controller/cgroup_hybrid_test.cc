// The hybrid backend against a fake of this project's hosts: v1 controllers for limits and
// usage, the controller-less unified mount for PSI, freeze and kill.
#include "controller/cgroup_hybrid.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <regex>

#include "controller/cgroup_fake_fs.h"
#include "core/fd.h"
#include "core/state.h"
#include "core/test_temp_dir.h"

namespace sandgate::controller {
namespace {

using testing::FakeCgroupFs;
using ::testing::HasSubstr;
using testing::kModern;
using ::testing::UnorderedElementsAre;

class HybridBackendTest : public ::testing::Test {
 protected:
  Cgroup make_call(HybridBackend& backend) {
    auto cg = backend.create("sandgate/r1/call-1", nullptr);
    EXPECT_TRUE(cg.ok()) << cg.error().message();
    if (!cg.ok()) return {};
    fs_.populate(*cg);
    return *cg;
  }
  static std::string file(const Cgroup& cg, const std::string& hierarchy, const std::string& f) {
    return FakeCgroupFs::read_abs(cg.dirs.at(hierarchy) + "/" + f);
  }

  FakeCgroupFs fs_;
  CgroupLayout layout_ = fs_.hybrid_layout();
  HybridBackend backend_{layout_, kModern};
};

TEST_F(HybridBackendTest, CreateMakesV1DirectoriesAndTheUnifiedOneButNoFreezer) {
  Cgroup cg = make_call(backend_);
  EXPECT_EQ(cg.dirs.size(), 5u);
  for (const char* h : {"memory", "cpu", "cpuacct", "pids"})
    EXPECT_EQ(cg.dirs.at(h), fs_.path(std::string("v1/") + h + "/sandgate/r1/call-1")) << h;
  EXPECT_EQ(cg.dirs.at("unified"), fs_.path("unified/sandgate/r1/call-1"));
  EXPECT_EQ(cg.dirs.count("freezer"), 0u);  // freezing is the unified mount's job here
  // Nothing is enabled on the unified mount: its controllers are bound to v1.
  EXPECT_EQ(fs_.read("unified/cgroup.subtree_control"), "");
}

// How many times the run record at `file` is replaced (write_json_file_atomic renames a new
// copy over it) while `body` runs. The temporary copy's creation is watched too: inotify
// merges an event identical to the one before it, and a rename alone repeats identically.
template <typename Body>
int record_writes(const std::string& file, Body body) {
  UniqueFd in(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (!in.valid()) return -1;
  std::string dir = file.substr(0, file.rfind('/'));
  if (::inotify_add_watch(in.get(), dir.c_str(), IN_CREATE | IN_MOVED_TO) < 0) return -1;
  body();
  int n = 0;
  alignas(struct inotify_event) char buf[8192];
  for (;;) {
    ssize_t got = ::read(in.get(), buf, sizeof buf);
    if (got <= 0) break;
    for (char* p = buf; p < buf + got;) {
      auto* e = reinterpret_cast<struct inotify_event*>(p);
      if ((e->mask & IN_MOVED_TO) && e->len && dir + "/" + e->name == file) ++n;
      p += sizeof(struct inotify_event) + e->len;
    }
  }
  return n;
}

// A call's cgroup is made in five hierarchies here: every new directory is in the run record
// before the first mkdir, written once (one crash-safe write per directory cost a call 36 ms
// under load, and starved the removals queued behind the next call's cgroup).
TEST_F(HybridBackendTest, CreateRecordsEveryNewDirectoryInOneWriteBeforeMaking) {
  ::sandgate::testing::TempDir state_tmp;
  HostPaths paths;
  paths.state_dir = state_tmp / "state";
  auto state = RunState::create(paths, "r-test", "controller");
  ASSERT_TRUE(state.ok()) << state.error().message();
  auto run = backend_.create("sandgate/r1", nullptr);  // the run's: there already
  ASSERT_TRUE(run.ok()) << run.error().message();
  Result<Cgroup> cg = logic_error("create", "not run");
  int writes = record_writes(paths.state_dir + "/runs/r-test.json",
                             [&] { cg = backend_.create("sandgate/r1/call-1", &*state); });
  ASSERT_TRUE(cg.ok()) << cg.error().message();
  EXPECT_EQ(writes, 1) << "the run record was written " << writes << " times";
  std::vector<std::string> recorded;
  for (const auto& r : state->resources()) recorded.push_back(r.path);
  EXPECT_THAT(recorded, UnorderedElementsAre(cg->dirs.at("memory"), cg->dirs.at("cpu"),
                                             cg->dirs.at("cpuacct"), cg->dirs.at("pids"),
                                             cg->dirs.at("unified")));
}

// A mkdir that fails in the last hierarchy: the directories made before stay recorded (they
// are there to remove), the one that was not made is forgotten.
TEST_F(HybridBackendTest, AFailedMkdirLeavesRecordedOnlyWhatWasMade) {
  ::sandgate::testing::TempDir state_tmp;
  HostPaths paths;
  paths.state_dir = state_tmp / "state";
  auto state = RunState::create(paths, "r-test", "controller");
  ASSERT_TRUE(state.ok()) << state.error().message();
  ASSERT_TRUE(backend_.create("sandgate", nullptr).ok());
  fs_.write("unified/sandgate/r1", "");  // a file where the run's directory should be
  auto cg = backend_.create("sandgate/r1/call-1", &*state);
  ASSERT_FALSE(cg.ok());
  std::vector<std::string> recorded;
  for (const auto& r : state->resources()) recorded.push_back(r.path);
  std::vector<std::string> made;
  for (const char* h : {"cpu", "cpuacct", "memory", "pids"})
    for (const char* d : {"/sandgate/r1", "/sandgate/r1/call-1"})
      made.push_back(fs_.path(std::string("v1/") + h + d));
  EXPECT_THAT(recorded, ::testing::UnorderedElementsAreArray(made));
  for (const auto& d : made) EXPECT_EQ(::access(d.c_str(), F_OK), 0) << d;
}

TEST_F(HybridBackendTest, PlacementIsEveryV1DirectoryAndTheUnifiedOne) {
  Cgroup cg = make_call(backend_);
  EXPECT_THAT(backend_.placement(cg).cgroup_dirs,
              UnorderedElementsAre(cg.dirs.at("memory"), cg.dirs.at("cpu"), cg.dirs.at("cpuacct"),
                                   cg.dirs.at("pids"), cg.dirs.at("unified")));
}

TEST_F(HybridBackendTest, Features) {
  const CgroupFeatures& f = backend_.features();
  EXPECT_EQ(backend_.kind(), CgroupLayoutKind::kHybrid);
  EXPECT_FALSE(f.memory_high);
  EXPECT_TRUE(f.memory_peak);
  EXPECT_TRUE(f.psi);
  EXPECT_TRUE(f.psi_triggers);
  EXPECT_TRUE(f.freeze);
  EXPECT_TRUE(f.atomic_kill);
  HybridBackend old(layout_, {5, 4});
  EXPECT_TRUE(old.features().freeze);
  EXPECT_FALSE(old.features().atomic_kill);
}

TEST_F(HybridBackendTest, WithoutPsiOnTheUnifiedMountThereIsNone) {
  ASSERT_EQ(::unlink(fs_.path("unified/memory.pressure").c_str()), 0);
  HybridBackend backend(layout_, kModern);
  EXPECT_FALSE(backend.features().psi);
  EXPECT_FALSE(backend.features().psi_triggers);
}

TEST_F(HybridBackendTest, SetLimitsWritesV1Files) {
  Cgroup cg = make_call(backend_);
  Limits l;
  l.memory_max = MiB(512);
  l.cpu_cores = 1.5;
  l.cpu_weight = 200;
  l.pids_max = 32;
  auto s = backend_.set_limits(cg, l);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(file(cg, "memory", "memory.limit_in_bytes"), "536870912");
  EXPECT_EQ(file(cg, "cpu", "cpu.cfs_period_us"), "100000");
  EXPECT_EQ(file(cg, "cpu", "cpu.cfs_quota_us"), "150000");
  EXPECT_EQ(file(cg, "cpu", "cpu.shares"), "2048");
  EXPECT_EQ(file(cg, "pids", "pids.max"), "32");
}

TEST(HybridBackendIo, WritesBlkioThrottleFilesAndPlacesInBlkio) {
  FakeCgroupFs fs;
  HybridBackend backend(fs.hybrid_layout(/*blkio=*/true), kModern);
  EXPECT_TRUE(backend.features().io_limits);
  auto cg = backend.create("sandgate/r1/call-1", nullptr);
  ASSERT_TRUE(cg.ok()) << cg.error().message();
  fs.populate(*cg);
  EXPECT_EQ(cg->dirs.at("blkio"), fs.path("v1/blkio/sandgate/r1/call-1"));
  EXPECT_THAT(backend.placement(*cg).cgroup_dirs, ::testing::Contains(cg->dirs.at("blkio")));
  Limits l;
  l.io_read_bps = 52428800;
  l.io_write_bps = 52428800;
  l.io_device = "252:0";
  auto s = backend.set_limits(*cg, l);
  ASSERT_TRUE(s.ok()) << s.error().message();
  std::string dir = cg->dirs.at("blkio");
  EXPECT_EQ(FakeCgroupFs::read_abs(dir + "/blkio.throttle.read_bps_device"), "252:0 52428800");
  EXPECT_EQ(FakeCgroupFs::read_abs(dir + "/blkio.throttle.write_bps_device"), "252:0 52428800");
}

TEST(HybridBackendIo, WithoutBlkioIoLimitsAreAnErrorNamingTheField) {
  FakeCgroupFs fs;
  HybridBackend backend(fs.hybrid_layout(), kModern);
  EXPECT_FALSE(backend.features().io_limits);
  auto cg = backend.create("sandgate/r1/call-1", nullptr);
  ASSERT_TRUE(cg.ok()) << cg.error().message();
  Limits l;
  l.io_write_bps = 52428800;
  l.io_device = "252:0";
  auto s = backend.set_limits(*cg, l);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("io_write_bps"));
  EXPECT_THAT(s.error().message(), HasSubstr("blkio"));
}

TEST_F(HybridBackendTest, MemoryHighIsAnErrorNamingIt) {
  Cgroup cg = make_call(backend_);
  Limits l;
  l.memory_high = MiB(100);
  auto s = backend_.set_limits(cg, l);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("memory_high"));
}

TEST_F(HybridBackendTest, ReadUsageTakesCountersFromV1AndPressureFromUnified) {
  Cgroup cg = make_call(backend_);
  auto u = backend_.read_usage(cg);
  ASSERT_TRUE(u.ok()) << u.error().message();
  EXPECT_EQ(u->memory_current, 33554432u);
  EXPECT_EQ(u->memory_peak, 67108864u);
  EXPECT_EQ(u->memory_events.oom_kill, 2u);
  EXPECT_EQ(u->cpu_usage_us, 98765432u);
  EXPECT_EQ(u->cpu_throttled_us, 1234567u);
  EXPECT_EQ(u->pids_max_events, 7u);
  ASSERT_TRUE(u->memory_pressure.has_value());
  EXPECT_EQ(u->memory_pressure->some.total_us, 2875401u);
  ASSERT_TRUE(u->cpu_pressure.has_value());
  EXPECT_DOUBLE_EQ(u->cpu_pressure->some.avg10, 12.50);
}

// The monitor's reader: the throttling comes with full reads only; the cgroup's own pressure,
// which no sample acts on, is left to read_usage (two reads fewer per call every 100 ms).
TEST_F(HybridBackendTest, UsageReaderReadsThrottlingOnFullReadsAndLeavesPressureToReadUsage) {
  Cgroup cg = make_call(backend_);
  auto reader = backend_.usage_reader(cg);
  auto first = reader->read(/*full=*/true);
  ASSERT_TRUE(first.ok()) << first.error().message();
  EXPECT_FALSE(first->memory_pressure.has_value());
  EXPECT_FALSE(first->cpu_pressure.has_value());
  EXPECT_EQ(first->cpu_throttled_us, 1234567u);

  const std::string unified = cg.dirs.at("unified"), memory = cg.dirs.at("memory");
  fs_.write_abs(unified + "/memory.pressure",
                "some avg10=9.00 avg60=1.00 avg300=0.50 total=3000000\n"
                "full avg10=4.00 avg60=0.50 avg300=0.10 total=1600000\n");
  fs_.write_abs(cg.dirs.at("cpu") + "/cpu.stat", "nr_throttled 40\nthrottled_time 2000000000\n");
  fs_.write_abs(memory + "/memory.usage_in_bytes", "50331648\n");
  fs_.write_abs(memory + "/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n");
  // An OOM kill is the act of a task that ran: its CPU clock moved too.
  fs_.write_abs(cg.dirs.at("cpuacct") + "/cpuacct.usage", "99000000000\n");

  auto partial = reader->read(false);
  ASSERT_TRUE(partial.ok()) << partial.error().message();
  EXPECT_EQ(partial->memory_current, 50331648u);
  EXPECT_EQ(partial->memory_events.oom_kill, 4u);
  EXPECT_EQ(partial->cpu_throttled_us, 1234567u);  // the last full read's, not zero
  EXPECT_FALSE(partial->memory_pressure.has_value());

  auto full = reader->read(true);
  ASSERT_TRUE(full.ok()) << full.error().message();
  EXPECT_EQ(full->cpu_throttled_us, 2000000u);
  EXPECT_EQ(full->memory_current, 50331648u);
  EXPECT_FALSE(full->memory_pressure.has_value());
  EXPECT_FALSE(full->cpu_pressure.has_value());

  auto once = backend_.read_usage(cg);
  ASSERT_TRUE(once.ok()) << once.error().message();
  ASSERT_TRUE(once->memory_pressure.has_value());
  EXPECT_EQ(once->memory_pressure->some.total_us, 3000000u);
  EXPECT_DOUBLE_EQ(once->memory_pressure->some.avg10, 9.00);
  ASSERT_TRUE(once->cpu_pressure.has_value());
  EXPECT_EQ(once->cpu_throttled_us, full->cpu_throttled_us);
}

TEST_F(HybridBackendTest, ReadUsageWithoutPsiLeavesPressureUnset) {
  Cgroup cg = make_call(backend_);
  for (const char* f : {"memory.pressure", "cpu.pressure"})
    ASSERT_EQ(::unlink((cg.dirs.at("unified") + "/" + f).c_str()), 0);
  auto u = backend_.read_usage(cg);
  ASSERT_TRUE(u.ok()) << u.error().message();
  EXPECT_FALSE(u->memory_pressure.has_value());
  EXPECT_FALSE(u->cpu_pressure.has_value());
  EXPECT_EQ(u->memory_current, 33554432u);
}

TEST_F(HybridBackendTest, FreezeUsesTheUnifiedCgroupFreeze) {
  Cgroup cg = make_call(backend_);
  fs_.write_abs(cg.dirs.at("unified") + "/cgroup.events", "populated 1\nfrozen 1\n");
  auto s = backend_.freeze(cg, true);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(file(cg, "unified", "cgroup.freeze"), "1");
  fs_.write_abs(cg.dirs.at("unified") + "/cgroup.events", "populated 1\nfrozen 0\n");
  ASSERT_TRUE(backend_.freeze(cg, false).ok());
  EXPECT_EQ(file(cg, "unified", "cgroup.freeze"), "0");
}

TEST_F(HybridBackendTest, KillWritesTheUnifiedCgroupKill) {
  Cgroup cg = make_call(backend_);
  ASSERT_TRUE(backend_.kill(cg).ok());
  EXPECT_EQ(file(cg, "unified", "cgroup.kill"), "1");
}

TEST_F(HybridBackendTest, PressureTriggerIsAPsiTriggerOnTheUnifiedFile) {
  Cgroup cg = make_call(backend_);
  fs_.write_abs(cg.dirs.at("unified") + "/memory.pressure", "");
  auto fd =
      backend_.memory_pressure_trigger(cg, std::chrono::milliseconds(200), std::chrono::seconds(2));
  ASSERT_TRUE(fd.ok()) << fd.error().message();
  EXPECT_EQ(file(cg, "unified", "memory.pressure"), std::string("some 200000 2000000\0", 20));
  EXPECT_EQ(file(cg, "memory", "cgroup.event_control"), "");
}

TEST_F(HybridBackendTest, WithoutPsiTheTriggerFallsBackToPressureLevel) {
  ASSERT_EQ(::unlink(fs_.path("unified/memory.pressure").c_str()), 0);
  HybridBackend backend(layout_, kModern);
  Cgroup cg = make_call(backend);
  auto fd =
      backend.memory_pressure_trigger(cg, std::chrono::milliseconds(200), std::chrono::seconds(2));
  ASSERT_TRUE(fd.ok()) << fd.error().message();
  EXPECT_TRUE(
      std::regex_match(file(cg, "memory", "cgroup.event_control"), std::regex("\\d+ \\d+ medium")));
}

}  // namespace
}  // namespace sandgate::controller
