#include "core/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "core/defer.h"
#include "core/fd.h"
#include "core/log.h"
#include "core/units.h"

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
    UniqueFd dir(
        ::openat(walk.fd(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
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

namespace {

// copy_tree's walk: the source and the destination side by side, each a DirWalk.
class TreeCopier {
 public:
  TreeCopier(const std::string& src, const std::string& dst, uid_t uid, gid_t gid,
             const CopyLimits& limits)
      : src_root_(src), src_(src), dst_(dst), uid_(uid), gid_(gid), limits_(limits) {}

  Status run(UniqueFd src_root, Listing listing, UniqueFd dst_root) {
    SG_TRY(count_entry());
    SG_TRY(src_.enter("", std::move(src_root)));
    SG_TRY(dst_.enter("", std::move(dst_root)));
    if (::fchown(dst_.fd(), uid_, gid_) != 0) return sys_error("fchown", dst_.path());
    SG_TRY(copy_listed(std::move(listing)));
    for (;;) {
      std::vector<std::string>& subdirs = src_.top().subdirs;
      if (subdirs.empty()) {
        // The children are in: now the directory may get a mode that forbids adding more.
        mode_t mode = src_.top().mode & 07777;
        if (src_.depth() == 0) {
          if (::fchmod(dst_.fd(), mode) != 0) return sys_error("fchmod", dst_.path());
          return {};
        }
        SG_TRY(src_.leave());
        SG_ASSIGN_OR_RETURN(DirWalk::Left to, dst_.leave());
        if (::fchmod(to.fd.get(), mode) != 0) {
          int err = errno;
          return sys_error(err, "fchmod", dst_.path(to.name));
        }
        continue;
      }
      std::string name = std::move(subdirs.back());
      subdirs.pop_back();
      // Opened afresh: whatever the name is now (a directory swapped for a symlink since it was
      // listed is copied as the symlink), never what it was when listed.
      SG_TRY(copy_entry(name.c_str(), /*enter_dirs=*/true));
    }
  }

 private:
  // Every entry seen counts, skipped ones too: a million fifos cost time to walk as well.
  Status count_entry() {
    if (++entries_ > limits_.max_entries)
      return logic_error(
          "copy tree",
          "more than " + std::to_string(limits_.max_entries) + " entries (limit max_entries)",
          src_root_);
    return {};
  }
  Status count_bytes(uint64_t n) {
    bytes_ += n;
    if (bytes_ > limits_.max_bytes)
      return logic_error("copy tree",
                         "more than " + format_bytes(Bytes{limits_.max_bytes}) +
                             " in files and symlinks (limit max_bytes)",
                         src_root_);
    return {};
  }

  // Copies the entries of the current source directory as they are read; its subdirectories
  // are queued, so only the levels on the way down are held, never a descriptor per level.
  Status copy_listed(Listing listing) {
    while (const struct dirent* e = listing.next()) {
      SG_TRY(count_entry());
      SG_TRY(copy_entry(e->d_name, /*enter_dirs=*/false));
    }
    if (listing.err() != 0) return sys_error(listing.err(), "readdir", src_.path());
    return {};
  }

  // The type is decided from what was opened, never from an earlier lstat: O_PATH|O_NOFOLLOW
  // opens the entry itself (a symlink as the link) without reading it or opening a device, and
  // everything after goes through that fd, so a name swapped meanwhile cannot redirect the copy.
  Status copy_entry(const char* name, bool enter_dirs) {
    UniqueFd entry(::openat(src_.fd(), name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!entry) {
      if (errno == ENOENT) return {};  // removed since it was listed: nothing to copy
      int err = errno;
      return sys_error(err, "open", src_.path(name));
    }
    struct stat st;
    if (::fstat(entry.get(), &st) != 0) {
      int err = errno;
      return sys_error(err, "fstat", src_.path(name));
    }
    if (S_ISDIR(st.st_mode)) {
      if (!enter_dirs) {
        src_.top().subdirs.emplace_back(name);
        return {};
      }
      return enter(name, entry.get());
    }
    if (S_ISREG(st.st_mode)) return copy_file(name, entry.get(), st);
    if (S_ISLNK(st.st_mode)) return copy_symlink(name, entry.get());
    return {};  // devices, fifos and sockets are not part of a workspace recipe
  }

  Status enter(const char* name, int entry) {
    // "." of the O_PATH fd: the very directory that was looked at.
    UniqueFd dir(::openat(entry, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir) {
      int err = errno;
      return sys_error(err, "open directory", src_.path(name));
    }
    auto listing = Listing::open(dir.get());
    if (!listing.ok()) return sys_error(listing.error().err, "opendir", src_.path(name));
    if (::mkdirat(dst_.fd(), name, 0700) != 0) {
      int err = errno;
      return sys_error(err, "mkdir", dst_.path(name));
    }
    UniqueFd made(::openat(dst_.fd(), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!made || ::fchown(made.get(), uid_, gid_) != 0) {
      int err = errno;
      return sys_error(err, made ? "fchown" : "open directory", dst_.path(name));
    }
    SG_TRY(src_.enter(name, std::move(dir)));
    SG_TRY(dst_.enter(name, std::move(made)));
    return copy_listed(std::move(listing).value());
  }

  Status copy_symlink(const char* name, int entry) {
    char target[PATH_MAX + 1];
    ssize_t n = ::readlinkat(entry, "", target, sizeof target);
    if (n < 0) {
      int err = errno;
      return sys_error(err, "readlink", src_.path(name));
    }
    if (static_cast<size_t>(n) == sizeof target)
      return sys_error(ENAMETOOLONG, "readlink", src_.path(name));
    target[n] = '\0';
    SG_TRY(count_bytes(static_cast<uint64_t>(n)));
    if (::symlinkat(target, dst_.fd(), name) != 0 ||
        ::fchownat(dst_.fd(), name, uid_, gid_, AT_SYMLINK_NOFOLLOW) != 0) {
      int err = errno;
      return sys_error(err, "symlink", dst_.path(name));
    }
    return {};
  }

  Status copy_file(const char* name, int entry, const struct stat& st) {
    SG_TRY(count_bytes(static_cast<uint64_t>(st.st_size)));
    // An O_PATH fd cannot be read; reopening it through /proc/self/fd opens the same inode,
    // not whatever the name points at by now.
    std::string self = "/proc/self/fd/" + std::to_string(entry);
    UniqueFd in(::open(self.c_str(), O_RDONLY | O_NOCTTY | O_CLOEXEC));
    struct stat in_st;
    if (!in || ::fstat(in.get(), &in_st) != 0) {
      int err = errno;
      return sys_error(err, "reopen through " + self, src_.path(name));
    }
    if (in_st.st_dev != st.st_dev || in_st.st_ino != st.st_ino)
      return sys_error(ESTALE, "reopen through " + self + " (another file)", src_.path(name));
    UniqueFd out(
        ::openat(dst_.fd(), name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out) {
      int err = errno;
      return sys_error(err, "create", dst_.path(name));
    }
    SG_TRY(copy_data(in.get(), out.get(), st.st_size, name));
    // Owner first, then the mode; setuid/setgid are dropped: a recipe must not smuggle them in.
    if (::fchown(out.get(), uid_, gid_) != 0 || ::fchmod(out.get(), st.st_mode & 0777) != 0) {
      int err = errno;
      return sys_error(err, "chown/chmod", dst_.path(name));
    }
    return {};
  }

  // Copies the data extents of the first `size` bytes (the size that was counted: a file grown
  // meanwhile is cut there) and leaves the holes as holes: a 512 MiB sparse file with no blocks
  // stays one (SEEK_DATA/SEEK_HOLE, Linux 3.1; filesystems without them report all data).
  Status copy_data(int in, int out, off_t size, const char* name) {
    off_t pos = 0;
    while (pos < size) {
      off_t data = ::lseek(in, pos, SEEK_DATA);
      if (data < 0 && errno == ENXIO) break;  // only a hole is left
      if (data < 0) {
        int err = errno;
        return sys_error(err, "lseek SEEK_DATA", src_.path(name));
      }
      if (data >= size) break;
      off_t hole = ::lseek(in, data, SEEK_HOLE);
      if (hole < 0) {
        int err = errno;
        return sys_error(err, "lseek SEEK_HOLE", src_.path(name));
      }
      off_t end = std::min(hole, size);
      if (end <= data) break;  // shrunk between the two seeks
      SG_TRY(copy_range(in, out, data, end, name));
      pos = end;
    }
    if (::ftruncate(out, size) != 0) {
      int err = errno;
      return sys_error(err, "ftruncate", dst_.path(name));
    }
    return {};
  }

  // [from, to) at the same offsets; copy_file_range where the kernel can, read/write otherwise.
  // A file that ends early (shrunk meanwhile) ends the range: the rest stays a hole.
  Status copy_range(int in, int out, off_t from, off_t to, const char* name) {
    off_t off_in = from, off_out = from;
    while (off_in < to) {
      size_t want = static_cast<size_t>(to - off_in);
      if (use_copy_file_range_) {
        ssize_t n = ::copy_file_range(in, &off_in, out, &off_out, want, 0);
        if (n > 0) continue;
        if (n == 0) return {};
        if (errno == EINTR) continue;
        // Across filesystems before 5.3 (and of different types since 5.19), or a filesystem
        // without it: the plain copy below does the same.
        if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
          int err = errno;
          return sys_error(err, "copy_file_range", dst_.path(name));
        }
        use_copy_file_range_ = false;
      }
      buffer_.resize(1 << 16);
      ssize_t n = ::pread(in, buffer_.data(), std::min(want, buffer_.size()), off_in);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        int err = errno;
        return sys_error(err, "read", src_.path(name));
      }
      if (n == 0) return {};
      for (ssize_t done = 0; done < n;) {
        ssize_t w =
            ::pwrite(out, buffer_.data() + done, static_cast<size_t>(n - done), off_out + done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
          int err = errno;
          return sys_error(err, "write", dst_.path(name));
        }
        done += w;
      }
      off_in += n;
      off_out += n;
    }
    return {};
  }

  std::string src_root_;
  DirWalk src_, dst_;
  uid_t uid_;
  gid_t gid_;
  CopyLimits limits_;
  uint64_t entries_ = 0, bytes_ = 0;
  bool use_copy_file_range_ = true;
  std::vector<char> buffer_;
};

}  // namespace

Status copy_tree(const std::string& src, const std::string& dst, uid_t uid, gid_t gid,
                 const CopyLimits& limits) {
  UniqueFd src_root(::open(src.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!src_root) return sys_error("open directory", src);
  auto listing = Listing::open(src_root.get());
  if (!listing.ok()) return sys_error(listing.error().err, "opendir", src);
  if (::mkdir(dst.c_str(), 0700) != 0) return sys_error("mkdir", dst);
  // dst is ours from here on: a failed copy removes what it made rather than leave half a tree
  // (a partial workspace, or a shared directory the next run would take for a finished one).
  Defer remove_partial([&] {
    if (auto s = remove_tree(dst); !s.ok())
      spdlog::error("removing the partial copy {}: {}", dst, s.error().message());
  });
  UniqueFd dst_root(::open(dst.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dst_root) return sys_error("open directory", dst);
  Status s = TreeCopier(src, dst, uid, gid, limits)
                 .run(std::move(src_root), std::move(listing).value(), std::move(dst_root));
  if (s.ok()) remove_partial.cancel();
  return s;
}

}  // namespace sandgate
