// Canaries are planted where the probes look, carry the marker, and leave nothing behind.
#include "probes/canaries.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "core/fd.h"
#include "core/files.h"
#include "tests/support/eventually.h"
#include "tests/support/privileged.h"
#include "tests/support/provider_fixture.h"

namespace sandgate::probes {
namespace {

class CanariesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/var/tmp/sgcanary-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmp_ = tmpl;
    options_.paths.state_dir = tmp_ + "/state";
    options_.parent_dir = tmp_;
    const char* home = std::getenv("HOME");
    home_before_ = home ? home : "";
  }
  void TearDown() override { (void)remove_tree(tmp_); }

  std::string tmp_;
  std::string home_before_;
  CanaryOptions options_;
};

TEST_F(CanariesTest, PlantedWithTheMarkerAndRemovedAfterwards) {
  auto c = Canaries::plant(options_);
  ASSERT_TRUE(c.ok()) << c.error().message();
  const std::string marker = (*c)->marker();
  const std::string dir = (*c)->dir();
  ASSERT_FALSE(marker.empty());

  // Every canary carries the marker.
  auto host = read_file((*c)->host_canary());
  ASSERT_TRUE(host.ok());
  EXPECT_NE(host->find(marker), std::string::npos);
  for (const auto& rel : Canaries::credential_files()) {
    auto f = read_file((*c)->home() + "/" + rel);
    ASSERT_TRUE(f.ok()) << rel;
    EXPECT_NE(f->find(marker), std::string::npos) << rel;
    struct stat st {};
    ASSERT_EQ(::stat(((*c)->home() + "/" + rel).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0644u) << rel;  // readable: the boundary, not the mode, decides
  }
  EXPECT_EQ(::access(((*c)->recipe() + "/.git/hooks").c_str(), F_OK), 0);
  EXPECT_EQ(::access(((*c)->recipe() + "/.git/config").c_str(), F_OK), 0);
  struct stat wd {};
  ASSERT_EQ(::stat((*c)->host_write_dir().c_str(), &wd), 0);
  EXPECT_EQ(wd.st_mode & 0777, 0777u);

  // The environment carries the tokens, and HOME is the canary home.
  for (const auto& [name, value] : (*c)->tokens()) {
    const char* v = std::getenv(name.c_str());
    ASSERT_NE(v, nullptr) << name;
    EXPECT_EQ(std::string(v), value);
    EXPECT_NE(value.find(marker), std::string::npos);
  }
  EXPECT_EQ((*c)->token_names(),
            "AWS_SECRET_ACCESS_KEY,GITHUB_TOKEN,ACTIONS_ID_TOKEN_REQUEST_TOKEN,SANDGATE_TOKEN");
  EXPECT_EQ(std::string(std::getenv("HOME")), (*c)->home());

  // Recorded for gc.
  EXPECT_EQ(testing::count_entries(options_.paths.state_dir + "/runs"), 1u);

  // The sentinel logs who signalled it.
  pid_t sentinel = (*c)->sentinel_pid();
  ASSERT_GT(sentinel, 0);
  EXPECT_TRUE((*c)->sentinel_signals().empty());
  ASSERT_EQ(::kill(sentinel, SIGWINCH), 0);
  std::vector<std::string> got;
  sandgate::testing::eventually([&] {
    got = (*c)->sentinel_signals();
    return !got.empty();
  });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "SIGWINCH received");
  // Its argv carries the marker: the probes tell it from a recycled pid that way.
  auto cmdline = read_file("/proc/" + std::to_string(sentinel) + "/cmdline");
  ASSERT_TRUE(cmdline.ok());
  EXPECT_NE(cmdline->find(marker), std::string::npos);
  EXPECT_TRUE((*c)->sentinel_signals(1).empty());

  ASSERT_TRUE((*c)->remove().ok());
  EXPECT_NE(::access(dir.c_str(), F_OK), 0) << "canary directory left";
  EXPECT_FALSE(testing::process_exists(sentinel)) << "sentinel left";
  EXPECT_EQ(testing::count_entries(options_.paths.state_dir + "/runs"), 0u) << "record left";
  for (const auto& [name, value] : (*c)->tokens()) EXPECT_EQ(std::getenv(name.c_str()), nullptr) << name;
  const char* home = std::getenv("HOME");
  EXPECT_EQ(home ? std::string(home) : "", home_before_);
  EXPECT_TRUE((*c)->remove().ok()) << "idempotent";
}

TEST_F(CanariesTest, WithoutEnvironmentLeavesItAlone) {
  options_.set_environment = false;
  options_.marker = "sgp-fixed-marker";
  auto c = Canaries::plant(options_);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ((*c)->marker(), "sgp-fixed-marker");
  EXPECT_EQ(std::getenv("SANDGATE_TOKEN"), nullptr);
  const char* home = std::getenv("HOME");
  EXPECT_EQ(home ? std::string(home) : "", home_before_);
}

TEST_F(CanariesTest, DestructorRemovesEverything) {
  std::string dir;
  pid_t sentinel = 0;
  {
    auto c = Canaries::plant(options_);
    ASSERT_TRUE(c.ok()) << c.error().message();
    dir = (*c)->dir();
    sentinel = (*c)->sentinel_pid();
  }
  EXPECT_NE(::access(dir.c_str(), F_OK), 0);
  EXPECT_FALSE(testing::process_exists(sentinel));
  EXPECT_EQ(std::getenv("SANDGATE_TOKEN"), nullptr);
}

TEST_F(CanariesTest, SetuidHelperIsRootOwnedAndSetuid) {
  SANDGATE_REQUIRE_ROOT();
  options_.probe_binary = "/bin/true";
  auto c = Canaries::plant(options_);
  ASSERT_TRUE(c.ok()) << c.error().message();
  struct stat st {};
  ASSERT_EQ(::stat((*c)->setuid_helper().c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_TRUE(st.st_mode & S_ISUID);
}

// Base canaries go in directories sandgate does not own: recorded (with the marker) before they
// exist, world-readable, and removed only while they still carry the marker.
TEST_F(CanariesTest, BaseCanariesAreRecordedFirstAndRemovedOnlyIfStillOurs) {
  for (const char* d : {"/site-a", "/site-b"}) ASSERT_TRUE(make_dirs(tmp_ + d).ok());
  options_.set_environment = false;
  options_.base_canary_dirs = {tmp_ + "/site-a", tmp_ + "/site-b"};
  auto c = Canaries::plant(options_);
  ASSERT_TRUE(c.ok()) << c.error().message();
  const std::string marker = (*c)->marker();
  ASSERT_EQ((*c)->base_canaries().size(), 2u);
  const std::string a = (*c)->base_canaries()[0], b = (*c)->base_canaries()[1];
  EXPECT_EQ(a, tmp_ + "/site-a/sandgate-base-canary-" + marker);
  for (const auto& f : {a, b}) {
    auto text = read_file(f);
    ASSERT_TRUE(text.ok()) << f;
    EXPECT_NE(text->find(marker), std::string::npos);
    struct stat st {};
    ASSERT_EQ(::stat(f.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0644u) << f;
  }
  auto record = read_json_file(options_.paths.state_dir + "/runs/canaries-" + marker + ".json");
  ASSERT_TRUE(record.ok()) << record.error().message();
  int marked = 0;
  for (const auto& r : (*record)["resources"])
    if (r["kind"] == "marked_file") {
      ++marked;
      EXPECT_EQ(r["owner"], marker);
    }
  EXPECT_EQ(marked, 2);

  // Someone else's file where b was: left alone, and the removal says so.
  ASSERT_EQ(::unlink(b.c_str()), 0);
  ASSERT_TRUE(write_file(b, "not sandgate's\n", O_WRONLY | O_CREAT).ok());
  auto removed = (*c)->remove();
  EXPECT_FALSE(removed.ok());
  EXPECT_NE(::access(a.c_str(), F_OK), 0) << "ours is gone";
  EXPECT_EQ(::access(b.c_str(), F_OK), 0) << "the impostor stays";
}

TEST_F(CanariesTest, AFailedPlantLeavesNothing) {
  options_.probe_binary = tmp_ + "/no-such-binary";
  auto c = Canaries::plant(options_);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("no-such-binary"), std::string::npos) << c.error().message();
  EXPECT_EQ(testing::count_entries(tmp_), 1u) << "only the state directory";
  EXPECT_EQ(testing::count_entries(options_.paths.state_dir + "/runs"), 0u);
  EXPECT_EQ(std::getenv("SANDGATE_TOKEN"), nullptr);
}

}  // namespace
}  // namespace sandgate::probes
