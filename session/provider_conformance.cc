#include "session/provider_conformance.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>

#include "controller/controller.h"
#include "core/defer.h"
#include "core/files.h"
#include "core/state.h"
#include "core/strings.h"
#include "providers/external_program.h"
#include "session/run_session.h"

namespace sandgate::session {
namespace {

using providers::ExternalProgram;
using std::chrono::milliseconds;
using std::chrono::seconds;

class Conformance {
 public:
  explicit Conformance(const ConformanceOptions& o) : o_(o) {
    command_.name = "external:" + o.argv.at(0);
    command_.argv = o.argv;
    // Put into the provider's own environment: a provider that passes its environment to
    // calls shows it (exec.env_allowlist).
    canary_ = "sg-canary-" + new_run_id();
    command_.env = {"SANDGATE_CONFORMANCE_CANARY=" + canary_};
  }

  Result<std::vector<ConformanceCheck>> run() {
    Defer remove_recipe([&] { (void)remove_tree(recipe_); });
    SG_TRY(prepare_recipe());
    raw_checks();
    SG_TRY(exec_checks());
    return std::move(checks_);
  }

 private:
  void check(const std::string& name, bool passed, const std::string& detail) {
    checks_.push_back({name, passed, detail});
    if (o_.progress) o_.progress(checks_.back());
  }
  void check(const std::string& name, const Status& s, const std::string& ok_detail = "") {
    check(name, s.ok(), s.ok() ? ok_detail : s.error().message());
  }

  Status prepare_recipe() {
    recipe_ = o_.paths.work_dir + "/conformance-recipe-" + new_run_id();
    SG_TRY(make_dirs(recipe_ + "/sub", 0755));
    SG_TRY(write_file(recipe_ + "/hello.txt", "hello from the recipe\n",
                      O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    return {};
  }

  // --- raw exchanges ------------------------------------------------------------------------

  // A run directory as sandgate gives one, recorded so that gc finds it after a crash.
  struct RawRun {
    std::optional<RunState> state;
    std::string run_id, dir;
  };
  Result<RawRun> raw_run() {
    RawRun r;
    r.run_id = new_run_id();
    r.dir = o_.paths.work_dir + "/" + r.run_id;
    SG_ASSIGN_OR_RETURN(RunState st, RunState::create(o_.paths, r.run_id, command_.name,
                                                      {{Resource::Kind::kDirectory, r.dir}}));
    r.state.emplace(std::move(st));
    SG_TRY(make_dirs(o_.paths.work_dir, 0711));
    if (::mkdir(r.dir.c_str(), 0711) != 0) return sys_error("mkdir", r.dir);
    return r;
  }
  void end_raw_run(RawRun& r) {
    if (!r.state) return;
    (void)release_resources(o_.paths, r.state->resources());
    (void)r.state->finish();
  }

  Json create_message(long long id, const RawRun& r) {
    providers::EnvSpec spec;
    spec.workspace_recipe = recipe_;
    return providers::external::create_request(id, spec, r.run_id, r.dir, {});
  }

  // Expects the provider to refuse `line` with ok:false (and to stay up).
  void expect_refusal(ExternalProgram& p, const std::string& name, const std::string& line,
                      long long id, const std::string& what) {
    if (!p.running()) return check(name, false, "not run: the provider died on earlier input");
    auto sent = p.send_line(line, what);
    if (!sent.ok()) return check(name, sent);
    auto got = p.receive(id, what, ExternalProgram::Clock::now() + o_.timeouts.describe);
    if (got.ok())
      return check(name, false,
                   "accepted " + line.substr(0, 120) +
                       " (reply: " + dump_json(got->json).substr(0, 200) + ")");
    if (got.error().step == providers::external::kRefusedStep)
      return check(name, true, "refused: " + got.error().message());
    check(name, false, got.error().message());
  }

  void raw_checks() {
    auto r = raw_run();
    if (!r.ok()) return check("create.round_trip", false, r.error().message());
    auto started = ExternalProgram::start(command_, {}, &*r->state);
    if (!started.ok()) {
      check("describe.well_formed", false, started.error().message());
      return end_raw_run(*r);
    }
    ExternalProgram& p = *started;
    auto d =
        p.request(providers::external::describe_request(1), "describe", ms(o_.timeouts.describe));
    if (d.ok()) {
      auto parsed = providers::external::parse_describe_reply(*d);
      check("describe.well_formed", parsed.ok(),
            parsed.ok() ? parsed->name + " declares " + to_string(parsed->capabilities)
                        : parsed.error().message());
    } else {
      check("describe.well_formed", false, d.error().message());
    }

    expect_refusal(p, "protocol.rejects_non_json", "{this is not json", -1,
                   "a line that is not JSON");
    expect_refusal(p, "protocol.rejects_unknown_op", R"({"id":2,"op":"format_disk"})", 2,
                   "an unknown op");
    expect_refusal(p, "protocol.rejects_unknown_key",
                   R"({"id":3,"op":"describe","schema_version":1,"colour":"red"})", 3,
                   "describe with an unknown key");
    {
      Json bad = create_message(4, *r);
      bad["uid"] = "root";
      expect_refusal(p, "protocol.rejects_wrong_type", dump_json(bad), 4,
                     "create with \"uid\": \"root\"");
    }
    {
      Json missing = create_message(5, *r);
      missing.erase("run_dir");
      expect_refusal(p, "protocol.rejects_missing_field", dump_json(missing), 5,
                     "create without run_dir");
    }
    expect_refusal(p, "protocol.rejects_unknown_env",
                   dump_json(Json{{"id", 6},
                                  {"op", "exec"},
                                  {"env", "no-such-env"},
                                  {"argv", {"true"}},
                                  {"call_env", Json::array()},
                                  {"cwd", ""},
                                  {"timeout_ms", 1000},
                                  {"output_limit", 1024},
                                  {"rlimits", Json::object()}}),
                   6, "exec in an environment that does not exist");
    if (p.running()) {
      auto again =
          p.request(providers::external::describe_request(7), "describe", ms(o_.timeouts.describe));
      check("protocol.survives_bad_input", again.ok(),
            again.ok() ? "still answers describe" : again.error().message());
    } else {
      check("protocol.survives_bad_input", false, "the provider died on bad input");
    }

    // create, destroy, destroy again.
    std::string workspace_host;
    if (p.running()) {
      auto c = p.request(create_message(8, *r), "create", ms(o_.timeouts.create));
      auto parsed = c.ok() ? providers::external::parse_create_reply(*c)
                           : Result<providers::external::CreateReply>(c.error());
      Status ok;
      if (parsed.ok()) {
        workspace_host = parsed->workspace_host;
        struct stat st {};
        if (!workspace_host.starts_with(r->dir + "/"))
          ok = logic_error("create",
                           "workspace_host " + workspace_host + " is not inside run_dir " + r->dir);
        else if (::stat((workspace_host + "/hello.txt").c_str(), &st) != 0)
          ok = logic_error("create",
                           "the recipe's hello.txt is not in workspace_host " + workspace_host);
        if (ok.ok()) {
          auto destroyed = p.request(providers::external::destroy_request(9, parsed->env),
                                     "destroy", ms(o_.timeouts.destroy));
          if (!destroyed.ok()) {
            check("create.round_trip", true, "workspace " + workspace_host);
            check("destroy.removes_workspace", false, destroyed.error().message());
          } else {
            check("create.round_trip", true, "workspace " + workspace_host);
            check("destroy.removes_workspace", ::access(workspace_host.c_str(), F_OK) != 0,
                  ::access(workspace_host.c_str(), F_OK) != 0
                      ? "gone"
                      : workspace_host + " is still there after destroy");
            auto twice = p.request(providers::external::destroy_request(10, parsed->env), "destroy",
                                   ms(o_.timeouts.destroy));
            check("destroy.idempotent", twice.ok(),
                  twice.ok() ? "a second destroy is ok" : twice.error().message());
          }
        } else {
          check("create.round_trip", ok);
        }
      } else {
        check("create.round_trip", false, parsed.error().message());
      }
    }
    if (p.running()) {
      auto exit = p.finish(o_.timeouts.exit);
      check("protocol.exit_on_eof", exit.ok() && exit->exited && exit->code == 0,
            exit.ok() ? "exits with " + exit->describe() + " when its stdin closes"
                      : exit.error().message());
    }
    p.kill();
    end_raw_run(*r);
  }

  // --- calls through sandgate ---------------------------------------------------------------

  Status exec_checks() {
    providers::ProviderOptions po;
    po.paths = o_.paths;
    auto made = providers::ExternalProvider::make(po, command_, o_.timeouts);
    if (!made.ok()) {
      check("exec.provider", false, made.error().message());
      return {};
    }
    controller::ControllerOptions copts;
    copts.paths = o_.paths;
    copts.root = o_.cgroup_root;
    copts.policy = policy();
    SG_ASSIGN_OR_RETURN(auto controller, controller::Controller::create(std::move(copts)));
    providers::EnvSpec spec;
    spec.workspace_recipe = recipe_;
    spec.env = {"SANDGATE_ALLOWED=allowed-value"};
    // One run for every check while the provider keeps it; a call that fails outright (the
    // provider was killed for it) ends that run, and the next check gets a fresh one, so that
    // each check is judged on its own.
    std::unique_ptr<RunSession> s;
    std::string workspace;
    auto call = [&](std::vector<std::string> argv,
                    CallRequest extra = {}) -> Result<controller::CallOutcome> {
      if (!s) {
        auto opened = RunSession::open(*controller, **made, spec);
        if (!opened.ok())
          return std::move(opened).error().context_add("opening a run for the check");
        s = std::move(opened).value();
        workspace = s->workspace_path();
      }
      extra.argv = std::move(argv);
      if (!extra.intent) extra.intent = "conformance";
      auto o = s->call(extra);
      if (!o.ok()) {
        (void)s->close();
        s.reset();
      }
      return o;
    };
    if (auto first = call({"true"}); !first.ok()) {
      check("exec.provider", false, first.error().message());
      return {};
    }
    auto sh = [&](const std::string& script, CallRequest extra = {}) {
      return call({"sh", "-c", script}, std::move(extra));
    };
    auto describe_outcome = [](const controller::CallOutcome& o) {
      return o.exec.status.describe() + ", stdout " + describe_json(Json(o.exec.stdout_data)) +
             ", stderr " + describe_json(Json(o.exec.stderr_data));
    };

    if (auto o = sh("exit 3"); !o.ok())
      check("exec.exit_status", false, o.error().message());
    else
      check("exec.exit_status", o->exec.status.exited && o->exec.status.code == 3,
            describe_outcome(*o));

    if (auto o = sh("kill -9 $$"); !o.ok())
      check("exec.killed_by_signal", false, o.error().message());
    else
      check("exec.killed_by_signal", o->exec.status.shell_code() == 128 + 9, describe_outcome(*o));

    if (auto o = sh("printf 'out\\377\\001'; printf 'err\\n' >&2"); !o.ok()) {
      check("exec.output", false, o.error().message());
    } else {
      bool exact = o->exec.stdout_data == "out\377\001" && o->exec.stderr_data == "err\n" &&
                   o->exec.stdout_bytes == 5;
      check("exec.output", exact, exact ? "stdout and stderr byte for byte" : describe_outcome(*o));
    }
    {
      CallRequest r;
      r.output_limit = 1000;
      if (auto o = sh("i=0; while [ $i -lt 100 ]; do printf '%049d\\n' $i; i=$((i+1)); done", r);
          !o.ok()) {
        check("exec.output_limit", false, o.error().message());
      } else {
        bool ok = o->exec.stdout_data.size() <= 1000 && o->exec.stdout_data.size() >= 900 &&
                  o->exec.stdout_bytes == 5000 && o->exec.stdout_truncated;
        check("exec.output_limit", ok,
              "kept " + std::to_string(o->exec.stdout_data.size()) + " of " +
                  std::to_string(o->exec.stdout_bytes) +
                  " bytes at a limit of 1000 (the call wrote 5000)");
      }
    }
    if (auto o = call({"sandgate-no-such-command"}); !o.ok()) {
      check("exec.command_not_found", false, o.error().message());
    } else {
      check("exec.command_not_found", o->exec.status.shell_code() == 127,
            describe_outcome(*o) + (o->exec.start_failure
                                        ? ", start failure " + o->exec.start_failure->describe()
                                        : ""));
    }
    {
      CallRequest r;
      r.env = {"SANDGATE_CALL=call-value"};
      if (auto o = call({"env"}, r); !o.ok()) {
        check("exec.env_allowlist", false, o.error().message());
      } else {
        const std::string& out = o->exec.stdout_data;
        std::vector<std::string> wrong;
        if (out.find("SANDGATE_ALLOWED=allowed-value\n") == std::string::npos)
          wrong.push_back("the allowlisted SANDGATE_ALLOWED is missing");
        if (out.find("SANDGATE_CALL=call-value\n") == std::string::npos)
          wrong.push_back("the call's SANDGATE_CALL is missing");
        if (out.find(canary_) != std::string::npos)
          wrong.push_back("the provider's own environment reached the call (" + canary_ + ")");
        check("exec.env_allowlist", wrong.empty(),
              wrong.empty() ? "allowlist and call env only" : join(wrong, "; "));
      }
    }
    {
      CallRequest r;
      r.cwd = workspace + "/sub";
      if (auto o = call({"pwd"}, r); !o.ok())
        check("exec.cwd", false, o.error().message());
      else
        check("exec.cwd", o->exec.stdout_data == r.cwd + "\n",
              "asked " + r.cwd + ", got " + describe_json(Json(o->exec.stdout_data)));
    }
    if (auto o = sh("cat hello.txt && echo changed > hello.txt && cat hello.txt"); !o.ok()) {
      check("exec.workspace_recipe", false, o.error().message());
    } else {
      auto host = read_file(recipe_ + "/hello.txt");
      bool ok = o->exec.stdout_data == "hello from the recipe\nchanged\n" && host.ok() &&
                *host == "hello from the recipe\n";
      check("exec.workspace_recipe", ok,
            ok ? "the recipe is in the workspace; writing there leaves the host's copy alone"
               : describe_outcome(*o) + "; host recipe now " +
                     (host.ok() ? describe_json(Json(*host)) : "unreadable"));
    }
    {
      // The grant's timeout, enforced by the provider: the call must end long before its sleep.
      auto before = std::chrono::steady_clock::now();
      CallRequest r;
      r.intent = "conformance_timeout";
      auto o = sh("sleep 60", r);
      auto took = std::chrono::steady_clock::now() - before;
      if (!o.ok())
        check("exec.timeout", false, o.error().message());
      else
        check("exec.timeout", o->exec.timed_out && took < seconds(40),
              "timed_out=" + std::string(o->exec.timed_out ? "true" : "false") + " after " +
                  format_duration(std::chrono::duration_cast<Duration>(took)) +
                  " (timeout 2s, the call sleeps 60s)");
    }
    {
      // ^C: the cancel descriptor is readable from the start, so the cancel reaches the
      // provider while the call starts; it must end the call and say so, long before its sleep.
      Pipe cancel_pipe;
      if (auto made = make_pipe(O_CLOEXEC); made.ok()) cancel_pipe = std::move(made).value();
      (void)write_all(cancel_pipe.write.get(), "x");
      auto before = std::chrono::steady_clock::now();
      CallRequest r;
      r.cancel_fd = cancel_pipe.read.get();
      r.intent = "conformance_timeout";  // a provider that ignores the cancel is ended anyway
      auto o = sh("sleep 60", r);
      auto took = std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - before);
      if (!o.ok())
        check("exec.cancel", false, o.error().message());
      else
        check("exec.cancel", o->exec.cancelled && took < seconds(40),
              "cancelled=" + std::string(o->exec.cancelled ? "true" : "false") + " after " +
                  format_duration(took) + " (the call sleeps 60s), " + o->exec.status.describe());
    }
    {
      // rlimits: read back from the host while parked, and from inside.
      std::string limits_line;
      CallRequest r;
      r.intent = "conformance_rlimits";
      r.on_started = [&](const controller::CallScope&, pid_t pid) {
        auto limits = read_file("/proc/" + std::to_string(pid) + "/limits");
        if (limits.ok())
          for (auto line : split(*limits, '\n'))
            if (line.starts_with("Max open files")) limits_line = std::string(line);
      };
      if (auto o = sh("ulimit -n", r); !o.ok()) {
        check("exec.rlimits", false, o.error().message());
      } else {
        bool host_ok = limits_line.find(" 123 ") != std::string::npos;
        bool inside_ok = o->exec.stdout_data == "123\n";
        check("exec.rlimits", host_ok && inside_ok,
              "open_files 123 granted; host read back \"" + limits_line +
                  "\", inside `ulimit -n` = " + describe_json(Json(o->exec.stdout_data)));
      }
    }
    {
      // Placement: the call's cgroup must account for the CPU time the call itself reports
      // (`times`: the shell's user and system time). A provider that moved the call out after
      // sandgate placed it leaves its CPU time elsewhere.
      auto o = sh("i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; times");
      if (!o.ok()) {
        check("exec.placement", false, o.error().message());
      } else {
        double self_s = 0;
        int m1 = 0, m2 = 0;
        double s1 = 0, s2 = 0;
        if (std::sscanf(o->exec.stdout_data.c_str(), "%dm%lfs %dm%lfs", &m1, &s1, &m2, &s2) == 4)
          self_s = m1 * 60 + s1 + m2 * 60 + s2;
        double cgroup_s = o->observed.cpu_usage_us / 1e6;
        check("exec.placement", self_s > 0.05 && cgroup_s >= 0.5 * self_s,
              "the call reports " + std::to_string(self_s) + "s of CPU, its cgroup counted " +
                  std::to_string(cgroup_s) + "s");
      }
    }
    if (s) {
      auto closed = s->close();
      check("exec.destroy", closed, "the run closed");
    } else {
      check("exec.destroy", false, "not run: the last call had ended the run");
    }
    return {};
  }

  // The built-in policy plus the intents the checks declare.
  static controller::Policy policy() {
    controller::Policy p = controller::default_policy();
    p.name = "sandgate-conformance";
    controller::Grant g;
    g.memory_max = MiB(512);
    g.pids_max = 256;
    g.cpu_cores = 1.0;
    g.timeout = seconds(60);
    p.intents["conformance"] = g;
    controller::Grant timeout = g;
    timeout.timeout = seconds(2);
    p.intents["conformance_timeout"] = timeout;
    controller::Grant rlimits = g;
    rlimits.open_files = 123;
    p.intents["conformance_rlimits"] = rlimits;
    return p;
  }

  static milliseconds ms(Duration d) { return std::chrono::duration_cast<milliseconds>(d); }

  const ConformanceOptions& o_;
  providers::ExternalCommand command_;
  std::string canary_, recipe_;
  std::vector<ConformanceCheck> checks_;
};

}  // namespace

Result<std::vector<ConformanceCheck>> run_conformance(const ConformanceOptions& options) {
  if (options.argv.empty())
    return logic_error("provider conformance", "name the program: -- PROGRAM [ARGS]");
  if (::geteuid() != 0)
    return logic_error("provider conformance",
                       "needs root (it makes the cgroups calls are placed in)");
  Conformance c(options);
  return c.run();
}

Json to_json(const std::vector<ConformanceCheck>& checks) {
  Json list = Json::array();
  for (const auto& c : checks) {
    Json e = {{"name", c.name}, {"passed", c.passed}};
    set_text_field(e, "detail", c.detail);
    list.push_back(e);
  }
  return {{"schema_version", 1}, {"checks", list}};
}

}  // namespace sandgate::session
