#include "session/protocol.h"

#include <initializer_list>

#include "core/strings.h"
#include "providers/recipe_mode.h"

namespace sandgate::session {
namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// The fields of one request object, read strictly: each error names the op and the field.
class Fields {
 public:
  // `nested`: an object inside a request ("create" of a one-call exec), which has no "id" or
  // "op" of its own.
  Fields(const Json& j, std::string op, bool nested = false)
      : j_(j), op_(std::move(op)), nested_(nested) {}

  Error fail(const std::string& what) const { return logic_error("request", op_ + ": " + what); }

  Result<std::string> string(const char* key, bool required) const {
    if (!j_.contains(key)) {
      if (required) return fail(std::string("missing \"") + key + "\"");
      return std::string();
    }
    const Json& v = j_.at(key);
    if (!v.is_string()) return fail(std::string("\"") + key + "\" must be a string, got " + describe_json(v));
    return v.get<std::string>();
  }
  Result<std::optional<std::string>> optional_string(const char* key) const {
    if (!j_.contains(key)) return std::optional<std::string>();
    SG_ASSIGN_OR_RETURN(std::string v, string(key, true));
    return std::optional<std::string>(std::move(v));
  }
  Result<std::vector<std::string>> strings(const char* key) const {
    std::vector<std::string> out;
    if (!j_.contains(key)) return out;
    const Json& v = j_.at(key);
    auto bad = [&](const Json& got) {
      return fail(std::string("\"") + key + "\" must be an array of strings, got " + describe_json(got));
    };
    if (!v.is_array()) return bad(v);
    for (const auto& e : v) {
      if (!e.is_string()) return bad(e);
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  Result<bool> boolean(const char* key) const {
    if (!j_.contains(key)) return false;
    const Json& v = j_.at(key);
    if (!v.is_boolean())
      return fail(std::string("\"") + key + "\" must be true or false, got " + describe_json(v));
    return v.get<bool>();
  }
  // {"NAME": "VALUE", ...}, in the object's order.
  Result<std::vector<std::pair<std::string, std::string>>> string_map(const char* key) const {
    std::vector<std::pair<std::string, std::string>> out;
    if (!j_.contains(key)) return out;
    const Json& v = j_.at(key);
    auto bad = [&](const Json& got) {
      return fail(std::string("\"") + key +
                  "\" must be an object of strings ({\"NAME\": \"FILE\"}), got " +
                  describe_json(got));
    };
    if (!v.is_object()) return bad(v);
    for (const auto& [name, value] : v.items()) {
      if (!value.is_string()) return bad(value);
      out.emplace_back(name, value.get<std::string>());
    }
    return out;
  }
  // Every key must be one of `known` (plus "id" and "op").
  Status only(std::initializer_list<const char*> known) const {
    for (const auto& [key, value] : j_.items()) {
      if (!nested_ && (key == "id" || key == "op")) continue;
      bool ok = false;
      for (const char* k : known) ok = ok || key == k;
      if (ok) continue;
      std::string list;
      for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      return fail("unknown key \"" + key + "\"" + (list.empty() ? " (it takes none)" : " (known: " + list + ")"));
    }
    return {};
  }

 private:
  const Json& j_;
  std::string op_;
  bool nested_;
};

Result<CreateRequest> parse_create(const Fields& f) {
  SG_TRY(f.only({"provider", "workspace", "env", "tenant", "timeout", "ro_binds", "recipe_mode",
                 "workspace_size", "secrets", "image", "net", "allow"}));
  CreateRequest r;
  SG_ASSIGN_OR_RETURN(r.provider, f.string("provider", true));
  SG_ASSIGN_OR_RETURN(r.workspace, f.string("workspace", false));
  SG_ASSIGN_OR_RETURN(r.env, f.strings("env"));
  SG_ASSIGN_OR_RETURN(auto tenant, f.optional_string("tenant"));
  if (tenant && !tenant->empty()) r.tenant = *tenant;
  SG_ASSIGN_OR_RETURN(auto timeout, f.optional_string("timeout"));
  if (timeout && !timeout->empty()) {
    auto d = parse_duration(*timeout);
    if (!d.ok()) return f.fail("\"timeout\": " + d.error().message());
    r.timeout = *d;
  }
  SG_ASSIGN_OR_RETURN(r.ro_binds, f.strings("ro_binds"));
  SG_ASSIGN_OR_RETURN(r.image, f.string("image", false));
  SG_ASSIGN_OR_RETURN(r.recipe_mode, f.string("recipe_mode", false));
  if (!r.recipe_mode.empty() && !providers::parse_recipe_mode(r.recipe_mode).ok())
    return f.fail("\"recipe_mode\" must be \"auto\", \"overlay\" or \"copy\", got \"" +
                  r.recipe_mode + "\"");
  SG_ASSIGN_OR_RETURN(r.workspace_size, f.string("workspace_size", false));
  if (!r.workspace_size.empty()) {
    auto size = parse_bytes(r.workspace_size);
    if (!size.ok()) return f.fail("\"workspace_size\": " + size.error().message());
  }
  SG_ASSIGN_OR_RETURN(r.secrets, f.string_map("secrets"));
  SG_ASSIGN_OR_RETURN(r.net, f.string("net", false));
  if (!r.net.empty() && r.net != "none" && r.net != "allowlist")
    return f.fail("\"net\" must be \"none\" or \"allowlist\", got \"" + excerpt(r.net) + "\"");
  SG_ASSIGN_OR_RETURN(r.allow, f.strings("allow"));
  return r;
}

// `with_env`: a destroy request; without, the "destroy" of a one-call exec (the run it made).
Result<DestroyRequest> parse_destroy(const Fields& f, bool with_env) {
  SG_TRY(with_env ? f.only({"env", "export_branch", "export_force", "export"})
                  : f.only({"export_branch", "export_force", "export"}));
  DestroyRequest r;
  if (with_env) {
    SG_ASSIGN_OR_RETURN(r.env, f.string("env", true));
  }
  SG_ASSIGN_OR_RETURN(r.export_branch, f.string("export_branch", false));
  SG_ASSIGN_OR_RETURN(r.export_force, f.boolean("export_force"));
  SG_ASSIGN_OR_RETURN(r.export_dir, f.string("export", false));
  if (r.export_force && r.export_branch.empty())
    return f.fail("\"export_force\" without \"export_branch\"");
  return r;
}

// The object at `key` of a one-call exec ("create", "destroy"), read as its own request.
Result<const Json*> nested_object(const Json& j, const char* key) {
  const Json& v = j.at(key);
  if (!v.is_object())
    return logic_error(
        "request", std::string("exec: \"") + key + "\" must be an object, got " + describe_json(v));
  return &v;
}

constexpr const char* kOps = "create, exec, destroy, list, providers, policy, cancel";

Result<RequestBody> parse_body(const std::string& op, const Json& j) {
  Fields f(j, op);
  if (op == "create") {
    SG_ASSIGN_OR_RETURN(auto r, parse_create(f));
    return RequestBody(std::move(r));
  }
  if (op == "exec") {
    SG_TRY(f.only({"env", "argv", "intent", "call_env", "cwd", "create", "destroy"}));
    ExecRequest r;
    if (j.contains("create")) {
      if (j.contains("env"))
        return f.fail(
            "\"env\" and \"create\" together (a call runs in a run it names or in one made for "
            "it)");
      SG_ASSIGN_OR_RETURN(const Json* c, nested_object(j, "create"));
      SG_ASSIGN_OR_RETURN(r.create, parse_create(Fields(*c, "exec: \"create\"", true)));
      if (j.contains("destroy")) {
        SG_ASSIGN_OR_RETURN(const Json* d, nested_object(j, "destroy"));
        SG_ASSIGN_OR_RETURN(r.destroy, parse_destroy(Fields(*d, "exec: \"destroy\"", true), false));
      }
    } else {
      if (j.contains("destroy"))
        return f.fail("\"destroy\" without \"create\" (destroy a named run with op destroy)");
      SG_ASSIGN_OR_RETURN(r.env, f.string("env", true));
    }
    SG_ASSIGN_OR_RETURN(r.argv, f.strings("argv"));
    if (r.argv.empty()) return f.fail("\"argv\" must name a command");
    SG_ASSIGN_OR_RETURN(auto intent, f.optional_string("intent"));
    if (intent && !intent->empty()) r.intent = *intent;
    SG_ASSIGN_OR_RETURN(r.call_env, f.strings("call_env"));
    SG_ASSIGN_OR_RETURN(r.cwd, f.string("cwd", false));
    return RequestBody(std::move(r));
  }
  if (op == "destroy") {
    SG_ASSIGN_OR_RETURN(auto r, parse_destroy(f, true));
    return RequestBody(std::move(r));
  }
  if (op == "list" || op == "providers" || op == "policy" || op == "cancel") {
    SG_TRY(f.only({}));
    if (op == "list") return RequestBody(ListRequest{});
    if (op == "providers") return RequestBody(ProvidersRequest{});
    if (op == "cancel") return RequestBody(CancelRequest{});
    return RequestBody(PolicyRequest{});
  }
  return logic_error("request", "unknown op '" + op + "' (" + kOps + ")");
}

// A create's fields, into `j` (a create request, or the "create" of a one-call exec).
void create_fields(const CreateRequest& c, Json& j) {
  j["provider"] = c.provider;
  if (!c.workspace.empty()) j["workspace"] = c.workspace;
  if (!c.env.empty()) j["env"] = c.env;
  j["tenant"] = c.tenant;
  if (c.timeout) j["timeout"] = format_duration(*c.timeout);
  if (!c.ro_binds.empty()) j["ro_binds"] = c.ro_binds;
  if (!c.image.empty()) j["image"] = c.image;
  if (!c.recipe_mode.empty()) j["recipe_mode"] = c.recipe_mode;
  if (!c.workspace_size.empty()) j["workspace_size"] = c.workspace_size;
  if (!c.secrets.empty()) {
    Json secrets = Json::object();
    for (const auto& [name, file] : c.secrets) secrets[name] = file;
    j["secrets"] = secrets;
  }
  if (!c.net.empty()) j["net"] = c.net;
  if (!c.allow.empty()) j["allow"] = c.allow;
}

// What a destroy exports, into `j` (its env is the caller's).
void destroy_fields(const DestroyRequest& d, Json& j) {
  if (!d.export_branch.empty()) j["export_branch"] = d.export_branch;
  if (d.export_force) j["export_force"] = true;
  if (!d.export_dir.empty()) j["export"] = d.export_dir;
}

}  // namespace

std::string op_name(const RequestBody& body) {
  return std::visit(Overloaded{[](const CreateRequest&) { return "create"; },
                               [](const ExecRequest&) { return "exec"; },
                               [](const DestroyRequest&) { return "destroy"; },
                               [](const ListRequest&) { return "list"; },
                               [](const ProvidersRequest&) { return "providers"; },
                               [](const PolicyRequest&) { return "policy"; },
                               [](const CancelRequest&) { return "cancel"; }},
                    body);
}

std::string target_env(const RequestBody& body) {
  if (auto* e = std::get_if<ExecRequest>(&body)) return e->env;
  if (auto* d = std::get_if<DestroyRequest>(&body)) return d->env;
  return "";
}

Result<Request> parse_request(const Json& j) {
  if (!j.is_object()) return logic_error("request", "a request is a JSON object, got " + describe_json(j));
  Request r;
  if (j.contains("id")) r.id = j.at("id");
  if (!j.contains("op"))
    return logic_error("request", std::string("missing \"op\" (") + kOps + ")");
  if (!j.at("op").is_string())
    return logic_error("request", "\"op\" must be a string, got " + describe_json(j.at("op")));
  SG_ASSIGN_OR_RETURN(r.body, parse_body(j.at("op").get<std::string>(), j));
  return r;
}

Json to_json(const Request& r) {
  Json j = {{"op", op_name(r.body)}};
  if (!r.id.is_null()) j["id"] = r.id;
  std::visit(Overloaded{[&](const CreateRequest& c) { create_fields(c, j); },
                        [&](const ExecRequest& e) {
                          if (e.create) {
                            create_fields(*e.create, j["create"]);
                            if (e.destroy)
                              destroy_fields(*e.destroy, j["destroy"] = Json::object());
                          } else {
                            j["env"] = e.env;
                          }
                          j["argv"] = e.argv;
                          if (e.intent) j["intent"] = *e.intent;
                          if (!e.call_env.empty()) j["call_env"] = e.call_env;
                          if (!e.cwd.empty()) j["cwd"] = e.cwd;
                        },
                        [&](const DestroyRequest& d) {
                          j["env"] = d.env;
                          destroy_fields(d, j);
                        },
                        [](const ListRequest&) {}, [](const ProvidersRequest&) {},
                        [](const PolicyRequest&) {}, [](const CancelRequest&) {}},
             r.body);
  return j;
}

Json to_json(const CreateReply& r) {
  Json j = {{"env", r.env},
            {"provider", r.provider},
            {"unsafe", r.unsafe},
            {"workspace", r.workspace},
            {"workspace_host", r.workspace_host}};
  if (r.recording) j["recording"] = true;
  if (!r.workspace_kind.empty()) j["workspace_kind"] = r.workspace_kind;
  if (!r.workspace_note.empty()) j["workspace_note"] = r.workspace_note;
  if (r.pooled) j["pooled"] = true;
  return j;
}

Result<CreateReply> parse_create_reply(const Json& reply) {
  SG_ASSIGN_OR_RETURN(Json f, reply_fields(reply));
  CreateReply r;
  try {
    r.env = f.at("env").get<std::string>();
    r.provider = f.value("provider", "");
    r.unsafe = f.value("unsafe", false);
    r.workspace = f.value("workspace", "");
    r.workspace_host = f.value("workspace_host", "");
    r.recording = f.value("recording", false);
    r.workspace_kind = f.value("workspace_kind", "");
    r.workspace_note = f.value("workspace_note", "");
    r.pooled = f.value("pooled", false);
  } catch (const Json::exception& e) {
    return logic_error("create reply", e.what());
  }
  return r;
}

Json reply_ok(const Json& id, Json fields) {
  Json j = fields.is_object() ? std::move(fields) : Json::object();
  if (!id.is_null()) j["id"] = id;
  j["ok"] = true;
  return j;
}

Json reply_error(const Json& id, const std::string& message) {
  Json j = {{"ok", false}, {"error", message}};
  if (!id.is_null()) j["id"] = id;
  return j;
}

Result<Json> reply_fields(const Json& reply) {
  if (!reply.is_object() || !reply.contains("ok") || !reply.at("ok").is_boolean())
    return logic_error("server", "not a reply: " + describe_json(reply));
  if (!reply.at("ok").get<bool>()) {
    std::string e = reply.contains("error") && reply.at("error").is_string() ? reply.at("error").get<std::string>()
                                                                               : "request failed";
    return logic_error("server", e);
  }
  Json f = reply;
  f.erase("ok");
  f.erase("id");
  return f;
}

}  // namespace sandgate::session
