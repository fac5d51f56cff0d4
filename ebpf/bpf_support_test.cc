#include "ebpf/bpf_support.h"

#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fd.h"
#include "core/files.h"
#include "tests/support/privileged.h"

namespace sandgate::ebpf {
namespace {

class FakeHost : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sandgate-bpf-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    paths_.proc = root_ + "/proc";
    paths_.btf_vmlinux = root_ + "/btf/vmlinux";
    paths_.tracefs = "/sys/kernel/tracing";
  }
  void TearDown() override { (void)remove_tree(root_); }
  void put(const std::string& rel, const std::string& text) {
    std::string path = root_ + "/" + rel;
    ASSERT_TRUE(make_dirs(path.substr(0, path.rfind('/'))).ok());
    ASSERT_TRUE(write_file(path, text, O_WRONLY | O_CREAT | O_TRUNC).ok());
  }
  std::string root_;
  HostPaths paths_;
};

TEST_F(FakeHost, BtfMissingEmptyAndPresent) {
  Check missing = btf_check(paths_);
  EXPECT_FALSE(missing.ok);
  EXPECT_NE(missing.detail.find("CONFIG_DEBUG_INFO_BTF"), std::string::npos) << missing.detail;
  put("btf/vmlinux", "");
  EXPECT_FALSE(btf_check(paths_).ok);
  put("btf/vmlinux", std::string(4096, 'x'));
  Check present = btf_check(paths_);
  EXPECT_TRUE(present.ok);
  EXPECT_EQ(present.detail, paths_.btf_vmlinux + " (4 KiB)");
}

TEST_F(FakeHost, TracefsNotMountedSaysHowToMountIt) {
  put("proc/self/mountinfo", "22 27 0:21 / /proc rw,relatime - proc proc rw\n");
  Check c = tracefs_check(paths_);
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.detail.find("mount -t tracefs nodev /sys/kernel/tracing"), std::string::npos)
      << c.detail;
}

TEST_F(FakeHost, TracefsMountedWhereExpectedOrElsewhere) {
  put("proc/self/mountinfo",
      "36 23 0:12 / /sys/kernel/debug/tracing rw,relatime - tracefs tracefs rw\n");
  Check elsewhere = tracefs_check(paths_);
  EXPECT_TRUE(elsewhere.ok);
  EXPECT_NE(elsewhere.detail.find("mounted at /sys/kernel/debug/tracing, not at"),
            std::string::npos)
      << elsewhere.detail;
  put("proc/self/mountinfo",
      "36 23 0:12 / /sys/kernel/debug/tracing rw,relatime - tracefs tracefs rw\n"
      "37 23 0:12 / /sys/kernel/tracing rw,relatime - tracefs tracefs rw\n");
  Check here = tracefs_check(paths_);
  EXPECT_TRUE(here.ok);
  EXPECT_EQ(here.detail, "mounted at /sys/kernel/tracing");
}

TEST_F(FakeHost, TracefsWithUnreadableOrBrokenMountinfoFails) {
  EXPECT_FALSE(tracefs_check(paths_).ok);
  put("proc/self/mountinfo", "not a mountinfo line\n");
  EXPECT_FALSE(tracefs_check(paths_).ok);
}

TEST(FindTracefs, IgnoresOtherFilesystemsAtThePath) {
  std::vector<MountEntry> mounts(1);
  mounts[0].mount_point = "/sys/kernel/tracing";
  mounts[0].fstype = "tmpfs";
  EXPECT_EQ(find_tracefs(mounts, "/sys/kernel/tracing"), "");
}

// ---- against the real kernel ----

TEST(BpfReal, RootLoadsTheTrivialProgram) {
  SANDGATE_REQUIRE_ROOT();
  auto s = try_load_trivial_program();
  EXPECT_TRUE(s.ok()) << s.error().message();
  EXPECT_TRUE(bpf_load_check(HostPaths{}).ok);
}

// The negative twin: without privileges the same load is refused (when the kernel forbids
// unprivileged BPF, as this project's hosts do), and the check says why.
TEST(BpfReal, UnprivilegedLoadIsRefusedWithEperm) {
  SANDGATE_REQUIRE_ROOT();
  auto unpriv = read_file("/proc/sys/kernel/unprivileged_bpf_disabled", 16);
  SANDGATE_REQUIRE(unpriv.ok() && !unpriv->empty() && (*unpriv)[0] != '0',
                   "unprivileged BPF is allowed on this host: nothing to refuse");
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Drop to nobody: every capability goes with the uid change.
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(10);
    auto s = try_load_trivial_program();
    if (s.ok()) ::_exit(11);
    Check c = bpf_load_check(HostPaths{});
    ::_exit(s.error().err == EPERM && !c.ok && c.detail.find("needs CAP_BPF") != std::string::npos
                ? 0
                : 12);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "10: setuid failed, 11: loaded unprivileged, 12: wrong error";
}

TEST(BpfReal, BtfAndTracefsGiveADefiniteAnswer) {
  HostPaths paths;
  Check btf = btf_check(paths);
  EXPECT_EQ(btf.ok, ::access(paths.btf_vmlinux.c_str(), R_OK) == 0) << btf.detail;
  Check tracefs = tracefs_check(paths);
  EXPECT_FALSE(tracefs.detail.empty());
  // A mounted tracefs has its trace pipe; an unmounted one does not.
  EXPECT_EQ(tracefs.ok && tracefs.detail == "mounted at " + paths.tracefs,
            ::access((paths.tracefs + "/trace_pipe").c_str(), F_OK) == 0)
      << tracefs.detail;
}

}  // namespace
}  // namespace sandgate::ebpf

namespace sandgate::ebpf {
namespace {

TEST(TrampolineCheck, AFunctionTheKernelDoesNotHaveIsNamed) {
  SANDGATE_REQUIRE_ROOT();
  auto s = try_load_trampoline_program(false, "sandgate_no_such_function");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().err, ENOENT);
  EXPECT_NE(s.error().message().find("not in the kernel's BTF"), std::string::npos) << s.error().message();
}

TEST(TracerChecks, TheActivityTracerAndEgressGuardLoadOnThisHost) {
  SANDGATE_REQUIRE_ROOT();
  Check t = activity_tracer_check();
  SANDGATE_REQUIRE(t.ok, "the activity tracer does not load here: " + t.detail);
  EXPECT_NE(t.detail.find("exec --trace works"), std::string::npos);
  Check g = egress_guard_check();
  EXPECT_TRUE(g.ok) << g.detail;
}

}  // namespace
}  // namespace sandgate::ebpf
