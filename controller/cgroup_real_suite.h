// The cgroup backends against the real kernel: one parameterised suite, instantiated by
// cgroup_real_test.cc (this project's hybrid hosts: the hybrid backend and the v1 backend on
// the host's v1 hierarchies) and by cgroup_v2_real_test.cc (a pure cgroup2 guest).
//
// Needs root. Everything lives under a unique top cgroup "sandgate-test-<pid>-<n>" that
// TearDown kills and removes, and checks is gone. Only processes this test forks (and their
// own children) are ever signalled.
//
// Each check has a second witness from outside the backend: the kernel's own control files,
// /proc/<pid>/cgroup, the child's exit status.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "controller/cgroup.h"
#include "controller/cgroup_internal.h"
#include "controller/cgroup_layout.h"
#include "controller/cgroup_v1.h"
#include "controller/cgroup_v2.h"
#include "core/fd.h"
#include "core/process.h"
#include "core/state.h"
#include "core/test_temp_dir.h"
#include "tests/support/privileged.h"

namespace sandgate::controller::testing {

// What the child does once released.
enum class Action : char {
  kSleep = 's',     // pause() until killed
  kTouch = 't',     // touch `mib` MiB, report 't', then pause()
  kSpin = 'c',      // burn CPU until killed
  kForkMany = 'f',  // fork up to 20 pausing children, report how many succeeded, pause()
};

struct Command {
  Action action;
  uint32_t mib;
};

// A forked child that waits on a pipe until it is placed in a cgroup and released, the
// pipe-synchronised start providers use. It is killed and reaped when this goes away.
class BlockedChild {
 public:
  static std::unique_ptr<BlockedChild> fork_blocked() {
    auto ctl = make_pipe();
    auto report = make_pipe();
    if (!ctl.ok() || !report.ok()) {
      ADD_FAILURE() << "pipe";
      return nullptr;
    }
    pid_t pid = ::fork();
    if (pid < 0) {
      ADD_FAILURE() << "fork: " << std::strerror(errno);
      return nullptr;
    }
    if (pid == 0) child_main(ctl->read.get(), report->write.get());  // never returns
    auto pidfd = pidfd_open(pid);
    auto c = std::unique_ptr<BlockedChild>(new BlockedChild);
    c->process_ = ChildProcess(pid, pidfd.ok() ? std::move(*pidfd) : UniqueFd());
    c->ctl_ = std::move(ctl->write);
    c->report_ = std::move(report->read);
    return c;
  }

  pid_t pid() const { return process_.pid(); }
  ChildProcess& process() { return process_; }

  // Writes the pid into cgroup.procs of every placement directory.
  Status place(const Placement& p) const {
    for (const auto& dir : p.cgroup_dirs) {
      SG_ASSIGN_OR_RETURN(DirFd d, DirFd::open(dir));
      SG_TRY(d.write("cgroup.procs", std::to_string(pid())));
    }
    return {};
  }
  Status start(Action a, uint32_t mib = 0) const {
    Command c{a, mib};
    return write_all(ctl_.get(), std::string_view(reinterpret_cast<const char*>(&c), sizeof c));
  }
  // The child's one-byte report; nullopt on EOF (it died) or after `timeout`.
  std::optional<unsigned char> report(Duration timeout) const {
    struct pollfd p = {report_.get(), POLLIN, 0};
    int ms =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count());
    if (::poll(&p, 1, ms) <= 0) return std::nullopt;
    unsigned char b;
    if (::read(report_.get(), &b, 1) != 1) return std::nullopt;
    return b;
  }

 private:
  BlockedChild() = default;

  // After fork: async-signal-safe calls only.
  [[noreturn]] static void child_main(int ctl, int report) {
    Command c;
    ssize_t n;
    while ((n = ::read(ctl, &c, sizeof c)) < 0 && errno == EINTR) {
    }
    if (n != static_cast<ssize_t>(sizeof c)) ::_exit(1);
    switch (c.action) {
      case Action::kSleep:
        break;
      case Action::kTouch: {
        size_t len = static_cast<size_t>(c.mib) << 20;
        void* m = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) ::_exit(2);
        volatile char* p = static_cast<volatile char*>(m);
        for (size_t i = 0; i < len; i += 4096) p[i] = 1;
        (void)!::write(report, "t", 1);
        break;
      }
      case Action::kSpin:
        for (;;) __asm__ __volatile__("" ::: "memory");  // a side effect: not optimised away
      case Action::kForkMany: {
        unsigned char forked = 0;
        for (int i = 0; i < 20; ++i) {
          pid_t g = ::fork();
          if (g == 0) {
            for (;;) ::pause();
          }
          if (g < 0) break;
          ++forked;
        }
        (void)!::write(report, &forked, 1);
        break;
      }
    }
    for (;;) ::pause();
  }

  ChildProcess process_;
  UniqueFd ctl_;
  UniqueFd report_;
};

// Which backend a suite instance drives.
enum class Backend {
  kHost,  // make_cgroup_backend(the host's layout): hybrid here, v2 on a modern host
  kV1,    // V1Backend on the host's v1 hierarchies (memory, cpu, cpuacct, pids, freezer)
  kV2,    // make_cgroup_backend on a pure cgroup2 host
};

inline std::string backend_name(const ::testing::TestParamInfo<Backend>& info) {
  switch (info.param) {
    case Backend::kHost:
      return "Host";
    case Backend::kV1:
      return "V1OnHost";
    case Backend::kV2:
      return "V2";
  }
  return "Unknown";
}

inline bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

inline std::string trimmed(const std::string& dir, const std::string& file) {
  auto text = read_file(dir + "/" + file);
  if (!text.ok()) return "<" + text.error().message() + ">";
  std::string s = *text;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

class RealCgroupTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    SANDGATE_REQUIRE_ROOT();
    auto layout = detect_cgroup_layout("/proc/self/mountinfo");
    ASSERT_TRUE(layout.ok()) << layout.error().message();
    layout_ = *layout;
    switch (GetParam()) {
      case Backend::kHost: {
        SANDGATE_REQUIRE(
            layout_.kind == CgroupLayoutKind::kHybrid || layout_.kind == CgroupLayoutKind::kV2,
            "needs a hybrid or cgroup2 host, this one is " + describe(layout_));
        auto b = make_cgroup_backend(layout_);
        ASSERT_TRUE(b.ok()) << b.error().message();
        backend_ = std::move(*b);
        break;
      }
      case Backend::kV1: {
        bool all = true;
        for (const char* h : {"memory", "cpu", "cpuacct", "pids", "freezer"})
          all = all && !layout_.v1_mount(h).empty();
        SANDGATE_REQUIRE(all,
                         "needs v1 memory, cpu, cpuacct, pids and freezer hierarchies, "
                         "this host is " +
                             describe(layout_));
        backend_ = std::make_unique<V1Backend>(layout_);
        break;
      }
      case Backend::kV2: {
        SANDGATE_REQUIRE(
            layout_.kind == CgroupLayoutKind::kV2,
            "needs a pure cgroup2 host (the guest-VM lane), this one is " + describe(layout_));
        auto b = make_cgroup_backend(layout_);
        ASSERT_TRUE(b.ok()) << b.error().message();
        backend_ = std::move(*b);
        break;
      }
    }
    static int counter = 0;
    top_name_ = "sandgate-test-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
    auto top = backend_->create(top_name_, nullptr);
    ASSERT_TRUE(top.ok()) << top.error().message();
    top_ = *top;
    created_ = true;
  }

  void TearDown() override {
    if (!created_) return;
    // Kill first (a frozen child would never be reaped), then reap, then remove.
    auto killed = backend_->kill(top_);
    EXPECT_TRUE(killed.ok()) << killed.error().message();
    children_.clear();
    auto removed = backend_->remove(top_);
    EXPECT_TRUE(removed.ok()) << removed.error().message();
    for (const auto& [h, dir] : top_.dirs) EXPECT_FALSE(exists(dir)) << "left behind: " << dir;
  }

  // A child cgroup of the test's top cgroup.
  Cgroup make(const std::string& name, RunState* state = nullptr) {
    auto cg = backend_->create(top_name_ + "/" + name, state);
    EXPECT_TRUE(cg.ok()) << cg.error().message();
    return cg.ok() ? *cg : Cgroup{};
  }

  // A child placed in `cg` and released to do `a`.
  BlockedChild* spawn_in(const Cgroup& cg, Action a, uint32_t mib = 0) {
    auto c = BlockedChild::fork_blocked();
    if (!c) return nullptr;
    auto placed = c->place(backend_->placement(cg));
    EXPECT_TRUE(placed.ok()) << placed.error().message();
    auto started = c->start(a, mib);
    EXPECT_TRUE(started.ok()) << started.error().message();
    children_.push_back(std::move(c));
    return children_.back().get();
  }

  // Polls read_usage until `done` holds or `bound` passes; the last sample.
  Usage usage_until(const Cgroup& cg, const std::function<bool(const Usage&)>& done,
                    Duration bound = std::chrono::seconds(5)) {
    auto deadline = std::chrono::steady_clock::now() + bound;
    Usage last;
    for (;;) {
      auto u = backend_->read_usage(cg);
      EXPECT_TRUE(u.ok()) << u.error().message();
      if (!u.ok()) return last;
      last = *u;
      if (done(last) || std::chrono::steady_clock::now() >= deadline) return last;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // The limits as the kernel holds them, read from its own files.
  Limits read_back(const Cgroup& cg) {
    Limits l;
    auto num = [](const std::string& s) { return std::stoull(s); };
    if (backend_->kind() == CgroupLayoutKind::kV2) {
      std::string d = cg.dirs.at("unified");
      if (auto m = trimmed(d, "memory.max"); m != "max") l.memory_max = Bytes{num(m)};
      if (auto m = trimmed(d, "memory.high"); m != "max") l.memory_high = Bytes{num(m)};
      std::string cpu = trimmed(d, "cpu.max");  // "quota period"
      if (cpu.rfind("max", 0) != 0) {
        auto sp = cpu.find(' ');
        l.cpu_cores = static_cast<double>(num(cpu.substr(0, sp))) /
                      static_cast<double>(num(cpu.substr(sp + 1)));
      }
      l.cpu_weight = static_cast<uint32_t>(num(trimmed(d, "cpu.weight")));
      if (auto p = trimmed(d, "pids.max"); p != "max") l.pids_max = num(p);
    } else {
      std::string mem = cg.dirs.at("memory"), cpu = cg.dirs.at("cpu"), pids = cg.dirs.at("pids");
      // v1 "unlimited" is PAGE_COUNTER_MAX pages: anything above 2^62 bytes.
      if (auto m = num(trimmed(mem, "memory.limit_in_bytes")); m < (1ull << 62))
        l.memory_max = Bytes{m};
      if (auto q = trimmed(cpu, "cpu.cfs_quota_us"); q != "-1")
        l.cpu_cores = static_cast<double>(num(q)) /
                      static_cast<double>(num(trimmed(cpu, "cpu.cfs_period_us")));
      l.cpu_weight = static_cast<uint32_t>(num(trimmed(cpu, "cpu.shares")) * 100 / 1024);
      if (auto p = trimmed(pids, "pids.max"); p != "max") l.pids_max = num(p);
    }
    return l;
  }

  bool unified_freeze() const { return backend_->kind() != CgroupLayoutKind::kV1; }

  CgroupLayout layout_;
  std::unique_ptr<CgroupBackend> backend_;
  std::string top_name_;
  Cgroup top_;
  bool created_ = false;
  std::vector<std::unique_ptr<BlockedChild>> children_;
};

using ::testing::Contains;
using ::testing::HasSubstr;

TEST_P(RealCgroupTest, LimitsReadBackFromTheKernelAsSet) {
  Cgroup cg = make("call-1");
  Limits want;
  want.memory_max = MiB(256);
  want.cpu_cores = 0.5;
  want.cpu_weight = 50;
  want.pids_max = 100;
  if (backend_->features().memory_high) want.memory_high = MiB(192);
  auto s = backend_->set_limits(cg, want);
  ASSERT_TRUE(s.ok()) << s.error().message();
  Limits got = read_back(cg);
  EXPECT_EQ(got.memory_max, want.memory_max);
  EXPECT_EQ(got.memory_high, want.memory_high);
  ASSERT_TRUE(got.cpu_cores.has_value());
  EXPECT_DOUBLE_EQ(*got.cpu_cores, 0.5);
  EXPECT_EQ(got.cpu_weight, want.cpu_weight);
  EXPECT_EQ(got.pids_max, want.pids_max);
}

// The block device io limits are tried on: the device of a directory under /var/tmp (a real
// disk on this project's hosts), else the first whole disk in /sys/block backed by a device (the
// guest lane boots an initramfs: no /var/tmp on a disk, but the lane attaches a blank NVMe
// disk); loop, ram and zram devices have no `device` link and are passed over. "" if none.
inline std::string io_test_device() {
  if (::access("/var/tmp", W_OK) == 0) {
    ::sandgate::testing::TempDir dir("/var/tmp");
    struct stat st {};
    if (::stat(dir.path().c_str(), &st) == 0 && major(st.st_dev) != 0)
      return std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  }
  std::vector<std::filesystem::path> disks;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/block", ec))
    if (std::filesystem::exists(e.path() / "device")) disks.push_back(e.path());
  std::sort(disks.begin(), disks.end());
  for (const auto& d : disks) {
    auto text = read_file((d / "dev").string());
    if (!text.ok()) continue;
    std::string dev = *text;
    while (!dev.empty() && dev.back() == '\n') dev.pop_back();
    if (!dev.empty()) return dev;
  }
  return "";
}

// io limits on a real block device, read back from the kernel's own blkio.throttle.*_bps_device
// or io.max. Without a device there is nothing to limit: the test says so (and fails in CI and
// in the guest lane, which attaches a disk for it) instead of passing.
TEST_P(RealCgroupTest, IoLimitsReadBackFromTheKernelAsSet) {
  SANDGATE_REQUIRE(
      backend_->features().io_limits,
      "needs a v1 blkio hierarchy or the cgroup2 io controller, this host is " + describe(layout_));
  std::string dev = io_test_device();
  SANDGATE_REQUIRE(!dev.empty(),
                   "needs a block device (a disk under /var/tmp or in /sys/block); this host has "
                   "none");
  RecordProperty("io_device", dev);
  std::cout << "io limits on block device " << dev << "\n";
  Cgroup cg = make("call-1");
  Limits want;
  want.io_read_bps = 52428800;
  want.io_write_bps = 10485760;
  want.io_device = dev;
  auto s = backend_->set_limits(cg, want);
  ASSERT_TRUE(s.ok()) << s.error().message();
  if (backend_->kind() == CgroupLayoutKind::kV2) {
    EXPECT_THAT(trimmed(cg.dirs.at("unified"), "io.max"),
                HasSubstr(dev + " rbps=52428800 wbps=10485760"));
  } else {
    ASSERT_TRUE(cg.dirs.count("blkio"));
    std::string blkio = cg.dirs.at("blkio");
    EXPECT_EQ(trimmed(blkio, "blkio.throttle.read_bps_device"), dev + " 52428800");
    EXPECT_EQ(trimmed(blkio, "blkio.throttle.write_bps_device"), dev + " 10485760");
    EXPECT_THAT(backend_->placement(cg).cgroup_dirs, Contains(blkio));
  }
  // A placed child is in the blkio cgroup too, so the throttle applies to it.
  BlockedChild* c = spawn_in(cg, Action::kSleep);
  ASSERT_NE(c, nullptr);
  auto procs = backend_->procs(cg);
  ASSERT_TRUE(procs.ok()) << procs.error().message();
  EXPECT_THAT(*procs, Contains(c->pid()));
  if (backend_->kind() != CgroupLayoutKind::kV2) {
    auto in_blkio = cgroup_detail::read_procs(cg.dirs.at("blkio"));
    ASSERT_TRUE(in_blkio.ok()) << in_blkio.error().message();
    EXPECT_THAT(*in_blkio, Contains(c->pid()));
  }
}

// The kernel's refusal of an io limit (a device that does not exist) comes back as an error
// naming the field, not dropped. 259:65535: the extended block major (Documentation/admin-guide/
// devices.txt, "259 block Block Extended Major"), at a minor no host hands out.
TEST_P(RealCgroupTest, AnIoLimitOnADeviceThatDoesNotExistIsRefused) {
  SANDGATE_REQUIRE(
      backend_->features().io_limits,
      "needs a v1 blkio hierarchy or the cgroup2 io controller, this host is " + describe(layout_));
  SANDGATE_REQUIRE(!std::filesystem::exists("/sys/dev/block/259:65535"), "259:65535 exists here");
  Cgroup cg = make("call-1");
  Limits l;
  l.io_read_bps = 52428800;
  l.io_device = "259:65535";
  auto s = backend_->set_limits(cg, l);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("io_read_bps"));
}

TEST_P(RealCgroupTest, AnUnsupportedLimitIsRefusedNotDropped) {
  Cgroup cg = make("call-1");
  Limits l;
  l.memory_high = MiB(64);
  auto s = backend_->set_limits(cg, l);
  if (backend_->features().memory_high) {
    EXPECT_TRUE(s.ok()) << s.error().message();
  } else {
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.error().message(), HasSubstr("memory_high"));
  }
}

TEST_P(RealCgroupTest, APlacedChildShowsUpInProcsAndInProcSelfCgroup) {
  Cgroup cg = make("call-1");
  BlockedChild* c = spawn_in(cg, Action::kSleep);
  ASSERT_NE(c, nullptr);
  auto procs = backend_->procs(cg);
  ASSERT_TRUE(procs.ok()) << procs.error().message();
  EXPECT_THAT(*procs, Contains(c->pid()));
  // The kernel's view from the process's side: one line per hierarchy naming our path.
  std::string own = trimmed("/proc/" + std::to_string(c->pid()), "cgroup") + "\n";
  EXPECT_THAT(own, HasSubstr(":/" + cg.rel + "\n"));
  if (backend_->kind() != CgroupLayoutKind::kV1) {
    EXPECT_THAT(own, HasSubstr("0::/" + cg.rel + "\n"));
  }
}

TEST_P(RealCgroupTest, MemoryTouchedByTheChildIsCounted) {
  Cgroup cg = make("call-1");
  BlockedChild* c = spawn_in(cg, Action::kTouch, 32);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->report(std::chrono::seconds(10)), 't');
  Usage u = usage_until(cg, [](const Usage& u) { return u.memory_current >= MiB(30).value; });
  EXPECT_GE(u.memory_current, MiB(30).value);
  if (backend_->features().memory_peak) {
    ASSERT_TRUE(u.memory_peak.has_value());
    EXPECT_GE(*u.memory_peak, u.memory_current);
  }
  EXPECT_TRUE(u.pids_counted);
  EXPECT_GE(u.pids_current, 1u);
}

// The room a limit leaves, from the kernel's files: none without a limit, the limit as set,
// the child's touched memory in the charge; anonymous memory is never reclaimable.
TEST_P(RealCgroupTest, MemoryRoomIsTheLimitAndTheChargeTheKernelReports) {
  Cgroup cg = make("call-1");
  auto unlimited = backend_->memory_room(cg, false);
  ASSERT_TRUE(unlimited.ok()) << unlimited.error().message();
  EXPECT_FALSE(unlimited->limit) << *unlimited->limit;
  Limits l;
  l.memory_max = MiB(64);
  ASSERT_TRUE(backend_->set_limits(cg, l).ok());
  BlockedChild* c = spawn_in(cg, Action::kTouch, 32);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->report(std::chrono::seconds(10)), 't');
  auto room = backend_->memory_room(cg, true);
  ASSERT_TRUE(room.ok()) << room.error().message();
  EXPECT_EQ(room->limit, MiB(64).value);
  EXPECT_GE(room->charged, MiB(32).value);
  EXPECT_LE(room->reclaimable, room->charged - MiB(32).value);
}

// The monitor's reader on the kernel's own files: opened once, re-read with pread, it sees the
// counters move; once the cgroup is removed, its reads fail as gone (ENOENT / ENODEV).
TEST_P(RealCgroupTest, AUsageReaderSeesMemoryGrowWhileTheChildTouchesIt) {
  Cgroup cg = make("call-1");
  auto reader = backend_->usage_reader(cg);
  ASSERT_NE(reader, nullptr);
  auto before = reader->read(/*full=*/true);
  ASSERT_TRUE(before.ok()) << before.error().message();
  EXPECT_LT(before->memory_current, MiB(30).value);
  BlockedChild* c = spawn_in(cg, Action::kTouch, 32);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->report(std::chrono::seconds(10)), 't');
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  Usage u;
  int reads = 0;
  for (;;) {
    auto r = reader->read(/*full=*/++reads % 5 == 0);
    ASSERT_TRUE(r.ok()) << r.error().message();
    u = *r;
    if (u.memory_current >= MiB(30).value || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GE(u.memory_current, MiB(30).value);
  EXPECT_GT(u.memory_current, before->memory_current);
  EXPECT_GE(u.pids_current, 1u);
  // The peak is read on full reads (the kernel keeps it): one now has seen the growth.
  auto full = reader->read(/*full=*/true);
  ASSERT_TRUE(full.ok()) << full.error().message();
  if (backend_->features().memory_peak) {
    ASSERT_TRUE(full->memory_peak.has_value());
    EXPECT_GE(*full->memory_peak, full->memory_current);
    EXPECT_GE(*full->memory_peak, MiB(30).value);
  }
  // The open files do not keep the cgroup from being removed; the reader then says it is gone.
  ASSERT_TRUE(backend_->remove(cg).ok());
  for (const auto& [h, dir] : cg.dirs) EXPECT_FALSE(exists(dir)) << dir;
  for (bool full : {false, true}) {
    auto gone = reader->read(full);
    ASSERT_FALSE(gone.ok());
    EXPECT_TRUE(cgroup_detail::is_gone(gone.error())) << gone.error().message();
  }
}

TEST_P(RealCgroupTest, ACpuSpinnerOverItsQuotaIsThrottled) {
  Cgroup cg = make("call-1");
  Limits l;
  // 5 ms per 100 ms period: throttled in the first period it runs in, even on a loaded host.
  l.cpu_cores = 0.05;
  ASSERT_TRUE(backend_->set_limits(cg, l).ok());
  ASSERT_NE(spawn_in(cg, Action::kSpin), nullptr);
  Usage u = usage_until(cg, [](const Usage& u) { return u.cpu_throttled_us > 0; });
  EXPECT_GT(u.cpu_throttled_us, 0u);
  EXPECT_GT(u.cpu_nr_throttled, 0u);
  EXPECT_GT(u.cpu_usage_us, 0u);
}

TEST_P(RealCgroupTest, PidsMaxMakesForkFailInTheChild) {
  Cgroup cg = make("call-1");
  Limits l;
  l.pids_max = 5;
  ASSERT_TRUE(backend_->set_limits(cg, l).ok());
  BlockedChild* c = spawn_in(cg, Action::kForkMany);
  ASSERT_NE(c, nullptr);
  auto forked = c->report(std::chrono::seconds(10));
  ASSERT_TRUE(forked.has_value());
  EXPECT_EQ(*forked, 4);  // the child itself is the fifth
  Usage u = usage_until(cg, [](const Usage& u) { return u.pids_max_events > 0; });
  EXPECT_GT(u.pids_max_events, 0u);
  EXPECT_EQ(u.pids_current, 5u);
}

TEST_P(RealCgroupTest, FreezeStopsTheChildAndThawResumesIt) {
  Cgroup cg = make("call-1");
  ASSERT_NE(spawn_in(cg, Action::kSpin), nullptr);
  usage_until(cg, [](const Usage& u) { return u.cpu_usage_us > 1000; });
  auto s = backend_->freeze(cg, true);
  ASSERT_TRUE(s.ok()) << s.error().message();
  // The kernel's own word, then the behaviour: no CPU time while frozen.
  if (unified_freeze())
    EXPECT_THAT(read_file(cg.dirs.at("unified") + "/cgroup.events").value(), HasSubstr("frozen 1"));
  else
    EXPECT_EQ(trimmed(cg.dirs.at("freezer"), "freezer.state"), "FROZEN");
  auto before = backend_->read_usage(cg);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto after = backend_->read_usage(cg);
  ASSERT_TRUE(before.ok() && after.ok());
  EXPECT_LT(after->cpu_usage_us - before->cpu_usage_us, 2000u);
  s = backend_->freeze(cg, false);
  ASSERT_TRUE(s.ok()) << s.error().message();
  if (unified_freeze())
    EXPECT_THAT(read_file(cg.dirs.at("unified") + "/cgroup.events").value(), HasSubstr("frozen 0"));
  else
    EXPECT_EQ(trimmed(cg.dirs.at("freezer"), "freezer.state"), "THAWED");
  uint64_t thawed_at = after->cpu_usage_us;
  Usage u = usage_until(cg, [&](const Usage& u) { return u.cpu_usage_us > thawed_at + 1000; });
  EXPECT_GT(u.cpu_usage_us, thawed_at + 1000);
}

TEST_P(RealCgroupTest, KillLeavesNoProcessAndRemoveNoDirectory) {
  Cgroup cg = make("call-1");
  BlockedChild* sleeper = spawn_in(cg, Action::kSleep);
  BlockedChild* spinner = spawn_in(cg, Action::kSpin);
  ASSERT_NE(sleeper, nullptr);
  ASSERT_NE(spinner, nullptr);
  auto s = backend_->kill(cg);
  ASSERT_TRUE(s.ok()) << s.error().message();
  for (BlockedChild* c : {sleeper, spinner}) {
    auto st = c->process().wait_for(std::chrono::seconds(2));
    ASSERT_TRUE(st.ok() && st->has_value()) << "child " << c->pid() << " survived kill";
    EXPECT_FALSE((*st)->exited);
    EXPECT_EQ((*st)->signal, SIGKILL);
  }
  auto procs = backend_->procs(cg);
  ASSERT_TRUE(procs.ok()) << procs.error().message();
  EXPECT_TRUE(procs->empty());
  s = backend_->remove(cg);
  ASSERT_TRUE(s.ok()) << s.error().message();
  for (const auto& [h, dir] : cg.dirs) EXPECT_FALSE(exists(dir)) << dir;
}

TEST_P(RealCgroupTest, KillReachesAFrozenCgroup) {
  Cgroup cg = make("call-1");
  BlockedChild* c = spawn_in(cg, Action::kSleep);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(backend_->freeze(cg, true).ok());
  ASSERT_TRUE(backend_->kill(cg).ok());
  auto st = c->process().wait_for(std::chrono::seconds(2));
  ASSERT_TRUE(st.ok() && st->has_value()) << "frozen child survived kill";
  EXPECT_EQ((*st)->signal, SIGKILL);
}

TEST_P(RealCgroupTest, SignalReachesEveryProcess) {
  Cgroup cg = make("call-1");
  BlockedChild* c = spawn_in(cg, Action::kSleep);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(backend_->signal(cg, SIGTERM).ok());
  auto st = c->process().wait_for(std::chrono::seconds(2));
  ASSERT_TRUE(st.ok() && st->has_value());
  EXPECT_EQ((*st)->signal, SIGTERM);
}

TEST_P(RealCgroupTest, RemoveKillsWhatIsLeftAndRemovesChildrenFirst) {
  Cgroup run = make("r1");
  Cgroup main = make("r1/main");
  Cgroup call = make("r1/call-1");
  BlockedChild* a = spawn_in(main, Action::kSleep);
  BlockedChild* b = spawn_in(call, Action::kSpin);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto s = backend_->remove(run);
  ASSERT_TRUE(s.ok()) << s.error().message();
  for (const Cgroup* cg : {&run, &main, &call})
    for (const auto& [h, dir] : cg->dirs) EXPECT_FALSE(exists(dir)) << dir;
  for (BlockedChild* c : {a, b}) {
    auto st = c->process().wait_for(std::chrono::seconds(2));
    ASSERT_TRUE(st.ok() && st->has_value());
    EXPECT_EQ((*st)->signal, SIGKILL);
  }
  // Removing what is gone already is no error (the races are expected).
  EXPECT_TRUE(backend_->remove(run).ok());
}

TEST_P(RealCgroupTest, MemoryPressureTriggerIsAnFdOnTheRightFile) {
  Cgroup cg = make("call-1");
  // A 2 s window: the one the kernel takes also from a root without CAP_SYS_RESOURCE.
  auto fd = backend_->memory_pressure_trigger(cg, std::chrono::milliseconds(100),
                                              std::chrono::seconds(2));
  ASSERT_TRUE(fd.ok()) << fd.error().message();
  char link[256] = {};
  std::string self = "/proc/self/fd/" + std::to_string(fd->get());
  ASSERT_GT(::readlink(self.c_str(), link, sizeof link - 1), 0);
  if (backend_->features().psi_triggers)
    EXPECT_EQ(std::string(link), cg.dirs.at("unified") + "/memory.pressure");
  else
    EXPECT_EQ(std::string(link), "anon_inode:[eventfd]");
  struct pollfd p = {fd->get(), POLLPRI | POLLIN, 0};
  ASSERT_GE(::poll(&p, 1, 0), 0);
  EXPECT_EQ(p.revents & (POLLERR | POLLNVAL), 0);
}

// The prime moves this process into the cgroups it is in already (CgroupBackend::
// prime_attach): the kernel takes the write, and nothing changes.
TEST_P(RealCgroupTest, PrimingAnAttachLeavesThisProcessWhereItWas) {
  auto before = read_file("/proc/self/cgroup");
  ASSERT_TRUE(before.ok()) << before.error().message();
  auto s = backend_->prime_attach();
  ASSERT_TRUE(s.ok()) << s.error().message();
  auto after = read_file("/proc/self/cgroup");
  ASSERT_TRUE(after.ok()) << after.error().message();
  EXPECT_EQ(*after, *before);
}

TEST_P(RealCgroupTest, AOneSecondTriggerWindowFollowsTheKernelsRule) {
  Cgroup cg = make("call-1");
  auto fd = backend_->memory_pressure_trigger(cg, std::chrono::milliseconds(100),
                                              std::chrono::seconds(1));
  // PSI (kernel/sched/psi.c) takes a 1 s window only from an opener with CAP_SYS_RESOURCE;
  // v1 memory.pressure_level has no window at all.
  if (backend_->features().psi_triggers && !unified::may_use_any_trigger_window()) {
    ASSERT_FALSE(fd.ok());
    EXPECT_THAT(fd.error().message(), HasSubstr("CAP_SYS_RESOURCE"));
  } else {
    EXPECT_TRUE(fd.ok()) << fd.error().message();
  }
}

TEST_P(RealCgroupTest, OverTheMemoryLimitTheChildIsOomKilledAndCounted) {
  Cgroup cg = make("call-1");
  Limits l;
  l.memory_max = MiB(64);
  ASSERT_TRUE(backend_->set_limits(cg, l).ok());
  BlockedChild* c = spawn_in(cg, Action::kTouch, 128);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->report(std::chrono::seconds(20)), std::nullopt) << "touched 128MiB under 64MiB";
  auto st = c->process().wait_for(std::chrono::seconds(10));
  ASSERT_TRUE(st.ok() && st->has_value());
  EXPECT_EQ((*st)->signal, SIGKILL);
  Usage u = usage_until(cg, [](const Usage& u) { return u.memory_events.oom_kill >= 1; });
  EXPECT_GE(u.memory_events.oom_kill, 1u);
  EXPECT_GE(u.memory_events.max, 1u);
}

TEST_P(RealCgroupTest, CreateRecordsEveryDirectorySoGcCanRemoveThemAfterACrash) {
  ::sandgate::testing::TempDir tmp;
  HostPaths paths;
  paths.state_dir = tmp / "state";
  auto state = RunState::create(paths, "r-cgroup-test", "host_dir");
  ASSERT_TRUE(state.ok()) << state.error().message();
  Cgroup call = make("r1/call-1", &*state);
  std::vector<std::string> recorded;
  for (const auto& r : state->resources()) {
    EXPECT_EQ(r.kind, Resource::Kind::kCgroup);
    recorded.push_back(r.path);
  }
  for (const auto& dir : backend_->placement(call).cgroup_dirs) {
    EXPECT_THAT(recorded, Contains(dir));
    EXPECT_THAT(recorded, Contains(dir.substr(0, dir.rfind('/'))));  // r1
  }
  ASSERT_NE(spawn_in(call, Action::kSleep), nullptr);
  // What `sandgate gc` does with the record of a crashed run.
  auto s = release_resources(paths, state->resources());
  ASSERT_TRUE(s.ok()) << s.error().message();
  for (const auto& dir : recorded) EXPECT_FALSE(exists(dir)) << dir;
}

}  // namespace sandgate::controller::testing
