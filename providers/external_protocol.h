// The external-provider protocol (docs/PROVIDER_PROTOCOL.md): what sandgate sends to a provider
// program and what it accepts back, as typed messages and their JSON lines. Pure: no processes,
// no files, so every rule is unit-tested; providers/external.cc runs the program.
//
// Replies are read strictly, because a provider is a program someone else wrote and its
// replies decide what sandgate believes about a sandbox: an unknown key, a missing field or a
// wrong type is an error naming the reply and the field, never a default.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "core/capability.h"
#include "core/exec_result.h"
#include "core/json.h"
#include "core/result.h"
#include "core/units.h"
#include "providers/provider.h"

namespace sandgate::providers::external {

// Bumped on any change a provider must know about; a provider answers with the version it
// speaks and sandgate refuses any other.
inline constexpr int kSchemaVersion = 1;

// A reply line longer than this is a protocol violation (describe, create, destroy, started).
inline constexpr size_t kMaxReplyLine = 64 * 1024;
// An exec reply carries the output, base64-encoded, up to the call's output limit per stream.
size_t max_exec_reply_line(size_t output_limit);

// The one placement mode this protocol version has: the provider parks the call's first
// process (a host process, its own descendant) before it execs, reports its pid, and waits
// for sandgate's "go"; sandgate writes it into the call's cgroups meanwhile.
inline constexpr char kPlacementParked[] = "parked";

struct DescribeReply {
  int schema_version = 0;
  std::string name;
  std::string summary;
  CapabilitySet capabilities;
  bool unsafe = false;
  std::string placement;
};

struct CreateReply {
  std::string env;             // the provider's id for the environment
  std::string workspace;       // as calls see it
  std::string workspace_host;  // as the host sees it: inside the run directory sandgate gave
};

// What the provider says about a finished call; sandgate adds wall time and the host pid.
struct ExecReply {
  ExecResult result;
};

// Requests. `id` is echoed by the reply.
Json describe_request(long long id);
// `run_dir`: the empty directory sandgate made and records for this run; everything the
// provider makes on the host for it goes inside (sandgate removes it after destroy, and `gc`
// after a crash). `env`: the resolved allowlist (NAME=VALUE, nothing else of the host's).
Json create_request(long long id, const EnvSpec& spec, const std::string& run_id,
                    const std::string& run_dir, const std::vector<std::string>& env);
Json exec_request(long long id, const std::string& env, const Call& call);
Json go_message(long long id);
Json cancel_message(long long id);
Json destroy_request(long long id, const std::string& env);

// What one line from the provider is.
struct Line {
  Json json;
  bool event = false;  // {"id":N,"event":...}: not a reply
};
// The step of the Error a refusal ({"ok": false, "error": ...}) becomes.
inline constexpr char kRefusedStep[] = "provider";
// Parses one line (JSON object, "id" equal to `id`): `what` names the request in errors
// ("exec"). A reply with "ok": false becomes an Error carrying the provider's message.
Result<Line> parse_line(const std::string& line, long long id, const std::string& what);

Result<DescribeReply> parse_describe_reply(const Json& reply);
Result<CreateReply> parse_create_reply(const Json& reply);
// The started event of an exec: the call's host pid.
Result<pid_t> parse_started_event(const Json& event);
// `output_limit`: what sandgate asked for; a provider that sends more is wrong.
Result<ExecReply> parse_exec_reply(const Json& reply, size_t output_limit);
Status parse_destroy_reply(const Json& reply);

// RFC 4648 base64 with padding (the output fields of an exec reply).
std::string base64_encode(std::string_view bytes);
Result<std::string> base64_decode(std::string_view text);

}  // namespace sandgate::providers::external
