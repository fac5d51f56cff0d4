#include "core/kvm_check.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>
#include <string>

#include "tests/support/privileged.h"

namespace sandgate {
namespace {

// The probe child is gone: not ours to wait for any more, and no such process.
void expect_reaped(pid_t pid) {
  ASSERT_GT(pid, 0);
  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(KvmCheck, NoDeviceIsAbsent) {
  HostPaths paths;
  paths.dev = "/nonexistent-dev";
  paths.sys = "/nonexistent-sys";
  KvmCheckResult r = check_kvm(paths);
  EXPECT_EQ(r.verdict, KvmVerdict::kAbsent);
  EXPECT_EQ(describe(r), "absent");
  EXPECT_EQ(r.child_pid, -1);  // nothing was forked
  EXPECT_EQ(r.backend, "");
}

TEST(KvmCheck, NotAKvmDeviceIsBrokenWithTheFailingStep) {
  HostPaths paths;
  // /dev/zero opened as "kvm" answers KVM_GET_API_VERSION with ENOTTY.
  char tmpl[] = "/tmp/sandgate-kvm-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  paths.dev = tmpl;
  ASSERT_EQ(::symlink("/dev/zero", (paths.dev + "/kvm").c_str()), 0);
  KvmCheckResult r = check_kvm(paths, std::chrono::seconds(5));
  ::unlink((paths.dev + "/kvm").c_str());
  ::rmdir(tmpl);
  EXPECT_EQ(r.verdict, KvmVerdict::kBroken) << r.detail;
  EXPECT_NE(r.detail.find("KVM_GET_API_VERSION"), std::string::npos) << r.detail;
  EXPECT_EQ(describe(r), "present but unusable — TCG only");
  expect_reaped(r.child_pid);
}

// On the real host: a definite answer within the deadline, and no child left behind. A host
// without /dev/kvm (some machines of this project's kind have none) answers "absent" at once.
TEST(KvmCheckReal, CompletesWithinItsDeadlineWithADefiniteAnswer) {
  HostPaths paths;
  struct stat st;
  if (::stat("/dev/kvm", &st) != 0 && errno == ENOENT) {
    KvmCheckResult r = check_kvm(paths, std::chrono::seconds(2));
    EXPECT_EQ(r.verdict, KvmVerdict::kAbsent) << r.detail;
    EXPECT_EQ(r.child_pid, -1);  // nothing was forked
    std::cout << "kvm: " << describe(r) << " (" << r.detail << ")\n";
    return;
  }
  SANDGATE_REQUIRE(::access("/dev/kvm", R_OK | W_OK) == 0, "/dev/kvm is not accessible");
  auto deadline = std::chrono::seconds(2);
  auto start = std::chrono::steady_clock::now();
  KvmCheckResult r = check_kvm(paths, deadline);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(r.verdict == KvmVerdict::kUsable || r.verdict == KvmVerdict::kTimedOut)
      << describe(r) << ": " << r.detail;
  // The deadline, plus the kill and reap.
  EXPECT_LT(took, deadline + std::chrono::seconds(1)) << r.detail;
  EXPECT_FALSE(r.child_unreaped);
  expect_reaped(r.child_pid);
  if (r.verdict == KvmVerdict::kUsable) {
    EXPECT_EQ(describe(r), "usable");
  } else {
    EXPECT_EQ(describe(r), "present but a guest does not run (timed out after 2s) — TCG only");
    EXPECT_GE(r.elapsed, deadline);
  }
  std::cout << "kvm: " << describe(r) << " (" << r.detail << ")\n";
}

// A deadline far too short for any guest: the child must be killed, reaped, and the verdict
// must be a timeout, never "usable".
// Without /dev/kvm on this host, /dev/zero stands in for it: its child fails at once instead of
// running a guest, so the verdict may be that failure if the child wins the race with the 1 us
// deadline, but never "usable", and the child is reaped either way.
TEST(KvmCheckReal, TooShortADeadlineKillsAndReapsTheChild) {
  HostPaths paths;
  struct stat st;
  std::string stand_in;
  if (::stat("/dev/kvm", &st) != 0 && errno == ENOENT) {
    char tmpl[] = "/tmp/sandgate-kvm-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    stand_in = tmpl;
    paths.dev = stand_in;
    ASSERT_EQ(::symlink("/dev/zero", (paths.dev + "/kvm").c_str()), 0);
  } else {
    SANDGATE_REQUIRE(::access("/dev/kvm", R_OK | W_OK) == 0, "/dev/kvm is not accessible");
  }
  KvmCheckResult r = check_kvm(paths, std::chrono::microseconds(1));
  if (!stand_in.empty()) {
    ::unlink((stand_in + "/kvm").c_str());
    ::rmdir(stand_in.c_str());
    EXPECT_NE(r.verdict, KvmVerdict::kUsable) << r.detail;
    EXPECT_NE(r.child_pid, -1) << "a child must have been started";
  } else {
    EXPECT_EQ(r.verdict, KvmVerdict::kTimedOut) << r.detail;
  }
  EXPECT_FALSE(r.child_unreaped);
  expect_reaped(r.child_pid);
}

}  // namespace
}  // namespace sandgate
