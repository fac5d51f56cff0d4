#include "controller/server.h"

#include "core/log.h"
#include "core/units.h"

namespace sandgate::controller {
namespace {

// Reads an optional string field, or fails naming it.
Result<std::string> str(const Json& r, const char* key, bool required) {
  if (!r.contains(key)) {
    if (required) return logic_error("request", std::string("missing \"") + key + "\"");
    return std::string();
  }
  if (!r[key].is_string()) return logic_error("request", std::string("\"") + key + "\" must be a string");
  return r[key].get<std::string>();
}

Result<std::vector<std::string>> strings(const Json& r, const char* key) {
  std::vector<std::string> out;
  if (!r.contains(key)) return out;
  if (!r[key].is_array()) return logic_error("request", std::string("\"") + key + "\" must be an array of strings");
  for (const auto& v : r[key]) {
    if (!v.is_string()) return logic_error("request", std::string("\"") + key + "\" must be an array of strings");
    out.push_back(v.get<std::string>());
  }
  return out;
}

}  // namespace

Server::~Server() { close_all(); }

void Server::close_all() {
  for (auto& [id, s] : sessions_)
    if (auto st = s->close(); !st.ok()) spdlog::error("closing {}: {}", id, st.error().message());
  sessions_.clear();
}

Json Server::providers_list() const {
  Json out = Json::array();
  for (const auto& e : registry_.entries()) {
    Json caps = Json::array();
    for (auto c : e.info.capabilities) caps.push_back(providers::to_string(c));
    out.push_back({{"name", e.info.name}, {"unsafe", e.info.unsafe}, {"capabilities", caps}});
  }
  return out;
}

Result<Json> Server::create(const Json& r) {
  SG_ASSIGN_OR_RETURN(std::string name, str(r, "provider", true));
  auto it = providers_.find(name);
  if (it == providers_.end()) {
    SG_ASSIGN_OR_RETURN(auto p, registry_.create(name, options_));
    // The policy's required capabilities gate every provider (visibly disqualified).
    SG_TRY(providers::check_requirements(*p, controller_.policy().required_capabilities));
    it = providers_.emplace(name, std::move(p)).first;
  }
  providers::EnvSpec spec;
  SG_ASSIGN_OR_RETURN(spec.workspace_recipe, str(r, "workspace", false));
  SG_ASSIGN_OR_RETURN(spec.env, strings(r, "env"));
  SG_ASSIGN_OR_RETURN(std::string tenant, str(r, "tenant", false));
  if (!tenant.empty()) spec.tenant = tenant;
  SG_ASSIGN_OR_RETURN(std::string timeout, str(r, "timeout", false));
  if (!timeout.empty()) {
    SG_ASSIGN_OR_RETURN(spec.timeout, parse_duration(timeout));
  }
  SG_ASSIGN_OR_RETURN(auto session, RunSession::open(controller_, *it->second, spec));
  std::string id = session->environment().run_id();
  Json out = {{"env", id},
              {"provider", name},
              {"unsafe", it->second->info().unsafe},
              {"workspace", session->environment().workspace_path()},
              {"workspace_host", session->environment().workspace_host_path()}};
  sessions_[id] = std::move(session);
  return out;
}

Result<Json> Server::exec(const Json& r) {
  SG_ASSIGN_OR_RETURN(std::string id, str(r, "env", true));
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return logic_error("exec", "no environment '" + id + "' (create one first)");
  CallRequest call;
  SG_ASSIGN_OR_RETURN(call.argv, strings(r, "argv"));
  if (call.argv.empty()) return logic_error("exec", "\"argv\" must name a command");
  SG_ASSIGN_OR_RETURN(std::string intent, str(r, "intent", false));
  if (!intent.empty()) call.intent = intent;
  SG_ASSIGN_OR_RETURN(call.env, strings(r, "call_env"));
  SG_ASSIGN_OR_RETURN(call.cwd, str(r, "cwd", false));
  call.cancel_fd = cancel_fd_;
  SG_ASSIGN_OR_RETURN(CallOutcome o, it->second->call(call));
  return Json{{"outcome", to_json(o)}};
}

Result<Json> Server::destroy(const Json& r) {
  SG_ASSIGN_OR_RETURN(std::string id, str(r, "env", true));
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return logic_error("destroy", "no environment '" + id + "'");
  Status s = it->second->close();
  sessions_.erase(it);
  if (!s.ok()) return std::move(s).error();
  return Json::object();
}

Json Server::handle(const Json& request) {
  Json response = {{"ok", false}};
  if (request.is_object() && request.contains("id")) response["id"] = request["id"];
  if (!request.is_object()) {
    response["error"] = "a request is a JSON object";
    return response;
  }
  std::string op = request.value("op", "");
  Result<Json> result = logic_error("request", "unknown op '" + op +
                                                   "' (create, exec, destroy, list, providers, policy)");
  try {
    if (op == "create") result = create(request);
    else if (op == "exec") result = exec(request);
    else if (op == "destroy") result = destroy(request);
    else if (op == "providers") result = Json{{"providers", providers_list()}};
    else if (op == "policy") result = Json{{"policy", to_json(controller_.policy())}};
    else if (op == "list") {
      Json envs = Json::array();
      for (const auto& [id, s] : sessions_) envs.push_back(id);
      result = Json{{"envs", envs}};
    }
  } catch (const std::exception& e) {
    result = logic_error("request", e.what());
  }
  if (!result.ok()) {
    response["error"] = result.error().message();
    return response;
  }
  for (auto& [k, v] : result->items()) response[k] = v;
  response["ok"] = true;
  return response;
}

std::string Server::handle_line(const std::string& line) {
  auto j = parse_json(line, "request");
  if (!j.ok()) return dump_json(Json{{"ok", false}, {"error", j.error().message()}});
  // dump_json never throws on what a call wrote; nothing else may end the server either.
  try {
    return dump_json(handle(*j));
  } catch (const std::exception& e) {
    return dump_json(Json{{"ok", false}, {"error", std::string("internal error: ") + e.what()}});
  }
}

}  // namespace sandgate::controller
