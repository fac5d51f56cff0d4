#include "session/client.h"

namespace sandgate::session {

Result<Client> Client::connect(const std::string& socket_path) {
  SG_ASSIGN_OR_RETURN(UniqueFd fd, connect_unix(socket_path));
  return Client(std::move(fd));
}

Result<Json> Client::request(RequestBody body) {
  Request r{Json(next_id_++), std::move(body)};
  const std::string op = op_name(r.body);
  SG_TRY(std::move(write_all(fd_.get(), dump_json(to_json(r)) + "\n")).context("sending " + op));
  // Replies to this connection's requests come in order: one request is outstanding.
  SG_ASSIGN_OR_RETURN(auto line, reader_.next());
  if (!line) return logic_error(op, "the server closed the connection before replying");
  SG_ASSIGN_OR_RETURN(Json reply, parse_json(*line, "server reply"));
  if (reply.value("id", Json()) != r.id)
    return logic_error(op, "the reply is for request " + dump_json(reply.value("id", Json())) +
                               ", not " + dump_json(r.id));
  return reply_fields(reply);
}

Result<CreateReply> Client::create(const CreateRequest& r) {
  SG_ASSIGN_OR_RETURN(Json fields, request(r));
  fields["ok"] = true;
  return parse_create_reply(fields);
}

Result<Json> Client::exec(const ExecRequest& r) {
  SG_ASSIGN_OR_RETURN(Json fields, request(r));
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
