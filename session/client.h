// The one client of the orchestrator protocol (session/protocol.h): `sandgate exec --socket`.
// One request at a time on one connection (and a `cancel` for it while it runs).
#pragma once

#include <functional>
#include <string>

#include "core/fd.h"
#include "core/json.h"
#include "core/lines.h"
#include "core/result.h"
#include "session/protocol.h"

namespace sandgate::session {

class Client {
 public:
  // Connects to a `sandgate serve --socket` or `sandgate record` server.
  static Result<Client> connect(const std::string& socket_path);
  explicit Client(UniqueFd fd) : fd_(std::move(fd)), reader_(fd_.get()) {}
  Client(Client&& o) noexcept : fd_(std::move(o.fd_)), reader_(fd_.get()), next_id_(o.next_id_) {}

  // Sends one request and waits for its reply; returns the reply's fields, or the server's
  // error as an Error.
  Result<Json> request(RequestBody body);

  Result<CreateReply> create(const CreateRequest& r);
  // The call's outcome (controller/outcome.h's JSON). `interrupt_fd` (-1: none), once
  // readable, sends a `cancel` for it: the call is stopped and its outcome (termination
  // "cancelled") still comes back.
  Result<Json> exec(const ExecRequest& r, int interrupt_fd = -1);
  Status destroy(const std::string& env);
  // With what the run hands back first (export_branch, export).
  Status destroy(const DestroyRequest& r);

 private:
  Status send(const Request& r);
  // The reply to request `id`. Once `interrupt_fd` is readable, `interrupted` sends a cancel
  // and says its id; that one's reply is read and left.
  Result<Json> reply_to(const Json& id, const std::string& op, int interrupt_fd,
                        const std::function<Result<Json>()>& interrupted);

  UniqueFd fd_;
  LineReader reader_;
  long long next_id_ = 1;
};

}  // namespace sandgate::session
