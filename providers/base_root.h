// The read-only base every provider that assembles a root offers (the namespace jail, the
// podman provider's --rootfs): by default the host's /usr and its merged-/usr links, or a
// narrowed list of host paths (EnvSpec::base_paths: the policy's base.allow, `--base-path`);
// a generated /etc with the sandbox user, and the few host /etc files programs need to start.
// One definition, so "the same read-only base as the jail" stays true by construction.
//
// Only the tree is made here; how the host paths get in (a read-only bind mount in the jail,
// a read-only volume in Podman) is the provider's.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "core/fd.h"
#include "core/result.h"

namespace sandgate::providers {

// The host directories the default base binds: the real directories among /usr, /bin, /sbin,
// /lib, /lib32, /lib64, /libx32 (on a merged-/usr host, /usr alone; the rest are links).
std::vector<std::string> default_base_dirs();

// The preset "minimal": what programs need to start and a shell, coreutils, perl and python
// need to run, and no more of /usr (no /usr/share beyond perl and zoneinfo, no /usr/local/etc,
// no SDK under /usr/lib): /usr/bin, /usr/sbin, /usr/libexec, /usr/lib/x86_64-linux-gnu,
// /usr/lib64, /usr/lib/python3*, /usr/lib/locale, /usr/share/perl5, /usr/share/zoneinfo,
// /usr/local/bin, /usr/local/lib, those that exist. The microVM's base image is made of the
// same list. A C toolchain needs /usr/lib/gcc and /usr/include besides.
std::vector<std::string> minimal_base_paths();

// Checks a narrowed base as given (`field` names where it came from in errors: "--base-path",
// "base.allow") and resolves it: each entry is an absolute path to an existing directory or
// file, or the preset "minimal"; each is resolved (realpath: /bin becomes /usr/bin on a
// merged-/usr host), and an entry inside another is dropped (the outer bind carries it).
// Refused: "/" (the whole host), and the paths the jail makes its own (/etc, /proc, /sys,
// /dev, /run, /tmp, /var/tmp, /workspace and what is under them). An empty list stays empty
// (the default base).
Result<std::vector<std::string>> resolve_base_paths(const std::vector<std::string>& entries,
                                                    const std::string& field);

// Recreates the host's base links under `root` (on a merged-/usr host /bin, /lib, ... are
// symlinks into /usr) and makes a mount point for each path of the base: default_base_dirs()
// when `base_paths` is empty, else `base_paths` (resolved by resolve_base_paths). Returns the
// host paths to expose read-only at the same path.
Result<std::vector<std::string>> make_base_tree(const std::string& root,
                                                const std::vector<std::string>& base_paths = {});

// Whether make_base_etc copies the alternatives links itself, or leaves `root`/etc/alternatives
// empty for the caller's copy_alternatives (a provider that can do it while its runtime starts).
enum class Alternatives { kCopy, kLeaveEmpty };

// Writes `root`/etc: passwd, group and nsswitch.conf generated for uid/gid (home `home`), never
// copied from the host; the host's /etc/alternatives links (copy_alternatives), unless
// kLeaveEmpty; makes a mount point for each host /etc file programs need (the dynamic loader's
// cache) and returns those host paths, to expose read-only.
Result<std::vector<std::string>> make_base_etc(const std::string& root, uid_t uid, gid_t gid,
                                               const std::string& home,
                                               Alternatives alternatives = Alternatives::kCopy);

// Copies the symlinks of the host's /etc/alternatives into `root`/etc/alternatives (links only:
// any other file there stays outside; nothing when the host has none). A few hundred links (490
// on the build host, 3-5 ms): safe to run on a thread of its own, it touches nothing but `root`.
Status copy_alternatives(const std::string& root);

// sandgate's cache directory: $SANDGATE_CACHE_DIR (absolute), else /var/cache/sandgate.
std::string sandgate_cache_dir();

// The symlinks of `source` (links only, as copy_alternatives) as a read-only erofs image in
// `cache_dir`, made with `mkfs_erofs` once per state of `source` (its inode, mtime and ctime name
// the image: adding, removing or replacing a link changes them) and kept: the next process
// mounts it in about 0.2 ms where copying the links into a tmpfs took 3.5 ms of CPU. Renamed
// into place whole; images of earlier states are removed an hour after they were replaced (a
// mount holds its file open). Refused: a cache directory, its parent or an image not owned by
// root or writable by others; a source that changed while its links were copied.
Result<std::string> alternatives_image(const std::string& source, const std::string& cache_dir,
                                       const std::string& mkfs_erofs);

// `image` mounted, attached nowhere: erofs read from the file itself (Linux 6.12,
// EROFS_FS_BACKED_BY_FILE), read-only by construction, and ro, nosuid, nodev, noexec.
Result<UniqueFd> mount_alternatives_image(const std::string& image);

// The same links, made once per process into a mount of their own that the jail attaches a
// clone of (attach_shared_alternatives) instead of copying them for every run: a clone and a
// move_mount take about 10 us where the copy took 3-5 ms of each run's set-up.
// - The erofs image of alternatives_image in $SANDGATE_CACHE_DIR/alternatives when mkfs.erofs
//   is installed and the kernel mounts an image from a file; else a tmpfs the links are copied
//   into. Either is made with fsmount(2) and attached nowhere, so nothing is left to clean up
//   but the cached image: the kernel frees the mount with its last descriptor, also when
//   sandgate is killed.
// - Read-only down to its superblock: a run's root may clear its clone's read-only flag, but
//   only the superblock's owner (the host's user namespace) could make the links writable, and
//   every run sees these very inodes. nosuid, nodev, noexec (the links' targets are elsewhere).
// - Made again when the host's directory has changed since (inode, mtime, ctime); the mount
//   a run has attached stays as it was.
// nullptr: the host has no /etc/alternatives. An error (logged once, then returned again):
// this kernel cannot clone a mount that is attached nowhere (open_tree(2) can since Linux
// 6.15); the jail then copies the links.
Result<std::shared_ptr<const UniqueFd>> shared_alternatives_mount();

// Attaches a clone of `mount` (shared_alternatives_mount) over `root`/etc/alternatives, which
// must exist. The caller needs CAP_SYS_ADMIN over its mount namespace's user namespace.
Status attach_shared_alternatives(int mount, const std::string& root);

}  // namespace sandgate::providers
