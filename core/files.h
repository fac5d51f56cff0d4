// Directory helpers with the safety sandgate needs when it deletes what it made.
#pragma once

#include <sys/types.h>

#include <string>

#include "core/result.h"

namespace sandgate {

// mkdir -p with the mode applied to every directory it creates.
Status make_dirs(const std::string& path, mode_t mode = 0755);
// rm -rf that never crosses into another filesystem (a bind mount left by a crashed run stays
// untouched, its mount point is reported as EBUSY) and never follows symlinks. ENOENT is success.
Status remove_tree(const std::string& path);
// Copies a directory tree (files, directories, symlinks; modes kept) into dst, which must not
// exist yet, and chowns everything it creates to uid:gid.
Status copy_tree(const std::string& src, const std::string& dst, uid_t uid, gid_t gid);
// Recursively chowns without following symlinks.
Status chown_tree(const std::string& path, uid_t uid, gid_t gid);

}  // namespace sandgate
