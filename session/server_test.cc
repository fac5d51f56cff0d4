// The serve protocol's request handling: every malformed or impossible request is a one-line
// error response, never a crash. (The happy path runs end to end in the orchestrator example.)
#include "session/server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <set>
#include <thread>

#include "controller/fake_backend.h"
#include "core/files.h"
#include "session/run_pool.h"
#include "tests/support/eventually.h"

namespace sandgate::session {
using namespace controller;
namespace {

using ::testing::HasSubstr;

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sg-server-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmp_ = tmpl;
    ControllerOptions o;
    o.paths.state_dir = tmp_ + "/state";
    o.paths.work_dir = tmp_ + "/work";
    o.root = "sgtest";
    o.backend = std::make_unique<controller::testing::FakeBackend>(controller::testing::FakeBackend::all_features(),
                                                       tmp_ + "/no-such-cgroupfs");
    o.policy = default_policy();
    o.policy.required_capabilities = {Capability::kFsIsolated};
    auto c = Controller::create(std::move(o));
    ASSERT_TRUE(c.ok()) << c.error().message();
    controller_ = std::move(c).value();
    providers::register_builtin_providers(registry_);
    ServerOptions options;
    options.registry = &registry_;
    options.provider_options.allow_unsafe_host = true;
    server_ = std::make_unique<Server>(*controller_, std::move(options));
  }
  void TearDown() override {
    server_.reset();
    controller_.reset();
    (void)remove_tree(tmp_);
  }
  Json ask(const std::string& line) {
    auto reply = parse_json(server_->handle_line(line), "reply");
    EXPECT_TRUE(reply.ok());
    return reply.ok() ? *reply : Json();
  }
  std::string tmp_;
  std::unique_ptr<Controller> controller_;
  providers::Registry registry_;
  std::unique_ptr<Server> server_;
};

TEST_F(ServerTest, MalformedAndUnknownRequestsAreErrors) {
  Json r = ask("{not json");
  EXPECT_EQ(r["ok"], false);
  EXPECT_THAT(r["error"].get<std::string>(), HasSubstr("line 1 column"));
  r = ask("[1,2]");
  EXPECT_EQ(r["ok"], false);
  r = ask(R"({"id":7,"op":"bake"})");
  EXPECT_EQ(r["id"], 7);
  EXPECT_THAT(r["error"].get<std::string>(), HasSubstr("unknown op 'bake'"));
}

TEST_F(ServerTest, ExecAndDestroyNeedAKnownEnvironment) {
  Json r = ask(R"({"id":1,"op":"exec","env":"nope","argv":["true"]})");
  EXPECT_EQ(r["ok"], false);
  EXPECT_THAT(r["error"].get<std::string>(), HasSubstr("no environment 'nope'"));
  r = ask(R"({"id":2,"op":"exec","argv":["true"]})");
  EXPECT_THAT(r["error"].get<std::string>(), HasSubstr("missing \"env\""));
  r = ask(R"({"id":3,"op":"destroy","env":"nope"})");
  EXPECT_EQ(r["ok"], false);
  r = ask(R"({"id":4,"op":"exec","env":5,"argv":["true"]})");
  EXPECT_THAT(r["error"].get<std::string>(), HasSubstr("\"env\" must be a string, got 5"));
}

TEST_F(ServerTest, UnknownKeysAndWrongTypesAreNamed) {
  Json r = ask(R"({"id":1,"op":"exec","env":"e","argv":["true"],"intnet":"compile"})");
  EXPECT_EQ(r["id"], 1);
  EXPECT_THAT(r["error"].get<std::string>(), HasSubstr("exec: unknown key \"intnet\""));
  r = ask(R"({"id":2,"op":"exec","env":"e","argv":"make"})");
  EXPECT_THAT(r["error"].get<std::string>(), HasSubstr("\"argv\" must be an array of strings, got \"make\""));
  r = ask(R"({"id":3,"op":"create","provider":"namespaces","ro_binds":[1]})");
  EXPECT_THAT(r["error"].get<std::string>(), HasSubstr("\"ro_binds\" must be an array of strings, got 1"));
  r = ask(R"({"id":4,"op":"list","env":"x"})");
  EXPECT_THAT(r["error"].get<std::string>(), HasSubstr("list: unknown key \"env\" (it takes none)"));
  r = ask(R"({"id":5})");
  EXPECT_THAT(r["error"].get<std::string>(), HasSubstr("missing \"op\""));
}

// A server started without --net allowlist makes no allowlisted run, and says how to start one;
// entries without an allowlist, or malformed ones, are named before anything is made.
TEST_F(ServerTest, NetworkRequestsAServerCannotHonourAreRefusedByField) {
  Json r = ask(R"({"id":1,"op":"create","provider":"namespaces","net":"allowlist"})");
  EXPECT_FALSE(r.value("ok", true));
  EXPECT_THAT(r["error"].get<std::string>(), HasSubstr("serve --net allowlist"));
  r = ask(R"({"id":2,"op":"create","provider":"namespaces","allow":["203.0.113.20:443"]})");
  EXPECT_THAT(r["error"].get<std::string>(), HasSubstr("\"allow\" needs \"net\": \"allowlist\""));
  r = ask(R"({"id":3,"op":"create","provider":"namespaces","net":"none","allow":["x"]})");
  EXPECT_THAT(r["error"].get<std::string>(), HasSubstr("\"allow\" needs"));
  r = ask(R"({"id":4,"op":"list"})");
  EXPECT_TRUE(r["envs"].empty()) << "nothing was made: " << dump_json(r);
}

TEST_F(ServerTest, ProvidersLackingThePolicysRequirementsAreDisqualified) {
  Json r = ask(R"({"id":1,"op":"create","provider":"host_dir"})");
  EXPECT_EQ(r["ok"], false);
  EXPECT_THAT(r["error"].get<std::string>(), HasSubstr("disqualified: it lacks fs.isolated"));
  r = ask(R"({"id":2,"op":"create","provider":"qemu"})");
  EXPECT_THAT(r["error"].get<std::string>(), HasSubstr("unknown provider 'qemu'"));
  r = ask(R"({"id":3,"op":"create","provider":"namespaces","timeout":"30"})");
  EXPECT_THAT(r["error"].get<std::string>(), HasSubstr("has no unit"));
}

// An exec with "create" whose run cannot be made is answered once, with the create's error,
// and nothing is made (the happy path, on a real provider: tests/session_test.cc).
TEST_F(ServerTest, AOneCallExecWhoseRunCannotBeMadeIsOneError) {
  Json r = ask(R"({"id":1,"op":"exec","create":{"provider":"qemu"},"argv":["true"]})");
  EXPECT_EQ(r["id"], 1);
  EXPECT_EQ(r["ok"], false);
  EXPECT_THAT(r["error"].get<std::string>(), HasSubstr("unknown provider 'qemu'"));
  r = ask(R"({"id":2,"op":"exec","create":{"provider":"host_dir"},"argv":["true"]})");
  EXPECT_THAT(r["error"].get<std::string>(), HasSubstr("disqualified: it lacks fs.isolated"));
  r = ask(R"({"id":3,"op":"list"})");
  EXPECT_TRUE(r["envs"].empty()) << "nothing was made: " << dump_json(r);
  server_->drain();
}

TEST_F(ServerTest, ListsProvidersPolicyAndEnvironments) {
  Json r = ask(R"({"op":"providers"})");
  ASSERT_EQ(r["ok"], true);
  ASSERT_EQ(r["providers"].size(), 4u) << r.dump();  // the built-ins
  std::set<std::string> names;
  for (const auto& p : r["providers"]) names.insert(p["name"].get<std::string>());
  EXPECT_EQ(names, (std::set<std::string>{"host_dir", "namespaces", "podman", "microvm"}));
  r = ask(R"({"op":"policy"})");
  EXPECT_EQ(r["policy"]["schema_version"], 1);
  r = ask(R"({"op":"list"})");
  EXPECT_EQ(r["envs"].size(), 0u);
}

// serve --pool: requests share runs made ahead only when identical in what shapes a run; a
// recipe, secrets or a timeout never do (session/run_pool.h says why).
TEST(RunPoolKey, OnlyIdenticalShapesShareAKeyAndSomeRequestsHaveNone) {
  CreateRequest base;
  base.provider = "namespaces";
  auto key = RunPool::key_of(base);
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(RunPool::key_of(base), key) << "the same request, the same key";
  for (auto change : std::vector<std::function<void(CreateRequest&)>>{
           [](CreateRequest& r) { r.provider = "podman"; },
           [](CreateRequest& r) { r.tenant = "other"; }, [](CreateRequest& r) { r.env = {"A=1"}; },
           [](CreateRequest& r) { r.ro_binds = {"/data"}; },
           [](CreateRequest& r) { r.image = "img"; },
           [](CreateRequest& r) { r.workspace_size = "1GiB"; },
           [](CreateRequest& r) { r.net = "none"; },
           [](CreateRequest& r) { r.allow = {"tcp:203.0.113.1:443"}; }}) {
    CreateRequest r = base;
    change(r);
    auto other = RunPool::key_of(r);
    ASSERT_TRUE(other.has_value());
    EXPECT_NE(*other, *key) << *other;
  }
  for (auto change : std::vector<std::function<void(CreateRequest&)>>{
           [](CreateRequest& r) { r.workspace = "/repo"; },
           [](CreateRequest& r) {
             r.secrets = {{"T", "/token"}};
           },
           [](CreateRequest& r) { r.timeout = std::chrono::seconds(30); }}) {
    CreateRequest r = base;
    change(r);
    EXPECT_FALSE(RunPool::key_of(r).has_value()) << dump_json(to_json(Request{Json(), r}));
  }
}

// A pool whose runs cannot be made hands out nothing, gives the shape up instead of retrying
// it in a loop, and stops cleanly.
TEST(RunPool, AShapeThatCannotBeMadeIsGivenUp) {
  std::atomic<int> tries{0};
  RunPool pool(2, [&](const CreateRequest&) -> Result<std::unique_ptr<RunSession>> {
    ++tries;
    return logic_error("make", "no");
  });
  CreateRequest r;
  r.provider = "namespaces";
  EXPECT_EQ(pool.take(r), nullptr) << "a shape never learned";
  pool.learn(r);
  ASSERT_TRUE(sandgate::testing::eventually([&] { return tries > 0; })) << "the pool never tried";
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a retry would come now
  EXPECT_EQ(tries, 1) << "a failing shape was retried";
  EXPECT_EQ(pool.take(r), nullptr);
  EXPECT_EQ(pool.ready_total(), 0u);
  pool.stop();
  pool.stop();  // idempotent
}

}  // namespace
}  // namespace sandgate::session
