// A fake cgroup filesystem for the backend unit tests (firecracker MockCgroupFs): mounts are
// plain directories in a temp dir, control files are regular files. A cgroup node gets the
// files the kernel would make for its hierarchy: counters copied from the snapshots in
// controller/testdata/cgroup_v1 and cgroup_v2, limits and command files empty so a test reads
// back exactly what the backend wrote. Test-only.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "controller/cgroup.h"
#include "controller/cgroup_internal.h"
#include "controller/cgroup_layout.h"
#include "core/fd.h"
#include "core/files.h"
#include "core/test_temp_dir.h"
#include "tests/support/privileged.h"

namespace sandgate::controller::testing {

// A kernel recent enough for every interface the backends use.
inline constexpr cgroup_detail::KernelVersion kModern{6, 1};

inline std::string testdata(const std::string& name) {
  return ::sandgate::testing::source_dir() + "/controller/testdata/" + name;
}

class FakeCgroupFs {
 public:
  // v1 hierarchies under <tmp>/v1/<name>; `comount_cpu` mounts cpu and cpuacct together as
  // "cpu,cpuacct" (the usual systemd layout; this project's hosts mount them apart). `blkio`
  // adds the blkio hierarchy (the io limits' tests; the others keep to the five).
  CgroupLayout v1_layout(bool comount_cpu = false, bool freezer = true, bool blkio = false) {
    CgroupLayout l;
    l.kind = CgroupLayoutKind::kV1;
    for (const char* h : {"memory", "pids"}) l.v1_mounts[h] = mount("v1/" + std::string(h));
    if (comount_cpu) {
      std::string m = mount("v1/cpu,cpuacct");
      l.v1_mounts["cpu"] = m;
      l.v1_mounts["cpuacct"] = m;
    } else {
      l.v1_mounts["cpu"] = mount("v1/cpu");
      l.v1_mounts["cpuacct"] = mount("v1/cpuacct");
    }
    if (freezer) l.v1_mounts["freezer"] = mount("v1/freezer");
    if (blkio) l.v1_mounts["blkio"] = mount("v1/blkio");
    l.v1_mounts["cpuset"] = mount("v1/cpuset");  // mounted, never to be used
    return l;
  }

  // This host's layout: v1 controllers and a controller-less cgroup2 mount at .../unified
  // whose root has the pressure files.
  CgroupLayout hybrid_layout(bool blkio = false) {
    CgroupLayout l = v1_layout(/*comount_cpu=*/false, /*freezer=*/true, blkio);
    l.kind = CgroupLayoutKind::kHybrid;
    l.unified_mount = mount("unified");
    write("unified/cgroup.controllers", "hugetlb\n");
    write("unified/cgroup.subtree_control", "");
    copy("cgroup_v2/memory.pressure", "unified/memory.pressure");
    copy("cgroup_v2/cpu.pressure", "unified/cpu.pressure");
    return l;
  }

  // A pure cgroup2 layout offering `controllers` at the root.
  CgroupLayout v2_layout(const std::vector<std::string>& controllers = {"cpuset", "cpu", "io",
                                                                        "memory", "hugetlb", "pids",
                                                                        "rdma", "misc"},
                         bool psi = true) {
    CgroupLayout l;
    l.kind = CgroupLayoutKind::kV2;
    l.unified_mount = mount("v2");
    l.v2_controllers = controllers;
    v2_node("v2", controllers);
    if (psi) {
      copy("cgroup_v2/memory.pressure", "v2/memory.pressure");
      copy("cgroup_v2/cpu.pressure", "v2/cpu.pressure");
    }
    return l;
  }

  // A v2 directory as the kernel shows it: `controllers` available, none enabled below.
  void v2_node(const std::string& rel, const std::vector<std::string>& controllers) {
    std::string list;
    for (const auto& c : controllers) list += (list.empty() ? "" : " ") + c;
    write(rel + "/cgroup.controllers", list + "\n");
    write(rel + "/cgroup.subtree_control", "");
  }

  // Gives every directory of `cg` the files its hierarchy has ("unified" means the hybrid
  // mount's controller-less cgroup2 unless `v2_controllers` is set).
  void populate(const Cgroup& cg, const std::vector<std::string>& v2_controllers = {},
                bool pure_v2 = false) {
    for (const auto& [hierarchy, dir] : cg.dirs)
      populate_dir(hierarchy, dir, v2_controllers, pure_v2);
  }

  std::string path(const std::string& rel) const { return tmp_ / rel; }
  void write(const std::string& rel, const std::string& text) {
    std::string p = path(rel);
    ASSERT_TRUE(make_dirs(std::filesystem::path(p).parent_path()).ok()) << p;
    ASSERT_TRUE(write_file(p, text, O_WRONLY | O_CREAT | O_TRUNC).ok()) << p;
  }
  void write_abs(const std::string& p, const std::string& text) {
    ASSERT_TRUE(write_file(p, text, O_WRONLY | O_CREAT | O_TRUNC).ok()) << p;
  }
  static std::string read_abs(const std::string& p) {
    auto r = read_file(p);
    EXPECT_TRUE(r.ok()) << p << ": " << (r.ok() ? "" : r.error().message());
    return r.ok() ? *r : std::string();
  }
  std::string read(const std::string& rel) const { return read_abs(path(rel)); }
  void copy(const std::string& fixture, const std::string& rel) {
    auto text = read_file(testdata(fixture));
    ASSERT_TRUE(text.ok()) << testdata(fixture) << " (is SANDGATE_SOURCE_DIR set?)";
    write(rel, *text);
  }

 private:
  std::string mount(const std::string& rel) {
    std::string p = path(rel);
    EXPECT_TRUE(make_dirs(p).ok()) << p;
    return p;
  }

  void fixture_into(const std::string& fixture, const std::string& file_path) {
    auto text = read_file(testdata(fixture));
    ASSERT_TRUE(text.ok()) << testdata(fixture) << " (is SANDGATE_SOURCE_DIR set?)";
    write_abs(file_path, *text);
  }

  void populate_dir(const std::string& hierarchy, const std::string& dir,
                    const std::vector<std::string>& v2_controllers, bool pure_v2) {
    std::vector<std::string> empty = {"cgroup.procs"};
    std::vector<std::string> v1_counters, v2_counters;
    if (hierarchy == "memory") {
      empty.insert(empty.end(),
                   {"memory.limit_in_bytes", "memory.pressure_level", "cgroup.event_control"});
      v1_counters = {"memory.usage_in_bytes", "memory.max_usage_in_bytes", "memory.failcnt",
                     "memory.oom_control"};
    } else if (hierarchy == "cpu" || hierarchy == "cpuacct") {
      // A comounted "cpu,cpuacct" directory gets both sets.
      if (hierarchy == "cpu" || dir.find("cpu,cpuacct") != std::string::npos) {
        empty.insert(empty.end(), {"cpu.cfs_period_us", "cpu.cfs_quota_us", "cpu.shares"});
        v1_counters.push_back("cpu.stat");
      }
      if (hierarchy == "cpuacct" || dir.find("cpu,cpuacct") != std::string::npos)
        v1_counters.push_back("cpuacct.usage");
    } else if (hierarchy == "pids") {
      empty.push_back("pids.max");
      v1_counters = {"pids.current", "pids.events"};
    } else if (hierarchy == "freezer") {
      empty.push_back("freezer.state");
    } else if (hierarchy == "blkio") {
      empty.insert(empty.end(),
                   {"blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device"});
    } else if (hierarchy == "unified") {
      empty.insert(empty.end(), {"cgroup.freeze", "cgroup.kill"});
      v2_counters = {"cgroup.events", "memory.pressure", "cpu.pressure"};
      if (pure_v2) {
        std::string list;
        for (const auto& c : v2_controllers) list += (list.empty() ? "" : " ") + c;
        write_abs(dir + "/cgroup.controllers", list + "\n");
        empty.insert(empty.end(), {"cgroup.subtree_control", "memory.max", "memory.high", "cpu.max",
                                   "cpu.weight", "pids.max", "io.max"});
        v2_counters.insert(v2_counters.end(), {"memory.current", "memory.peak", "memory.events",
                                               "cpu.stat", "pids.current", "pids.events"});
      }
    }
    for (const auto& f : empty) write_abs(dir + "/" + f, "");
    for (const auto& f : v1_counters) fixture_into("cgroup_v1/" + f, dir + "/" + f);
    for (const auto& f : v2_counters) fixture_into("cgroup_v2/" + f, dir + "/" + f);
  }

  ::sandgate::testing::TempDir tmp_;
};

}  // namespace sandgate::controller::testing
