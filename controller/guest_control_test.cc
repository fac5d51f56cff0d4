// The controller's part inside a microVM's guest (controller/guest_control.h), without a guest:
// what crosses between host and guest (the grant out, exactly; the observation back, as hostile
// data), and GuestCalls over an in-memory backend: the grant written, the call placed and
// watched, its cgroup revoked, and an OOM kill in the guest mapped to the same outcome as on
// the host.
#include "controller/guest_control.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include "controller/fake_backend.h"
#include "core/test_temp_dir.h"

namespace sandgate::controller {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using testing::FakeBackend;

Grant test_grant() {
  Grant g;
  g.memory_max = Bytes{MiB(64).value + 1};  // not a round size: the guest gets it to the byte
  g.memory_high = MiB(48);
  g.cpu_cores = 0.2;
  g.pids_max = 16;
  g.io_write_bps = MiB(10);  // stays on the host
  g.timeout = std::chrono::seconds(20);
  return g;
}

TEST(GuestControlWire, TheGrantAndLadderSettingsCrossExactly) {
  LadderSettings l;
  l.sample_interval = std::chrono::milliseconds(15);
  l.throttle_at = 0.8;
  l.throttle_cpu_fraction = 0.3;
  l.freeze_host_psi = 50;
  l.thaw_host_psi = 5;
  l.freeze_max = std::chrono::milliseconds(1500);
  l.cancel_grace = std::chrono::microseconds(250001);
  l.psi_trigger_stall = std::chrono::milliseconds(150);
  l.psi_trigger_window = std::chrono::seconds(4);
  l.runq_throttle_ms_per_s = 200;        // its meter is the host's eBPF tracer:
  l.net_throttle_bytes_per_s = 1 << 20;  // off in the guest, as the network rule
  // Through text, as over the bridge.
  auto text = dump_json(guest_control_to_json(test_grant(), l));
  auto j = parse_json(text, "test");
  ASSERT_TRUE(j.ok());
  auto c = guest_control_from_json(*j);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->grant.memory_max, test_grant().memory_max);
  EXPECT_EQ(c->grant.memory_high, MiB(48));
  EXPECT_EQ(c->grant.cpu_cores, 0.2);
  EXPECT_EQ(c->grant.pids_max, 16u);
  EXPECT_FALSE(c->grant.io_write_bps);
  EXPECT_EQ(c->grant.timeout, Duration(0)) << "the timeout is the host's to enforce";
  EXPECT_TRUE(c->ladder.enabled);
  EXPECT_EQ(c->ladder.sample_interval, l.sample_interval);
  EXPECT_EQ(c->ladder.throttle_at, 0.8);
  EXPECT_EQ(c->ladder.throttle_cpu_fraction, 0.3);
  EXPECT_EQ(c->ladder.freeze_host_psi, 50);
  EXPECT_EQ(c->ladder.thaw_host_psi, 5);
  EXPECT_EQ(c->ladder.freeze_max, l.freeze_max);
  EXPECT_EQ(c->ladder.cancel_grace, l.cancel_grace);
  EXPECT_EQ(c->ladder.psi_trigger_stall, l.psi_trigger_stall);
  EXPECT_EQ(c->ladder.psi_trigger_window, l.psi_trigger_window);
  EXPECT_EQ(c->ladder.runq_throttle_ms_per_s, 0);
  EXPECT_EQ(c->ladder.net_throttle_bytes_per_s, 0u);
}

TEST(GuestControlWire, NoControlIsMeasuredOnlyAndAWrongTypeNamesTheField) {
  auto none = guest_control_from_json(Json());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->grant, Grant{});
  EXPECT_FALSE(none->ladder.enabled);

  Json bad = guest_control_to_json(test_grant(), LadderSettings{});
  bad["grant"]["memory_max"] = "64MiB";
  auto e = guest_control_from_json(bad);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.error().message(), HasSubstr("memory_max"));
  bad = guest_control_to_json(test_grant(), LadderSettings{});
  bad["ladder"]["sample_interval_us"] = 0;
  EXPECT_FALSE(guest_control_from_json(bad).ok()) << "a zero interval would spin the monitor";
  EXPECT_FALSE(guest_control_from_json(Json::array()).ok());
}

CallObservation seen_by_a_ladder() {
  CallObservation o;
  o.peaks.memory_bytes = MiB(64).value;
  o.peaks.pids = 3;
  o.peaks.cpu_cores = 0.25;
  o.cpu_usage_us = 123456;
  o.cpu_throttled_us = 65432;
  o.oom_kills = 1;
  o.pids_refused = 2;
  o.throttled_for = std::chrono::microseconds(1500);
  o.frozen_for = std::chrono::microseconds(20);
  o.actions = {{"throttle", std::chrono::microseconds(1000), "memory at 90%"},
               {"oom_kill", std::chrono::microseconds(2500), "the kernel OOM-killed 1"}};
  o.cancelled_by_ladder = true;
  o.killed_by_ladder = false;
  o.ladder_reason = "pinned";
  o.ladder_termination = Termination::kPidsLimit;
  o.samples = 9;
  return o;
}

TEST(GuestObservationWire, WhatTheGuestsLadderSawComesBackWhole) {
  CallObservation sent = seen_by_a_ladder();
  sent.run_oom_kills = 5;  // the host's to count, never the guest's
  auto j = parse_json(dump_json(guest_observation_to_json(sent)), "test");
  ASSERT_TRUE(j.ok());
  auto o = guest_observation_from_json(*j);
  ASSERT_TRUE(o.ok()) << o.error().message();
  EXPECT_EQ(o->peaks.memory_bytes, sent.peaks.memory_bytes);
  EXPECT_EQ(o->peaks.pids, 3u);
  EXPECT_EQ(o->peaks.cpu_cores, 0.25);
  EXPECT_EQ(o->cpu_usage_us, 123456u);
  EXPECT_EQ(o->cpu_throttled_us, 65432u);
  EXPECT_EQ(o->oom_kills, 1u);
  EXPECT_EQ(o->pids_refused, 2u);
  EXPECT_EQ(o->throttled_for, sent.throttled_for);
  EXPECT_EQ(o->frozen_for, sent.frozen_for);
  ASSERT_EQ(o->actions.size(), 2u);
  EXPECT_EQ(o->actions[1].action, "oom_kill");
  EXPECT_EQ(o->actions[1].at, std::chrono::microseconds(2500));
  EXPECT_EQ(o->actions[0].reason, "memory at 90%");
  EXPECT_TRUE(o->cancelled_by_ladder);
  EXPECT_FALSE(o->killed_by_ladder);
  EXPECT_EQ(o->ladder_reason, "pinned");
  EXPECT_EQ(o->ladder_termination, Termination::kPidsLimit);
  EXPECT_EQ(o->samples, 9);
  EXPECT_EQ(o->run_oom_kills, 0u);
  EXPECT_FALSE(o->traced);
  EXPECT_FALSE(o->net);
}

TEST(GuestObservationWire, HostileObservationsAreBoundedOrRefusedNeverACrash) {
  Json good = guest_observation_to_json(seen_by_a_ladder());
  for (auto [key, value] : std::initializer_list<std::pair<const char*, Json>>{
           {"oom_kills", -1},
           {"oom_kills", "1"},
           {"cpu_usage_us", 1.5},
           {"cpu_peak_cores", "inf"},
           {"samples", uint64_t{1} << 40},
           {"throttled_us", uint64_t{1} << 62},
           {"ladder_termination", "exploded"},
           {"ladder_reason", Json::object()},
           {"actions", "many"},
           {"killed_by_ladder", 1}}) {
    Json j = good;
    j[key] = value;
    auto o = guest_observation_from_json(j);
    EXPECT_FALSE(o.ok()) << key << " = " << value.dump() << " was taken";
    if (!o.ok()) {
      EXPECT_THAT(o.error().message(), HasSubstr(key));
    }
  }
  EXPECT_FALSE(guest_observation_from_json(Json::array()).ok());
  EXPECT_FALSE(guest_observation_from_json(Json("text")).ok());

  // Far too many actions, far too long texts: kept to the bounds, cut on a character.
  Json j = good;
  j["actions"] = Json::array();
  std::string long_reason(kMaxGuestText - 1, 'x');
  long_reason += "\xc3\xa9\xc3\xa9";  // "éé": the cut falls inside the first
  for (int i = 0; i < 10000; ++i)
    j["actions"].push_back({{"action", "throttle"}, {"at_us", i}, {"reason", long_reason}});
  j["ladder_reason"] = std::string(1 << 20, 'y');
  auto o = guest_observation_from_json(j);
  ASSERT_TRUE(o.ok()) << o.error().message();
  EXPECT_EQ(o->actions.size(), kMaxGuestActions);
  EXPECT_EQ(o->ladder_reason.size(), kMaxGuestText);
  EXPECT_EQ(o->actions[0].reason, std::string(kMaxGuestText - 1, 'x'));
}

class GuestCallsTest : public ::testing::Test {
 protected:
  std::unique_ptr<GuestCalls> make(CgroupFeatures features = FakeBackend::all_features()) {
    auto backend = std::make_unique<FakeBackend>(features, tmp_ / "no-such-cgroupfs");
    backend_ = backend.get();
    HostPaths paths;
    paths.proc = tmp_ / "proc";  // no pressure file: the ladder never freezes
    return std::make_unique<GuestCalls>(std::move(backend), paths, "calls");
  }
  static Json control() {
    LadderSettings l;
    l.sample_interval = std::chrono::hours(1);  // the final read decides, not the thread
    return guest_control_to_json(test_grant(), l);
  }

  sandgate::testing::TempDir tmp_;
  FakeBackend* backend_ = nullptr;
};

TEST_F(GuestCallsTest, TheGrantIsWrittenTheCallWatchedAndItsOomKillIsTheHostsMemoryLimit) {
  auto calls = make();
  auto begun = calls->begin(7, control());
  ASSERT_TRUE(begun.ok()) << begun.error().message();
  EXPECT_EQ(calls->cgroup_of(7), "/calls/call-7");
  auto limits = backend_->limits_of("calls/call-7");
  ASSERT_EQ(limits.size(), 1u);
  EXPECT_EQ(limits[0].memory_max, test_grant().memory_max);
  EXPECT_EQ(limits[0].memory_high, MiB(48));
  EXPECT_EQ(limits[0].cpu_cores, 0.2);
  EXPECT_EQ(limits[0].pids_max, 16u);
  EXPECT_FALSE(limits[0].io_write_bps) << "the guest's disk is not the host's device";

  ASSERT_TRUE(calls->place(7, 4242).ok());
  EXPECT_THAT(backend_->ops(), Contains("attach calls/call-7 4242"));
  // The guest kernel OOM-killed the call inside its grant.
  Usage u;
  u.memory_peak = MiB(64).value;
  u.memory_events.oom_kill = 1;
  u.cpu_throttled_us = 5000;
  backend_->script("calls/call-7", {u});
  Json sent = calls->end(7);
  EXPECT_TRUE(calls->end(7).is_null()) << "ended once";
  // A call that left a process behind is killed and removed before its end is sent.
  ASSERT_TRUE(calls->begin(8, control()).ok());
  ASSERT_TRUE(calls->place(8, 4243).ok());
  backend_->set_procs("calls/call-8", {4244});
  EXPECT_FALSE(calls->end(8).is_null());
  EXPECT_THAT(backend_->removed(), Contains("calls/call-8"));
  // An empty one by the reaper, after its end was sent.
  calls->settle();
  EXPECT_THAT(backend_->removed(), Contains("calls/call-7")) << "revoked in the guest";

  // On the host: decoded and classified as any call's outcome.
  auto seen = guest_observation_from_json(parse_json(dump_json(sent), "bridge").value());
  ASSERT_TRUE(seen.ok()) << seen.error().message();
  CallOutcome o;
  o.argv = {"sandgate-try", "alloc", "256"};
  o.grant = test_grant();
  o.grant.memory_max = MiB(64);
  o.observed = *seen;
  o.exec.status = ExitStatus{false, 0, SIGKILL};
  classify(o);
  EXPECT_EQ(o.termination, Termination::kMemoryLimit);
  EXPECT_EQ(o.retry, RetryAdvice::kRetryWithSmallerScope);
  EXPECT_THAT(o.reason, HasSubstr("64MiB"));
  EXPECT_EQ(o.observed.oom_kills, 1u);
  EXPECT_EQ(o.observed.cpu_throttled_us, 5000u);
  EXPECT_EQ(o.observed.peaks.memory_bytes, MiB(64).value);
  ASSERT_FALSE(o.observed.actions.empty());
  EXPECT_EQ(o.observed.actions.back().action, "oom_kill");
}

TEST_F(GuestCallsTest, WithoutMemoryHighTheRestIsStillWrittenAndARefusedGrantLeavesNothing) {
  CgroupFeatures f = FakeBackend::all_features();
  f.memory_high = false;
  auto calls = make(f);
  ASSERT_TRUE(calls->begin(1, control()).ok());
  auto limits = backend_->limits_of("calls/call-1");
  ASSERT_EQ(limits.size(), 1u);
  EXPECT_FALSE(limits[0].memory_high);
  EXPECT_EQ(limits[0].pids_max, 16u);
  EXPECT_FALSE(calls->end(1).is_null());

  // A grant the guest cannot read refuses the call, and its cgroup is not left behind.
  Json bad = control();
  bad["grant"]["pids_max"] = -3;
  EXPECT_FALSE(calls->begin(2, bad).ok());
  EXPECT_FALSE(backend_->exists("calls/call-2"));
  EXPECT_FALSE(calls->place(2, 1).ok());
}

}  // namespace
}  // namespace sandgate::controller
