// The external-provider protocol's parsing: every reply read strictly, each error naming the
// reply and the field.
#include "providers/external_protocol.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "providers/external.h"

namespace sandgate::providers::external {
namespace {

using ::testing::HasSubstr;

Json describe_ok() {
  return Json::parse(R"({"id":1,"ok":true,"schema_version":1,"name":"bwrap","summary":"s",
                         "capabilities":["net.none","fs.isolated"],"unsafe":false,"placement":"parked"})");
}

Json exec_ok() {
  return Json::parse(R"({"id":3,"ok":true,"exit_code":0,"timed_out":false,"cancelled":false,
                         "stdout":"aGk=","stderr":"","stdout_bytes":2,"stderr_bytes":0})");
}

template <class T>
std::string error_of(const Result<T>& r) {
  return r.ok() ? "(ok)" : r.error().message();
}

TEST(ExternalProtocol, DescribeReplyIsReadWhole) {
  auto d = parse_describe_reply(describe_ok());
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(d->name, "bwrap");
  EXPECT_EQ(d->capabilities, (CapabilitySet{Capability::kNetNone, Capability::kFsIsolated}));
  EXPECT_FALSE(d->unsafe);
}

TEST(ExternalProtocol, DescribeReplyNamesWhatIsWrong) {
  struct Case {
    const char* key;
    Json value;
    const char* expected;
  };
  for (const auto& c : std::vector<Case>{
           {"colour", "red", "unknown key \"colour\""},
           {"schema_version", 2, "speaks schema_version 2"},
           {"schema_version", "1", "\"schema_version\" must be a non-negative integer"},
           {"capabilities", Json::array({"net.nonsense"}), "net.nonsense"},
           {"capabilities", "net.none", "\"capabilities\" must be an array of strings"},
           {"unsafe", "no", "\"unsafe\" must be true or false"},
           {"placement", "self", "\"placement\" is \"self\""},
           {"name", "", "\"name\" must be 1-64 characters"},
       }) {
    Json j = describe_ok();
    j[c.key] = c.value;
    EXPECT_THAT(error_of(parse_describe_reply(j)), HasSubstr(c.expected)) << c.key;
  }
  Json j = describe_ok();
  j.erase("placement");
  EXPECT_THAT(error_of(parse_describe_reply(j)), HasSubstr("describe: missing \"placement\""));
}

TEST(ExternalProtocol, LineEnvelope) {
  EXPECT_THAT(error_of(parse_line("{nope", 1, "describe")), HasSubstr("describe: not JSON"));
  EXPECT_THAT(error_of(parse_line("[1]", 1, "describe")), HasSubstr("a reply is a JSON object"));
  EXPECT_THAT(error_of(parse_line(R"({"ok":true})", 1, "describe")), HasSubstr("missing \"id\""));
  EXPECT_THAT(error_of(parse_line(R"({"id":2,"ok":true})", 1, "describe")),
              HasSubstr("\"id\" is 2, the request's is 1"));
  EXPECT_THAT(error_of(parse_line(R"({"id":1,"ok":"yes"})", 1, "create")),
              HasSubstr("\"ok\" must be true or false"));
  EXPECT_THAT(error_of(parse_line(R"({"id":1,"ok":true,"event":"started"})", 1, "exec")),
              HasSubstr("a reply (\"ok\") or an event, not both"));
  auto refused = parse_line(R"({"id":1,"ok":false,"error":"no such env"})", 1, "exec");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().step, kRefusedStep);
  EXPECT_THAT(refused.error().message(), HasSubstr("exec failed: no such env"));
  // A reply to a line that had no id carries a null id.
  EXPECT_TRUE(parse_line(R"({"id":null,"ok":false,"error":"x"})", -1, "junk").error().step ==
              kRefusedStep);
  auto event = parse_line(R"({"id":4,"event":"started","pid":1234})", 4, "exec");
  ASSERT_TRUE(event.ok());
  EXPECT_TRUE(event->event);
  EXPECT_EQ(parse_started_event(event->json).value(), 1234);
}

TEST(ExternalProtocol, StartedEventNamesItsFaults) {
  EXPECT_THAT(
      error_of(parse_started_event(Json::parse(R"({"id":4,"event":"started","pid":"12"})"))),
      HasSubstr("\"pid\" must be a non-negative integer"));
  EXPECT_THAT(error_of(parse_started_event(Json::parse(R"({"id":4,"event":"started","pid":1})"))),
              HasSubstr("\"pid\" must name a process"));
  EXPECT_THAT(error_of(parse_started_event(Json::parse(R"({"id":4,"event":"progress","pid":5})"))),
              HasSubstr("unknown event \"progress\""));
  EXPECT_THAT(
      error_of(parse_started_event(Json::parse(R"({"id":4,"event":"started","pid":5,"x":1})"))),
      HasSubstr("unknown key \"x\""));
}

TEST(ExternalProtocol, ExecReplyMapsToExecResult) {
  auto r = parse_exec_reply(exec_ok(), 1024);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_TRUE(r->result.status.exited);
  EXPECT_EQ(r->result.stdout_data, "hi");
  EXPECT_FALSE(r->result.stdout_truncated);

  Json j = exec_ok();
  j.erase("exit_code");
  j["signal"] = 9;
  j["stdout_bytes"] = 10;
  r = parse_exec_reply(j, 1024);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->result.status.shell_code(), 137);
  EXPECT_TRUE(r->result.stdout_truncated);

  j = exec_ok();
  j.erase("exit_code");
  j["start_failure"] = {{"errno", 2}, {"step", "execve"}};
  r = parse_exec_reply(j, 1024);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->result.start_failure);
  EXPECT_EQ(r->result.status.code, 127);
}

TEST(ExternalProtocol, ExecReplyNamesWhatIsWrong) {
  struct Case {
    const char* key;
    Json value;
    const char* expected;
  };
  for (const auto& c : std::vector<Case>{
           {"signal", 9, "exactly one of \"exit_code\", \"signal\", \"start_failure\""},
           {"exit_code", 300, "\"exit_code\" is 300, more than 255"},
           {"exit_code", -1, "\"exit_code\" must be a non-negative integer"},
           {"stdout", "a!==", "\"stdout\": base64: invalid character at offset 1"},
           {"stdout", "abc", "not a multiple of 4"},
           {"stdout_bytes", 1, "\"stdout_bytes\" (1) is less than the 2 bytes returned"},
           {"timed_out", 1, "\"timed_out\" must be true or false"},
           {"exit_status", 0, "unknown key \"exit_status\""},
       }) {
    Json j = exec_ok();
    j[c.key] = c.value;
    EXPECT_THAT(error_of(parse_exec_reply(j, 1024)), HasSubstr(c.expected)) << c.key;
  }
  // More output than the limit sandgate asked for.
  Json j = exec_ok();
  j["stdout"] = base64_encode(std::string(2000, 'x'));
  j["stdout_bytes"] = 2000;
  EXPECT_THAT(error_of(parse_exec_reply(j, 1024)),
              HasSubstr("holds 2000 bytes, more than the output limit 1024"));
}

TEST(ExternalProtocol, CreateReplyPaths) {
  Json j = Json::parse(
      R"({"id":2,"ok":true,"env":"e1","workspace":"/workspace","workspace_host":"/w/r/ws"})");
  ASSERT_TRUE(parse_create_reply(j).ok());
  j["workspace_host"] = "relative";
  EXPECT_THAT(error_of(parse_create_reply(j)),
              HasSubstr("\"workspace_host\" must be an absolute path"));
  j.erase("env");
  EXPECT_THAT(error_of(parse_create_reply(j)), HasSubstr("create: missing \"env\""));
}

TEST(ExternalProtocol, Base64RoundTripsEveryByte) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n : {0, 1, 2, 3, 4, 255, 256}) {
    std::string in = all.substr(0, n);
    auto out = base64_decode(base64_encode(in));
    ASSERT_TRUE(out.ok()) << n;
    EXPECT_EQ(*out, in) << n;
  }
  EXPECT_EQ(base64_encode("hi"), "aGk=");
  EXPECT_EQ(base64_decode("aGk=").value(), "hi");
}

TEST(ExternalProtocol, RequestsCarryTheSpec) {
  EnvSpec spec;
  spec.workspace_recipe = "/recipe";
  spec.readonly_mounts = {{"/host/probe", "/opt/sandgate-probe"}};
  Json c = create_request(2, spec, "r1", "/work/r1", {"A=b"});
  EXPECT_EQ(c["run_dir"], "/work/r1");
  EXPECT_EQ(c["ro_binds"][0]["target"], "/opt/sandgate-probe");
  EXPECT_EQ(c["env"], Json::array({"A=b"}));
  Call call;
  call.argv = {"true"};
  call.timeout = std::chrono::seconds(2);
  call.rlimits.open_files = 64;
  Json e = exec_request(3, "e1", call);
  EXPECT_EQ(e["timeout_ms"], 2000);
  EXPECT_EQ(e["rlimits"]["open_files"], 64);
}

TEST(ProvidersConfig, ReadStrictly) {
  auto ok = parse_providers_config(
      Json::parse(
          R"({"schema_version":1,"providers":[{"name":"bwrap","command":["/x/bwrap-provider","-v"]}]})"),
      "f");
  ASSERT_TRUE(ok.ok()) << ok.error().message();
  ASSERT_EQ(ok->size(), 1u);
  EXPECT_EQ((*ok)[0].name, "external:bwrap");
  EXPECT_EQ((*ok)[0].argv, (std::vector<std::string>{"/x/bwrap-provider", "-v"}));
  EXPECT_THAT(
      error_of(parse_providers_config(
          Json::parse(R"({"schema_version":1,"providers":[{"name":"a b","command":["x"]}]})"),
          "f")),
      HasSubstr("providers[0]: \"name\" must be 1-64 of [A-Za-z0-9._-]"));
  EXPECT_THAT(
      error_of(parse_providers_config(
          Json::parse(R"({"schema_version":1,"providers":[{"name":"a","command":[]}]})"), "f")),
      HasSubstr("\"command\" must name a program"));
  EXPECT_THAT(
      error_of(parse_providers_config(
          Json::parse(R"({"schema_version":1,"providers":[{"name":"a","cmd":["x"]}]})"), "f")),
      HasSubstr("unknown key \"cmd\""));
  EXPECT_THAT(
      error_of(parse_providers_config(
          Json::parse(
              R"({"schema_version":1,"providers":[{"name":"a","command":["x"]},{"name":"a","command":["y"]}]})"),
          "f")),
      HasSubstr("configured twice"));
  EXPECT_THAT(error_of(parse_providers_config(Json::parse(R"({"providers":[]})"), "f")),
              HasSubstr("\"schema_version\" must be 1"));
}

}  // namespace
}  // namespace sandgate::providers::external
