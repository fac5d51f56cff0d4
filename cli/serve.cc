// sandgate serve: the orchestrator protocol (controller/server.h) as JSON lines on
// stdin/stdout, or on a unix socket (one connection at a time, environments shared).
#include <poll.h>
#include <cstring>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <iostream>

#include "cli/common.h"
#include "cli/signals.h"
#include "controller/server.h"

namespace sandgate::cli {
namespace {

struct ServeArgs {
  std::string policy;
  std::string socket;
  bool allow_unsafe_host = false;
};

// Reads lines from `fd` until EOF or an interrupt, answering each on `out`. Returns false when
// interrupted.
bool serve_stream(controller::Server& server, int in, int out, const InterruptFd& interrupt) {
  std::string buffer;
  char chunk[65536];
  for (;;) {
    struct pollfd fds[2] = {{in, POLLIN, 0}, {interrupt.fd(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return true;
    }
    if (fds[1].revents) return false;
    ssize_t n = ::read(in, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
    buffer.append(chunk, static_cast<size_t>(n));
    size_t nl;
    while ((nl = buffer.find('\n')) != std::string::npos) {
      std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      std::string reply = server.handle_line(line) + "\n";
      if (!write_all(out, reply).ok()) return true;
    }
  }
}

int run_serve(Globals& g, const ServeArgs& a) {
  controller::ControllerOptions copts;
  copts.paths = g.paths();
  copts.root = g.cgroup_root_name();
  if (!a.policy.empty() && a.policy != "default") {
    auto p = controller::load_policy_file(a.policy);
    if (!p.ok()) return fail(p.error());
    copts.policy = std::move(p).value();
  }
  auto ctl = controller::Controller::create(std::move(copts));
  if (!ctl.ok()) return fail(ctl.error());
  providers::ProviderOptions popts = g.provider_options();
  popts.allow_unsafe_host = a.allow_unsafe_host;
  InterruptFd interrupt;
  controller::Server server(**ctl, g.registry, popts);
  // A signal during a call cancels it (the call's outcome says so), then serve stops.
  server.set_cancel_fd(interrupt.fd());

  if (a.socket.empty()) {
    serve_stream(server, 0, 1, interrupt);
    server.close_all();
    return interrupt.pending() ? 128 + interrupt.pending() : 0;
  }
  auto listening = listen_unix(a.socket, 4);
  if (!listening.ok()) return fail(std::move(listening).error().context_add("--socket"));
  UniqueFd listener = std::move(listening).value();
  int fd = listener.get();
  std::cerr << "sandgate: serving on " << a.socket << "\n";
  bool interrupted = false;
  while (!interrupted) {
    struct pollfd fds[2] = {{fd, POLLIN, 0}, {interrupt.fd(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) break;
    if (fds[1].revents) break;
    if (!fds[0].revents) continue;
    UniqueFd conn(::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn.valid()) continue;
    interrupted = !serve_stream(server, conn.get(), conn.get(), interrupt);
  }
  server.close_all();
  ::unlink(a.socket.c_str());
  return interrupt.pending() ? 128 + interrupt.pending() : 0;
}

}  // namespace

void add_serve_command(CLI::App& app, Globals& g) {
  auto a = std::make_shared<ServeArgs>();
  auto* sub = app.add_subcommand(
      "serve",
      "Serve the orchestrator protocol: one JSON request per line in, one JSON response per\n"
      "line out, on stdin/stdout or on --socket. Requests (\"id\" is echoed back):\n"
      "  {\"id\":1,\"op\":\"create\",\"provider\":\"namespaces\",\"workspace\":\"DIR\",\"env\":[\"TERM\"]}\n"
      "  {\"id\":2,\"op\":\"exec\",\"env\":\"<env from create>\",\"argv\":[\"make\"],\"intent\":\"compile\"}\n"
      "  {\"id\":3,\"op\":\"destroy\",\"env\":\"<env>\"}\n"
      "  {\"op\":\"list\"} {\"op\":\"providers\"} {\"op\":\"policy\"}\n"
      "exec answers with the call's structured outcome. End of input (or SIGTERM) destroys\n"
      "every environment still open.");
  sub->add_option("--policy", a->policy, "policy JSON file (default: the built-in policy)");
  sub->add_option("--socket", a->socket, "listen on this unix socket instead of stdin/stdout");
  sub->add_flag("--allow-unsafe-host", a->allow_unsafe_host, "permit the host_dir provider");
  sub->callback([&g, a] { g.exit_code = run_serve(g, *a); });
}

}  // namespace sandgate::cli
