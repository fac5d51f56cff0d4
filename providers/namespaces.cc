#include "providers/namespaces.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "core/fd.h"
#include "core/log.h"
#include "providers/base_root.h"
#include "providers/egress_link.h"
#include "providers/landlock.h"
#include "providers/proc_views.h"
#include "providers/seccomp_policy.h"
#include "providers/supervised_environment.h"

extern char** environ;

namespace sandgate::providers {

const ProviderInfo& NamespacesProvider::static_info() {
  static const ProviderInfo info{
      "namespaces",
      "namespace jail: user/mount/pid/net/ipc/uts/cgroup namespaces, read-only base, seccomp, "
      "Landlock",
      /*unsafe=*/false,
      {Capability::kFsIsolated, Capability::kFsReadonlyBase, Capability::kNetNone,
       Capability::kNetEgressPolicy, Capability::kCredsScrubbedEnv, Capability::kProcPidNs, Capability::kProcUserNs,
       Capability::kProcSeccomp, Capability::kProcNoNewPrivs, Capability::kProcNoCaps,
       Capability::kIpcIsolated, Capability::kEphemeralWorkspace}};
  return info;
}

Result<std::unique_ptr<Provider>> NamespacesProvider::make(const ProviderOptions& options) {
  return std::unique_ptr<Provider>(new NamespacesProvider(options, landlock_abi()));
}

int NamespacesProvider::landlock_abi() {
  // The jail runs on this very kernel: its answer here is the jail's.
  auto abi = landlock::abi_version();
  return abi.ok() ? *abi : 0;
}

NamespacesProvider::NamespacesProvider(ProviderOptions options, int landlock_abi)
    : options_(std::move(options)), info_(static_info()) {
  // Declared only where the jail really applies it: a kernel without Landlock runs the jail
  // without that layer, and a policy that requires proc.landlock refuses the provider.
  if (landlock_abi > 0) info_.capabilities.insert(Capability::kProcLandlock);
}

Status NamespacesProvider::available() const {
  if (::geteuid() != 0)
    return logic_error("namespaces provider", "needs root to map user ids and assemble the jail");
  auto max = read_file(options_.paths.proc + "/sys/user/max_user_namespaces");
  if (max.ok() && std::atoi(max->c_str()) == 0)
    return logic_error("namespaces provider", "user namespaces are disabled (user.max_user_namespaces = 0)");
  return {};
}

void NamespacesProvider::warm_up() {
  // Without root no run is made, and the alternatives mount would fail and say so.
  if (!available().ok()) return;
  (void)compiled_seccomp_program_fd({});
  (void)shared_alternatives_mount();
}

Result<std::unique_ptr<Environment>> NamespacesProvider::create(const EnvSpec& requested) {
  if (!requested.image.empty())
    return logic_error("create environment",
                       "the namespaces provider has no images (--image is for podman)",
                       requested.image);
  SG_TRY(available());
  SG_TRY(
      check_weakenings_allowed(requested.weakenings, options_.self_test_weakenings, "namespaces"));
  // The run's own host id range, unless a test-only weakening shares one: shared_uid (that is
  // the weakening) and reuse_workspace (its shared workspace belongs to one fixed id).
  const bool shared_ids = weakened(requested.weakenings, Weakening::kSharedUid) ||
                          weakened(requested.weakenings, Weakening::kReuseWorkspace);
  SG_ASSIGN_OR_RETURN(RunIds ids, assign_run_ids(options_, requested, shared_ids));
  EnvSpec spec = requested;
  spec.run_id = ids.run_id;
  const uid_t base = ids.base;
  if (spec.uid == 0 || spec.uid >= 65536 || spec.gid >= 65536)
    return logic_error("create environment", "uid/gid inside must be in 1..65535 (got " +
                                                 std::to_string(spec.uid) + ")");
  const auto& weak = spec.weakenings;
  std::string home_host, shared_tmp;
  if (weakened(weak, Weakening::kMountHome)) {
    SG_ASSIGN_OR_RETURN(home_host, launcher_home());
  }
  if (weakened(weak, Weakening::kShareTmp)) {
    SG_ASSIGN_OR_RETURN(shared_tmp, prepare_shared_dir(options_.paths, kSharedTmpDir, "", 0, 0, 01777));
  }
  SupervisedEnvironment::Recipe recipe;
  if (weakened(weak, Weakening::kReuseWorkspace)) {
    SG_ASSIGN_OR_RETURN(recipe.shared_workspace,
                        prepare_shared_dir(options_.paths, kSharedWorkspaceDir, spec.workspace_recipe,
                                           base + spec.uid, base + spec.gid, 0700));
  }
  recipe.provider = "namespaces";
  recipe.needs_root_dir = true;
  recipe.id_range = ids.lease ? &*ids.lease : nullptr;
  recipe.id_base = base;
  recipe.workspace_uid = base + spec.uid;
  recipe.workspace_gid = base + spec.gid;
  recipe.workspace_inside = "/workspace";
  recipe.secrets_inside = "/run/secrets";
  recipe.supervisor_exe = options_.supervisor_exe;
  recipe.workspace_filesystem = true;  // the jail binds layout.workspace
  recipe.configure = [&](const RunLayout& layout) -> Result<SupervisorConfig> {
    SupervisorConfig c;
    c.isolate = true;
    c.id_map_base = base;
    // The run owns its user namespace, so the kernel's per-user counts are its own; shared_uid
    // keeps the old shape (owned by sandgate, host root, like every other such run).
    c.run_owns_user_namespace = !weakened(weak, Weakening::kSharedUid);
    c.jail.root_dir = layout.root;
    c.jail.workspace_host = layout.workspace;
    c.jail.workspace = "/workspace";
    c.jail.home = "/home/sandbox";
    c.jail.readonly_mounts = spec.readonly_mounts;
    c.jail.base_paths = spec.base_paths;
    c.jail.secrets_host = layout.secrets_dir;
    c.jail.secrets = "/run/secrets";
    c.jail.uid = spec.uid;
    c.jail.gid = spec.gid;
    c.base_env = {"PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
                  "HOME=/home/sandbox", "USER=sandbox", "LOGNAME=sandbox", "SHELL=/bin/sh",
                  "TMPDIR=/tmp", "LANG=C.UTF-8", "SANDGATE_RUN_ID=" + layout.run_id};
    if (weakened(weak, Weakening::kPassHostEnv)) {
      // Everything of the host's, under the jail's own essentials (a host PATH may name
      // directories the jail lacks).
      std::vector<std::string> host_env;
      for (char** e = environ; e && *e; ++e) host_env.emplace_back(*e);
      c.base_env = merge_env(std::move(host_env), c.base_env);
    }
    // Otherwise nothing of the host's environment passes unless the spec names it.
    SG_ASSIGN_OR_RETURN(auto allowed, resolve_env_allowlist(spec.env, environ));
    c.base_env = merge_env(std::move(c.base_env), allowed);
    c.default_cwd = "/workspace";
    // Test-only weakenings (weakening.h), each one switch of the hardened jail.
    if (!home_host.empty()) {
      c.jail.readwrite_mounts.push_back({home_host, home_host});
      c.base_env = merge_env(std::move(c.base_env), {"HOME=" + home_host});
    }
    c.jail.tmp_host = shared_tmp;
    c.jail.new_network = !weakened(weak, Weakening::kShareHostNetwork);
    c.jail.drop_privileges = !weakened(weak, Weakening::kRootWithCaps);
    c.jail.seccomp = !weakened(weak, Weakening::kNoSeccomp);
    c.jail.seccomp_full_width_compare = weakened(weak, Weakening::kSeccompFullWidthCompare);
    c.jail.landlock = !weakened(weak, Weakening::kNoLandlock);
    if (spec.network == NetworkMode::kAllowlist) {
      // The run's resolv.conf: empty until the network hook below knows the run's address.
      c.jail.resolv_conf_host = layout.run_dir + "/resolv.conf";
      SG_TRY(
          write_file(c.jail.resolv_conf_host, "", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    }
    for (const auto& rule : spec.egress) {
      if (rule.protocol == IPPROTO_UDP) continue;
      if (rule.port == 0) c.jail.tcp_connect_any = true;
      else if (std::find(c.jail.tcp_connect_ports.begin(), c.jail.tcp_connect_ports.end(), rule.port) ==
               c.jail.tcp_connect_ports.end())
        c.jail.tcp_connect_ports.push_back(rule.port);
    }
    return c;
  };
  if (options_.proc_views && proc_views_enabled_by_environment()) {
    // The run's cgroup (the parent of its main cgroup, where the supervisor is placed), one
    // directory per hierarchy; none (no controller): the views follow each reader's cgroup.
    std::vector<std::string> run_cgroup = run_cgroup_dirs(spec.placement.cgroup_dirs);
    recipe.before_start = [this, run_cgroup](const RunLayout& layout, SupervisorConfig& c,
                                             RunState& state) -> Status {
      // Started here, waited for while the supervisor execs (before_config): the two starts
      // overlap instead of adding up.
      SG_ASSIGN_OR_RETURN(auto begun, begin_run_proc_views(options_.paths, options_.supervisor_exe,
                                                           layout.run_dir, run_cgroup, state));
      c.jail.proc_views_host = begun.views.dir;
      c.before_config = [wait = std::move(begun.wait_mounted)](pid_t) { return wait(); };
      // The views server answers the calls' sysinfo(2) too (sysinfo_notify.h).
      if (options_.answer_sysinfo) c.sysinfo_channel = begun.views.sysinfo_channel;
      return {};
    };
    recipe.stopping = [exe = options_.supervisor_exe] { start_proc_views_spare(exe); };
  }
  if (spec.network == NetworkMode::kAllowlist) {
    // Checked before anything is made: an allowlist needs somewhere to go and something in it.
    if (spec.egress.empty())
      return logic_error("create environment",
                         "--net allowlist needs at least one --allow entry (without any, use --net none)");
    SG_TRY(open_upstream_netns(spec.upstream_netns));
    recipe.network = [&](const RunLayout& layout, pid_t supervisor,
                         RunState& state) -> Result<std::string> {
      SG_ASSIGN_OR_RETURN(auto link, wire_egress_link(options_.paths, state, supervisor,
                                                      spec.upstream_netns, layout.run_id));
      spdlog::debug("run {}: eth0 {} via {} ({} in {})", layout.run_id, link.run_address,
                    link.upstream_address, link.upstream_link, spec.upstream_netns);
      // The run's resolver answers on its gateway (the run session serves it there). Written in
      // place: the jail's /etc/resolv.conf is a bind of this very file.
      SG_TRY(write_file(layout.run_dir + "/resolv.conf",
                        "# the run's allowlisting resolver (sandgate): names outside the run's\n"
                        "# --allow list are answered REFUSED\n"
                        "nameserver " +
                            link.upstream_address + "\noptions timeout:2 attempts:2\n",
                        O_WRONLY | O_TRUNC | O_CLOEXEC));
      return link.upstream_address;
    };
  }
  auto env = SupervisedEnvironment::create(options_.paths, spec, recipe);
  if (!env.ok()) return std::move(env).error();
  return std::unique_ptr<Environment>(std::move(env).value());
}

}  // namespace sandgate::providers
