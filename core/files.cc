#include "core/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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
    if (::mkdir(partial.c_str(), mode) != 0 && errno != EEXIST) return sys_error("mkdir", partial);
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return sys_error("stat", path);
  if (!S_ISDIR(st.st_mode)) return sys_error(ENOTDIR, "mkdir", path);
  return {};
}

namespace {

thread_local Error* g_remove_error;

int remove_entry(const char* path, const struct stat*, int type, struct FTW*) {
  int r = (type == FTW_DP || type == FTW_D) ? ::rmdir(path) : ::unlink(path);
  if (r != 0 && errno != ENOENT && g_remove_error && g_remove_error->step.empty()) {
    *g_remove_error = sys_error(type == FTW_DP ? "rmdir" : "unlink", path);
  }
  return 0;  // keep going: remove as much as possible, report the first failure
}

}  // namespace

Status remove_tree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    return sys_error("lstat", path);
  }
  Error first;
  g_remove_error = &first;
  int r = ::nftw(path.c_str(), remove_entry, 64, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
  g_remove_error = nullptr;
  if (r != 0 && errno != ENOENT) return sys_error("walk", path);
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
