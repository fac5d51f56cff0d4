// The read-only base every provider that assembles a root offers (the namespace jail, the
// podman provider's --rootfs): the host's /usr and its merged-/usr links, a generated /etc with
// the sandbox user, and the few host /etc files programs need to start. One definition, so
// "the same read-only base as the jail" stays true by construction.
//
// Only the tree is made here; how the host paths get in (a read-only bind mount in the jail,
// a read-only volume in Podman) is the provider's.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "core/result.h"

namespace sandgate::providers {

// Recreates the host's base links under `root` (on a merged-/usr host /bin, /lib, ... are
// symlinks into /usr) and makes an empty directory for each real base directory. Returns the
// host directories to expose read-only at the same path.
Result<std::vector<std::string>> make_base_tree(const std::string& root);

// Writes `root`/etc: passwd, group and nsswitch.conf generated for uid/gid (home `home`), never
// copied from the host; makes a mount point for each host /etc file programs need (the dynamic
// loader's cache, the alternatives links) and returns those host paths, to expose read-only.
Result<std::vector<std::string>> make_base_etc(const std::string& root, uid_t uid, gid_t gid,
                                               const std::string& home);

}  // namespace sandgate::providers
