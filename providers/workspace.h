// The run's workspace, made from its recipe: the first half of the run contract ("recipe in"),
// the same for every provider built on SupervisedEnvironment.
//
// A copy-on-write view where the host allows it: an overlayfs whose lower layer is the recipe
// (an idmapped, read-only, noatime clone of its mount, so the recipe's owner appears as the
// sandbox user and the host's copy is never written) and whose upper layer is the run's own.
// Starting a run then costs one walk of the recipe's directories, not a copy of its bytes. The
// walk finds what must not reach a sandbox, FIFOs, sockets and device nodes (overlayfs would
// hand out the recipe's own inode: a FIFO or a socket is a channel to host processes), and
// hides each behind a whiteout in the upper layer. Where overlay is not possible (the kernel,
// the filesystem, a recipe whose directories have several owners) the recipe is copied file by
// file (core/files.h copy_tree), and the run says which was used and why.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/fd.h"
#include "core/result.h"
#include "core/state.h"
#include "providers/recipe_mode.h"

namespace sandgate::providers {

// What a walk of the recipe found, without reading a file or stat'ing one: entry types come
// from the directory listing (d_type), owners from the directories the walk opens anyway.
struct RecipeSurvey {
  uint64_t entries = 0;             // the root and everything below it
  std::vector<std::string> hidden;  // FIFOs, sockets, device nodes: paths relative to the root
  uid_t owner = 0;                  // of the root directory
  gid_t group = 0;
  std::string other_owner;  // a directory owned by someone else (""): why not overlay
};
// Fails past `max_entries` (EnvSpec::recipe_limits): a recipe is data someone else made.
Result<RecipeSurvey> survey_recipe(const std::string& recipe, uint64_t max_entries);

// Where an overlay workspace lives.
struct OverlayLayout {
  std::string upper;   // the run's own layer: every write of the run lands here
  std::string work;    // overlayfs's work directory, same filesystem as upper
  std::string merged;  // the workspace: the mount point
  // Set (both): upper and work are these existing, empty directories, given to overlayfs by
  // descriptor (Linux 6.13), and `upper`/`work` only name them in errors. A workspace
  // filesystem's layers live on a mount that is never attached to the host's tree, so the
  // overlay's mount options name "/upper", not a host path.
  int upper_fd = -1;
  int work_fd = -1;
};

// Mounts `recipe` copy-on-write at layout.merged for the host ids uid:gid (the sandbox user as
// the host sees it; the recipe's owner is mapped to it). The mount is recorded in `state`
// before it is made; upper, work and merged must not exist and are created under a directory
// `state` already records (unless layout's descriptors are set: then upper and work exist).
// Fails (nothing mounted) where the kernel or the filesystems cannot.
Status mount_overlay_workspace(const std::string& recipe, const RecipeSurvey& survey,
                               const OverlayLayout& layout, uid_t uid, gid_t gid, RunState& state);

// A per-run filesystem for the workspace (EnvSpec::workspace_size): an ext4 image of its own,
// so that the workspace's mount names no host path (/proc/self/mountinfo shows the loop
// device and "/", where a bind shows the host directory and an overlay its upperdir), and a
// run that fills its workspace meets ENOSPC at the image's size instead of filling the host's
// disk. The smallest and largest sizes accepted:
inline constexpr uint64_t kMinWorkspaceSize = uint64_t{16} << 20;
inline constexpr uint64_t kMaxWorkspaceSize = uint64_t{16} << 40;

struct WorkspaceFilesystem {
  UniqueFd mount;      // the filesystem's root mount: detached, nosuid, nodev
  std::string device;  // /dev/loopN
};

// Makes `image` (must not exist; a sparse file of `size` bytes, in a directory `state`
// records, so the image goes with the run), formats it ext4 (mkfs.ext4: no journal, no
// reserved blocks, inode tables left to be zeroed never: the image is sparse and reads as
// zeros), attaches it to a free loop device with autoclear (LOOP_CTL_GET_FREE,
// LOOP_CONFIGURE: the device detaches itself once the filesystem on it is unmounted, or at
// once if sandgate dies before mounting it), recorded in `state` before it is attached, and
// mounts it detached (fsmount, never attached to any tree: the caller attaches it or builds on
// it). The root is uid:gid, mode 0700, empty (no lost+found).
Result<WorkspaceFilesystem> make_workspace_filesystem(const std::string& image, uint64_t size,
                                                      uid_t uid, gid_t gid, RunState& state);

}  // namespace sandgate::providers
