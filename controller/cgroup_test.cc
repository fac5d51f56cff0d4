// What the backends share (cgroup.cc): parse_flat_keyed, describe, make_cgroup_backend, the
// kernel version and the subtree walk.
#include "controller/cgroup.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "controller/cgroup_fake_fs.h"
#include "controller/cgroup_internal.h"
#include "controller/fake_backend.h"

namespace sandgate::controller {
namespace {

using ::testing::ElementsAre;
using testing::FakeCgroupFs;
using ::testing::HasSubstr;

TEST(ParseFlatKeyed, ReadsEveryKey) {
  auto m = parse_flat_keyed("low 0\nhigh 12\n\nmax 18446744073709551615\noom_kill 1");
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_EQ(m->size(), 4u);
  EXPECT_EQ(m->at("high"), 12u);
  EXPECT_EQ(m->at("max"), 18446744073709551615ull);
  EXPECT_EQ(m->at("oom_kill"), 1u);
  EXPECT_TRUE(parse_flat_keyed("").ok());
}

TEST(ParseFlatKeyed, MalformedLinesAreErrorsNamingTheLine) {
  for (const char* text : {"low 0\nhigh\n", "low 0\nhigh \n", "low 0\nhigh 1 2\n",
                           "low 0\nhigh -1\n", "low 0\nhigh 1x\n", "low 0\n 5\n",
                           "low 0\nhigh 99999999999999999999\n", "low 0\nlow 1\n"}) {
    auto m = parse_flat_keyed(text);
    ASSERT_FALSE(m.ok()) << text;
    EXPECT_THAT(m.error().message(), HasSubstr("line 2")) << text;
  }
}

TEST(ParseFlatKeyed, ReadsTheKernelSnapshots) {
  for (const char* f :
       {"cgroup_v1/cpu.stat", "cgroup_v1/memory.oom_control", "cgroup_v1/pids.events",
        "cgroup_v2/cpu.stat", "cgroup_v2/memory.events", "cgroup_v2/cgroup.events"}) {
    auto text = read_file(testing::testdata(f));
    ASSERT_TRUE(text.ok()) << f;
    EXPECT_TRUE(parse_flat_keyed(*text).ok()) << f;
  }
}

// A backend without a reader of its own (the fakes): every read, full or not, is read_usage.
TEST(DefaultUsageReader, ReadsUsageEveryTime) {
  testing::FakeBackend backend(testing::FakeBackend::all_features(), "/nonexistent-sandgate-fake");
  auto cg = backend.create("r1/call-1", nullptr);
  ASSERT_TRUE(cg.ok()) << cg.error().message();
  Usage a, b;
  a.memory_current = 1;
  b.memory_current = 2;
  backend.script("r1/call-1", {a, b});
  auto reader = backend.usage_reader(*cg);
  auto first = reader->read(true);
  auto second = reader->read(false);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->memory_current, 1u);
  EXPECT_EQ(second->memory_current, 2u);
  EXPECT_EQ(backend.reads("r1/call-1"), 2);
  ASSERT_TRUE(backend.remove(*cg).ok());
  auto gone = reader->read(false);
  ASSERT_FALSE(gone.ok());
  EXPECT_TRUE(cgroup_detail::is_gone(gone.error()));
}

TEST(ParseU64, TakesOneNumberAndATrailingNewline) {
  EXPECT_EQ(cgroup_detail::parse_u64("42\n").value(), 42u);
  EXPECT_EQ(cgroup_detail::parse_u64("0").value(), 0u);
  for (const char* bad : {"", "\n", "max\n", "-1", "4 2"})
    EXPECT_FALSE(cgroup_detail::parse_u64(bad).ok()) << bad;
}

TEST(DescribeFeatures, SaysWhatIsMissingAndWhy) {
  CgroupFeatures v1;
  v1.memory_peak = true;
  v1.freeze = true;
  auto lines = describe(v1);
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_THAT(lines[0], HasSubstr("memory.high: no"));
  EXPECT_THAT(lines[1], HasSubstr("memory peak: yes"));
  EXPECT_THAT(lines[3], HasSubstr("memory.pressure_level"));
  EXPECT_THAT(lines[5], HasSubstr("freeze + SIGKILL + thaw"));
  EXPECT_THAT(lines[6], HasSubstr("io limits: no"));
  CgroupFeatures all{true, true, true, true, true, true, true};
  for (const auto& l : describe(all)) EXPECT_THAT(l, HasSubstr(": yes")) << l;
}

TEST(MakeCgroupBackend, PicksTheBackendForTheLayout) {
  FakeCgroupFs fs;
  for (auto layout : {fs.v1_layout(), fs.hybrid_layout(), fs.v2_layout()}) {
    auto b = make_cgroup_backend(layout);
    ASSERT_TRUE(b.ok()) << b.error().message();
    EXPECT_EQ((*b)->kind(), layout.kind);
  }
  auto none = make_cgroup_backend(CgroupLayout{});
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.error().message(), HasSubstr("no cgroup filesystem"));
}

TEST(KernelVersion, ParsesReleases) {
  using cgroup_detail::parse_kernel_release;
  auto v = parse_kernel_release("6.1.0-18-amd64");
  EXPECT_EQ(v.major, 6);
  EXPECT_EQ(v.minor, 1);
  EXPECT_TRUE(v.at_least(5, 14));
  EXPECT_TRUE(v.at_least(6, 1));
  EXPECT_FALSE(v.at_least(6, 2));
  EXPECT_EQ(parse_kernel_release("5.19").minor, 19);
  EXPECT_EQ(parse_kernel_release("garbage").major, 0);
  EXPECT_EQ(parse_kernel_release("6").major, 0);
}

TEST(SubtreeWalk, ListsChildrenBeforeParents) {
  FakeCgroupFs fs;
  fs.write("t/a/x/cgroup.procs", "");
  fs.write("t/a/cgroup.procs", "");
  fs.write("t/b/cgroup.procs", "");
  auto order = cgroup_detail::subtree_deepest_first(fs.path("t"));
  ASSERT_TRUE(order.ok()) << order.error().message();
  EXPECT_THAT(*order, ElementsAre(fs.path("t/a/x"), fs.path("t/a"), fs.path("t/b"), fs.path("t")));
}

TEST(SubtreeWalk, ProcsOfASubtreeAreUnique) {
  FakeCgroupFs fs;
  fs.write("t/cgroup.procs", "7\n");
  fs.write("t/a/cgroup.procs", "9\n7\n");
  auto pids = cgroup_detail::subtree_procs({fs.path("t")});
  ASSERT_TRUE(pids.ok()) << pids.error().message();
  EXPECT_THAT(*pids, ElementsAre(7, 9));
  // A cgroup removed under us is no error.
  auto gone = cgroup_detail::subtree_procs({fs.path("missing")});
  ASSERT_TRUE(gone.ok());
  EXPECT_TRUE(gone->empty());
}

}  // namespace
}  // namespace sandgate::controller
