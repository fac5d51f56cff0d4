// What every subcommand shares: global options, the provider registry, the one way errors are
// printed and the exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "cli/basics.h"
#include "controller/policy.h"
#include "core/host_paths.h"
#include "core/id_ranges.h"
#include "core/json.h"
#include "core/result.h"
#include "providers/registry.h"

namespace sandgate::cli {

struct Globals {
  std::string state_dir;
  std::string work_dir;
  std::string log_level;
  std::string cgroup_root;       // sandgate's top cgroup name (default "sandgate")
  std::string providers_config;  // external providers (default /etc/sandgate/providers.json)
  std::string id_pool;           // --id-pool FIRST:RANGES (else SANDGATE_ID_POOL)
  IdPool parsed_id_pool;         // checked once the command line is parsed
  std::string podman_mode;       // --podman-mode (else SANDGATE_PODMAN_MODE, else auto)
  providers::PodmanMode parsed_podman_mode = providers::PodmanMode::kAuto;
  bool no_proc_views = false;    // --no-proc-views (or SANDGATE_PROC_VIEWS=0)
  providers::Registry registry;
  int exit_code = 0;  // set by the subcommand that ran

  HostPaths paths() const;
  // --cgroup-root, else SANDGATE_CGROUP_ROOT, else "sandgate".
  std::string cgroup_root_name() const;
  // Provider options every subcommand starts from: paths, and the sandgate-supervisor binary
  // beside this one when it exists (else this binary re-executes itself).
  providers::ProviderOptions provider_options() const;
};

// The path of a binary installed beside this one (sandgate-supervisor, sandgate-probe,
// sandgate-load); "" when there is none.
std::string companion_binary(const std::string& name);

// The policy a --policy option names: the built-in one for "" or "default", else the file,
// read strictly (errors name the field).
Result<controller::Policy> load_policy_arg(const std::string& file);

// --image NAME: only providers with images take one (podman); an error for any other.
Status check_image_provider(const std::string& provider, const std::string& image);

// The read-only base of a run: the policy's base.allow entries, then --base-path's, each
// checked and resolved on this host (providers/base_root.h, resolve_base_paths; errors name
// "policy base.allow[i]" or "--base-path[i]"). Empty: the provider's default base.
Result<std::vector<std::string>> base_paths_arg(const std::vector<std::string>& policy_allow,
                                                const std::vector<std::string>& cli_paths);

// The doctor's findings as JSON (what `sandgate doctor --json` prints); qualify embeds it.
Json doctor_report(Globals& g);

void add_exec_command(CLI::App& app, Globals& g);
void add_providers_command(CLI::App& app, Globals& g);
void add_gc_command(CLI::App& app, Globals& g);
void add_doctor_command(CLI::App& app, Globals& g);
void add_qualify_command(CLI::App& app, Globals& g);
void add_gate_command(CLI::App& app, Globals& g);
void add_bench_command(CLI::App& app, Globals& g);
void add_serve_command(CLI::App& app, Globals& g);
void add_probe_command(CLI::App& app, Globals& g);
void add_record_command(CLI::App& app, Globals& g);
void add_replay_command(CLI::App& app, Globals& g);
void add_trace_command(CLI::App& app, Globals& g);
void add_plan_command(CLI::App& app, Globals& g);
void add_policy_command(CLI::App& app, Globals& g);
void add_report_command(CLI::App& app, Globals& g);
void add_provider_command(CLI::App& app, Globals& g);

// Registers the external providers: the external: family, and the configured ones from
// --providers-config, else SANDGATE_PROVIDERS_CONFIG, else /etc/sandgate/providers.json when it
// exists. A config named explicitly must exist.
Status load_external_providers(Globals& g);

}  // namespace sandgate::cli
