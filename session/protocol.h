// The orchestrator protocol: typed requests and replies, and their JSON lines. One request per
// line in, one reply per line out; `id` (any JSON value) is echoed so that a client can match
// replies, which come in order for one environment but may interleave across environments.
//
//   {"id":1,"op":"create","provider":"namespaces","workspace":"./repo","env":["TERM"],
//    "tenant":"default","timeout":"30m","ro_binds":["/data:/opt/data"]}
//        -> {"id":1,"ok":true,"env":"r...","provider":"namespaces","unsafe":false,
//            "workspace":"/workspace","workspace_host":"/var/tmp/sandgate/r.../workspace"}
//   {"id":2,"op":"exec","env":"r...","argv":["make","-j2"],"intent":"compile",
//    "call_env":["CC=clang"],"cwd":"/workspace/src"}
//        -> {"id":2,"ok":true,"outcome":{...}}          (controller/outcome.h, to_json)
//   {"id":3,"op":"destroy","env":"r...","export_branch":"agent/fix-1"}   -> {"id":3,"ok":true}
//   {"id":4,"op":"exec","create":{"provider":"namespaces"},"argv":["true"],
//    "destroy":{"export_branch":"agent/fix-2"}}
//        -> {"id":4,"ok":true,"env":"r...","outcome":{...}}
//   (a run made for this one call, as "create" asks, destroyed after it as "destroy" asks: the
//   three requests above in one round trip; `exec --socket --provider` sends it)
//   create also takes "recipe_mode" ("auto", "overlay", "copy"), "workspace_size" ("1GiB": the
//   workspace on a filesystem of its own) and "secrets" ({"NAME":"FILE"}); its reply says
//   "workspace_kind" and "workspace_note". destroy also takes "export_force" (true: replace an
//   existing branch) and "export" (a directory). A create answered by a run `serve --pool` made
//   ahead says "pooled": true (and list, with a pool, says how many are ready: "pooled": N).
//   {"op":"list"} -> "envs"   {"op":"providers"} -> "providers"   {"op":"policy"} -> "policy"
//   {"op":"cancel"} -> {"ok":true}: every call this connection sent that is not answered yet
//   is stopped and answered with its outcome (termination "cancelled"); later calls are not,
//   once those answers are out. A client that goes away (the socket hung up) cancels the same.
//   any failure: {"id":N,"ok":false,"error":"one line"}
//
// Parsing is strict, for the people who write orchestrators: an unknown op or key, a missing
// field or a wrong type is an error naming it. `sandgate serve`, `sandgate record` and
// `sandgate exec --socket` all speak exactly this (session/server.h, session/client.h).
// External providers speak their own protocol (providers/external_protocol.h).
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/json.h"
#include "core/result.h"
#include "core/units.h"

namespace sandgate::session {

struct CreateRequest {
  std::string provider;
  std::string workspace;               // a recipe directory on the server's host; "": empty
  std::vector<std::string> env;        // "NAME" passes the server's value, "NAME=VALUE" sets one
  std::string tenant = "default";
  std::optional<Duration> timeout;     // the run's wall clock
  std::vector<std::string> ro_binds;   // "SRC[:DST]", mounted read-only
  std::string image;                   // podman: a local image for the root; "": assembled
  std::string recipe_mode;             // "auto" (""), "overlay" or "copy" (providers/workspace.h)
  // "1GiB": the workspace on a filesystem of its own of that size (EnvSpec::workspace_size);
  // "": on the host's filesystem.
  std::string workspace_size;
  // {"NAME": "FILE"}: FILE (on the server's host) is read by the server and shown to the run
  // alone at /run/secrets/NAME (providers/provider.h Secret).
  std::vector<std::pair<std::string, std::string>> secrets;
  // The run's network: "none" (loopback only), "allowlist" (the server's upstream, through the
  // kernel's egress guard: the policy's and the server's entries plus "allow"), or "" for the
  // server's default (allowlist when `serve --net allowlist`, else none). Where the traffic goes
  // and which DNS server is asked are the server's (its operator's), never the request's.
  std::string net;
  std::vector<std::string> allow;  // entries as --allow takes them (core/egress.h)
};
struct DestroyRequest {
  std::string env;
  // What the run hands back before it is destroyed (session/export.h): "export_branch" (the
  // commits at the workspace's HEAD as that branch of the recipe's repository),
  // "export_force" (replace it if it exists), "export" (a directory on the server's host that
  // does not exist or is empty: a copy of the final workspace).
  std::string export_branch;
  bool export_force = false;
  std::string export_dir;
};
struct ExecRequest {
  std::string env;  // "" with `create`
  std::vector<std::string> argv;
  std::optional<std::string> intent;  // nullopt: inferred from argv
  std::vector<std::string> call_env;  // NAME=VALUE for this call only
  std::string cwd;
  // Instead of `env`: a run made for this call alone, as this create asks (from `serve
  // --pool`'s runs when one is ready), and destroyed once the call has ended, as `destroy`
  // asks (its `env` is empty: the run made). One round trip where create, exec and destroy
  // take three; no process is parked for a next call. The reply adds "env" (the run's id,
  // gone by then) and "pooled".
  std::optional<CreateRequest> create;
  std::optional<DestroyRequest> destroy;  // only with `create`; none: nothing exported
};
struct ListRequest {};
struct ProvidersRequest {};
struct PolicyRequest {};
// Stops the calls this connection has sent and not yet seen answered (each is answered with
// its outcome, "cancelled"); answered at once. What a client sends on ^C (`exec --socket`).
struct CancelRequest {};

using RequestBody = std::variant<CreateRequest, ExecRequest, DestroyRequest, ListRequest,
                                 ProvidersRequest, PolicyRequest, CancelRequest>;

struct Request {
  Json id;  // echoed; null when the request had none
  RequestBody body;
};

// "create", "exec", ...
std::string op_name(const RequestBody& body);
// The environment a request acts on ("" for create, list, providers, policy, cancel): the server
// keeps each environment's requests in order.
std::string target_env(const RequestBody& body);

// Strict parse of one request object.
Result<Request> parse_request(const Json& j);
// The line a client sends.
Json to_json(const Request& r);

// What `create` answers.
struct CreateReply {
  std::string env;
  std::string provider;
  bool unsafe = false;
  std::string workspace;       // as calls see it
  std::string workspace_host;  // as the server's host sees it
  bool recording = false;      // `sandgate record`: the recorded run, not a new one
  std::string workspace_kind;  // "overlay", "copy", "empty" (providers/provider.h WorkspaceInfo)
  std::string workspace_note;  // why a copy, or what a view hides
  bool pooled = false;         // `serve --pool`: a run made ahead for this request (run_pool.h)
};
Json to_json(const CreateReply& r);
Result<CreateReply> parse_create_reply(const Json& reply);

// {"id":..,"ok":true, fields...} and {"id":..,"ok":false,"error":..}.
Json reply_ok(const Json& id, Json fields);
Json reply_error(const Json& id, const std::string& message);
// A reply's fields, or its error as an Error (step "server").
Result<Json> reply_fields(const Json& reply);

}  // namespace sandgate::session
