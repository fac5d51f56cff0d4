#include "providers/external.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>

#include "core/files.h"
#include "core/log.h"
#include "core/state.h"
#include "core/strings.h"
#include "providers/external_program.h"
#include "providers/supervised_environment.h"

extern char** environ;

namespace sandgate::providers {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

milliseconds ms(Duration d) { return std::chrono::duration_cast<milliseconds>(d); }

bool valid_run_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  return true;
}

// The describe exchange, on a program just started: the same in make() and at every create.
Result<external::DescribeReply> describe(ExternalProgram& program, const ExternalTimeouts& t) {
  SG_ASSIGN_OR_RETURN(Json reply,
                      program.request(external::describe_request(1), "describe", ms(t.describe)));
  auto d = external::parse_describe_reply(reply);
  if (!d.ok()) {
    program.kill();
    return program.failed(std::move(d).error());
  }
  return d;
}

class ExternalEnvironment : public Environment {
 public:
  ExternalEnvironment(HostPaths paths, RunState state, std::string run_id, std::string run_dir,
                      ExternalTimeouts timeouts)
      : paths_(std::move(paths)),
        state_(std::move(state)),
        run_id_(std::move(run_id)),
        run_dir_(std::move(run_dir)),
        timeouts_(timeouts) {}
  ~ExternalEnvironment() override {
    if (auto s = destroy(); !s.ok())
      spdlog::error("destroying run {}: {}", run_id_, s.error().message());
  }

  Status start(const ExternalCommand& command, const external::DescribeReply& described,
               const EnvSpec& spec) {
    SG_ASSIGN_OR_RETURN(auto env, resolve_env_allowlist(spec.env, environ));
    SG_ASSIGN_OR_RETURN(ExternalProgram p,
                        ExternalProgram::start(command, spec.placement, &state_));
    program_.emplace(std::move(p));
    SG_ASSIGN_OR_RETURN(auto again, describe(*program_, timeouts_));
    // Each process is asked: a program whose answer changes between processes is not one
    // provider, and its first answer is what the policy check used.
    if (again.capabilities != described.capabilities || again.unsafe != described.unsafe)
      return program_->failed(
          logic_error("describe", "the provider declared different capabilities (" +
                                      to_string(again.capabilities) + ") than when it was made (" +
                                      to_string(described.capabilities) + ")"));
    SG_ASSIGN_OR_RETURN(Json reply, program_->request(external::create_request(
                                                          next_id_++, spec, run_id_, run_dir_, env),
                                                      "create", ms(timeouts_.create)));
    auto created = external::parse_create_reply(reply);
    if (!created.ok()) return program_->failed(std::move(created).error());
    // What the provider keeps on the host must be where sandgate (and gc) will remove it.
    if (!created->workspace_host.starts_with(run_dir_ + "/") ||
        created->workspace_host.find("/../") != std::string::npos ||
        created->workspace_host.ends_with("/.."))
      return program_->failed(logic_error("provider reply",
                                          "create: \"workspace_host\" must be inside the run "
                                          "directory " +
                                              run_dir_ + ", got " + created->workspace_host));
    env_id_ = created->env;
    workspace_ = created->workspace;
    workspace_host_ = created->workspace_host;
    if (spec.timeout.count() > 0) deadline_ = Clock::now() + spec.timeout;
    return {};
  }

  const std::string& run_id() const override { return run_id_; }
  std::string workspace_host_path() const override { return workspace_host_; }
  std::string workspace_path() const override { return workspace_; }

  Result<ExecResult> exec(const Call& call, const Placement& placement) override {
    if (destroyed_) return logic_error("exec", "the environment was destroyed", run_id_);
    if (!broken_.empty())
      return logic_error("exec", "the provider failed earlier: " + broken_, run_id_);
    if (timed_out_) return logic_error("exec", "the run's wall-clock timeout has expired", run_id_);
    if (call.argv.empty()) return logic_error("exec", "empty command");
    Call bounded = call;
    bool run_deadline_applies = false;
    if (deadline_ != Clock::time_point::max()) {
      auto left = std::chrono::duration_cast<Duration>(deadline_ - Clock::now());
      if (left.count() <= 0) left = Duration(1);
      if (bounded.timeout.count() == 0 || left < bounded.timeout) {
        bounded.timeout = left;
        run_deadline_applies = true;
      }
    }
    auto result = run_call(bounded, placement);
    if (!result.ok()) {
      // The conversation is in an unknown state: the program is gone (it was killed) and so
      // is every call of the run.
      broken_ = result.error().message();
      if (program_) program_->kill();
      return result;
    }
    if (result->timed_out && run_deadline_applies) {
      timed_out_ = true;
      if (program_) program_->kill();
    }
    return result;
  }

  Status destroy() override {
    if (destroyed_) return {};
    destroyed_ = true;
    Status first;
    if (program_ && program_->running()) {
      if (broken_.empty() && !env_id_.empty()) {
        auto reply = program_->request(external::destroy_request(next_id_++, env_id_), "destroy",
                                       ms(timeouts_.destroy));
        if (reply.ok()) {
          if (auto s = external::parse_destroy_reply(*reply); !s.ok())
            first = program_->failed(std::move(s).error());
        } else {
          first = std::move(reply).error();
        }
      }
      auto exit = program_->finish(timeouts_.exit);
      if (!exit.ok() && first.ok()) first = std::move(exit).error();
      program_.reset();
    }
    // The program (reaped by now) and the run directory, whatever the provider left in it.
    if (auto released = release_resources(paths_, state_.resources()); !released.ok())
      return released;
    SG_TRY(state_.finish());
    return first;
  }

 private:
  Result<ExecResult> run_call(const Call& call, const Placement& placement) {
    ExternalProgram& p = *program_;
    const long long id = next_id_++;
    const auto start = Clock::now();
    SG_TRY(p.send(external::exec_request(id, env_id_, call), "exec"));
    auto on_cancel = [&] { (void)p.send(external::cancel_message(id), "cancel"); };
    bool cancel_sent = false;
    auto cancel = [&] {
      cancel_sent = true;
      on_cancel();
    };

    ExecResult result;
    // Until the call is parked: the provider has this long to start it.
    SG_ASSIGN_OR_RETURN(auto line, p.receive(id, "exec", Clock::now() + timeouts_.started,
                                             external::kMaxReplyLine, call.cancel_fd, cancel));
    if (!line.event) {
      // A refusal (ok: false) arrived as an Error already; an ok reply before the call was
      // ever parked means it ran unplaced.
      p.kill();
      return p.failed(logic_error("provider reply",
                                  "exec: a final reply before the \"started\" event: the call "
                                  "was never parked for placement"));
    }
    auto pid = external::parse_started_event(line.json);
    if (!pid.ok()) {
      p.kill();
      return p.failed(std::move(pid).error());
    }
    result.host_pid = *pid;
    // Cancelled while it was starting: the provider kills it parked; it never runs, so it is
    // neither placed nor released.
    if (!cancel_sent) {
      SG_TRY(place(p, *pid, placement));
      if (call.on_started) call.on_started(*pid);
      SG_TRY(p.send(external::go_message(id), "go"));
    }

    auto deadline = Clock::time_point::max();
    if (call.timeout.count() > 0) deadline = Clock::now() + call.timeout + timeouts_.exec_grace;
    SG_ASSIGN_OR_RETURN(
        line, p.receive(id, "exec", deadline, external::max_exec_reply_line(call.output_limit),
                        cancel_sent ? -1 : call.cancel_fd, cancel));
    if (line.event) {
      p.kill();
      return p.failed(logic_error("provider reply", "exec: a second event " +
                                                        describe_json(line.json.at("event")) +
                                                        " where the final reply was due"));
    }
    auto reply = external::parse_exec_reply(line.json, call.output_limit);
    if (!reply.ok()) {
      p.kill();
      return p.failed(std::move(reply).error());
    }
    ExecResult r = std::move(reply).value().result;
    r.host_pid = result.host_pid;
    r.wall = Clock::now() - start;
    if (call.on_output) {
      if (!r.stdout_data.empty()) call.on_output(1, r.stdout_data);
      if (!r.stderr_data.empty()) call.on_output(2, r.stderr_data);
    }
    return r;
  }

  // Writes the parked call into its cgroups, after checking it is the provider's own process,
  // and reads the placement back as the host sees it.
  Status place(ExternalProgram& p, pid_t pid, const Placement& placement) {
    if (!descends_from(paths_.proc, pid, p.pid())) {
      p.kill();
      return p.failed(logic_error("provider reply", "exec: the started pid " + std::to_string(pid) +
                                                        " is not a process of the provider (pid " +
                                                        std::to_string(p.pid()) +
                                                        "); it was not placed"));
    }
    for (const auto& dir : placement.cgroup_dirs) {
      if (auto s = write_file(dir + "/cgroup.procs", std::to_string(pid)); !s.ok())
        return std::move(s).error().context_add("place call in its cgroup");
      auto in = in_cgroup(paths_.proc, pid, dir);
      if (!in.ok()) return std::move(in).error().context_add("read the call's placement back");
      if (!*in) {
        auto table = read_file(paths_.proc + "/" + std::to_string(pid) + "/cgroup");
        std::string listed = table.ok() ? *table : table.error().message();
        std::replace(listed.begin(), listed.end(), '\n', ' ');
        return logic_error(
            "place call in its cgroup",
            "/proc/" + std::to_string(pid) +
                "/cgroup does not list it after it was written there (it lists: " + listed + ")",
            dir);
      }
    }
    return {};
  }

  HostPaths paths_;
  RunState state_;
  std::string run_id_, run_dir_;
  ExternalTimeouts timeouts_;
  std::optional<ExternalProgram> program_;
  long long next_id_ = 2;  // 1 is describe
  std::string env_id_, workspace_, workspace_host_;
  Clock::time_point deadline_ = Clock::time_point::max();
  std::string broken_;
  bool timed_out_ = false;
  bool destroyed_ = false;
};

}  // namespace

Result<std::unique_ptr<Provider>> ExternalProvider::make(const ProviderOptions& options,
                                                         ExternalCommand command,
                                                         ExternalTimeouts timeouts) {
  std::unique_ptr<ExternalProvider> p(new ExternalProvider(options, std::move(command), timeouts));
  auto made = [&]() -> Status {
    SG_ASSIGN_OR_RETURN(ExternalProgram program, ExternalProgram::start(p->command_));
    SG_ASSIGN_OR_RETURN(p->described_, describe(program, timeouts));
    SG_ASSIGN_OR_RETURN(auto exit, program.finish(timeouts.exit));
    if (!exit.exited || exit.code != 0)
      return program.failed(
          logic_error("describe", "the provider ended with " + exit.describe() +
                                      " when its stdin closed (expected exit 0)"));
    return {};
  }();
  if (!made.ok())
    return std::move(made).error().context_add("asking external provider " + p->command_.name +
                                               " to describe itself");
  const auto& d = p->described_;
  if (d.unsafe && !options.allow_unsafe_host)
    return logic_error("select provider", p->command_.name +
                                              " declares itself unsafe (no isolation); pass "
                                              "--allow-unsafe-host if that is what you want");
  p->info_.name = p->command_.name;
  p->info_.summary = d.name + ": " + d.summary + " (external: " + join(p->command_.argv, " ") + ")";
  p->info_.unsafe = d.unsafe;
  p->info_.capabilities = d.capabilities;
  return std::unique_ptr<Provider>(std::move(p));
}

Result<std::unique_ptr<Environment>> ExternalProvider::create(const EnvSpec& spec) {
  SG_TRY(refuse_allowlist(info_.name, spec.network));
  if (!spec.base_paths.empty())
    return logic_error("create environment",
                       info_.name +
                           ": an external provider makes its own root; --base-path is "
                           "for namespaces and podman");
  if (spec.workspace_size != 0)
    return logic_error("create environment",
                       info_.name +
                           ": an external provider makes its own workspace; --workspace-size "
                           "is for namespaces");
  if (!spec.weakenings.empty())
    return logic_error("create environment",
                       "test-only weakenings apply to the namespaces provider alone");
  std::string run_id = spec.run_id.empty() ? new_run_id() : spec.run_id;
  if (!valid_run_id(run_id))
    return logic_error("create environment", "run id must be 1-64 of [A-Za-z0-9_-]", run_id);
  const HostPaths& paths = options_.paths;
  std::string run_dir = paths.work_dir + "/" + run_id;
  // Recorded before it is made; the provider's process is recorded as soon as it exists.
  SG_ASSIGN_OR_RETURN(RunState state, RunState::create(paths, run_id, command_.name,
                                                       {{Resource::Kind::kDirectory, run_dir}}));
  auto env =
      std::make_unique<ExternalEnvironment>(paths, std::move(state), run_id, run_dir, timeouts_);
  auto fail = [&](Error e) -> Error {
    (void)env->destroy();
    e.context.push_back("creating an environment with " + command_.name);
    return e;
  };
  if (auto s = make_dirs(paths.work_dir, 0711); !s.ok()) return fail(std::move(s).error());
  if (::mkdir(run_dir.c_str(), 0711) != 0) return fail(sys_error("mkdir run directory", run_dir));
  if (auto s = env->start(command_, described_, spec); !s.ok()) return fail(std::move(s).error());
  return std::unique_ptr<Environment>(std::move(env));
}

std::string external_target(const std::string& name) {
  return name.starts_with(kExternalPrefix) ? name.substr(std::string_view(kExternalPrefix).size())
                                           : "";
}

bool names_program(const std::string& target) { return target.find('/') != std::string::npos; }

Result<std::vector<ExternalCommand>> parse_providers_config(const Json& j,
                                                            const std::string& source) {
  auto fail = [&](const std::string& what) {
    return logic_error("read providers config", what, source);
  };
  if (!j.is_object()) return fail("the file must hold a JSON object, got " + describe_json(j));
  for (const auto& [key, value] : j.items())
    if (key != "schema_version" && key != "providers")
      return fail("unknown key \"" + key + "\" (known: schema_version, providers)");
  if (!j.contains("schema_version") || j.at("schema_version") != 1)
    return fail("\"schema_version\" must be 1, got " + (j.contains("schema_version")
                                                            ? describe_json(j.at("schema_version"))
                                                            : std::string("nothing")));
  if (!j.contains("providers") || !j.at("providers").is_array())
    return fail("\"providers\" must be an array");
  std::vector<ExternalCommand> out;
  size_t index = 0;
  for (const auto& e : j.at("providers")) {
    std::string at = "providers[" + std::to_string(index++) + "]";
    if (!e.is_object()) return fail(at + " must be an object, got " + describe_json(e));
    for (const auto& [key, value] : e.items())
      if (key != "name" && key != "command" && key != "env")
        return fail(at + ": unknown key \"" + key + "\" (known: name, command, env)");
    ExternalCommand c;
    if (!e.contains("name") || !e.at("name").is_string())
      return fail(at + ": \"name\" must be a string");
    std::string name = e.at("name").get<std::string>();
    bool good = !name.empty() && name.size() <= 64;
    for (char ch : name)
      good = good &&
             (std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.');
    if (!good) return fail(at + ": \"name\" must be 1-64 of [A-Za-z0-9._-], got \"" + name + "\"");
    c.name = kExternalPrefix + name;
    for (const char* key : {"command", "env"}) {
      if (!e.contains(key)) continue;
      const Json& v = e.at(key);
      auto& list = std::string_view(key) == "command" ? c.argv : c.env;
      if (!v.is_array()) return fail(at + ": \"" + key + "\" must be an array of strings");
      for (const auto& s : v) {
        if (!s.is_string())
          return fail(at + ": \"" + key + "\" must be an array of strings, got " +
                      describe_json(s));
        list.push_back(s.get<std::string>());
      }
    }
    if (c.argv.empty() || c.argv[0].empty()) return fail(at + ": \"command\" must name a program");
    for (const auto& other : out)
      if (other.name == c.name) return fail(at + ": \"" + name + "\" is configured twice");
    out.push_back(std::move(c));
  }
  return out;
}

Result<std::vector<ExternalCommand>> load_providers_config(const std::string& path) {
  SG_ASSIGN_OR_RETURN(Json j, read_json_file(path));
  SG_ASSIGN_OR_RETURN(auto commands, parse_providers_config(j, path));
  // A program named by a relative path ("examples/providers/bwrap-provider" or
  // "./bwrap-provider") lives beside the file that names it, not wherever sandgate runs.
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
  for (auto& c : commands)
    if (names_program(c.argv[0]) && c.argv[0][0] != '/') c.argv[0] = dir + "/" + c.argv[0];
  return commands;
}

}  // namespace sandgate::providers
