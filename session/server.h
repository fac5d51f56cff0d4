// The one server of the orchestrator protocol (session/protocol.h), behind `sandgate serve`
// (stdin/stdout or a unix socket) and `sandgate record` (one recorded run on a socket).
//
// Requests for different environments run concurrently: an orchestrator driving many agents
// must not wait for one agent's compile. Each environment's requests run in the order they
// were submitted, on a strand (one worker thread) of its own; create, list, providers and
// policy run on a control strand. Replies are therefore in order per environment and may
// interleave across environments; `id` tells them apart.
//
// destroy answers once what the run hands back (its export) is done; the rest of it (the
// environment, the run's cgroups) is removed after the answer, on a strand of its own, so that
// no client waits for it. close_all() waits for those removals too.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "controller/controller.h"
#include "core/egress.h"
#include "core/fd.h"
#include "core/json.h"
#include "providers/registry.h"
#include "session/protocol.h"
#include "session/run_session.h"

namespace sandgate::session {

class Strand;
class RunPool;

// One client's stream of requests (serve_stream): its `cancel`, or its hanging up, stops the
// calls it sent and no one else's.
class Connection {
 public:
  // `server_cancel_fd`: the server's own (ServerOptions::cancel_fd, -1: none), which stops
  // this connection's calls too.
  static Result<std::unique_ptr<Connection>> open(int server_cancel_fd);
  // Readable once the connection or the server cancels: what its calls poll (an epoll set of
  // the two, so that a provider polls one fd as before).
  int cancel_fd() const { return set_.get(); }
  void cancel();
  // Not cancelled any more: when none of its calls is outstanding.
  void rearm();

 private:
  UniqueFd event_, set_;
};

struct ServerOptions {
  const providers::Registry* registry = nullptr;
  providers::ProviderOptions provider_options;
  // Readable: cancel every call in progress (a signalfd for SIGINT/SIGTERM).
  int cancel_fd = -1;
  // What every environment `create` makes is watched with (the activity tracer: each call's
  // outcome gets `observed`, and the ladder's run-queue rule can act).
  RunOptions run_options;
  // Runs with an allowlist (`serve --net allowlist`): where their traffic goes and the entries
  // every such run gets (the policy's and serve's --allow; a create adds its "allow"). With
  // it, run_options.egress (the guard) must be set, and run_options.dns_upstream where an entry
  // is a name. Unset: every run has no network, and a create asking for one is refused.
  struct Network {
    std::string upstream_netns;
    std::vector<EgressRule> egress;
  };
  std::optional<Network> network;
  // Every run's read-only base narrowed to these host paths (EnvSpec::base_paths, resolved by
  // providers::resolve_base_paths: the policy's base.allow and serve's --base-path); empty:
  // each provider's default base.
  std::vector<std::string> base_paths;
  // `sandgate record`: the server serves this one run and does not own it. `create` answers
  // with it (recording: true) and makes nothing, `destroy` keeps it, `exec` for any other
  // environment is an error.
  RunSession* recorded_run = nullptr;
  // Around each exec (the recorder notes call events): before_call returns a token that
  // after_call gets back once the call's outcome exists, with the outcome (null: the call
  // failed to run).
  std::function<std::string(const ExecRequest&)> before_call;
  std::function<void(const std::string& token, const controller::CallOutcome* outcome)> after_call;
  // `serve --pool N`: keep N runs made ahead for each shape of create the server has answered
  // (session/run_pool.h says which shapes); 0: every create makes its run then. Ignored with
  // recorded_run.
  size_t pool = 0;
};

class Server {
 public:
  Server(controller::Controller& controller, ServerOptions options);
  ~Server();  // close_all(); errors logged

  // Parses one request line and runs it on its strand; the reply line (no '\n') goes to
  // `reply`, possibly on another thread, after replies to later requests for other
  // environments. Never throws; a malformed line is answered at once. `connection` (null: none,
  // and `cancel` is refused) is whose calls a `cancel` stops; it outlives the request.
  void submit(const std::string& line, std::function<void(std::string)> reply,
              Connection* connection = nullptr);
  // The server's cancel_fd (ServerOptions), for the connections it serves.
  int cancel_fd() const { return options_.cancel_fd; }
  // submit() and wait for the reply (tests, simple transports).
  std::string handle_line(const std::string& line);
  // Waits until every request submitted so far has been answered.
  void drain();
  // drain(), then destroys every environment still open (end of input, SIGTERM).
  void close_all();

 private:
  struct Env;
  // Where one request's reply line goes (submit's `reply`), shared by the strands that answer
  // it.
  struct Answer {
    std::function<void(std::string)> reply;
  };
  // `cancel_fd`: what an exec polls to be stopped (its connection's, else the server's).
  Json run(const Request& request, int cancel_fd);
  // work(), or the request's error if it throws.
  Json guarded(const Json& id, const std::function<Json()>& work);
  // Sends the reply; the request is no longer pending.
  void answered(Answer& answer, const Json& reply);
  // An exec with `create`: create, exec and destroy as one request.
  void one_call(const Request& req, const std::shared_ptr<Answer>& answer, int cancel_fd);
  Result<Json> create(const CreateRequest& r);
  // Opens a run as `r` asks with a provider from `providers` (made on first use): the control
  // strand's for creates made cold, the pool's on its own thread.
  Result<std::unique_ptr<RunSession>> open_run(
      const CreateRequest& r,
      std::map<std::string, std::unique_ptr<providers::Provider>>& providers);
  Status network_of(const CreateRequest& r, providers::EnvSpec& spec) const;
  // `last`: no call follows in this run (one_call), so none is prepared for.
  Result<Json> exec(const ExecRequest& r, int cancel_fd, bool last = false);
  Result<Json> destroy(const DestroyRequest& r);
  Json list() const;
  Json providers_list() const;
  std::shared_ptr<Env> find(const std::string& id) const;
  void reap_strands();
  // A strand for a run being made (control strand only): the one made ahead, if any.
  std::unique_ptr<Strand> take_strand();

  controller::Controller& controller_;
  ServerOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Env>> envs_;
  std::map<std::string, std::unique_ptr<providers::Provider>> providers_;  // control strand only
  // The next run's strand, made ahead (take_strand); control strand only. Declared before
  // control_, whose last tasks may make it.
  std::unique_ptr<Strand> spare_strand_;
  std::unique_ptr<Strand> control_;
  std::vector<std::unique_ptr<Strand>> finished_;  // strands of destroyed environments
  // Removes destroyed runs after their destroy is answered.
  std::unique_ptr<Strand> closer_;
  std::atomic<size_t> closing_{0};   // runs posted to closer_ and not yet removed
  std::atomic<bool> ending_{false};  // close_all() has begun
  std::map<std::string, std::unique_ptr<providers::Provider>> pool_providers_;  // pool thread only
  // Declared last: destroyed first, after close_all() closed every run it handed out.
  std::unique_ptr<RunPool> pool_;
  std::mutex pending_mu_;
  std::condition_variable pending_cv_;
  size_t pending_ = 0;
};

// Reads request lines from `in` until end of input or until `stop_fd` is readable, submits
// each, and writes each reply to `out` as one whole line (replies arrive from several
// threads). Waits for the replies to its own requests before returning. Returns false when
// stopped by `stop_fd`.
bool serve_stream(Server& server, int in, int out, int stop_fd);

// Accepts connections on `listener` until `stop_fd` is readable; each connection is served
// by serve_stream on a thread of its own, so several clients share the server's environments.
void serve_listener(Server& server, int listener, int stop_fd);

}  // namespace sandgate::session
