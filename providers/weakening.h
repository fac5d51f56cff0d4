// Test-only weakenings of the namespace provider, for `sandgate probe --self-test` alone: the
// probe suite must flag each one (mutation testing of the isolation, not of the code).
//
// Unreachable elsewhere: a provider honours them only when ProviderOptions::self_test_weakenings
// is set, which only the probe self-test does (and, outside every command, the jail benchmark's
// A/B pair for no_landlock); no other command, flag, policy or environment variable sets it,
// and create() refuses a spec that carries one otherwise.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "core/host_paths.h"
#include "core/result.h"

namespace sandgate::providers {

// What each one does in the namespaces provider (everything else stays hardened):
enum class Weakening {
  // $HOME of the launching process (its environment, not the password database) is bound
  // read-write, nosuid, nodev at the same path, and calls get HOME set to it. Calls still run
  // as uid 10001 (host id_map_base + 10001): what they can read there is what that id may.
  kMountHome,
  // Calls start from the launcher's whole environment; the jail's PATH, HOME, USER, LOGNAME,
  // SHELL, TMPDIR, LANG and SANDGATE_RUN_ID override same-named host variables.
  kPassHostEnv,
  // No new network namespace: the run is in the launcher's (in `probe`: the lab's), and the
  // jail leaves its loopback alone.
  kShareHostNetwork,
  // Calls stay uid/gid 0 of the run's user namespace (host id_map_base) with full effective,
  // permitted and bounding sets and no no_new_privs. The seccomp filter is still installed.
  kRootWithCaps,
  // No seccomp filter is installed (Seccomp: 0); privileges are still dropped.
  kNoSeccomp,
  // The workspace is <work_dir>/shared-workspace, shared by every run with this weakening,
  // made on first use (from the recipe, if any) and not removed at destroy.
  kReuseWorkspace,
  // /tmp is a bind of <work_dir>/shared-tmp (01777), shared by every run with this weakening
  // and not removed at destroy (/var/tmp stays a private tmpfs).
  kShareTmp,
  // The seccomp filter's argument rules (socket family, ioctl request, clone flags) compare
  // all 64 bits of the register, as before issue 9: a call that sets bits above the 32 the
  // kernel reads (socket((1UL << 32) | AF_VSOCK, ...)) is not refused by them.
  kSeccompFullWidthCompare,
  // No Landlock layer: no ruleset for calls, no scope for the run (as on a kernel without
  // Landlock). Every other layer stays: the mounts, the namespaces, the filter.
  kNoLandlock,
  // Every run with this weakening maps its users onto the same fixed host ids
  // (ProviderOptions::id_map_base) and its user namespace is owned by sandgate (host root),
  // as before issue 16: what the kernel counts per user (inotify instances) is one count for
  // all of them. Without it each run has its own range from the pool and owns its namespace.
  kSharedUid,
};

std::string to_string(Weakening w);  // "mount_home", "pass_host_env", ...
Result<Weakening> weakening_from_string(const std::string& name);
std::vector<Weakening> all_weakenings();
// Whether `list` carries `w`.
bool weakened(const std::vector<Weakening>& list, Weakening w);

// The directory mount_home binds: the launcher's home as its environment names it (the
// self-test points HOME at a canary home; the password database would name the real one).
// Absolute, not "/", an existing directory; otherwise an error at step "mount_home".
Result<std::string> launcher_home();

// Refuses a spec that carries weakenings unless `allowed` (ProviderOptions::self_test_weakenings);
// the error names each weakening and the provider.
Status check_weakenings_allowed(const std::vector<Weakening>& weakenings, bool allowed,
                                const std::string& provider);

// The fixed host directories of the sharing weakenings, <work_dir>/<name>. Each is recorded in
// the state directory as a run of that name owned by the process that last used it, so it
// outlives every run (that is the weakening) and `sandgate gc` removes it once that process is
// gone; remove_shared_dirs() removes it at once (the self-test calls it when it is done).
inline constexpr char kSharedWorkspaceDir[] = "shared-workspace";  // reuse_workspace
inline constexpr char kSharedTmpDir[] = "shared-tmp";              // share_tmp

// Records <work_dir>/<name>, then makes it if it is missing: a copy of `recipe` (a directory;
// empty: none) or an empty directory, owned by uid:gid with `mode`. An existing one is reused
// as it is. Returns its path.
Result<std::string> prepare_shared_dir(const HostPaths& paths, const std::string& name,
                                       const std::string& recipe, uid_t uid, gid_t gid,
                                       mode_t mode);
// Removes both shared directories and their records. Precondition: no run uses them.
Status remove_shared_dirs(const HostPaths& paths);

}  // namespace sandgate::providers
