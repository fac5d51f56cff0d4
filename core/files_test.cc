#include "core/files.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

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

  // Where a 100,000-level tree can be made and removed in a second or two: tmpfs. This
  // machine's ext4 is mounted with `discard`, so every rmdir waits for the device (~2 ms each,
  // 200 s for 100,000 levels, whatever does the removing).
  static std::string tmpfs_base() {
    struct statfs fs;
    if (::statfs("/dev/shm", &fs) == 0 && fs.f_type == TMPFS_MAGIC) return "/dev/shm";
    const char* base = std::getenv("TMPDIR");
    return base && *base ? base : "/tmp";
  }
  // Makes `levels` nested directories named "d" below the existing directory `root`, holding
  // one fd at a time (a path would pass PATH_MAX long before the bottom); returns the deepest.
  static UniqueFd make_chain(const std::string& root, int levels) {
    UniqueFd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    EXPECT_TRUE(fd.valid()) << root;
    for (int i = 0; i < levels && fd; ++i) {
      if (::mkdirat(fd.get(), "d", 0755) != 0) {
        ADD_FAILURE() << "mkdirat at level " << i << ": " << strerror(errno);
        return {};
      }
      fd = UniqueFd(::openat(fd.get(), "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    }
    return fd;
  }
  // Writes `data` to `name` in the directory open at dirfd.
  static void put_at(int dirfd, const char* name, const std::string& data) {
    UniqueFd f(::openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    ASSERT_TRUE(f.valid()) << name << ": " << strerror(errno);
    ASSERT_TRUE(write_all(f.get(), data).ok());
  }
  // How many levels of "d" there are below root (0 when root is gone).
  static int chain_depth(const std::string& root) {
    UniqueFd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return 0;
    int depth = 0;
    while (
        UniqueFd next{::openat(fd.get(), "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)}) {
      fd = std::move(next);
      ++depth;
    }
    return depth;
  }
  // Clean-up independent of the code under test, for when it failed: removes a chain of "d"
  // (and the files in it) below root, from the bottom up through "..". TempDir's remove_all
  // cannot: it keeps a descriptor per level and a path longer than PATH_MAX.
  static void remove_chain(const std::string& root) {
    UniqueFd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return;
    int depth = 0;
    while (
        UniqueFd next{::openat(fd.get(), "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)}) {
      fd = std::move(next);
      ++depth;
    }
    for (;; --depth) {
      if (DIR* d = ::fdopendir(::openat(fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC))) {
        while (struct dirent* e = ::readdir(d)) ::unlinkat(fd.get(), e->d_name, 0);
        ::closedir(d);
      }
      if (depth == 0) break;
      UniqueFd up(::openat(fd.get(), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (!up) return;
      ::unlinkat(up.get(), "d", AT_REMOVEDIR);
      fd = std::move(up);
    }
  }
  // Every regular file below `dir` whose content contains `needle` (for small trees).
  static std::vector<std::string> files_containing(const std::string& dir,
                                                   const std::string& needle) {
    std::vector<std::string> out, todo = {dir};
    while (!todo.empty()) {
      std::string d = todo.back();
      todo.pop_back();
      DIR* list = ::opendir(d.c_str());
      while (struct dirent* e = list ? ::readdir(list) : nullptr) {
        std::string n = e->d_name, p = d + "/" + n;
        if (n == "." || n == "..") continue;
        struct stat st;
        if (::lstat(p.c_str(), &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) todo.push_back(p);
        if (!S_ISREG(st.st_mode)) continue;
        auto text = read_file(p);
        if (text.ok() && text->find(needle) != std::string::npos) out.push_back(p);
      }
      if (list) ::closedir(list);
    }
    return out;
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

TEST_F(FilesTest, RemoveTreeOfA100000LevelTree) {
  // A sandbox made this in /workspace; the recursive removal died of SIGSEGV in teardown and in
  // every `sandgate gc` after (issue 9).
  testing::TempDir fast(tmpfs_base());
  std::string tree = fast / "deep";
  make_dir(tree);
  Defer cleanup([&] { remove_chain(tree); });
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(make_chain(tree, 100'000).valid());
  auto built = std::chrono::steady_clock::now();
  Status s = remove_tree(tree);
  auto removed = std::chrono::steady_clock::now();
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_FALSE(exists(tree));
  using ms = std::chrono::milliseconds;
  RecordProperty("build_ms", std::to_string(std::chrono::duration_cast<ms>(built - start).count()));
  RecordProperty("remove_ms",
                 std::to_string(std::chrono::duration_cast<ms>(removed - built).count()));
}

TEST_F(FilesTest, RemoveTreeOfA100000LevelTreeWithFilesAtTheBottomAndOnTheWay) {
  testing::TempDir fast(tmpfs_base());
  std::string tree = fast / "deep";
  make_dir(tree);
  Defer cleanup([&] { remove_chain(tree); });
  UniqueFd mid = make_chain(tree, 50'000);
  ASSERT_TRUE(mid.valid());
  put_at(mid.get(), "halfway", "x");
  ASSERT_EQ(::symlinkat("/etc", mid.get(), "link-out"), 0);
  UniqueFd bottom = make_chain("/proc/self/fd/" + std::to_string(mid.get()), 50'000);
  ASSERT_TRUE(bottom.valid());
  put_at(bottom.get(), "bottom", "y");
  ASSERT_EQ(::mkdirat(bottom.get(), "empty", 0755), 0);
  mid.reset();
  bottom.reset();
  ASSERT_EQ(chain_depth(tree), 100'000);

  Status s = remove_tree(tree);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_FALSE(exists(tree));
  EXPECT_TRUE(exists("/etc/passwd"));
}

TEST_F(FilesTest, RemoveTreeLeavesAMountPointDeepInsideAlone) {
  SANDGATE_REQUIRE_ROOT();
  make_dir(tmp_ / "host");
  make_file(tmp_ / "host/precious", "do not delete");
  std::string tree = tmp_ / "tree";
  make_dir(tree);
  make_file(tree + "/top", "x");
  Defer cleanup([&] { remove_chain(tree); });
  // 3,000 levels: deeper than PATH_MAX, so the mount goes through the magic link of an fd.
  UniqueFd deep = make_chain(tree, 3'000);
  ASSERT_TRUE(deep.valid());
  put_at(deep.get(), "beside", "x");
  ASSERT_EQ(::mkdirat(deep.get(), "mnt", 0755), 0);
  std::string at = "/proc/self/fd/" + std::to_string(deep.get()) + "/mnt";
  ASSERT_EQ(::mount((tmp_ / "host").c_str(), at.c_str(), nullptr, MS_BIND, nullptr), 0)
      << strerror(errno);
  UniqueFd mounted(::openat(deep.get(), "mnt", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(mounted.valid());
  std::string mounted_at = "/proc/self/fd/" + std::to_string(mounted.get());
  Defer unmount([&] {
    if (mounted) ::umount2(mounted_at.c_str(), MNT_DETACH);
  });

  Status s = remove_tree(tree);
  ASSERT_FALSE(s.ok()) << "a mount point 3,000 levels down must be reported";
  EXPECT_EQ(s.error().err, EBUSY) << s.error().message();
  // The error names where, without a 6 KB path: the middle levels are counted, not spelled.
  EXPECT_NE(s.error().path.find("levels>"), std::string::npos) << s.error().path;
  EXPECT_LT(s.error().message().size(), 1024u) << s.error().message();
  auto keep = read_file(tmp_ / "host/precious");
  ASSERT_TRUE(keep.ok()) << "remove_tree crossed into a bind mount";
  EXPECT_EQ(*keep, "do not delete");
  EXPECT_TRUE(exists(mounted_at + "/precious"));
  EXPECT_FALSE(exists(tree + "/top")) << "everything else is still removed";
  struct stat st;
  EXPECT_NE(::fstatat(deep.get(), "beside", &st, AT_SYMLINK_NOFOLLOW), 0)
      << "a file beside the mount is removed";
  EXPECT_EQ(chain_depth(tree), 3'000) << "the directories above the mount point stay";

  ASSERT_EQ(::umount2(mounted_at.c_str(), MNT_DETACH), 0) << strerror(errno);
  mounted.reset();
  deep.reset();
  Status again = remove_tree(tree);
  EXPECT_TRUE(again.ok()) << again.error().message();
  EXPECT_FALSE(exists(tree));
}

TEST_F(FilesTest, RemoveTreeStopsWhenTheTreeIsMovedUnderIt) {
  // fts(3)'s check: climbing back through ".." must land in the directory the walk came down
  // through. Here a sandbox-like thread moves the branch being removed into another directory
  // while the walk is inside it; climbing on would rmdir in, and then empty, the wrong
  // directory ("elsewhere", and its "b" that has the same name as one in the tree).
  testing::TempDir fast(tmpfs_base());
  std::string tree = fast / "tree", elsewhere = fast / "elsewhere";
  make_dir(tree);
  make_dir(tree + "/b");
  make_dir(elsewhere);
  make_dir(elsewhere + "/b");
  make_file(elsewhere + "/b/precious", "do not delete");
  make_dir(tree + "/a");
  Defer cleanup([&] {
    remove_chain(tree + "/a");
    remove_chain(elsewhere + "/a");
  });
  ASSERT_TRUE(make_chain(tree + "/a", 50'000).valid());
  // The walk unlinks the files of a directory as soon as it enters it: this one going is the
  // sign that it is inside "a", with 50,000 levels to go down and come back up. (Not a marker
  // at the bottom watched through an fd: an fd held there keeps every dentry of the chain
  // cached, and each rmdir on the way up then walks all of them, O(depth^2) in the kernel.)
  make_file(tree + "/a/entered", "x");

  std::atomic<bool> moved{false};
  std::thread mover([&] {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (::access((tree + "/a/entered").c_str(), F_OK) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
    }
    moved = ::rename((tree + "/a").c_str(), (elsewhere + "/a").c_str()) == 0;
  });
  Status s = remove_tree(tree);
  mover.join();
  ASSERT_TRUE(moved) << "the move came too late to test anything";
  ASSERT_FALSE(s.ok()) << "the walk climbed out of a moved directory into another one";
  EXPECT_EQ(s.error().err, ESTALE) << s.error().message();
  EXPECT_TRUE(exists(elsewhere + "/a")) << "removed in the directory it was moved to";
  auto keep = read_file(elsewhere + "/b/precious");
  EXPECT_TRUE(keep.ok()) << "emptied a directory outside the tree";
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

TEST_F(FilesTest, CopyTreeOfA1000LevelRecipe) {
  // Each level cost the recursive copy 64 KiB of stack: a 200-level recipe crashed sandgate.
  std::string src = tmp_ / "src", dst = tmp_ / "dst";
  make_dir(src);
  Defer cleanup([&] {
    remove_chain(src);
    remove_chain(dst);
  });
  UniqueFd bottom = make_chain(src, 1'000);
  ASSERT_TRUE(bottom.valid());
  put_at(bottom.get(), "bottom", "at the bottom");
  bottom.reset();

  Status s = copy_tree(src, dst, ::getuid(), ::getgid());
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(chain_depth(dst), 1'000);
  UniqueFd fd(::open(dst.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  for (int i = 0; i < 1'000 && fd; ++i)
    fd = UniqueFd(::openat(fd.get(), "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  UniqueFd file(::openat(fd.get(), "bottom", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(file.valid());
  auto text = read_all(file.get());
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "at the bottom");
  EXPECT_TRUE(remove_tree(src).ok());
  EXPECT_TRUE(remove_tree(dst).ok());
}

TEST_F(FilesTest, CopyTreeKeepsA512MiBHoleAHole) {
  std::string src = tmp_ / "src", dst = tmp_ / "dst";
  make_dir(src);
  {
    UniqueFd f(::open((src + "/sparse").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    ASSERT_TRUE(f.valid());
    ASSERT_EQ(::ftruncate(f.get(), off_t{512} << 20), 0);
  }
  ASSERT_LE(lstat_of(src + "/sparse").st_blocks, 8) << "this filesystem does not make holes";

  Status s = copy_tree(src, dst, ::getuid(), ::getgid());
  ASSERT_TRUE(s.ok()) << s.error().message();
  struct stat st = lstat_of(dst + "/sparse");
  EXPECT_EQ(st.st_size, off_t{512} << 20);
  // st_blocks counts 512-byte units actually allocated: (almost) none, not 1,048,576.
  EXPECT_LE(st.st_blocks, 8) << "the hole was written out as zeros";
}

TEST_F(FilesTest, CopyTreeCopiesDataHoleDataByteExact) {
  std::string src = tmp_ / "src", dst = tmp_ / "dst";
  make_dir(src);
  const off_t kSecond = off_t{64} << 20, kSize = off_t{96} << 20;
  std::string first(1 << 20, '\0'), second(1 << 20, '\0');
  for (size_t i = 0; i < first.size(); ++i) {
    first[i] = static_cast<char>('a' + i % 23);
    second[i] = static_cast<char>('A' + i % 19);
  }
  {
    UniqueFd f(::open((src + "/mixed").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    ASSERT_TRUE(f.valid());
    ASSERT_EQ(::pwrite(f.get(), first.data(), first.size(), 0), static_cast<ssize_t>(first.size()));
    ASSERT_EQ(::pwrite(f.get(), second.data(), second.size(), kSecond),
              static_cast<ssize_t>(second.size()));
    ASSERT_EQ(::ftruncate(f.get(), kSize), 0);  // and a hole at the end
  }

  Status s = copy_tree(src, dst, ::getuid(), ::getgid());
  ASSERT_TRUE(s.ok()) << s.error().message();
  struct stat st = lstat_of(dst + "/mixed");
  EXPECT_EQ(st.st_size, kSize);
  // Two MiB of data, give or take the filesystem's allocation unit; not 96 MiB.
  EXPECT_LT(st.st_blocks * 512, 8 << 20) << "the holes were written out";
  UniqueFd f(::open((dst + "/mixed").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(f.valid());
  auto read_at = [&](off_t off, size_t n) {
    std::string buf(n, '?');
    EXPECT_EQ(::pread(f.get(), buf.data(), n, off), static_cast<ssize_t>(n));
    return buf;
  };
  EXPECT_TRUE(read_at(0, first.size()) == first) << "first data region differs";
  EXPECT_TRUE(read_at(kSecond, second.size()) == second) << "second data region differs";
  EXPECT_EQ(read_at(first.size(), 4096), std::string(4096, '\0'));
  EXPECT_EQ(read_at(kSecond - 4096, 4096), std::string(4096, '\0'));
  EXPECT_EQ(read_at(kSize - 4096, 4096), std::string(4096, '\0'));
}

TEST_F(FilesTest, CopyTreeCopiesASymlinkToAHostSecretAsTheLink) {
  make_file(tmp_ / "secret", "HOST-SECRET-7f3a");
  std::string src = tmp_ / "src", dst = tmp_ / "dst";
  make_dir(src);
  make_dir(src + "/sub");
  ASSERT_EQ(::symlink((tmp_ / "secret").c_str(), (src + "/sub/leak").c_str()), 0);
  ASSERT_EQ(::symlink(tmp_.path().c_str(), (src + "/up").c_str()), 0);

  Status s = copy_tree(src, dst, ::getuid(), ::getgid());
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_TRUE(S_ISLNK(lstat_of(dst + "/sub/leak").st_mode));
  EXPECT_TRUE(S_ISLNK(lstat_of(dst + "/up").st_mode));
  char target[4096] = {};
  ASSERT_GT(::readlink((dst + "/sub/leak").c_str(), target, sizeof target - 1), 0);
  EXPECT_EQ(std::string(target), tmp_ / "secret");
  EXPECT_TRUE(files_containing(dst, "HOST-SECRET").empty());
}

TEST_F(FilesTest, CopyTreeFollowsTheNamedSourceOnlyAndNeedsADirectory) {
  // The caller named src: a symlink there is followed, and the copy is a directory (a workspace
  // that is a symlink to the recipe would hand the sandbox the host's recipe to write).
  make_dir(tmp_ / "real");
  make_file(tmp_ / "real/f", "x");
  ASSERT_EQ(::symlink((tmp_ / "real").c_str(), (tmp_ / "named").c_str()), 0);
  Status s = copy_tree(tmp_ / "named", tmp_ / "dst", ::getuid(), ::getgid());
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_TRUE(S_ISDIR(lstat_of(tmp_ / "dst").st_mode));
  EXPECT_TRUE(S_ISREG(lstat_of(tmp_ / "dst/f").st_mode));

  make_file(tmp_ / "file", "x");
  Status file = copy_tree(tmp_ / "file", tmp_ / "dst2", ::getuid(), ::getgid());
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.error().err, ENOTDIR);
  EXPECT_FALSE(exists(tmp_ / "dst2"));
}

TEST_F(FilesTest, CopyTreeUnderTheLimitsWorks) {
  std::string src = tmp_ / "src";
  make_dir(src);
  make_dir(src + "/sub");
  for (int i = 0; i < 4; ++i) make_file(src + "/sub/f" + std::to_string(i), std::string(1000, 'x'));
  // 6 entries (the root, sub, four files) and 4,000 bytes: exactly at both limits.
  Status s = copy_tree(src, tmp_ / "dst", ::getuid(), ::getgid(), CopyLimits{4'000, 6});
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(lstat_of(tmp_ / "dst/sub/f3").st_size, 1000);
}

TEST_F(FilesTest, CopyTreeRefusesTooManyEntriesNamingTheLimit) {
  std::string src = tmp_ / "src";
  make_dir(src);
  make_dir(src + "/sub");
  for (int i = 0; i < 4; ++i) make_file(src + "/sub/f" + std::to_string(i), "x");
  Status s = copy_tree(src, tmp_ / "dst", ::getuid(), ::getgid(), CopyLimits{1 << 20, 5});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("more than 5 entries (limit max_entries)"), std::string::npos)
      << s.error().message();
  EXPECT_FALSE(exists(tmp_ / "dst")) << "a half-made copy was left";
}

TEST_F(FilesTest, CopyTreeRefusesTooManyBytesNamingTheLimit) {
  std::string src = tmp_ / "src";
  make_dir(src);
  make_dir(src + "/sub");
  for (int i = 0; i < 4; ++i) make_file(src + "/sub/f" + std::to_string(i), std::string(1000, 'x'));
  Status s = copy_tree(src, tmp_ / "dst", ::getuid(), ::getgid(), CopyLimits{3'999, 100});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("(limit max_bytes)"), std::string::npos)
      << s.error().message();
  EXPECT_FALSE(exists(tmp_ / "dst")) << "a half-made copy was left";

  // Apparent sizes count: a hole costs nothing to copy but is what the sandbox would see.
  make_dir(tmp_ / "sparse");
  {
    UniqueFd f(
        ::open((tmp_ / "sparse/big").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    ASSERT_TRUE(f.valid());
    ASSERT_EQ(::ftruncate(f.get(), off_t{1} << 30), 0);
  }
  Status sparse =
      copy_tree(tmp_ / "sparse", tmp_ / "dst", ::getuid(), ::getgid(), CopyLimits{512 << 20, 100});
  ASSERT_FALSE(sparse.ok());
  EXPECT_NE(
      sparse.error().message().find("more than 512MiB in files and symlinks (limit max_bytes)"),
      std::string::npos)
      << sparse.error().message();
  EXPECT_FALSE(exists(tmp_ / "dst"));
}

TEST_F(FilesTest, CopyTreeNeverCopiesASecretSwappedInForAFile) {
  // A recipe being changed while it is copied: a thread keeps exchanging a plain file and a
  // symlink to a host secret under the same two names. Whichever the copy sees, it copies as
  // what it opened; a check by name followed by an open by name (lstat, then open) copies the
  // secret's content when the swap falls between the two.
  make_file(tmp_ / "secret", "HOST-SECRET-91c2");
  std::string src = tmp_ / "src";
  make_dir(src);
  make_dir(src + "/swap");
  make_file(src + "/swap/x", "plain file");
  ASSERT_EQ(::symlink((tmp_ / "secret").c_str(), (src + "/swap/y").c_str()), 0);

  std::atomic<bool> stop{false};
  std::atomic<long> swaps{0};
  std::thread swapper([&] {
    UniqueFd dir(::open((src + "/swap").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    while (!stop) {
      if (::renameat2(dir.get(), "x", dir.get(), "y", RENAME_EXCHANGE) == 0) ++swaps;
    }
  });
  int copies = 0, leaks = 0, failures = 0;
  std::string leaked, failed;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (; copies < 3'000 && std::chrono::steady_clock::now() < deadline; ++copies) {
    std::string dst = tmp_ / "dst";
    Status s = copy_tree(src, dst, ::getuid(), ::getgid());
    if (!s.ok()) {
      ++failures;
      failed = s.error().message();
    }
    auto found = files_containing(dst, "HOST-SECRET");
    if (!found.empty()) {
      ++leaks;
      leaked = found[0];
    }
    ASSERT_TRUE(remove_tree(dst).ok());
  }
  stop = true;
  swapper.join();
  RecordProperty("copies", copies);
  RecordProperty("swaps", static_cast<int>(swaps));
  ASSERT_GT(swaps, 100) << "the swapping thread barely ran: the test proves nothing";
  EXPECT_EQ(leaks, 0) << leaks << " of " << copies << " copies held the secret's content, e.g. "
                      << leaked;
  // Each name is always something: a copy that decides from what it opened never trips on it.
  EXPECT_EQ(failures, 0) << failures << " of " << copies << " copies failed, e.g. " << failed;
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

}  // namespace
}  // namespace sandgate
