#include "cli/measure.h"

#include <fmt/format.h>
#include <unistd.h>

#include <ctime>
#include <iostream>

#include "session/run_session.h"

namespace sandgate::cli {

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

Status expect_true(const ExitStatus& status, const std::string& what) {
  if (status.shell_code() == 0) return {};
  return logic_error(what, "/bin/true exited with " + status.describe());
}

// One create + exec(true) + destroy; the wall time in milliseconds.
Result<double> cycle(providers::Provider& p) {
  auto start = Clock::now();
  auto env = p.create({});
  if (!env.ok()) return std::move(env).error();
  providers::Call call;
  call.argv = {"true"};
  auto r = (*env)->exec(call, {});
  SG_TRY((*env)->destroy());
  if (!r.ok()) return std::move(r).error();
  SG_TRY(expect_true(r->status, "exec true"));
  return ms_since(start);
}

// The cost of one call of /bin/true in a live run: through the provider alone
// (Environment::exec), and through the controller (RunSession::call: its own cgroup and grant,
// placed before exec, watched, ended with an outcome). Both live at once and the calls
// alternate, so exec sample i and call sample i saw the same moment of the machine and their
// ratio is the controller's share, whatever else the machine was doing.

Result<CallCosts> call_costs(providers::Provider& p, controller::Controller& controller, int n) {
  CallCosts costs;
  SG_ASSIGN_OR_RETURN(auto env, p.create({}));
  auto run = session::RunSession::open(controller, p, {});
  if (!run.ok()) {
    (void)env->destroy();  // the error that matters is the session's
    return std::move(run).error();
  }
  Status failed;
  for (int i = 0; i < n && failed.ok(); ++i) {
    providers::Call exec;
    exec.argv = {"true"};
    auto start = Clock::now();
    auto r = env->exec(exec, {});
    costs.exec_ms.push_back(ms_since(start));
    if (!r.ok()) {
      failed = std::move(r).error();
      break;
    }
    failed = expect_true(r->status, "exec true");
    if (!failed.ok()) break;
    session::CallRequest call;
    call.argv = {"true"};
    start = Clock::now();
    auto o = (*run)->call(call);
    costs.call_ms.push_back(ms_since(start));
    if (!o.ok()) {
      failed = std::move(o).error();
      break;
    }
    failed = expect_true(o->exec.status, "call true");
  }
  Status closed = (*run)->close();
  Status destroyed = env->destroy();
  SG_TRY(failed);
  SG_TRY(closed);
  SG_TRY(destroyed);
  return costs;
}

// The cost of doing nothing, the same moment: a bare spawn and wait of /bin/true on the host.
Result<double> bare_spawn() {
  auto start = Clock::now();
  SG_ASSIGN_OR_RETURN(auto child, spawn({"true"}));
  SG_ASSIGN_OR_RETURN(auto status, child.wait());
  SG_TRY(expect_true(status, "spawn true"));
  return ms_since(start);
}

// The short replay: every call of the trace run as a real effect under the per-call policy
// (--policy, else the built-in one); what a provider changes is whether the calls complete and land
// where they should.
Result<replay::PolicyScores> short_replay(Globals& g, const std::string& provider,
                                          const providers::ProviderOptions& options,
                                          const replay::ReplayPlan& plan,
                                          const replay::PolicyChoice& policy, Progress& progress,
                                          const std::string& prefix) {
  replay::ExperimentOptions o;
  o.provider = provider;
  o.provider_options = options;
  o.cgroup_root = g.cgroup_root_name();
  o.load_binary = companion_binary("sandgate-load");
  if (o.load_binary.empty())
    return logic_error("replay", "sandgate-load is not installed beside sandgate");
  // Each finished call is a detail of the one step: on a terminal the line counts the calls,
  // in a log the step is one line.
  o.progress = progress.reporter(
      prefix, fmt::format("replay: {} calls of a recorded burst", plan.calls.size()));
  auto pass = replay::run_policy_pass(g.registry, policy, {plan}, o, std::nullopt);
  if (!pass.ok()) return std::move(pass).error();
  for (const auto& r : pass->runs)
    if (!r.error.empty()) return logic_error("replay", r.error);
  return std::move(pass->scores);
}

// The replay's scores as the report model keeps them (reports::ReplaySummary).
reports::ReplaySummary replay_summary(const replay::PolicyScores& s) {
  reports::ReplaySummary r;
  r.calls = s.calls;
  r.completed = s.completed;
  r.killed = s.killed;
  r.cancelled = s.cancelled;
  r.timed_out = s.timed_out;
  r.failed_exit = s.failed_exit;
  r.mem_error_median = s.fidelity.mem_host.median;
  r.end_error_p95_ms = s.fidelity.end_ms.p95;
  r.wall_s = s.wall_s;
  r.scores = replay::to_json(s);
  return r;
}

// Now, UTC, ISO 8601: when the report was made.
std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace sandgate::cli
