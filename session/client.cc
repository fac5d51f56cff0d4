#include "session/client.h"

namespace sandgate::session {

Result<Client> Client::connect(const std::string& socket_path) {
  SG_ASSIGN_OR_RETURN(UniqueFd fd, connect_unix(socket_path));
  return Client(std::move(fd));
}

Status Client::send(const Request& r) {
  return std::move(write_all(fd_.get(), dump_json(to_json(r)) + "\n"))
      .context("sending " + op_name(r.body));
}

Result<Json> Client::reply_to(const Json& id, const std::string& op, int interrupt_fd,
                              const std::function<Result<Json>()>& interrupted) {
  Json cancel_id;  // null: no cancel sent
  for (;;) {
    SG_ASSIGN_OR_RETURN(auto line, reader_.next(interrupt_fd));
    if (!line && reader_.stopped()) {
      SG_ASSIGN_OR_RETURN(cancel_id, interrupted());
      interrupt_fd = -1;  // once: the fd stays readable
      continue;
    }
    if (!line) return logic_error(op, "the server closed the connection before replying");
    SG_ASSIGN_OR_RETURN(Json reply, parse_json(*line, "server reply"));
    // The replies to one connection's requests come in order, but a cancel is answered at
    // once, before the call it stops. (A server that refuses it runs the call to its end.)
    if (reply.value("id", Json()) != id) {
      if (!cancel_id.is_null() && reply.value("id", Json()) == cancel_id) continue;
      return logic_error(op, "the reply is for request " + dump_json(reply.value("id", Json())) +
                                 ", not " + dump_json(id));
    }
    return reply_fields(reply);
  }
}

Result<Json> Client::request(RequestBody body) {
  Request r{Json(next_id_++), std::move(body)};
  SG_TRY(send(r));
  return reply_to(r.id, op_name(r.body), -1, [] { return Result<Json>(Json()); });
}

Result<CreateReply> Client::create(const CreateRequest& r) {
  SG_ASSIGN_OR_RETURN(Json fields, request(r));
  fields["ok"] = true;
  return parse_create_reply(fields);
}

Result<Json> Client::exec(const ExecRequest& r, int interrupt_fd) {
  Request req{Json(next_id_++), r};
  SG_TRY(send(req));
  SG_ASSIGN_OR_RETURN(Json fields, reply_to(req.id, "exec", interrupt_fd, [&]() -> Result<Json> {
                        Request cancel{Json(next_id_++), CancelRequest{}};
                        SG_TRY(send(cancel));
                        return cancel.id;
                      }));
  if (!fields.contains("outcome") || !fields.at("outcome").is_object())
    return logic_error("exec", "the reply has no outcome");
  return fields.at("outcome");
}

Status Client::destroy(const std::string& env) { return destroy(DestroyRequest{env}); }

Status Client::destroy(const DestroyRequest& r) {
  SG_ASSIGN_OR_RETURN(Json fields, request(r));
  (void)fields;
  return {};
}

}  // namespace sandgate::session
