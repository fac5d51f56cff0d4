#include "providers/base_root.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fd.h"
#include "core/files.h"

namespace sandgate::providers {
namespace {

// Host paths that make up the read-only base.
constexpr const char* kBasePaths[] = {"/usr",   "/bin",   "/sbin",  "/lib",
                                      "/lib32", "/lib64", "/libx32"};
// Non-secret files from the host's /etc that programs need to start (dynamic loader cache,
// alternatives symlinks for awk/editor/etc.).
constexpr const char* kEtcBinds[] = {"/etc/ld.so.cache", "/etc/alternatives"};

Status write_new(const std::string& path, const std::string& text) {
  return write_file(path, text, O_WRONLY | O_CREAT | O_TRUNC);
}

}  // namespace

Result<std::vector<std::string>> make_base_tree(const std::string& root) {
  std::vector<std::string> dirs;
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
    } else if (S_ISDIR(st.st_mode)) {
      SG_TRY(make_dirs(target, 0755));
      dirs.emplace_back(path);
    }
  }
  return dirs;
}

Result<std::vector<std::string>> make_base_etc(const std::string& root, uid_t uid, gid_t gid,
                                               const std::string& home) {
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
  std::vector<std::string> files;
  for (const char* path : kEtcBinds) {
    struct stat st;
    if (::stat(path, &st) != 0) continue;
    std::string target = root + path;
    if (S_ISDIR(st.st_mode)) {
      SG_TRY(make_dirs(target, 0755));
    } else {
      SG_ASSIGN_OR_RETURN(UniqueFd f, open_fd(target, O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
    }
    files.emplace_back(path);
  }
  return files;
}

}  // namespace sandgate::providers
