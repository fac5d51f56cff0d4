// The session protocol (session/protocol.cc): one request line as `sandgate serve` reads it
// (parse_json, then parse_request), and the same bytes as a reply a client reads. A request that
// parses is written back by to_json and parses to the same request.
#include "core/json.h"
#include "session/protocol.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandgate;
  auto j = parse_json(fuzz::as_text(data, size), "request");
  if (!j.ok()) {
    (void)j.error().message();
    return 0;
  }
  // What the server echoes in an error reply, before the request is understood.
  Json id = j->is_object() && j->contains("id") ? j->at("id") : Json();
  (void)dump_json(session::reply_error(id, "fuzz"));
  auto request = session::parse_request(*j);
  if (request.ok()) {
    (void)session::op_name(request->body);
    (void)session::target_env(request->body);
    Json out = session::to_json(*request);
    auto again = session::parse_request(out);
    FUZZ_CHECK(again.ok(), "a written request does not parse: " + again.error().message());
    FUZZ_CHECK(session::to_json(*again) == out,
               "a request changed on the way out and back: " + fuzz::brief(dump_json(out)));
  } else {
    (void)request.error().message();
  }
  // The client's side: the same object as a reply.
  auto fields = session::reply_fields(*j);
  if (fields.ok()) (void)session::parse_create_reply(*j);
  return 0;
}
