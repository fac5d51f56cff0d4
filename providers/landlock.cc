#include "providers/landlock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace sandgate::providers::landlock {
namespace {

// The syscall ABI structs (linux/landlock.h). Declared here, not taken from the installed
// header: it may predate handled_access_net and scoped (ABI 4 and 6) and the network rule.
// The kernel reads only the size it is given, so the full struct works on every ABI once the
// rights the kernel does not know are masked out (best_effort).
struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;  // ABI 4
  uint64_t scoped;              // ABI 6
};
struct __attribute__((packed)) PathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
};
struct NetPortAttr {
  uint64_t allowed_access;
  uint64_t port;
};
constexpr unsigned kCreateRulesetVersion = 1U << 0;  // LANDLOCK_CREATE_RULESET_VERSION
constexpr int kRulePathBeneath = 1;                  // LANDLOCK_RULE_PATH_BENEATH
constexpr int kRuleNetPort = 2;                      // LANDLOCK_RULE_NET_PORT (ABI 4)

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444  // the same number on every architecture (5.13)
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif

constexpr int kNewestAbi = 7;

}  // namespace

Rights known_rights(int abi) {
  Rights r;
  if (abi <= 0) return r;
  if (abi > kNewestAbi) abi = kNewestAbi;
  // landlock.rst, "Backward and forward compatibility": each case removes what that ABI lacks.
  r.fs = (fs::kMakeSym << 1) - 1;  // ABI 1: bits 0..12
  if (abi >= 2) r.fs |= fs::kRefer;
  if (abi >= 3) r.fs |= fs::kTruncate;
  if (abi >= 4) r.net = net::kBindTcp | net::kConnectTcp;
  if (abi >= 5) r.fs |= fs::kIoctlDev;
  if (abi >= 6) r.scoped = scope::kAbstractUnixSocket | scope::kSignal;
  return r;
}

RulesetSpec best_effort(RulesetSpec spec, int abi) {
  Rights known = known_rights(abi);
  spec.handled.fs &= known.fs;
  spec.handled.net &= known.net;
  spec.handled.scoped &= known.scoped;
  // REFER is always denied at ABI 1 and cannot be named there (EINVAL).
  if (abi == 1) spec.handled.fs &= ~fs::kRefer;
  std::vector<PathRule> paths;
  for (auto& p : spec.paths) {
    p.access &= spec.handled.fs;
    if (p.access) paths.push_back(std::move(p));
  }
  spec.paths = std::move(paths);
  std::vector<PortRule> ports;
  for (auto& p : spec.ports) {
    p.access &= spec.handled.net;
    if (p.access) ports.push_back(p);
  }
  spec.ports = std::move(ports);
  return spec;
}

Result<int> abi_version() {
  long v = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, kCreateRulesetVersion);
  if (v < 0) return sys_error("landlock_create_ruleset (version)");
  return static_cast<int>(v);
}

bool means_unsupported(const Error& e) { return e.err == ENOSYS || e.err == EOPNOTSUPP; }

Result<UniqueFd> build(const RulesetSpec& spec) {
  RulesetAttr attr = {spec.handled.fs, spec.handled.net, spec.handled.scoped};
  // The whole struct on every kernel: one that knows fewer fields accepts a larger size as long
  // as the bytes it does not know are zero (copy_struct_from_user), which best_effort ensured.
  long fd = ::syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
  if (fd < 0) return sys_error("landlock_create_ruleset");
  UniqueFd ruleset(static_cast<int>(fd));
  for (const auto& rule : spec.paths) {
    int dir = ::open(rule.path.c_str(), O_PATH | O_CLOEXEC);
    if (dir < 0) {
      if (errno == ENOENT) continue;  // nothing there to allow
      return sys_error("open for a landlock rule", rule.path);
    }
    UniqueFd parent(dir);
    struct stat st;
    if (::fstat(dir, &st) != 0) return sys_error("fstat for a landlock rule", rule.path);
    PathBeneathAttr beneath = {S_ISDIR(st.st_mode) ? rule.access : rule.access & fs::kFileRights,
                               parent.get()};
    if (beneath.allowed_access == 0) continue;
    if (::syscall(SYS_landlock_add_rule, ruleset.get(), kRulePathBeneath, &beneath, 0) != 0)
      return sys_error("landlock_add_rule (path beneath)", rule.path);
  }
  for (const auto& rule : spec.ports) {
    NetPortAttr port = {rule.access, rule.port};
    if (::syscall(SYS_landlock_add_rule, ruleset.get(), kRuleNetPort, &port, 0) != 0)
      return sys_error("landlock_add_rule (TCP port)", "port " + std::to_string(rule.port));
  }
  return ruleset;
}

Status restrict_self(int ruleset_fd) {
  if (::syscall(SYS_landlock_restrict_self, ruleset_fd, 0) != 0)
    return sys_error("landlock_restrict_self");
  return {};
}

std::string describe(int abi) {
  if (abi <= 0) return "nothing";
  std::string s = "filesystem";
  if (abi >= 3) s += " (with truncate)";
  if (abi >= 4) s += ", TCP bind/connect";
  if (abi >= 5) s += ", device ioctls";
  if (abi >= 6) s += ", scopes (abstract unix sockets, signals)";
  return s;
}

std::vector<Check> doctor_checks(const HostPaths& paths) {
  std::vector<Check> out;
  auto abi = abi_version();
  if (abi.ok()) {
    out.push_back(check_ok("landlock", "ABI " + std::to_string(*abi) +
                                           ": the jail's calls are held to " + describe(*abi) +
                                           " (capability proc.landlock)"));
  } else if (abi.error().err == EOPNOTSUPP) {
    out.push_back(
        check_failed("landlock",
                     "built into this kernel but not enabled: add landlock to the lsm= "
                     "boot parameter (proc.landlock is absent; the jail runs without it)"));
  } else if (abi.error().err == ENOSYS) {
    out.push_back(
        check_failed("landlock",
                     "this kernel has no Landlock (CONFIG_SECURITY_LANDLOCK, Linux 5.13+): "
                     "proc.landlock is absent; the jail runs without it"));
  } else {
    out.push_back(check_failed("landlock", abi.error().message()));
  }
  // securityfs is often not mounted; when it is, it names every active LSM.
  std::string lsm_path = paths.sys + "/kernel/security/lsm";
  auto lsm = read_file(lsm_path);
  if (lsm.ok()) {
    std::string list = *lsm;
    while (!list.empty() && (list.back() == '\n' || list.back() == '\0')) list.pop_back();
    bool listed = ("," + list + ",").find(",landlock,") != std::string::npos;
    out.push_back(Check{"active LSMs", !abi.ok() || listed,
                        list + " (" + lsm_path + ")" +
                            (abi.ok() && !listed ? ": landlock answers but is not listed" : "")});
  } else {
    out.push_back(
        check_ok("active LSMs", lsm_path + " unreadable (securityfs not mounted: "
                                           "mount -t securityfs securityfs /sys/kernel/security)"));
  }
  return out;
}

}  // namespace sandgate::providers::landlock
