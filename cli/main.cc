// sandgate: qualify the sandboxes that run agent-generated code. Wiring only: each subcommand
// lives in its own file and calls into the libraries.
#include <signal.h>
#include <unistd.h>

#include <iostream>

#include "cli/common.h"
#include "controller/guest_control.h"
#include "core/log.h"
#include "providers/base_root.h"
#include "providers/external.h"
#include "providers/supervisor.h"

namespace sandgate::cli {

HostPaths Globals::paths() const {
  HostPaths p = HostPaths::from_environment();
  if (!state_dir.empty()) p.state_dir = state_dir;
  if (!work_dir.empty()) p.work_dir = work_dir;
  return p;
}

std::string Globals::cgroup_root_name() const {
  if (!cgroup_root.empty()) return cgroup_root;
  const char* env = std::getenv("SANDGATE_CGROUP_ROOT");
  return env && *env ? env : "sandgate";
}

Result<controller::Policy> load_policy_arg(const std::string& file) {
  if (file.empty() || file == "default") return controller::default_policy();
  return controller::load_policy_file(file);
}

std::string companion_binary(const std::string& name) {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "";
  self[n] = 0;
  std::string dir(self);
  std::string candidate = dir.substr(0, dir.rfind('/')) + "/" + name;
  return ::access(candidate.c_str(), X_OK) == 0 ? candidate : "";
}

providers::ProviderOptions Globals::provider_options() const {
  providers::ProviderOptions o;
  o.paths = paths();
  o.id_pool = parsed_id_pool;
  o.podman_mode = parsed_podman_mode;
  o.proc_views = !no_proc_views;
  o.supervisor_exe = companion_binary("sandgate-supervisor");
  return o;
}

Status load_external_providers(Globals& g) {
  std::string file = g.providers_config;
  bool named = !file.empty();
  if (!named) {
    const char* env = std::getenv("SANDGATE_PROVIDERS_CONFIG");
    if (env && *env) {
      file = env;
      named = true;
    }
  }
  if (!named) file = "/etc/sandgate/providers.json";
  std::vector<providers::ExternalCommand> configured;
  if (named || ::access(file.c_str(), F_OK) == 0) {
    SG_ASSIGN_OR_RETURN(configured, providers::load_providers_config(file));
  }
  providers::register_external_providers(g.registry, configured);
  return {};
}

Status check_image_provider(const std::string& provider, const std::string& image) {
  if (image.empty() || provider == "podman") return {};
  return logic_error("--image", "only the podman provider runs a container image, not " + provider);
}

Result<std::vector<std::string>> base_paths_arg(const std::vector<std::string>& policy_allow,
                                                const std::vector<std::string>& cli_paths) {
  SG_ASSIGN_OR_RETURN(auto from_policy,
                      providers::resolve_base_paths(policy_allow, "policy base.allow"));
  SG_ASSIGN_OR_RETURN(auto from_cli, providers::resolve_base_paths(cli_paths, "--base-path"));
  from_policy.insert(from_policy.end(), from_cli.begin(), from_cli.end());
  // Both resolved already: this only drops what one list's entries hold of the other's.
  return providers::resolve_base_paths(from_policy, "base");
}

// Every subcommand, in the order `--help` lists them.
struct Command {
  const char* name;  // as its add_*_command names it
  void (*add)(CLI::App& app, Globals& g);
};
constexpr Command kCommands[] = {
    {"exec", add_exec_command},       {"providers", add_providers_command},
    {"gc", add_gc_command},           {"doctor", add_doctor_command},
    {"qualify", add_qualify_command}, {"serve", add_serve_command},
    {"probe", add_probe_command},     {"record", add_record_command},
    {"replay", add_replay_command},   {"trace", add_trace_command},
    {"plan", add_plan_command},       {"policy", add_policy_command},
    {"report", add_report_command},   {"gate", add_gate_command},
    {"bench", add_bench_command},     {"provider", add_provider_command},
};

// The word of argv that names the subcommand, found before any is made: the first that is
// neither one of `app`'s own (global) options nor the value of one. "" when there is none.
std::string named_subcommand(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") return "";
    if (!word.starts_with("-")) return word;
    if (word.find('=') != std::string::npos) continue;  // --state-dir=DIR
    const CLI::Option* opt = app.get_option_no_throw(word);
    if (opt != nullptr && opt->get_type_size() != 0) ++i;  // its value: --state-dir DIR
  }
  return "";
}

}  // namespace sandgate::cli

int main(int argc, char** argv) {
  // A provider's supervisor is this binary re-executed; it must not parse the command line.
  // As a microVM's guest agent it runs the controller's part for each call inside the guest.
  if (auto rc = sandgate::providers::maybe_run_supervisor(argc, argv,
                                                          sandgate::controller::make_guest_calls))
    return *rc;

  sandgate::cli::set_up_signals();

  using namespace sandgate::cli;
  Globals g;
  sandgate::providers::register_builtin_providers(g.registry);

  CLI::App app{
      "sandgate: proves what a sandbox for agent-run code really contains and how it behaves.\n"
      "Providers make isolated environments (see `sandgate providers`); `exec` runs a command in\n"
      "a fresh one as a tool call with its own cgroup and grant; `serve` lets an orchestrator do\n"
      "the same over JSON lines; `probe` tries to cross every boundary from inside and judges\n"
      "each attempt with host-side evidence; `record`, `trace`, `replay` and `plan` record,\n"
      "check, replay and plan capacity from burst-silence traces; `policy` prints the built-in\n"
      "policy (what each call may use) or checks yours; `qualify` is the main job and\n"
      "writes its report in every format, which `report render` renders again;\n"
      "`doctor` says what this host supports; `gc` cleans up after a crash."};
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();
  app.add_option(
      "--state-dir", g.state_dir,
      "where runs record what they create (default /run/sandgate, env SANDGATE_STATE_DIR)");
  app.add_option(
      "--work-dir", g.work_dir,
      "where per-run workspaces live (default /var/tmp/sandgate, env SANDGATE_WORK_DIR)");
  app.add_option("--log-level", g.log_level, "trace, debug, info, warn (default), error, off");
  app.add_option("--cgroup-root", g.cgroup_root,
                 "name of sandgate's top cgroup in each hierarchy (default sandgate, env "
                 "SANDGATE_CGROUP_ROOT)");
  app.add_option("--providers-config", g.providers_config,
                 "external providers by name: {\"schema_version\":1,\"providers\":[{\"name\":N,"
                 "\"command\":[PROGRAM,ARGS...]}]} (default /etc/sandgate/providers.json when it "
                 "exists, env SANDGATE_PROVIDERS_CONFIG); then --provider external:N");
  app.add_option("--id-pool", g.id_pool,
                 "host ids runs are given, FIRST:RANGES: each run maps its users onto its own "
                 "65536 ids from this pool (default 2000000:1024, env SANDGATE_ID_POOL); "
                 "each range is held by a lock in /run/sandgate/id-ranges, one directory for "
                 "the whole host whatever --state-dir says (the ids are the host's)");
  app.add_option("--podman-mode", g.podman_mode,
                 "how the podman provider runs Podman: rootless (as each run's own host id, in "
                 "a user namespace that id owns: nothing the kernel counts per user is shared "
                 "between runs), rootful (as root; the namespace is root's), or auto (default, "
                 "env SANDGATE_PODMAN_MODE): rootless where this host allows it (`sandgate "
                 "doctor` says) and the run names no --image, else rootful");
  app.add_flag("--no-proc-views", g.no_proc_views,
               "namespaces and podman runs without their own /proc views (env "
               "SANDGATE_PROC_VIEWS=0): by default each run's /proc/meminfo, stat, loadavg, "
               "uptime, vmstat and pressure/* show the run's own cgroup (its grant, its CPU "
               "time, its tasks, its faults) from a small per-run FUSE server (podman: all but "
               "pressure/* and vmstat, which runc refuses to bind over); without them calls "
               "read the host's, and other runs' "
               "activity with them. A run whose views cannot be set up fails instead of showing "
               "the host's");
  app.parse_complete_callback([&] {
    sandgate::init_logging(g.log_level);
    std::string pool = g.id_pool;
    const char* pool_env = std::getenv("SANDGATE_ID_POOL");
    if (pool.empty() && pool_env && *pool_env) pool = pool_env;
    if (!pool.empty()) {
      auto parsed = sandgate::parse_id_pool(pool);
      if (!parsed.ok())
        throw CLI::ValidationError(g.id_pool.empty() ? "SANDGATE_ID_POOL" : "--id-pool",
                                   parsed.error().message());
      g.parsed_id_pool = *parsed;
    }
    std::string mode = g.podman_mode;
    const char* mode_env = std::getenv("SANDGATE_PODMAN_MODE");
    if (mode.empty() && mode_env && *mode_env) mode = mode_env;
    if (!mode.empty()) {
      auto parsed = sandgate::providers::parse_podman_mode(mode);
      if (!parsed.ok())
        throw CLI::ValidationError(g.podman_mode.empty() ? "SANDGATE_PODMAN_MODE" : "--podman-mode",
                                   parsed.error().message());
      g.parsed_podman_mode = *parsed;
    }
    // Before any subcommand runs: every --provider may name an external one.
    if (auto s = load_external_providers(g); !s.ok())
      throw CLI::ValidationError("--providers-config", s.error().message());
  });

  // Only the subcommand the command line names is made (every one for `--help`, or when none
  // is named): making all sixteen, their options and help texts, was most of what a start of
  // this binary did before main's work (about 54 page faults of heap, `perf record -e
  // page-faults`), and `exec --socket`, a warm call through `serve`, is such a start.
  const std::string named = named_subcommand(app, argc, argv);
  bool made = false;
  for (const Command& c : kCommands)
    if (named == c.name) {
      c.add(app, g);
      made = true;
    }
  if (!made)
    for (const Command& c : kCommands) c.add(app, g);

  one_value_per_occurrence(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "sandgate: error: " << e.what() << " (see --help)\n";
    return kExitError;
  }
  return g.exit_code;
}
