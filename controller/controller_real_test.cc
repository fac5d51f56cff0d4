// The controller's work off a call's critical path, against this host's real cgroups (root; a
// hybrid or cgroup2 host): the spare cgroup made ahead of each call, the reaper removing an
// ended call's cgroup after its outcome, a call's leftovers killed before its outcome, and
// `sandgate gc` finding the spare and an unreaped call cgroup after a kill -9; the budget rule
// freezing, on the kernel's own figures, a call that fills a shared budget.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "controller/cgroup_layout.h"
#include "controller/controller.h"
#include "core/fd.h"
#include "core/files.h"
#include "core/state.h"
#include "core/test_temp_dir.h"
#include "tests/support/privileged.h"

namespace sandgate::controller {
namespace {

class ControllerRealTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SANDGATE_REQUIRE(sandgate::testing::is_root(), "needs root (cgroups)");
    auto layout = detect_cgroup_layout("/proc/self/mountinfo");
    ASSERT_TRUE(layout.ok()) << layout.error().message();
    SANDGATE_REQUIRE(
        layout->kind == CgroupLayoutKind::kHybrid || layout->kind == CgroupLayoutKind::kV2,
        "needs a hybrid or cgroup2 host, this one is " + describe(*layout));
    layout_ = *layout;
    static int counter = 0;
    root_ = "sandgate-test-ctl-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
    paths_.state_dir = tmp_ / "state";
    paths_.work_dir = tmp_ / "work";
  }
  void TearDown() override {
    // Nothing of the test's root may remain in any hierarchy the controller uses.
    for (const auto& dir : mounts())
      EXPECT_NE(::access((dir + "/" + root_).c_str(), F_OK), 0) << dir << "/" << root_ << " left";
  }

  std::vector<std::string> mounts() const {
    std::vector<std::string> out;
    if (!layout_.unified_mount.empty()) out.push_back(layout_.unified_mount);
    for (const auto& [h, m] : layout_.v1_mounts) out.push_back(m);
    return out;
  }

  std::unique_ptr<Controller> make() {
    ControllerOptions o;
    o.paths = paths_;
    o.root = root_;
    o.policy = default_policy();
    auto c = Controller::create(std::move(o));
    EXPECT_TRUE(c.ok()) << c.error().message();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  static bool all_exist(const Placement& p) {
    for (const auto& d : p.cgroup_dirs)
      if (::access(d.c_str(), F_OK) != 0) return false;
    return !p.cgroup_dirs.empty();
  }
  static bool none_exist(const Placement& p) {
    for (const auto& d : p.cgroup_dirs)
      if (::access(d.c_str(), F_OK) == 0) return false;
    return true;
  }

  CgroupLayout layout_;
  std::string root_;
  sandgate::testing::TempDir tmp_;
  HostPaths paths_;
};

TEST_F(ControllerRealTest, CallTakesTheSpareAndItsCgroupIsRemovedAfterTheOutcome) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("default", "rspare");
  ASSERT_TRUE(run.ok()) << run.error().message();
  c->settle(**run);
  auto call = c->begin_call(**run, "test", {"true"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  EXPECT_EQ((*call)->id(), "call-1");
  const Placement placed = (*call)->placement();
  ASSERT_TRUE(all_exist(placed));
  // The grant is in the kernel's files before anything could be placed.
  for (const auto& d : placed.cgroup_dirs) {
    if (d.find("/memory/") != std::string::npos) {
      auto l = read_file(d + "/memory.limit_in_bytes");
      ASSERT_TRUE(l.ok());
      EXPECT_EQ(std::stoull(*l), default_policy().intents.at("test").memory_max->value);
    }
    if (d.starts_with(layout_.unified_mount + "/") && layout_.kind == CgroupLayoutKind::kV2) {
      auto l = read_file(d + "/memory.max");
      ASSERT_TRUE(l.ok());
      EXPECT_EQ(std::stoull(*l), default_policy().intents.at("test").memory_max->value);
    }
  }
  (void)c->end_call(std::move(call).value(), ExecResult{});
  c->settle(**run);
  EXPECT_TRUE(none_exist(placed));
  // The next call's spare exists once this call has ended, in every hierarchy the run is in.
  for (const auto& d : placed.cgroup_dirs) {
    std::string next = d.substr(0, d.rfind('/')) + "/call-2";
    EXPECT_EQ(::access(next.c_str(), F_OK), 0) << next;
  }
  auto record = read_file(paths_.state_dir + "/runs/rspare-cgroups.json");
  ASSERT_TRUE(record.ok());
  for (const auto& d : placed.cgroup_dirs)
    EXPECT_THAT(*record, ::testing::Not(::testing::HasSubstr(d + "\"")));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

TEST_F(ControllerRealTest, ProcessesACallLeftAreDeadWhenItsOutcomeIsReturned) {
  auto c = make();
  ASSERT_TRUE(c);
  auto run = c->begin_run("default", "rleft");
  ASSERT_TRUE(run.ok()) << run.error().message();
  auto call = c->begin_call(**run, "test", {"daemon"});
  ASSERT_TRUE(call.ok()) << call.error().message();
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  for (const auto& d : (*call)->placement().cgroup_dirs)
    ASSERT_TRUE(write_file(d + "/cgroup.procs", std::to_string(child)).ok()) << d;
  const Placement placed = (*call)->placement();
  (void)c->end_call(std::move(call).value(), ExecResult{});
  // Killed before end_call returned: it is a zombie (or gone) now, never running.
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, WNOHANG), child) << "the call's leftover still runs";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_TRUE(none_exist(placed));
  ASSERT_TRUE(c->end_run(std::move(run).value()).ok());
}

// A child placed in `call` that, once told to, touches `start_mib` MiB and then one more MiB
// every 20 ms up to `end_mib`, and then waits to be killed. Returns its pid; `go` starts it.
pid_t memory_child(const CallScope& call, uint64_t start_mib, uint64_t end_mib, UniqueFd* go) {
  auto p = make_pipe();
  if (!p.ok()) return -1;
  pid_t child = ::fork();
  if (child < 0) return -1;
  if (child == 0) {
    // Only async-signal-safe calls: the parent has threads.
    p->write.reset();
    char c;
    if (::read(p->read.get(), &c, 1) != 1) ::_exit(1);
    const size_t mib = 1 << 20;
    auto* mem = static_cast<volatile char*>(
        ::mmap(nullptr, end_mib * mib, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (mem == MAP_FAILED) ::_exit(2);
    for (uint64_t m = 0; m < end_mib; ++m) {
      for (size_t off = 0; off < mib; off += 4096) mem[m * mib + off] = 1;
      if (m >= start_mib) {
        struct timespec ts{0, 20 * 1000 * 1000};
        ::nanosleep(&ts, nullptr);
      }
    }
    ::pause();
    ::_exit(0);
  }
  p->read.reset();
  for (const auto& d : call.placement().cgroup_dirs)
    if (!write_file(d + "/cgroup.procs", std::to_string(child)).ok()) {
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
      return -1;
    }
  *go = std::move(p->write);
  return child;
}

// The budget rule on the kernel's figures: the root's charge read from its memory controller,
// the freeze written to cgroup.freeze. A call holding 160 MiB and one growing to 150 MiB (a MiB
// per 20 ms) under a 256 MiB budget (nothing else is in the test's root; an ASan build adds an
// eighth to each for the shadow its stores read): once the budget is 90% full, the growing
// call, not the largest, is frozen, some 40-70 MiB in, and stops growing; the largest is never
// touched. `interval`: the monitor's sampling interval.
struct BudgetGrowth {
  bool started = false;
  int steady = 0;     // 40 ms polls in a row the grower's charge moved by under 1 MiB
  uint64_t last = 0;  // the grower's charge at the end
  CallOutcome grown, held;
  uint64_t budget_wakeups = 0;
};
BudgetGrowth grow_into_a_full_budget(const HostPaths& paths, const std::string& root,
                                     Duration interval) {
  BudgetGrowth out;
  ControllerOptions o;
  o.paths = paths;
  o.root = root;
  o.policy = default_policy();
  o.policy.ladder.sample_interval = interval;
  o.root_memory_budget = MiB(256);
  auto made = Controller::create(std::move(o));
  EXPECT_TRUE(made.ok()) << made.error().message();
  if (!made.ok()) return out;
  auto& c = *made;
  auto run = c->begin_run("default", "rbudget");
  EXPECT_TRUE(run.ok()) << run.error().message();
  if (!run.ok()) return out;
  auto big = c->begin_call(**run, "compile", {"hold"});
  auto grower = c->begin_call(**run, "compile", {"grow"});
  EXPECT_TRUE(big.ok() && grower.ok());
  if (!big.ok() || !grower.ok()) return out;
  UniqueFd go_big, go_grower;
  pid_t big_pid = memory_child(**big, 160, 160, &go_big);
  pid_t grower_pid = memory_child(**grower, 0, 150, &go_grower);
  EXPECT_GT(big_pid, 0);
  EXPECT_GT(grower_pid, 0);
  if (big_pid <= 0 || grower_pid <= 0) return out;
  // The largest first, all at once; then the grower.
  EXPECT_EQ(::write(go_big.get(), "g", 1), 1);
  auto& backend = c->backend();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    auto u = backend.read_usage((*big)->cgroup());
    if (u.ok() && u->memory_current >= MiB(160).value) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(::write(go_grower.get(), "g", 1), 1);
  // Started: past the few MiB a fresh process has.
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline && !out.started) {
    auto u = backend.read_usage((*grower)->cgroup());
    out.started = u.ok() && u->memory_current >= MiB(10).value;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Frozen: its memory stops short of 150 MiB and stays there for a second.
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && out.steady < 25) {
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    auto u = backend.read_usage((*grower)->cgroup());
    if (!u.ok()) continue;
    // Within 1 MiB: a v1 memory cgroup's charge moves by the kernel's per-CPU batches (64
    // pages) while nothing in it runs.
    const uint64_t moved =
        u->memory_current > out.last ? u->memory_current - out.last : out.last - u->memory_current;
    out.steady = moved < MiB(1).value ? out.steady + 1 : 0;
    out.last = u->memory_current;
  }
  out.budget_wakeups = c->monitor().budget_wakeups();
  out.grown = c->end_call(std::move(grower).value(), ExecResult{});
  out.held = c->end_call(std::move(big).value(), ExecResult{});
  for (pid_t p : {big_pid, grower_pid}) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
  EXPECT_TRUE(c->end_run(std::move(run).value()).ok());
  return out;
}

TEST_F(ControllerRealTest, TheCallGrowingIntoAFullBudgetIsFrozenAndTheLargestRunsOn) {
  BudgetGrowth g = grow_into_a_full_budget(paths_, root_, std::chrono::milliseconds(20));
  ASSERT_TRUE(g.started) << "the grower never started";
  EXPECT_GE(g.steady, 25) << "the grower never stopped growing";
  EXPECT_LT(g.last, MiB(140).value) << "the grower was not stopped before its end";
  ASSERT_FALSE(g.grown.observed.actions.empty()) << to_json(g.grown, false).dump(2);
  EXPECT_EQ(g.grown.observed.actions[0].action, "freeze");
  EXPECT_THAT(g.grown.observed.actions[0].reason, ::testing::HasSubstr("memory budget " + root_));
  EXPECT_GT(g.grown.observed.frozen_for, Duration(0));
  EXPECT_TRUE(g.held.observed.actions.empty()) << to_json(g.held, false).dump(2);
}

// The same with the monitor sampling every 30 s: nothing would look before the grower has
// taken its 150 MiB (3 s), but the budget's threshold (v1's memory.usage_in_bytes threshold
// at 90% of the budget) wakes the monitor the moment the budget fills, and the grower is
// frozen as early as at a 20 ms interval. Pure v2 has no usage threshold: the rule waits for
// the next sample there.
TEST_F(ControllerRealTest, AFillingBudgetWakesTheMonitorBetweenSamples) {
  auto layout = detect_cgroup_layout("/proc/self/mountinfo");
  SANDGATE_REQUIRE(layout.ok() && !layout->v1_mounts.empty() && layout->v1_mounts.count("memory"),
                   "needs the v1 memory controller (its usage thresholds); pure v2 has none");
  BudgetGrowth g = grow_into_a_full_budget(paths_, root_, std::chrono::seconds(30));
  ASSERT_TRUE(g.started) << "the grower never started";
  EXPECT_GE(g.budget_wakeups, 1u) << "the budget's threshold never woke the monitor";
  EXPECT_GE(g.steady, 25) << "the grower never stopped growing";
  EXPECT_LT(g.last, MiB(140).value) << "the grower was not stopped before its end";
  ASSERT_FALSE(g.grown.observed.actions.empty()) << to_json(g.grown, false).dump(2);
  EXPECT_EQ(g.grown.observed.actions[0].action, "freeze");
  EXPECT_LT(g.grown.observed.actions[0].at, std::chrono::seconds(20))
      << "frozen at a sample, not at the wake-up";
  EXPECT_TRUE(g.held.observed.actions.empty()) << to_json(g.held, false).dump(2);
}

// kill -9 of the process that holds a run with a spare cgroup and a call still open: every
// cgroup was recorded before it was made, so gc removes them all.
TEST_F(ControllerRealTest, GcRemovesTheSpareAndTheOpenCallsCgroupsAfterKill9) {
  auto ready = make_pipe();
  ASSERT_TRUE(ready.ok());
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ready->read.reset();
    std::string said = "fail";
    ControllerOptions o;
    o.paths = paths_;
    o.root = root_;
    o.policy = default_policy();
    auto c = Controller::create(std::move(o));
    if (c.ok()) {
      auto run = (*c)->begin_run("default", "rkilled");
      if (run.ok()) {
        // Two calls at once: the first takes the run's spare (call-1), the second makes its
        // own (call-2); once the first ends, the next call's spare is made (call-3).
        auto first = (*c)->begin_call(**run, "test", {"true"});
        auto call = (*c)->begin_call(**run, "test", {"true"});
        if (first.ok()) (void)(*c)->end_call(std::move(first).value(), ExecResult{});
        (*c)->settle(**run);
        if (first.ok() && call.ok()) said = "ok";
        (void)!::write(ready->write.get(), said.data(), said.size());
        ready->write.reset();
        ::pause();  // killed here, the run and its call open
      }
    }
    (void)!::write(ready->write.get(), said.data(), said.size());
    ::_exit(1);
  }
  ready->write.reset();
  auto said = read_all(ready->read.get());
  ASSERT_TRUE(said.ok());
  bool made = *said == "ok";
  std::string run_rel = root_ + "/default/rkilled";
  std::vector<std::string> left_before;
  for (const auto& m : mounts())
    for (const char* sub : {"/call-1", "/call-2", "/call-3"})
      if (::access((m + "/" + run_rel + sub).c_str(), F_OK) == 0)
        left_before.push_back(m + "/" + run_rel + sub);
  ::kill(pid, SIGKILL);
  int status;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(made) << "the child could not make its run and call";
  // The open call's and the spare's cgroups, in the unified mount at least.
  EXPECT_THAT(left_before, ::testing::Contains(layout_.unified_mount + "/" + run_rel + "/call-2"));
  EXPECT_THAT(left_before, ::testing::Contains(layout_.unified_mount + "/" + run_rel + "/call-3"));
  EXPECT_THAT(left_before, ::testing::Not(::testing::Contains(layout_.unified_mount + "/" +
                                                              run_rel + "/call-1")))
      << "the ended call's cgroup was not removed";
  auto report = collect_garbage(paths_);
  EXPECT_TRUE(report.errors.empty()) << report.errors.front();
  EXPECT_EQ(report.runs_removed, 1);
  for (const auto& d : left_before) EXPECT_NE(::access(d.c_str(), F_OK), 0) << d << " left";
  // TearDown checks that nothing of the root is left in any hierarchy.
}

}  // namespace
}  // namespace sandgate::controller
