#include "providers/supervisor_protocol.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "providers/supervisor.h"

namespace sandgate::providers {
namespace {

TEST(ProtocolTest, MessageWithFdsAndCredentials) {
  auto pair = make_control_pair();
  ASSERT_TRUE(pair.ok());
  auto pipe = make_pipe();
  ASSERT_TRUE(pipe.ok());
  ASSERT_TRUE(send_message(pair->first.get(), {{"op", "exec"}, {"id", 7}}, {pipe->write.get()}, ::getpid()).ok());
  auto msg = recv_message(pair->second.get());
  ASSERT_TRUE(msg.ok()) << msg.error().message();
  EXPECT_EQ(msg->body["op"], "exec");
  EXPECT_EQ(msg->body["id"], 7);
  ASSERT_EQ(msg->fds.size(), 1u);
  EXPECT_EQ(msg->sender_pid, ::getpid());
  // The passed fd is the pipe's write end: what we write through it arrives.
  ASSERT_EQ(::write(msg->fds[0].get(), "x", 1), 1);
  char c = 0;
  ASSERT_EQ(::read(pipe->read.get(), &c, 1), 1);
  EXPECT_EQ(c, 'x');
}

TEST(ProtocolTest, PeerCloseIsEpipe) {
  auto pair = make_control_pair();
  ASSERT_TRUE(pair.ok());
  pair->first.reset();
  auto msg = recv_message(pair->second.get());
  ASSERT_FALSE(msg.ok());
  EXPECT_EQ(msg.error().err, EPIPE);
}

TEST(ProtocolTest, OversizedMessageRefused) {
  auto pair = make_control_pair();
  ASSERT_TRUE(pair.ok());
  auto s = send_message(pair->first.get(), {{"argv", std::string(kMaxMessage + 1, 'a')}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("exceeds the limit"), std::string::npos);
}

// recv_message keeps one buffer per thread and never clears it: each message is its own bytes
// only, whatever a longer one before it left there, and each thread reads into its own.
TEST(ProtocolTest, AShortMessageAfterALongOneIsItsOwnBytesOnly) {
  auto pair = make_control_pair();
  ASSERT_TRUE(pair.ok());
  const std::string long_text(kMaxMessage - 64, 'a');
  ASSERT_TRUE(send_message(pair->first.get(), {{"argv", long_text}}).ok());
  ASSERT_TRUE(send_message(pair->first.get(), {{"id", 1}}).ok());
  auto first = recv_message(pair->second.get());
  ASSERT_TRUE(first.ok()) << first.error().message();
  EXPECT_EQ(first->body["argv"], long_text);
  auto second = recv_message(pair->second.get());
  ASSERT_TRUE(second.ok()) << second.error().message();
  EXPECT_EQ(second->body, Json({{"id", 1}}));
  // Another thread at the same time: its own buffer, its own message.
  auto other = make_control_pair();
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(send_message(other->first.get(), {{"argv", std::string(1000, 'b')}}).ok());
  ASSERT_TRUE(send_message(pair->first.get(), {{"id", 2}}).ok());
  Result<Message> theirs = logic_error("recv", "not run");
  std::thread t([&] { theirs = recv_message(other->second.get()); });
  auto mine = recv_message(pair->second.get());
  t.join();
  ASSERT_TRUE(mine.ok() && theirs.ok());
  EXPECT_EQ(mine->body, Json({{"id", 2}}));
  EXPECT_EQ(theirs->body["argv"], std::string(1000, 'b'));
}

TEST(ProtocolTest, ErrorsKeepStepPathAndErrno) {
  Error e = sys_error(EROFS, "bind workspace", "/x/y");
  Error back = error_from_json(error_to_json(e));
  EXPECT_EQ(back.err, EROFS);
  EXPECT_EQ(back.step, "bind workspace");
  EXPECT_EQ(back.path, "/x/y");
}

// What the supervisor says comes from inside the sandbox: a field of the wrong type was an
// uncaught nlohmann type_error from value() in the host's call loop, which ended sandgate
// (found by tests/fuzz/supervisor_fuzz.cc; inputs in tests/fuzz/crashes/supervisor/).
TEST(ProtocolTest, SupervisorEventsOfTheWrongShapeAreErrorsNotExceptions) {
  for (const char* text :
       {R"({"op":5})", R"({"op":"exited","id":"7"})", R"({"op":"exited","id":-1})",
        R"({"op":"exited","id":7,"wait_status":"0"})",
        R"({"op":"exited","id":7,"wait_status":1e300})",
        R"({"op":"exec_failed","id":7,"in_child":1})", R"({"op":"ready","landlock_missing":[]})",
        R"({"op":"ready","landlock_abi":"7"})", R"({"op":"ready","landlock_abi":-1})",
        R"({"op":"ready","landlock_abi":1e9})", "[]", "null", R"("ready")"}) {
    Json j = Json::parse(text);
    Result<SupervisorEvent> ev = Error{};
    EXPECT_NO_THROW(ev = read_supervisor_event(j)) << text;
    EXPECT_FALSE(ev.ok()) << text;
    EXPECT_NO_THROW((void)error_from_json(j)) << text;
  }
}

TEST(ProtocolTest, SupervisorEventsReadTheirFields) {
  auto ready = read_supervisor_event(Json::parse(R"({"op":"ready","landlock_abi":7})"));
  ASSERT_TRUE(ready.ok()) << ready.error().message();
  EXPECT_EQ(ready->landlock_abi, 7);
  auto exited = read_supervisor_event(Json::parse(R"({"op":"exited","id":7,"wait_status":256})"));
  ASSERT_TRUE(exited.ok()) << exited.error().message();
  EXPECT_EQ(exited->op, "exited");
  EXPECT_EQ(exited->id, 7u);
  EXPECT_EQ(exited->wait_status, 256);
  auto failed = read_supervisor_event(Json::parse(
      R"({"op":"exec_failed","id":3,"errno":2,"step":"execve","path":"/bin/x","detail":"","in_child":true})"));
  ASSERT_TRUE(failed.ok()) << failed.error().message();
  EXPECT_TRUE(failed->in_child);
  EXPECT_EQ(failed->error.err, ENOENT);
  EXPECT_EQ(failed->error.step, "execve");
  // Wrong types inside an error's own fields are left empty, not thrown.
  Error e = error_from_json(Json::parse(R"({"errno":"x","step":5,"path":null,"detail":[1]})"));
  EXPECT_EQ(e.err, 0);
  EXPECT_EQ(e.step, "");
}

TEST(ProtocolTest, ConfigRoundTrips) {
  SupervisorConfig c;
  c.isolate = true;
  c.base_env = {"A=1"};
  c.default_cwd = "/workspace";
  c.jail.root_dir = "/r";
  c.jail.workspace_host = "/w";
  c.jail.readonly_mounts = {{"/src", "/dst"}};
  c.jail.uid = 1234;
  c.jail.seccomp = false;
  c.jail.seccomp_full_width_compare = true;  // a weakening must survive the trip, not default
  auto back = supervisor_config_from_json(to_json(c));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(to_json(*back), to_json(c));
  auto bad = supervisor_config_from_json(Json{{"isolate", true}});
  EXPECT_FALSE(bad.ok());
}

// The host's side of parking, against a scripted supervisor on the other end of the control
// socket (Supervisor::attach): what it says is queued before the host reads it, so the order
// of the words is exact. The pid it names is this process's (SCM_CREDENTIALS allows that
// without privilege); nothing here acts on it.
class LateParkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pair = make_control_pair();
    ASSERT_TRUE(pair.ok()) << pair.error().message();
    peer_ = std::move(pair->second);
    say({{"op", "ready"}});
    auto s = Supervisor::attach(SupervisorConfig{}, std::move(pair->first));
    ASSERT_TRUE(s.ok()) << s.error().message();
    supervisor_.emplace(std::move(s).value());
    EXPECT_EQ(heard()["op"], "config");
    call_.argv = {"/bin/true"};
    call_.park_next = true;
  }
  void say(const Json& body) { ASSERT_TRUE(send_message(peer_.get(), body, {}, me_).ok()); }
  Json heard() {
    auto m = recv_message(peer_.get());
    EXPECT_TRUE(m.ok()) << m.error().message();
    return m.ok() ? m->body : Json();
  }
  // Runs a call that exits at once (call id `id`); what the host asked for.
  Json exited_call(uint64_t id, const Placement& placement = {}) {
    say({{"op", "exited"}, {"id", id}, {"wait_status", 0}});
    auto r = supervisor_->exec(call_, placement);
    EXPECT_TRUE(r.ok()) << r.error().message();
    if (r.ok()) last_parked_next_ = r->parked_next_pid;
    return heard();
  }

  const pid_t me_ = ::getpid();
  UniqueFd peer_;
  std::optional<Supervisor> supervisor_;
  Call call_;
  pid_t last_parked_next_ = -1;
};

TEST_F(LateParkTest, AParkedWordThatComesAfterItsCallEndedIsTakenBeforeTheNextCall) {
  // Call 1 asks for the next call's process (park 2) and ends before the word of it.
  Json asked = exited_call(1);
  EXPECT_EQ(asked["park_next"], 2);
  EXPECT_EQ(last_parked_next_, 0);
  EXPECT_EQ(supervisor_->take_late_parked(), 0);           // not come yet: not waited for
  say({{"op", "exited"}, {"id", 1}, {"wait_status", 0}});  // a late word of another kind
  say({{"op", "parked"}, {"id", 2}});
  EXPECT_EQ(supervisor_->take_late_parked(), me_);
  EXPECT_EQ(supervisor_->take_late_parked(), 0);  // taken once
  // The next call, placed in it by the controller, starts there (the supervisor is told which
  // parked process), and asks for the one after.
  Placement placed;
  placed.placed_pid = me_;
  asked = exited_call(3, placed);
  EXPECT_EQ(asked["parked"], 2);
  EXPECT_EQ(asked["park_next"], 4);
}

TEST_F(LateParkTest, ALateWordOfAParkReplacedSinceIsNotTaken) {
  EXPECT_EQ(exited_call(1)["park_next"], 2);
  // The next call comes before the word: it asks for a park of its own, and the supervisor
  // replaces the process of park 2, so that word, when it comes, names one that is gone.
  say({{"op", "parked"}, {"id", 2}});
  Json asked = exited_call(3);
  EXPECT_FALSE(asked.contains("parked"));
  EXPECT_EQ(asked["park_next"], 4);
  EXPECT_EQ(last_parked_next_, 0);
  EXPECT_EQ(supervisor_->take_late_parked(), 0);
  say({{"op", "parked"}, {"id", 4}});
  EXPECT_EQ(supervisor_->take_late_parked(), me_);
}

TEST_F(LateParkTest, AParkThatFailedLateLeavesNothingParked) {
  EXPECT_EQ(exited_call(1)["park_next"], 2);
  say({{"op", "park_failed"}, {"id", 2}, {"errno", 12}, {"step", "fork"}});
  EXPECT_EQ(supervisor_->take_late_parked(), 0);
  // Nothing parked: the next call asks again.
  EXPECT_EQ(exited_call(3)["park_next"], 4);
}

TEST_F(LateParkTest, ALateWordThatComesDuringACallThatParksNothingIsKept) {
  EXPECT_EQ(exited_call(1)["park_next"], 2);
  // A call that asks for no park (a caller that does not park) hears the word while it runs.
  call_.park_next = false;
  say({{"op", "parked"}, {"id", 2}});
  Json asked = exited_call(3);
  EXPECT_FALSE(asked.contains("park_next"));
  EXPECT_EQ(supervisor_->take_late_parked(), 0);  // heard already, not waited for again
  // The process is parked all the same: the next call placed in it starts there.
  call_.park_next = true;
  Placement placed;
  placed.placed_pid = me_;
  asked = exited_call(4, placed);
  EXPECT_EQ(asked["parked"], 2);
}

TEST_F(LateParkTest, AWordThatCannotBeReadBetweenCallsStopsTheRunsSupervisor) {
  EXPECT_EQ(exited_call(1)["park_next"], 2);
  say({{"op", 5}, {"id", 2}});
  EXPECT_EQ(supervisor_->take_late_parked(), 0);
  EXPECT_FALSE(supervisor_->running());
  EXPECT_FALSE(supervisor_->exec(call_, {}).ok());
}

}  // namespace
}  // namespace sandgate::providers
