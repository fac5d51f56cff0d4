#include "providers/base_root.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <glob.h>
#include <limits.h>
#include <linux/mount.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <optional>

#include "core/fd.h"
#include "core/files.h"
#include "core/host_features.h"
#include "core/process.h"
#include "providers/mount_api.h"

namespace sandgate::providers {
namespace {

// Host paths that make up the default read-only base.
constexpr const char* kBasePaths[] = {"/usr",   "/bin",   "/sbin",  "/lib",
                                      "/lib32", "/lib64", "/libx32"};
// Non-secret files from the host's /etc that programs need to start (the dynamic loader's
// cache).
constexpr const char* kEtcBinds[] = {"/etc/ld.so.cache"};
// The alternatives links (awk, editor, ...): copied link by link, never bound, so that nothing
// but links of the host's directory is seen (into each run's root, or once into a mount of
// their own: shared_alternatives_mount).
constexpr char kAlternatives[] = "/etc/alternatives";
// Paths the jail makes its own: a base entry may not be or lie under one.
constexpr const char* kReserved[] = {"/etc", "/proc", "/sys",     "/dev",
                                     "/run", "/tmp",  "/var/tmp", "/workspace"};

Status write_new(const std::string& path, const std::string& text) {
  return write_file(path, text, O_WRONLY | O_CREAT | O_TRUNC);
}

bool under(const std::string& path, const std::string& dir) {
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         path[dir.size()] == '/');
}

}  // namespace

std::vector<std::string> default_base_dirs() {
  std::vector<std::string> dirs;
  for (const char* path : kBasePaths) {
    struct stat st;
    if (::lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) dirs.emplace_back(path);
  }
  return dirs;
}

std::vector<std::string> minimal_base_paths() {
  std::vector<std::string> out;
  for (const char* pattern :
       {"/usr/bin", "/usr/sbin", "/usr/libexec", "/usr/lib/x86_64-linux-gnu", "/usr/lib64",
        "/usr/lib/python3*", "/usr/lib/locale", "/usr/share/perl5", "/usr/share/zoneinfo",
        "/usr/local/bin", "/usr/local/lib"}) {
    glob_t g{};
    if (::glob(pattern, GLOB_ONLYDIR, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
  }
  return out;
}

Result<std::vector<std::string>> resolve_base_paths(const std::vector<std::string>& entries,
                                                    const std::string& field) {
  std::vector<std::string> resolved;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& e = entries[i];
    const std::string where = field + "[" + std::to_string(i) + "]";
    std::vector<std::string> paths;
    if (e == "minimal") {
      paths = minimal_base_paths();
    } else if (e.empty() || e[0] != '/') {
      return logic_error(
          "read-only base",
          where + ": '" + e + "' is not an absolute path (nor the preset 'minimal')");
    } else {
      paths = {e};
    }
    for (const auto& p : paths) {
      char buf[PATH_MAX];
      if (!::realpath(p.c_str(), buf))
        return sys_error(
            errno,
            where + ": the base path " + (p == e ? "" : "(from 'minimal') ") + "cannot be resolved",
            p);
      std::string real = buf;
      if (real == "/")
        return logic_error("read-only base",
                           where + ": '" + e + "' is the host's whole root; name what a run needs");
      for (const char* r : kReserved)
        if (under(real, r))
          return logic_error("read-only base", where + ": '" + e + "' (" + real + ") is under " +
                                                   r + ", which the jail makes its own");
      struct stat st;
      if (::stat(real.c_str(), &st) != 0) return sys_error(where + ": stat", real);
      if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
        return logic_error("read-only base",
                           where + ": '" + e + "' is neither a directory nor a regular file");
      resolved.push_back(real);
    }
  }
  // Outer paths first; an entry inside a kept one is carried by its bind.
  std::sort(resolved.begin(), resolved.end());
  std::vector<std::string> out;
  for (const auto& p : resolved)
    if (out.empty() || !under(p, out.back())) out.push_back(p);
  return out;
}

Result<std::vector<std::string>> make_base_tree(const std::string& root,
                                                const std::vector<std::string>& base_paths) {
  std::vector<std::string> exposed;
  for (const char* path : kBasePaths) {
    struct stat st;
    if (::lstat(path, &st) != 0) continue;  // this host lacks it
    std::string target = root + path;
    if (S_ISLNK(st.st_mode)) {
      char link[4096];
      ssize_t n = ::readlink(path, link, sizeof link - 1);
      if (n < 0) return sys_error("readlink", path);
      link[n] = 0;
      if (::symlink(link, target.c_str()) != 0) return sys_error("symlink", target);
    } else if (S_ISDIR(st.st_mode) && base_paths.empty()) {
      SG_TRY(make_dirs(target, 0755));
      exposed.emplace_back(path);
    }
  }
  // A narrowed base: a mount point per path (resolved, so never through one of the links).
  for (const auto& path : base_paths) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return sys_error("stat base path", path);
    std::string target = root + path;
    if (S_ISDIR(st.st_mode)) {
      SG_TRY(make_dirs(target, 0755));
    } else {
      SG_TRY(make_dirs(target.substr(0, target.rfind('/')), 0755));
      SG_TRY(write_file(target, "", O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    }
    exposed.push_back(path);
  }
  return exposed;
}

namespace {

// The symlinks of `source` (the host's /etc/alternatives), made in the directory `target`
// (`name` for errors). Made relative to the directory: a host has hundreds of these links (490
// here), and each symlink(2) by full path walked the whole run directory's path again.
Status copy_alternative_links(int target, const std::string& name,
                              const std::string& source = kAlternatives) {
  UniqueFd dir(::open(source.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return {};  // this host has none
  DIR* d = ::fdopendir(dir.release());
  if (!d) return sys_error("opendir", source);
  Status first;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_type != DT_LNK) continue;  // links only; DT_UNKNOWN is not checked further
    char link[PATH_MAX];
    ssize_t n = ::readlinkat(::dirfd(d), e->d_name, link, sizeof link - 1);
    if (n < 0) continue;  // removed meanwhile
    link[n] = 0;
    if (::symlinkat(link, target, e->d_name) != 0 && first.ok())
      first = sys_error("symlink", name + "/" + e->d_name);
  }
  ::closedir(d);
  return first;
}

// What every run will do with the shared mount: a kernel before 6.15 refuses to clone a mount
// that is attached nowhere.
Status check_clonable(int mount, const std::string& what) {
  UniqueFd clone(static_cast<int>(
      ::syscall(SYS_open_tree, mount, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)));
  if (!clone) return sys_error("open_tree: clone a mount attached nowhere (Linux 6.15)", what);
  return {};
}

// Owned by root and writable by no one else: what an image sandgate mounts, and the
// directories it is in, must be.
Status check_root_only(const std::string& path, bool directory) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return sys_error("stat", path);
  if ((directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) || st.st_uid != 0 ||
      (st.st_mode & 022) != 0)
    return logic_error("check the alternatives image's cache",
                       std::string("not a ") + (directory ? "directory" : "file") +
                           " owned by root that only root can write",
                       path);
  return {};
}

// The image's name: the source directory's identity and times, which change with every link
// added, removed or replaced in it (a symlink cannot be changed in place).
std::string image_name(const struct stat& st) {
  return fmt::format("links-{:x}-{:x}-{}.{:09}-{}.{:09}.erofs", st.st_dev, st.st_ino,
                     st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
}

// Images of a directory's earlier states, replaced over an hour ago (a mount made from one
// holds the file open, so removing it cannot change what a run sees), and what a process that
// died while making one left (.stage-*) an hour ago.
void prune_alternatives_cache(const std::string& cache_dir, const std::string& keep) {
  DIR* d = ::opendir(cache_dir.c_str());
  if (!d) return;
  const time_t an_hour_ago = ::time(nullptr) - 3600;
  std::vector<std::string> old;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    bool image = n.starts_with("links-") && n.ends_with(".erofs");
    if (n == keep || (!image && !n.starts_with(".stage-"))) continue;
    struct stat st;
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        st.st_mtime < an_hour_ago)
      old.push_back(cache_dir + "/" + n);
  }
  ::closedir(d);
  for (const auto& path : old) (void)remove_tree(path);
}

}  // namespace

std::string sandgate_cache_dir() {
  const char* env = std::getenv("SANDGATE_CACHE_DIR");
  return env && env[0] == '/' ? env : "/var/cache/sandgate";
}

Result<std::string> alternatives_image(const std::string& source, const std::string& cache_dir,
                                       const std::string& mkfs_erofs) {
  struct stat before;
  if (::stat(source.c_str(), &before) != 0) return sys_error("stat", source);
  SG_TRY(make_dirs(cache_dir, 0755));
  auto slash = cache_dir.rfind('/');
  if (slash != std::string::npos && slash > 0)
    SG_TRY(check_root_only(cache_dir.substr(0, slash), true));
  SG_TRY(check_root_only(cache_dir, true));
  const std::string name = image_name(before);
  const std::string image = cache_dir + "/" + name;
  if (::access(image.c_str(), F_OK) == 0) {
    SG_TRY(check_root_only(image, false));
    return image;
  }
  // Made once per state of the directory: its links copied into a directory of the cache,
  // then mkfs.erofs; renamed into place whole, so a reader sees no image or a complete one.
  std::string stage = cache_dir + "/.stage-XXXXXX";
  if (!::mkdtemp(stage.data())) return sys_error("mkdtemp", stage);
  const std::string partial = stage + ".erofs";
  auto made = [&]() -> Status {
    SG_ASSIGN_OR_RETURN(UniqueFd dir, open_fd(stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (::fchmod(dir.get(), 0755) != 0) return sys_error("chmod", stage);
    SG_TRY(copy_alternative_links(dir.get(), stage, source));
    struct stat after;
    if (::stat(source.c_str(), &after) != 0) return sys_error("stat", source);
    if (image_name(after) != name)
      return logic_error("make the alternatives image", "the directory changed while it was read",
                         source);
    SG_ASSIGN_OR_RETURN(auto res,
                        run_command({mkfs_erofs, "--quiet", "--all-root", "-T0", partial, stage},
                                    std::chrono::seconds(60)));
    if (res.timed_out || !res.status.exited || res.status.code != 0)
      return logic_error("make the alternatives image",
                         "mkfs.erofs failed (" + res.status.describe() + "): " + res.output,
                         partial);
    if (::chmod(partial.c_str(), 0644) != 0) return sys_error("chmod", partial);
    if (::rename(partial.c_str(), image.c_str()) != 0) return sys_error("rename", image);
    return {};
  }();
  ::unlink(partial.c_str());
  (void)remove_tree(stage);
  SG_TRY(made);
  prune_alternatives_cache(cache_dir, name);
  return image;
}

Result<UniqueFd> mount_alternatives_image(const std::string& image) {
  const std::string what = "the alternatives image " + image;
  UniqueFd fs(static_cast<int>(fsopen_("erofs", FSOPEN_CLOEXEC)));
  if (!fs) return sys_error("fsopen erofs", what);
  // A file as the source: erofs reads it without a loop device (Linux 6.12,
  // EROFS_FS_BACKED_BY_FILE); erofs is read-only, and says so only with "ro".
  if (fsconfig_(fs.get(), FSCONFIG_SET_STRING, "source", image.c_str()) != 0 ||
      fsconfig_(fs.get(), FSCONFIG_SET_FLAG, "ro", nullptr) != 0 ||
      fsconfig_(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr) != 0)
    return sys_error("mount an erofs image from a file (Linux 6.12)", what);
  UniqueFd mount(static_cast<int>(
      ::syscall(SYS_fsmount, fs.get(), FSMOUNT_CLOEXEC,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)));
  if (!mount) return sys_error("fsmount erofs", what);
  return mount;
}

namespace {

// The tmpfs way: the links copied into a tmpfs of this process's (3.5 ms of CPU here).
Result<UniqueFd> copy_alternatives_mount() {
  const std::string what = std::string("the shared copy of ") + kAlternatives;
  UniqueFd fs(static_cast<int>(fsopen_("tmpfs", FSOPEN_CLOEXEC)));
  if (!fs) return sys_error("fsopen tmpfs", what);
  if (fsconfig_(fs.get(), FSCONFIG_SET_STRING, "mode", "0755") != 0 ||
      fsconfig_(fs.get(), FSCONFIG_SET_STRING, "size", "1m") != 0 ||
      fsconfig_(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr) != 0)
    return sys_error("create a tmpfs", what);
  UniqueFd mount(
      static_cast<int>(::syscall(SYS_fsmount, fs.get(), FSMOUNT_CLOEXEC,
                                 MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)));
  if (!mount) return sys_error("fsmount tmpfs", what);
  SG_TRY(copy_alternative_links(mount.get(), what));
  // The superblock read-only, then the mount.
  UniqueFd pick(
      static_cast<int>(::syscall(SYS_fspick, mount.get(), "", FSPICK_EMPTY_PATH | FSPICK_CLOEXEC)));
  if (!pick || fsconfig_(pick.get(), FSCONFIG_SET_FLAG, "ro", nullptr) != 0 ||
      fsconfig_(pick.get(), FSCONFIG_CMD_RECONFIGURE, nullptr, nullptr) != 0)
    return sys_error("make the tmpfs read-only", what);
  struct mount_attr attr {};
  attr.attr_set = MOUNT_ATTR_RDONLY;
  if (::syscall(SYS_mount_setattr, mount.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0)
    return sys_error("mount_setattr read-only", what);
  SG_TRY(check_clonable(mount.get(), what));
  return mount;
}

// The image when mkfs.erofs and the kernel allow it (about 0.2 ms to mount), else the copy.
Result<UniqueFd> make_alternatives_mount() {
  if (auto mkfs = find_on_path("mkfs.erofs",
                               "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")) {
    auto image = alternatives_image(kAlternatives, sandgate_cache_dir() + "/alternatives", *mkfs);
    auto mount = image.ok() ? mount_alternatives_image(*image) : Result<UniqueFd>(image.error());
    if (mount.ok() && check_clonable(mount->get(), *image).ok()) return mount;
    // Debug only: the copy does the same, and a directory that changed while it was read (the
    // probe suite plants its canary there) is no news for whoever ran the command.
    if (!mount.ok())
      spdlog::debug("{}: the links are copied into a tmpfs instead", mount.error().message());
  } else {
    spdlog::debug(
        "mkfs.erofs is not installed (erofs-utils): the alternatives links are copied "
        "into a tmpfs");
  }
  return copy_alternatives_mount();
}

}  // namespace

Status copy_alternatives(const std::string& root) {
  if (::access(kAlternatives, F_OK) != 0) return {};  // this host has none
  std::string target = root + kAlternatives;
  SG_TRY(make_dirs(target, 0755));
  SG_ASSIGN_OR_RETURN(UniqueFd target_dir, open_fd(target, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  return copy_alternative_links(target_dir.get(), target);
}

Result<std::shared_ptr<const UniqueFd>> shared_alternatives_mount() {
  struct stat st;
  if (::stat(kAlternatives, &st) != 0 || !S_ISDIR(st.st_mode))
    return std::shared_ptr<const UniqueFd>();
  static std::mutex mu;
  static std::shared_ptr<const UniqueFd> made;
  static struct stat made_of {};
  static std::optional<Error> cannot;
  std::lock_guard lock(mu);
  if (cannot) return *cannot;
  auto same = [&](const struct stat& a) {
    return a.st_dev == st.st_dev && a.st_ino == st.st_ino &&
           a.st_mtim.tv_sec == st.st_mtim.tv_sec && a.st_mtim.tv_nsec == st.st_mtim.tv_nsec &&
           a.st_ctim.tv_sec == st.st_ctim.tv_sec && a.st_ctim.tv_nsec == st.st_ctim.tv_nsec;
  };
  if (made && same(made_of)) return made;
  auto mount = make_alternatives_mount();
  if (!mount.ok()) {
    spdlog::info("{}: each run copies the links instead", mount.error().message());
    cannot = std::move(mount).error();
    return *cannot;
  }
  made = std::make_shared<const UniqueFd>(std::move(mount).value());
  made_of = st;
  return made;
}

Status attach_shared_alternatives(int mount, const std::string& root) {
  std::string target = root + kAlternatives;
  UniqueFd clone(static_cast<int>(
      ::syscall(SYS_open_tree, mount, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)));
  if (!clone) return sys_error("open_tree: clone the shared alternatives", target);
  if (::syscall(SYS_move_mount, clone.get(), "", AT_FDCWD, target.c_str(),
                MOVE_MOUNT_F_EMPTY_PATH) != 0)
    return sys_error("move_mount the shared alternatives", target);
  return {};
}

Result<std::vector<std::string>> make_base_etc(const std::string& root, uid_t uid, gid_t gid,
                                               const std::string& home, Alternatives alternatives) {
  std::string etc = root + "/etc";
  SG_TRY(make_dirs(etc, 0755));
  std::string u = std::to_string(uid), g = std::to_string(gid);
  // Generated, never copied: the host's passwd, shadow and the rest stay outside.
  SG_TRY(write_new(etc + "/passwd",
                   "root:x:0:0:root:/root:/bin/sh\n"
                   "sandbox:x:" +
                       u + ":" + g + ":sandbox:" + home +
                       ":/bin/sh\n"
                       "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"));
  SG_TRY(write_new(etc + "/group", "root:x:0:\nsandbox:x:" + g + ":\nnogroup:x:65534:\n"));
  SG_TRY(write_new(etc + "/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files\n"));
  if (alternatives == Alternatives::kCopy) {
    SG_TRY(copy_alternatives(root));
  } else if (::access(kAlternatives, F_OK) == 0) {
    SG_TRY(make_dirs(etc + "/alternatives", 0755));
  }
  std::vector<std::string> files;
  for (const char* path : kEtcBinds) {
    struct stat st;
    if (::stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    std::string target = root + path;
    SG_ASSIGN_OR_RETURN(UniqueFd f, open_fd(target, O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
    files.emplace_back(path);
  }
  return files;
}

}  // namespace sandgate::providers
