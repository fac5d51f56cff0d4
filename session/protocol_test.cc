// The protocol's requests and replies: what a client writes, a server reads back the same;
// what a server refuses names the op and the field.
#include "session/protocol.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sandgate::session {
namespace {

using ::testing::HasSubstr;

Request round_trip(const Request& r) {
  auto back = parse_request(parse_json(dump_json(to_json(r)), "line").value());
  EXPECT_TRUE(back.ok()) << back.error().message();
  return back.ok() ? *back : Request{};
}

TEST(Protocol, EveryRequestSurvivesTheWire) {
  CreateRequest c{"namespaces",       "/src", {"TERM", "A=b"}, "batch", std::chrono::minutes(30),
                  {"/data:/opt/data"}};
  auto back = round_trip({Json(1), c});
  EXPECT_EQ(back.id, 1);
  auto& cb = std::get<CreateRequest>(back.body);
  EXPECT_EQ(cb.provider, "namespaces");
  EXPECT_EQ(cb.workspace, "/src");
  EXPECT_EQ(cb.env, (std::vector<std::string>{"TERM", "A=b"}));
  EXPECT_EQ(cb.tenant, "batch");
  EXPECT_EQ(cb.timeout, std::chrono::minutes(30));
  EXPECT_EQ(cb.ro_binds, (std::vector<std::string>{"/data:/opt/data"}));

  ExecRequest e{"r1", {"make", "-j2"}, "compile", {"CC=clang"}, "/workspace/src"};
  auto eb = std::get<ExecRequest>(round_trip({Json("x"), e}).body);
  EXPECT_EQ(eb.env, "r1");
  EXPECT_EQ(eb.argv, e.argv);
  EXPECT_EQ(eb.intent, "compile");
  EXPECT_EQ(eb.call_env, e.call_env);
  EXPECT_EQ(eb.cwd, "/workspace/src");
  ExecRequest inferred{"r1", {"ls"}, std::nullopt, {}, ""};
  EXPECT_FALSE(std::get<ExecRequest>(round_trip({Json(), inferred}).body).intent.has_value());

  EXPECT_EQ(std::get<DestroyRequest>(round_trip({Json(), DestroyRequest{"r1"}}).body).env, "r1");
  for (RequestBody b : {RequestBody(ListRequest{}), RequestBody(ProvidersRequest{}),
                        RequestBody(PolicyRequest{}), RequestBody(CancelRequest{})})
    EXPECT_EQ(op_name(round_trip({Json(), b}).body), op_name(b));
  EXPECT_EQ(target_env(e), "r1");
  EXPECT_EQ(target_env(c), "");
}

TEST(Protocol, RefusalsNameTheOpAndTheField) {
  auto refuse = [](const std::string& line) {
    auto r = parse_request(parse_json(line, "line").value());
    EXPECT_FALSE(r.ok()) << line;
    return r.ok() ? std::string() : r.error().message();
  };
  EXPECT_THAT(refuse("[]"), HasSubstr("a request is a JSON object, got an array"));
  EXPECT_THAT(refuse(R"({"op":3})"), HasSubstr("\"op\" must be a string, got 3"));
  EXPECT_THAT(refuse(R"({"op":"bake"})"), HasSubstr("unknown op 'bake'"));
  EXPECT_THAT(refuse(R"({"op":"bake"})"), HasSubstr("policy, cancel)"));
  // A cancel is the connection's: it names no run.
  EXPECT_THAT(refuse(R"({"op":"cancel","env":"r1"})"), HasSubstr("cancel: unknown key \"env\""));
  EXPECT_THAT(refuse(R"({"op":"create"})"), HasSubstr("create: missing \"provider\""));
  EXPECT_THAT(refuse(R"({"op":"create","provider":"x","timeout":"soon"})"),
              HasSubstr("create: \"timeout\""));
  EXPECT_THAT(refuse(R"({"op":"exec","env":"e","argv":[]})"),
              HasSubstr("exec: \"argv\" must name a command"));
  EXPECT_THAT(refuse(R"({"op":"exec","env":"e","argv":["a",2]})"), HasSubstr("got 2"));
  EXPECT_THAT(
      refuse(R"({"op":"destroy","env":"e","force":true})"),
      HasSubstr(
          "destroy: unknown key \"force\" (known: env, export_branch, export_force, export)"));
  EXPECT_THAT(refuse(R"({"op":"destroy","env":"e","export_force":true})"),
              HasSubstr("destroy: \"export_force\" without \"export_branch\""));
  EXPECT_THAT(refuse(R"({"op":"destroy","env":"e","export_force":"yes"})"),
              HasSubstr("\"export_force\" must be true or false, got"));
  EXPECT_THAT(refuse(R"({"op":"create","provider":"x","recipe_mode":"cow"})"),
              HasSubstr("\"recipe_mode\" must be \"auto\", \"overlay\" or \"copy\", got \"cow\""));
  EXPECT_THAT(refuse(R"({"op":"create","provider":"x","workspace_size":"lots"})"),
              HasSubstr("\"workspace_size\": "));
  EXPECT_THAT(refuse(R"({"op":"create","provider":"x","secrets":["TOKEN=/f"]})"),
              HasSubstr("\"secrets\" must be an object of strings ({\"NAME\": \"FILE\"}), got"));
}

TEST(Protocol, TheRunContractRoundTrips) {
  CreateRequest c;
  c.provider = "namespaces";
  c.recipe_mode = "overlay";
  c.workspace_size = "2GiB";
  c.secrets = {{"TOKEN", "/run/user/token"}, {"A", "/a"}};
  auto cb = std::get<CreateRequest>(parse_request(to_json(Request{Json(1), c})).value().body);
  EXPECT_EQ(cb.recipe_mode, "overlay");
  EXPECT_EQ(cb.workspace_size, "2GiB");
  EXPECT_EQ(cb.secrets.size(), 2u);
  DestroyRequest d{"r1", "agent/fix", true, "/tmp/out"};
  auto db = std::get<DestroyRequest>(parse_request(to_json(Request{Json(2), d})).value().body);
  EXPECT_EQ(db.export_branch, "agent/fix");
  EXPECT_TRUE(db.export_force);
  EXPECT_EQ(db.export_dir, "/tmp/out");
}

// An exec with "create" (and "destroy"): one request for a run made for one call. Its create
// and destroy are read as strictly as the requests they stand for, and may not be mixed with a
// named run.
TEST(Protocol, AOneCallExecCarriesItsCreateAndDestroy) {
  ExecRequest e;
  e.argv = {"make"};
  e.intent = "compile";
  e.create.emplace();
  e.create->provider = "namespaces";
  e.create->env = {"A=1"};
  e.create->secrets = {{"T", "/t"}};
  e.destroy = DestroyRequest{"", "agent/fix", true, ""};
  auto back = std::get<ExecRequest>(round_trip({Json(1), e}).body);
  EXPECT_EQ(back.env, "");
  EXPECT_EQ(target_env(back), "") << "made on the control strand, like a create";
  ASSERT_TRUE(back.create);
  EXPECT_EQ(back.create->provider, "namespaces");
  EXPECT_EQ(back.create->env, (std::vector<std::string>{"A=1"}));
  EXPECT_EQ(back.create->secrets.size(), 1u);
  ASSERT_TRUE(back.destroy);
  EXPECT_EQ(back.destroy->export_branch, "agent/fix");
  EXPECT_TRUE(back.destroy->export_force);
  EXPECT_EQ(back.argv, e.argv);
  EXPECT_EQ(back.intent, "compile");
  e.destroy.reset();
  EXPECT_FALSE(std::get<ExecRequest>(round_trip({Json(2), e}).body).destroy);
  ExecRequest named{"r1", {"ls"}, std::nullopt, {}, ""};
  EXPECT_FALSE(std::get<ExecRequest>(round_trip({Json(3), named}).body).create);

  auto refuse = [](const std::string& line) {
    auto r = parse_request(parse_json(line, "line").value());
    EXPECT_FALSE(r.ok()) << line;
    return r.ok() ? std::string() : r.error().message();
  };
  EXPECT_THAT(refuse(R"({"op":"exec","env":"r1","create":{"provider":"x"},"argv":["a"]})"),
              HasSubstr("exec: \"env\" and \"create\" together"));
  EXPECT_THAT(refuse(R"({"op":"exec","env":"r1","destroy":{},"argv":["a"]})"),
              HasSubstr("exec: \"destroy\" without \"create\""));
  EXPECT_THAT(refuse(R"({"op":"exec","create":"namespaces","argv":["a"]})"),
              HasSubstr("exec: \"create\" must be an object, got \"namespaces\""));
  EXPECT_THAT(refuse(R"({"op":"exec","create":{},"argv":["a"]})"),
              HasSubstr("exec: \"create\": missing \"provider\""));
  EXPECT_THAT(refuse(R"({"op":"exec","create":{"provider":"x","op":"create"},"argv":["a"]})"),
              HasSubstr("exec: \"create\": unknown key \"op\""));
  EXPECT_THAT(refuse(R"({"op":"exec","create":{"provider":"x","timeout":"soon"},"argv":["a"]})"),
              HasSubstr("exec: \"create\": \"timeout\""));
  EXPECT_THAT(
      refuse(R"({"op":"exec","create":{"provider":"x"},"destroy":{"env":"r1"},"argv":["a"]})"),
      HasSubstr(
          "exec: \"destroy\": unknown key \"env\" (known: export_branch, export_force, export)"));
  EXPECT_THAT(
      refuse(
          R"({"op":"exec","create":{"provider":"x"},"destroy":{"export_force":true},"argv":["a"]})"),
      HasSubstr("\"export_force\" without \"export_branch\""));
  EXPECT_THAT(refuse(R"({"op":"exec","create":{"provider":"x"},"argv":[]})"),
              HasSubstr("exec: \"argv\" must name a command"));
}

TEST(Protocol, TheNetworkOfACreateRoundTripsAndABadModeIsNamed) {
  CreateRequest c;
  c.provider = "namespaces";
  c.net = "allowlist";
  c.allow = {"tcp:203.0.113.20:443", "registry.sandgate.test:443"};
  auto cb = std::get<CreateRequest>(parse_request(to_json(Request{Json(1), c})).value().body);
  EXPECT_EQ(cb.net, "allowlist");
  EXPECT_EQ(cb.allow, c.allow);
  auto bad = parse_request(Json::parse(R"({"op":"create","provider":"p","net":"open"})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find(R"("net" must be "none" or "allowlist", got "open")"),
            std::string::npos)
      << bad.error().message();
  auto wrong_type = parse_request(Json::parse(R"({"op":"create","provider":"p","allow":"x:1"})"));
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(wrong_type.error().message().find(R"("allow" must be an array of strings)"),
            std::string::npos)
      << wrong_type.error().message();
}

TEST(Protocol, RepliesCarryTheIdAndTheError) {
  Json ok = reply_ok(Json(7), {{"envs", Json::array()}});
  EXPECT_EQ(ok["id"], 7);
  EXPECT_EQ(ok["ok"], true);
  auto fields = reply_fields(ok);
  ASSERT_TRUE(fields.ok());
  EXPECT_FALSE(fields->contains("id"));
  EXPECT_TRUE(fields->contains("envs"));
  auto bad = reply_fields(reply_error(Json("a"), "no environment 'x'"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message(), HasSubstr("no environment 'x'"));
  EXPECT_FALSE(reply_fields(Json{{"hello", 1}}).ok());

  CreateReply c{"r1", "namespaces", false, "/workspace", "/var/tmp/x", true};
  auto parsed = parse_create_reply(reply_ok(Json(1), to_json(c)));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  EXPECT_EQ(parsed->env, "r1");
  EXPECT_EQ(parsed->workspace_host, "/var/tmp/x");
  EXPECT_TRUE(parsed->recording);
}

}  // namespace
}  // namespace sandgate::session
