#include "providers/namespaces.h"

#include <unistd.h>

#include "core/fd.h"
#include "providers/supervised_environment.h"

extern char** environ;

namespace sandgate::providers {

const ProviderInfo& NamespacesProvider::static_info() {
  static const ProviderInfo info{
      "namespaces",
      "namespace jail: user/mount/pid/net/ipc/uts/cgroup namespaces, read-only base, seccomp",
      /*unsafe=*/false,
      {Capability::kFsIsolated, Capability::kFsReadonlyBase, Capability::kNetNone,
       Capability::kCredsScrubbedEnv, Capability::kProcPidNs, Capability::kProcUserNs,
       Capability::kProcSeccomp, Capability::kProcNoNewPrivs, Capability::kProcNoCaps,
       Capability::kIpcIsolated, Capability::kEphemeralWorkspace}};
  return info;
}

Result<std::unique_ptr<Provider>> NamespacesProvider::make(const ProviderOptions& options) {
  return std::unique_ptr<Provider>(new NamespacesProvider(options));
}

Status NamespacesProvider::available() const {
  if (::geteuid() != 0)
    return logic_error("namespaces provider", "needs root to map user ids and assemble the jail");
  auto max = read_file(options_.paths.proc + "/sys/user/max_user_namespaces");
  if (max.ok() && std::atoi(max->c_str()) == 0)
    return logic_error("namespaces provider", "user namespaces are disabled (user.max_user_namespaces = 0)");
  return {};
}

Result<std::unique_ptr<Environment>> NamespacesProvider::create(const EnvSpec& spec) {
  SG_TRY(available());
  const uid_t base = options_.id_map_base;
  if (spec.uid == 0 || spec.uid >= 65536 || spec.gid >= 65536)
    return logic_error("create environment", "uid/gid inside must be in 1..65535 (got " +
                                                 std::to_string(spec.uid) + ")");
  SupervisedEnvironment::Recipe recipe;
  recipe.provider = "namespaces";
  recipe.needs_root_dir = true;
  recipe.workspace_uid = base + spec.uid;
  recipe.workspace_gid = base + spec.gid;
  recipe.workspace_inside = "/workspace";
  recipe.supervisor_exe = options_.supervisor_exe;
  recipe.configure = [&](const RunLayout& layout) -> Result<SupervisorConfig> {
    SupervisorConfig c;
    c.isolate = true;
    c.id_map_base = base;
    c.jail.root_dir = layout.root;
    c.jail.workspace_host = layout.workspace;
    c.jail.workspace = "/workspace";
    c.jail.home = "/home/sandbox";
    c.jail.readonly_mounts = spec.readonly_mounts;
    c.jail.uid = spec.uid;
    c.jail.gid = spec.gid;
    c.base_env = {"PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
                  "HOME=/home/sandbox", "USER=sandbox", "LOGNAME=sandbox", "SHELL=/bin/sh",
                  "TMPDIR=/tmp", "LANG=C.UTF-8", "SANDGATE_RUN_ID=" + layout.run_id};
    // Nothing of the host's environment passes unless the spec names it.
    SG_ASSIGN_OR_RETURN(auto allowed, resolve_env_allowlist(spec.env, environ));
    c.base_env = merge_env(std::move(c.base_env), allowed);
    c.default_cwd = "/workspace";
    return c;
  };
  auto env = SupervisedEnvironment::create(options_.paths, spec, recipe);
  if (!env.ok()) return std::move(env).error();
  return std::unique_ptr<Environment>(std::move(env).value());
}

}  // namespace sandgate::providers
