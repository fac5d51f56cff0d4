#include "core/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string_view>
#include <utility>
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

// The entries of a directory, read through an open file description of their own ("."
// reopened), so the walk keeps the directory's fd for the *at calls and may unlink entries as
// it reads them, as rm -rf does: an entry removed meanwhile is returned at most once and no
// other entry is skipped.
class Listing {
 public:
  // Reopening "." needs search permission on the directory, which everything else the walk does
  // there needs too (acting on an entry, climbing back out through ".."): a directory that
  // cannot be listed is never entered.
  static Result<Listing> open(int dirfd) {
    int fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return sys_error("opendir");
    DIR* dir = ::fdopendir(fd);
    if (dir == nullptr) {
      Error e = sys_error("opendir");
      ::close(fd);
      return e;
    }
    return Listing(dir);
  }
  Listing(Listing&& o) noexcept : dir_(std::exchange(o.dir_, nullptr)), err_(o.err_) {}
  Listing& operator=(Listing&&) = delete;
  Listing(const Listing&) = delete;
  ~Listing() {
    if (dir_ != nullptr) ::closedir(dir_);
  }

  // The next entry other than "." and "..", or nullptr at the end or on a read error (err()).
  const struct dirent* next() {
    for (;;) {
      errno = 0;
      const struct dirent* e = ::readdir(dir_);
      if (e == nullptr) {
        err_ = errno;
        return nullptr;
      }
      std::string_view n = e->d_name;
      if (n != "." && n != "..") return e;
    }
  }
  int err() const { return err_; }

 private:
  explicit Listing(DIR* dir) : dir_(dir) {}
  DIR* dir_;
  int err_ = 0;
};

// A position in a tree walked without recursion, kept the way fts(3) keeps it: the directory
// open now and one Level per directory from the root down to it. Only the current directory's
// fd is held, so depth costs a name per level, never a descriptor (100,000 levels would be
// EMFILE) or a stack frame (a recursive walk died at ~30,000 levels). Going up reopens ".." and
// checks that it is the directory the walk came down through: a tree moved under the walk stops
// it instead of sending it into someone else's directory.
class DirWalk {
 public:
  struct Level {
    std::string name;  // in its parent; "" for the root
    dev_t dev = 0;
    ino_t ino = 0;
    mode_t mode = 0;
    std::vector<std::string> subdirs;  // still to visit; the walk's own bookkeeping
  };
  struct Left {
    std::string name;
    mode_t mode = 0;
    UniqueFd fd;  // the directory just left, still open for a last fchmod
  };

  explicit DirWalk(std::string root_path) : root_path_(std::move(root_path)) {}

  // Makes `fd`, a directory opened from the current one as `name`, the current directory (the
  // first call: the root, name "").
  Status enter(std::string name, UniqueFd fd) {
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) {
      int err = errno;
      return sys_error(err, "fstat", path(name));
    }
    levels_.push_back({std::move(name), st.st_dev, st.st_ino, st.st_mode, {}});
    fd_ = std::move(fd);
    return {};
  }

  // Goes back up to the parent. Precondition: depth() > 0.
  Result<Left> leave() {
    UniqueFd parent(::openat(fd_.get(), "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st;
    if (!parent || ::fstat(parent.get(), &st) != 0) {
      int err = errno;
      return sys_error(err, "open ..", path());
    }
    const Level& up = levels_[levels_.size() - 2];
    if (st.st_dev != up.dev || st.st_ino != up.ino)
      return sys_error(ESTALE, "climb back to the parent (the tree was moved while it was walked)",
                       path());
    Left left{std::move(levels_.back().name), levels_.back().mode, std::move(fd_)};
    levels_.pop_back();
    fd_ = std::move(parent);
    return left;
  }

  int fd() const { return fd_.get(); }
  Level& top() { return levels_.back(); }
  size_t depth() const { return levels_.size() - 1; }

  // The path of `leaf` in the current directory, for an error message only: it costs O(depth).
  // Past kShown levels the middle is left out ("root/<99984 levels>/d/d/.../leaf"), so a message
  // about a 100,000-level tree is not 200 KB long.
  std::string path(std::string_view leaf = {}) const {
    constexpr size_t kShown = 16;
    size_t first = levels_.size() > kShown + 2 ? levels_.size() - kShown : 1;
    std::string p = root_path_;
    if (first > 1) p += "/<" + std::to_string(first - 1) + " levels>";
    for (size_t i = first; i < levels_.size(); ++i) p += "/" + levels_[i].name;
    if (!leaf.empty()) {
      p += '/';
      p += leaf;
    }
    return p;
  }

 private:
  std::string root_path_;
  UniqueFd fd_;
  std::vector<Level> levels_;
};

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
  UniqueFd root(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root) {
    if (errno == ENOENT) return {};
    return sys_error("open directory", path);
  }
  MountKey mount, parent;
  if (!mount_key(root.get(), "", AT_EMPTY_PATH, &mount)) return sys_error("statx", path);
  // The tree itself being a mount point (its parent is on another mount): leave it alone.
  if (mount_key(root.get(), "..", 0, &parent) && !parent.same_mount(mount) && path != "/")
    return sys_error(EBUSY, "rmdir (mount point)", path);
  auto root_listing = Listing::open(root.get());
  if (!root_listing.ok()) return sys_error(root_listing.error().err, "opendir", path);

  DirWalk walk(path);
  // Remove as much as possible and report the first failure; its path is built only then.
  Error first;
  auto fail = [&](int err, const char* step, std::string_view leaf) {
    if (first.step.empty()) first = sys_error(err, step, walk.path(leaf));
  };
  // Unlinks every non-directory of the current directory while reading it and queues its
  // subdirectories: memory grows with the subdirectories of the levels on the way down, never
  // with files. d_type is a hint only: an entry it calls a file but that is a directory by now
  // fails with EISDIR and is queued.
  auto clear_files = [&](Listing listing) {
    while (const struct dirent* e = listing.next()) {
      if (e->d_type != DT_DIR) {
        if (::unlinkat(walk.fd(), e->d_name, 0) == 0 || errno == ENOENT) continue;
        if (errno != EISDIR) {
          fail(errno, "unlink", e->d_name);
          continue;
        }
      }
      walk.top().subdirs.emplace_back(e->d_name);
    }
    if (listing.err() != 0) fail(listing.err(), "readdir", {});
  };

  SG_TRY(walk.enter("", std::move(root)));
  clear_files(std::move(root_listing).value());
  for (;;) {
    std::vector<std::string>& subdirs = walk.top().subdirs;
    if (subdirs.empty()) {
      if (walk.depth() == 0) break;
      auto left = walk.leave();
      // Where the walk would climb to is not where it came from: stop before deleting there.
      if (!left.ok()) return std::move(left).error();
      left->fd.reset();
      if (::unlinkat(walk.fd(), left->name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
        fail(errno, "rmdir", left->name);
      continue;
    }
    std::string name = std::move(subdirs.back());
    subdirs.pop_back();
    // O_NOFOLLOW: a directory swapped for a symlink since it was listed is not followed.
    UniqueFd dir(::openat(walk.fd(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir) {
      if (errno == ENOENT) continue;
      if (errno != ENOTDIR && errno != ELOOP) {
        fail(errno, "open directory", name);
      } else if (::unlinkat(walk.fd(), name.c_str(), 0) != 0 && errno != ENOENT) {
        fail(errno, "unlink", name);  // no longer a directory: a file or symlink by now
      }
      continue;
    }
    MountKey key;
    if (!mount_key(dir.get(), "", AT_EMPTY_PATH, &key)) {
      fail(errno, "statx", name);
      continue;
    }
    if (!key.same_mount(mount)) {
      fail(EBUSY, "rmdir (mount point)", name);
      continue;
    }
    auto listing = Listing::open(dir.get());
    if (!listing.ok()) {
      fail(listing.error().err, "opendir", name);
      continue;
    }
    if (auto s = walk.enter(name, std::move(dir)); !s.ok()) {
      if (first.step.empty()) first = std::move(s).error();
      continue;
    }
    clear_files(std::move(listing).value());
  }
  walk = DirWalk(path);  // closes the root before removing it
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
