#include "core/json.h"

#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

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

// 100,000 nested arrays parse (nlohmann does not recurse), but the first copy, comparison or
// dump of the value would overflow the stack: refused at the bracket that goes too deep.
TEST(ParseJson, NestingDeeperThanTheBoundIsAnErrorNotACrash) {
  constexpr size_t kDeep = 100000;
  std::string deep = "{\"id\": " + std::string(kDeep, '[') + std::string(kDeep, ']') + "}";
  auto j = parse_json(deep, "request");
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(j.error().message(), HasSubstr("request"));
  // The 257th '[' is the first too deep: after `{"id": ` (7 bytes, one level) and 255 more.
  EXPECT_THAT(j.error().message(), HasSubstr("line 1 column 263: nested deeper than 256 levels"));
  EXPECT_LT(j.error().message().size(), 200u);

  std::string at_bound = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  auto ok = parse_json(at_bound, "s");
  ASSERT_TRUE(ok.ok()) << ok.error().message();
  Json copy = *ok;  // within the bound a copy is safe
  EXPECT_EQ(copy, *ok);
}

TEST(ParseJson, BracketsInsideStringsAreNotNesting) {
  std::string text = "{\"a\": \"" + std::string(1000, '[') + "\\\"{\", \"b\": [[1]]}";
  auto j = parse_json(text, "s");
  ASSERT_TRUE(j.ok()) << j.error().message();
  EXPECT_EQ(json_nesting_beyond(text, 3), std::nullopt);
  EXPECT_EQ(json_nesting_beyond(text, 2), text.find("[[1]]") + 1);
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

// A run record's rewrite (kCrashSafe) exchanges the new file with the old one and removes the
// old: only the new content is left, under the record's name, also on the first write (nothing
// to exchange with). A reader that opened the old record still reads it whole.
TEST_F(JsonFileTest, CrashSafeRewriteLeavesOnlyTheNewContent) {
  std::string path = tmp_ / "run.json";
  ASSERT_TRUE(write_json_file_atomic(path, Json{{"v", 1}}, Durability::kCrashSafe).ok());
  EXPECT_THAT(list_dir(tmp_.path()), ElementsAre("run.json"));
  UniqueFd old(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(old.valid());
  for (int v = 2; v <= 3; ++v) {
    Status s = write_json_file_atomic(path, Json{{"v", v}}, Durability::kCrashSafe);
    ASSERT_TRUE(s.ok()) << s.error().message();
    EXPECT_THAT(list_dir(tmp_.path()), ElementsAre("run.json")) << "the old content is removed";
    auto back = read_json_file(path);
    ASSERT_TRUE(back.ok()) << back.error().message();
    EXPECT_EQ((*back)["v"], v);
  }
  char buf[64] = {};
  ASSERT_GT(::pread(old.get(), buf, sizeof buf - 1, 0), 0);
  EXPECT_EQ(parse_json(buf, "old")->value("v", 0), 1);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
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

// --- hostile text: invalid UTF-8 never throws, is replaced and counted, a cut never splits ---

TEST(Utf8, DumpJsonReplacesWhatPlainDumpThrowsOn) {
  Json j = {{"stdout", std::string("ok \xFF")}};
  EXPECT_THROW((void)j.dump(), Json::type_error) << "the defect this guards against";
  EXPECT_EQ(dump_json(j), "{\"stdout\":\"ok \xEF\xBF\xBD\"}");
}

TEST(Utf8, MakeValidReplacesEachMaximalSubpartOnce) {
  struct Case {
    std::string in, out;
    size_t replaced;
  } cases[] = {
      {"plain ascii", "plain ascii", 0},
      {"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", 0},
      {"\xFF", "\xEF\xBF\xBD", 1},
      {"a\xC3", "a\xEF\xBF\xBD", 1},                      // cut-off two-byte sequence
      {"\xE2\x82", "\xEF\xBF\xBD", 1},                   // cut-off three-byte: one subpart
      {"\xE2\x82x", "\xEF\xBF\xBDx", 1},
      {"\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD", 2},          // overlong '/': two faults
      {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", 3},  // a surrogate
      {"\xF4\x90\x80\x80", std::string(4 * 3, ' '), 4},   // above U+10FFFF (checked below)
      {"\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD", 2},
  };
  for (auto c : cases) {
    std::string s = c.in;
    size_t n = make_valid_utf8(s);
    EXPECT_EQ(n, c.replaced) << ::testing::PrintToString(c.in);
    if (c.replaced == 4) {
      EXPECT_EQ(s, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    } else {
      EXPECT_EQ(s, c.out) << ::testing::PrintToString(c.in);
    }
    // What comes out always serialises, and nlohmann's own replacement agrees with ours.
    EXPECT_NO_THROW((void)Json(s).dump());
    EXPECT_EQ(Json(s).dump(), dump_json(Json(c.in)));
  }
}

TEST(Utf8, SetTextFieldSaysHowManyWereReplaced) {
  Json j = Json::object();
  set_text_field(j, "stderr", "x\xFEy\xFF");
  EXPECT_EQ(j["stderr"], "x\xEF\xBF\xBDy\xEF\xBF\xBD");
  EXPECT_EQ(j["stderr_invalid_utf8"], 2);
  set_text_field(j, "stdout", "fine");
  EXPECT_EQ(j["stdout_invalid_utf8"], 0);
}

TEST(Utf8, SafeCutNeverSplitsACharacter) {
  std::string text = "ab\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z";  // a b é € 😀 z
  // Every limit inside a sequence moves back to its start; a limit on a boundary stays.
  size_t expect[] = {0, 1, 2, 2, 4, 4, 4, 7, 7, 7, 7, 11, 12};
  for (size_t limit = 0; limit <= text.size(); ++limit) {
    EXPECT_EQ(utf8_safe_cut(text, limit), expect[limit]) << "limit " << limit;
    std::string cut = text.substr(0, utf8_safe_cut(text, limit));
    EXPECT_EQ(make_valid_utf8(cut), 0u) << "limit " << limit;
  }
  // Not UTF-8 at all: the cut stays where it was asked (the bytes are replaced later).
  EXPECT_EQ(utf8_safe_cut("\xFF\xFF\xFF\xFF", 2), 2u);
  EXPECT_EQ(utf8_safe_cut("\x80\x80\x80\x80\x80", 4), 4u);
}

}  // namespace
}  // namespace sandgate
