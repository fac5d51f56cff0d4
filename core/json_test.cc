#include "core/json.h"

#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "core/defer.h"
#include "core/fd.h"
#include "core/test_temp_dir.h"
#include "tests/support/privileged.h"

namespace sandgate {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> names;
  DIR* d = ::opendir(path.c_str());
  if (!d) return names;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  return names;
}

TEST(ParseJson, ParsesAValidDocument) {
  auto j = parse_json(R"({"a": [1, 2], "b": {"c": "d"}})", "inline");
  ASSERT_TRUE(j.ok()) << j.error().message();
  EXPECT_EQ((*j)["a"][1], 2);
  EXPECT_EQ((*j)["b"]["c"], "d");
}

TEST(ParseJson, ErrorNamesSourceLineAndColumn) {
  // The fault is the ',' on line 3, column 10 (1-based).
  const std::string text =
      "{\n"
      "  \"ok\": 1,\n"
      "  \"bad\": ,\n"
      "  \"never\": 2\n"
      "}\n";
  auto j = parse_json(text, "/etc/sandgate/policy.json");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.error().err, 0);
  EXPECT_EQ(j.error().path, "/etc/sandgate/policy.json");
  std::string m = j.error().message();
  EXPECT_THAT(m, HasSubstr("/etc/sandgate/policy.json"));
  EXPECT_THAT(m, HasSubstr("line 3 column 10"));
  EXPECT_THAT(m, HasSubstr("unexpected ','"));
}

TEST(ParseJson, ErrorOnTheFirstLine) {
  auto j = parse_json("[1, 2 x]", "s");
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(j.error().message(), HasSubstr("line 1 column 7"));
}

TEST(ParseJson, TruncatedDocumentPointsPastTheEnd) {
  auto j = parse_json("{\n  \"a\": [1,\n", "s");
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(j.error().message(), HasSubstr("line 3"));
}

TEST(ParseJson, EmptyInputIsAnError) {
  auto j = parse_json("", "empty");
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(j.error().message(), HasSubstr("empty"));
}

class JsonFileTest : public ::testing::Test {
 protected:
  testing::TempDir tmp_;
};

TEST_F(JsonFileTest, WriteAtomicThenReadBack) {
  std::string path = tmp_ / "state.json";
  Json value = {{"schema_version", 1}, {"items", {1, 2, 3}}};
  Status s = write_json_file_atomic(path, value);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_THAT(list_dir(tmp_.path()), ElementsAre("state.json")) << "no temporary file is left";
  auto back = read_json_file(path);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, value);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(JsonFileTest, WriteAtomicReplacesTheOldContent) {
  std::string path = tmp_ / "state.json";
  ASSERT_TRUE(write_json_file_atomic(path, Json{{"v", std::string(5000, 'x')}}).ok());
  ASSERT_TRUE(write_json_file_atomic(path, Json{{"v", 2}}).ok());
  EXPECT_THAT(list_dir(tmp_.path()), ElementsAre("state.json"));
  auto back = read_json_file(path);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ((*back)["v"], 2);
}

TEST_F(JsonFileTest, FailedRenameLeavesNoTemporaryFile) {
  // The target is a non-empty directory: rename(2) fails after the temp file was written.
  std::string path = tmp_ / "dir";
  ASSERT_EQ(::mkdir(path.c_str(), 0755), 0);
  ASSERT_TRUE(write_file(path + "/x", "x", O_WRONLY | O_CREAT).ok());
  Status s = write_json_file_atomic(path, Json{{"v", 1}});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(list_dir(tmp_.path()), ElementsAre("dir"));
}

TEST_F(JsonFileTest, FailedWriteLeavesNoTemporaryFile) {
  SANDGATE_REQUIRE_ROOT();
  // A 4 KiB tmpfs: the write of a larger document fails with ENOSPC half way through.
  std::string mnt = tmp_ / "small";
  ASSERT_EQ(::mkdir(mnt.c_str(), 0755), 0);
  ASSERT_EQ(::mount("sandgate-test", mnt.c_str(), "tmpfs", 0, "size=4k"), 0) << strerror(errno);
  Defer unmount([&] { ::umount2(mnt.c_str(), MNT_DETACH); });
  Status s = write_json_file_atomic(mnt + "/state.json", Json{{"v", std::string(256 << 10, 'x')}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().err, ENOSPC) << s.error().message();
  EXPECT_THAT(list_dir(mnt), ElementsAre());
}

TEST_F(JsonFileTest, MissingDirectoryIsAnErrorNamingThePath) {
  Status s = write_json_file_atomic(tmp_ / "no/such/dir/f.json", Json{{"v", 1}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().err, ENOENT);
}

TEST_F(JsonFileTest, ReadJsonFileErrorsNameTheFile) {
  auto missing = read_json_file(tmp_ / "missing.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().err, ENOENT);

  std::string path = tmp_ / "bad.json";
  ASSERT_TRUE(write_file(path, "{\"a\":\n\n  nope}", O_WRONLY | O_CREAT).ok());
  auto bad = read_json_file(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().path, path);
  EXPECT_THAT(bad.error().message(), HasSubstr("line 3 column 4"));
}

}  // namespace
}  // namespace sandgate
