#include "providers/workspace.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <map>

#include "core/defer.h"
#include "core/fd.h"
#include "core/files.h"
#include "core/process.h"
#include "providers/mount_api.h"

namespace sandgate::providers {

namespace {

// Opens `rel` below `root` without following a symlink anywhere on the way (openat2, Linux
// 5.6): a recipe is changed by whoever made it, and a directory swapped for a link to /etc
// while it is walked must not be listed as the recipe's.
int open_beneath(int root, const std::string& rel, int flags) {
  struct open_how how = {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC | O_NOFOLLOW);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  return static_cast<int>(
      syscall(SYS_openat2, root, rel.empty() ? "." : rel.c_str(), &how, sizeof how));
}

std::string child_path(const std::string& dir, const char* name) {
  return dir.empty() ? std::string(name) : dir + "/" + name;
}

}  // namespace

Result<RecipeSurvey> survey_recipe(const std::string& recipe, uint64_t max_entries) {
  UniqueFd root(::open(recipe.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root) return sys_error("open workspace recipe", recipe);
  struct stat st;
  if (::fstat(root.get(), &st) != 0) return sys_error("fstat workspace recipe", recipe);
  RecipeSurvey survey;
  survey.owner = st.st_uid;
  survey.group = st.st_gid;
  survey.entries = 1;
  // Depth first over relative paths: one descriptor at a time whatever the depth; a path too
  // long to open (a hostile 100,000-level tree) ends the survey, and the caller copies instead.
  std::vector<std::string> todo = {""};
  while (!todo.empty()) {
    std::string dir = std::move(todo.back());
    todo.pop_back();
    UniqueFd fd(open_beneath(root.get(), dir, O_RDONLY | O_DIRECTORY));
    if (!fd) {
      if (errno == ENOENT) continue;  // removed since it was listed
      return sys_error("open recipe directory", recipe + "/" + dir);
    }
    if (!dir.empty() && survey.other_owner.empty()) {
      if (::fstat(fd.get(), &st) != 0) return sys_error("fstat", recipe + "/" + dir);
      if (st.st_uid != survey.owner || st.st_gid != survey.group)
        survey.other_owner =
            dir + " (" + std::to_string(st.st_uid) + ":" + std::to_string(st.st_gid) + ")";
    }
    DIR* d = ::fdopendir(fd.release());
    if (d == nullptr) return sys_error("opendir", recipe + "/" + dir);
    Defer close_dir([&] { ::closedir(d); });
    for (;;) {
      errno = 0;
      struct dirent* e = ::readdir(d);
      if (e == nullptr) {
        if (errno != 0) return sys_error("readdir", recipe + "/" + dir);
        break;
      }
      std::string_view n = e->d_name;
      if (n == "." || n == "..") continue;
      if (++survey.entries > max_entries)
        return logic_error(
            "survey workspace recipe",
            "more than " + std::to_string(max_entries) + " entries (limit max_entries)", recipe);
      unsigned char type = e->d_type;
      if (type == DT_UNKNOWN) {  // a filesystem without d_type: ask the inode
        if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        type = S_ISDIR(st.st_mode)   ? DT_DIR
               : S_ISREG(st.st_mode) ? DT_REG
               : S_ISLNK(st.st_mode) ? DT_LNK
                                     : DT_FIFO;
      }
      if (type == DT_DIR) {
        std::string sub = child_path(dir, e->d_name);
        if (sub.size() >= PATH_MAX)
          return sys_error(ENAMETOOLONG,
                           "survey workspace recipe (too deep for a copy-on-write view)", recipe);
        todo.push_back(std::move(sub));
      } else if (type != DT_REG && type != DT_LNK) {
        survey.hidden.push_back(child_path(dir, e->d_name));
      }
    }
  }
  return survey;
}

namespace {

// A user namespace that maps exactly one uid and one gid, `from` (the recipe's owner on disk) to
// `to` (the sandbox user on the host), for an idmapped mount (mount_setattr(2) MOUNT_ATTR_IDMAP,
// Linux 5.12). Files of other owners show as the overflow id. The namespace lives as long as
// its descriptor: the child that made it exits at once.
Result<UniqueFd> idmap_userns(uid_t uid_from, uid_t uid_to, gid_t gid_from, gid_t gid_to) {
  SG_ASSIGN_OR_RETURN(Pipe hold, make_pipe());
  // A raw clone, fork-like: the child only makes raw system calls (sandgate serve is
  // multithreaded), waits for the parent to read its namespace, and exits.
  long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
  if (pid < 0) return sys_error("clone a user namespace for the recipe's idmap");
  if (pid == 0) {
    char byte;
    syscall(SYS_close, hold.write.get());
    syscall(SYS_read, hold.read.get(), &byte, 1);
    syscall(SYS_exit_group, 0);
  }
  hold.read.reset();
  Defer reap([&] {
    hold.write.reset();
    int status;
    while (::waitpid(static_cast<pid_t>(pid), &status, 0) < 0 && errno == EINTR) {
    }
  });
  std::string dir = "/proc/" + std::to_string(pid);
  SG_TRY(write_file(dir + "/uid_map",
                    std::to_string(uid_from) + " " + std::to_string(uid_to) + " 1\n"));
  SG_TRY(write_file(dir + "/gid_map",
                    std::to_string(gid_from) + " " + std::to_string(gid_to) + " 1\n"));
  return open_fd(dir + "/ns/user", O_RDONLY | O_CLOEXEC);
}

// The recipe's lower layer: a detached clone of its mount (open_tree(2), Linux 5.2), made
// read-only, nosuid, nodev, noatime (reads through the overlay do not even write the recipe's
// atimes) and idmapped to the sandbox user.
Result<UniqueFd> lower_layer(const std::string& recipe, const RecipeSurvey& survey, uid_t uid,
                             gid_t gid) {
  UniqueFd tree(static_cast<int>(
      syscall(SYS_open_tree, AT_FDCWD, recipe.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)));
  if (!tree) return sys_error("open_tree (clone the recipe's mount)", recipe);
  struct mount_attr attr = {};
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOATIME;
  attr.attr_clr = MOUNT_ATTR__ATIME;
  UniqueFd userns;
  if (survey.owner != uid || survey.group != gid) {
    SG_ASSIGN_OR_RETURN(userns, idmap_userns(survey.owner, uid, survey.group, gid));
    attr.attr_set |= MOUNT_ATTR_IDMAP;
    attr.userns_fd = static_cast<uint64_t>(userns.get());
  }
  if (syscall(SYS_mount_setattr, tree.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0)
    return sys_error("mount_setattr (idmapped, read-only lower layer)", recipe);
  return tree;
}

// Makes `rel` (a directory of the recipe) in the upper layer with the attributes the merged
// view showed for it: an upper directory without them would change the merged directory's
// mode, owner and times (overlayfs takes them from the upper one).
Status make_upper_dirs(int recipe_root, int upper_root, const std::string& rel, uid_t uid,
                       gid_t gid, std::map<std::string, struct stat>* made) {
  size_t pos = 0;
  while (pos < rel.size()) {
    size_t slash = rel.find('/', pos);
    if (slash == std::string::npos) slash = rel.size();
    std::string prefix = rel.substr(0, slash);
    pos = slash + 1;
    if (made->count(prefix)) continue;
    UniqueFd lower(open_beneath(recipe_root, prefix, O_RDONLY | O_DIRECTORY));
    struct stat st;
    if (!lower || ::fstat(lower.get(), &st) != 0) return sys_error("open recipe directory", prefix);
    if (::mkdirat(upper_root, prefix.c_str(), 0700) != 0)
      return sys_error("mkdir in the upper layer", prefix);
    if (::fchownat(upper_root, prefix.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW) != 0 ||
        ::fchmodat(upper_root, prefix.c_str(), st.st_mode & 07777, 0) != 0)
      return sys_error("chown/chmod in the upper layer", prefix);
    (*made)[prefix] = st;
  }
  return {};
}

// Hides each FIFO, socket and device node of the recipe behind a whiteout (a 0/0 character
// device, Documentation/filesystems/overlayfs.rst "whiteouts and opaque directories").
Status hide_entries(const std::string& recipe, const RecipeSurvey& survey, const std::string& upper,
                    int upper_fd, uid_t uid, gid_t gid) {
  if (survey.hidden.empty()) return {};
  UniqueFd recipe_root(::open(recipe.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  UniqueFd upper_root(upper_fd >= 0
                          ? ::fcntl(upper_fd, F_DUPFD_CLOEXEC, 0)
                          : ::open(upper.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!recipe_root || !upper_root) return sys_error("open", recipe_root ? upper : recipe);
  std::map<std::string, struct stat> made;
  for (const auto& rel : survey.hidden) {
    auto slash = rel.rfind('/');
    if (slash != std::string::npos)
      SG_TRY(make_upper_dirs(recipe_root.get(), upper_root.get(), rel.substr(0, slash), uid, gid,
                             &made));
    if (::mknodat(upper_root.get(), rel.c_str(), S_IFCHR | 0, makedev(0, 0)) != 0)
      return sys_error("mknod a whiteout", upper + "/" + rel);
  }
  // Times last: making the whiteouts changed them. Deepest first, so a parent's mtime is not
  // changed again by its child's utimensat (it is not, but the order costs nothing).
  for (auto it = made.rbegin(); it != made.rend(); ++it) {
    struct timespec times[2] = {it->second.st_atim, it->second.st_mtim};
    if (::utimensat(upper_root.get(), it->first.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0)
      return sys_error("utimensat in the upper layer", it->first);
  }
  return {};
}

}  // namespace

Status mount_overlay_workspace(const std::string& recipe, const RecipeSurvey& survey,
                               const OverlayLayout& layout, uid_t uid, gid_t gid, RunState& state) {
  if (!survey.other_owner.empty())
    return logic_error("copy-on-write workspace",
                       "the recipe's directories have more than one owner (" + survey.other_owner +
                           "); an idmapped layer maps one",
                       recipe);
  // The upper layer's root is the workspace's root: the sandbox user's, 0700, as a copy's is.
  const bool by_fd = layout.upper_fd >= 0 && layout.work_fd >= 0;
  for (const auto* dir : {&layout.upper, &layout.work, &layout.merged}) {
    if (by_fd && dir != &layout.merged) continue;
    if (::mkdir(dir->c_str(), 0700) != 0) return sys_error("mkdir", *dir);
  }
  if (by_fd ? ::fchown(layout.upper_fd, uid, gid) != 0 || ::fchmod(layout.upper_fd, 0700) != 0
            : ::chown(layout.upper.c_str(), uid, gid) != 0)
    return sys_error("chown", layout.upper);
  SG_TRY(hide_entries(recipe, survey, layout.upper, layout.upper_fd, uid, gid));
  SG_ASSIGN_OR_RETURN(UniqueFd lower, lower_layer(recipe, survey, uid, gid));

  UniqueFd fs(static_cast<int>(fsopen_("overlay", FSOPEN_CLOEXEC)));
  if (!fs) return sys_error("fsopen overlay");
  // Layers by descriptor (Linux 6.13 "lowerdir+" with FSCONFIG_SET_FD): the idmapped clone
  // has no path. metacopy, index and xino off: nothing of the overlay's own bookkeeping is
  // needed for a layer that lives as long as the run, and none is trusted from a module default.
  auto config = [&](const char* key, const char* value) -> Status {
    if (fsconfig_(fs.get(), FSCONFIG_SET_STRING, key, value, 0) != 0)
      return sys_error(std::string("fsconfig overlay ") + key, value);
    return {};
  };
  if (fsconfig_(fs.get(), FSCONFIG_SET_FD, "lowerdir+", nullptr, lower.get()) != 0)
    return sys_error("fsconfig overlay lowerdir+ (a descriptor, Linux 6.13)", recipe);
  if (by_fd) {
    if (fsconfig_(fs.get(), FSCONFIG_SET_FD, "upperdir", nullptr, layout.upper_fd) != 0)
      return sys_error("fsconfig overlay upperdir (a descriptor, Linux 6.13)", layout.upper);
    if (fsconfig_(fs.get(), FSCONFIG_SET_FD, "workdir", nullptr, layout.work_fd) != 0)
      return sys_error("fsconfig overlay workdir (a descriptor, Linux 6.13)", layout.work);
  } else {
    SG_TRY(config("upperdir", layout.upper.c_str()));
    SG_TRY(config("workdir", layout.work.c_str()));
  }
  SG_TRY(config("metacopy", "off"));
  SG_TRY(config("index", "off"));
  SG_TRY(config("xino", "off"));
  // volatile (Linux 5.10): no sync of the upper filesystem, ever. Without it, unmounting the
  // overlay (every destroy) and every fsync inside the run sync the whole of /var/tmp's
  // filesystem: tens of milliseconds to seconds behind the host's other writers. The upper
  // layer dies with the run, and after a crash it is removed, never mounted again.
  if (fsconfig_(fs.get(), FSCONFIG_SET_FLAG, "volatile", nullptr, 0) != 0)
    return sys_error("fsconfig overlay volatile (Linux 5.10)", layout.merged);
  if (fsconfig_(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0)
    return sys_error("create the overlay", layout.merged);
  UniqueFd mnt(static_cast<int>(
      syscall(SYS_fsmount, fs.get(), FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)));
  if (!mnt) return sys_error("fsmount overlay", layout.merged);
  // Recorded before it is attached: a crash right after leaves a record gc can act on.
  SG_TRY(state.record({Resource::Kind::kMount, layout.merged}));
  if (syscall(SYS_move_mount, mnt.get(), "", AT_FDCWD, layout.merged.c_str(),
              MOVE_MOUNT_F_EMPTY_PATH) != 0)
    return sys_error("attach the overlay workspace", layout.merged);
  return {};
}

namespace {

// mkfs.ext4 where Debian puts it (e2fsprogs), else wherever PATH finds it.
std::string mkfs_ext4() {
  for (const char* p : {"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"})
    if (::access(p, X_OK) == 0) return p;
  return "mkfs.ext4";
}

// Formats the image. What keeps it fast (10-30 ms for any size on a sparse file): no
// journal (the filesystem lives as long as the run and is never mounted again after a crash,
// so there is nothing to replay; no jbd2 thread per run either), inode tables and the rest
// not zeroed (lazy_itable_init; the image is a fresh sparse file, whose holes read as zeros,
// and the mount's noinit_itable keeps the kernel from zeroing them later), no discard of a
// file that is all holes, no blocks kept for growing it (resize_inode: it never grows; 144 KiB
// of metadata written for 1 GiB instead of 656 KiB). No blocks reserved for root: the run's user is
// not root, and the size asked for is the size it gets. 4 KiB blocks and one inode per 8 KiB (a
// source tree is many small files), whatever the size (mke2fs.conf's "small" type would pick 1 KiB
// blocks).
Status format_ext4(const std::string& image, uid_t uid, gid_t gid) {
  std::vector<std::string> argv = {
      mkfs_ext4(),
      "-q",
      "-F",
      "-t",
      "ext4",
      "-b",
      "4096",
      "-i",
      "8192",
      "-m",
      "0",
      "-O",
      "^has_journal,^resize_inode",
      "-L",
      "sandgate-ws",
      "-E",
      "lazy_itable_init=1,nodiscard,root_owner=" + std::to_string(uid) + ":" + std::to_string(gid),
      image};
  SG_ASSIGN_OR_RETURN(CommandResult r, run_command(argv, std::chrono::seconds(60), 16 << 10));
  if (r.timed_out || !r.status.exited || r.status.code != 0)
    return logic_error("format the workspace image (mkfs.ext4)",
                       r.timed_out ? "timed out" : r.output, image);
  return {};
}

// Attaches `image` to a free loop device, autoclear. The device is recorded before it is
// attached; another process may take the same free device between LOOP_CTL_GET_FREE and
// LOOP_CONFIGURE (EBUSY), and then the next free one is tried.
Result<std::pair<UniqueFd, std::string>> attach_loop(const std::string& image, RunState& state) {
  UniqueFd control(::open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!control) return sys_error("open", "/dev/loop-control");
  UniqueFd file(::open(image.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
  if (!file) return sys_error("open workspace image", image);
  for (int attempt = 0; attempt < 16; ++attempt) {
    int n = ::ioctl(control.get(), LOOP_CTL_GET_FREE);
    if (n < 0) return sys_error("LOOP_CTL_GET_FREE", "/dev/loop-control");
    std::string device = "/dev/loop" + std::to_string(n);
    Resource record{Resource::Kind::kLoopDevice, device, 0, 0, image};
    SG_TRY(state.record(record));
    UniqueFd loop(::open(device.c_str(), O_RDWR | O_CLOEXEC));
    if (!loop) return sys_error("open loop device", device);
    struct loop_config config = {};
    config.fd = static_cast<uint32_t>(file.get());
    config.block_size = 4096;
    config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
    std::snprintf(reinterpret_cast<char*>(config.info.lo_file_name), LO_NAME_SIZE, "%s",
                  image.c_str());
    if (::ioctl(loop.get(), LOOP_CONFIGURE, &config) == 0)
      return std::make_pair(std::move(loop), device);
    if (errno != EBUSY) return sys_error("LOOP_CONFIGURE (attach the workspace image)", device);
    SG_TRY(state.forget(record));
  }
  return sys_error(EBUSY, "attach the workspace image (every free loop device was taken)", image);
}

}  // namespace

Result<WorkspaceFilesystem> make_workspace_filesystem(const std::string& image, uint64_t size,
                                                      uid_t uid, gid_t gid, RunState& state) {
  if (size < kMinWorkspaceSize || size > kMaxWorkspaceSize)
    return logic_error("workspace filesystem",
                       "size must be 16MiB..16TiB (got " + std::to_string(size) + " bytes)");
  {
    UniqueFd f(::open(image.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!f) return sys_error("create workspace image", image);
    // Sparse: the host's disk gives the image only what the run writes, up to `size`.
    if (::ftruncate(f.get(), static_cast<off_t>(size)) != 0)
      return sys_error("size workspace image", image);
  }
  SG_TRY(format_ext4(image, uid, gid));
  SG_ASSIGN_OR_RETURN(auto loop, attach_loop(image, state));
  WorkspaceFilesystem out;
  out.device = loop.second;
  UniqueFd fs(static_cast<int>(fsopen_("ext4", FSOPEN_CLOEXEC)));
  if (!fs) return sys_error("fsopen ext4");
  if (fsconfig_(fs.get(), FSCONFIG_SET_STRING, "source", out.device.c_str(), 0) != 0)
    return sys_error("fsconfig ext4 source", out.device);
  if (fsconfig_(fs.get(), FSCONFIG_SET_FLAG, "noinit_itable", nullptr, 0) != 0)
    return sys_error("fsconfig ext4 noinit_itable", out.device);
  if (fsconfig_(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0)
    return sys_error("mount the workspace filesystem (ext4)", out.device);
  out.mount = UniqueFd(static_cast<int>(
      syscall(SYS_fsmount, fs.get(), FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)));
  if (!out.mount) return sys_error("fsmount ext4", out.device);
  // The filesystem holds the device now; closing ours leaves autoclear to its unmount.
  loop.first.reset();
  if (::unlinkat(out.mount.get(), "lost+found", AT_REMOVEDIR) != 0 && errno != ENOENT)
    return sys_error("remove lost+found", image);
  // The mount's descriptor is O_PATH: chmod through a real one.
  UniqueFd root(::openat(out.mount.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root || ::fchmod(root.get(), 0700) != 0) return sys_error("chmod workspace root", image);
  return out;
}

}  // namespace sandgate::providers
