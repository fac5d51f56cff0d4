#include "session/server.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <thread>

#include "core/fd.h"
#include "core/lines.h"
#include "core/log.h"
#include "session/run_pool.h"
#include "session/strand.h"

namespace sandgate::session {

struct Server::Env {
  std::unique_ptr<RunSession> owned;  // null for the recorded run
  RunSession* session = nullptr;
  std::string provider;
  std::unique_ptr<Strand> strand;
};

Server::Server(controller::Controller& controller, ServerOptions options)
    : controller_(controller),
      options_(std::move(options)),
      control_(std::make_unique<Strand>()),
      closer_(std::make_unique<Strand>()) {
  if (options_.registry && !options_.recorded_run) spare_strand_ = std::make_unique<Strand>();
  if (options_.pool > 0 && !options_.recorded_run && options_.registry)
    pool_ = std::make_unique<RunPool>(
        options_.pool, [this](const CreateRequest& r) { return open_run(r, pool_providers_); });
  if (options_.recorded_run) {
    auto env = std::make_shared<Env>();
    env->session = options_.recorded_run;
    env->provider = options_.recorded_run->provider().name;
    env->strand = std::make_unique<Strand>();
    envs_[options_.recorded_run->run_id()] = std::move(env);
  }
}

Server::~Server() { close_all(); }

Result<std::unique_ptr<Connection>> Connection::open(int server_cancel_fd) {
  auto c = std::make_unique<Connection>();
  c->event_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!c->event_) return sys_error("eventfd for a connection's cancel");
  c->set_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!c->set_) return sys_error("epoll_create1 for a connection's cancel");
  for (int fd : {c->event_.get(), server_cancel_fd}) {
    if (fd < 0) continue;
    struct epoll_event ev = {};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(c->set_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
      return sys_error("epoll_ctl for a connection's cancel");
  }
  return c;
}

void Connection::cancel() {
  uint64_t one = 1;
  (void)!::write(event_.get(), &one, sizeof one);
}

void Connection::rearm() {
  uint64_t count;
  (void)!::read(event_.get(), &count, sizeof count);  // EAGAIN: it was not cancelled
}

namespace {
// Destroyed runs waiting for removal after their answer, at most (see Server::destroy).
constexpr size_t kMaxClosing = 4;
}  // namespace

std::shared_ptr<Server::Env> Server::find(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = envs_.find(id);
  return it == envs_.end() ? nullptr : it->second;
}

void Server::submit(const std::string& line, std::function<void(std::string)> reply,
                    Connection* connection) {
  auto parsed = parse_json(line, "request");
  Json id = parsed.ok() && parsed->is_object() && parsed->contains("id") ? parsed->at("id") : Json();
  if (!parsed.ok()) return reply(dump_json(reply_error(id, parsed.error().message())));
  auto request = parse_request(*parsed);
  if (!request.ok()) return reply(dump_json(reply_error(id, request.error().message())));
  if (std::holds_alternative<CancelRequest>(request->body)) {
    // Answered here, at once: the calls it stops are on their strands, and answer themselves.
    if (!connection)
      return reply(dump_json(reply_error(id,
                                         "cancel: stops a connection's calls, and this "
                                         "request came on none")));
    connection->cancel();
    return reply(dump_json(reply_ok(id, Json::object())));
  }
  const int cancel_fd = connection ? connection->cancel_fd() : options_.cancel_fd;

  {
    std::lock_guard lock(pending_mu_);
    ++pending_;
  }
  auto answer = std::make_shared<Answer>(std::move(reply));
  if (auto* e = std::get_if<ExecRequest>(&request->body); e && e->create) {
    control_->post([this, req = std::move(request).value(), answer, cancel_fd] {
      one_call(req, answer, cancel_fd);
    });
    return;
  }
  std::string env = target_env(request->body);
  auto task = [this, req = std::move(request).value(), answer, cancel_fd] {
    answered(*answer, guarded(req.id, [&] { return run(req, cancel_fd); }));
  };
  if (env.empty()) {
    control_->post(std::move(task));
    return;
  }
  std::lock_guard lock(mu_);
  auto it = envs_.find(env);
  // An unknown environment is answered in order on the control strand, like the others.
  if (it == envs_.end() || !it->second->strand) control_->post(std::move(task));
  else it->second->strand->post(std::move(task));
}

Json Server::guarded(const Json& id, const std::function<Json()>& work) {
  // Nothing a call did may end the server: dump_json never throws on its output, and any
  // other exception is this request's error.
  try {
    return work();
  } catch (const std::exception& e) {
    return reply_error(id, std::string("internal error: ") + e.what());
  }
}

void Server::answered(Answer& answer, const Json& reply) {
  answer.reply(dump_json(reply));
  std::lock_guard lock(pending_mu_);
  if (--pending_ == 0) pending_cv_.notify_all();
}

// A call in a run made for it: the run is made on the control strand like any create (from the
// pool when one is ready); the call and the destroy then run on the run's own strand, and the
// answer comes once the run is destroyed (its removal, as for destroy, after the answer).
void Server::one_call(const Request& req, const std::shared_ptr<Answer>& answer, int cancel_fd) {
  const ExecRequest& e = std::get<ExecRequest>(req.body);
  std::shared_ptr<Env> env;
  Json made = guarded(req.id, [&] {
    auto created = create(*e.create);
    if (!created.ok()) return reply_error(req.id, created.error().message());
    env = find(created->at("env").get<std::string>());
    return reply_ok(req.id, *std::move(created));
  });
  if (!env) return answered(*answer, made);  // not made: its error
  auto call = [this, req, answer, env, made = std::move(made), cancel_fd] {
    answered(*answer, guarded(req.id, [&] {
      ExecRequest r = std::get<ExecRequest>(req.body);
      r.env = made.at("env").get<std::string>();
      auto outcome = exec(r, cancel_fd, /*last=*/true);
      DestroyRequest d = r.destroy.value_or(DestroyRequest{});
      d.env = r.env;
      auto destroyed = destroy(d);  // whatever the call did: nothing of the run is kept
      if (!outcome.ok()) return reply_error(req.id, outcome.error().message());
      if (!destroyed.ok()) return reply_error(req.id, destroyed.error().message());
      Json fields = *std::move(outcome);
      fields["env"] = r.env;
      if (made.value("pooled", false)) fields["pooled"] = true;
      return reply_ok(req.id, std::move(fields));
    }));
  };
  // Made just now by this strand: it has its own strand until its destroy.
  env->strand->post(std::move(call));
}

std::string Server::handle_line(const std::string& line) {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<std::string> out;
  submit(line, [&](std::string r) {
    std::lock_guard lock(mu);
    out = std::move(r);
    cv.notify_all();
  });
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return out.has_value(); });
  return *out;
}

void Server::drain() {
  {
    std::unique_lock lock(pending_mu_);
    pending_cv_.wait(lock, [&] { return pending_ == 0; });
  }
  reap_strands();
}

void Server::reap_strands() {
  std::vector<std::unique_ptr<Strand>> done;
  {
    std::lock_guard lock(mu_);
    done.swap(finished_);
  }
  for (auto& s : done) s->stop();
}

void Server::close_all() {
  drain();
  std::map<std::string, std::shared_ptr<Env>> envs;
  {
    std::lock_guard lock(mu_);
    envs.swap(envs_);
  }
  for (auto& [id, env] : envs) {
    if (env->strand) env->strand->stop();
    if (env->owned)
      if (auto st = env->owned->close(); !st.ok()) spdlog::error("closing {}: {}", id, st.error().message());
  }
  // The runs destroyed before, then the ones made ahead: the pool's thread is the parent of
  // every run it made, handed out or not, so it ends last.
  ending_ = true;  // no run is made ahead any more
  closer_->stop();
  if (pool_) pool_->stop();
}

Json Server::run(const Request& request, int cancel_fd) {
  Result<Json> result = std::visit(
      [&](const auto& r) -> Result<Json> {
        using T = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<T, CreateRequest>) return create(r);
        else if constexpr (std::is_same_v<T, ExecRequest>)
          return exec(r, cancel_fd);
        else if constexpr (std::is_same_v<T, DestroyRequest>) return destroy(r);
        else if constexpr (std::is_same_v<T, ListRequest>) return list();
        else if constexpr (std::is_same_v<T, ProvidersRequest>) return Json{{"providers", providers_list()}};
        else if constexpr (std::is_same_v<T, PolicyRequest>)
          return Json{{"policy", controller::to_json(controller_.policy())}};
        else
          return logic_error("cancel", "answered where it is submitted");
      },
      request.body);
  if (!result.ok()) return reply_error(request.id, result.error().message());
  return reply_ok(request.id, std::move(result).value());
}

Json Server::list() const {
  Json envs = Json::array();
  std::lock_guard lock(mu_);
  for (const auto& [id, env] : envs_) envs.push_back(id);
  Json reply{{"envs", envs}};
  if (pool_) reply["pooled"] = pool_->ready_total();
  return reply;
}

Json Server::providers_list() const {
  Json out = Json::array();
  if (!options_.registry) return out;
  for (const auto& e : options_.registry->entries()) {
    Json caps = Json::array();
    for (auto c : e.info.capabilities) caps.push_back(to_string(c));
    out.push_back({{"name", e.info.name}, {"unsafe", e.info.unsafe}, {"capabilities", caps}});
  }
  return out;
}

Status Server::network_of(const CreateRequest& r, providers::EnvSpec& spec) const {
  const auto& net = options_.network;
  const std::string mode = !r.net.empty() ? r.net : net ? "allowlist" : "none";
  if (mode == "none") {
    if (!r.allow.empty())
      return logic_error("create: \"allow\"", "\"allow\" needs \"net\": \"allowlist\"");
    spec.network = providers::NetworkMode::kNone;
    return {};
  }
  if (!net || !options_.run_options.egress)
    return logic_error("create: \"net\"",
                       "this server makes no allowlisted runs: start it with `sandgate serve --net "
                       "allowlist --net-upstream NETNS` (its operator says where traffic goes)");
  spec.network = providers::NetworkMode::kAllowlist;
  spec.egress = net->egress;
  auto rules = parse_egress_rules(r.allow);
  if (!rules.ok()) return std::move(rules).error().context_add("create: \"allow\"");
  spec.egress.insert(spec.egress.end(), rules->begin(), rules->end());
  spec.upstream_netns = net->upstream_netns;
  if (has_names(spec.egress) && !options_.run_options.dns_upstream) {
    for (const auto& rule : spec.egress)
      if (rule.is_name())
        return logic_error("create: \"allow\"",
                           "the allowlist names a host (" + rule.text +
                               ") but this server has no DNS server to ask: start it with "
                               "--dns-upstream ADDR");
  }
  return {};
}

Result<std::unique_ptr<RunSession>> Server::open_run(
    const CreateRequest& r,
    std::map<std::string, std::unique_ptr<providers::Provider>>& providers) {
  auto it = providers.find(r.provider);
  if (it == providers.end()) {
    SG_ASSIGN_OR_RETURN(auto p, options_.registry->create(r.provider, options_.provider_options));
    it = providers.emplace(r.provider, std::move(p)).first;
  }
  providers::EnvSpec spec;
  spec.workspace_recipe = r.workspace;
  spec.image = r.image;
  spec.env = r.env;
  spec.tenant = r.tenant;
  spec.base_paths = options_.base_paths;
  if (r.timeout) spec.timeout = *r.timeout;
  for (const auto& b : r.ro_binds) spec.readonly_mounts.push_back(providers::parse_bind_mount(b));
  if (!r.recipe_mode.empty()) {
    SG_ASSIGN_OR_RETURN(spec.recipe_mode, providers::parse_recipe_mode(r.recipe_mode));
  }
  if (!r.workspace_size.empty()) {
    SG_ASSIGN_OR_RETURN(auto size, parse_bytes(r.workspace_size));
    spec.workspace_size = size.value;
  }
  for (const auto& [name, file] : r.secrets) {
    SG_ASSIGN_OR_RETURN(
        auto secret, std::move(providers::read_secret(name, file)).context("create: \"secrets\""));
    spec.secrets.push_back(std::move(secret));
  }
  SG_TRY(network_of(r, spec));
  return RunSession::open(controller_, *it->second, std::move(spec), options_.run_options);
}

Result<Json> Server::create(const CreateRequest& r) {
  if (RunSession* rec = options_.recorded_run) {
    // The recording owns its one run: create answers with it.
    CreateReply reply{rec->run_id(),         rec->provider().name,       rec->provider().unsafe,
                      rec->workspace_path(), rec->workspace_host_path(), true};
    return to_json(reply);
  }
  if (!options_.registry) return logic_error("create", "this server makes no environments");
  // A run made ahead for exactly this request, else one made now (and its shape learned, so
  // that the next such create finds one ready).
  std::unique_ptr<RunSession> session = pool_ ? pool_->take(r) : nullptr;
  const bool pooled = session != nullptr;
  if (!session) {
    SG_ASSIGN_OR_RETURN(session, open_run(r, providers_));
    if (pool_) pool_->learn(r);
  }
  auto env = std::make_shared<Env>();
  env->session = session.get();
  env->owned = std::move(session);
  env->provider = r.provider;
  env->strand = take_strand();
  RunSession& s = *env->session;
  CreateReply reply{s.run_id(), r.provider, s.provider().unsafe, s.workspace_path(), s.workspace_host_path(), false};
  reply.workspace_kind = s.workspace_info().kind;
  reply.workspace_note = s.workspace_info().note;
  reply.pooled = pooled;
  std::lock_guard lock(mu_);
  envs_[s.run_id()] = std::move(env);
  return to_json(reply);
}

std::unique_ptr<Strand> Server::take_strand() {
  std::unique_ptr<Strand> s = spare_strand_ ? std::move(spare_strand_) : std::make_unique<Strand>();
  // The next run's, made after this request is answered: a thread's start (clone, its stack's
  // first pages, its first wakeup) took ~0.7 ms of a warm call on a small VM.
  control_->post([this] {
    if (!spare_strand_) spare_strand_ = std::make_unique<Strand>();
  });
  return s;
}

Result<Json> Server::exec(const ExecRequest& r, int cancel_fd, bool last) {
  auto env = find(r.env);
  if (!env) {
    if (options_.recorded_run)
      return logic_error("exec", "this recording serves one run, '" + options_.recorded_run->run_id() + "'");
    return logic_error("exec", "no environment '" + r.env + "' (create one first)");
  }
  CallRequest call;
  call.argv = r.argv;
  call.intent = r.intent;
  call.env = r.call_env;
  call.cwd = r.cwd;
  call.cancel_fd = cancel_fd;
  call.last = last;
  std::string token = options_.before_call ? options_.before_call(r) : std::string();
  auto outcome = env->session->call(call);
  if (options_.after_call) options_.after_call(token, outcome.ok() ? &*outcome : nullptr);
  if (!outcome.ok()) return std::move(outcome).error();
  return Json{{"outcome", controller::to_json(*outcome)}};
}

Result<Json> Server::destroy(const DestroyRequest& r) {
  std::shared_ptr<Env> env;
  {
    std::lock_guard lock(mu_);
    auto it = envs_.find(r.env);
    if (it == envs_.end()) return logic_error("destroy", "no environment '" + r.env + "'");
    if (!it->second->owned) return Json{{"kept", true}};  // the recording destroys its run at the end
    env = it->second;
    envs_.erase(it);
    // Runs on this very strand: it is joined later, by another thread (reap_strands: the
    // closer's, or drain).
    finished_.push_back(std::move(env->strand));
  }
  // What the run hands back, then everything else goes, whether the export worked or not.
  Status exported = env->owned->export_results({r.export_branch, r.export_force, r.export_dir});
  if (!exported.ok()) {
    SG_TRY(env->owned->close());
    return std::move(exported).error().context_add(
        "destroy: the run was destroyed, its export failed");
  }
  // The rest of the run (its processes, mounts, cgroups: 8-12 ms) is nothing the client
  // waits for: removed after the answer, unless removals are falling behind (a client that
  // destroys faster than runs can be removed), where the answer waits for this one again.
  // An error is logged; the run's records keep what was left for `sandgate gc`.
  if (closing_.fetch_add(1) < kMaxClosing) {
    closer_->post([this, env] {
      if (auto st = env->owned->close(); !st.ok())
        spdlog::error("destroy {}: {}", env->session->run_id(), st.error().message());
      env->owned.reset();
      closing_.fetch_sub(1);
      // Its strand (and any before it) joined here, not on a later request's path: a thread's
      // end takes 0.2-0.9 ms on a small VM.
      reap_strands();
      // The client has its answer and the run is gone: a moment to make the next one.
      if (pool_ && !ending_) pool_->refill();
    });
    return Json::object();
  }
  closing_.fetch_sub(1);
  Status closed = env->owned->close();
  if (pool_) pool_->refill();
  SG_TRY(std::move(closed));
  return Json::object();
}

namespace {

// A socket whose peer has closed both ways (its process ended): not a pipe's end of input, nor
// a socket the client only shut for writing while it waits for its answers.
bool peer_gone(int fd) {
  struct pollfd p = {fd, 0, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR));
}

bool is_socket(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

}  // namespace

bool serve_stream(Server& server, int in, int out, int stop_fd) {
  auto opened = Connection::open(server.cancel_fd());
  if (!opened.ok()) {
    spdlog::error("serve: {}", opened.error().message());
    return true;
  }
  Connection& connection = **opened;
  LineReader reader(in);
  std::mutex write_mu;
  std::condition_variable answered;
  size_t outstanding = 0;
  bool writable = true;
  auto reply = [&](std::string line) {
    std::lock_guard lock(write_mu);
    line += '\n';
    if (writable && !write_all(out, line).ok()) {
      writable = false;  // the peer went away: no one waits for its other calls
      connection.cancel();
    }
    // A cancel stops what was sent before it; once that is all answered, the next call runs.
    if (--outstanding == 0 && writable) connection.rearm();
    answered.notify_all();
  };
  bool stopped = false;
  for (;;) {
    auto line = reader.next(stop_fd);
    if (!line.ok()) {
      spdlog::warn("serve: {}", line.error().message());
      break;
    }
    if (!*line) {
      stopped = reader.stopped();
      break;
    }
    if ((*line)->find_first_not_of(" \t\r") == std::string::npos) continue;
    {
      std::lock_guard lock(write_mu);
      ++outstanding;
    }
    server.submit(**line, reply, &connection);
  }
  // `out` (and `connection`) must outlive every reply to this stream's requests. A client
  // whose process ended while its calls run (killed, its terminal closed) cancels them: on a
  // socket, looked at every 100 ms while the answers are awaited.
  const bool watch = in == out && is_socket(in);
  std::unique_lock lock(write_mu);
  bool gone = false;
  while (outstanding > 0) {
    if (!watch || gone) {
      answered.wait(lock, [&] { return outstanding == 0; });
      break;
    }
    if (answered.wait_for(lock, std::chrono::milliseconds(100), [&] { return outstanding == 0; }))
      break;
    if (peer_gone(in)) {
      gone = true;
      writable = false;
      connection.cancel();
    }
  }
  return !stopped;
}

void serve_listener(Server& server, int listener, int stop_fd) {
  struct Connection {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
    std::promise<int> fd;  // the connection the thread serves; -1: none (the listener ends)
  };
  // Each connection's thread is made before it connects: a thread's start (clone, its stack's
  // first pages, its first wakeup) took ~0.7 ms of a warm `exec --socket` on a small VM.
  auto ahead = [&] {
    Connection c{{}, std::make_shared<std::atomic<bool>>(false), {}};
    c.thread = std::thread([&server, stop_fd, done = c.done, fd = c.fd.get_future()]() mutable {
      if (UniqueFd conn(fd.get()); conn) serve_stream(server, conn.get(), conn.get(), stop_fd);
      done->store(true);
    });
    return c;
  };
  std::vector<Connection> connections;
  // Clients such as `exec --socket` connect once per call: join the ones that have ended.
  auto reap = [&](bool all) {
    std::erase_if(connections, [&](Connection& c) {
      if (!all && !c.done->load()) return false;
      c.thread.join();
      return true;
    });
  };
  Connection next = ahead();
  for (;;) {
    struct pollfd fds[2] = {{listener, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents) break;
    if (!fds[0].revents) continue;
    int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    next.fd.set_value(fd);
    connections.push_back(std::move(next));
    // While the connection is served: the next one's thread, and joining the ended ones
    // (which waits for their end), are no client's business.
    next = ahead();
    reap(false);
  }
  next.fd.set_value(-1);
  next.thread.join();
  reap(true);
}

}  // namespace sandgate::session
