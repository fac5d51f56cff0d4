#include "core/meminfo.h"

#include <gtest/gtest.h>

#include "tests/support/privileged.h"

namespace sandgate {
namespace {

TEST(Meminfo, ReadsTotalAndAvailableFromAFakeProc) {
  HostPaths paths;
  paths.proc = testing::source_dir() + "/core/testdata/proc";
  auto m = read_meminfo(paths);
  ASSERT_TRUE(m.ok()) << m.error().message() << " (is SANDGATE_SOURCE_DIR set?)";
  EXPECT_EQ(m->total_bytes, 24684100ull * 1024);
  ASSERT_TRUE(m->available_bytes);
  EXPECT_EQ(*m->available_bytes, 23000000ull * 1024);
  EXPECT_EQ(m->used_bytes(), (24684100ull - 23000000ull) * 1024);
}

TEST(Meminfo, WithoutMemAvailableUsedIsUnknown) {
  // Kernels before 3.14 have no MemAvailable: the total is still known.
  auto m = parse_meminfo("MemTotal: 1 kB\nMemFree: 1 kB\n");
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_EQ(m->total_bytes, 1024u);
  EXPECT_FALSE(m->used_bytes());
}

TEST(Meminfo, MoreAvailableThanTotalIsNothingUsed) {
  auto m = parse_meminfo("MemAvailable: 5 kB\nMemTotal: 4 kB\n");
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_EQ(m->used_bytes(), 0u);
}

TEST(Meminfo, AMissingTotalOrAMalformedValueIsAnError) {
  auto none = parse_meminfo("MemFree: 1 kB\n");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message().find("no MemTotal"), std::string::npos)
      << none.error().message();

  auto bad = parse_meminfo("MemFree: 1 kB\nMemTotal: lots kB\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("line 2: MemTotal"), std::string::npos)
      << bad.error().message();
  EXPECT_FALSE(parse_meminfo("MemTotal: 1 MB\n").ok());
  EXPECT_FALSE(parse_meminfo("MemTotal: 18446744073709551615 kB\n").ok());  // overflows bytes
  // Lines that are not read may hold anything.
  EXPECT_TRUE(parse_meminfo("MemTotal: 1 kB\nweird line\nHugePages_Total: x\n").ok());
}

TEST(Meminfo, AMissingFileNamesItsPath) {
  HostPaths paths;
  paths.proc = "/nonexistent-proc";
  auto m = read_meminfo(paths);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message().find("/nonexistent-proc/meminfo"), std::string::npos)
      << m.error().message();
}

}  // namespace
}  // namespace sandgate
