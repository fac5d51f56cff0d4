// External providers end to end, as root on this host's kernel: the reference bwrap provider
// passes `sandgate provider conformance`, and a provider's declared capabilities are tested,
// not believed: bwrap-provider with its network shared (tests/testdata/lying-bwrap-provider,
// still declaring net.none) is reported as contradicting net.none, inside the probe suite's
// own lab network namespace. Nothing is left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/files.h"
#include "core/json.h"
#include "core/process.h"
#include "probes/plan.h"
#include "probes/suite.h"
#include "providers/external.h"
#include "tests/support/cgroup_dirs.h"
#include "tests/support/provider_fixture.h"

namespace sandgate::testing {
namespace {

class ExternalE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/var/tmp/sgext-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmp_ = tmpl;
    ::chmod(tmp_.c_str(), 0711);
    paths_.state_dir = tmp_ + "/state";
    paths_.work_dir = tmp_ + "/work";
    cgroup_root_ = "sgtest-external-" + std::to_string(::getpid());
  }
  void TearDown() override {
    EXPECT_EQ(count_entries(paths_.state_dir + "/runs"), 0u) << "a run record was left";
    EXPECT_EQ(count_entries(paths_.work_dir), 0u) << "a run directory was left";
    expect_no_cgroup_left(cgroup_root_);
    (void)remove_tree(tmp_);
  }
  static std::string program(const std::string& relative) { return source_dir() + "/" + relative; }
  static bool have_bwrap() { return ::access("/usr/bin/bwrap", X_OK) == 0; }

  std::string tmp_, cgroup_root_;
  HostPaths paths_;
};

TEST_F(ExternalE2eTest, BwrapProviderPassesConformance) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_REQUIRE(have_bwrap(), "needs bubblewrap (ci/bootstrap installs it)");
  std::string json = tmp_ + "/conformance.json";
  auto r = run_command({SANDGATE_BINARY, "--state-dir", paths_.state_dir, "--work-dir",
                        paths_.work_dir, "--cgroup-root", cgroup_root_, "provider", "conformance",
                        "--json", json, "--", program("examples/providers/bwrap-provider")},
                       std::chrono::seconds(300));
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_TRUE(r->status.exited && r->status.code == 0) << r->status.describe() << "\n" << r->output;
  auto report = read_json_file(json);
  ASSERT_TRUE(report.ok()) << report.error().message();
  size_t passed = 0;
  for (const auto& c : (*report)["checks"]) {
    EXPECT_TRUE(c["passed"].get<bool>()) << c["name"] << ": " << c["detail"];
    passed += c["passed"].get<bool>();
  }
  // Not vacuous: the protocol checks and the calls checked from the host all ran.
  EXPECT_GE(passed, 24u);
}

// After kill -9 of sandgate mid-call: the provider sees its stdin end and tears down, and
// `sandgate gc` removes the rest from the run's record (run directory, cgroups, record).
TEST_F(ExternalE2eTest, GcCleansUpAfterSandgateIsKilledMidCall) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_REQUIRE(have_bwrap(), "needs bubblewrap (ci/bootstrap installs it)");
  const std::string tag = "299.0" + std::to_string(::getpid());  // a unique sleep argument
  // The call itself: `sleep TAG` (sandgate's and bwrap's command lines carry the tag too).
  auto calls = [&] {
    std::set<pid_t> out;
    for (pid_t pid : pids_with_argument(tag)) {
      auto comm = read_file("/proc/" + std::to_string(pid) + "/comm");
      if (comm.ok() && *comm == "sleep\n") out.insert(pid);
    }
    return out;
  };
  std::vector<std::string> global = {SANDGATE_BINARY, "--state-dir",   paths_.state_dir,
                                     "--work-dir",    paths_.work_dir, "--cgroup-root",
                                     cgroup_root_};
  std::vector<std::string> exec = global;
  for (const char* a : {"exec", "--provider"}) exec.push_back(a);
  exec.push_back("external:" + program("examples/providers/bwrap-provider"));
  for (const char* a : {"--", "sleep"}) exec.push_back(a);
  exec.push_back(tag);
  auto sandgate = spawn(exec);
  ASSERT_TRUE(sandgate.ok()) << sandgate.error().message();
  // Wait (bounded) until the call runs inside the sandbox.
  for (int i = 0; i < 600 && calls().empty(); ++i) ::usleep(100'000);
  ASSERT_FALSE(calls().empty()) << "the call never started";
  ASSERT_TRUE(sandgate->signal(SIGKILL).ok());
  ASSERT_TRUE(sandgate->wait().ok());
  std::vector<std::string> gc = global;
  gc.push_back("gc");
  auto r = run_command(gc, std::chrono::seconds(120));
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->status.code, 0) << r->output;
  // Nothing of the run is left: its processes (bwrap dies with its parent), and what
  // TearDown checks (records, run directories, cgroups).
  for (int i = 0; i < 100 && !pids_with_argument(tag).empty(); ++i) ::usleep(100'000);
  EXPECT_TRUE(pids_with_argument(tag).empty()) << "a process of the run outlived it";
}

// The negative twin: the fake provider runs calls with its own environment (and ignores cwd,
// timeouts and bad input), and conformance says so, check by check, with exit status 1.
TEST_F(ExternalE2eTest, ConformanceFailsAProviderThatLeaksItsEnvironment) {
  SANDGATE_REQUIRE_ROOT();
  std::string json = tmp_ + "/conformance.json";
  auto r =
      run_command({SANDGATE_BINARY, "--state-dir", paths_.state_dir, "--work-dir", paths_.work_dir,
                   "--cgroup-root", cgroup_root_, "provider", "conformance", "--json", json, "--",
                   program("providers/testdata/fake-provider"), "honest"},
                  std::chrono::seconds(300));
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->status.code, 1) << r->output;
  auto report = read_json_file(json);
  ASSERT_TRUE(report.ok()) << report.error().message();
  std::map<std::string, Json> checks;
  for (const auto& c : (*report)["checks"]) checks[c["name"].get<std::string>()] = c;
  ASSERT_TRUE(checks.count("exec.env_allowlist")) << dump_json(*report);
  EXPECT_FALSE(checks["exec.env_allowlist"]["passed"].get<bool>());
  EXPECT_NE(checks["exec.env_allowlist"]["detail"].get<std::string>().find(
                "the provider's own environment reached the call"),
            std::string::npos)
      << checks["exec.env_allowlist"]["detail"];
  // What it does do is credited: the describe is well formed, the status comes back.
  EXPECT_TRUE(checks["describe.well_formed"]["passed"].get<bool>())
      << checks["describe.well_formed"]["detail"];
  EXPECT_TRUE(checks["exec.exit_status"]["passed"].get<bool>())
      << checks["exec.exit_status"]["detail"];
}

// The CLI wiring, through the real binary (no root: --no-controller, no cgroups).
TEST_F(ExternalE2eTest, AnyCommandTakesExternalPath) {
  auto r = run_command({SANDGATE_BINARY, "--state-dir", paths_.state_dir, "--work-dir",
                        paths_.work_dir, "exec", "--no-controller", "--provider",
                        "external:" + program("providers/testdata/fake-provider"), "--", "echo",
                        "through the protocol"});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_TRUE(r->status.exited && r->status.code == 0) << r->output;
  EXPECT_NE(r->output.find("through the protocol"), std::string::npos) << r->output;
}

TEST_F(ExternalE2eTest, ProvidersConfigNamesAProvider) {
  std::string config = tmp_ + "/providers.json";
  Json c = {{"schema_version", 1},
            {"providers",
             {{{"name", "fake"},
               {"command", {program("providers/testdata/fake-provider"), "lie_net"}}}}}};
  ASSERT_TRUE(write_json_file_atomic(config, c).ok());
  auto r = run_command({SANDGATE_BINARY, "--providers-config", config, "providers", "--json"});
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->status.exited && r->status.code == 0) << r->output;
  auto listed = parse_json(r->output.substr(r->output.find('{')), "providers --json");
  ASSERT_TRUE(listed.ok()) << r->output;
  bool found = false;
  for (const auto& p : (*listed)["providers"])
    if (p["name"] == "external:fake") {
      found = true;
      // What it declared when it described itself, not a placeholder.
      EXPECT_EQ(p["capabilities"], Json::array({"net.none"})) << dump_json(p);
    }
  EXPECT_TRUE(found) << r->output;
  // A config that is wrong says where.
  Json bad = {{"schema_version", 1}, {"providers", {{{"name", "fake"}, {"cmd", {"x"}}}}}};
  ASSERT_TRUE(write_json_file_atomic(config, bad).ok());
  r = run_command({SANDGATE_BINARY, "--providers-config", config, "providers"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status.code, 2);
  EXPECT_NE(r->output.find("providers[0]: unknown key \"cmd\""), std::string::npos) << r->output;
}

class ContradictionTest : public ExternalE2eTest {
 protected:
  // The net boundary of the probe suite against one external program.
  Result<probes::ProviderRun> probe_net(const std::string& relative) {
    probes::SuiteOptions o;
    o.paths = paths_;
    o.cgroup_root = cgroup_root_;
    o.probe_binary = SANDGATE_PROBE_BINARY;
    o.only = {"net"};
    SG_ASSIGN_OR_RETURN(auto suite, probes::Suite::create(o));
    providers::ProviderOptions po;
    po.paths = paths_;
    SG_ASSIGN_OR_RETURN(auto provider, providers::ExternalProvider::make(
                                           po, {"external:" + relative, {program(relative)}, {}}));
    auto run = suite->run(*provider);
    SG_TRY(suite->close());
    return run;
  }
};

TEST_F(ContradictionTest, ALyingDeclarationIsContradictedByTheProbes) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_REQUIRE(have_bwrap(), "needs bubblewrap (ci/bootstrap installs it)");
  auto run = probe_net("tests/testdata/lying-bwrap-provider");
  ASSERT_TRUE(run.ok()) << run.error().message();
  ASSERT_TRUE(run->declared.count(Capability::kNetNone)) << "the liar declares net.none";
  auto k = run->contradictions();
  auto net = std::find_if(k.begin(), k.end(),
                          [](const auto& c) { return c.capability == Capability::kNetNone; });
  ASSERT_NE(net, k.end()) << "net.none was not reported contradicted";
  // The decoys in the lab saw the calls: metadata and the production host, at least.
  EXPECT_NE(std::find(net->probes.begin(), net->probes.end(), "net.metadata_v4_get"),
            net->probes.end());
  EXPECT_NE(std::find(net->probes.begin(), net->probes.end(), "net.production_tcp"),
            net->probes.end());
  EXPECT_FALSE(run->effective().count(Capability::kNetNone));
  auto j = run->to_json();
  EXPECT_EQ(j["contradicted_capabilities"][0]["capability"], "net.none")
      << dump_json(j["contradicted_capabilities"]);
}

TEST_F(ContradictionTest, AnHonestDeclarationStands) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_REQUIRE(have_bwrap(), "needs bubblewrap (ci/bootstrap installs it)");
  auto run = probe_net("examples/providers/bwrap-provider");
  ASSERT_TRUE(run.ok()) << run.error().message();
  for (const auto& c : run->contradictions())
    ADD_FAILURE() << to_string(c.capability) << " contradicted by " << c.probes.front();
  EXPECT_TRUE(run->effective().count(Capability::kNetNone));
  // Not vacuous: the metadata probe ran and was blocked.
  bool blocked = false;
  for (const auto& j : run->judgements)
    blocked |= j.id == "net.metadata_v4_get" && j.verdict == probes::Verdict::kBlocked;
  EXPECT_TRUE(blocked);
}

}  // namespace
}  // namespace sandgate::testing
