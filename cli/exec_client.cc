#include "cli/exec_client.h"

#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "cli/basics.h"
#include "cli/signals.h"
#include "core/json.h"
#include "core/units.h"
#include "session/client.h"

namespace sandgate::cli {

CLI::App* add_exec_subcommand(CLI::App& app, ExecArgs& args) {
  ExecArgs* a = &args;
  auto* sub = app.add_subcommand(
      "exec",
      "Run one command in a fresh environment and exit with its status.\n"
      "  sandgate exec --provider namespaces -- sh -c 'id; ls /'\n"
      "  sandgate exec --provider namespaces --workspace ./repo --intent compile --json -- make "
      "-j2\n"
      "  sandgate exec --socket \"$SANDGATE_SOCKET\" --intent search -- grep -rn TODO .\n"
      "The command is a tool call: it runs in its own cgroup with the grant of its intent\n"
      "(declared with --intent, else inferred from the command), is watched and degraded\n"
      "gradually (throttle, freeze, cancel, kill), and ends with a structured outcome\n"
      "(--json: \"outcome\"; otherwise a line on stderr when it did not simply exit).\n"
      "The environment is destroyed afterwards: nothing it started or wrote survives, except\n"
      "what is deliberately exported (--export-branch, --export). The run contract:\n"
      "  in:   --workspace (a copy-on-write view of the recipe), --secret NAME=FILE\n"
      "  out:  --export-branch NAME (commits into the recipe's repository), --export DIR\n"
      "  sandgate exec --provider namespaces --workspace ./repo --export-branch agent/fix \\\n"
      "      --secret GH_TOKEN=./token -- sh -c 'make test && git commit -qam fix'");
  sub->add_option("--provider", a->provider,
                  "isolation provider (see `sandgate providers`); required unless --socket");
  sub->add_option("--image", a->image,
                  "podman: a local image for the root filesystem (checked with `podman image\n"
                  "exists`; no registry is contacted). Default: a root sandgate assembles from\n"
                  "the host's /usr, read-only, with a generated /etc");
  sub->add_option("--workspace", a->workspace,
                  "the recipe: a directory the run gets as its fresh workspace, copy-on-write\n"
                  "(the run's writes land in a layer of its own; this directory is never written)")
      ->check(CLI::ExistingDirectory);
  sub->add_option(
         "--recipe-mode", a->recipe_mode,
         "auto: a copy-on-write view where the host allows it, else a copy; overlay: a\n"
         "view or an error saying why not; copy: file by file (--json says which was used)")
      ->check(CLI::IsMember({"auto", "overlay", "copy"}))
      ->capture_default_str();
  sub->add_option(
      "--workspace-size", a->workspace_size,
      "SIZE (16MiB..16TiB, e.g. 2GiB): the workspace on a filesystem of its own, an ext4\n"
      "image of SIZE in the run directory on a loop device (namespaces only). The run's\n"
      "/proc/self/mountinfo then names no host path for it, and its writes stop at ENOSPC\n"
      "at SIZE instead of filling the host's disk. Costs a few ms per run (README)");
  sub->add_option(
      "--secret", a->secrets,
      "NAME=FILE: the run alone reads FILE's bytes at /run/secrets/NAME (memory only,\n"
      "mode 0400, gone when the run ends; $SANDGATE_SECRETS_DIR names the directory).\n"
      "sandgate reads FILE: the secret is never on a command line or in an environment\n"
      "(repeatable)");
  sub->add_option(
      "--export-branch", a->export_.branch,
      "NAME: when the command has run, bring the commit at the workspace's HEAD (and\n"
      "its history) into the --workspace repository as branch NAME. Only objects\n"
      "cross, fsck'ed; the workspace's git config and hooks are never used on the host.\n"
      "An existing branch is refused unless --export-force");
  sub->add_flag("--export-force", a->export_.force,
                "let --export-branch replace an existing branch");
  sub->add_option("--export", a->export_.directory,
                  "DIR (absent or empty): copy the final workspace there (links not followed,\n"
                  "FIFOs/sockets/devices left out). Everything not exported is destroyed");
  sub->add_option(
      "--env", a->env,
      "NAME passes the host's value, NAME=VALUE sets one; nothing else passes (repeatable)");
  sub->add_option("--ro-bind", a->ro_binds, "SRC[:DST] host path mounted read-only (repeatable)");
  add_base_path_option(sub, a->base_paths);
  sub->add_option("--timeout", a->timeout, "wall-clock limit for the run: 250ms, 30s, 5m");
  sub->add_flag("--json", a->json, "print the result as JSON instead of streaming output");
  sub->add_flag("--raw-output", a->raw_output,
                "copy the call's output to a terminal unchanged; by default a terminal gets its\n"
                "control sequences shown as text (\\x1b[2J), not obeyed: the sandbox's output\n"
                "must not retitle the window, clear the screen or write the clipboard (OSC 52)");
  sub->add_flag("--allow-unsafe-host", a->allow_unsafe_host,
                "permit the host_dir provider, which runs the command with no isolation");
  sub->add_option("--intent", a->intent,
                  "compile, test, install, search, edit, run, default (or any the policy defines)");
  sub->add_option("--policy", a->policy, "policy JSON file (default: the built-in policy)");
  sub->add_option("--tenant", a->tenant, "tenant the run belongs to (a policy tenant)")
      ->capture_default_str();
  add_net_options(sub, a->net);
  sub->add_flag("--trace", a->trace,
                "trace the call with eBPF and report what the kernel saw it do: every exec,\n"
                "connect/sendto (address, port, protocol, allowed/denied/failed) and open of a\n"
                "sensitive path (credentials, /proc/*/environ, runtime sockets); --json: in\n"
                "outcome.observed (execs, connects, sensitive_opens)");
  sub->add_flag("--no-controller", a->no_controller,
                "no per-call cgroup, grant or outcome: the provider alone");
  sub->add_option("--socket", a->socket,
                  "client mode: send the call to a `sandgate serve --socket` or `sandgate record`\n"
                  "server at PATH and print its output and outcome (--json: the outcome). The\n"
                  "run's options go to the server's create; those the server decides (--policy,\n"
                  "--trace, --no-controller, --base-path, --allow-unsafe-host, --net-upstream,\n"
                  "--dns-upstream) are refused: give them to `serve`. ^C cancels the call in the\n"
                  "server (its outcome is shown; exit 130)");
  sub->add_option("--run", a->run,
                  "client mode: the server's environment to use (default $SANDGATE_RUN; none:\n"
                  "one is created with --provider for this call and destroyed after it)");
  sub->add_option("command", a->command, "the command and its arguments (after --)")->required();
  sub->parse_complete_callback([sub, a] {
    for (const CLI::Option* o : sub->get_options())
      if (o->count() > 0) a->given.insert(o->get_name());
  });
  return sub;
}

// `exec --socket PATH`: the call runs in an environment of a `sandgate serve --socket` or
// `sandgate record` server, as a call with its intent; its output and outcome come back in the
// reply. Without --run (or $SANDGATE_RUN) an environment is created for this one call and
// destroyed after it, as plain `exec` does.
int exec_client(const ExecArgs& a) {
  // What the server decides, not the client: said, not dropped.
  for (const auto& [name, why] : std::initializer_list<std::pair<const char*, const char*>>{
           {"--policy", "the server's policy (serve --policy) grants its calls"},
           {"--no-controller", "the server's controller places every call"},
           {"--trace", "tracing is the server's (serve --trace)"},
           {"--base-path", "the server's --base-path sets its runs' base"},
           {"--allow-unsafe-host", "the server's operator allows host_dir (serve)"},
           {"--net-upstream", "where a run's traffic goes is the server's (serve --net-upstream)"},
           {"--dns-upstream", "which DNS server is asked is the server's (serve --dns-upstream)"}})
    if (a.given.count(name))
      return fail(std::string(name) + " does not apply with --socket: " + why);

  std::string run = a.run;
  if (run.empty())
    if (const char* v = std::getenv("SANDGATE_RUN")) run = v;
  if (!run.empty()) {
    // The run exists: what shapes a run went to its create.
    for (const char* name :
         {"--provider", "--image", "--workspace", "--recipe-mode", "--workspace-size", "--secret",
          "--env", "--ro-bind", "--timeout", "--tenant", "--net", "--allow"})
      if (a.given.count(name))
        return fail(std::string(name) + " shapes a new run; run " + run +
                    " exists (give it to its create, or leave out --run and $SANDGATE_RUN)");
  }
  auto client = session::Client::connect(a.socket);
  if (!client.ok()) return fail(std::move(client).error().context_add("--socket"));

  session::ExecRequest req;
  req.argv = a.command;
  if (!a.intent.empty()) req.intent = a.intent;
  if (run.empty()) {
    // A run made for this call and destroyed after it (exporting what it is told to), all in
    // one request: three round trips were 2-3 ms of a warm call's ~20.
    if (a.provider.empty())
      return fail("exec --socket without --run or $SANDGATE_RUN needs --provider");
    session::CreateRequest& create = req.create.emplace();
    create.provider = a.provider;
    create.image = a.image;
    if (a.given.count("--net")) create.net = a.net.mode;
    create.allow = a.net.allow;
    create.env = a.env;
    create.tenant = a.tenant;
    create.workspace = a.workspace;
    create.ro_binds = a.ro_binds;
    create.recipe_mode = a.recipe_mode == "auto" ? "" : a.recipe_mode;
    create.workspace_size = a.workspace_size;
    for (const auto& arg : a.secrets) {
      // The server reads FILE: it is on the same host (a unix socket).
      auto eq = arg.find('=');
      if (eq == std::string::npos) return fail("--secret '" + arg + "' is not NAME=FILE");
      create.secrets.emplace_back(arg.substr(0, eq), arg.substr(eq + 1));
    }
    if (!a.timeout.empty()) {
      auto t = parse_duration(a.timeout);
      if (!t.ok()) return fail(std::move(t).error().context_add("--timeout"));
      create.timeout = *t;
    }
    if (!a.export_.branch.empty() || !a.export_.directory.empty())
      req.destroy =
          session::DestroyRequest{"", a.export_.branch, a.export_.force, a.export_.directory};
  } else if (!a.export_.branch.empty() || !a.export_.directory.empty()) {
    return fail(
        "--export-branch and --export apply when the run ends: pass them to the destroy of run " +
        run);
  } else {
    req.env = run;
  }
  // ^C (or SIGTERM, SIGHUP) while the call runs: the server is asked to cancel it, and its
  // outcome still comes back and is shown, as `exec` without a server does.
  InterruptFd interrupt;
  auto outcome = client->exec(req, interrupt.fd());
  if (!outcome.ok()) return fail(outcome.error());
  const Json& o = *outcome;
  if (a.json) {
    std::cout << dump_json(o, 2) << "\n";
  } else {
    OutputSink sink(a.raw_output);
    sink.write(1, o.value("stdout", ""));
    sink.write(2, o.value("stderr", ""));
    sink.finish();
    if (o.value("termination", "exited") != "exited")
      std::cerr << "sandgate: " << o.value("termination", "") << ": " << o.value("reason", "")
                << "\nsandgate: advice (" << o.value("retry", "") << "): " << o.value("advice", "")
                << "\n";
  }
  if (int sig = interrupt.pending(); sig && o.value("termination", "") == "cancelled") {
    std::cerr << "sandgate: interrupted; the call was cancelled"
              << (run.empty() ? " and its run destroyed\n" : " (run " + run + " goes on)\n");
    return 128 + sig;
  }
  const Json& exit = o["exit"];
  if (exit.contains("code") && exit["code"].is_number_integer()) return exit["code"].get<int>();
  if (exit.contains("signal") && exit["signal"].is_number_integer())
    return 128 + exit["signal"].get<int>();
  return kExitError;
}

}  // namespace sandgate::cli
