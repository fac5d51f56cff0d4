#include "core/files.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "core/defer.h"
#include "core/fd.h"
#include "core/test_temp_dir.h"
#include "tests/support/privileged.h"

namespace sandgate {
namespace {

class FilesTest : public ::testing::Test {
 protected:
  void make_file(const std::string& path, const std::string& data, mode_t mode = 0644) {
    ASSERT_TRUE(write_file(path, data, O_WRONLY | O_CREAT | O_EXCL, mode).ok()) << path;
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);  // exact, whatever the umask
  }
  void make_dir(const std::string& path, mode_t mode = 0755) {
    ASSERT_EQ(::mkdir(path.c_str(), mode), 0) << path;
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
  }
  static bool exists(const std::string& path) {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0;
  }
  static struct stat lstat_of(const std::string& path) {
    struct stat st = {};
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    return st;
  }

  testing::TempDir tmp_;
};

// --- make_dirs ---

TEST_F(FilesTest, MakeDirsCreatesNestedDirectories) {
  std::string path = tmp_ / "a/b/c/d";
  ASSERT_TRUE(make_dirs(path).ok());
  EXPECT_TRUE(S_ISDIR(lstat_of(path).st_mode));
  // Existing is fine.
  EXPECT_TRUE(make_dirs(path).ok());
  EXPECT_TRUE(make_dirs(tmp_ / "a/b").ok());
  // Trailing slash and doubled slashes are fine.
  EXPECT_TRUE(make_dirs(tmp_ / "x//y/").ok());
  EXPECT_TRUE(S_ISDIR(lstat_of(tmp_ / "x/y").st_mode));
}

TEST_F(FilesTest, MakeDirsAppliesTheExactModeToWhatItCreates) {
  mode_t old = ::umask(022);
  Defer restore([&] { ::umask(old); });
  make_dir(tmp_ / "existing", 0755);
  ASSERT_TRUE(make_dirs(tmp_ / "existing/p/q", 0770).ok());
  EXPECT_EQ(lstat_of(tmp_ / "existing/p").st_mode & 07777, 0770u);
  EXPECT_EQ(lstat_of(tmp_ / "existing/p/q").st_mode & 07777, 0770u);
  // A directory that already existed keeps its mode.
  EXPECT_EQ(lstat_of(tmp_ / "existing").st_mode & 07777, 0755u);
  // A sticky world-writable tmp, as a jail's /tmp needs.
  ASSERT_TRUE(make_dirs(tmp_ / "tmp", 01777).ok());
  EXPECT_EQ(lstat_of(tmp_ / "tmp").st_mode & 07777, 01777u);
}

TEST_F(FilesTest, MakeDirsThroughAFileIsEnotdir) {
  make_file(tmp_ / "file", "x");
  Status s = make_dirs(tmp_ / "file/sub");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().err, ENOTDIR);
  Status last = make_dirs(tmp_ / "file");
  ASSERT_FALSE(last.ok());
  EXPECT_EQ(last.error().err, ENOTDIR);
  EXPECT_EQ(last.error().path, tmp_ / "file");
}

TEST_F(FilesTest, MakeDirsRejectsEmptyPath) { EXPECT_FALSE(make_dirs("").ok()); }

// --- remove_tree ---

TEST_F(FilesTest, RemoveTreeRemovesNestedTreeButNotSymlinkTargetsOutsideIt) {
  // Outside the tree: a file and a directory that symlinks inside the tree point to.
  make_dir(tmp_ / "outside");
  make_file(tmp_ / "outside/keep", "precious");
  make_dir(tmp_ / "outside/dir");
  make_file(tmp_ / "outside/dir/keep2", "precious too");

  std::string tree = tmp_ / "tree";
  make_dir(tree);
  make_dir(tree + "/a");
  make_dir(tree + "/a/b");
  make_file(tree + "/a/b/f", "1");
  make_file(tree + "/a/g", "2", 0);  // unreadable, still removable
  ASSERT_EQ(::symlink((tmp_ / "outside/keep").c_str(), (tree + "/a/link-to-file").c_str()), 0);
  ASSERT_EQ(::symlink((tmp_ / "outside/dir").c_str(), (tree + "/a/b/link-to-dir").c_str()), 0);
  ASSERT_EQ(::symlink("../../outside", (tree + "/rel-link").c_str()), 0);
  ASSERT_EQ(::symlink("/nonexistent", (tree + "/dangling").c_str()), 0);

  Status s = remove_tree(tree);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_FALSE(exists(tree));
  auto keep = read_file(tmp_ / "outside/keep");
  ASSERT_TRUE(keep.ok());
  EXPECT_EQ(*keep, "precious");
  auto keep2 = read_file(tmp_ / "outside/dir/keep2");
  ASSERT_TRUE(keep2.ok());
  EXPECT_EQ(*keep2, "precious too");
}

TEST_F(FilesTest, RemoveTreeOfASymlinkRemovesOnlyTheLink) {
  make_dir(tmp_ / "target");
  make_file(tmp_ / "target/keep", "x");
  ASSERT_EQ(::symlink((tmp_ / "target").c_str(), (tmp_ / "link").c_str()), 0);
  ASSERT_TRUE(remove_tree(tmp_ / "link").ok());
  EXPECT_FALSE(exists(tmp_ / "link"));
  EXPECT_TRUE(exists(tmp_ / "target/keep"));
}

TEST_F(FilesTest, RemoveTreeOfASingleFile) {
  make_file(tmp_ / "f", "x");
  ASSERT_TRUE(remove_tree(tmp_ / "f").ok());
  EXPECT_FALSE(exists(tmp_ / "f"));
}

TEST_F(FilesTest, RemoveTreeOfMissingPathIsSuccess) {
  EXPECT_TRUE(remove_tree(tmp_ / "never-was").ok());
  EXPECT_TRUE(remove_tree(tmp_ / "never/was/either").ok());
}

TEST_F(FilesTest, RemoveTreeLeavesABindMountAndItsContentsAlone) {
  SANDGATE_REQUIRE_ROOT();
  // The bind source is on the same filesystem as the tree: st_dev alone cannot tell.
  make_dir(tmp_ / "host");
  make_file(tmp_ / "host/precious", "do not delete");
  std::string tree = tmp_ / "tree";
  make_dir(tree);
  make_dir(tree + "/mnt");
  make_file(tree + "/other", "x");
  ASSERT_EQ(::mount((tmp_ / "host").c_str(), (tree + "/mnt").c_str(), nullptr, MS_BIND, nullptr), 0)
      << strerror(errno);
  Defer unmount([&] { ::umount2((tree + "/mnt").c_str(), MNT_DETACH); });

  Status s = remove_tree(tree);
  EXPECT_FALSE(s.ok()) << "a mount point inside the tree must be reported";
  if (!s.ok()) {
    EXPECT_EQ(s.error().err, EBUSY) << s.error().message();
  }
  auto keep = read_file(tmp_ / "host/precious");
  ASSERT_TRUE(keep.ok()) << "remove_tree crossed into a bind mount";
  EXPECT_EQ(*keep, "do not delete");
  EXPECT_TRUE(exists(tree + "/mnt/precious"));
  EXPECT_FALSE(exists(tree + "/other")) << "everything else is still removed";
}

// --- copy_tree ---

TEST_F(FilesTest, CopyTreeKeepsModesCopiesSymlinksDropsSetuidAndChowns) {
  SANDGATE_REQUIRE_ROOT();
  std::string src = tmp_ / "src";
  make_dir(src, 0750);
  make_file(src + "/script", "#!/bin/sh\necho hi\n", 0755);
  make_file(src + "/secret", "s", 0600);
  make_file(src + "/suid", "elf", 04755);
  make_file(src + "/sgid", "elf", 02711);
  make_dir(src + "/sub", 0700);
  make_file(src + "/sub/data", std::string(200000, 'd'), 0640);
  make_dir(src + "/sub/deep", 0511);
  ASSERT_EQ(::symlink("../script", (src + "/sub/rel").c_str()), 0);
  ASSERT_EQ(::symlink("/etc/passwd", (src + "/abs").c_str()), 0);
  ASSERT_EQ(::mkfifo((src + "/fifo").c_str(), 0644), 0);

  std::string dst = tmp_ / "dst";
  Status s = copy_tree(src, dst, 12345, 12345);
  ASSERT_TRUE(s.ok()) << s.error().message();

  auto check = [&](const std::string& rel, mode_t type, mode_t mode) {
    struct stat st = lstat_of(dst + rel);
    EXPECT_EQ(st.st_mode & S_IFMT, type) << rel;
    if (type != S_IFLNK) {
      EXPECT_EQ(st.st_mode & 07777, mode) << rel;
    }
    EXPECT_EQ(st.st_uid, 12345u) << rel;
    EXPECT_EQ(st.st_gid, 12345u) << rel;
  };
  check("", S_IFDIR, 0750);
  check("/script", S_IFREG, 0755);
  check("/secret", S_IFREG, 0600);
  check("/suid", S_IFREG, 0755);  // setuid dropped
  check("/sgid", S_IFREG, 0711);  // setgid dropped
  check("/sub", S_IFDIR, 0700);
  check("/sub/data", S_IFREG, 0640);
  check("/sub/deep", S_IFDIR, 0511);
  check("/sub/rel", S_IFLNK, 0);
  check("/abs", S_IFLNK, 0);

  auto data = read_file(dst + "/sub/data");
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(*data, std::string(200000, 'd'));
  char target[256] = {};
  ASSERT_GT(::readlink((dst + "/sub/rel").c_str(), target, sizeof target - 1), 0);
  EXPECT_STREQ(target, "../script");
  ASSERT_GT(::readlink((dst + "/abs").c_str(), target, sizeof target - 1), 0);
  EXPECT_STREQ(target, "/etc/passwd");
  // The link was copied, not followed: /etc/passwd keeps its owner.
  EXPECT_EQ(lstat_of("/etc/passwd").st_uid, 0u);
  EXPECT_FALSE(exists(dst + "/fifo")) << "special files are not part of a workspace";
  // The source is untouched.
  EXPECT_EQ(lstat_of(src + "/suid").st_mode & 07777, 04755u);
  EXPECT_EQ(lstat_of(src + "/script").st_uid, 0u);
}

TEST_F(FilesTest, CopyTreeRefusesAnExistingDestination) {
  make_dir(tmp_ / "src");
  make_file(tmp_ / "src/f", "new");
  make_dir(tmp_ / "dst");
  make_file(tmp_ / "dst/f", "old");
  Status s = copy_tree(tmp_ / "src", tmp_ / "dst", ::getuid(), ::getgid());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().err, EEXIST);
  auto f = read_file(tmp_ / "dst/f");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, "old");
}

TEST_F(FilesTest, CopyTreeOfMissingSourceIsEnoent) {
  Status s = copy_tree(tmp_ / "nope", tmp_ / "dst", ::getuid(), ::getgid());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().err, ENOENT);
  EXPECT_FALSE(exists(tmp_ / "dst"));
}

// --- chown_tree ---

TEST_F(FilesTest, ChownTreeChownsEverythingAndDoesNotFollowSymlinks) {
  SANDGATE_REQUIRE_ROOT();
  make_dir(tmp_ / "outside");
  make_file(tmp_ / "outside/f", "x");
  std::string tree = tmp_ / "tree";
  make_dir(tree);
  make_dir(tree + "/a");
  make_file(tree + "/a/f", "x");
  ASSERT_EQ(::symlink((tmp_ / "outside").c_str(), (tree + "/a/out").c_str()), 0);

  Status s = chown_tree(tree, 23456, 34567);
  ASSERT_TRUE(s.ok()) << s.error().message();
  for (const char* rel : {"", "/a", "/a/f", "/a/out"}) {
    struct stat st = lstat_of(tree + rel);
    EXPECT_EQ(st.st_uid, 23456u) << rel;
    EXPECT_EQ(st.st_gid, 34567u) << rel;
  }
  EXPECT_EQ(lstat_of(tmp_ / "outside").st_uid, 0u);
  EXPECT_EQ(lstat_of(tmp_ / "outside/f").st_uid, 0u);
}

TEST_F(FilesTest, ChownTreeOfMissingPathIsAnError) {
  Status s = chown_tree(tmp_ / "nope", ::getuid(), ::getgid());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().err, ENOENT);
}

}  // namespace
}  // namespace sandgate
