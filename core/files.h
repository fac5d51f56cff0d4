// Directory helpers with the safety sandgate needs when it deletes what it made or copies what
// it was given.
//
// Everything that comes out of a sandbox is hostile (docs/DESIGN.md idea 10): a tree may be 100,000
// levels deep, millions of entries wide, or change while it is walked. remove_tree and
// copy_tree therefore walk without recursion, hold a bounded number of descriptors whatever the
// depth (the directory they are in, not one per level), and build a path only for an error.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "core/result.h"

namespace sandgate {

// mkdir -p with the mode applied to every directory it creates.
Status make_dirs(const std::string& path, mode_t mode = 0755);

// rm -rf that never crosses into another filesystem (a bind mount left by a crashed run stays
// untouched, its mount point is reported as EBUSY) and never follows symlinks. ENOENT is success.
// Keeps going after a failure and reports the first, except when a directory it climbs back to
// is not the one it came down through (the tree was moved under it): then it stops (ESTALE)
// rather than delete in the wrong place.
Status remove_tree(const std::string& path);

// What copy_tree may copy before it gives up: a recipe is data someone else made.
struct CopyLimits {
  uint64_t max_bytes = uint64_t{8} << 30;  // apparent sizes of regular files, holes included
  uint64_t max_entries = 500'000;          // every entry seen, the root and skipped ones too
};

// Copies the directory `src` (symlinks in the path are followed: the caller named it) into
// `dst`, which must not exist yet. Below src nothing is followed: files, directories and
// symlinks are copied as what they are when opened, modes kept but setuid/setgid dropped from
// files; devices, fifos and sockets are skipped; holes stay holes. Everything made is chowned to
// uid:gid. Fails, naming the limit, when the tree is larger than `limits`; on any failure
// nothing it made at dst is left.
Status copy_tree(const std::string& src, const std::string& dst, uid_t uid, gid_t gid,
                 const CopyLimits& limits = {});

}  // namespace sandgate
