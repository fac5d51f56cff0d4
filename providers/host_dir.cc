#include "providers/host_dir.h"

#include <unistd.h>

#include "providers/supervised_environment.h"

extern char** environ;

namespace sandgate::providers {

const ProviderInfo& HostDirProvider::static_info() {
  static const ProviderInfo info{
      "host_dir",
      "no isolation: a per-run directory on the host, host environment, host network",
      /*unsafe=*/true,
      /*capabilities=*/{}};
  return info;
}

Result<std::unique_ptr<Provider>> HostDirProvider::make(const ProviderOptions& options) {
  if (!options.allow_unsafe_host)
    return logic_error(
        "select provider",
        "host_dir runs model-written code directly on this host, with your files, environment "
        "and network; it exists to show what exposure looks like. Pass --allow-unsafe-host "
        "(API: ProviderOptions::allow_unsafe_host) if that is what you want");
  return std::unique_ptr<Provider>(new HostDirProvider(options));
}

Result<std::unique_ptr<Environment>> HostDirProvider::create(const EnvSpec& spec) {
  SG_TRY(refuse_allowlist("host_dir", spec.network));
  if (!spec.image.empty())
    return logic_error("create environment",
                       "the host_dir provider has no images (--image is for podman)", spec.image);
  if (!spec.base_paths.empty())
    return logic_error("create environment",
                       "the host_dir provider has no read-only base to narrow (it runs on the "
                       "host's own root); --base-path is for namespaces and podman");
  // Already weaker than any weakening: they apply to the namespace jail only.
  if (!spec.weakenings.empty())
    return logic_error("create environment",
                       "host_dir has no isolation to weaken; test-only weakenings apply to the "
                       "namespaces provider alone");
  SupervisedEnvironment::Recipe recipe;
  recipe.provider = "host_dir";
  recipe.workspace_uid = ::geteuid();
  recipe.workspace_gid = ::getegid();
  recipe.supervisor_exe = options_.supervisor_exe;
  recipe.configure = [&](const RunLayout& layout) -> Result<SupervisorConfig> {
    SupervisorConfig c;
    c.isolate = false;
    // No scrubbing: the host's whole environment passes, which is the point of this provider.
    for (char** e = environ; e && *e; ++e) c.base_env.emplace_back(*e);
    SG_ASSIGN_OR_RETURN(auto extra, resolve_env_allowlist(spec.env, environ));
    extra.push_back("SANDGATE_RUN_ID=" + layout.run_id);
    c.base_env = merge_env(std::move(c.base_env), extra);
    c.default_cwd = layout.workspace;
    return c;
  };
  // Calls see the host path itself (workspace_inside left empty).
  auto env = SupervisedEnvironment::create(options_.paths, spec, recipe);
  if (!env.ok()) return std::move(env).error();
  return std::unique_ptr<Environment>(std::move(env).value());
}

}  // namespace sandgate::providers
