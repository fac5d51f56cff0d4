#include "core/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "core/fd.h"

namespace sandgate {

Status make_dirs(const std::string& path, mode_t mode) {
  if (path.empty()) return logic_error("mkdir", "empty path");
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), mode) == 0) {
      // mkdir(2) applied the umask; give what we created the exact mode asked for (a jail's
      // /tmp is 01777, not 01755). Through an O_NOFOLLOW fd: never chmod a symlink's target.
      int fd = ::open(partial.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) return sys_error("open", partial);
      int r = ::fchmod(fd, mode);
      Error e = sys_error("chmod", partial);
      ::close(fd);
      if (r != 0) return e;
    } else if (errno != EEXIST) {
      return sys_error("mkdir", partial);
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return sys_error("stat", path);
  if (!S_ISDIR(st.st_mode)) return sys_error(ENOTDIR, "mkdir", path);
  return {};
}

namespace {

// The mount a file lives on. st_dev alone cannot see a bind mount of the same filesystem, so
// the mount id (statx STATX_MNT_ID, Linux 5.8) is compared too when the kernel reports it.
struct MountKey {
  dev_t dev = 0;
  uint64_t mnt_id = 0;
  bool has_mnt_id = false;
  bool same_mount(const MountKey& o) const {
    if (dev != o.dev) return false;
    return !(has_mnt_id && o.has_mnt_id) || mnt_id == o.mnt_id;
  }
};

bool mount_key(int dirfd, const char* name, int flags, MountKey* key) {
  struct statx stx;
  if (::statx(dirfd, name, flags | AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
              STATX_TYPE | STATX_MNT_ID, &stx) != 0)
    return false;
  key->dev = makedev(stx.stx_dev_major, stx.stx_dev_minor);
  key->has_mnt_id = (stx.stx_mask & STATX_MNT_ID) != 0;
  key->mnt_id = stx.stx_mnt_id;
  return true;
}

void note(Error* first, Error e) {
  if (first->step.empty()) *first = std::move(e);
}

// Removes everything inside the directory open at `dfd` (named `path` in errors) that lives
// on `mount`; a mount point below it is left alone and reported as EBUSY. Keeps going after
// a failure: remove as much as possible, report the first failure.
void remove_contents(int dfd, const std::string& path, const MountKey& mount, Error* first) {
  int list_fd = ::openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* dir = list_fd >= 0 ? ::fdopendir(list_fd) : nullptr;
  if (!dir) {
    note(first, sys_error("opendir", path));
    if (list_fd >= 0) ::close(list_fd);
    return;
  }
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(dir)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(dir);
  for (const auto& name : names) {
    std::string child = path + "/" + name;
    struct stat st;
    if (::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT) note(first, sys_error("lstat", child));
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      if (::unlinkat(dfd, name.c_str(), 0) != 0 && errno != ENOENT)
        note(first, sys_error("unlink", child));
      continue;
    }
    // O_NOFOLLOW: a directory swapped for a symlink since the fstatat is not followed.
    int cfd = ::openat(dfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (cfd < 0) {
      if (errno != ENOENT) note(first, sys_error("open directory", child));
      continue;
    }
    MountKey key;
    if (!mount_key(cfd, "", AT_EMPTY_PATH, &key)) {
      note(first, sys_error("statx", child));
      ::close(cfd);
      continue;
    }
    if (!key.same_mount(mount)) {
      note(first, sys_error(EBUSY, "rmdir (mount point)", child));
      ::close(cfd);
      continue;
    }
    remove_contents(cfd, child, mount, first);
    ::close(cfd);
    if (::unlinkat(dfd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
      note(first, sys_error("rmdir", child));
  }
}

}  // namespace

Status remove_tree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    return sys_error("lstat", path);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return sys_error("unlink", path);
    return {};
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return {};
    return sys_error("open directory", path);
  }
  UniqueFd dir(fd);
  MountKey mount, parent;
  if (!mount_key(dir.get(), "", AT_EMPTY_PATH, &mount)) return sys_error("statx", path);
  // The tree itself being a mount point (its parent is on another mount): leave it alone.
  if (mount_key(dir.get(), "..", 0, &parent) && !parent.same_mount(mount) && path != "/")
    return sys_error(EBUSY, "rmdir (mount point)", path);
  Error first;
  remove_contents(dir.get(), path, mount, &first);
  dir.reset();
  if (first.step.empty() && ::rmdir(path.c_str()) != 0 && errno != ENOENT)
    first = sys_error("rmdir", path);
  if (!first.step.empty()) return first;
  return {};
}

Status chown_tree(const std::string& path, uid_t uid, gid_t gid) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return sys_error("lstat", path);
  if (::lchown(path.c_str(), uid, gid) != 0) return sys_error("lchown", path);
  if (!S_ISDIR(st.st_mode)) return {};
  DIR* dir = ::opendir(path.c_str());
  if (!dir) return sys_error("opendir", path);
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(dir)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(dir);
  for (auto& n : names) SG_TRY(chown_tree(path + "/" + n, uid, gid));
  return {};
}

Status copy_tree(const std::string& src, const std::string& dst, uid_t uid, gid_t gid) {
  struct stat st;
  if (::lstat(src.c_str(), &st) != 0) return sys_error("lstat", src);
  if (S_ISLNK(st.st_mode)) {
    char target[4096];
    ssize_t n = ::readlink(src.c_str(), target, sizeof target - 1);
    if (n < 0) return sys_error("readlink", src);
    target[n] = 0;
    if (::symlink(target, dst.c_str()) != 0) return sys_error("symlink", dst);
  } else if (S_ISDIR(st.st_mode)) {
    if (::mkdir(dst.c_str(), st.st_mode & 07777) != 0) return sys_error("mkdir", dst);
    DIR* dir = ::opendir(src.c_str());
    if (!dir) return sys_error("opendir", src);
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(dir)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(dir);
    for (auto& n : names) SG_TRY(copy_tree(src + "/" + n, dst + "/" + n, uid, gid));
    // mkdir applied the umask; set the exact mode now that the children are in.
    if (::chmod(dst.c_str(), st.st_mode & 07777) != 0) return sys_error("chmod", dst);
  } else if (S_ISREG(st.st_mode)) {
    SG_ASSIGN_OR_RETURN(UniqueFd in, open_fd(src, O_RDONLY));
    SG_ASSIGN_OR_RETURN(UniqueFd out, open_fd(dst, O_WRONLY | O_CREAT | O_EXCL, st.st_mode & 0777));
    char buf[1 << 16];
    for (;;) {
      ssize_t n = ::read(in.get(), buf, sizeof buf);
      if (n < 0) {
        if (errno == EINTR) continue;
        return sys_error("read", src);
      }
      if (n == 0) break;
      SG_TRY(std::move(write_all(out.get(), std::string_view(buf, static_cast<size_t>(n)))).context(dst));
    }
    // Setuid/setgid bits are deliberately dropped: a recipe must not smuggle them in.
    if (::fchmod(out.get(), st.st_mode & 0777) != 0) return sys_error("fchmod", dst);
  } else {
    // Devices, fifos and sockets are not part of a workspace recipe.
    return {};
  }
  if (::lchown(dst.c_str(), uid, gid) != 0) return sys_error("lchown", dst);
  return {};
}

}  // namespace sandgate
