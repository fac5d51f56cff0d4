#include "providers/guest_image.h"

#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "core/fd.h"
#include "core/process.h"
#include "core/strings.h"
#include "providers/base_root.h"

namespace sandgate::providers {
namespace {

// Bumped whenever what goes into an image changes in a way its inputs do not show.
// 2: /init without debug info; 3: optional modules (overlayfs) beside the loaded ones.
constexpr char kInitramfsFormat[] = "sandgate-initramfs-3";
// 3: /etc/alternatives copied link by link (base_root.h), not bound whole; 4: squashfs.
constexpr char kBaseFormat[] = "sandgate-base-4";

// The read-only images (the base, the binds, the secrets) are squashfs: read-only by
// construction (no kernel can mount one for writing, and nothing in the guest can change what
// the next run gets), written by a user-space tool with no loop mount, and with no journal,
// lost+found or size to guess. Data stays uncompressed: under TCG every byte decompressed
// costs guest CPU, and the image lives in the host's cache either way; the metadata is
// compressed (zstd, which the Debian cloud kernel has built in). Ownership and modes are the
// staged tree's.
constexpr char kSquashfsOptions[] = "-noappend -quiet -no-progress -no-xattrs -comp zstd -noD -noF";

// A compare of version strings as sort -V would for kernel names (digits numerically).
bool version_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) &&
        std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t i2 = i, j2 = j;
      while (i2 < a.size() && std::isdigit(static_cast<unsigned char>(a[i2]))) ++i2;
      while (j2 < b.size() && std::isdigit(static_cast<unsigned char>(b[j2]))) ++j2;
      unsigned long long x = std::stoull(a.substr(i, i2 - i)), y = std::stoull(b.substr(j, j2 - j));
      if (x != y) return x < y;
      i = i2;
      j = j2;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

Status rename_into_place(const std::string& tmp, const std::string& final_path) {
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return sys_error(err, "rename into the cache", final_path);
  }
  return {};
}

// Removes the cache's other files with `prefix` last modified more than an hour ago: images of
// inputs that changed since (a rebuilt supervisor, an upgraded /usr) are never used again, and
// a base image is GiBs. A running VM keeps its open file; a recent one may be in use by a run
// that is starting.
void prune_cache(const std::string& dir, const std::string& prefix, const std::string& keep) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  time_t now = ::time(nullptr);
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    std::string path = dir + "/" + name;
    struct stat st;
    if (!name.starts_with(prefix) || path == keep || ::lstat(path.c_str(), &st) != 0) continue;
    if (S_ISREG(st.st_mode) && now - st.st_mtime > 3600) ::unlink(path.c_str());
  }
  ::closedir(d);
}

std::string tmp_name(const std::string& path) {
  return path + ".tmp-" + std::to_string(::getpid());
}

Status run_checked(const std::vector<std::string>& argv, Duration timeout,
                   const std::string& what) {
  SG_ASSIGN_OR_RETURN(auto res, run_command(argv, timeout));
  if (res.timed_out) return logic_error(what, argv[0] + " did not finish in time");
  if (!res.status.exited || res.status.code != 0)
    return logic_error(what, argv[0] + " failed (" + res.status.describe() + "): " + res.output);
  return {};
}

// A squashfs image of `dir` (kSquashfsOptions), written to `image`, removed if that fails.
Status make_squashfs(const std::string& dir, const std::string& image, Duration limit,
                     const std::string& what) {
  auto made = run_checked(
      {"sh", "-c", "mksquashfs \"$1\" \"$2\" " + std::string(kSquashfsOptions) + " >/dev/null",
       "sh", dir, image},
      limit, what);
  if (!made.ok()) ::unlink(image.c_str());
  return made;
}

}  // namespace

Result<GuestKernel> find_guest_kernel(const std::string& boot_dir,
                                      const std::string& modules_root) {
  DIR* d = ::opendir(boot_dir.c_str());
  if (!d) return sys_error("list guest kernels", boot_dir);
  std::string best;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.starts_with("vmlinuz-") && n.ends_with("-cloud-amd64")) {
      std::string v = n.substr(8);
      if (best.empty() || version_less(best, v)) best = v;
    }
  }
  ::closedir(d);
  if (best.empty())
    return logic_error(
        "find guest kernel",
        "no " + boot_dir +
            "/vmlinuz-*-cloud-amd64 (ci/bootstrap installs linux-image-cloud-amd64)");
  GuestKernel k{boot_dir + "/vmlinuz-" + best, best, modules_root + "/" + best};
  if (::access(k.image.c_str(), R_OK) != 0) return sys_error("read guest kernel", k.image);
  if (::access(k.modules.c_str(), R_OK) != 0)
    return sys_error("guest kernel modules (linux-image-cloud-amd64 installs them)", k.modules);
  return k;
}

std::vector<std::string> guest_module_names() {
  return {"kernel/drivers/virtio/virtio_ring.ko",
          "kernel/drivers/virtio/virtio.ko",
          "kernel/drivers/virtio/virtio_pci_legacy_dev.ko",
          "kernel/drivers/virtio/virtio_pci_modern_dev.ko",
          "kernel/drivers/virtio/virtio_pci.ko",
          "kernel/drivers/char/virtio_console.ko",
          "kernel/fs/squashfs/squashfs.ko"};
}

std::vector<std::string> guest_optional_module_names() {
  // overlay: a root with read-only binds; the network device's driver and what it needs, in
  // load order: a guest with a network device (share_host_network, test-only).
  return {"kernel/fs/overlayfs/overlay.ko", "kernel/net/core/failover.ko",
          "kernel/drivers/net/net_failover.ko", "kernel/drivers/net/virtio_net.ko"};
}

std::string guest_cache_dir() { return sandgate_cache_dir() + "/microvm"; }

void CpioWriter::entry(const std::string& path, mode_t mode, std::string_view data) {
  std::string name = path;
  while (!name.empty() && name.front() == '/') name.erase(name.begin());
  char header[111];
  std::snprintf(header, sizeof header, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
                ino_++, static_cast<unsigned>(mode), 0u, 0u, S_ISDIR(mode) ? 2u : 1u, 0u,
                static_cast<unsigned>(data.size()), 0u, 0u, 0u, 0u,
                static_cast<unsigned>(name.size() + 1), 0u);
  out_.append(header, 110);
  out_ += name;
  out_.push_back('\0');
  while (out_.size() % 4) out_.push_back('\0');
  out_.append(data);
  while (out_.size() % 4) out_.push_back('\0');
}

void CpioWriter::add_dir(const std::string& path, mode_t mode) { entry(path, S_IFDIR | mode, ""); }
void CpioWriter::add_file(const std::string& path, std::string_view data, mode_t mode) {
  entry(path, S_IFREG | mode, data);
}
void CpioWriter::add_symlink(const std::string& path, const std::string& target) {
  entry(path, S_IFLNK | 0777, target);
}
std::string CpioWriter::finish() {
  entry("TRAILER!!!", 0, "");
  return std::move(out_);
}

std::string input_key(const std::vector<std::string>& files, const std::string& version) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::string_view s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ull;
    }
    h ^= 0xff;
    h *= 1099511628211ull;
  };
  mix(version);
  for (const auto& f : files) {
    mix(f);
    struct stat st;
    if (::stat(f.c_str(), &st) != 0) {
      mix("missing");
      continue;
    }
    mix(std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
        std::to_string(st.st_mtim.tv_nsec) + ":" + std::to_string(st.st_ino));
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Result<std::vector<std::string>> elf_libraries(const std::string& exe) {
  SG_ASSIGN_OR_RETURN(auto res, run_command({"ldd", exe}));
  if (res.output.find("not found") != std::string::npos)
    return logic_error("ldd", "a shared library is missing: " + res.output, exe);
  std::vector<std::string> libs;
  if (!res.status.exited || res.status.code != 0) return libs;  // static: nothing to bring
  for (auto line : split(res.output, '\n')) {
    std::string l(line);
    auto arrow = l.find("=> ");
    std::string path = arrow != std::string::npos ? l.substr(arrow + 3) : l;
    while (!path.empty() && (path.front() == ' ' || path.front() == '\t')) path.erase(path.begin());
    path = path.substr(0, path.find(' '));
    if (!path.empty() && path[0] == '/') libs.push_back(path);
  }
  return libs;
}

Result<std::string> guest_initramfs(const std::string& cache_dir, const GuestKernel& kernel,
                                    const std::string& supervisor_exe) {
  SG_ASSIGN_OR_RETURN(auto libs, elf_libraries(supervisor_exe));
  std::vector<std::string> inputs = {supervisor_exe};
  inputs.insert(inputs.end(), libs.begin(), libs.end());
  for (const auto& m : guest_module_names()) inputs.push_back(kernel.modules + "/" + m);
  for (const auto& m : guest_optional_module_names()) inputs.push_back(kernel.modules + "/" + m);
  std::string path = cache_dir + "/initramfs-" + input_key(inputs, kInitramfsFormat) + ".cpio";
  if (::access(path.c_str(), R_OK) == 0) return path;

  SG_TRY(make_dirs(cache_dir, 0700));
  CpioWriter cpio;
  std::set<std::string> dirs;
  auto parents = [&](const std::string& file) {
    std::string at;
    const std::string dir = file.substr(1, file.rfind('/') - 1);
    for (auto part : split(dir, '/')) {
      at += "/" + std::string(part);
      if (dirs.insert(at).second) cpio.add_dir(at);
    }
  };
  for (const char* d : {"/proc", "/sys", "/dev", "/newroot", "/sandgate", "/sandgate/modules"}) {
    dirs.insert(d);
    cpio.add_dir(d);
  }
  constexpr size_t kMaxBinary = size_t{512} << 20;
  // /init without its debug info (a RelWithDebInfo supervisor is 27 MB, 1.4 MB without): the
  // guest kernel copies every byte of the initramfs out of its cpio, which under TCG is a
  // tenth of the boot. Where strip is missing or fails, the binary as it is.
  std::string stripped = tmp_name(path) + ".init";
  std::string exe;
  auto strip = run_command({"strip", "--strip-debug", "-o", stripped, supervisor_exe});
  if (strip.ok() && strip->status.exited && strip->status.code == 0) {
    auto bytes = read_file(stripped, kMaxBinary);
    if (bytes.ok()) exe = std::move(bytes).value();
  }
  ::unlink(stripped.c_str());
  if (exe.empty()) {
    SG_ASSIGN_OR_RETURN(exe, read_file(supervisor_exe, kMaxBinary));
  }
  cpio.add_file("/init", exe, 0755);
  for (const auto& lib : libs) {
    parents(lib);
    SG_ASSIGN_OR_RETURN(std::string bytes, read_file(lib, kMaxBinary));
    cpio.add_file(lib, bytes, 0755);
  }
  std::string order;
  for (const auto& m : guest_module_names()) {
    std::string name = m.substr(m.rfind('/') + 1);
    SG_ASSIGN_OR_RETURN(std::string bytes, read_file(kernel.modules + "/" + m, 64 << 20));
    cpio.add_file("/sandgate/modules/" + name, bytes, 0644);
    order += name + "\n";
  }
  cpio.add_file("/sandgate/modules/order", order);
  // Not in the order: loaded by name when a run needs one; a kernel without the file (built
  // in, or not at all) makes the agent's mount say so.
  for (const auto& m : guest_optional_module_names()) {
    auto bytes = read_file(kernel.modules + "/" + m, 64 << 20);
    if (bytes.ok()) cpio.add_file("/sandgate/modules/" + m.substr(m.rfind('/') + 1), *bytes, 0644);
  }
  std::string tmp = tmp_name(path);
  SG_TRY(write_file(tmp, cpio.finish(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  SG_TRY(rename_into_place(tmp, path));
  prune_cache(cache_dir, "initramfs-", path);
  return path;
}

// The preset "minimal" of the jail's narrowed base is the same list (base_root.h).
std::vector<std::string> guest_base_dirs() { return minimal_base_paths(); }

Result<std::string> guest_base_image(const std::string& cache_dir, uid_t uid, gid_t gid) {
  std::vector<std::string> dirs = guest_base_dirs();
  std::vector<std::string> inputs = dirs;
  for (const char* f : {"/var/lib/dpkg/status", "/etc/ld.so.cache"}) inputs.emplace_back(f);
  // The alternatives by what the image gets of them, their links (name and target), not by
  // the directory's mtime: a file made and removed there (the probe suite's base canary)
  // changes nothing the image holds, and must not make a new one.
  std::string alternatives;
  if (DIR* d = ::opendir("/etc/alternatives")) {
    std::vector<std::string> links;
    while (struct dirent* e = ::readdir(d)) {
      if (e->d_type != DT_LNK) continue;
      char target[PATH_MAX];
      ssize_t n = ::readlinkat(::dirfd(d), e->d_name, target, sizeof target - 1);
      if (n >= 0) links.push_back(std::string(e->d_name) + "=" + std::string(target, n));
    }
    ::closedir(d);
    std::sort(links.begin(), links.end());
    for (const auto& l : links) alternatives += l + ";";
  }
  std::string key = input_key(inputs, std::string(kBaseFormat) + ":" + std::to_string(uid) + ":" +
                                          std::to_string(gid) + ":" + alternatives);
  std::string path = cache_dir + "/base-" + key + ".squashfs";
  if (::access(path.c_str(), R_OK) == 0) return path;

  SG_TRY(make_dirs(cache_dir, 0700));
  std::string stage = cache_dir + "/stage-" + std::to_string(::getpid());
  SG_TRY(remove_tree(stage));
  SG_TRY(make_dirs(stage, 0755));
  auto cleanup = [&] { (void)remove_tree(stage); };
  // The tree: the jail's base links, a generated /etc, the agent's mount points.
  auto tree = make_base_tree(stage);
  if (!tree.ok()) {
    cleanup();
    return std::move(tree).error();
  }
  auto etc_binds = make_base_etc(stage, uid, gid, "/home/sandbox");
  if (!etc_binds.ok()) {
    cleanup();
    return std::move(etc_binds).error();
  }
  for (const char* d :
       {"proc", "sys", "dev", "tmp", "var/tmp", "run", "home/sandbox", "workspace", "root"})
    if (auto s = make_dirs(stage + "/" + d, 0755); !s.ok()) {
      cleanup();
      return std::move(s).error();
    }
  ::chmod((stage + "/root").c_str(), 0700);
  std::vector<std::string> binds;  // host paths, bound at the same path under the stage
  for (const auto& d : *tree)
    if (d != "/usr") binds.push_back(d);
  for (const auto& d : dirs) {
    if (auto s = make_dirs(stage + d, 0755); !s.ok()) {
      cleanup();
      return std::move(s).error();
    }
    binds.push_back(d);
  }
  binds.insert(binds.end(), etc_binds->begin(), etc_binds->end());
  // In a private mount namespace: the binds vanish with it, whatever happens.
  std::string script =
      "set -eu; stage=$1; img=$2; shift 2\n"
      "for p in \"$@\"; do mount --bind \"$p\" \"$stage$p\"; done\n"
      "mksquashfs \"$stage\" \"$img\" " +
      std::string(kSquashfsOptions) + " >/dev/null\n";
  std::string tmp = tmp_name(path);
  std::vector<std::string> argv = {"unshare", "--mount", "--propagation", "private", "sh", "-c",
                                   script,    "sh",      stage,           tmp};
  argv.insert(argv.end(), binds.begin(), binds.end());
  auto built = run_checked(argv, std::chrono::minutes(20), "build the microVM base image");
  cleanup();
  if (!built.ok()) {
    ::unlink(tmp.c_str());
    return std::move(built).error();
  }
  SG_TRY(rename_into_place(tmp, path));
  prune_cache(cache_dir, "base-", path);
  return path;
}

Status make_workspace_image(const std::string& image, const std::string& recipe,
                            uint64_t size_bytes, uid_t uid, gid_t gid, const std::string& staging,
                            const CopyLimits& limits) {
  SG_TRY(remove_tree(staging));
  if (recipe.empty()) {
    if (::mkdir(staging.c_str(), 0700) != 0) return sys_error("mkdir", staging);
  } else {
    SG_TRY(
        std::move(copy_tree(recipe, staging, uid, gid, limits)).context("copy workspace recipe"));
  }
  {
    SG_ASSIGN_OR_RETURN(UniqueFd f, open_fd(image, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (::ftruncate(f.get(), static_cast<off_t>(size_bytes)) != 0)
      return sys_error("truncate", image);
  }
  auto made = run_checked({"mkfs.ext4", "-q", "-F", "-E",
                           "root_owner=" + std::to_string(uid) + ":" + std::to_string(gid), "-L",
                           "sandgate-ws", "-d", staging, image},
                          std::chrono::minutes(5), "make the workspace image");
  (void)remove_tree(staging);
  return made;
}

Status check_guest_binds(const std::vector<BindMount>& binds) {
  for (size_t i = 0; i < binds.size(); ++i) {
    const BindMount& b = binds[i];
    const std::string step =
        "--ro-bind entry " + std::to_string(i + 1) + " (" + b.source + ":" + b.target + ")";
    const std::string& t = b.target;
    if (t.empty() || t[0] != '/' || t == "/")
      return logic_error(step, "the destination must be an absolute path below /", t);
    if (t.find('\n') != std::string::npos || t.find('\0') != std::string::npos)
      return logic_error(step, "the destination holds a newline or NUL", t);
    const std::string below_root = t.substr(1);  // outlives split's views
    for (auto part : split(below_root, '/'))
      if (part.empty() || part == "." || part == "..")
        return logic_error(step, "the destination must have no empty, '.' or '..' component", t);
    for (const char* own : {"/proc", "/sys", "/dev", "/workspace"}) {
      std::string o = own;
      if (t == o || t.rfind(o + "/", 0) == 0)
        return logic_error(step,
                           "the destination is at or below " + o +
                               ", which the guest agent mounts itself (/proc, /sys, /dev, "
                               "/workspace)",
                           t);
    }
    // Below an earlier entry, its mount point would have to be made in that read-only image;
    // an earlier one below this would be hidden by it.
    for (size_t j = 0; j < i; ++j) {
      const std::string& o = binds[j].target;
      if (t == o || t.rfind(o + "/", 0) == 0 || o.rfind(t + "/", 0) == 0)
        return logic_error(step,
                           "the destination is at, below or above that of entry " +
                               std::to_string(j + 1) + " (" + o + "); binds in a guest do not nest",
                           t);
    }
    struct stat st;
    if (b.source.empty() || ::stat(b.source.c_str(), &st) != 0)
      return std::move(sys_error("stat the source", b.source)).context_add(step);
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
      return logic_error(step, "the source must be a regular file or a directory", b.source);
  }
  return {};
}

Status make_bind_image(const std::string& image, const std::vector<BindMount>& binds,
                       const std::string& staging) {
  SG_TRY(check_guest_binds(binds));
  SG_TRY(remove_tree(staging));
  if (::mkdir(staging.c_str(), 0755) != 0) return sys_error("mkdir", staging);
  auto cleanup = [&] { (void)remove_tree(staging); };
  std::string manifest;
  for (size_t i = 0; i < binds.size(); ++i) {
    // -H: the source named follows its symlinks (the user named it), nothing below it does.
    auto copied =
        run_checked({"cp", "-a", "-H", "--", binds[i].source, staging + "/" + std::to_string(i)},
                    std::chrono::minutes(10),
                    "--ro-bind entry " + std::to_string(i + 1) + ": copy " + binds[i].source +
                        " for the guest");
    if (!copied.ok()) {
      cleanup();
      return copied;
    }
    manifest += std::to_string(i) + "\t" + binds[i].target + "\n";
  }
  if (auto s = write_file(staging + "/manifest", manifest, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                          0644);
      !s.ok()) {
    cleanup();
    return s;
  }
  // The staging directory is 0700 (made private while the copies land); the image's root is
  // the manifest's directory, read by root in the guest.
  auto made =
      make_squashfs(staging, image, std::chrono::minutes(10), "make the read-only binds' image");
  cleanup();
  if (!made.ok()) ::unlink(image.c_str());
  return made;
}

Status make_secrets_image(const std::string& image, const std::vector<Secret>& secrets, uid_t uid,
                          gid_t gid, const std::string& staging) {
  uint64_t total = 0;
  for (const auto& secret : secrets) {
    SG_TRY(check_secret_name(secret.name));
    total += secret.value.size();
  }
  SG_TRY(remove_tree(staging));
  if (::mkdir(staging.c_str(), 0700) != 0) return sys_error("mkdir", staging);
  auto cleanup = [&] { (void)remove_tree(staging); };
  for (const auto& secret : secrets) {
    std::string path = staging + "/" + secret.name;
    auto written =
        write_file(path, secret.value, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400);
    if (!written.ok() || ::chown(path.c_str(), uid, gid) != 0) {
      cleanup();
      return written.ok() ? sys_error("chown secret", path) : written;
    }
  }
  if (::chmod(staging.c_str(), 0500) != 0) {
    cleanup();
    return sys_error("chmod", staging);
  }
  if (::chown(staging.c_str(), uid, gid) != 0) {
    cleanup();
    return sys_error("chown", staging);
  }
  // The image's root is the staging directory as it is: the jail's, 0500, the sandbox user's,
  // with the secrets alone.
  auto made = make_squashfs(staging, image, std::chrono::minutes(2), "make the secrets' image");
  cleanup();
  return made;
}

}  // namespace sandgate::providers
