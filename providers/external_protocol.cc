#include "providers/external_protocol.h"

#include <initializer_list>
#include <limits>

namespace sandgate::providers::external {
namespace {

// The fields of one reply, read strictly: each error names the reply and the field.
class Fields {
 public:
  Fields(const Json& j, std::string what) : j_(j), what_(std::move(what)) {}

  Error fail(const std::string& detail) const {
    return logic_error("provider reply", what_ + ": " + detail);
  }
  // Every key must be one of `known` (plus the envelope: id, ok, event).
  Status only(std::initializer_list<const char*> known) const {
    for (const auto& [key, value] : j_.items()) {
      if (key == "id" || key == "ok" || key == "event") continue;
      bool found = false;
      for (const char* k : known) found = found || key == k;
      if (found) continue;
      std::string list;
      for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      return fail("unknown key \"" + key + "\" (known: " + list + ")");
    }
    return {};
  }
  bool has(const char* key) const { return j_.contains(key); }
  Result<std::string> string(const char* key, bool required = true) const {
    if (!j_.contains(key)) {
      if (required) return fail(std::string("missing \"") + key + "\"");
      return std::string();
    }
    const Json& v = j_.at(key);
    if (!v.is_string()) return fail(quoted(key) + " must be a string, got " + describe_json(v));
    return v.get<std::string>();
  }
  Result<bool> boolean(const char* key, bool fallback) const {
    if (!j_.contains(key)) return fallback;
    const Json& v = j_.at(key);
    if (!v.is_boolean())
      return fail(quoted(key) + " must be true or false, got " + describe_json(v));
    return v.get<bool>();
  }
  // A non-negative integer up to `max`.
  Result<uint64_t> count(const char* key, uint64_t max, bool required = true) const {
    if (!j_.contains(key)) {
      if (required) return fail(std::string("missing \"") + key + "\"");
      return uint64_t{0};
    }
    const Json& v = j_.at(key);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      return fail(quoted(key) + " must be a non-negative integer, got " + describe_json(v));
    uint64_t n = v.get<uint64_t>();
    if (n > max)
      return fail(quoted(key) + " is " + std::to_string(n) + ", more than " + std::to_string(max));
    return n;
  }
  Result<std::vector<std::string>> strings(const char* key) const {
    std::vector<std::string> out;
    if (!j_.contains(key)) return fail(std::string("missing \"") + key + "\"");
    const Json& v = j_.at(key);
    auto bad = [&](const Json& got) {
      return fail(quoted(key) + " must be an array of strings, got " + describe_json(got));
    };
    if (!v.is_array()) return bad(v);
    for (const auto& e : v) {
      if (!e.is_string()) return bad(e);
      out.push_back(e.get<std::string>());
    }
    return out;
  }

 private:
  static std::string quoted(const char* key) { return std::string("\"") + key + "\""; }
  const Json& j_;
  std::string what_;
};

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

}  // namespace

size_t max_exec_reply_line(size_t output_limit) {
  // Two streams of base64 (4 bytes per 3, rounded up) plus the rest of the reply.
  return 2 * ((output_limit + 2) / 3 * 4) + kMaxReplyLine;
}

Json describe_request(long long id) {
  return {{"id", id}, {"op", "describe"}, {"schema_version", kSchemaVersion}};
}

Json create_request(long long id, const EnvSpec& spec, const std::string& run_id,
                    const std::string& run_dir, const std::vector<std::string>& env) {
  Json binds = Json::array();
  for (const auto& b : spec.readonly_mounts)
    binds.push_back({{"source", b.source}, {"target", b.target}});
  return {{"id", id},
          {"op", "create"},
          {"run_id", run_id},
          {"run_dir", run_dir},
          {"tenant", spec.tenant},
          {"workspace_recipe", spec.workspace_recipe},
          {"recipe_limits",
           {{"max_bytes", spec.recipe_limits.max_bytes},
            {"max_entries", spec.recipe_limits.max_entries}}},
          {"env", env},
          {"ro_binds", binds},
          {"uid", spec.uid},
          {"gid", spec.gid},
          {"network", "none"}};
}

Json exec_request(long long id, const std::string& env, const Call& call) {
  Json rlimits = Json::object();
  if (call.rlimits.open_files) rlimits["open_files"] = *call.rlimits.open_files;
  if (call.rlimits.file_size) rlimits["file_size"] = *call.rlimits.file_size;
  return {
      {"id", id},
      {"op", "exec"},
      {"env", env},
      {"argv", call.argv},
      {"call_env", call.env},
      {"cwd", call.cwd},
      {"timeout_ms", std::chrono::duration_cast<std::chrono::milliseconds>(call.timeout).count()},
      {"output_limit", call.output_limit},
      {"rlimits", rlimits}};
}

Json go_message(long long id) { return {{"id", id}, {"op", "go"}}; }
Json cancel_message(long long id) { return {{"id", id}, {"op", "cancel"}}; }
Json destroy_request(long long id, const std::string& env) {
  return {{"id", id}, {"op", "destroy"}, {"env", env}};
}

Result<Line> parse_line(const std::string& text, long long id, const std::string& what) {
  auto parsed = parse_json(text, "reply to " + what);
  if (!parsed.ok())
    return logic_error("provider reply", what + ": not JSON: " + parsed.error().message());
  Json& j = *parsed;
  if (!j.is_object())
    return logic_error("provider reply",
                       what + ": a reply is a JSON object, got " + describe_json(j));
  if (!j.contains("id")) return logic_error("provider reply", what + ": missing \"id\"");
  const Json expected = id < 0 ? Json(nullptr) : Json(id);
  if (j.at("id") != expected)
    return logic_error("provider reply", what + ": \"id\" is " + describe_json(j.at("id")) +
                                             ", the request's is " + dump_json(expected));
  if (j.contains("event")) {
    if (!j.at("event").is_string())
      return logic_error("provider reply", what + ": \"event\" must be a string, got " +
                                               describe_json(j.at("event")));
    if (j.contains("ok"))
      return logic_error("provider reply",
                         what + ": a line is a reply (\"ok\") or an event, not both");
    return Line{std::move(j), true};
  }
  if (!j.contains("ok") || !j.at("ok").is_boolean())
    return logic_error("provider reply",
                       what + ": \"ok\" must be true or false, got " +
                           (j.contains("ok") ? describe_json(j.at("ok")) : std::string("nothing")));
  if (!j.at("ok").get<bool>()) {
    Fields f(j, what);
    SG_TRY(f.only({"error"}));
    SG_ASSIGN_OR_RETURN(std::string message, f.string("error"));
    std::string clean = message.substr(0, 2000);
    make_valid_utf8(clean);
    return logic_error(kRefusedStep, what + " failed: " + clean);
  }
  return Line{std::move(j), false};
}

Result<DescribeReply> parse_describe_reply(const Json& j) {
  Fields f(j, "describe");
  SG_TRY(f.only({"schema_version", "name", "summary", "capabilities", "unsafe", "placement"}));
  DescribeReply r;
  SG_ASSIGN_OR_RETURN(uint64_t version, f.count("schema_version", 1'000'000));
  r.schema_version = static_cast<int>(version);
  if (r.schema_version != kSchemaVersion)
    return f.fail("speaks schema_version " + std::to_string(version) + "; this sandgate speaks " +
                  std::to_string(kSchemaVersion));
  SG_ASSIGN_OR_RETURN(r.name, f.string("name"));
  if (r.name.empty() || r.name.size() > 64) return f.fail("\"name\" must be 1-64 characters");
  SG_ASSIGN_OR_RETURN(r.summary, f.string("summary"));
  make_valid_utf8(r.summary);
  SG_ASSIGN_OR_RETURN(auto caps, f.strings("capabilities"));
  for (const auto& c : caps) {
    auto cap = capability_from_string(c);
    if (!cap.ok()) return f.fail("\"capabilities\": " + cap.error().message());
    r.capabilities.insert(*cap);
  }
  SG_ASSIGN_OR_RETURN(r.unsafe, f.boolean("unsafe", false));
  SG_ASSIGN_OR_RETURN(r.placement, f.string("placement"));
  if (r.placement != kPlacementParked)
    return f.fail("\"placement\" is \"" + r.placement +
                  "\"; this protocol version has \"parked\" only");
  return r;
}

Result<CreateReply> parse_create_reply(const Json& j) {
  Fields f(j, "create");
  SG_TRY(f.only({"env", "workspace", "workspace_host"}));
  CreateReply r;
  SG_ASSIGN_OR_RETURN(r.env, f.string("env"));
  if (r.env.empty() || r.env.size() > 256) return f.fail("\"env\" must be 1-256 characters");
  SG_ASSIGN_OR_RETURN(r.workspace, f.string("workspace"));
  SG_ASSIGN_OR_RETURN(r.workspace_host, f.string("workspace_host"));
  if (r.workspace.empty() || r.workspace[0] != '/')
    return f.fail("\"workspace\" must be an absolute path");
  if (r.workspace_host.empty() || r.workspace_host[0] != '/')
    return f.fail("\"workspace_host\" must be an absolute path");
  return r;
}

Result<pid_t> parse_started_event(const Json& j) {
  Fields f(j, "exec");
  if (j.at("event") != "started")
    return f.fail("unknown event " + describe_json(j.at("event")) + " (known: started)");
  SG_TRY(f.only({"pid"}));
  SG_ASSIGN_OR_RETURN(uint64_t pid, f.count("pid", std::numeric_limits<pid_t>::max()));
  if (pid < 2) return f.fail("\"pid\" must name a process (got " + std::to_string(pid) + ")");
  return static_cast<pid_t>(pid);
}

Result<ExecReply> parse_exec_reply(const Json& j, size_t output_limit) {
  Fields f(j, "exec");
  SG_TRY(f.only({"exit_code", "signal", "start_failure", "timed_out", "cancelled", "stdout",
                 "stderr", "stdout_bytes", "stderr_bytes"}));
  ExecReply r;
  ExecResult& e = r.result;
  int endings = f.has("exit_code") + f.has("signal") + f.has("start_failure");
  if (endings != 1)
    return f.fail("exactly one of \"exit_code\", \"signal\", \"start_failure\" must be given");
  if (f.has("exit_code")) {
    SG_ASSIGN_OR_RETURN(uint64_t code, f.count("exit_code", 255));
    e.status.exited = true;
    e.status.code = static_cast<int>(code);
  } else if (f.has("signal")) {
    SG_ASSIGN_OR_RETURN(uint64_t sig, f.count("signal", 64));
    if (sig == 0) return f.fail("\"signal\" must be 1-64");
    e.status.signal = static_cast<int>(sig);
  } else {
    const Json& sf = j.at("start_failure");
    if (!sf.is_object())
      return f.fail("\"start_failure\" must be an object, got " + describe_json(sf));
    Fields s(sf, "exec start_failure");
    SG_TRY(s.only({"errno", "step"}));
    SG_ASSIGN_OR_RETURN(uint64_t err, s.count("errno", 4095));
    SG_ASSIGN_OR_RETURN(std::string step, s.string("step"));
    if (step.empty() || step.size() > 64) return s.fail("\"step\" must be 1-64 characters");
    make_valid_utf8(step);
    e.start_failure = StartFailure{static_cast<int>(err), step};
    e.status = start_failure_status(*e.start_failure);
  }
  SG_ASSIGN_OR_RETURN(e.timed_out, f.boolean("timed_out", false));
  SG_ASSIGN_OR_RETURN(e.cancelled, f.boolean("cancelled", false));
  struct Stream {
    const char* data_key;
    const char* bytes_key;
    std::string& data;
    uint64_t& bytes;
    bool& truncated;
  };
  for (Stream s :
       {Stream{"stdout", "stdout_bytes", e.stdout_data, e.stdout_bytes, e.stdout_truncated},
        Stream{"stderr", "stderr_bytes", e.stderr_data, e.stderr_bytes, e.stderr_truncated}}) {
    SG_ASSIGN_OR_RETURN(std::string encoded, f.string(s.data_key));
    auto decoded = base64_decode(encoded);
    if (!decoded.ok())
      return f.fail(std::string("\"") + s.data_key + "\": " + decoded.error().message());
    if (decoded->size() > output_limit)
      return f.fail(std::string("\"") + s.data_key + "\" holds " + std::to_string(decoded->size()) +
                    " bytes, more than the output limit " + std::to_string(output_limit));
    s.data = std::move(decoded).value();
    SG_ASSIGN_OR_RETURN(s.bytes, f.count(s.bytes_key, std::numeric_limits<int64_t>::max()));
    if (s.bytes < s.data.size())
      return f.fail(std::string("\"") + s.bytes_key + "\" (" + std::to_string(s.bytes) +
                    ") is less than the " + std::to_string(s.data.size()) + " bytes returned");
    s.truncated = s.bytes > s.data.size();
  }
  return r;
}

Status parse_destroy_reply(const Json& j) {
  Fields f(j, "destroy");
  return f.only({});
}

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out += kAlphabet[(v >> k) & 63];
  }
  if (size_t rest = in.size() - i) {
    uint32_t v = uint8_t(in[i]) << 16;
    if (rest == 2) v |= uint8_t(in[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

Result<std::string> base64_decode(std::string_view in) {
  if (in.size() % 4 != 0)
    return logic_error("base64", "length " + std::to_string(in.size()) + " is not a multiple of 4");
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    bool last = i + 4 == in.size();
    int pad = 0;
    if (last && in[i + 3] == '=') pad = in[i + 2] == '=' ? 2 : 1;
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      int d = k >= 4 - pad ? 0 : value(in[i + k]);
      if (d < 0)
        return logic_error("base64", "invalid character at offset " + std::to_string(i + k));
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    out += static_cast<char>((v >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((v >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(v & 0xff);
  }
  return out;
}

}  // namespace sandgate::providers::external
