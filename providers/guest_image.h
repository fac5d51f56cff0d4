// What a microVM boots (providers/microvm.h): the distribution's kernel, an initramfs sandgate
// builds around its supervisor binary, a read-only base image and the run's workspace image.
//
// The initramfs and the base image are built once and cached under the cache directory,
// content-addressed: the file name carries a hash of everything that went in (paths, sizes,
// modification times, the format version), so a changed input makes a new file and the old
// one is never used again. Builds go to a temporary name and are renamed into place.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/files.h"
#include "core/result.h"
#include "providers/provider.h"

namespace sandgate::providers {

// The guest kernel: the newest /boot/vmlinuz-*-cloud-amd64 (Debian's linux-image-cloud-amd64,
// which has ext4 and NVMe built in and virtio as modules), and its modules directory.
struct GuestKernel {
  std::string image;    // /boot/vmlinuz-<version>
  std::string version;  // 6.1.0-57-cloud-amd64
  std::string modules;  // /lib/modules/<version>
};
Result<GuestKernel> find_guest_kernel(const std::string& boot_dir = "/boot",
                                      const std::string& modules_root = "/lib/modules");

// The modules the agent loads, in dependency order, for virtio-serial over PCI.
std::vector<std::string> guest_module_names();
// Modules the initramfs carries that the agent loads only when a run needs them (overlayfs,
// for the mount points of read-only binds): each costs boot time under TCG.
std::vector<std::string> guest_optional_module_names();

// Where images are cached: $SANDGATE_CACHE_DIR, else /var/cache/sandgate (not under the work
// directory, whose unrecorded entries `sandgate gc` removes).
std::string guest_cache_dir();

// A newc cpio archive, uncompressed (TCG decompresses slowly; QEMU loads it as is).
class CpioWriter {
 public:
  void add_dir(const std::string& path, mode_t mode = 0755);
  void add_file(const std::string& path, std::string_view data, mode_t mode = 0644);
  void add_symlink(const std::string& path, const std::string& target);
  std::string finish();  // appends the trailer and returns the archive

 private:
  void entry(const std::string& path, mode_t mode, std::string_view data);
  std::string out_;
  uint32_t ino_ = 1;
};

// FNV-1a 64 over each input's path, size, mtime and inode, and the format version: the cache
// key. Missing files are part of the key as missing.
std::string input_key(const std::vector<std::string>& files, const std::string& version);

// The shared libraries ldd lists for an ELF file (the loader included).
Result<std::vector<std::string>> elf_libraries(const std::string& exe);

// The initramfs: the supervisor binary as /init with its libraries at their host paths, and
// the kernel modules the agent loads (sandgate/modules/ + order). Returns its cached path.
Result<std::string> guest_initramfs(const std::string& cache_dir, const GuestKernel& kernel,
                                    const std::string& supervisor_exe);

// The read-only base: a squashfs image of the host's userland (the same programs and libraries
// the namespace jail shows, see guest_base_dirs()) with a generated /etc for uid/gid and empty
// mount points for the agent. Built with `mksquashfs` in a private mount namespace where the
// host directories are bound into a staging tree: no copy on the host, no loop mount.
Result<std::string> guest_base_image(const std::string& cache_dir, uid_t uid, gid_t gid);
// The host directories the base image carries (a subset of the jail's /usr: the whole /usr is
// several GiB of editors, SDKs and documentation that an image built per host update would
// copy each time).
std::vector<std::string> guest_base_dirs();

// The run's workspace: an ext4 image of `size_bytes` (sparse) at `image`, holding a copy of
// `recipe` (empty: none) owned by uid:gid inside. `staging` is a scratch directory (removed).
Status make_workspace_image(const std::string& image, const std::string& recipe,
                            uint64_t size_bytes, uid_t uid, gid_t gid, const std::string& staging,
                            const CopyLimits& limits);

// Read-only binds (--ro-bind) in a guest: the host copies each source into one image, the
// agent bind-mounts each entry at its destination. A destination must be absolute, without
// empty, "." or ".." components or a newline, and not "/" nor at or below what the agent
// mounts itself (/proc, /sys, /dev, /workspace), nor at, below or above another entry's; a
// source must be a file or a directory.
// The error names the entry ("--ro-bind entry 2 (SRC:DST)").
Status check_guest_binds(const std::vector<BindMount>& binds);

// The image of `binds` (checked first): entry i is binds[i].source copied as it is (`cp -a`:
// modes, setuid bits and owners kept, symlinks below it copied as links) at /i, and /manifest
// lists "i<TAB>destination" a line; a squashfs image, like the base. `staging` is a scratch
// directory (removed). The agent mounts it read-only, nosuid and nodev (guest_agent.cc).
Status make_bind_image(const std::string& image, const std::vector<BindMount>& binds,
                       const std::string& staging);

// The run's secrets as a small squashfs image whose root is mode 0500 and holds one
// 0400 file per secret, all owned by uid:gid inside; the agent mounts it read-only at
// /run/secrets. `image` and `staging` belong in a memory-backed directory of the run's own (the
// caller's tmpfs): a secret is never written to a disk. `staging` is removed.
Status make_secrets_image(const std::string& image, const std::vector<Secret>& secrets, uid_t uid,
                          gid_t gid, const std::string& staging);

}  // namespace sandgate::providers
