// The controller against an in-memory cgroup backend and a recording actuator: the cgroups a
// run and its calls get, the limits on each, the run record, the outcome of a call and what
// an absent capability does. No kernel, no root.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "controller/controller.h"
#include "controller/fake_actuator.h"
#include "controller/fake_backend.h"
#include "core/files.h"
#include "core/test_temp_dir.h"
#include "tests/support/eventually.h"

namespace sandgate::controller {
namespace {

using sandgate::testing::eventually;
using testing::ActuatorCall;
using ::testing::Contains;
using ::testing::ElementsAre;
using testing::FakeBackend;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::RecordingActuator;

using namespace std::chrono_literals;

class ControllerFakeTest : public ::testing::Test {
 protected:
  ControllerFakeTest() {
    policy_ = default_policy();
    policy_.tenants["t1"] = TenantPolicy{300, GiB(8)};
    // The monitor samples once when a call starts and then not again within a test: the
    // outcome follows the final read, whatever the thread did.
    policy_.ladder.sample_interval = std::chrono::hours(1);
  }

  // Makes the controller; `backend_` points at its FakeBackend afterwards.
  std::unique_ptr<Controller> make(CgroupFeatures features = FakeBackend::all_features()) {
    return make_with([](ControllerOptions&) {}, features);
  }
  // The same, with `edit` changing the options last.
  std::unique_ptr<Controller> make_with(const std::function<void(ControllerOptions&)>& edit,
                                        CgroupFeatures features = FakeBackend::all_features()) {
    ControllerOptions o;
    o.paths.state_dir = tmp_ / "state";
    o.paths.id_range_dir = tmp_ / "id-ranges";
    o.paths.work_dir = tmp_ / "work";
    // No host pressure file: the ladder never sees host PSI, so it never freezes.
    o.paths.proc = tmp_ / "proc";
    o.paths.cgroup = tmp_ / "cgroup";
    o.root = "sgtest";
    o.policy = policy_;
    auto backend = std::make_unique<FakeBackend>(features, tmp_ / "no-such-cgroupfs");
    backend_ = backend.get();
    o.backend = std::move(backend);
    o.actuator = &actuator_;
    edit(o);
    paths_ = o.paths;
    auto c = Controller::create(std::move(o));
    EXPECT_TRUE(c.ok()) << c.error().message();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  std::string record_file(const std::string& run_id) const {
    return paths_.state_dir + "/runs/" + run_id + "-cgroups.json";
  }
  std::string record_text(const std::string& run_id) const {
    auto t = read_file(record_file(run_id));
    return t.ok() ? *t : std::string();
  }

  static ExecResult exited(int code) {
    ExecResult r;
    r.status = ExitStatus{true, code, 0};
    r.wall = 42ms;
    r.stdout_data = "hello\n";
    r.stdout_bytes = 6;
    return r;
  }

  sandgate::testing::TempDir tmp_;
  HostPaths paths_;
  Policy policy_;
  RecordingActuator actuator_;
  FakeBackend* backend_ = nullptr;
};

TEST_F(ControllerFakeTest, BeginRunMakesTenantRunAndMainWithTheirLimits) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  EXPECT_EQ((*run)->run_id(), "r1");
  EXPECT_EQ((*run)->tenant(), "t1");
  EXPECT_EQ((*run)->cgroup().rel, "sgtest/t1/r1");
  // And, made ahead by the reaper, the first call's cgroup (the run's spare).
  c->settle(**run);
  EXPECT_THAT(backend_->created(), ElementsAre("sgtest", "sgtest/t1", "sgtest/t1/r1",
                                               "sgtest/t1/r1/main", "sgtest/t1/r1/call-1"));
  EXPECT_TRUE(backend_->limits_of("sgtest/t1/r1/call-1").empty()) << "a spare has no grant yet";

  // The tenant: its weight and budget.
  auto tenant = backend_->limits_of("sgtest/t1");
  ASSERT_EQ(tenant.size(), 1u);
  Limits want_tenant;
  want_tenant.cpu_weight = 300;
  want_tenant.memory_max = GiB(8);
  EXPECT_EQ(tenant[0], want_tenant);
  // The run: the policy's ceiling.
  auto ceiling = backend_->limits_of("sgtest/t1/r1");
  ASSERT_EQ(ceiling.size(), 1u);
  EXPECT_EQ(ceiling[0], policy_.run.to_limits());
  EXPECT_TRUE(ceiling[0].memory_high.has_value());  // this layout has memory.high

  // main goes where the run's long-lived processes go.
  auto placement = (*run)->main_placement();
  ASSERT_EQ(placement.cgroup_dirs.size(), 1u);
  EXPECT_EQ(placement.cgroup_dirs[0], backend_->dir("sgtest/t1/r1/main"));

  // The run record names what was made, before it was made.
  std::string rec = record_text("r1");
  EXPECT_THAT(rec, HasSubstr(backend_->dir("sgtest/t1/r1/main")));
  EXPECT_THAT(rec, HasSubstr(backend_->dir("sgtest/t1/r1")));
  // No kernel action went through the actuator: limits at creation are the backend's.
  EXPECT_EQ(actuator_.size(), 0u);
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

TEST_F(ControllerFakeTest, DefaultTenantGetsDefaultWeightAndNoBudget) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("default", "r2");
  ASSERT_TRUE(run.ok()) << run.error().message();
  auto tenant = backend_->limits_of("sgtest/default");
  ASSERT_EQ(tenant.size(), 1u);
  EXPECT_EQ(tenant[0].cpu_weight, 100u);
  EXPECT_FALSE(tenant[0].memory_max.has_value());
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

TEST_F(ControllerFakeTest, UnknownTenantIsAnErrorListingTheKnownOnes) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("nope", "r1");
  ASSERT_FALSE(run.ok());
  std::string msg = run.error().message();
  EXPECT_THAT(msg, HasSubstr("nope"));
  EXPECT_THAT(msg, HasSubstr("default"));
  EXPECT_THAT(msg, HasSubstr("t1"));
  EXPECT_TRUE(backend_->created().empty());
  EXPECT_FALSE(std::filesystem::exists(record_file("r1")));
}

TEST_F(ControllerFakeTest, BeginCallMakesNumberedCallsWithTheIntentsGrant) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();

  auto declared = c->begin_call(**run, "test", {"./run-tests.sh"});
  ASSERT_TRUE(declared.ok()) << declared.error().message();
  EXPECT_EQ((*declared)->id(), "call-1");
  EXPECT_EQ((*declared)->cgroup().rel, "sgtest/t1/r1/call-1");
  EXPECT_EQ((*declared)->intent().intent, "test");
  EXPECT_FALSE((*declared)->intent().inferred);
  EXPECT_EQ((*declared)->grant(), policy_.intents.at("test"));
  EXPECT_EQ((*declared)->timeout(), policy_.intents.at("test").timeout);
  auto l1 = backend_->limits_of("sgtest/t1/r1/call-1");
  ASSERT_EQ(l1.size(), 1u);
  EXPECT_EQ(l1[0], policy_.intents.at("test").to_limits());
  ASSERT_EQ((*declared)->placement().cgroup_dirs.size(), 1u);
  EXPECT_EQ((*declared)->placement().cgroup_dirs[0], backend_->dir("sgtest/t1/r1/call-1"));

  auto inferred = c->begin_call(**run, std::nullopt, {"make", "-j4"});
  ASSERT_TRUE(inferred.ok()) << inferred.error().message();
  EXPECT_EQ((*inferred)->id(), "call-2");
  EXPECT_EQ((*inferred)->cgroup().rel, "sgtest/t1/r1/call-2");
  EXPECT_EQ((*inferred)->intent().intent, "compile");
  EXPECT_TRUE((*inferred)->intent().inferred);
  auto l2 = backend_->limits_of("sgtest/t1/r1/call-2");
  ASSERT_EQ(l2.size(), 1u);
  EXPECT_EQ(l2[0], policy_.intents.at("compile").to_limits());
  EXPECT_THAT(record_text("r1"), HasSubstr(backend_->dir("sgtest/t1/r1/call-2")));

  (void)c->end_call(std::move(declared).value(), exited(0));
  (void)c->end_call(std::move(inferred).value(), exited(0));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

// A microVM's call (CallHost::kGuest): its intent and grant as any call's, numbered as any, but
// no host cgroup is made, granted or watched (its processes are the guest's), the spare
// begin_run made ahead is removed, and the outcome's observation is the guest's.
TEST_F(ControllerFakeTest, AGuestsCallHasItsGrantButNoHostCgroup) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  c->settle(**run);
  ASSERT_TRUE(backend_->exists("sgtest/t1/r1/call-1")) << "begin_run made no spare to test with";

  auto first = c->begin_call(**run, "test", {"pytest"}, CallHost::kGuest);
  ASSERT_TRUE(first.ok()) << first.error().message();
  EXPECT_EQ((*first)->id(), "call-1");
  EXPECT_EQ((*first)->grant(), policy_.intents.at("test"));
  EXPECT_TRUE((*first)->cgroup().dirs.empty());
  EXPECT_TRUE((*first)->placement().cgroup_dirs.empty());
  c->settle(**run);
  EXPECT_FALSE(backend_->exists("sgtest/t1/r1/call-1")) << "the unused spare was kept";

  CallObservation inside;
  inside.peaks.memory_bytes = MiB(70).value;
  inside.oom_kills = 1;
  inside.samples = 9;
  auto o = c->end_call(std::move(first).value(), exited(0), inside);
  EXPECT_EQ(o.call_id, "call-1");
  EXPECT_EQ(o.observed.peaks.memory_bytes, MiB(70).value);
  EXPECT_EQ(o.observed.oom_kills, 1u);
  EXPECT_EQ(o.observed.samples, 9);

  auto second = c->begin_call(**run, std::nullopt, {"make"}, CallHost::kGuest);
  ASSERT_TRUE(second.ok()) << second.error().message();
  EXPECT_EQ((*second)->id(), "call-2");
  EXPECT_EQ((*second)->intent().intent, "compile");
  auto none_back = c->end_call(std::move(second).value(), exited(0));
  EXPECT_EQ(none_back.observed.samples, 0) << "nothing on the host to observe";
  c->settle(**run);
  for (const auto& rel : backend_->created())
    EXPECT_THAT(rel, Not(HasSubstr("call-2"))) << "a host cgroup was made for a guest's call";
  for (const auto& [rel, limits] : backend_->limit_calls())
    EXPECT_THAT(rel, Not(HasSubstr("call-"))) << "a grant was written on the host";
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

TEST_F(ControllerFakeTest, UndeclaredIntentIsAnErrorAndMakesNothing) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  auto call = c->begin_call(**run, "fly", {"true"});
  ASSERT_FALSE(call.ok());
  EXPECT_THAT(call.error().message(), HasSubstr("fly"));
  // The run's spare (call-1, made ahead by the reaper) may exist; the refused call must not
  // have taken it: no grant was written to it.
  c->settle(**run);
  EXPECT_TRUE(backend_->limits_of("sgtest/t1/r1/call-1").empty());
  EXPECT_FALSE(backend_->exists("sgtest/t1/r1/call-2"));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

TEST_F(ControllerFakeTest, StaticPolicyGrantsNoPerCallLimits) {
  Grant ceiling;
  ceiling.memory_max = GiB(2);
  ceiling.pids_max = 256;
  policy_ = static_policy(ceiling);
  policy_.ladder.sample_interval = std::chrono::hours(1);
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("default", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  EXPECT_EQ(backend_->limits_of("sgtest/default/r1").at(0), ceiling.to_limits());

  auto call = c->begin_call(**run, "compile", {"make", "-j4"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  EXPECT_FALSE((*call)->grant().memory_max.has_value());
  EXPECT_FALSE((*call)->grant().cpu_cores.has_value());
  EXPECT_FALSE((*call)->grant().pids_max.has_value());
  EXPECT_EQ((*call)->timeout(), default_policy().intents.at("compile").timeout);
  auto l = backend_->limits_of("sgtest/default/r1/call-1");
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0], Limits{});
  (void)c->end_call(std::move(call).value(), exited(0));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

// A shared limit above the call (the tenant's budget here) with less room left than the
// call's grant: the call's cgroup gets the room, less a margin for the run's other processes
// (a 32nd of the limit, at least 8MiB), so that an OOM stays inside the call's own cgroup.
// Page cache nothing maps counts as room: the kernel reclaims it before it kills.
TEST_F(ControllerFakeTest, ACallsLimitIsLoweredToTheRoomItsBudgetHasLeft) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  backend_->set_room("sgtest/t1", MemoryRoom{GiB(8).value, GiB(7).value, MiB(200).value});
  auto call = c->begin_call(**run, "compile", {"make", "-j4"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  // 8GiB - (7GiB - 200MiB) = 1224MiB free, less 256MiB (8GiB / 32).
  auto l = backend_->limits_of("sgtest/t1/r1/call-1");
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].memory_max, MiB(968));
  EXPECT_EQ(l[0].memory_high, MiB(968));  // the grant's 1.5GiB would be above it
  EXPECT_EQ(l[0].cpu_cores,
            default_policy().intents.at("compile").cpu_cores);  // the rest as granted
  EXPECT_EQ((*call)->grant().memory_max, GiB(2));  // the intent's grant is still what it was

  Usage oom;
  oom.memory_peak = MiB(968).value;
  oom.memory_events.oom_kill = 1;
  backend_->script("sgtest/t1/r1/call-1", {oom});
  CallOutcome o = c->end_call(std::move(call).value(), exited(137));
  ASSERT_TRUE(o.memory_lowered);
  EXPECT_EQ(*o.memory_lowered, (MemoryLowered{MiB(968), "sgtest/t1"}));
  EXPECT_EQ(o.termination, Termination::kMemoryLimit);
  EXPECT_THAT(o.reason, HasSubstr("968MiB left in sgtest/t1's shared memory limit"));
  EXPECT_THAT(o.reason, HasSubstr("its grant: 2GiB"));
  Json j = to_json(o, false);
  EXPECT_EQ(j["memory_lowered"]["limit_bytes"], MiB(968).value);
  EXPECT_EQ(j["memory_lowered"]["within"], "sgtest/t1");
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

// The tighter of the run's ceiling and the budget: here the run's.
TEST_F(ControllerFakeTest, TheRunCeilingsRoomLowersTheLimitWhenItIsTheTighter) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  backend_->set_room("sgtest/t1", MemoryRoom{GiB(8).value, GiB(7).value, 0});
  backend_->set_room("sgtest/t1/r1", MemoryRoom{GiB(4).value, MiB(3584).value, 0});
  auto call = c->begin_call(**run, "compile", {"make"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  // The run's: 512MiB free, less 128MiB (4GiB / 32); the tenant's 1GiB - 256MiB is looser.
  auto l = backend_->limits_of("sgtest/t1/r1/call-1");
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].memory_max, MiB(384));
  CallOutcome o = c->end_call(std::move(call).value(), exited(0));
  EXPECT_EQ(o.memory_lowered, (MemoryLowered{MiB(384), "sgtest/t1/r1"}));
  EXPECT_EQ(o.termination, Termination::kExited);
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

// A grant that fits is written as it is, and memory.stat is not read: the limit and the
// charge say so.
TEST_F(ControllerFakeTest, AGrantThatFitsItsBudgetsRoomIsWrittenAsItIs) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  backend_->set_room("sgtest/t1", MemoryRoom{GiB(8).value, GiB(1).value, GiB(1).value});
  backend_->set_room("sgtest/t1/r1", MemoryRoom{GiB(4).value, MiB(100).value, 0});
  auto call = c->begin_call(**run, "compile", {"make"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  auto l = backend_->limits_of("sgtest/t1/r1/call-1");
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].memory_max, GiB(2));
  EXPECT_EQ(backend_->room_reads("sgtest/t1", false), 1);
  EXPECT_EQ(backend_->room_reads("sgtest/t1", true), 0);
  EXPECT_EQ(backend_->room_reads("sgtest/t1/r1", true), 0);
  CallOutcome o = c->end_call(std::move(call).value(), exited(0));
  EXPECT_FALSE(o.memory_lowered);
  EXPECT_FALSE(to_json(o, false).contains("memory_lowered"));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

// 6GiB charged of 8GiB leaves less than the 2GiB grant and its 256MiB margin, but 2GiB of it
// is page cache nothing maps: read from memory.stat, it makes room.
TEST_F(ControllerFakeTest, PageCacheNothingMapsCountsAsRoom) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  backend_->set_room("sgtest/t1", MemoryRoom{GiB(8).value, GiB(6).value, GiB(2).value});
  auto call = c->begin_call(**run, "compile", {"make"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  EXPECT_EQ(backend_->room_reads("sgtest/t1", true), 1);
  EXPECT_EQ(backend_->limits_of("sgtest/t1/r1/call-1").at(0).memory_max, GiB(2));
  CallOutcome o = c->end_call(std::move(call).value(), exited(0));
  EXPECT_FALSE(o.memory_lowered);
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

// What the controller's running calls hold counts as room: calls contend for a budget through
// the budget rule (all but the largest frozen), not through limits set by who came first.
TEST_F(ControllerFakeTest, WhatRunningCallsHoldCountsAsRoomForTheNext) {
  policy_.ladder.sample_interval = 5ms;
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  backend_->set_room("sgtest/t1", MemoryRoom{GiB(8).value, GiB(7).value, 0});
  auto first = c->begin_call(**run, "search", {"rg", "x"});
  ASSERT_TRUE(first.ok()) << first.error().message();
  Usage big;
  big.memory_current = MiB(3072).value;
  backend_->script("sgtest/t1/r1/call-1", {big});
  // A read that began after the script: the monitor holds its lock until that sample is kept.
  const int before = backend_->reads("sgtest/t1/r1/call-1");
  eventually([&] { return backend_->reads("sgtest/t1/r1/call-1") > before; }, 10s, 5ms);
  ASSERT_GT(backend_->reads("sgtest/t1/r1/call-1"), before) << "the monitor never sampled it";
  // 1GiB free, plus the first call's 3GiB: the 2GiB grant fits.
  auto second = c->begin_call(**run, "compile", {"make"});
  ASSERT_TRUE(second.ok()) << second.error().message();
  EXPECT_EQ(backend_->limits_of("sgtest/t1/r1/call-2").at(0).memory_max, GiB(2));
  EXPECT_FALSE(c->end_call(std::move(second).value(), exited(0)).memory_lowered);
  (void)c->end_call(std::move(first).value(), exited(0));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

// Static mode has one limit, the run's, and no per-call limit to lower.
TEST_F(ControllerFakeTest, AStaticPolicyNeverLowersACallsLimit) {
  Grant ceiling;
  ceiling.memory_max = GiB(2);
  policy_ = static_policy(ceiling);
  policy_.tenants["t1"] = TenantPolicy{300, GiB(8)};
  policy_.ladder.sample_interval = std::chrono::hours(1);
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  backend_->set_room("sgtest/t1", MemoryRoom{GiB(8).value, GiB(8).value, 0});
  backend_->set_room("sgtest/t1/r1", MemoryRoom{GiB(2).value, GiB(2).value, 0});
  auto call = c->begin_call(**run, "compile", {"make"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  EXPECT_EQ(backend_->limits_of("sgtest/t1/r1/call-1").at(0), Limits{});
  EXPECT_FALSE(c->end_call(std::move(call).value(), exited(0)).memory_lowered);
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

TEST_F(ControllerFakeTest, EndCallRevokesTheGrantAndClassifiesFromTheFinalRead) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  auto call = c->begin_call(**run, "compile", {"make", "-j4"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  std::string rel = (*call)->cgroup().rel;
  std::string dir = backend_->dir(rel);

  // The kernel OOM-killed a process in the call; the shell reports it as 137.
  Usage u;
  u.memory_current = 0;
  u.memory_peak = GiB(2).value;
  u.pids_current = 0;
  u.memory_events.oom_kill = 1;
  backend_->script(rel, {u});

  CallOutcome o = c->end_call(std::move(call).value(), exited(137));
  EXPECT_EQ(o.call_id, "call-1");
  EXPECT_EQ(o.argv, (std::vector<std::string>{"make", "-j4"}));
  EXPECT_EQ(o.intent.intent, "compile");
  EXPECT_EQ(o.termination, Termination::kMemoryLimit);
  EXPECT_EQ(o.retry, RetryAdvice::kRetryWithSmallerScope);
  EXPECT_EQ(o.observed.oom_kills, 1u);
  EXPECT_EQ(o.observed.peaks.memory_bytes, GiB(2).value);
  ASSERT_FALSE(o.observed.actions.empty());
  EXPECT_EQ(o.observed.actions.back().action, "oom_kill");
  EXPECT_EQ(o.exec.wall, 42ms);  // the provider's result, carried whole
  EXPECT_EQ(o.exec.stdout_data, "hello\n");
  EXPECT_EQ(o.exec.stdout_bytes, 6u);
  EXPECT_GE(backend_->reads(rel), 1);

  // Revoked: the call's cgroup is removed (by the reaper, after the outcome) and no longer in
  // the run record.
  c->settle(**run);
  EXPECT_THAT(backend_->removed(), Contains(rel));
  EXPECT_FALSE(backend_->exists(rel));
  EXPECT_THAT(record_text("r1"), Not(HasSubstr(dir)));
  EXPECT_TRUE(backend_->exists("sgtest/t1/r1"));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

// A static policy's one limit is the run's: a kill the kernel counted at the run while the call
// ran (and not in the call's own cgroup) is still the call's memory limit. The run's counter is
// read before the call and after it, through the run's reader kept open.
TEST_F(ControllerFakeTest, AKillCountedAtTheRunWhileTheCallRanIsItsMemoryLimit) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  Usage before, after;
  before.memory_events.oom_kill = 2;  // kills of earlier calls
  after.memory_events.oom_kill = 3;
  backend_->script("sgtest/t1/r1", {before, after});
  auto call = c->begin_call(**run, "test", {"pytest"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  ExecResult killed = exited(0);
  killed.status = ExitStatus{false, 0, 9};
  CallOutcome o = c->end_call(std::move(call).value(), killed);
  EXPECT_EQ(o.observed.oom_kills, 0u);
  EXPECT_EQ(o.observed.run_oom_kills, 1u);
  EXPECT_EQ(o.termination, Termination::kMemoryLimit);
  EXPECT_THAT(o.reason, HasSubstr("shared memory limit"));
  c->settle(**run);
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

// A microVM's call lived in the guest: what the guest's ladder saw replaces the host's view of
// the call's (empty) host cgroup, but the run's OOM kills stay the host's own count.
TEST_F(ControllerFakeTest, EndCallTakesWhatTheGuestObservedAndStillRevokesTheHostCgroup) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  auto call = c->begin_call(**run, "test", {"pytest"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  std::string rel = (*call)->cgroup().rel;
  Usage run_usage;
  run_usage.memory_events.oom_kill = 0;
  backend_->script("sgtest/t1/r1", {run_usage});
  CallObservation inside;
  inside.oom_kills = 1;
  inside.peaks.memory_bytes = MiB(200).value;
  inside.cpu_throttled_us = 777;
  inside.run_oom_kills = 3;  // not the guest's to say
  ExecResult killed = exited(0);
  killed.status = ExitStatus{false, 0, 9};
  CallOutcome o = c->end_call(std::move(call).value(), killed, inside);
  EXPECT_EQ(o.termination, Termination::kMemoryLimit);
  EXPECT_EQ(o.observed.oom_kills, 1u);
  EXPECT_EQ(o.observed.peaks.memory_bytes, MiB(200).value);
  EXPECT_EQ(o.observed.cpu_throttled_us, 777u);
  EXPECT_EQ(o.observed.run_oom_kills, 0u);
  c->settle(**run);
  EXPECT_FALSE(backend_->exists(rel)) << "the host's call cgroup is revoked all the same";
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

TEST_F(ControllerFakeTest, EndCallOfACleanExitIsExited) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  auto call = c->begin_call(**run, "search", {"rg", "foo"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  Usage u;
  u.memory_current = MiB(20).value;
  u.pids_current = 1;
  backend_->script((*call)->cgroup().rel, {u});
  CallOutcome o = c->end_call(std::move(call).value(), exited(0));
  EXPECT_EQ(o.termination, Termination::kExited);
  EXPECT_EQ(o.retry, RetryAdvice::kNoRetry);
  EXPECT_TRUE(o.observed.actions.empty());
  EXPECT_EQ(o.observed.peaks.memory_bytes, MiB(20).value);
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

TEST_F(ControllerFakeTest, EndRunRemovesTheRunAndItsRecord) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  auto call = c->begin_call(**run, "edit", {"touch", "x"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  (void)c->end_call(std::move(call).value(), exited(0));
  ASSERT_TRUE(std::filesystem::exists(record_file("r1")));

  Status s = c->end_run(std::move(run).value());
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_THAT(backend_->removed(), Contains("sgtest/t1/r1"));
  EXPECT_FALSE(backend_->exists("sgtest/t1/r1"));
  EXPECT_FALSE(backend_->exists("sgtest/t1/r1/main"));
  EXPECT_FALSE(std::filesystem::exists(record_file("r1")));
}

// A run's pressure trigger is made by the monitor once one of its calls has run for the
// trigger's stall, on the run's cgroup, and only then: a PSI trigger's teardown waits for an RCU
// grace period (5-16 ms here), which a run of short calls (a cold `sandgate exec`) paid at its
// end for a trigger that could not have fired.
TEST_F(ControllerFakeTest, ARunsPressureTriggerIsMadeOnlyOnceACallHasRunForItsStall) {
  policy_.ladder.psi_trigger_stall = 1s;
  auto c = make();
  ASSERT_TRUE(c);
  backend_->set_pressure_triggers(true);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  auto short_call = c->begin_call(**run, "edit", {"touch", "x"});
  ASSERT_TRUE(short_call.ok()) << short_call.error().message();
  (void)c->end_call(std::move(short_call).value(), exited(0));
  std::this_thread::sleep_for(policy_.ladder.psi_trigger_stall + 300ms);
  EXPECT_TRUE(backend_->triggers_made().empty()) << "made for a call that ended at once";

  const auto start = std::chrono::steady_clock::now();
  auto long_call = c->begin_call(**run, "test", {"./run-tests.sh"});
  ASSERT_TRUE(long_call.ok()) << long_call.error().message();
  eventually([&] { return !backend_->triggers_made().empty(); }, 10s, 5ms);
  EXPECT_GE(std::chrono::steady_clock::now() - start, policy_.ladder.psi_trigger_stall);
  EXPECT_EQ(backend_->triggers_made(), std::vector<std::string>{"sgtest/t1/r1"});
  (void)c->end_call(std::move(long_call).value(), exited(0));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

// A run's first moves (its supervisor's) wait for a grace period after a quiet spell; the
// controller starts that wait as begin_run ends, on a thread of its own, once per run. (That
// it is asked after the run's mkdirs, which would wait with it, the thread's timing cannot
// show here; begin_run's step clock does: its tenant step.)
TEST_F(ControllerFakeTest, BeginRunPrimesTheAttachOnce) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  c->settle(**run);  // the prime is the run's first reaper job
  auto primes = backend_->primes();
  ASSERT_EQ(primes.size(), 1u) << "begin_run asked for no prime, or more than one";
  // After the run's mkdirs (which would wait behind it), before the first call's spare.
  EXPECT_THAT(primes[0], Contains("sgtest/t1/r1"));
  EXPECT_THAT(primes[0], Contains("sgtest/t1/r1/main"));
  EXPECT_THAT(primes[0], Not(Contains("sgtest/t1/r1/call-1")));
  EXPECT_TRUE(backend_->exists("sgtest/t1/r1/call-1")) << "the spare is made after it";
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

// The next call's spare is made once a call has ended, not while it runs: on 2 cores the
// reaper's mkdirs (0.7-0.9 ms here) competed with the call's own processes (controller_bench,
// BM_CallTruePaired: 1.5 -> 1.2 ms added per call).
TEST_F(ControllerFakeTest, EachCallTakesTheSpareMadeAheadAndTheNextOneIsMadeOnceItEnds) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  c->settle(**run);
  // The spare: made and recorded before any call, without a grant.
  ASSERT_TRUE(backend_->exists("sgtest/t1/r1/call-1"));
  EXPECT_THAT(record_text("r1"), HasSubstr(backend_->dir("sgtest/t1/r1/call-1")));
  EXPECT_TRUE(backend_->limits_of("sgtest/t1/r1/call-1").empty());

  for (int n = 1; n <= 3; ++n) {
    std::string rel = "sgtest/t1/r1/call-" + std::to_string(n);
    std::string next = "sgtest/t1/r1/call-" + std::to_string(n + 1);
    size_t made_before = backend_->created().size();
    auto call = c->begin_call(**run, "test", {"./run-tests.sh"});
    ASSERT_TRUE(call.ok()) << call.error().message();
    EXPECT_EQ((*call)->id(), "call-" + std::to_string(n));
    EXPECT_EQ((*call)->cgroup().rel, rel);
    // The grant is written into the spare at begin_call, once.
    EXPECT_THAT(backend_->limits_of(rel), ElementsAre(policy_.intents.at("test").to_limits()));
    c->settle(**run);
    EXPECT_EQ(backend_->created().size(), made_before) << "made while call " << n << " ran";
    (void)c->end_call(std::move(call).value(), exited(0));
    c->settle(**run);
    // The next call's spare was made once this one ended; nothing else was.
    auto created = backend_->created();
    ASSERT_EQ(created.size(), made_before + 1) << "call " << n;
    EXPECT_EQ(created.back(), next);
    EXPECT_TRUE(backend_->limits_of(next).empty());
    EXPECT_THAT(record_text("r1"), HasSubstr(backend_->dir(next)));
    EXPECT_FALSE(backend_->exists(rel));
    EXPECT_THAT(record_text("r1"), Not(HasSubstr(backend_->dir(rel) + "\"")));
  }
  // A call announced as the run's last (a one-call run's, Controller::last_call) takes the
  // spare as any call, and no spare is made after it: no cgroup for a call that will not come.
  c->last_call(**run);
  auto last = c->begin_call(**run, "test", {"./run-tests.sh"});
  ASSERT_TRUE(last.ok()) << last.error().message();
  EXPECT_EQ((*last)->cgroup().rel, "sgtest/t1/r1/call-4") << "the last call takes the spare";
  size_t made_before = backend_->created().size();
  (void)c->end_call(std::move(last).value(), exited(0));
  c->settle(**run);
  EXPECT_EQ(backend_->created().size(), made_before) << "a spare was made after the last call";
  EXPECT_FALSE(backend_->exists("sgtest/t1/r1/call-5"));
  EXPECT_FALSE(backend_->exists("sgtest/t1/r1/call-4"));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
  EXPECT_FALSE(std::filesystem::exists(record_file("r1")));
}

// The spare's counter files are opened when the spare is made, off the call's path, and that
// reader goes with the call to the monitor and back: the call's last read (end_call) is
// through it, not a read of every file by path (0.15-0.3 ms on this VM, now 0.05).
TEST_F(ControllerFakeTest, TheSparesReaderIsPreparedAheadAndReadsTheCallsLastCounters) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  c->settle(**run);
  EXPECT_THAT(backend_->ops(), Contains("prepare sgtest/t1/r1/call-1"));
  auto call = c->begin_call(**run, "test", {"./run-tests.sh"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  auto through_reader = [&] {
    int n = 0;
    for (const auto& op : backend_->ops())
      if (op == "read sgtest/t1/r1/call-1 prepared") ++n;
    return n;
  };
  const int reads_before = backend_->reads("sgtest/t1/r1/call-1");
  const int through_before = through_reader();
  (void)c->end_call(std::move(call).value(), exited(0));
  // Every read of the call's counters (the monitor's, if it sampled, and end_call's) went
  // through the prepared reader: none by path (each reader read is one read_usage here).
  const int reads = backend_->reads("sgtest/t1/r1/call-1") - reads_before;
  EXPECT_GE(reads, 1) << "end_call read nothing";
  EXPECT_EQ(through_reader() - through_before, reads);
  // The next spare's, prepared once the call ended.
  c->settle(**run);
  EXPECT_THAT(backend_->ops(), Contains("prepare sgtest/t1/r1/call-2"));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

// The run's parked process goes into the spare off the call's path, and the call that takes
// the spare is told it is there (Placement::placed_pid); one the backend could not move is not
// named, so the provider places the call's process itself.
TEST_F(ControllerFakeTest, AParkedProcessIsPlacedInTheSpareAheadAndNamedToTheCallThatTakesIt) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  c->adopt_parked(**run, 4242);
  c->settle(**run);
  EXPECT_THAT(backend_->ops(), Contains("attach sgtest/t1/r1/call-1 4242"));
  auto call = c->begin_call(**run, "test", {"./run-tests.sh"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  EXPECT_EQ((*call)->placement().placed_pid, 4242);
  // The grant is written into the cgroup the parked process is in, before the call starts.
  EXPECT_THAT(backend_->limits_of("sgtest/t1/r1/call-1"),
              ElementsAre(policy_.intents.at("test").to_limits()));
  (void)c->end_call(std::move(call).value(), exited(0));
  c->settle(**run);

  // Gone before the reaper got to it: the next call is not told of it.
  backend_->set_attach_error(true);
  c->adopt_parked(**run, 4343);
  c->settle(**run);
  EXPECT_THAT(backend_->ops(), Contains("attach sgtest/t1/r1/call-2 4343"));
  auto next = c->begin_call(**run, "test", {"./run-tests.sh"});
  ASSERT_TRUE(next.ok()) << next.error().message();
  EXPECT_EQ((*next)->placement().placed_pid, 0);
  (void)c->end_call(std::move(next).value(), exited(0));

  // A parked process placed in a spare that a call then did not take is not named to a later
  // call's other cgroup: each spare is named only with what went into it.
  backend_->set_attach_error(false);
  c->settle(**run);
  auto third = c->begin_call(**run, "test", {"./run-tests.sh"});
  ASSERT_TRUE(third.ok());
  EXPECT_EQ((*third)->placement().placed_pid, 0);
  (void)c->end_call(std::move(third).value(), exited(0));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

// A call that came before its parked process was placed leaves it parked, and the provider
// reports it again after that call. By the time the second report is handled the process may
// be running the next call (placed by the first report): it is never moved a second time. It
// was, and a running call left its cgroup for the spare mid-call: its memory was charged to a
// cgroup nobody watched, and its grant no longer held it.
TEST_F(ControllerFakeTest, AParkedProcessIsPlacedOnceEvenWhenReportedAgain) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  c->adopt_parked(**run, 4242);
  c->settle(**run);
  auto call = c->begin_call(**run, "test", {"./run-tests.sh"});  // runs in 4242
  ASSERT_TRUE(call.ok()) << call.error().message();
  EXPECT_EQ((*call)->placement().placed_pid, 4242);
  c->adopt_parked(**run, 4242);  // the late second report
  c->settle(**run);
  int attaches = 0;
  for (const auto& op : backend_->ops())
    if (op.find("attach ") == 0 && op.find(" 4242") != std::string::npos) ++attaches;
  EXPECT_EQ(attaches, 1) << "the running call's process was moved again";
  (void)c->end_call(std::move(call).value(), exited(0));
  auto next = c->begin_call(**run, "test", {"./run-tests.sh"});
  ASSERT_TRUE(next.ok());
  EXPECT_EQ((*next)->placement().placed_pid, 0) << "named a process that is another call's";
  (void)c->end_call(std::move(next).value(), exited(0));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

// The reaper places the next call's parked process while holding the run's lock, and that
// attach is the kernel's slow step (an RCU grace period per hierarchy on v1). A call that ends
// meanwhile only queues its cgroup's removal: it must not wait for the placement (it did, and
// that wait was 4 of the 4.6 ms end_call took on this VM).
TEST_F(ControllerFakeTest, AnEndingCallDoesNotWaitForTheParkedProcessBeingPlaced) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  auto call = c->begin_call(**run, "test", {"./run-tests.sh"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  c->settle(**run);  // the spare exists

  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  backend_->set_attach_hook([&, released](const std::string&, pid_t) {
    entered.set_value();
    released.wait();
  });
  c->adopt_parked(**run, 4242);
  entered.get_future().wait();  // the reaper is inside the attach, holding the run's lock

  auto ended = std::async(std::launch::async,
                          [&] { return c->end_call(std::move(call).value(), exited(0)); });
  bool returned = ended.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  release.set_value();
  EXPECT_TRUE(returned) << "end_call waited for the parked process's placement";
  EXPECT_EQ(ended.get().termination, Termination::kExited);
  c->settle(**run);
  backend_->set_attach_hook(nullptr);
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

TEST_F(ControllerFakeTest, ACallWithProcessesLeftIsRemovedBeforeItsOutcomeIsReturned) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  auto call = c->begin_call(**run, "test", {"daemonize"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  std::string rel = (*call)->cgroup().rel;
  backend_->set_procs(rel, {4242});  // a background process the call left behind
  (void)c->end_call(std::move(call).value(), exited(0));
  // Removed (its processes killed) before end_call returned, not later by the reaper.
  EXPECT_THAT(backend_->removed(), Contains(rel));
  EXPECT_FALSE(backend_->exists(rel));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

// The last read's pids.current says whether the call left a task: zero (the usual case) needs
// no listing of cgroup.procs on the call's path; a task left is listed and killed at once.
TEST_F(ControllerFakeTest, ACallsLastReadOfNoTasksSparesTheListingAndATaskLeftIsKilledAtOnce) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  Usage none, one;
  none.pids_counted = one.pids_counted = true;
  one.pids_current = 1;

  auto call = c->begin_call(**run, "test", {"true"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  const std::string quiet = (*call)->cgroup().rel;
  backend_->script(quiet, {none});
  (void)c->end_call(std::move(call).value(), exited(0));
  EXPECT_THAT(backend_->ops(), Not(Contains("procs " + quiet)));
  c->settle(**run);
  EXPECT_FALSE(backend_->exists(quiet)) << "the reaper did not remove the call's cgroup";

  call = c->begin_call(**run, "test", {"daemonize"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  const std::string busy = (*call)->cgroup().rel;
  backend_->script(busy, {one});
  backend_->set_procs(busy, {4242});
  (void)c->end_call(std::move(call).value(), exited(0));
  EXPECT_THAT(backend_->ops(), Contains("procs " + busy));
  EXPECT_THAT(backend_->removed(), Contains(busy));  // before end_call returned
  EXPECT_FALSE(backend_->exists(busy));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

TEST_F(ControllerFakeTest, EndRunWaitsForTheReaperAndNothingOfTheRunOutlivesIt) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  for (int n = 0; n < 5; ++n) {
    auto call = c->begin_call(**run, "edit", {"touch", "x"});
    ASSERT_TRUE(call.ok()) << call.error().message();
    (void)c->end_call(std::move(call).value(), exited(0));
  }
  // No settle: end_run itself waits for the removals and spares still queued.
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
  for (const auto& rel : backend_->created()) {
    if (!rel.starts_with("sgtest/t1/r1")) continue;
    EXPECT_FALSE(backend_->exists(rel)) << rel << " left";
  }
  EXPECT_FALSE(std::filesystem::exists(record_file("r1")));
}

TEST_F(ControllerFakeTest, WithoutMemoryHighItIsReportedAbsentAndNeverApplied) {
  CgroupFeatures f = FakeBackend::all_features();
  f.memory_high = false;  // a v1 memory controller
  auto c = make(f);
  ASSERT_TRUE(c);
  EXPECT_THAT(c->absent_capabilities(), Contains(HasSubstr("memory.high")));

  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  auto ceiling = backend_->limits_of("sgtest/t1/r1");
  ASSERT_EQ(ceiling.size(), 1u);
  EXPECT_FALSE(ceiling[0].memory_high.has_value());
  EXPECT_EQ(ceiling[0].memory_max, policy_.run.memory_max);

  auto call = c->begin_call(**run, "compile", {"make"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  // The grant still says what the policy meant; the cgroup gets what the layout can do.
  EXPECT_TRUE((*call)->grant().memory_high.has_value());
  auto l = backend_->limits_of("sgtest/t1/r1/call-1");
  ASSERT_EQ(l.size(), 1u);
  Limits want = policy_.intents.at("compile").to_limits();
  want.memory_high.reset();
  EXPECT_EQ(l[0], want);
  (void)c->end_call(std::move(call).value(), exited(0));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

TEST_F(ControllerFakeTest, IoGrantsApplyToTheRunsDeviceOnceItIsKnown) {
  policy_.run.io_read_bps = MiB(200);
  policy_.intents["install"].io_read_bps = MiB(50);
  policy_.intents["install"].io_write_bps = MiB(20);
  auto c = make();
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->absent_capabilities().empty());
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  // No device yet: the run ceiling is set without io.
  auto ceiling = backend_->limits_of("sgtest/t1/r1");
  ASSERT_EQ(ceiling.size(), 1u);
  EXPECT_FALSE(ceiling[0].io_read_bps);
  ASSERT_TRUE(c->set_io_device(**run, "254:0").ok());
  EXPECT_EQ((*run)->io_device(), "254:0");
  ceiling = backend_->limits_of("sgtest/t1/r1");
  ASSERT_EQ(ceiling.size(), 2u);
  Limits io;
  io.io_read_bps = 209715200;
  io.io_device = "254:0";
  EXPECT_EQ(ceiling[1], io);

  auto call = c->begin_call(**run, "install", {"pip", "install", "x"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  auto l = backend_->limits_of("sgtest/t1/r1/call-1");
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].io_read_bps, 52428800u);
  EXPECT_EQ(l[0].io_write_bps, 20971520u);
  EXPECT_EQ(l[0].io_device, "254:0");
  (void)c->end_call(std::move(call).value(), exited(0));
  // A grant without io gets no device either.
  auto edit = c->begin_call(**run, "edit", {"touch", "x"});
  ASSERT_TRUE(edit.ok()) << edit.error().message();
  auto e = backend_->limits_of("sgtest/t1/r1/call-2");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_FALSE(e[0].io_read_bps);
  EXPECT_EQ(e[0].io_device, "");
  (void)c->end_call(std::move(edit).value(), exited(0));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

TEST_F(ControllerFakeTest, IoGrantsAreDroppedWithoutAThrottlableDevice) {
  policy_.intents["install"].io_write_bps = MiB(20);
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  ASSERT_TRUE(c->set_io_device(**run, "").ok());  // a tmpfs workspace
  auto call = c->begin_call(**run, "install", {"pip", "install", "x"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  auto l = backend_->limits_of("sgtest/t1/r1/call-1");
  ASSERT_EQ(l.size(), 1u);
  EXPECT_FALSE(l[0].io_write_bps);
  EXPECT_EQ(l[0].memory_max, policy_.intents.at("install").memory_max);
  (void)c->end_call(std::move(call).value(), exited(0));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

TEST_F(ControllerFakeTest, WithoutIoLimitsIoGrantsAreReportedAbsentAndNeverApplied) {
  policy_.intents["install"].io_read_bps = MiB(50);
  CgroupFeatures f = FakeBackend::all_features();
  f.io_limits = false;
  auto c = make(f);
  ASSERT_TRUE(c);
  EXPECT_THAT(c->absent_capabilities(), Contains(HasSubstr("io limits")));
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  ASSERT_TRUE(c->set_io_device(**run, "254:0").ok());
  auto call = c->begin_call(**run, "install", {"pip", "install", "x"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  auto l = backend_->limits_of("sgtest/t1/r1/call-1");
  ASSERT_EQ(l.size(), 1u);
  EXPECT_FALSE(l[0].io_read_bps);
  (void)c->end_call(std::move(call).value(), exited(0));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

TEST_F(ControllerFakeTest, WithEveryCapabilityNothingIsAbsent) {
  auto c = make();
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->absent_capabilities().empty());
}

TEST_F(ControllerFakeTest, AbsentFreezeAndKillAreReported) {
  CgroupFeatures f = FakeBackend::all_features();
  f.freeze = false;
  f.atomic_kill = false;
  f.psi = false;
  auto c = make(f);
  ASSERT_TRUE(c);
  EXPECT_THAT(c->absent_capabilities(), Contains(HasSubstr("freeze")));
  EXPECT_THAT(c->absent_capabilities(), Contains(HasSubstr("atomic kill")));
  EXPECT_THAT(c->absent_capabilities(), Contains(HasSubstr("PSI")));
  EXPECT_THAT(c->absent_capabilities(), Not(Contains(HasSubstr("memory.high"))));
  EXPECT_THAT(c->absent_capabilities(), Not(Contains(HasSubstr("io limits"))));  // none wanted
}

TEST_F(ControllerFakeTest, TheMonitorDrivesTheCallsLadderThroughTheActuator) {
  policy_.ladder.sample_interval = 5ms;
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok()) << run.error().message();
  auto call = c->begin_call(**run, "search", {"rg", "foo"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  std::string rel = (*call)->cgroup().rel;
  Usage u;
  u.memory_current = MiB(250).value;  // over 90% of the 256MiB search grant
  u.pids_current = 2;
  backend_->script(rel, {u});

  // Bounded wait for the monitor thread (it samples every 5ms).
  eventually([&] { return actuator_.count(ActuatorCall::Op::kSetLimits) > 0; }, 10s, 5ms);
  auto squeezes = actuator_.calls(ActuatorCall::Op::kSetLimits);
  ASSERT_EQ(squeezes.size(), 1u);
  EXPECT_EQ(squeezes[0].cgroup, rel);
  EXPECT_DOUBLE_EQ(*squeezes[0].limits.cpu_cores,
                   *policy_.intents.at("search").cpu_cores * policy_.ladder.throttle_cpu_fraction);

  CallOutcome o = c->end_call(std::move(call).value(), exited(0));
  ASSERT_FALSE(o.observed.actions.empty());
  EXPECT_EQ(o.observed.actions[0].action, "throttle");
  EXPECT_GT(o.observed.throttled_for, Duration(0));
  EXPECT_GE(o.observed.samples, 2);
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

// Two compile calls in a tenant whose 8GiB budget is 7.5GiB full: the one growing and not the
// largest is frozen, the largest runs on. `root_budget`: the root's limit, if any.
class ControllerBudgetTest : public ControllerFakeTest {
 protected:
  // Starts both calls with their usage scripted; returns {largest, growing} cgroups.
  void start_two_calls(Controller& c, const std::string& budget_rel) {
    auto run = c.begin_run("t1", "r1");
    ASSERT_TRUE(run.ok()) << run.error().message();
    run_ = std::move(run).value();
    Usage full, big, growing1, growing2;
    full.memory_current = MiB(7680).value;
    backend_->script(budget_rel, {full});
    auto a = c.begin_call(*run_, "compile", {"make"});
    ASSERT_TRUE(a.ok()) << a.error().message();
    big.memory_current = GiB(1).value;  // half its 2GiB grant: no throttle
    backend_->script((*a)->cgroup().rel, {big});
    auto b = c.begin_call(*run_, "compile", {"make", "-j2"});
    ASSERT_TRUE(b.ok()) << b.error().message();
    growing1.memory_current = MiB(100).value;
    growing2.memory_current = MiB(300).value;
    backend_->script((*b)->cgroup().rel, {growing1, growing2});
    largest_ = std::move(a).value();
    growing_ = std::move(b).value();
  }
  bool wait_for_freeze() {
    return eventually([&] { return actuator_.count(ActuatorCall::Op::kFreeze) > 0; }, 10s, 5ms);
  }
  // One freeze, of the growing call.
  void expect_only_the_grower_frozen() {
    ASSERT_TRUE(wait_for_freeze());
    auto freezes = actuator_.calls(ActuatorCall::Op::kFreeze);
    ASSERT_EQ(freezes.size(), 1u);
    EXPECT_EQ(freezes[0].cgroup, growing_->cgroup().rel);
    EXPECT_TRUE(freezes[0].frozen);
  }
  // Ends whichever calls are still open, then the run.
  void end(Controller& c) {
    if (largest_) c.end_call(std::move(largest_), exited(0));
    if (growing_) c.end_call(std::move(growing_), exited(0));
    ASSERT_TRUE(c.end_run(std::move(run_)).ok());
  }
  std::unique_ptr<RunScope> run_;
  std::unique_ptr<CallScope> largest_, growing_;
};

TEST_F(ControllerBudgetTest, TheCallGrowingInAFullTenantBudgetIsFrozenAndTheLargestRunsOn) {
  policy_.ladder.sample_interval = 5ms;
  auto c = make();
  ASSERT_TRUE(c);
  start_two_calls(*c, "sgtest/t1");
  expect_only_the_grower_frozen();
  CallOutcome o = c->end_call(std::move(growing_), exited(0));
  ASSERT_FALSE(o.observed.actions.empty());
  EXPECT_EQ(o.observed.actions[0].action, "freeze");
  EXPECT_THAT(o.observed.actions[0].reason,
              HasSubstr("memory budget sgtest/t1 at 7.50GiB of 8GiB"));
  CallOutcome big = c->end_call(std::move(largest_), exited(0));
  EXPECT_TRUE(big.observed.actions.empty());
  ASSERT_TRUE(c->end_run(std::move(run_)).ok());
}

TEST_F(ControllerBudgetTest, TheRootsBudgetIsWatchedWhenItIsTighterThanTheTenants) {
  policy_.ladder.sample_interval = 5ms;
  // The root limited below the tenant's 8GiB: the root is the budget.
  auto c = make_with([](ControllerOptions& o) { o.root_memory_budget = MiB(7800); });
  ASSERT_TRUE(c);
  start_two_calls(*c, "sgtest");
  expect_only_the_grower_frozen();
  CallOutcome o = c->end_call(std::move(growing_), exited(0));
  ASSERT_FALSE(o.observed.actions.empty());
  EXPECT_THAT(o.observed.actions[0].reason, HasSubstr("memory budget sgtest at"));
  end(*c);
}

TEST_F(ControllerBudgetTest, AStaticPolicyNeverActsOnTheBudget) {
  Grant run;
  run.memory_max = GiB(4);
  policy_ = static_policy(run);
  policy_.tenants["t1"] = TenantPolicy{300, GiB(8)};
  policy_.ladder.sample_interval = 5ms;
  auto c = make();
  ASSERT_TRUE(c);
  start_two_calls(*c, "sgtest/t1");
  // The growing call has been sampled growing many times over (its script ends at 300MiB
  // after two reads, at 5ms apart): a rule that would act has acted by now.
  std::this_thread::sleep_for(300ms);
  EXPECT_GE(c->monitor().samples(), 4u);
  EXPECT_EQ(actuator_.count(ActuatorCall::Op::kFreeze), 0u);
  end(*c);
}

// A run-queue meter whose call waits `ms_per_s` milliseconds per second of real time.
class SteadyRunqMeter : public RunqMeter {
 public:
  explicit SteadyRunqMeter(double ms_per_s)
      : ms_per_s_(ms_per_s), start_(std::chrono::steady_clock::now()) {}
  std::optional<RunqTotals> read() override {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    return RunqTotals{static_cast<uint64_t>(s * ms_per_s_ * 1e6), 1};
  }

 private:
  double ms_per_s_;
  std::chrono::steady_clock::time_point start_;
};

// Waits (bounded) until the actuator has been asked to set limits `n` times.
bool wait_for_limits(const RecordingActuator& a, size_t n) {
  return eventually([&] { return a.count(ActuatorCall::Op::kSetLimits) >= n; }, 20s, 5ms);
}

TEST_F(ControllerFakeTest, RunqDelayOfOneCallThrottlesTheCallUsingTheMostCpu) {
  policy_.ladder.sample_interval = 5ms;
  policy_.ladder.runq_throttle_ms_per_s = 100;
  policy_.ladder.runq_window = 100ms;
  auto c = make();
  ASSERT_TRUE(c);
  auto r1 = c->begin_run("t1", "r1");
  auto r2 = c->begin_run("t1", "r2");
  ASSERT_TRUE(r1.ok() && r2.ok());
  auto hog = c->begin_call(**r1, "compile", {"make", "-j8"});
  auto victim = c->begin_call(**r2, "search", {"rg", "foo"});
  ASSERT_TRUE(hog.ok() && victim.ok());
  const std::string hog_rel = (*hog)->cgroup().rel, victim_rel = (*victim)->cgroup().rel;
  backend_->burn_cpu(hog_rel, 1.8);
  backend_->burn_cpu(victim_rel, 0.1);
  // The hog itself waits little; the victim waits half of every second.
  c->measure_runq(**hog, std::make_unique<SteadyRunqMeter>(5));
  c->measure_runq(**victim, std::make_unique<SteadyRunqMeter>(500));

  ASSERT_TRUE(wait_for_limits(actuator_, 1)) << "no throttle within 20 s";
  auto squeezes = actuator_.calls(ActuatorCall::Op::kSetLimits);
  EXPECT_EQ(squeezes[0].cgroup, hog_rel);  // the hog, never the victim
  EXPECT_DOUBLE_EQ(*squeezes[0].limits.cpu_cores,
                   *policy_.intents.at("compile").cpu_cores * policy_.ladder.throttle_cpu_fraction);

  // The victim ends: nobody waits any more, and the hog gets its cores back.
  CallOutcome v = c->end_call(std::move(victim).value(), exited(0));
  EXPECT_TRUE(v.observed.actions.empty());
  ASSERT_TRUE(wait_for_limits(actuator_, 2)) << "no unthrottle within 20 s";
  auto restore = actuator_.calls(ActuatorCall::Op::kSetLimits)[1];
  EXPECT_EQ(restore.cgroup, hog_rel);
  EXPECT_DOUBLE_EQ(*restore.limits.cpu_cores, *policy_.intents.at("compile").cpu_cores);

  CallOutcome o = c->end_call(std::move(hog).value(), exited(0));
  ASSERT_GE(o.observed.actions.size(), 2u);
  EXPECT_EQ(o.observed.actions[0].action, "throttle");
  EXPECT_THAT(o.observed.actions[0].reason, HasSubstr("run-queue delay"));
  EXPECT_THAT(o.observed.actions[0].reason, HasSubstr(victim_rel));
  EXPECT_EQ(o.observed.actions[1].action, "unthrottle");
  EXPECT_GT(o.observed.throttled_for, Duration(0));
  Json j = to_json(o, false);
  EXPECT_EQ(j["actions"][0]["action"], "throttle");
  ASSERT_TRUE(c->end_run(std::move(r1).value()).ok());
  ASSERT_TRUE(c->end_run(std::move(r2).value()).ok());
}

// Its negative twin: the same two calls without run-queue meters (no tracer) are left alone.
TEST_F(ControllerFakeTest, WithoutRunqMetersTheRuleNeverActs) {
  policy_.ladder.sample_interval = 5ms;
  policy_.ladder.runq_throttle_ms_per_s = 100;
  policy_.ladder.runq_window = 100ms;
  auto c = make();
  ASSERT_TRUE(c);
  auto r1 = c->begin_run("t1", "r1");
  auto r2 = c->begin_run("t1", "r2");
  ASSERT_TRUE(r1.ok() && r2.ok());
  auto hog = c->begin_call(**r1, "compile", {"make", "-j8"});
  auto victim = c->begin_call(**r2, "search", {"rg", "foo"});
  ASSERT_TRUE(hog.ok() && victim.ok());
  backend_->burn_cpu((*hog)->cgroup().rel, 1.8);
  backend_->burn_cpu((*victim)->cgroup().rel, 0.1);
  // Several windows of samples.
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(actuator_.count(ActuatorCall::Op::kSetLimits), 0u);
  CallOutcome o = c->end_call(std::move(hog).value(), exited(0));
  EXPECT_TRUE(o.observed.actions.empty());
  (void)c->end_call(std::move(victim).value(), exited(0));
  ASSERT_TRUE(c->end_run(std::move(r1).value()).ok());
  ASSERT_TRUE(c->end_run(std::move(r2).value()).ok());
}

// A call waiting because its own CPU limit throttles it (its grant, or a squeeze) is not a
// victim of the others: the hog beside it is left alone.
TEST_F(ControllerFakeTest, ACallThrottledByItsOwnLimitDoesNotCountAsWaiting) {
  policy_.ladder.sample_interval = 5ms;
  policy_.ladder.runq_throttle_ms_per_s = 100;
  policy_.ladder.runq_window = 100ms;
  auto c = make();
  ASSERT_TRUE(c);
  auto r1 = c->begin_run("t1", "r1");
  auto r2 = c->begin_run("t1", "r2");
  ASSERT_TRUE(r1.ok() && r2.ok());
  auto hog = c->begin_call(**r1, "compile", {"make", "-j8"});
  auto capped = c->begin_call(**r2, "search", {"rg", "foo"});
  ASSERT_TRUE(hog.ok() && capped.ok());
  backend_->burn_cpu((*hog)->cgroup().rel, 1.8);
  backend_->burn_cpu((*capped)->cgroup().rel, 1.0, /*throttled=*/0.5);
  c->measure_runq(**hog, std::make_unique<SteadyRunqMeter>(5));
  c->measure_runq(**capped, std::make_unique<SteadyRunqMeter>(500));
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(actuator_.count(ActuatorCall::Op::kSetLimits), 0u);
  CallOutcome o = c->end_call(std::move(hog).value(), exited(0));
  EXPECT_TRUE(o.observed.actions.empty());
  (void)c->end_call(std::move(capped).value(), exited(0));
  ASSERT_TRUE(c->end_run(std::move(r1).value()).ok());
  ASSERT_TRUE(c->end_run(std::move(r2).value()).ok());
}

// A network meter whose call sends `rate` bytes per second of real time (settable while the
// monitor reads it) and receives a tenth of that.
class SteadyNetMeter : public NetMeter {
 public:
  explicit SteadyNetMeter(std::shared_ptr<std::atomic<double>> rate)
      : rate_(std::move(rate)), last_(std::chrono::steady_clock::now()) {}
  std::optional<NetTotals> read() override {
    auto now = std::chrono::steady_clock::now();
    double sent = rate_->load() * std::chrono::duration<double>(now - last_).count();
    last_ = now;
    out_ += sent;
    in_ += sent / 10;
    return NetTotals{static_cast<uint64_t>(out_), static_cast<uint64_t>(in_)};
  }

 private:
  std::shared_ptr<std::atomic<double>> rate_;
  std::chrono::steady_clock::time_point last_;
  double out_ = 0, in_ = 0;  // the monitor's thread only
};

class ControllerNetTest : public ControllerFakeTest {
 protected:
  ControllerNetTest() {
    policy_.ladder.sample_interval = 5ms;
    policy_.ladder.net_throttle_bytes_per_s = 1 << 20;  // 1 MiB/s
    policy_.ladder.net_window = 100ms;
  }
  // Waits (bounded, 20 s) for 40 more samples of the monitor: at least 195 ms apart at the
  // 5 ms interval, so the windows of 100 ms are spanned however busy the machine is.
  static bool several_windows(const Controller& c) {
    const uint64_t want = c.monitor().samples() + 40;
    return eventually([&] { return c.monitor().samples() >= want; }, 20s, 5ms);
  }
};

TEST_F(ControllerNetTest, ACallsNetworkBurstThrottlesItAndQuietReleasesIt) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok());
  auto call = c->begin_call(**run, "install", {"pip", "install", "x"});
  ASSERT_TRUE(call.ok());
  const std::string rel = (*call)->cgroup().rel;
  backend_->burn_cpu(rel, 0.9);  // more than the squeeze leaves it (1 core x 0.25)
  auto rate = std::make_shared<std::atomic<double>>(8.0 * (1 << 20));
  c->measure_net(**call, std::make_unique<SteadyNetMeter>(rate));

  ASSERT_TRUE(wait_for_limits(actuator_, 1)) << "no throttle within 20 s";
  auto squeezes = actuator_.calls(ActuatorCall::Op::kSetLimits);
  EXPECT_EQ(squeezes[0].cgroup, rel);
  EXPECT_DOUBLE_EQ(*squeezes[0].limits.cpu_cores,
                   *policy_.intents.at("install").cpu_cores * policy_.ladder.throttle_cpu_fraction);
  rate->store(0);  // the burst is over
  ASSERT_TRUE(wait_for_limits(actuator_, 2)) << "no unthrottle within 20 s";
  auto restore = actuator_.calls(ActuatorCall::Op::kSetLimits)[1];
  EXPECT_DOUBLE_EQ(*restore.limits.cpu_cores, *policy_.intents.at("install").cpu_cores);

  CallOutcome o = c->end_call(std::move(call).value(), exited(0));
  ASSERT_EQ(o.observed.actions.size(), 2u);
  EXPECT_EQ(o.observed.actions[0].action, "throttle");
  EXPECT_THAT(o.observed.actions[0].reason, HasSubstr("network burst"));
  EXPECT_THAT(o.observed.actions[0].reason, HasSubstr("threshold 1.00MiB/s"));
  EXPECT_EQ(o.observed.actions[1].action, "unthrottle");
  EXPECT_THAT(o.observed.actions[1].reason, HasSubstr("network rate down to"));
  EXPECT_GT(o.observed.throttled_for, Duration(0));
  // The peak: out 8 MiB/s plus in 0.8, give or take the sampling.
  ASSERT_TRUE(o.observed.peaks.net_bytes_per_s);
  EXPECT_GT(*o.observed.peaks.net_bytes_per_s, 4.0 * (1 << 20));
  EXPECT_LT(*o.observed.peaks.net_bytes_per_s, 20.0 * (1 << 20));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

// The negative twins: a call under the threshold, and a call with no meter at all.
TEST_F(ControllerNetTest, ACallUnderTheThresholdIsLeftAloneAndItsPeakRecorded) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok());
  auto call = c->begin_call(**run, "install", {"pip", "install", "x"});
  ASSERT_TRUE(call.ok());
  backend_->burn_cpu((*call)->cgroup().rel, 0.9);
  auto rate = std::make_shared<std::atomic<double>>(256.0 * 1024);  // + a tenth in: 0.27 MiB/s
  c->measure_net(**call, std::make_unique<SteadyNetMeter>(rate));
  ASSERT_TRUE(several_windows(*c));
  EXPECT_EQ(actuator_.count(ActuatorCall::Op::kSetLimits), 0u);
  CallOutcome o = c->end_call(std::move(call).value(), exited(0));
  EXPECT_TRUE(o.observed.actions.empty());
  ASSERT_TRUE(o.observed.peaks.net_bytes_per_s);
  EXPECT_LT(*o.observed.peaks.net_bytes_per_s, 1 << 20);
  EXPECT_GT(*o.observed.peaks.net_bytes_per_s, 0);
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

TEST_F(ControllerNetTest, WithoutANetMeterTheRuleNeverActs) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok());
  auto call = c->begin_call(**run, "install", {"pip", "install", "x"});
  ASSERT_TRUE(call.ok());
  backend_->burn_cpu((*call)->cgroup().rel, 0.9);
  ASSERT_TRUE(several_windows(*c));
  EXPECT_EQ(actuator_.count(ActuatorCall::Op::kSetLimits), 0u);
  CallOutcome o = c->end_call(std::move(call).value(), exited(0));
  EXPECT_TRUE(o.observed.actions.empty());
  EXPECT_FALSE(o.observed.peaks.net_bytes_per_s);
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

// A meter that cannot be read adds no point: no rate, no action, no peak.
TEST_F(ControllerNetTest, AnUnreadableMeterGivesNoNetworkView) {
  class Unreadable : public NetMeter {
   public:
    std::optional<NetTotals> read() override { return std::nullopt; }
  };
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("t1", "r1");
  ASSERT_TRUE(run.ok());
  auto call = c->begin_call(**run, "install", {"pip", "install", "x"});
  ASSERT_TRUE(call.ok());
  backend_->burn_cpu((*call)->cgroup().rel, 0.9);
  c->measure_net(**call, std::make_unique<Unreadable>());
  ASSERT_TRUE(several_windows(*c));
  CallOutcome o = c->end_call(std::move(call).value(), exited(0));
  EXPECT_TRUE(o.observed.actions.empty());
  EXPECT_FALSE(o.observed.peaks.net_bytes_per_s);
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

TEST(MonitorRates, PerSecondOverAtLeastHalfTheWindow) {
  using std::chrono::steady_clock;
  auto t0 = steady_clock::time_point{} + std::chrono::hours(1);
  // 50ms of waiting in 250ms: 200ms per second, in ns per second.
  auto r = rate_per_second(t0, 1'000'000, t0 + 250ms, 51'000'000, 500ms);
  ASSERT_TRUE(r.has_value());
  EXPECT_DOUBLE_EQ(*r / 1e6, 200.0);
  // Less than half the window: no rate yet.
  EXPECT_FALSE(rate_per_second(t0, 0, t0 + 249ms, 1, 500ms).has_value());
  // A counter that went backwards (a reset) or no time: no rate.
  EXPECT_FALSE(rate_per_second(t0, 10, t0 + 500ms, 5, 500ms).has_value());
  EXPECT_FALSE(rate_per_second(t0, 0, t0, 5, Duration(0)).has_value());
}

}  // namespace
}  // namespace sandgate::controller
