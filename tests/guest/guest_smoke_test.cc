// Proves the guest-VM lane (ci/guest/run-lane) really boots a pure cgroup v2 machine.
//
// These tests are meant to FAIL anywhere else: on this project's hybrid hosts the v1
// hierarchies are mounted and /sys/fs/cgroup is a tmpfs, so a green run here is evidence that
// the lane did what it claims. That is why the binary is not registered with
// gtest_discover_tests; CTest only runs it through the guest_v2_lane test.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/privileged.h"

namespace {

namespace fs = std::filesystem;

// Where the lane's /init mounts the unified hierarchy.
constexpr const char* kCgroupRoot = "/sys/fs/cgroup";

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::set<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::set<std::string> out;
  for (std::string w; in >> w;) out.insert(w);
  return out;
}

struct MountEntry {
  std::string mount_point;
  std::string fs_type;
};

// /proc/self/mountinfo: "id parent major:minor root mount-point options [optional...] - type
// source super-options" (Documentation/filesystems/proc.rst, section 3.5).
std::vector<MountEntry> mounts() {
  std::ifstream in("/proc/self/mountinfo");
  std::vector<MountEntry> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::vector<std::string> fields;
    for (std::string w; f >> w;) fields.push_back(w);
    auto dash = std::find(fields.begin(), fields.end(), "-");
    if (fields.size() < 5 || dash == fields.end() || dash + 1 == fields.end()) continue;
    out.push_back({fields[4], *(dash + 1)});
  }
  return out;
}

TEST(GuestSmoke, RunsAsRoot) { SANDGATE_REQUIRE_ROOT(); }

TEST(GuestSmoke, Cgroup2IsMountedAtSysFsCgroupAndNoV1Hierarchy) {
  const auto all = mounts();
  ASSERT_FALSE(all.empty()) << "could not read /proc/self/mountinfo";
  bool unified_at_root = false;
  for (const auto& m : all) {
    EXPECT_NE(m.fs_type, "cgroup") << "a cgroup v1 hierarchy is mounted at " << m.mount_point;
    if (m.fs_type == "cgroup2" && m.mount_point == kCgroupRoot) unified_at_root = true;
  }
  EXPECT_TRUE(unified_at_root) << "no cgroup2 mount at " << kCgroupRoot;
}

TEST(GuestSmoke, RootHasMemoryCpuPidsControllers) {
  const auto have = words(read_file(fs::path(kCgroupRoot) / "cgroup.controllers"));
  for (const char* c : {"memory", "cpu", "pids"}) {
    EXPECT_TRUE(have.count(c)) << c << " missing from " << kCgroupRoot << "/cgroup.controllers";
  }
}

TEST(GuestSmoke, ChildCgroupHasPeakAndKillAndCanBeRemoved) {
  SANDGATE_REQUIRE_ROOT();
  const fs::path root(kCgroupRoot);
  ASSERT_TRUE(fs::exists(root / "cgroup.subtree_control")) << root << " is not a cgroup2 root";

  // Interface files of a controller appear in a child only when the parent delegates it.
  {
    std::ofstream ctl(root / "cgroup.subtree_control");
    ctl << "+memory +cpu +pids";
  }
  const auto delegated = words(read_file(root / "cgroup.subtree_control"));
  EXPECT_TRUE(delegated.count("memory") && delegated.count("cpu") && delegated.count("pids"))
      << "subtree_control: " << read_file(root / "cgroup.subtree_control");

  const fs::path child = root / ("guest-smoke-" + std::to_string(::getpid()));
  ASSERT_EQ(::mkdir(child.c_str(), 0755), 0) << "mkdir " << child << ": " << std::strerror(errno);
  // memory.peak: Linux 5.19 (8e20d4b33266); cgroup.kill: Linux 5.14 (661ee6280931).
  for (const char* f : {"memory.peak", "memory.max", "memory.pressure", "cgroup.kill",
                        "cgroup.freeze", "cpu.max", "pids.max"}) {
    EXPECT_TRUE(fs::exists(child / f)) << f << " missing in " << child;
  }
  // Killing an empty cgroup is a no-op that must still be accepted.
  {
    std::ofstream kill(child / "cgroup.kill");
    kill << "1";
    kill.flush();
    EXPECT_TRUE(kill.good()) << "write 1 > " << (child / "cgroup.kill");
  }
  EXPECT_EQ(::rmdir(child.c_str()), 0) << "rmdir " << child << ": " << std::strerror(errno);
  EXPECT_FALSE(fs::exists(child));
}

// The lane boots QEMU with -nic none: the guest must only ever see loopback.
TEST(GuestSmoke, HasNoNetworkDeviceButLoopback) {
  std::vector<std::string> links;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/sys/class/net", ec)) {
    links.push_back(e.path().filename());
  }
  ASSERT_FALSE(ec) << "/sys/class/net: " << ec.message();
  EXPECT_EQ(links, std::vector<std::string>{"lo"});
}

// The lane attaches one blank NVMe disk, its serial in SANDGATE_LANE_DISK_SERIAL: io.max and
// the rest of the block-device paths need a real device (cgroup_v2_real_test requires one).
TEST(GuestSmoke, HasTheLanesBlankNvmeDisk) {
  const char* serial = std::getenv("SANDGATE_LANE_DISK_SERIAL");
  ASSERT_TRUE(serial && *serial)
      << "SANDGATE_LANE_DISK_SERIAL is unset: not run by ci/guest/run-lane";
  std::vector<std::string> matching;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/sys/block", ec)) {
    std::string id = read_file(e.path() / "device" / "serial");  // padded with spaces
    while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
    if (id != serial) continue;
    matching.push_back(e.path().filename());
    EXPECT_EQ(e.path().filename().string().rfind("nvme", 0), 0u) << e.path();
    EXPECT_NE(read_file(e.path() / "dev"), "") << e.path() << " has no device number";
  }
  ASSERT_FALSE(ec) << "/sys/block: " << ec.message();
  EXPECT_EQ(matching.size(), 1u) << "block devices with serial " << serial << ": "
                                 << matching.size();
}

}  // namespace
