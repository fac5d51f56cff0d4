#include "core/host_features.h"

#include <elf.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "core/fd.h"
#include "core/files.h"
#include "tests/support/privileged.h"

namespace sandgate {
namespace {

class FakeHost : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sandgate-host-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    paths_.proc = root_ + "/proc";
  }
  void TearDown() override { (void)remove_tree(root_); }
  void put(const std::string& rel, const std::string& text, mode_t mode = 0644) {
    std::string path = root_ + "/" + rel;
    ASSERT_TRUE(make_dirs(path.substr(0, path.rfind('/'))).ok());
    ASSERT_TRUE(write_file(path, text, O_WRONLY | O_CREAT | O_TRUNC, mode).ok());
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
  }
  std::string root_;
  HostPaths paths_;
};

constexpr const char* kMemoryPressure =
    "some avg10=1.50 avg60=0.25 avg300=0.05 total=5439422\n"
    "full avg10=0.00 avg60=0.00 avg300=0.00 total=12\n";

TEST(Pressure, ParsesSomeAndFull) {
  auto p = parse_pressure(kMemoryPressure);
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_DOUBLE_EQ(p->some.avg10, 1.5);
  EXPECT_DOUBLE_EQ(p->some.avg60, 0.25);
  EXPECT_DOUBLE_EQ(p->some.avg300, 0.05);
  EXPECT_EQ(p->some.total_us, 5439422u);
  ASSERT_TRUE(p->full.has_value());
  EXPECT_EQ(p->full->total_us, 12u);
}

TEST(Pressure, CpuBefore513HasNoFullLine) {
  auto p = parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_FALSE(p->full.has_value());
}

TEST(Pressure, RejectsMalformedText) {
  EXPECT_FALSE(parse_pressure("").ok());
  EXPECT_FALSE(parse_pressure("full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").ok());
  EXPECT_FALSE(parse_pressure("some avg10=x avg60=0.00 avg300=0.00 total=0\n").ok());
  EXPECT_FALSE(parse_pressure("some avg10=0.00 avg60=0.00 total=0\n").ok());
  EXPECT_FALSE(parse_pressure("most avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").ok());
  // strtod's other numbers: NaN would never trip the monitor's threshold (tests/fuzz).
  EXPECT_FALSE(parse_pressure("some avg10=nan avg60=0.00 avg300=0.00 total=0\n").ok());
  EXPECT_FALSE(parse_pressure("some avg10=inf avg60=0.00 avg300=0.00 total=0\n").ok());
  EXPECT_FALSE(parse_pressure("some avg10=-1.00 avg60=0.00 avg300=0.00 total=0\n").ok());
  EXPECT_FALSE(parse_pressure("some avg10=0x10 avg60=0.00 avg300=0.00 total=0\n").ok());
  EXPECT_FALSE(parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=-5\n").ok());
  // A long malformed line is quoted as a short excerpt.
  auto long_line = parse_pressure("some " + std::string(1 << 20, 'x') + "\n");
  ASSERT_FALSE(long_line.ok());
  EXPECT_LT(long_line.error().message().size(), 400u);
}

TEST_F(FakeHost, SystemPressureReportsEachFileAndWhyOneIsMissing) {
  put("proc/pressure/cpu", "some avg10=0.85 avg60=0.24 avg300=0.05 total=5439422\n");
  put("proc/pressure/memory", kMemoryPressure);
  auto checks = system_pressure_checks(paths_);
  ASSERT_EQ(checks.size(), 3u);
  EXPECT_TRUE(checks[0].ok) << checks[0].detail;
  EXPECT_NE(checks[0].detail.find("avg10=0.85%"), std::string::npos) << checks[0].detail;
  EXPECT_TRUE(checks[1].ok) << checks[1].detail;
  EXPECT_EQ(checks[2].name, "PSI io");
  EXPECT_FALSE(checks[2].ok);
  EXPECT_NE(checks[2].detail.find("CONFIG_PSI"), std::string::npos) << checks[2].detail;
}

TEST_F(FakeHost, SystemPressureRejectsGarbage) {
  put("proc/pressure/cpu", "garbage\n");
  auto checks = system_pressure_checks(paths_);
  EXPECT_FALSE(checks[0].ok);
  EXPECT_NE(checks[0].detail.find("parse pressure"), std::string::npos) << checks[0].detail;
}

TEST_F(FakeHost, MaxUserNamespacesZeroIsRefusedWithTheSysctl) {
  put("proc/sys/user/max_user_namespaces", "0\n");
  auto max = read_max_user_namespaces(paths_);
  ASSERT_TRUE(max.ok()) << max.error().message();
  EXPECT_EQ(*max, 0);
  Check c = user_namespace_check(paths_);
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.detail.find("user.max_user_namespaces is 0"), std::string::npos) << c.detail;
}

TEST_F(FakeHost, MaxUserNamespacesGarbageAndMissingAreErrors) {
  EXPECT_EQ(read_max_user_namespaces(paths_).error().err, ENOENT);
  put("proc/sys/user/max_user_namespaces", "lots\n");
  EXPECT_FALSE(read_max_user_namespaces(paths_).ok());
  EXPECT_FALSE(user_namespace_check(paths_).ok);
}

TEST(Status, FindsFields) {
  std::string status = "Name:\tcat\nSeccomp:\t2\nSeccomp_filters:\t1\n";
  EXPECT_EQ(status_field(status, "Seccomp"), "2");
  EXPECT_EQ(status_field(status, "Seccomp_filters"), "1");
  EXPECT_EQ(status_field(status, "Secco"), std::nullopt);
  EXPECT_EQ(status_field(status, "NoNewPrivs"), std::nullopt);
}

TEST_F(FakeHost, SeccompStatusLineMissingIsReported) {
  put("proc/self/status", "Name:\tcat\nNoNewPrivs:\t0\n");
  auto checks = seccomp_checks(paths_);
  ASSERT_GE(checks.size(), 2u);
  EXPECT_EQ(checks[1].name, "Seccomp: in status");
  EXPECT_FALSE(checks[1].ok);
  put("proc/self/status", "Name:\tcat\nSeccomp:\t0\nSeccomp_filters:\t0\n");
  EXPECT_TRUE(seccomp_checks(paths_)[1].ok);
}

TEST_F(FakeHost, FindOnPathTakesTheFirstExecutable) {
  put("a/tool", "#!/bin/sh\n", 0644);  // not executable: skipped
  put("b/tool", "#!/bin/sh\necho 'tool version 1.2'\n", 0755);
  put("c/tool", "#!/bin/sh\n", 0755);
  std::string path = root_ + "/a:" + root_ + "/b:" + root_ + "/c";
  EXPECT_EQ(find_on_path("tool", path), root_ + "/b/tool");
  EXPECT_EQ(find_on_path("nope", path), std::nullopt);
  EXPECT_EQ(find_on_path("b", root_), std::nullopt);  // a directory is not a tool
}

TEST(Tools, FirstLine) {
  EXPECT_EQ(first_line("\n  podman version 4.3.1 \nmore\n"), "podman version 4.3.1");
  EXPECT_EQ(first_line(""), "");
}

TEST_F(FakeHost, ToolCheckRunsTheToolForItsVersion) {
  put("bin/fake-qemu", "#!/bin/sh\necho \"QEMU emulator version 7.2.0 ($1)\"\necho Copyright\n",
      0755);
  put("bin/silent", "#!/bin/sh\nexit 3\n", 0755);
  std::string path = root_ + "/bin";
  Check ok = tool_check({"fake-qemu", {"--version"}, false, "tests"}, path);
  EXPECT_TRUE(ok.ok) << ok.detail;
  EXPECT_EQ(ok.detail, root_ + "/bin/fake-qemu: QEMU emulator version 7.2.0 (--version)");
  Check silent = tool_check({"silent", {"--version"}, false, "tests"}, path);
  EXPECT_FALSE(silent.ok);
  EXPECT_NE(silent.detail.find("exit 3"), std::string::npos) << silent.detail;
  Check missing = tool_check({"podman", {"--version"}, false, "the podman provider"}, path);
  EXPECT_FALSE(missing.ok);
  EXPECT_EQ(missing.detail, "not found on PATH (used for the podman provider)");
  // A script is not an ELF binary: a tool that must be static is refused.
  Check not_elf = tool_check({"fake-qemu", {"--version"}, true, "tests"}, path);
  EXPECT_FALSE(not_elf.ok);
}

TEST_F(FakeHost, ToolCheckTimesOut) {
  put("bin/hang", "#!/bin/sh\nexec sleep 30\n", 0755);
  Check c =
      tool_check({"hang", {}, false, "tests"}, root_ + "/bin", std::chrono::milliseconds(200));
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.detail.find("no version within"), std::string::npos) << c.detail;
}

// The median spawn-to-reap time of the program itself: a program that takes 200 ms is measured
// at no less (an upper bound would not hold beside a busy machine); one that fails, or is
// missing, is an error that names it.
TEST_F(FakeHost, ProcessStartIsTheProgramsWholeRunAndFailsWithIt) {
  put("bin/slow", "#!/bin/sh\nsleep 0.2\n", 0755);
  put("bin/fails", "#!/bin/sh\nexit 3\n", 0755);
  auto slow = measure_process_start(root_ + "/bin/slow", 3);
  ASSERT_TRUE(slow.ok()) << slow.error().message();
  EXPECT_GE(slow->exec_ms, 200.0);
  auto fails = measure_process_start(root_ + "/bin/fails", 3);
  ASSERT_FALSE(fails.ok());
  EXPECT_NE(fails.error().message().find("exit 3"), std::string::npos) << fails.error().message();
  auto missing = measure_process_start(root_ + "/bin/missing", 1);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find(root_ + "/bin/missing"), std::string::npos)
      << missing.error().message();
  EXPECT_FALSE(measure_process_start(root_ + "/bin/slow", 0).ok()) << "no runs, no median";
  Check failed = process_start_check(fails, root_ + "/bin/fails");
  EXPECT_FALSE(failed.ok);
  EXPECT_EQ(failed.name, "process start");
}

// A minimal 64-bit ELF header with one program header of the given type.
std::string fake_elf(uint32_t ptype) {
  Elf64_Ehdr eh = {};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_phoff = sizeof eh;
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = 1;
  Elf64_Phdr ph = {};
  ph.p_type = ptype;
  std::string out(reinterpret_cast<const char*>(&eh), sizeof eh);
  out.append(reinterpret_cast<const char*>(&ph), sizeof ph);
  return out;
}

TEST_F(FakeHost, StaticElfIsOneWithoutAnInterpreter) {
  put("static", fake_elf(PT_LOAD));
  put("dynamic", fake_elf(PT_INTERP));
  put("text", "#!/bin/sh\n");
  EXPECT_EQ(is_static_elf(root_ + "/static").value(), true);
  EXPECT_EQ(is_static_elf(root_ + "/dynamic").value(), false);
  EXPECT_FALSE(is_static_elf(root_ + "/text").ok());
  // This test binary is dynamically linked (sanitizers and libstdc++).
  auto self = is_static_elf("/proc/self/exe");
  ASSERT_TRUE(self.ok()) << self.error().message();
  EXPECT_FALSE(*self);
}

TEST_F(FakeHost, GuestKernelIsTheNewestCloudKernel) {
  put("boot/vmlinuz-6.1.0-17-cloud-amd64", "k");
  put("boot/vmlinuz-6.1.0-18-cloud-amd64", "k");
  put("boot/vmlinuz-6.1.0-18-amd64", "k");
  Check c = guest_kernel_check(root_ + "/boot");
  EXPECT_TRUE(c.ok);
  EXPECT_EQ(c.detail, root_ + "/boot/vmlinuz-6.1.0-18-cloud-amd64");
  ASSERT_TRUE(make_dirs(root_ + "/empty-boot").ok());
  EXPECT_FALSE(guest_kernel_check(root_ + "/empty-boot").ok);
  EXPECT_FALSE(guest_kernel_check(root_ + "/no-boot").ok);
}

// ---- against the real kernel ----

TEST(HostFeaturesReal, SystemPressureFilesParse) {
  HostPaths paths;
  for (const auto& c : system_pressure_checks(paths))
    EXPECT_TRUE(c.ok) << c.name << ": " << c.detail;
}

TEST(HostFeaturesReal, UserNamespaceCanBeCreated) {
  HostPaths paths;
  auto max = read_max_user_namespaces(paths);
  ASSERT_TRUE(max.ok()) << max.error().message();
  SANDGATE_REQUIRE(*max > 0, "user.max_user_namespaces is 0 on this host");
  auto s = try_user_namespace();
  EXPECT_TRUE(s.ok()) << s.error().message();
  EXPECT_TRUE(user_namespace_check(paths).ok);
}

TEST(HostFeaturesReal, SeccompWorksHere) {
  HostPaths paths;
  for (const auto& c : seccomp_checks(paths)) EXPECT_TRUE(c.ok) << c.name << ": " << c.detail;
  // The filter was installed in a child only: this process is still unfiltered.
  EXPECT_EQ(::prctl(PR_GET_SECCOMP, 0, 0, 0, 0), 0);
}

TEST(HostFeaturesReal, ProcessStartIsMeasuredHere) {
  auto cost = measure_process_start();
  ASSERT_TRUE(cost.ok()) << cost.error().message();
  EXPECT_GT(cost->exec_ms, 0.0);
  Check c = process_start_check(cost);
  ASSERT_TRUE(c.ok) << c.detail;
  EXPECT_EQ(c.detail.rfind("/bin/true spawned, run and reaped in ", 0), 0u) << c.detail;
  EXPECT_NE(c.detail.find(" ms (median of 10)"), std::string::npos) << c.detail;
#if defined(__x86_64__)
  EXPECT_GT(cost->cpuid_us, 0.0) << "x86 has CPUID, and it takes some time";
  EXPECT_NE(c.detail.find("; one CPUID "), std::string::npos) << c.detail;
#endif
}

TEST(HostFeaturesReal, ToolChecksGiveADefiniteAnswerForEachTool) {
  const char* path = std::getenv("PATH");
  ASSERT_NE(path, nullptr);
  for (const auto& tool : default_tools()) {
    Check c = tool_check(tool, path);
    EXPECT_FALSE(c.detail.empty()) << tool.name;
    // Found on PATH <=> reported with its path; not found <=> says so.
    auto found = find_on_path(tool.name, path);
    if (found)
      EXPECT_EQ(c.detail.rfind(*found, 0), 0u) << c.detail;
    else
      EXPECT_FALSE(c.ok) << c.detail;
  }
}

}  // namespace
}  // namespace sandgate
