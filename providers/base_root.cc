#include "providers/base_root.h"

#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "core/fd.h"
#include "core/files.h"

namespace sandgate::providers {
namespace {

// Host paths that make up the default read-only base.
constexpr const char* kBasePaths[] = {"/usr",   "/bin",   "/sbin",  "/lib",
                                      "/lib32", "/lib64", "/libx32"};
// Non-secret files from the host's /etc that programs need to start (the dynamic loader's
// cache).
constexpr const char* kEtcBinds[] = {"/etc/ld.so.cache"};
// The alternatives links (awk, editor, ...): copied link by link, never bound, so that nothing
// but links of the host's directory is seen.
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

Status copy_alternatives(const std::string& root) {
  UniqueFd dir(::open(kAlternatives, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return {};  // this host has none
  std::string target = root + kAlternatives;
  SG_TRY(make_dirs(target, 0755));
  // Made relative to the directory: a host has hundreds of these links (490 here), and each
  // symlink(2) by full path walked the whole run directory's path again.
  SG_ASSIGN_OR_RETURN(UniqueFd target_dir, open_fd(target, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  DIR* d = ::fdopendir(dir.release());
  if (!d) return sys_error("opendir", kAlternatives);
  Status first;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_type != DT_LNK) continue;  // links only; DT_UNKNOWN is not checked further
    char link[PATH_MAX];
    ssize_t n = ::readlinkat(::dirfd(d), e->d_name, link, sizeof link - 1);
    if (n < 0) continue;  // removed meanwhile
    link[n] = 0;
    if (::symlinkat(link, target_dir.get(), e->d_name) != 0 && first.ok())
      first = sys_error("symlink", target + "/" + e->d_name);
  }
  ::closedir(d);
  return first;
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
