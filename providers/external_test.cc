// sandgate against bad external providers (providers/testdata/fake-provider MODE): each
// broken rule is an error that says what was wrong, never a hang or a crash, and nothing is
// left behind. The positive twin (mode "honest") shows each path works when the rule holds.
#include "providers/external.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "core/test_temp_dir.h"
#include "providers/external_program.h"
#include "providers/registry.h"
#include "tests/support/privileged.h"
#include "tests/support/provider_fixture.h"

namespace sandgate::providers {
namespace {

using ::testing::HasSubstr;

class ExternalProviderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.paths.state_dir = dir_ / "state";
    options_.paths.work_dir = dir_ / "work";
    // Short enough for a test, long enough for a Python start on a busy 2-core machine.
    timeouts_.describe = std::chrono::seconds(15);
    timeouts_.create = std::chrono::seconds(15);
    timeouts_.started = std::chrono::seconds(15);
    timeouts_.exec_grace = std::chrono::seconds(2);
    timeouts_.exit = std::chrono::seconds(5);
  }
  void TearDown() override {
    // Nothing left: no run record, no run directory.
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_ / "work", ec))
      ADD_FAILURE() << "left behind: " << e.path();
    for (const auto& e : std::filesystem::directory_iterator(dir_ / "state/runs", ec))
      ADD_FAILURE() << "record left behind: " << e.path();
  }

  ExternalCommand command(const std::string& mode) {
    return {"external:fake-" + mode,
            {testing::source_dir() + "/providers/testdata/fake-provider", mode},
            {}};
  }
  Result<std::unique_ptr<Provider>> make(const std::string& mode) {
    return ExternalProvider::make(options_, command(mode), timeouts_);
  }
  // What making the provider, creating an environment and running `echo hi` in it says.
  std::string run(const std::string& mode, Duration call_timeout = std::chrono::seconds(0)) {
    auto p = make(mode);
    if (!p.ok()) return p.error().message();
    auto env = (*p)->create({});
    if (!env.ok()) return env.error().message();
    Call call;
    call.argv = {"echo", "hi"};
    call.timeout = call_timeout;
    auto r = (*env)->exec(call, {});
    auto destroyed = (*env)->destroy();
    if (!r.ok()) return r.error().message();
    if (!destroyed.ok()) return destroyed.error().message();
    return "ok: " + r->status.describe() + " " + r->stdout_data;
  }

  testing::TempDir dir_;
  ProviderOptions options_;
  ExternalTimeouts timeouts_;
};

TEST_F(ExternalProviderTest, HonestProviderRunsACall) {
  EXPECT_EQ(run("honest"), "ok: exit 0 hi\n");
}

TEST_F(ExternalProviderTest, MalformedJsonIsNamed) {
  auto e = run("malformed");
  EXPECT_THAT(e, HasSubstr("describe: not JSON"));
  // The provider's log is shown with the error.
  EXPECT_THAT(e, HasSubstr("fake-provider: mode malformed"));
}

TEST_F(ExternalProviderTest, WrongTypeIsNamed) {
  EXPECT_THAT(run("wrong_type"),
              HasSubstr("\"capabilities\" must be an array of strings, got \"net.none\""));
}

TEST_F(ExternalProviderTest, UnknownFieldIsNamed) {
  EXPECT_THAT(run("unknown_field"), HasSubstr("describe: unknown key \"colour\""));
}

TEST_F(ExternalProviderTest, ReplyTooLongIsRefused) {
  EXPECT_THAT(run("too_long"), HasSubstr("a reply line longer than 65536 bytes"));
}

TEST_F(ExternalProviderTest, NoReplyIsATimeoutAndTheProviderIsKilled) {
  timeouts_.describe = std::chrono::seconds(2);
  auto e = run("hang");
  EXPECT_THAT(e, HasSubstr("describe: no reply from the provider in time; it was killed"));
  // Killed and reaped, not left running (its parent would be this test).
  for (pid_t pid : testing::pids_with_argument("hang"))
    EXPECT_NE(testing::parent_of(pid), ::getpid())
        << "fake provider " << pid << " is still running";
}

TEST_F(ExternalProviderTest, CrashMidCallNamesTheCall) {
  auto e = run("crash_mid_call");
  EXPECT_THAT(e, HasSubstr("exec: the provider exited (exit 3) before replying"));
  EXPECT_THAT(e, HasSubstr("crashing during the call"));
}

TEST_F(ExternalProviderTest, HungCallIsKilledAfterItsTimeoutAndGrace) {
  auto e = run("hang_exec", std::chrono::seconds(1));
  EXPECT_THAT(e, HasSubstr("exec: no reply from the provider in time; it was killed"));
}

TEST_F(ExternalProviderTest, ForeignPidIsNeverPlaced) {
  // It names sandgate itself: moved into a call cgroup, sandgate would die with the call.
  EXPECT_THAT(run("foreign_pid"), HasSubstr("the started pid " + std::to_string(::getpid()) +
                                            " is not a process of the provider"));
}

TEST_F(ExternalProviderTest, ReplyBeforeStartedMeansUnplaced) {
  EXPECT_THAT(run("no_started"), HasSubstr("a final reply before the \"started\" event"));
}

TEST_F(ExternalProviderTest, WorkspaceOutsideTheRunDirectoryIsRefused) {
  EXPECT_THAT(run("workspace_outside"),
              HasSubstr("\"workspace_host\" must be inside the run directory"));
  EXPECT_EQ(::access("/etc/passwd", F_OK), 0);  // and nothing of it was removed
}

TEST_F(ExternalProviderTest, NonZeroExitAfterDescribeIsAnError) {
  EXPECT_THAT(run("exit_nonzero"), HasSubstr("ended with exit 1 when its stdin closed"));
}

TEST_F(ExternalProviderTest, MissingProgramIsNamed) {
  auto p = ExternalProvider::make(options_, {"external:/nonexistent/x", {"/nonexistent/x"}, {}},
                                  timeouts_);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.error().message(), HasSubstr("/nonexistent/x"));
}

TEST_F(ExternalProviderTest, RegistryMakesExternalProvidersByPathAndByName) {
  Registry registry;
  register_builtin_providers(registry);
  register_external_providers(registry, {command("lie_net")});
  // Configured: listed by name before anything runs, made by running its describe.
  ASSERT_NE(registry.find("external:fake-lie_net"), nullptr);
  auto configured = registry.create("external:fake-lie_net", options_);
  ASSERT_TRUE(configured.ok()) << configured.error().message();
  EXPECT_EQ((*configured)->capabilities(), CapabilitySet{Capability::kNetNone});
  // By path: no registration needed.
  auto by_path = registry.create(
      "external:" + testing::source_dir() + "/providers/testdata/fake-provider", options_);
  ASSERT_TRUE(by_path.ok()) << by_path.error().message();
  EXPECT_TRUE((*by_path)->capabilities().empty());
  // A name that is neither says how to make it one.
  auto unknown = registry.create("external:nope", options_);
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.error().message(), HasSubstr("no external provider is configured as 'nope'"));
}

TEST(ExternalPlacement, DescendsFrom) {
  EXPECT_TRUE(descends_from("/proc", ::getpid(), ::getpid()));
  EXPECT_TRUE(descends_from("/proc", ::getpid(), ::getppid()));
  EXPECT_FALSE(descends_from("/proc", ::getppid(), ::getpid()));
  EXPECT_FALSE(descends_from("/proc", 1, ::getpid()));
}

}  // namespace
}  // namespace sandgate::providers
