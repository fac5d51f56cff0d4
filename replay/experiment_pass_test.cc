// A whole policy pass (run_policy_pass) against fakes: an in-memory cgroup backend
// (controller/fake_backend.h) and a provider whose environments run nothing. Its processes
// answer from a script (the hold starts, the victim reports), and every run made and process
// started goes, in order, into one journal: the tests see what the pass did first, and what it
// made of a run that died. The real thing, under a real budget: tests/replay_test.cc.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "controller/fake_backend.h"
#include "core/test_temp_dir.h"
#include "replay/experiment.h"

namespace sandgate::replay {
namespace {

using namespace std::chrono_literals;

const std::string kVictimTenant = ExperimentOptions{}.victim_tenant;

class Journal {
 public:
  void add(std::string event) {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(event));
  }
  std::vector<std::string> events() const {
    std::lock_guard lock(mu_);
    return events_;
  }
  // Where `event` first happened; events().size() when it never did.
  size_t at(const std::string& event) const {
    auto e = events();
    return static_cast<size_t>(std::find(e.begin(), e.end(), event) - e.begin());
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> events_;
};

// What the fake provider's runs do; by default everything starts and the victim reports.
struct Script {
  Duration victim_run_delay{0};  // making the victim's run takes this long
  std::optional<Error> victim_run_error, agent_run_error;
  std::optional<ExitStatus> victim_status;  // how the victim ends; unset: exit 0, a report
};

// What the kernel says when the budget kills the process that is starting a run's supervisor
// (seen at 16 MiB: providers/supervisor.cc).
Error start_killed() {
  return logic_error("start supervisor",
                     "the supervisor exited during start-up (signal 9 (SIGKILL)) after recvmsg: "
                     "Connection reset by peer (ECONNRESET)");
}

ExitStatus killed() {
  ExitStatus s;
  s.signal = 9;
  return s;
}

ExitStatus exit_code(int code) {
  ExitStatus s;
  s.exited = true;
  s.code = code;
  return s;
}

class FakeEnvironment : public providers::Environment {
 public:
  FakeEnvironment(std::string run_id, std::string tenant, std::string workspace,
                  const Script& script, Journal& journal)
      : run_id_(std::move(run_id)),
        tenant_(std::move(tenant)),
        workspace_(std::move(workspace)),
        script_(script),
        journal_(journal) {}
  const std::string& run_id() const override { return run_id_; }
  std::string workspace_host_path() const override { return workspace_; }
  std::string workspace_path() const override { return workspace_; }
  // The replay's processes are `sandgate-load hold ...` and `sandgate-load victim ...`.
  Result<ExecResult> exec(const providers::Call& call, const Placement&) override {
    // Journaled before on_started, as a real process has started before it is said to have:
    // the pass may go on (make the agents' runs) the moment it hears.
    std::string what = call.argv.size() > 1 ? call.argv[1] : "";
    journal_.add("start " + tenant_ + " " + what);
    if (call.on_started) call.on_started(::getpid());
    ExecResult r;
    r.status = exit_code(0);
    if (what == "victim") {
      if (script_.victim_status) {
        r.status = *script_.victim_status;
        r.stderr_data = "victim: bad arguments";
      } else {
        r.stdout_data = R"({"count":10,"p50_us":100,"p90_us":150,"p99_us":200,"max_us":250,
                            "missed_deadlines":0})";
      }
    }
    return r;
  }
  Status destroy() override { return {}; }

 private:
  std::string run_id_, tenant_, workspace_;
  const Script& script_;
  Journal& journal_;
};

class FakeProvider : public providers::Provider {
 public:
  FakeProvider(std::string workspaces, const Script& script, Journal& journal)
      : workspaces_(std::move(workspaces)), script_(script), journal_(journal) {
    info_.name = "fake";
  }
  const providers::ProviderInfo& info() const override { return info_; }
  Status available() const override { return {}; }
  Result<std::unique_ptr<providers::Environment>> create(const providers::EnvSpec& spec) override {
    const bool victim = spec.tenant == kVictimTenant;
    journal_.add("create " + spec.tenant);
    if (victim) std::this_thread::sleep_for(script_.victim_run_delay);
    if (victim && script_.victim_run_error) return *script_.victim_run_error;
    if (!victim && script_.agent_run_error) return *script_.agent_run_error;
    std::string ws = workspaces_ + "/" + spec.run_id;
    if (::mkdir(ws.c_str(), 0700) != 0) return sys_error("mkdir", ws);
    return std::unique_ptr<providers::Environment>(
        new FakeEnvironment(spec.run_id, spec.tenant, ws, script_, journal_));
  }

 private:
  providers::ProviderInfo info_;
  std::string workspaces_;
  const Script& script_;
  Journal& journal_;
};

// One agent whose run holds 1 MiB for 20 ms and makes no call, beside the victim.
class PassTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::mkdir((tmp_ / "ws").c_str(), 0700), 0);
    providers::ProviderInfo info;
    info.name = "fake";
    registry_.add(info, [this](const providers::ProviderOptions&) {
      return Result<std::unique_ptr<providers::Provider>>(
          std::unique_ptr<providers::Provider>(new FakeProvider(tmp_ / "ws", script_, journal_)));
    });
    options_.provider = "fake";
    options_.provider_options.paths.state_dir = tmp_ / "state";
    options_.provider_options.paths.id_range_dir = tmp_ / "id-ranges";
    options_.provider_options.paths.work_dir = tmp_ / "work";
    options_.provider_options.paths.proc = tmp_ / "proc";
    options_.provider_options.paths.cgroup = tmp_ / "cgroup";
    options_.cgroup_root = "sgtest";
    options_.load_binary = "/bin/true";  // only named in the runs' mounts; nothing runs it
    options_.victim = true;
    options_.cgroup_backend = [this] {
      return std::make_unique<controller::testing::FakeBackend>(
          controller::testing::FakeBackend::all_features(), tmp_ / "no-such-cgroupfs");
    };
    plan_.name = "agent";
    plan_.hold = {{0, 1u << 20}};
    plan_.duration_ms = 20;
  }
  Result<PolicyPass> pass(const std::string& policy = "none") {
    SG_ASSIGN_OR_RETURN(PolicyChoice choice, resolve_policy(policy, 0, 0));
    return run_policy_pass(registry_, choice, {plan_}, options_, std::nullopt);
  }

  sandgate::testing::TempDir tmp_;
  Script script_;
  Journal journal_;
  providers::Registry registry_;
  ExperimentOptions options_;
  ReplayPlan plan_;
};

// The agents fill the budget; a run started beside them was often killed while it started.
// So the victim's run is made, and its process started, before any agent's run, even when
// making its run is slow (here 300 ms, where the agent's is instant).
TEST_F(PassTest, TheVictimStartsBeforeAnyAgentRunIsMade) {
  script_.victim_run_delay = 300ms;
  auto p = pass();
  ASSERT_TRUE(p.ok()) << p.error().message();
  const size_t victim_started = journal_.at("start " + kVictimTenant + " victim");
  const size_t agent_made = journal_.at("create default");
  ASSERT_LT(victim_started, journal_.events().size()) << "the victim never started";
  ASSERT_LT(agent_made, journal_.events().size()) << "the agent's run was never made";
  std::string seen;
  for (const auto& e : journal_.events()) seen += e + "; ";
  EXPECT_LT(victim_started, agent_made) << seen;
  ASSERT_TRUE(p->scores.victim.has_value());
  EXPECT_TRUE(p->scores.victim_lost.empty());
  EXPECT_DOUBLE_EQ(p->scores.victim->p99_us, 200);
}

// The victim's run killed while it started is a victim lost, with its reason: the pass goes
// on, the agents run and are scored.
TEST_F(PassTest, AVictimWhoseRunCannotStartIsScoredAndTheAgentsStillRun) {
  script_.victim_run_error = start_killed();
  auto p = pass();
  ASSERT_TRUE(p.ok()) << "a victim killed at its start ended the pass: " << p.error().message();
  EXPECT_FALSE(p->scores.victim.has_value());
  EXPECT_NE(p->scores.victim_lost.find("could not start"), std::string::npos)
      << p->scores.victim_lost;
  EXPECT_NE(p->scores.victim_lost.find("SIGKILL"), std::string::npos) << p->scores.victim_lost;
  EXPECT_LT(journal_.at("start default hold"), journal_.events().size()) << "the agent ran";
  ASSERT_EQ(p->runs.size(), 1u);
  EXPECT_TRUE(p->runs[0].error.empty()) << p->runs[0].error;
  Json j = to_json(p->scores);
  EXPECT_EQ(j["victim"], Json(nullptr));
  EXPECT_EQ(j["victim_lost"], p->scores.victim_lost);
  std::string table = format_table({p->scores}, std::nullopt);
  EXPECT_NE(table.find("victim alive at the end    no"), std::string::npos) << table;
}

TEST_F(PassTest, AVictimKilledWhileItRunsIsScored) {
  script_.victim_status = killed();
  auto p = pass();
  ASSERT_TRUE(p.ok()) << "a victim killed while it ran ended the pass: " << p.error().message();
  EXPECT_FALSE(p->scores.victim.has_value());
  EXPECT_NE(p->scores.victim_lost.find("killed while it ran (signal 9 (SIGKILL))"),
            std::string::npos)
      << p->scores.victim_lost;
}

// The twin: a victim that ends with an error of its own was not killed by anything the pass
// measures; that is a defect, and the pass says so instead of scoring it.
TEST_F(PassTest, AVictimThatFailsOnItsOwnStillEndsThePass) {
  script_.victim_status = exit_code(2);
  auto p = pass();
  ASSERT_FALSE(p.ok()) << "a victim's own error was scored as a death";
  EXPECT_NE(p.error().message().find("bad arguments"), std::string::npos) << p.error().message();
  EXPECT_NE(p.error().message().find("victim under none"), std::string::npos)
      << p.error().message();
}

// An agent whose run cannot start never ran: it is an agent lost, not one surviving.
TEST_F(PassTest, AnAgentWhoseRunCannotStartIsLost) {
  script_.agent_run_error = start_killed();
  auto p = pass();
  ASSERT_TRUE(p.ok()) << p.error().message();
  ASSERT_EQ(p->runs.size(), 1u);
  EXPECT_TRUE(p->runs[0].start_failed);
  EXPECT_NE(p->runs[0].error.find("the run could not start"), std::string::npos)
      << p->runs[0].error;
  EXPECT_EQ(p->scores.runs, 1u);
  EXPECT_EQ(p->scores.run_errors, 1u);
  EXPECT_EQ(p->scores.agents_not_started, 1u);
  EXPECT_EQ(to_json(p->scores)["agents_not_started"], 1);
  std::string table = format_table({p->scores}, std::nullopt);
  EXPECT_NE(table.find("0/1 (1 never started)"), std::string::npos) << table;
  TrialFigures f;
  f.policy = "none";
  f.trials = {p->scores};
  bool found = false;
  for (const auto& m : summarize_trials({f}))
    if (m.metric == "agents_surviving") {
      found = true;
      ASSERT_EQ(m.intervals.size(), 1u);
      EXPECT_DOUBLE_EQ(m.intervals[0].estimate, 0);
    }
  EXPECT_TRUE(found);
  // The victim, started first, is unaffected.
  EXPECT_TRUE(p->scores.victim.has_value());
}

// A provider the policy disqualifies ends the pass with what it lacks, as before: it is not
// scored as runs that could not start.
TEST_F(PassTest, ADisqualifiedProviderEndsThePass) {
  auto choice = resolve_policy("none", 0, 0);
  ASSERT_TRUE(choice.ok());
  choice->policy.required_capabilities = {Capability::kNetNone};  // the fake declares nothing
  auto p = run_policy_pass(registry_, *choice, {plan_}, options_, std::nullopt);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message().find("net.none"), std::string::npos) << p.error().message();
  EXPECT_EQ(journal_.events().size(), 0u) << "nothing was made";
}

}  // namespace
}  // namespace sandgate::replay
