// Landlock (Documentation/userspace-api/landlock.rst): an unprivileged LSM a process uses to
// restrict itself and everything it later forks. The namespace jail uses it as a second layer
// beneath its mounts and namespaces: calls read and execute the jail's root, write only where
// the jail means them to, make no TCP connection and bind no TCP port outside the run's
// allowlist, and the run's processes neither reach abstract unix sockets nor signal processes
// outside the run.
//
// A small ruleset builder over the raw syscalls (no liblandlock), best effort as the kernel
// documentation shows it: the highest ABI the kernel knows is queried, and every access right
// it does not know is masked out of the ruleset before it is built, so one rule list works on
// every kernel from 5.13 (ABI 1) on. What each ABI adds:
//   1 (5.13) filesystem access;     2 (5.19) FS_REFER (rename/link across directories);
//   3 (6.2)  FS_TRUNCATE;           4 (6.7)  TCP bind and connect by port;
//   5 (6.10) FS_IOCTL_DEV;          6 (6.12) scopes: abstract unix sockets, signals;
//   7 (6.15) audit-log flags of landlock_restrict_self (no new right: nothing to mask).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/fd.h"
#include "core/host_paths.h"
#include "core/result.h"

namespace sandgate::providers::landlock {

// The access rights (linux/landlock.h, "Filesystem flags", "Network flags", "Scope flags").
// Defined here because the installed uapi header may predate them (this project's build
// hosts' header stops at ABI 2); the values are the kernel's ABI and never change.
namespace fs {
inline constexpr uint64_t kExecute = 1ULL << 0;
inline constexpr uint64_t kWriteFile = 1ULL << 1;
inline constexpr uint64_t kReadFile = 1ULL << 2;
inline constexpr uint64_t kReadDir = 1ULL << 3;
inline constexpr uint64_t kRemoveDir = 1ULL << 4;
inline constexpr uint64_t kRemoveFile = 1ULL << 5;
inline constexpr uint64_t kMakeChar = 1ULL << 6;
inline constexpr uint64_t kMakeDir = 1ULL << 7;
inline constexpr uint64_t kMakeReg = 1ULL << 8;
inline constexpr uint64_t kMakeSock = 1ULL << 9;
inline constexpr uint64_t kMakeFifo = 1ULL << 10;
inline constexpr uint64_t kMakeBlock = 1ULL << 11;
inline constexpr uint64_t kMakeSym = 1ULL << 12;
inline constexpr uint64_t kRefer = 1ULL << 13;     // ABI 2
inline constexpr uint64_t kTruncate = 1ULL << 14;  // ABI 3
inline constexpr uint64_t kIoctlDev = 1ULL << 15;  // ABI 5
// The rights that apply to a file (not only to a directory): a path rule on a non-directory
// may grant only these, or landlock_add_rule is EINVAL.
inline constexpr uint64_t kFileRights = kExecute | kWriteFile | kReadFile | kTruncate | kIoctlDev;
}  // namespace fs
namespace net {
inline constexpr uint64_t kBindTcp = 1ULL << 0;     // ABI 4
inline constexpr uint64_t kConnectTcp = 1ULL << 1;  // ABI 4
}  // namespace net
namespace scope {
inline constexpr uint64_t kAbstractUnixSocket = 1ULL << 0;  // ABI 6
inline constexpr uint64_t kSignal = 1ULL << 1;              // ABI 6
}  // namespace scope

// Handled (deny-by-default) rights of a ruleset, one bitmask per kind.
struct Rights {
  uint64_t fs = 0;
  uint64_t net = 0;
  uint64_t scoped = 0;
  bool operator==(const Rights&) const = default;
};

// Every right ABI `abi` knows (abi <= 0: none; above the newest this file knows: the newest).
Rights known_rights(int abi);

// Access beneath one path (as the applying process sees it).
struct PathRule {
  std::string path;
  uint64_t access = 0;
};
// TCP ports a ruleset still allows (net rights handled, ABI >= 4).
struct PortRule {
  uint16_t port = 0;
  uint64_t access = 0;  // net::kBindTcp and/or net::kConnectTcp
};

struct RulesetSpec {
  Rights handled;
  std::vector<PathRule> paths;
  std::vector<PortRule> ports;
};

// The spec as ABI `abi` can enforce it (the kernel doc's best-effort pattern): handled rights
// and every rule's access masked to what the ABI knows; a rule left with no access, or a port
// rule where the ABI handles no network, is dropped. ABI 1 also drops FS_REFER from the
// handled set (it cannot be handled there: linking and renaming across directories are then
// always denied, which is ABI 1's own behaviour).
RulesetSpec best_effort(RulesetSpec spec, int abi);

// The kernel's Landlock ABI: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION).
// ENOSYS: built without Landlock; EOPNOTSUPP: built in but not enabled (not in lsm=).
Result<int> abi_version();
// Whether an error from abi_version() or build() means "this kernel has no Landlock".
bool means_unsupported(const Error& e);

// Builds the ruleset (call best_effort first; build does not mask). A path that does not exist
// is skipped (nothing there to allow); a path rule on a non-directory keeps only
// fs::kFileRights. Errors name the syscall and the path.
Result<UniqueFd> build(const RulesetSpec& spec);

// landlock_restrict_self: this thread (and what it forks or execs from now on) is held to the
// ruleset. Precondition: no_new_privs is set, or the caller has CAP_SYS_ADMIN in its user
// namespace (landlock.rst, "Enforcing a ruleset").
Status restrict_self(int ruleset_fd);

// For `sandgate doctor`: the ABI from a real landlock_create_ruleset call and what it enforces
// here, and the active LSMs from securityfs (<sys>/kernel/security/lsm) when it is mounted.
std::vector<Check> doctor_checks(const HostPaths& paths);

// What ABI `abi` enforces, in words: "filesystem, TCP bind/connect, scopes (abstract unix
// sockets, signals)".
std::string describe(int abi);

}  // namespace sandgate::providers::landlock
