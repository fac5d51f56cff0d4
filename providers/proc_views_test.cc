// The run's /proc views (proc_views.h): the texts made from given cgroup numbers, and the
// numbers read from fake v1 and v2 cgroup trees. The views as a jailed call reads them are
// tested in namespaces_test.cc (root).
#include "providers/proc_views.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <map>
#include <sstream>
#include <string>

#include "core/fd.h"
#include "core/files.h"
#include "core/test_temp_dir.h"

namespace sandgate::providers {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kMiB = 1024 * 1024;

// "Key: N kB" lines of a meminfo text.
std::map<std::string, uint64_t> parse_kb(const std::string& text) {
  std::map<std::string, uint64_t> out;
  std::istringstream in(text);
  std::string key, unit;
  uint64_t v;
  while (in >> key >> v >> unit) out[key.substr(0, key.size() - 1)] = v;
  return out;
}

void put(const std::string& path, const std::string& text) {
  auto slash = path.rfind('/');
  ASSERT_TRUE(make_dirs(path.substr(0, slash), 0755).ok()) << path;
  ASSERT_TRUE(write_file(path, text, O_WRONLY | O_CREAT | O_TRUNC, 0644).ok()) << path;
}

TEST(ProcViewsTest, MeminfoShowsTheLimitNotTheHost) {
  MemoryNumbers m;
  m.limit = 256 * kMiB;
  m.usage = 64 * kMiB;
  m.file = 16 * kMiB;
  m.active_file = 8 * kMiB;
  m.inactive_file = 8 * kMiB;
  m.anon = 48 * kMiB;
  m.shmem = 1 * kMiB;
  auto kb = parse_kb(render_meminfo(m, 24'000'000));
  EXPECT_EQ(kb["MemTotal"], 256u * 1024);
  EXPECT_EQ(kb["MemFree"], 192u * 1024);
  EXPECT_EQ(kb["MemAvailable"], 208u * 1024) << "free plus the page cache it could give back";
  EXPECT_EQ(kb["Cached"], 16u * 1024);
  EXPECT_EQ(kb["AnonPages"], 48u * 1024);
  EXPECT_EQ(kb["Shmem"], 1024u);
  EXPECT_EQ(kb["SwapTotal"], 0u);
  // Nothing of the host's beyond the keys the view makes (no CommitLimit, VmallocTotal, ...).
  EXPECT_EQ(kb.count("CommitLimit"), 0u);
}

TEST(ProcViewsTest, MeminfoWithoutALimitShowsTheHostTotalAndNeverMoreThanIt) {
  MemoryNumbers none;
  none.usage = 1 * kMiB;
  EXPECT_EQ(parse_kb(render_meminfo(none, 1'000'000))["MemTotal"], 1'000'000u);
  MemoryNumbers huge;
  huge.limit = 1ULL << 40;
  EXPECT_EQ(parse_kb(render_meminfo(huge, 1'000'000))["MemTotal"], 1'000'000u);
  // Usage above the limit (a racy read) never makes MemFree wrap around.
  MemoryNumbers over;
  over.limit = 1 * kMiB;
  over.usage = 2 * kMiB;
  EXPECT_EQ(parse_kb(render_meminfo(over, 1'000'000))["MemFree"], 0u);
}

// sysinfo(2)'s answer (issue 16) says what meminfo, loadavg and uptime say: the same numbers,
// in bytes and the kernel's fixed point.
TEST(ProcViewsTest, SysinfoSaysWhatTheViewsSay) {
  MemoryNumbers m;
  m.limit = 256 * kMiB;
  m.usage = 64 * kMiB;
  m.shmem = 1 * kMiB;
  m.swap_limit = 32 * kMiB;
  m.swap_usage = 8 * kMiB;
  LoadAverage load;
  load.avg[0] = 1.5;
  load.avg[1] = 0.25;
  TaskCounts tasks{.threads = 12, .running = 2, .blocked = 0};
  struct sysinfo si = make_sysinfo(m, 24'000'000, load, tasks, 41.2);
  auto kb = parse_kb(render_meminfo(m, 24'000'000));
  EXPECT_EQ(si.mem_unit, 1u);
  EXPECT_EQ(si.totalram, kb["MemTotal"] * 1024);
  EXPECT_EQ(si.totalram, 256 * kMiB);
  EXPECT_EQ(si.freeram, kb["MemFree"] * 1024);
  EXPECT_EQ(si.sharedram, kb["Shmem"] * 1024);
  EXPECT_EQ(si.totalswap, kb["SwapTotal"] * 1024);
  EXPECT_EQ(si.freeswap, kb["SwapFree"] * 1024);
  EXPECT_EQ(si.loads[0], 3u << 15) << "1.5 in 16.16 fixed point";
  EXPECT_EQ(si.loads[1], 1u << 14);
  EXPECT_EQ(si.loads[2], 0u);
  EXPECT_EQ(si.uptime, 42) << "rounded up, as the kernel rounds";
  EXPECT_EQ(si.procs, 12);
  // Unlimited: the host's total, never more; a count past 16 bits is capped, not wrapped.
  MemoryNumbers none;
  tasks.threads = 70000;
  si = make_sysinfo(none, 1'000'000, load, tasks, 0);
  EXPECT_EQ(si.totalram, 1'000'000ul * 1024);
  EXPECT_EQ(si.procs, 65535);
  EXPECT_EQ(si.uptime, 0);
}

// sysinfo(2)'s samples are kept per reader cgroup for kSysinfoCacheWindow: a caller in a loop
// is answered from one read of the cgroup files, and sees new numbers once the window is over.
TEST(ProcViewsTest, SysinfoCacheKeepsASampleForItsWindowPerCgroup) {
  auto now = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  SysinfoCache cache([&] { return now; });
  int reads = 0;
  uint64_t usage = 1 * kMiB;
  auto read = [&]() -> Result<SysinfoSample> {
    ++reads;
    SysinfoSample s;
    s.memory.usage = usage;
    s.tasks.threads = reads;
    return s;
  };
  auto a = cache.get("/call-1", read);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->memory.usage, 1 * kMiB);
  usage = 2 * kMiB;
  now += kSysinfoCacheWindow - std::chrono::microseconds(1);
  auto kept = cache.get("/call-1", read);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(reads, 1) << "within the window: no new read";
  EXPECT_EQ(kept->memory.usage, 1 * kMiB);
  EXPECT_EQ(kept->tasks.threads, 1);
  // Another cgroup is its own sample (another call's grant), read now.
  auto other = cache.get("/call-2", read);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(reads, 2);
  EXPECT_EQ(other->memory.usage, 2 * kMiB);
  // Past the window: read again.
  now += std::chrono::microseconds(1);
  auto fresh = cache.get("/call-1", read);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(reads, 3);
  EXPECT_EQ(fresh->memory.usage, 2 * kMiB);
  // An error is never kept: the next call reads again.
  auto failing = [&]() -> Result<SysinfoSample> {
    ++reads;
    return sys_error(EIO, "no memory cgroup");
  };
  EXPECT_FALSE(cache.get("/gone", failing).ok());
  EXPECT_FALSE(cache.get("/gone", failing).ok());
  EXPECT_EQ(reads, 5);
}

// "key value" lines of a vmstat text, and the keys in order.
std::map<std::string, uint64_t> parse_vmstat(const std::string& text,
                                             std::vector<std::string>* order = nullptr) {
  std::map<std::string, uint64_t> out;
  std::istringstream in(text);
  std::string key;
  uint64_t v;
  while (in >> key >> v) {
    out[key] = v;
    if (order) order->push_back(key);
  }
  return out;
}

TEST(ProcViewsTest, VmstatHasTheKernelsKeysWithTheRunsNumbersAndZeroForTheHosts) {
  MemoryNumbers m;
  m.limit = 256 * kMiB;
  m.usage = 64 * kMiB;
  m.anon = 40 * kMiB;
  m.file = 20 * kMiB;
  m.active_anon = 32 * kMiB;
  m.inactive_file = 12 * kMiB;
  m.dirty = 1 * kMiB;
  m.writeback = 1 * kMiB;
  m.kernel_stack = 256 * 1024;
  m.anon_thp = 4 * kMiB;
  m.events = {{"pgfault", 12345}, {"pgmajfault", 6}, {"workingset_refault_file", 7}};
  // The kernel's keys, in its order, host-only ones among them; values in the kernel's text
  // are never looked at (vmstat_keys keeps the first field only).
  const std::vector<std::string> keys = vmstat_keys(
      "nr_free_pages 999999\nnr_zone_active_anon 5\nnuma_hit 77777\nnr_anon_pages 1\n"
      "nr_kernel_stack 9\nnr_anon_transparent_hugepages 9\nnr_zone_write_pending 9\n"
      "nr_dirty_threshold 55555\npgalloc_normal 88888\npgfault 424242\npgmajfault 1\n"
      "workingset_refault_file 3\npswpin 66\n");
  ASSERT_EQ(keys.size(), 13u);
  std::vector<std::string> order;
  const std::string text = render_vmstat(m, 24'000'000, keys, 4096);
  auto v = parse_vmstat(text, &order);
  EXPECT_EQ(order, keys) << "the kernel's keys in the kernel's order, nothing else";
  EXPECT_EQ(v["nr_free_pages"], 192u * 256) << "meminfo's MemFree (192 MiB) in pages";
  EXPECT_EQ(v["nr_zone_active_anon"], 32u * 256);
  EXPECT_EQ(v["nr_anon_pages"], 40u * 256);
  EXPECT_EQ(v["nr_kernel_stack"], 256u) << "kB, as the kernel counts it";
  EXPECT_EQ(v["nr_anon_transparent_hugepages"], 2u) << "in 2 MiB pages";
  EXPECT_EQ(v["nr_zone_write_pending"], 512u) << "dirty plus writeback";
  EXPECT_EQ(v["pgfault"], 12345u) << "the run's own faults";
  EXPECT_EQ(v["pgmajfault"], 6u);
  EXPECT_EQ(v["workingset_refault_file"], 7u);
  // Host-wide: the host's memory and every tenant's activity. Zero, never the kernel's value.
  for (const char* host : {"numa_hit", "nr_dirty_threshold", "pgalloc_normal", "pswpin"})
    EXPECT_EQ(v[host], 0u) << host;
  EXPECT_THAT(text, Not(HasSubstr("424242")));
  EXPECT_THAT(text, Not(HasSubstr("999999")));
}

TEST(ProcViewsTest, VmstatWithoutTheKernelsKeysListsTheRunsOwn) {
  MemoryNumbers m;
  m.usage = 1 * kMiB;
  m.events = {{"pgfault", 3}};
  std::vector<std::string> order;
  auto v = parse_vmstat(render_vmstat(m, 1'000'000, {}, 4096), &order);
  ASSERT_FALSE(order.empty());
  EXPECT_EQ(order.front(), "nr_free_pages");
  EXPECT_EQ(v["nr_free_pages"], (1'000'000u - 1024) / 4) << "no limit: the host's total less usage";
  EXPECT_EQ(v["pgfault"], 3u);
  EXPECT_EQ(v.count("pgmajfault"), 0u) << "not counted by the cgroup: not made up";
}

TEST(ProcViewsTest, StatCountsTheRunsOwnTimeAndTasks) {
  CpuNumbers cpu{300, 100, 2};
  TaskCounts tasks{7, 2, 1};
  const long hz = ::sysconf(_SC_CLK_TCK);
  std::string text = render_stat(cpu, tasks, 10.0, 1'700'000'000);
  std::istringstream in(text);
  std::string name;
  uint64_t user, nice, system, idle;
  in >> name >> user >> nice >> system >> idle;
  EXPECT_EQ(name, "cpu");
  EXPECT_EQ(user, 300u);
  EXPECT_EQ(system, 100u);
  EXPECT_EQ(idle, static_cast<uint64_t>(10 * hz * 2) - 400) << text;
  EXPECT_THAT(text, HasSubstr("\ncpu0 150 0 50 "));
  EXPECT_THAT(text, HasSubstr("\ncpu1 150 0 50 "));
  EXPECT_THAT(text, Not(HasSubstr("\ncpu2 ")));
  EXPECT_THAT(text, HasSubstr("\nbtime 1700000000\n"));
  EXPECT_THAT(text, HasSubstr("\nprocesses 7\nprocs_running 2\nprocs_blocked 1\n"));
  // Kernel-wide counters are not the run's: zero.
  EXPECT_THAT(text, HasSubstr("\nintr 0\nctxt 0\n"));
}

TEST(ProcViewsTest, UptimeIsTheRunsAge) {
  EXPECT_EQ(render_uptime(CpuNumbers{0, 0, 1}, 12.5), "12.50 12.50\n");
  const long hz = ::sysconf(_SC_CLK_TCK);
  EXPECT_EQ(render_uptime(CpuNumbers{static_cast<uint64_t>(hz), 0, 2}, 10), "10.00 19.00\n");
}

TEST(ProcViewsTest, LoadAverageFollowsTheKernelsCurve) {
  LoadAverage load;
  // One minute at 4 active tasks: the 1-minute average reaches 1 - e^-1 of it.
  for (int i = 0; i < 12; ++i) load.update(4, 5);
  EXPECT_NEAR(load.avg[0], 4 * (1 - std::exp(-1.0)), 0.01);
  EXPECT_LT(load.avg[1], load.avg[0]);
  EXPECT_LT(load.avg[2], load.avg[1]);
  // Sampling more often does not change the curve for a steady count.
  LoadAverage fine;
  for (int i = 0; i < 60; ++i) fine.update(4, 1);
  EXPECT_NEAR(fine.avg[0], load.avg[0], 1e-9);
  EXPECT_EQ(render_loadavg(load, TaskCounts{9, 3, 0}).substr(0, 5), "2.53 ");
  EXPECT_THAT(render_loadavg(load, TaskCounts{9, 3, 0}), HasSubstr(" 3/9 0\n"));
}

TEST(ProcViewsTest, ReadsV1MemoryWithTheLowestLimitOnTheWayUp) {
  sandgate::testing::TempDir t;
  std::string root = t / "memory", run = root + "/sandgate/t/run", call = run + "/call-1";
  put(root + "/memory.limit_in_bytes", "9223372036854771712\n");
  put(root + "/sandgate/memory.limit_in_bytes", "9223372036854771712\n");
  put(root + "/sandgate/t/memory.limit_in_bytes", "9223372036854771712\n");
  put(run + "/memory.limit_in_bytes", std::to_string(512 * kMiB) + "\n");
  put(run + "/memory.usage_in_bytes", "0\n");
  put(call + "/memory.limit_in_bytes", std::to_string(256 * kMiB) + "\n");
  put(call + "/memory.usage_in_bytes", std::to_string(10 * kMiB) + "\n");
  put(call + "/memory.stat",
      "cache 1\ntotal_cache 4096\ntotal_rss 8192\ntotal_inactive_file 4096\n"
      "pgfault 5\ntotal_pgfault 50\ntotal_pgmajfault 2\ntotal_rss_huge 2097152\n"
      "total_pgpgin 9\n");
  auto m = read_memory(call);
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_EQ(m->limit, 256 * kMiB) << "the call's grant";
  EXPECT_EQ(m->usage, 10 * kMiB);
  EXPECT_EQ(m->file, 4096u) << "the hierarchical total, not the cgroup's own";
  EXPECT_EQ(m->anon, 8192u);
  EXPECT_EQ(m->anon_thp, 2097152u);
  // Events by vmstat's names, the hierarchy's totals; pgpgin is not vmstat's (charge events).
  EXPECT_EQ(m->events, (std::map<std::string, uint64_t>{{"pgfault", 50}, {"pgmajfault", 2}}));
  auto r = read_memory(run);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->usage, 0u);
  EXPECT_EQ(r->limit, 512 * kMiB) << "the run's ceiling";
  put(run + "/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(read_memory(run)->limit, 0u) << "no limit anywhere";
}

TEST(ProcViewsTest, ReadsV2MemoryAndCpu) {
  sandgate::testing::TempDir t;
  std::string run = t / "run";
  put(run + "/memory.max", std::to_string(128 * kMiB) + "\n");
  put(run + "/memory.current", "4096\n");
  put(run + "/memory.swap.max", "max\n");
  put(run + "/memory.stat",
      "anon 100\nfile 200\nactive_file 50\nkernel_stack 16384\nslab_reclaimable 8192\n"
      "pgfault 77\npgscan_kswapd 3\nworkingset_refault_anon 4\npgscan 9\n");
  put(run + "/cpu.stat", "usage_usec 3000000\nuser_usec 2000000\nsystem_usec 1000000\n");
  put(run + "/cpu.max", "150000 100000\n");
  auto m = read_memory(run);
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_EQ(m->limit, 128 * kMiB);
  EXPECT_EQ(m->swap_limit, 0u);
  EXPECT_EQ(m->file, 200u);
  EXPECT_EQ(m->kernel_stack, 16384u);
  EXPECT_EQ(m->slab_reclaimable, 8192u);
  EXPECT_EQ(m->events, (std::map<std::string, uint64_t>{
                           {"pgfault", 77}, {"pgscan_kswapd", 3}, {"workingset_refault_anon", 4}}))
      << "pgscan (the sum) has no vmstat line of that name";
  auto c = read_cpu({run}, 8);
  ASSERT_TRUE(c.ok()) << c.error().message();
  const long hz = ::sysconf(_SC_CLK_TCK);
  EXPECT_EQ(c->user_ticks, static_cast<uint64_t>(2 * hz));
  EXPECT_EQ(c->system_ticks, static_cast<uint64_t>(hz));
  EXPECT_EQ(c->cpus, 2) << "1.5 CPUs of quota round up to 2";
  EXPECT_FALSE(read_memory(t / "nothing").ok());
  EXPECT_FALSE(read_cpu({t / "nothing"}, 8).ok());
}

TEST(ProcViewsTest, ReadsV1CpuAcrossHierarchies) {
  sandgate::testing::TempDir t;
  std::string cpu = t / "cpu/run", cpuacct = t / "cpuacct/run";
  put(cpu + "/cpu.cfs_quota_us", "-1\n");
  put(cpu + "/cpu.cfs_period_us", "100000\n");
  put(cpuacct + "/cpuacct.stat", "user 42\nsystem 7\n");
  auto c = read_cpu({t / "memory/run", cpu, cpuacct}, 4);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->user_ticks, 42u);
  EXPECT_EQ(c->system_ticks, 7u);
  EXPECT_EQ(c->cpus, 4) << "no quota: the host's CPUs";
}

TEST(ProcViewsTest, CountsTheTasksOfTheRunAndItsChildren) {
  sandgate::testing::TempDir t;
  std::string run = t / "pids/run", proc = t / "proc";
  put(run + "/tasks", "10\n");
  put(run + "/main/tasks", "11\n12\n");
  put(run + "/call-1/tasks", "13\n99\n");  // 99 exited meanwhile: no /proc entry
  put(proc + "/10/stat", "10 (sup) S 1 1");
  put(proc + "/11/stat", "11 (a b) R) R 1 1");  // a name with ") " in it
  put(proc + "/12/stat", "12 (x) D 1 1");
  put(proc + "/13/stat", "13 (y) R 1 1");
  auto c = count_tasks({run}, proc);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->threads, 4);
  EXPECT_EQ(c->running, 2);
  EXPECT_EQ(c->blocked, 1);
}

TEST(ProcViewsTest, FindsTheReadersCgroupOnlyInsideTheRun) {
  const std::string run = "/sys/fs/cgroup/memory/sandgate/default/r1";
  const std::string text =
      "9:pids:/sandgate/default/r1/call-2\n4:memory:/sandgate/default/r1/call-2\n"
      "2:cpu,cpuacct:/sandgate/default/r1/call-2\n0::/sandgate/default/r1/call-2\n";
  EXPECT_EQ(reader_cgroup_dir(run, text, "memory"), run + "/call-2");
  EXPECT_EQ(reader_cgroup_dir("/sys/fs/cgroup/cpu,cpuacct/sandgate/default/r1", text, "cpuacct"),
            "/sys/fs/cgroup/cpu,cpuacct/sandgate/default/r1/call-2");
  EXPECT_EQ(reader_cgroup_dir("/sys/fs/cgroup/unified/sandgate/default/r1", text, ""),
            "/sys/fs/cgroup/unified/sandgate/default/r1/call-2");
  // Another run's reader (a name that merely starts like this run's), and one outside any run.
  EXPECT_EQ(reader_cgroup_dir(run, "4:memory:/sandgate/default/r10/call-1\n", "memory"), "");
  EXPECT_EQ(reader_cgroup_dir(run, "4:memory:/\n", "memory"), "");
  EXPECT_EQ(reader_cgroup_dir(run, "garbage", "memory"), "");
}

}  // namespace
}  // namespace sandgate::providers
