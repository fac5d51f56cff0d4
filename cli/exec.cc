// sandgate exec: one command in a fresh environment; exits with the command's status.
#include <signal.h>
#include <unistd.h>

#include <iostream>

#include "cli/common.h"
#include "cli/signals.h"
#include "core/json.h"
#include "core/units.h"

namespace sandgate::cli {
namespace {

struct ExecArgs {
  std::string provider;
  std::string workspace;
  std::vector<std::string> env;
  std::vector<std::string> ro_binds;
  std::string timeout;
  bool json = false;
  bool allow_unsafe_host = false;
  std::vector<std::string> command;
};

Json result_json(const providers::ProviderInfo& info, const std::string& run_id,
                 const providers::ExecResult& r) {
  return {
      {"schema_version", 1},
      {"provider", info.name},
      {"unsafe", info.unsafe},
      {"run_id", run_id},
      {"exit_code", r.status.exited ? Json(r.status.code) : Json(nullptr)},
      {"signal", r.status.exited ? Json(nullptr) : Json(r.status.signal)},
      {"wall_ms", to_millis(r.wall)},
      {"timed_out", r.timed_out},
      {"cancelled", r.cancelled},
      {"stdout", r.stdout_data},
      {"stderr", r.stderr_data},
      {"stdout_bytes", r.stdout_bytes},
      {"stderr_bytes", r.stderr_bytes},
      {"stdout_truncated", r.stdout_truncated},
      {"stderr_truncated", r.stderr_truncated},
  };
}

int run_exec(Globals& g, const ExecArgs& a) {
  providers::ProviderOptions options;
  options.paths = g.paths();
  options.allow_unsafe_host = a.allow_unsafe_host;
  auto provider = g.registry.create(a.provider, options);
  if (!provider.ok()) return fail(provider.error());

  providers::EnvSpec spec;
  spec.workspace_recipe = a.workspace;
  spec.env = a.env;
  for (const auto& b : a.ro_binds) {
    auto colon = b.find(':');
    spec.readonly_mounts.push_back(
        {b.substr(0, colon), colon == std::string::npos ? b : b.substr(colon + 1)});
  }
  if (!a.timeout.empty()) {
    auto t = parse_duration(a.timeout);
    if (!t.ok()) return fail(std::move(t).error().context_add("--timeout"));
    spec.timeout = *t;
  }
  if ((*provider)->info().unsafe)
    std::cerr << "sandgate: warning: provider " << display_name((*provider)->info())
              << ": the command runs on this host with no isolation\n";

  InterruptFd interrupt;
  auto env = (*provider)->create(spec);
  if (!env.ok()) return fail(env.error());

  providers::Call call;
  call.argv = a.command;
  call.cancel_fd = interrupt.fd();
  if (!a.json) {
    call.on_output = [](int stream, std::string_view data) {
      (void)!::write(stream, data.data(), data.size());
    };
  }
  auto result = (*env)->exec(call, {});
  std::string run_id = (*env)->run_id();
  auto destroyed = (*env)->destroy();
  if (!result.ok()) return fail(result.error());
  if (!destroyed.ok()) return fail(std::move(destroyed).error().context_add("tearing down the run"));
  if (a.json) std::cout << result_json((*provider)->info(), run_id, *result).dump(2) << "\n";
  if (result->cancelled) {
    int sig = interrupt.pending();
    std::cerr << "sandgate: interrupted; run " << run_id << " torn down\n";
    return 128 + (sig ? sig : SIGINT);
  }
  if (result->timed_out) std::cerr << "sandgate: timed out; run " << run_id << " killed\n";
  return result->status.shell_code();
}

}  // namespace

void add_exec_command(CLI::App& app, Globals& g) {
  auto a = std::make_shared<ExecArgs>();
  auto* sub = app.add_subcommand(
      "exec",
      "Run one command in a fresh environment and exit with its status.\n"
      "  sandgate exec --provider namespaces -- sh -c 'id; ls /'\n"
      "  sandgate exec --provider namespaces --workspace ./repo --env TERM --timeout 30s -- make\n"
      "The environment is destroyed afterwards: nothing it started or wrote survives.");
  sub->add_option("--provider", a->provider, "isolation provider (see `sandgate providers`)")->required();
  sub->add_option("--workspace", a->workspace, "directory copied into the fresh workspace")
      ->check(CLI::ExistingDirectory);
  sub->add_option("--env", a->env,
                  "NAME passes the host's value, NAME=VALUE sets one; nothing else passes (repeatable)");
  sub->add_option("--ro-bind", a->ro_binds, "SRC[:DST] host path mounted read-only (repeatable)");
  sub->add_option("--timeout", a->timeout, "wall-clock limit for the run: 250ms, 30s, 5m");
  sub->add_flag("--json", a->json, "print the result as JSON instead of streaming output");
  sub->add_flag("--allow-unsafe-host", a->allow_unsafe_host,
                "permit the host_dir provider, which runs the command with no isolation");
  sub->add_option("command", a->command, "the command and its arguments (after --)")->required();
  sub->callback([&g, a] { g.exit_code = run_exec(g, *a); });
}

}  // namespace sandgate::cli
