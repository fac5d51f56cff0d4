#include "controller/session.h"

#include "core/log.h"
#include "core/state.h"

namespace sandgate::controller {

Result<std::unique_ptr<RunSession>> RunSession::open(Controller& controller,
                                                     providers::Provider& provider,
                                                     providers::EnvSpec spec) {
  if (spec.run_id.empty()) spec.run_id = new_run_id();
  std::unique_ptr<RunSession> s(new RunSession(controller));
  SG_ASSIGN_OR_RETURN(s->run_, controller.begin_run(spec.tenant, spec.run_id));
  spec.placement = s->run_->main_placement();
  auto env = provider.create(spec);
  if (!env.ok()) {
    (void)controller.end_run(std::move(s->run_));
    s->closed_ = true;
    return std::move(env).error();
  }
  s->env_ = std::move(env).value();
  return s;
}

RunSession::~RunSession() {
  if (auto st = close(); !st.ok()) spdlog::error("closing run: {}", st.error().message());
}

Result<CallOutcome> RunSession::call(const CallRequest& request) {
  if (closed_) return logic_error("call", "the run is closed");
  SG_ASSIGN_OR_RETURN(auto scope, controller_.begin_call(*run_, request.intent, request.argv));
  providers::Call call;
  call.argv = request.argv;
  call.env = request.env;
  call.cwd = request.cwd;
  call.timeout = scope->timeout();
  call.cancel_fd = request.cancel_fd;
  call.on_output = request.on_output;
  auto result = env_->exec(call, scope->placement());
  if (!result.ok()) {
    // Not run at all: still revoke the grant and remove the call's cgroup.
    (void)controller_.end_call(std::move(scope), providers::ExecResult{});
    return std::move(result).error();
  }
  return controller_.end_call(std::move(scope), *result);
}

Status RunSession::close() {
  if (closed_) return {};
  closed_ = true;
  Status first;
  if (env_) first = env_->destroy();
  if (run_) {
    auto s = controller_.end_run(std::move(run_));
    if (first.ok()) first = std::move(s);
  }
  return first;
}

}  // namespace sandgate::controller
