// The read-only base: the narrowed list's checks (each error names its entry), the preset, and
// the trees made for the default and a narrowed base, on this host's own directories.
#include "providers/base_root.h"

#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/fd.h"
#include "core/files.h"
#include "core/host_features.h"
#include "core/test_temp_dir.h"
#include "tests/support/privileged.h"

namespace sandgate::providers {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

bool is_dir(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool is_link(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}
bool exists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

std::string resolve_error(const std::vector<std::string>& entries) {
  auto r = resolve_base_paths(entries, "--base-path");
  EXPECT_FALSE(r.ok()) << "accepted: " << (entries.empty() ? "" : entries.back());
  return r.ok() ? "" : r.error().message();
}

TEST(BasePaths, EmptyStaysTheDefault) {
  auto r = resolve_base_paths({}, "--base-path");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
}

TEST(BasePaths, BadEntriesAreRefusedNamingTheEntry) {
  EXPECT_THAT(resolve_error({"/usr/bin", "usr/lib"}),
              AllOf(HasSubstr("--base-path[1]"), HasSubstr("not an absolute path")));
  EXPECT_THAT(resolve_error({""}), HasSubstr("--base-path[0]"));
  EXPECT_THAT(
      resolve_error({"/usr/bin", "/no/such/sandgate-dir"}),
      AllOf(HasSubstr("--base-path[1]"), HasSubstr("/no/such/sandgate-dir"), HasSubstr("ENOENT")));
  EXPECT_THAT(resolve_error({"/"}), HasSubstr("whole root"));
  EXPECT_THAT(resolve_error({"/usr/bin", "/etc"}),
              AllOf(HasSubstr("--base-path[1]"), HasSubstr("makes its own")));
  EXPECT_THAT(resolve_error({"/proc/self"}), HasSubstr("makes its own"));
  EXPECT_THAT(resolve_error({"/dev/null"}), HasSubstr("makes its own"));
}

TEST(BasePaths, ResolvedDeduplicatedOuterFirst) {
  char real_bin[4096];
  ASSERT_NE(::realpath("/bin", real_bin), nullptr);
  auto r = resolve_base_paths({"/usr/lib/x86_64-linux-gnu", "/bin", "/usr/lib", "/usr/lib"},
                              "base.allow");
  ASSERT_TRUE(r.ok()) << r.error().message();
  // /bin as what it is (on a merged-/usr host, /usr/bin), and /usr/lib carries its child.
  EXPECT_THAT(*r, Contains(std::string(real_bin)));
  EXPECT_THAT(*r, Contains(std::string("/usr/lib")));
  EXPECT_THAT(*r, Not(Contains(std::string("/usr/lib/x86_64-linux-gnu"))));
  EXPECT_EQ(r->size(), 2u);
}

TEST(BasePaths, MinimalIsTheMicrovmListAndLeavesConfigurationOut) {
  auto r = resolve_base_paths({"minimal"}, "--base-path");
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_FALSE(r->empty());
  EXPECT_THAT(*r, Contains(std::string("/usr/bin")));
  for (const auto& p : *r) {
    EXPECT_NE(p, "/usr");
    EXPECT_NE(p.rfind("/usr/local/etc", 0), 0u) << p;
    EXPECT_NE(p, "/usr/share");
    EXPECT_NE(p, "/usr/lib");
  }
  EXPECT_FALSE(minimal_base_paths().empty());
}

TEST(BaseTree, DefaultBindsTheRealBaseDirectories) {
  testing::TempDir tmp;
  auto dirs = make_base_tree(tmp.path());
  ASSERT_TRUE(dirs.ok()) << dirs.error().message();
  EXPECT_EQ(*dirs, default_base_dirs());
  EXPECT_THAT(*dirs, Contains(std::string("/usr")));
  for (const auto& d : *dirs) EXPECT_TRUE(is_dir(tmp / d.substr(1))) << d;
}

TEST(BaseTree, NarrowedMakesMountPointsForItsPathsAndKeepsTheLinks) {
  testing::TempDir tmp;
  auto base =
      resolve_base_paths({"/usr/bin", "/usr/lib64", "/etc/../usr/share/zoneinfo"}, "--base-path");
  ASSERT_TRUE(base.ok()) << base.error().message();
  auto exposed = make_base_tree(tmp.path(), *base);
  ASSERT_TRUE(exposed.ok()) << exposed.error().message();
  EXPECT_EQ(*exposed, *base);
  EXPECT_THAT(*exposed, Not(Contains(std::string("/usr"))));
  EXPECT_TRUE(is_dir(tmp / "usr/bin"));
  EXPECT_TRUE(is_dir(tmp / "usr/share/zoneinfo"));
  // The merged-/usr links are recreated (they name no host file by themselves).
  if (is_link("/bin")) {
    EXPECT_TRUE(is_link(tmp / "bin"));
  }
}

TEST(BaseEtc, AlternativesAreCopiedLinkByLinkNeverBound) {
  if (!is_dir("/etc/alternatives")) GTEST_SKIP() << "this host has no /etc/alternatives";
  testing::TempDir tmp;
  auto files = make_base_etc(tmp.path(), 10001, 10001, "/home/sandbox");
  ASSERT_TRUE(files.ok()) << files.error().message();
  EXPECT_THAT(*files, Not(Contains(std::string("/etc/alternatives"))));
  EXPECT_TRUE(is_dir(tmp / "etc/alternatives"));
  EXPECT_FALSE(exists(tmp / "etc/shadow"));
  auto passwd = read_file(tmp / "etc/passwd");
  ASSERT_TRUE(passwd.ok());
  EXPECT_THAT(*passwd, HasSubstr("sandbox:x:10001:10001"));
}

// A provider that copies the links later (Podman, while its runtime starts) gets the directory
// empty, and copy_alternatives then fills it with every link of the host's, target for target.
TEST(BaseEtc, AlternativesLeftEmptyAreCopiedLater) {
  if (!is_dir("/etc/alternatives")) GTEST_SKIP() << "this host has no /etc/alternatives";
  testing::TempDir tmp;
  auto files = make_base_etc(tmp.path(), 10001, 10001, "/home/sandbox", Alternatives::kLeaveEmpty);
  ASSERT_TRUE(files.ok()) << files.error().message();
  ASSERT_TRUE(is_dir(tmp / "etc/alternatives"));
  auto entries = [](const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.is_symlink())
        out.push_back(e.path().filename().string() + " -> " +
                      std::filesystem::read_symlink(e.path()).string());
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_TRUE(entries(tmp / "etc/alternatives").empty());
  ASSERT_TRUE(copy_alternatives(tmp.path()).ok());
  auto host = entries("/etc/alternatives");
  EXPECT_FALSE(host.empty());
  EXPECT_EQ(entries(tmp / "etc/alternatives"), host);
}

// The links copied once into a mount of their own that every jail attaches a clone of: made
// once per process, with exactly the host's links, and read-only down to its superblock, so
// that a run's root that clears its clone's read-only flag still cannot change what every other
// run sees.
// The entries of the directory `dir` (a mount's fd): its links as "name -> target", sorted;
// the names of anything else in `others`.
std::vector<std::string> entries_of(int dir, std::vector<std::string>* others) {
  std::vector<std::string> links;
  int fd = ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
  if (!d) {
    ADD_FAILURE() << "cannot list a directory: " << std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return links;
  }
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    char target[PATH_MAX];
    ssize_t len = ::readlinkat(::dirfd(d), e->d_name, target, sizeof target - 1);
    if (len < 0) {
      others->push_back(n);
      continue;
    }
    links.push_back(n + " -> " + std::string(target, static_cast<size_t>(len)));
  }
  ::closedir(d);
  std::sort(links.begin(), links.end());
  return links;
}

TEST(SharedAlternatives, OneReadOnlyMountWithExactlyTheHostsLinks) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_REQUIRE(is_dir("/etc/alternatives"), "this host has no /etc/alternatives");
  auto shared = shared_alternatives_mount();
  ASSERT_TRUE(shared.ok()) << shared.error().message();
  ASSERT_TRUE(*shared && (*shared)->valid());
  auto again = shared_alternatives_mount();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), shared->get()) << "made once while the host's directory is unchanged";
  const int mount = (*shared)->get();
  if (find_on_path("mkfs.erofs", "/usr/sbin:/usr/bin:/sbin:/bin")) {
    struct statfs fs;
    ASSERT_EQ(::fstatfs(mount, &fs), 0);
    EXPECT_EQ(fs.f_type, EROFS_SUPER_MAGIC_V1)
        << "mkfs.erofs is installed: the cached image is mounted";
  }

  std::vector<std::string> others;
  std::vector<std::string> links = entries_of(mount, &others);
  std::vector<std::string> host;
  for (const auto& e : std::filesystem::directory_iterator("/etc/alternatives"))
    if (e.is_symlink())
      host.push_back(e.path().filename().string() + " -> " +
                     std::filesystem::read_symlink(e.path()).string());
  std::sort(host.begin(), host.end());
  EXPECT_FALSE(host.empty());
  EXPECT_EQ(links, host);
  EXPECT_TRUE(others.empty()) << "links only: " << others.front();

  struct statvfs vfs;
  ASSERT_EQ(::fstatvfs(mount, &vfs), 0);
  EXPECT_EQ(vfs.f_flag & (ST_RDONLY | ST_NOSUID | ST_NODEV | ST_NOEXEC),
            ST_RDONLY | ST_NOSUID | ST_NODEV | ST_NOEXEC);
  EXPECT_NE(::symlinkat("/etc/shadow", mount, "planted"), 0);
  EXPECT_EQ(errno, EROFS);
  // A clone (what a jail attaches) with the mount's own read-only flag cleared is still
  // read-only: the superblock is.
  UniqueFd clone(static_cast<int>(
      ::syscall(SYS_open_tree, mount, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)));
  ASSERT_TRUE(clone.valid()) << std::strerror(errno);
  struct mount_attr attr {};
  attr.attr_clr = MOUNT_ATTR_RDONLY;
  ASSERT_EQ(::syscall(SYS_mount_setattr, clone.get(), "", AT_EMPTY_PATH, &attr, sizeof attr), 0)
      << std::strerror(errno);
  EXPECT_NE(::symlinkat("/etc/shadow", clone.get(), "planted"), 0);
  EXPECT_EQ(errno, EROFS);
}

// A source directory with one link (awk) and a cache directory beside it, in a fresh temporary
// directory; mkfs.erofs found.
class AlternativesImage : public ::testing::Test {
 protected:
  void SetUp() override {
    SANDGATE_REQUIRE_ROOT();
    auto found = find_on_path("mkfs.erofs", "/usr/sbin:/usr/bin:/sbin:/bin");
    SANDGATE_REQUIRE(found.has_value(), "mkfs.erofs is not installed (ci/bootstrap: erofs-utils)");
    mkfs = *found;
    ASSERT_TRUE(make_dirs(source, 0755).ok());
    ASSERT_EQ(::symlink("/usr/bin/mawk", (source + "/awk").c_str()), 0);
  }

  testing::TempDir tmp;
  const std::string source = tmp / "alternatives", cache = tmp / "cache";
  std::string mkfs;
};

// A source with two links and a regular file (a canary, as the probe suite plants one in the
// host's /etc/alternatives): the image holds the two links and nothing else, is read-only down
// to its superblock, is made once per state of the source, and a new link makes a new one.
TEST_F(AlternativesImage, HoldsExactlyTheLinksAndIsMadeAgainOnlyWhenTheSourceChanges) {
  ASSERT_EQ(::symlink("/usr/bin/vim.basic", (source + "/editor").c_str()), 0);
  ASSERT_TRUE(write_file(source + "/canary", "not a link", O_WRONLY | O_CREAT | O_TRUNC).ok());

  auto image = alternatives_image(source, cache, mkfs);
  ASSERT_TRUE(image.ok()) << image.error().message();
  EXPECT_TRUE(image->starts_with(cache + "/links-")) << *image;
  auto mount = mount_alternatives_image(*image);
  SANDGATE_REQUIRE(mount.ok(),
                   "this kernel cannot mount an erofs image from a file (Linux "
                   "6.12, EROFS_FS_BACKED_BY_FILE): " +
                       (mount.ok() ? std::string() : mount.error().message()));
  std::vector<std::string> others;
  EXPECT_EQ(entries_of(mount->get(), &others),
            (std::vector<std::string>{"awk -> /usr/bin/mawk", "editor -> /usr/bin/vim.basic"}));
  EXPECT_TRUE(others.empty()) << "links only: " << others.front();
  struct statfs fs;
  ASSERT_EQ(::fstatfs(mount->get(), &fs), 0);
  EXPECT_EQ(fs.f_type, EROFS_SUPER_MAGIC_V1);
  struct statvfs vfs;
  ASSERT_EQ(::fstatvfs(mount->get(), &vfs), 0);
  EXPECT_EQ(vfs.f_flag & (ST_RDONLY | ST_NOSUID | ST_NODEV | ST_NOEXEC),
            ST_RDONLY | ST_NOSUID | ST_NODEV | ST_NOEXEC);
  EXPECT_NE(::symlinkat("/etc/shadow", mount->get(), "planted"), 0);
  EXPECT_EQ(errno, EROFS);

  struct stat first, again_st;
  ASSERT_EQ(::stat(image->c_str(), &first), 0);
  auto again = alternatives_image(source, cache, mkfs);
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_EQ(*again, *image);
  ASSERT_EQ(::stat(again->c_str(), &again_st), 0);
  EXPECT_EQ(again_st.st_ino, first.st_ino) << "the same source: the same image, not made again";

  ASSERT_EQ(::symlink("/usr/bin/less", (source + "/pager").c_str()), 0);
  auto changed = alternatives_image(source, cache, mkfs);
  ASSERT_TRUE(changed.ok()) << changed.error().message();
  EXPECT_NE(*changed, *image);
  EXPECT_EQ(::access(image->c_str(), F_OK), 0) << "the earlier image stays for an hour";
  auto remounted = mount_alternatives_image(*changed);
  ASSERT_TRUE(remounted.ok()) << remounted.error().message();
  EXPECT_EQ(entries_of(remounted->get(), &others),
            (std::vector<std::string>{"awk -> /usr/bin/mawk", "editor -> /usr/bin/vim.basic",
                                      "pager -> /usr/bin/less"}));
  // Nothing of the making is left beside the images.
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(cache))
    names.push_back(e.path().filename().string());
  EXPECT_EQ(names.size(), 2u);

  // The next image made removes what was replaced, or left by a dead maker, over an hour ago;
  // the image replaced just now stays.
  const std::string dead_stage = cache + "/.stage-dead";
  ASSERT_TRUE(make_dirs(dead_stage + "/sub", 0755).ok());
  const struct timespec two_hours_ago[2] = {{::time(nullptr) - 7200, 0},
                                            {::time(nullptr) - 7200, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, image->c_str(), two_hours_ago, 0), 0);
  ASSERT_EQ(::utimensat(AT_FDCWD, dead_stage.c_str(), two_hours_ago, 0), 0);
  ASSERT_EQ(::symlink("/usr/bin/nvi", (source + "/vi").c_str()), 0);
  auto third = alternatives_image(source, cache, mkfs);
  ASSERT_TRUE(third.ok()) << third.error().message();
  EXPECT_NE(::access(image->c_str(), F_OK), 0) << "replaced two hours ago: removed";
  EXPECT_NE(::access(dead_stage.c_str(), F_OK), 0) << "left two hours ago: removed";
  EXPECT_EQ(::access(changed->c_str(), F_OK), 0) << "replaced just now: kept";
  EXPECT_EQ(::access(third->c_str(), F_OK), 0);
}

// An image, or a cache directory, that someone other than root can write is not used: whoever
// could write it would choose what every run sees at /etc/alternatives.
TEST_F(AlternativesImage, ACacheOthersCanWriteIsRefused) {
  auto image = alternatives_image(source, cache, mkfs);
  ASSERT_TRUE(image.ok()) << image.error().message();

  ASSERT_EQ(::chmod(image->c_str(), 0666), 0);
  auto refused = alternatives_image(source, cache, mkfs);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error().message(), HasSubstr(*image));
  ASSERT_EQ(::chmod(image->c_str(), 0644), 0);
  ASSERT_TRUE(alternatives_image(source, cache, mkfs).ok());

  ASSERT_EQ(::chmod(cache.c_str(), 0777), 0);
  refused = alternatives_image(source, cache, mkfs);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error().message(), HasSubstr("only root can write"));
}

}  // namespace
}  // namespace sandgate::providers
