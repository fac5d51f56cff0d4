#include "controller/policy.h"

#include <gtest/gtest.h>

#include <functional>
#include <locale>
#include <map>
#include <ostream>
#include <regex>
#include <string>
#include <vector>

#include "core/fd.h"
#include "core/test_temp_dir.h"
#include "tests/support/privileged.h"

namespace sandgate::controller {

// gtest prints a Grant as its JSON, not as bytes (found by ADL: here, not in the anonymous
// namespace).
void PrintTo(const Grant& g, std::ostream* os) { *os << to_json(g).dump(); }

namespace {

using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

std::string testdata(const std::string& name) {
  return sandgate::testing::source_dir() + "/controller/testdata/" + name;
}

// Policy has no operator== (std::regex is not comparable): compare what matters.
void ExpectSamePolicy(const Policy& a, const Policy& b) {
  EXPECT_EQ(a.schema_version, b.schema_version);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.mode, b.mode);
  ASSERT_EQ(a.tenants.size(), b.tenants.size());
  for (const auto& [name, t] : a.tenants) {
    ASSERT_TRUE(b.tenants.contains(name)) << name;
    EXPECT_EQ(t.cpu_weight, b.tenants.at(name).cpu_weight) << name;
    EXPECT_EQ(t.memory_budget, b.tenants.at(name).memory_budget) << name;
  }
  EXPECT_EQ(a.run, b.run);
  EXPECT_EQ(a.intents, b.intents);
  ASSERT_EQ(a.inference.size(), b.inference.size());
  for (size_t i = 0; i < a.inference.size(); ++i) {
    EXPECT_EQ(a.inference[i].pattern, b.inference[i].pattern) << i;
    EXPECT_EQ(a.inference[i].intent, b.inference[i].intent) << i;
  }
  const LadderSettings &la = a.ladder, &lb = b.ladder;
  EXPECT_EQ(la.enabled, lb.enabled);
  EXPECT_EQ(la.sample_interval, lb.sample_interval);
  EXPECT_EQ(la.throttle_at, lb.throttle_at);
  EXPECT_EQ(la.throttle_cpu_fraction, lb.throttle_cpu_fraction);
  EXPECT_EQ(la.freeze_host_psi, lb.freeze_host_psi);
  EXPECT_EQ(la.thaw_host_psi, lb.thaw_host_psi);
  EXPECT_EQ(la.freeze_max, lb.freeze_max);
  EXPECT_EQ(la.freeze_budget_at, lb.freeze_budget_at);
  EXPECT_EQ(la.thaw_budget_at, lb.thaw_budget_at);
  EXPECT_EQ(la.budget_freeze_max, lb.budget_freeze_max);
  EXPECT_EQ(la.cancel_grace, lb.cancel_grace);
  EXPECT_EQ(la.psi_trigger_stall, lb.psi_trigger_stall);
  EXPECT_EQ(la.psi_trigger_window, lb.psi_trigger_window);
  EXPECT_EQ(la.runq_throttle_ms_per_s, lb.runq_throttle_ms_per_s);
  EXPECT_EQ(la.runq_window, lb.runq_window);
  EXPECT_EQ(la.net_throttle_bytes_per_s, lb.net_throttle_bytes_per_s);
  EXPECT_EQ(la.net_window, lb.net_window);
  EXPECT_EQ(a.required_capabilities, b.required_capabilities);
}

Result<Policy> parse_text(const std::string& text) {
  auto j = parse_json(text, "test");
  if (!j.ok()) return std::move(j).error();
  return parse_policy(*j, "test.json");
}

// ---------------------------------------------------------------------------------------------
// Built-in policies.

// The built-in policy file (controller/builtin_policy.json), compiled in.
Result<Policy> parse_builtin_file() {
  auto j = parse_json(std::string(builtin_policy_json()), "builtin_policy.json");
  if (!j.ok()) return std::move(j).error();
  return parse_policy(*j, "controller/builtin_policy.json");
}

TEST(BuiltinPolicyFile, ParsesWithTheStrictParser) {
  auto p = parse_builtin_file();
  ASSERT_TRUE(p.ok()) << p.error().message();
}

TEST(BuiltinPolicyFile, TheBinaryCarriesTheFileInTheSourceTree) {
  // A stale copy would mean the build did not notice an edit of the file.
  auto text = read_file(sandgate::testing::source_dir() + "/controller/builtin_policy.json");
  ASSERT_TRUE(text.ok()) << text.error().message() << " (is SANDGATE_SOURCE_DIR set?)";
  EXPECT_EQ(*text, builtin_policy_json());
}

TEST(DefaultPolicy, HasEveryRequiredIntentAndADefaultTenant) {
  const Policy& p = default_policy();
  EXPECT_EQ(p.schema_version, kPolicySchemaVersion);
  EXPECT_EQ(p.mode, PolicyMode::kPerCall);
  for (const auto& name : required_intents()) EXPECT_TRUE(p.intents.contains(name)) << name;
  ASSERT_TRUE(p.tenants.contains("default"));
  EXPECT_EQ(p.tenants.at("default").cpu_weight, 100u);
  EXPECT_FALSE(p.tenants.at("default").memory_budget);
}

// The values that matter, pinned: a change to controller/builtin_policy.json changes what every
// user without --policy gets, so it should be a deliberate edit here too (and in the README's
// reasons when they change).
Grant pinned(Bytes max, Bytes high, double cpu, uint64_t pids, Duration timeout, Bytes file_size) {
  Grant g;
  g.memory_max = max;
  g.memory_high = high;
  g.cpu_cores = cpu;
  g.pids_max = pids;
  g.open_files = 1024;  // every intent: the soft limit of a login shell
  g.file_size = file_size;
  g.timeout = timeout;
  return g;
}

TEST(DefaultPolicy, SizesForASmallHost) {
  const Policy& p = default_policy();
  EXPECT_EQ(p.name, "default");
  EXPECT_EQ(p.run, pinned(GiB(4), MiB(3584), 2.0, 1024, Duration(0), GiB(1)));
  const std::map<std::string, Grant> intents = {
      {"compile", pinned(GiB(2), MiB(1536), 2.0, 512, minutes(10), GiB(1))},
      {"test", pinned(MiB(1536), GiB(1), 2.0, 512, minutes(10), MiB(512))},
      {"install", pinned(GiB(1), MiB(768), 1.0, 256, minutes(10), GiB(1))},
      {"search", pinned(MiB(256), MiB(192), 1.0, 64, minutes(2), MiB(256))},
      {"edit", pinned(MiB(256), MiB(192), 0.5, 32, minutes(1), MiB(256))},
      {"run", pinned(GiB(1), MiB(768), 1.0, 256, minutes(10), MiB(512))},
      {"default", pinned(MiB(512), MiB(384), 1.0, 128, minutes(5), MiB(512))},
  };
  EXPECT_EQ(p.intents, intents);
  // Agents in the default tenant; a person's interactive work (a shell, an editor) beside them
  // in "interactive", weighted ten times an agent tenant so busy agent runs cannot starve it;
  // no budgets. No capability required, so every provider (host_dir too) can run it; the
  // ladder a policy file gets when it leaves "ladder" out.
  ASSERT_EQ(p.tenants.size(), 2u);
  EXPECT_EQ(p.tenants.at("default").cpu_weight, 100u);
  EXPECT_FALSE(p.tenants.at("default").memory_budget);
  EXPECT_EQ(p.tenants.at("interactive").cpu_weight, 1000u);
  EXPECT_FALSE(p.tenants.at("interactive").memory_budget);
  EXPECT_TRUE(p.required_capabilities.empty());
  const LadderSettings l;
  EXPECT_TRUE(p.ladder.enabled);
  EXPECT_EQ(p.ladder.sample_interval, l.sample_interval);
  EXPECT_EQ(p.ladder.throttle_at, l.throttle_at);
  EXPECT_EQ(p.ladder.throttle_cpu_fraction, l.throttle_cpu_fraction);
  EXPECT_EQ(p.ladder.freeze_host_psi, l.freeze_host_psi);
  EXPECT_EQ(p.ladder.thaw_host_psi, l.thaw_host_psi);
  EXPECT_EQ(p.ladder.freeze_max, l.freeze_max);
  EXPECT_EQ(p.ladder.freeze_budget_at, l.freeze_budget_at);
  EXPECT_EQ(p.ladder.thaw_budget_at, l.thaw_budget_at);
  EXPECT_EQ(p.ladder.budget_freeze_max, l.budget_freeze_max);
  EXPECT_EQ(p.ladder.cancel_grace, l.cancel_grace);
  EXPECT_EQ(p.ladder.psi_trigger_stall, l.psi_trigger_stall);
  EXPECT_EQ(p.ladder.psi_trigger_window, l.psi_trigger_window);
  // The run-queue rule is off: it needs the activity tracer and is a deployment's choice.
  EXPECT_EQ(p.ladder.runq_throttle_ms_per_s, 0);
  EXPECT_EQ(p.ladder.runq_window, l.runq_window);
  // So is the network rule: what burst a call may make is a deployment's choice.
  EXPECT_EQ(p.ladder.net_throttle_bytes_per_s, 0u);
  EXPECT_EQ(p.ladder.net_window, l.net_window);
}

// First match wins, so order is meaning: the specific rules come before the general ones.
// (ChooseIntent.InfersRealisticAgentCommands checks what the order decides.)
TEST(DefaultPolicy, InferenceRulesAreInTheirOrder) {
  std::vector<std::string> intents;
  for (const auto& r : default_policy().inference) intents.push_back(r.intent);
  const std::vector<std::string> expected = {
      "test",    "test",    "test",    "test",    "test",    "test",    "test",    "install",
      "install", "install", "install", "install", "install", "edit",    "edit",    "edit",
      "edit",    "compile", "compile", "compile", "compile", "compile", "compile", "compile",
      "search",  "search",  "search",  "run",     "run",     "run"};
  EXPECT_EQ(intents, expected);
  EXPECT_EQ(default_policy().inference.front().pattern,
            R"(^(pytest|py\.test|tox|nox|ctest|jest|vitest|mocha)(\s|$))");
  EXPECT_EQ(default_policy().inference.back().pattern, R"(^(ba|da|z|k)?sh(\s|$))");
}

TEST(DefaultPolicy, PassesItsOwnValidationAndRoundTrips) {
  Json j = to_json(default_policy());
  auto back = parse_policy(j, "default");
  ASSERT_TRUE(back.ok()) << back.error().message();
  ExpectSamePolicy(default_policy(), *back);
  // And once more through text, as a file would be.
  auto again = parse_text(j.dump(2));
  ASSERT_TRUE(again.ok()) << again.error().message();
  ExpectSamePolicy(default_policy(), *again);
}

TEST(DefaultPolicy, WritesSizesAndDurationsAsText) {
  Json j = to_json(default_policy());
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["mode"], "per_call");
  EXPECT_EQ(j["intents"]["compile"]["memory_max"], "2GiB");
  EXPECT_EQ(j["intents"]["compile"]["memory_high"], "1.50GiB");
  EXPECT_EQ(j["intents"]["compile"]["timeout"], "600s");
  EXPECT_EQ(j["intents"]["edit"]["cpu"], 0.5);
  EXPECT_EQ(j["ladder"]["sample_interval"], "20ms");
  EXPECT_FALSE(j["run"].contains("timeout"));  // 0: none, omitted
}

TEST(StaticPolicy, KeepsIntentsButGrantsOnlyTimeouts) {
  Grant ceiling;
  ceiling.memory_max = GiB(3);
  ceiling.cpu_cores = 1.5;
  Policy p = static_policy(ceiling);
  EXPECT_EQ(p.mode, PolicyMode::kStatic);
  EXPECT_EQ(p.run, ceiling);
  EXPECT_EQ(p.intents, default_policy().intents);  // kept for reporting
  for (const auto& name : required_intents()) {
    Grant g = grant_for(p, name);
    EXPECT_FALSE(g.memory_max) << name;
    EXPECT_FALSE(g.memory_high) << name;
    EXPECT_FALSE(g.cpu_cores) << name;
    EXPECT_FALSE(g.pids_max) << name;
    EXPECT_EQ(g.timeout, default_policy().intents.at(name).timeout) << name;
    EXPECT_EQ(g.to_limits(), Limits{}) << name;
  }
  // A static policy round-trips too, even with intents above its ceiling.
  auto back = parse_policy(to_json(p), "static");
  ASSERT_TRUE(back.ok()) << back.error().message();
  ExpectSamePolicy(p, *back);
}

TEST(GrantFor, PerCallModeGivesTheIntentsGrant) {
  const Policy& p = default_policy();
  EXPECT_EQ(grant_for(p, "compile"), p.intents.at("compile"));
  EXPECT_EQ(grant_for(p, "search"), p.intents.at("search"));
}

TEST(GrantFor, UnknownIntentFallsBackToDefault) {
  const Policy& p = default_policy();
  EXPECT_EQ(grant_for(p, "no-such-intent"), p.intents.at("default"));
}

TEST(GrantToLimits, CopiesTheCgroupFieldsButNotTheTimeout) {
  Grant g;
  g.memory_max = GiB(2);
  g.memory_high = MiB(1536);
  g.cpu_cores = 0.5;
  g.pids_max = 64;
  g.timeout = seconds(30);
  Limits l = g.to_limits();
  EXPECT_EQ(l.memory_max, GiB(2));
  EXPECT_EQ(l.memory_high, MiB(1536));
  EXPECT_EQ(l.cpu_cores, 0.5);
  EXPECT_EQ(l.pids_max, 64u);
  EXPECT_FALSE(l.cpu_weight);  // a tenant's, not a call's
  EXPECT_EQ(Grant{}.to_limits(), Limits{});
}

TEST(GrantToLimits, MapsIoRatesButLeavesTheDeviceToTheController) {
  Grant g;
  g.io_read_bps = MiB(50);
  Limits l = g.to_limits();
  EXPECT_EQ(l.io_read_bps, 52428800u);
  EXPECT_FALSE(l.io_write_bps);
  EXPECT_EQ(l.io_device, "");
  g.io_write_bps = MiB(10);
  EXPECT_EQ(g.to_limits().io_write_bps, 10485760u);
}

TEST(PolicyIo, ParsesWritesBackAndRoundTrips) {
  Json j = to_json(default_policy());
  j["run"]["io_read_bps"] = "200MiB";
  j["run"]["io_write_bps"] = "100MiB";
  j["intents"]["install"]["io_read_bps"] = "50MiB";
  j["intents"]["install"]["io_write_bps"] = "1MiB";    // the minimum
  j["intents"]["compile"]["io_write_bps"] = "100MiB";  // == the ceiling
  auto p = parse_policy(j, "io");
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(p->run.io_read_bps, MiB(200));
  EXPECT_EQ(p->run.io_write_bps, MiB(100));
  EXPECT_EQ(p->intents.at("install").io_read_bps, MiB(50));
  EXPECT_EQ(p->intents.at("install").io_write_bps, MiB(1));
  EXPECT_FALSE(p->intents.at("compile").io_read_bps);
  EXPECT_FALSE(p->intents.at("edit").io_read_bps);
  Json back = to_json(*p);
  EXPECT_EQ(back["intents"]["install"]["io_read_bps"], "50MiB");
  EXPECT_EQ(back["run"]["io_write_bps"], "100MiB");
  EXPECT_FALSE(back["intents"]["edit"].contains("io_read_bps"));
  auto again = parse_policy(back, "io again");
  ASSERT_TRUE(again.ok()) << again.error().message();
  ExpectSamePolicy(*p, *again);
  // The built-in policy grants no io limits.
  EXPECT_FALSE(default_policy().run.io_read_bps);
  for (const auto& [name, g] : default_policy().intents)
    EXPECT_FALSE(g.io_read_bps || g.io_write_bps) << name;
}

TEST(PolicyRlimits, ParsesWritesBackAndRoundTrips) {
  Json j = to_json(default_policy());
  j["intents"]["edit"]["open_files"] = 16;          // the minimum
  j["intents"]["edit"]["file_size"] = "1MiB";       // the minimum
  j["intents"]["compile"]["open_files"] = 1048576;  // fs.nr_open, the maximum
  j["intents"]["compile"]["file_size"] = "8GiB";
  j["intents"]["search"].erase("open_files");
  j["intents"]["search"].erase("file_size");
  auto p = parse_policy(j, "rlimits");
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(p->intents.at("edit").open_files, 16u);
  EXPECT_EQ(p->intents.at("edit").file_size, MiB(1));
  EXPECT_EQ(p->intents.at("compile").open_files, 1048576u);
  EXPECT_EQ(p->intents.at("compile").file_size, GiB(8));
  EXPECT_FALSE(p->intents.at("search").open_files);
  EXPECT_FALSE(p->intents.at("search").file_size);
  Json back = to_json(*p);
  EXPECT_EQ(back["intents"]["edit"]["open_files"], 16);
  EXPECT_EQ(back["intents"]["compile"]["file_size"], "8GiB");
  EXPECT_FALSE(back["intents"]["search"].contains("open_files"));
  auto again = parse_policy(back, "rlimits again");
  ASSERT_TRUE(again.ok()) << again.error().message();
  ExpectSamePolicy(*p, *again);
}

TEST(PolicyRlimits, DefaultPolicyGrantsThemToEveryIntent) {
  const Policy& p = default_policy();
  EXPECT_EQ(p.run.open_files, 1024u);
  EXPECT_EQ(p.run.file_size, GiB(1));
  for (const auto& name : required_intents()) {
    const Grant& g = p.intents.at(name);
    EXPECT_EQ(g.open_files, 1024u) << name;
    ASSERT_TRUE(g.file_size) << name;
    EXPECT_GE(*g.file_size, MiB(256)) << name;
    EXPECT_LE(*g.file_size, GiB(1)) << name;
  }
  EXPECT_EQ(p.intents.at("compile").file_size, GiB(1));
  EXPECT_EQ(p.intents.at("edit").file_size, MiB(256));
}

TEST(PolicyRlimits, ToProcessLimitsCarriesThemAndNothingElse) {
  Grant g;
  g.memory_max = GiB(1);
  EXPECT_TRUE(g.to_process_limits().empty());
  g.open_files = 64;
  g.file_size = MiB(2);
  ProcessLimits l = g.to_process_limits();
  EXPECT_EQ(l.open_files, 64u);
  EXPECT_EQ(l.file_size, 2097152u);
  // Not cgroup limits: to_limits leaves them out.
  EXPECT_EQ(g.to_limits().memory_max, GiB(1));
}

TEST(PolicyRlimits, StaticModeGivesEveryCallTheRunsRlimits) {
  Grant ceiling;
  ceiling.memory_max = GiB(3);
  ceiling.open_files = 256;
  ceiling.file_size = MiB(64);
  Policy p = static_policy(ceiling);
  for (const auto& name : required_intents()) {
    Grant g = grant_for(p, name);
    EXPECT_FALSE(g.memory_max) << name;
    EXPECT_EQ(g.open_files, 256u) << name;
    EXPECT_EQ(g.file_size, MiB(64)) << name;
  }
}

TEST(GrantToJson, OmitsUnsetFields) {
  EXPECT_EQ(to_json(Grant{}), Json::object());
  Grant g;
  g.cpu_cores = 1.5;
  g.timeout = milliseconds(250);
  EXPECT_EQ(to_json(g), (Json{{"cpu", 1.5}, {"timeout", "250ms"}}));
}

TEST(PolicyMode, Names) {
  EXPECT_EQ(to_string(PolicyMode::kPerCall), "per_call");
  EXPECT_EQ(to_string(PolicyMode::kStatic), "static");
}

// ---------------------------------------------------------------------------------------------
// Files.

TEST(PolicyFile, ExampleLoadsWithEveryField) {
  auto p = load_policy_file(testdata("policy_example.json"));
  ASSERT_TRUE(p.ok()) << p.error().message() << " (is SANDGATE_SOURCE_DIR set?)";
  EXPECT_EQ(p->name, "ci-4core-16g");
  EXPECT_EQ(p->mode, PolicyMode::kPerCall);
  ASSERT_EQ(p->tenants.size(), 3u);
  EXPECT_EQ(p->tenants.at("team-a").cpu_weight, 300u);
  EXPECT_EQ(p->tenants.at("team-a").memory_budget, GiB(8));
  EXPECT_EQ(p->tenants.at("default").cpu_weight, 100u);
  EXPECT_EQ(p->run.memory_max, GiB(8));
  EXPECT_EQ(p->run.timeout, std::chrono::hours(2));
  EXPECT_EQ(p->intents.at("install").memory_high, MiB(1536));
  EXPECT_EQ(p->intents.at("edit").cpu_cores, 0.5);
  EXPECT_EQ(p->intents.at("compile").open_files, 4096u);
  EXPECT_EQ(p->intents.at("compile").file_size, GiB(2));
  EXPECT_TRUE(p->intents.contains("bench"));  // extra intents are allowed
  ASSERT_EQ(p->inference.size(), 8u);
  EXPECT_EQ(p->inference[0].intent, "bench");
  EXPECT_EQ(p->ladder.sample_interval, milliseconds(50));
  EXPECT_EQ(p->ladder.throttle_at, 0.85);
  EXPECT_EQ(p->ladder.freeze_max, seconds(3));
  EXPECT_EQ(p->ladder.runq_throttle_ms_per_s, 200);
  EXPECT_EQ(p->ladder.runq_window, milliseconds(1500));
  EXPECT_EQ(p->required_capabilities,
            (std::vector<Capability>{Capability::kFsIsolated, Capability::kNetNone,
                                     Capability::kProcPidNs, Capability::kLimitsPerCall}));

  auto back = parse_policy(to_json(*p), "example");
  ASSERT_TRUE(back.ok()) << back.error().message();
  ExpectSamePolicy(*p, *back);

  auto bench = choose_intent(*p, std::nullopt, {"./build/sort_bench", "--iterations=5"});
  ASSERT_TRUE(bench.ok());
  EXPECT_EQ(bench->intent, "bench");
}

TEST(PolicyFile, MinimalTakesDefaults) {
  auto p = load_policy_file(testdata("policy_minimal.json"));
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(p->name, "default");
  EXPECT_EQ(p->mode, PolicyMode::kPerCall);
  ASSERT_EQ(p->tenants.size(), 1u);
  EXPECT_EQ(p->tenants.at("default").cpu_weight, 100u);
  EXPECT_EQ(p->run, Grant{});
  EXPECT_TRUE(p->inference.empty());
  EXPECT_TRUE(p->ladder.enabled);
  EXPECT_EQ(p->ladder.sample_interval, LadderSettings{}.sample_interval);
  EXPECT_TRUE(p->required_capabilities.empty());
  auto c = choose_intent(*p, std::nullopt, {"make"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->intent, "default");
  EXPECT_EQ(c->because, "no rule matched");
}

TEST(PolicyFile, MissingFileNamesIt) {
  auto p = load_policy_file(testdata("policy_does_not_exist.json"));
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message().find("policy_does_not_exist.json"), std::string::npos)
      << p.error().message();
  EXPECT_EQ(p.error().err, ENOENT);
}

TEST(PolicyFile, BadSyntaxNamesFileLineAndColumn) {
  auto p = load_policy_file(testdata("policy_bad_syntax.json"));
  ASSERT_FALSE(p.ok());
  std::string m = p.error().message();
  EXPECT_NE(m.find("policy_bad_syntax.json"), std::string::npos) << m;
  EXPECT_NE(m.find("line 5 column 38"), std::string::npos) << m;
}

// A 50 MB number or key in a policy was echoed whole: the parser quotes an excerpt, and the
// number too large for a double (nlohmann's out_of_range, with no position) is no exception.
TEST(PolicyFile, HugeInputIsQuotedAsAShortExcerpt) {
  testing::TempDir dir;
  const std::string big(100000, '9');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a number too large for a double", R"({"schema_version":)" + big + "}"},
      {"a bad escape at the end of a long string",
       R"({"schema_version":")" + std::string(100000, 'x') + R"(\q"})"},
      {"an unknown key", R"({"schema_version":1,")" + std::string(100000, 'k') + R"(":1})"},
      {"a long string value", R"({"schema_version":")" + big + R"("})"},
  };
  for (const auto& [what, text] : cases) {
    std::string path = dir / "big.json";
    ASSERT_TRUE(write_file(path, text, O_WRONLY | O_CREAT | O_TRUNC).ok());
    auto p = load_policy_file(path);
    ASSERT_FALSE(p.ok()) << what;
    std::string m = p.error().message();
    EXPECT_LT(m.size(), 600u) << what << ": " << m.substr(0, 600);
    EXPECT_NE(m.find("big.json"), std::string::npos) << what;
    EXPECT_NE(m.find("more bytes]"), std::string::npos) << what << ": " << m.substr(0, 600);
  }
}

TEST(PolicyFile, UnknownNestedKeyNamesFileAndPath) {
  auto p = load_policy_file(testdata("policy_bad_nested_key.json"));
  ASSERT_FALSE(p.ok());
  std::string m = p.error().message();
  EXPECT_NE(m.find("policy_bad_nested_key.json"), std::string::npos) << m;
  EXPECT_NE(m.find("intents.compile.memroy_high: unknown key (did you mean 'memory_high'?)"),
            std::string::npos)
      << m;
}

TEST(PolicyFile, NewerSchemaIsRefusedAsNewerNotForItsKeys) {
  auto p = load_policy_file(testdata("policy_bad_version.json"));
  ASSERT_FALSE(p.ok());
  std::string m = p.error().message();
  EXPECT_NE(m.find("schema_version: expected 1, got 2"), std::string::npos) << m;
  EXPECT_EQ(m.find("priorities"), std::string::npos) << m;
}

// ---------------------------------------------------------------------------------------------
// Errors: each mutation of a valid policy must fail with the exact path and what was wrong.

struct ErrorCase {
  const char* name;
  std::function<void(Json&)> mutate;
  std::string expected;  // substring of the message, starting with the path
};

TEST(PolicyErrors, EveryKindNamesThePathAndWhatWasExpected) {
  const std::vector<ErrorCase> cases = {
      {"unknown top-level key", [](Json& j) { j["tennants"] = Json::object(); },
       "tennants: unknown key (did you mean 'tenants'?); known keys here: schema_version, name"},
      {"unknown key in an intent", [](Json& j) { j["intents"]["compile"]["memory"] = "1GiB"; },
       "intents.compile.memory: unknown key"},
      {"open_files as a string", [](Json& j) { j["intents"]["test"]["open_files"] = "1024"; },
       "intents.test.open_files: expected an integer from 16 to 1048576, got \"1024\""},
      {"open_files too small", [](Json& j) { j["intents"]["edit"]["open_files"] = 8; },
       "intents.edit.open_files: expected an integer from 16 to 1048576, got 8"},
      {"open_files past nr_open", [](Json& j) { j["run"]["open_files"] = 2000000; },
       "run.open_files: expected an integer from 16 to 1048576, got 2000000"},
      {"file_size as a number", [](Json& j) { j["intents"]["compile"]["file_size"] = 1024; },
       "intents.compile.file_size: expected a size like \"512MiB\", got 1024"},
      {"file_size without a unit", [](Json& j) { j["intents"]["install"]["file_size"] = "4096"; },
       "intents.install.file_size: 4KiB is below the minimum of 1MiB"},
      {"misspelt open_files", [](Json& j) { j["intents"]["run"]["open_file"] = 64; },
       "intents.run.open_file: unknown key (did you mean 'open_files'?)"},
      {"unknown key in a tenant", [](Json& j) { j["tenants"]["default"]["weight"] = 5; },
       "tenants.default.weight: unknown key"},
      {"unknown key in the ladder", [](Json& j) { j["ladder"]["freeze_at"] = 1; },
       "ladder.freeze_at: unknown key"},
      {"unknown key in a rule", [](Json& j) { j["inference"][1]["why"] = "x"; },
       "inference[1].why: unknown key"},
      {"unknown key in run", [](Json& j) { j["run"]["swap_max"] = "0B"; },
       "run.swap_max: unknown key"},
      {"missing schema_version", [](Json& j) { j.erase("schema_version"); },
       "schema_version: missing (expected 1)"},
      {"schema_version 2", [](Json& j) { j["schema_version"] = 2; },
       "schema_version: expected 1, got 2"},
      {"schema_version as a string", [](Json& j) { j["schema_version"] = "1"; },
       "schema_version: expected 1, got \"1\""},
      {"top level not an object", [](Json& j) { j = Json::array(); },
       "(top level): expected an object, got an array"},
      {"name wrong type", [](Json& j) { j["name"] = 7; }, "name: expected a string, got 7"},
      {"bad mode", [](Json& j) { j["mode"] = "dynamic"; },
       "mode: expected \"per_call\" or \"static\", got \"dynamic\""},
      {"size as a number", [](Json& j) { j["intents"]["compile"]["memory_max"] = 12; },
       "intents.compile.memory_max: expected a size like \"512MiB\", got 12"},
      {"size with a bad unit", [](Json& j) { j["intents"]["test"]["memory_max"] = "2GB!"; },
       "intents.test.memory_max: expected a size like \"512MiB\", got \"2GB!\" (unknown unit"},
      {"size without a unit is too small",
       [](Json& j) { j["intents"]["edit"]["memory_max"] = "512"; },
       "intents.edit.memory_max: 512B is below the minimum of 1MiB"},
      {"bad tenant budget", [](Json& j) { j["tenants"]["default"]["memory_budget"] = true; },
       "tenants.default.memory_budget: expected a size like \"512MiB\", got true"},
      {"duration without a unit", [](Json& j) { j["intents"]["run"]["timeout"] = "30"; },
       "intents.run.timeout: expected a duration like \"250ms\", got \"30\" ('30' has no unit"},
      {"duration as a number", [](Json& j) { j["ladder"]["freeze_max"] = 2; },
       "ladder.freeze_max: expected a duration like \"250ms\", got 2"},
      {"cpu as a string", [](Json& j) { j["intents"]["search"]["cpu"] = "1"; },
       "intents.search.cpu: expected a number of cores >= 0.01 like 0.5 or 2, got \"1\""},
      {"cpu zero", [](Json& j) { j["run"]["cpu"] = 0; },
       "run.cpu: expected a number of cores >= 0.01 like 0.5 or 2, got 0"},
      {"io_read_bps as a number", [](Json& j) { j["intents"]["install"]["io_read_bps"] = 50; },
       "intents.install.io_read_bps: expected a size like \"512MiB\", got 50"},
      {"io_write_bps without a unit is too small",
       [](Json& j) { j["run"]["io_write_bps"] = "4096"; },
       "run.io_write_bps: 4KiB is below the minimum of 1MiB"},
      {"io_write_bps with a bad unit",
       [](Json& j) { j["intents"]["test"]["io_write_bps"] = "50MB/s"; },
       "intents.test.io_write_bps: expected a size like \"512MiB\", got \"50MB/s\""},
      {"io misspelt", [](Json& j) { j["intents"]["test"]["io_read_bp"] = "50MiB"; },
       "intents.test.io_read_bp: unknown key (did you mean 'io_read_bps'?)"},
      {"io intent over the run ceiling",
       [](Json& j) {
         j["run"]["io_read_bps"] = "50MiB";
         j["intents"]["install"]["io_read_bps"] = "100MiB";
       },
       "intents.install.io_read_bps (100MiB) exceeds run.io_read_bps (50MiB)"},
      {"pids negative", [](Json& j) { j["intents"]["edit"]["pids_max"] = -1; },
       "intents.edit.pids_max: expected an integer from 1 to 4194304, got -1"},
      {"pids fractional", [](Json& j) { j["intents"]["edit"]["pids_max"] = 1.5; },
       "intents.edit.pids_max: expected an integer from 1 to 4194304, got 1.5"},
      {"cpu_weight out of range", [](Json& j) { j["tenants"]["default"]["cpu_weight"] = 10001; },
       "tenants.default.cpu_weight: expected an integer from 1 to 10000, got 10001"},
      {"tenant name unsafe", [](Json& j) { j["tenants"]["../x"] = Json::object(); },
       "tenants[\"../x\"]: a tenant name must be"},
      {"intent not an object", [](Json& j) { j["intents"]["install"] = "1GiB"; },
       "intents.install: expected an object, got \"1GiB\""},
      {"missing required intent", [](Json& j) { j["intents"].erase("search"); },
       "intents: missing required intent 'search' (every policy defines compile, test, install, "
       "search, edit, run, default)"},
      {"missing intents", [](Json& j) { j.erase("intents"); }, "intents: missing"},
      {"high above max",
       [](Json& j) {
         j["intents"]["test"]["memory_max"] = "1GiB";
         j["intents"]["test"]["memory_high"] = "2GiB";
       },
       "intents.test.memory_high (2GiB) exceeds memory_max (1GiB)"},
      {"run high above run max", [](Json& j) { j["run"]["memory_high"] = "5GiB"; },
       "run.memory_high (5GiB) exceeds memory_max (4GiB)"},
      {"intent above the run ceiling",
       [](Json& j) { j["intents"]["compile"]["memory_max"] = "8GiB"; },
       "intents.compile.memory_max (8GiB) exceeds run.memory_max (4GiB)"},
      {"inference not an array", [](Json& j) { j["inference"] = Json::object(); },
       "inference: expected an array"},
      {"unknown intent in inference", [](Json& j) { j["inference"][2]["intent"] = "buld"; },
       "inference[2].intent 'buld' is not a defined intent (defined: compile, default, edit"},
      {"bad regex", [](Json& j) { j["inference"][0]["match"] = "^(make"; },
       "inference[0].match is not a valid regex: "},
      {"regex count that overflows",
       [](Json& j) { j["inference"][0]["match"] = "^a{5555555555555555555}"; },
       "inference[0].match: its repetition counts ({n} and {n,m}) multiply to more than 10000"},
      {"regex counts that multiply",
       [](Json& j) { j["inference"][0]["match"] = "^((ab){200}c){1,60}"; },
       "inference[0].match: its repetition counts ({n} and {n,m}) multiply to more than 10000"},
      {"regex back-reference that overflows",
       [](Json& j) { j["inference"][0]["match"] = "^(a)\\5555555555555555555"; },
       "inference[0].match: a back-reference above \\99"},
      {"rule without match", [](Json& j) { j["inference"][3].erase("match"); },
       "inference[3].match: missing"},
      {"rule match wrong type", [](Json& j) { j["inference"][3]["match"] = 3; },
       "inference[3].match: expected a regex string, got 3"},
      {"bad capability",
       [](Json& j) {
         j["requires"] = {"fs.isolated", "net.nonee"};
       },
       "requires[1]: unknown capability 'net.nonee' (known: fs.isolated"},
      {"requires not an array", [](Json& j) { j["requires"] = "net.none"; },
       "requires: expected an array of capability names, got \"net.none\""},
      {"egress not an array", [](Json& j) { j["egress"] = "203.0.113.20:443"; },
       "egress: expected an array of entries like \"203.0.113.20:443\""},
      {"egress entry with a wildcard name",
       [](Json& j) {
         j["egress"] = {"203.0.113.20:443", "*.example:443"};
       },
       "egress[1]: \"*.example:443\": \"*.example\" is not a host name: wildcards are not "
       "supported"},
      {"egress name with a prefix", [](Json& j) { j["egress"] = {"registry.example/24:443"}; },
       "egress[0]: \"registry.example/24:443\": a name takes no /PREFIX"},
      {"base not an object", [](Json& j) { j["base"] = Json::array({"/usr/bin"}); },
       "base: expected an object"},
      {"base without allow", [](Json& j) { j["base"] = Json::object(); },
       "base.allow: missing (an array of host paths)"},
      {"base.allow empty",
       [](Json& j) {
         j["base"] = {{"allow", Json::array()}};
       },
       "base.allow: expected a non-empty array of absolute host paths"},
      {"base.allow relative entry",
       [](Json& j) {
         j["base"] = {{"allow", {"/usr/bin", "usr/lib"}}};
       },
       "base.allow[1]: 'usr/lib' is not an absolute path (nor the preset \"minimal\")"},
      {"base.allow entry a number",
       [](Json& j) {
         j["base"] = {{"allow", {7}}};
       },
       "base.allow[0]: expected an absolute host path like \"/usr/bin\", got 7"},
      {"base key misspelt",
       [](Json& j) {
         j["base"] = {{"alow", {"/usr/bin"}}};
       },
       "base.alow: unknown key"},
      {"ladder enabled wrong type", [](Json& j) { j["ladder"]["enabled"] = "yes"; },
       "ladder.enabled: expected true or false, got \"yes\""},
      {"throttle_at zero", [](Json& j) { j["ladder"]["throttle_at"] = 0; },
       "ladder.throttle_at: expected a fraction of memory_max in (0, 1] like 0.9, got 0"},
      {"throttle_cpu_fraction above one",
       [](Json& j) { j["ladder"]["throttle_cpu_fraction"] = 1.5; },
       "ladder.throttle_cpu_fraction: expected a fraction of the granted cores in (0, 1]"},
      {"thaw above freeze", [](Json& j) { j["ladder"]["thaw_host_psi"] = 50; },
       "ladder.thaw_host_psi (50.0) must be below freeze_host_psi (40.0)"},
      {"budget thaw above freeze", [](Json& j) { j["ladder"]["thaw_budget_at"] = 0.95; },
       "ladder.thaw_budget_at (0.95) must be below freeze_budget_at (0.9)"},
      {"budget fraction above one", [](Json& j) { j["ladder"]["freeze_budget_at"] = 1.5; },
       "ladder.freeze_budget_at: expected a fraction of the memory budget in [0, 1]"},
      {"budget freeze max zero", [](Json& j) { j["ladder"]["budget_freeze_max"] = "0s"; },
       "ladder.budget_freeze_max: must be greater than 0"},
      {"psi window too short", [](Json& j) { j["ladder"]["psi_trigger_window"] = "100ms"; },
       "ladder.psi_trigger_window: must be from 500ms to 10s"},
      {"psi stall longer than window", [](Json& j) { j["ladder"]["psi_trigger_stall"] = "3s"; },
       "ladder.psi_trigger_stall: must be greater than 0 and at most psi_trigger_window (2s)"},
      {"sample interval zero", [](Json& j) { j["ladder"]["sample_interval"] = "0ms"; },
       "ladder.sample_interval: must be greater than 0"},
      {"runq threshold negative", [](Json& j) { j["ladder"]["runq_throttle_ms_per_s"] = -1; },
       "ladder.runq_throttle_ms_per_s: expected milliseconds of run-queue delay per second of "
       "wall time, from 0 (off) to 1000000, like 200, got -1"},
      {"runq threshold a string", [](Json& j) { j["ladder"]["runq_throttle_ms_per_s"] = "200ms"; },
       "ladder.runq_throttle_ms_per_s: expected milliseconds of run-queue delay per second"},
      {"runq window too short", [](Json& j) { j["ladder"]["runq_window"] = "50ms"; },
       "ladder.runq_window: must be from 100ms to 1m, got 50ms"},
      {"runq window a number", [](Json& j) { j["ladder"]["runq_window"] = 1; },
       "ladder.runq_window: expected a duration like \"250ms\", got 1"},
      {"runq window under two samples",
       [](Json& j) {
         j["ladder"]["runq_throttle_ms_per_s"] = 100;
         j["ladder"]["sample_interval"] = "200ms";
         j["ladder"]["runq_window"] = "300ms";
       },
       "ladder.runq_window (300ms) must be at least twice sample_interval (200ms)"},
      {"runq key misspelt", [](Json& j) { j["ladder"]["runq_throtle_ms_per_s"] = 100; },
       "ladder.runq_throtle_ms_per_s: unknown key (did you mean 'runq_throttle_ms_per_s'?)"},
      {"net threshold negative", [](Json& j) { j["ladder"]["net_throttle_bytes_per_s"] = -1; },
       "ladder.net_throttle_bytes_per_s: expected 0 (off) or a size per second like \"10MiB\" "
       "(at least 64KiB), got -1"},
      {"net threshold a forgotten unit",
       [](Json& j) { j["ladder"]["net_throttle_bytes_per_s"] = "10"; },
       "ladder.net_throttle_bytes_per_s: 10B per second is below the minimum of 64KiB"},
      {"net threshold a small number",
       [](Json& j) { j["ladder"]["net_throttle_bytes_per_s"] = 4096; },
       "ladder.net_throttle_bytes_per_s: 4KiB per second is below the minimum of 64KiB"},
      {"net threshold not a size",
       [](Json& j) { j["ladder"]["net_throttle_bytes_per_s"] = "fast"; },
       "ladder.net_throttle_bytes_per_s: expected 0 (off) or a size per second like \"10MiB\" "
       "(at least 64KiB), got \"fast\""},
      {"net threshold a fraction", [](Json& j) { j["ladder"]["net_throttle_bytes_per_s"] = 1.5; },
       "ladder.net_throttle_bytes_per_s: expected 0 (off) or a size per second"},
      {"net threshold a boolean", [](Json& j) { j["ladder"]["net_throttle_bytes_per_s"] = true; },
       "ladder.net_throttle_bytes_per_s: expected 0 (off) or a size per second"},
      {"net window too long", [](Json& j) { j["ladder"]["net_window"] = "2m"; },
       "ladder.net_window: must be from 100ms to 1m, got 120s"},
      {"net window a number", [](Json& j) { j["ladder"]["net_window"] = 1; },
       "ladder.net_window: expected a duration like \"250ms\", got 1"},
      {"net window under two samples",
       [](Json& j) {
         j["ladder"]["net_throttle_bytes_per_s"] = "10MiB";
         j["ladder"]["sample_interval"] = "200ms";
         j["ladder"]["net_window"] = "300ms";
       },
       "ladder.net_window (300ms) must be at least twice sample_interval (200ms)"},
      {"net key misspelt", [](Json& j) { j["ladder"]["net_throttle_bytes_per_sec"] = "1MiB"; },
       "ladder.net_throttle_bytes_per_sec: unknown key (did you mean 'net_throttle_bytes_per_s'?)"},
  };
  for (const auto& c : cases) {
    Json j = to_json(default_policy());
    c.mutate(j);
    auto p = parse_policy(j, "case.json");
    ASSERT_FALSE(p.ok()) << c.name;
    std::string m = p.error().message();
    EXPECT_EQ(m.rfind("parse policy case.json: ", 0), 0u) << c.name << ": " << m;
    EXPECT_NE(m.find(c.expected), std::string::npos)
        << c.name << "\n  expected: " << c.expected << "\n  got:      " << m;
  }
}

// Positive twins of the semantic checks: the boundary values are accepted.
TEST(PolicyErrors, BoundaryValuesAreAccepted) {
  Json j = to_json(default_policy());
  j["intents"]["test"]["memory_high"] = "1536MiB";  // == memory_max
  j["intents"]["compile"]["memory_max"] = "4GiB";   // == run.memory_max
  j["intents"]["compile"]["memory_high"] = "3GiB";
  j["tenants"]["t1"] = {{"cpu_weight", 1}};
  j["tenants"]["t2"] = {{"cpu_weight", 10000}, {"memory_budget", "1MiB"}};
  j["ladder"]["throttle_at"] = 1;
  j["ladder"]["psi_trigger_stall"] = "1s";  // == window
  j["ladder"]["psi_trigger_window"] = "1s";
  j["ladder"]["thaw_host_psi"] = 0;
  j["intents"]["edit"]["cpu"] = 0.01;
  j["ladder"]["runq_throttle_ms_per_s"] = 1000000;
  j["ladder"]["runq_window"] = "100ms";  // == 5 x the 20ms sample_interval, the minimum window
  j["ladder"]["net_throttle_bytes_per_s"] = "64KiB";  // the minimum
  j["ladder"]["net_window"] = "1m";                   // the maximum
  j["inference"][0]["match"] = "^(a{100}b){0,100}";   // counts multiply to 10000
  j["inference"][1]["match"] = "^x\\{99999}[{]99999 y{1,}";  // literal braces; no upper count
  j["inference"][2]["match"] = "^(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)\\10";  // a two-digit back-reference
  auto p = parse_policy(j, "boundaries");
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(p->tenants.at("t2").memory_budget, MiB(1));
  EXPECT_EQ(p->ladder.net_throttle_bytes_per_s, 64u << 10);
  EXPECT_EQ(p->ladder.net_window, std::chrono::minutes(1));
}

// The network threshold reads as a size per second or as a number of bytes; 0 is off, and the
// written file reads back the same.
TEST(PolicyNetRule, ThresholdFormsAndRoundTrip) {
  Json j = to_json(default_policy());
  EXPECT_EQ(j["ladder"]["net_throttle_bytes_per_s"], 0);
  EXPECT_EQ(j["ladder"]["net_window"], "1s");
  j["ladder"]["net_throttle_bytes_per_s"] = "10MiB";
  j["ladder"]["net_window"] = "500ms";
  auto p = parse_policy(j, "x");
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(p->ladder.net_throttle_bytes_per_s, 10u << 20);
  EXPECT_EQ(p->ladder.net_window, std::chrono::milliseconds(500));
  Json back = to_json(*p);
  EXPECT_EQ(back["ladder"]["net_throttle_bytes_per_s"], "10MiB");
  auto again = parse_policy(back, "x");
  ASSERT_TRUE(again.ok()) << again.error().message();
  ExpectSamePolicy(*p, *again);
  j["ladder"]["net_throttle_bytes_per_s"] = 3000000;  // bytes; decimal units too
  p = parse_policy(j, "x");
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(p->ladder.net_throttle_bytes_per_s, 3000000u);
  j["ladder"]["net_throttle_bytes_per_s"] = "3MB";
  p = parse_policy(j, "x");
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(p->ladder.net_throttle_bytes_per_s, 3000000u);
  j["ladder"]["net_throttle_bytes_per_s"] = "0";
  p = parse_policy(j, "x");
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(p->ladder.net_throttle_bytes_per_s, 0u);
  // Off, a short window is no error: no rate is compared.
  j["ladder"]["sample_interval"] = "200ms";
  j["ladder"]["net_window"] = "300ms";
  EXPECT_TRUE(parse_policy(j, "x").ok());
}

TEST(PolicyErrors, StaticModeMayExceedTheCeilingPerCallMayNot) {
  Json j = to_json(default_policy());
  j["run"]["memory_max"] = "1GiB";
  j["run"]["memory_high"] = "768MiB";
  EXPECT_FALSE(parse_policy(j, "x").ok());
  j["mode"] = "static";
  auto p = parse_policy(j, "x");
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(p->mode, PolicyMode::kStatic);
}

TEST(PolicyEgress, EntriesParseAndRoundTrip) {
  Json j = to_json(default_policy());
  EXPECT_FALSE(j.contains("egress")) << "the built-in policy has no allowlist";
  j["egress"] = {"203.0.113.20:443", "udp:203.0.113.53:53"};
  auto p = parse_policy(j, "x");
  ASSERT_TRUE(p.ok()) << p.error().message();
  ASSERT_EQ(p->egress.size(), 2u);
  EXPECT_EQ(p->egress[1].protocol, 17);
  EXPECT_EQ(p->egress[1].port, 53);
  EXPECT_EQ(to_json(*p)["egress"], j["egress"]);
  // A host name: resolved by the run's resolver, kept as written.
  j["egress"] = {"tcp:registry.sandgate.test:443"};
  p = parse_policy(j, "x");
  ASSERT_TRUE(p.ok()) << p.error().message();
  ASSERT_EQ(p->egress.size(), 1u);
  EXPECT_EQ(p->egress[0].name, "registry.sandgate.test");
  EXPECT_EQ(to_json(*p)["egress"], j["egress"]);
}

TEST(PolicyBase, AllowParsesAndRoundTrips) {
  Json j = to_json(default_policy());
  EXPECT_FALSE(j.contains("base")) << "the built-in policy keeps the default base";
  j["base"] = {{"allow", {"minimal", "/usr/lib/gcc", "/usr/include"}}};
  auto p = parse_policy(j, "x");
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(p->base_allow, (std::vector<std::string>{"minimal", "/usr/lib/gcc", "/usr/include"}));
  EXPECT_EQ(to_json(*p)["base"], j["base"]);
}

TEST(PolicyErrors, NlohmannNeverEscapes) {
  // Values of every JSON type in every slot: each is an Error, never an exception.
  const std::vector<Json> values = {nullptr, true, 1, -1, 1.5, "x", Json::array(), Json::object()};
  for (const char* key : {"schema_version", "name", "mode", "tenants", "run", "intents",
                          "inference", "ladder", "requires", "egress", "base"}) {
    for (const auto& v : values) {
      Json j = to_json(default_policy());
      j[key] = v;
      EXPECT_NO_THROW({
        auto r = parse_policy(j, "x");
        (void)r;
      }) << key
         << "=" << v.dump();
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Intent choice.

TEST(ChooseIntent, DeclaredWins) {
  auto c = choose_intent(default_policy(), std::string("search"), {"make", "-j4"});
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->intent, "search");
  EXPECT_FALSE(c->inferred);
  EXPECT_EQ(c->because, "declared");
}

TEST(ChooseIntent, UnknownDeclaredIntentListsTheKnownOnes) {
  auto c = choose_intent(default_policy(), std::string("bulid"), {"make"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find(
                "intent 'bulid' is not defined by policy 'default' (known: compile, default, "
                "edit, install, run, search, test)"),
            std::string::npos)
      << c.error().message();
}

TEST(ChooseIntent, BecauseNamesTheRule) {
  auto c = choose_intent(default_policy(), std::nullopt, {"make", "-j4"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->intent, "compile");
  EXPECT_TRUE(c->inferred);
  EXPECT_EQ(c->because, R"(rule /^(make|cmake|ninja|meson|bazel|scons)(\s|$)/)");
}

TEST(ChooseIntent, NoMatchIsDefault) {
  for (const auto& argv : std::vector<std::vector<std::string>>{
           {"frobnicate", "--hard"}, {}, {"sh", "-c", "frobnicate"}}) {
    auto c = choose_intent(default_policy(), std::nullopt, argv);
    ASSERT_TRUE(c.ok());
    if (argv.size() == 3) {
      EXPECT_EQ(c->intent, "run");  // the shell rule, after the script matched nothing
      continue;
    }
    EXPECT_EQ(c->intent, "default");
    EXPECT_TRUE(c->inferred);
    EXPECT_EQ(c->because, "no rule matched");
  }
}

struct InferenceCase {
  std::vector<std::string> argv;
  std::string intent;
};

TEST(ChooseIntent, InfersRealisticAgentCommands) {
  const std::vector<InferenceCase> cases = {
      // compile
      {{"make", "-j4"}, "compile"},
      {{"cmake", "--build", "build", "-j", "2"}, "compile"},
      {{"cmake", "-S", ".", "-B", "build", "-DCMAKE_BUILD_TYPE=Release"}, "compile"},
      {{"ninja", "-C", "out"}, "compile"},
      {{"/usr/bin/g++", "-std=c++20", "-O2", "-c", "main.cc", "-o", "main.o"}, "compile"},
      {{"gcc-12", "-c", "x.c"}, "compile"},
      {{"clang++", "-fsyntax-only", "a.cc"}, "compile"},
      {{"cargo", "build", "--release"}, "compile"},
      {{"go", "build", "./..."}, "compile"},
      {{"javac", "-d", "out", "Main.java"}, "compile"},
      {{"mvn", "-q", "compile"}, "compile"},
      {{"npx", "tsc", "--noEmit"}, "compile"},
      {{"sh", "-c", "make -j4"}, "compile"},
      {{"bash", "-lc", "cd build && make -j2 2>&1 | tail -n 50"}, "compile"},
      // test
      {{"pytest", "-x", "-q", "tests/test_api.py"}, "test"},
      {{"python3", "-m", "pytest", "-k", "parse"}, "test"},
      {{"ctest", "--test-dir", "build", "--output-on-failure"}, "test"},
      {{"go", "test", "./..."}, "test"},
      {{"cargo", "test", "--", "--nocapture"}, "test"},
      {{"npm", "test"}, "test"},
      {{"npm", "run", "test", "--", "--watch=false"}, "test"},
      {{"npx", "jest", "src/"}, "test"},
      {{"make", "test"}, "test"},
      {{"make", "-j2", "check"}, "test"},
      {{"tox", "-e", "py311"}, "test"},
      {{"bash", "-c", "cd /work && timeout 300 pytest -q"}, "test"},
      // install
      {{"pip", "install", "-r", "requirements.txt"}, "install"},
      {{"python", "-m", "pip", "install", "requests"}, "install"},
      {{"npm", "install"}, "install"},
      {{"npm", "ci"}, "install"},
      {{"apt-get", "install", "-y", "libssl-dev"}, "install"},
      {{"sudo", "apt-get", "-y", "install", "jq"}, "install"},
      {{"cargo", "fetch"}, "install"},
      {{"go", "mod", "download"}, "install"},
      {{"poetry", "install", "--no-root"}, "install"},
      {{"sh", "-c", "pip install -e . && pytest"}, "install"},  // first command decides
      // search
      {{"grep", "-rn", "TODO", "src/"}, "search"},
      {{"rg", "-n", "fn main", "--type", "rust"}, "search"},
      {{"find", ".", "-name", "*.py", "-newer", "setup.py"}, "search"},
      {{"ag", "parse_policy"}, "search"},
      {{"git", "grep", "-n", "Policy"}, "search"},
      {{"git", "log", "--oneline", "-n", "20"}, "search"},
      {{"ls", "-la"}, "search"},
      {{"fd", "-e", "cc"}, "search"},
      {{"cat", "README.md"}, "search"},
      {{"bash", "-c", "grep -rn 'a|b' src | head"}, "search"},  // quoted | is not a split
      // edit
      {{"sed", "-i", "s/foo/bar/g", "src/main.cc"}, "edit"},
      {{"sed", "-E", "-i.bak", "s/x/y/", "f"}, "edit"},
      {{"patch", "-p1", "-i", "fix.diff"}, "edit"},
      {{"git", "apply", "change.patch"}, "edit"},
      {{"tee", "notes.txt"}, "edit"},
      {{"bash", "-c", "cat > src/new.py << 'EOF'\nimport os\nprint(os.getcwd())\nEOF"}, "edit"},
      // run
      {{"python", "script.py"}, "run"},
      {{"/usr/bin/python3", "-c", "print(1)"}, "run"},
      {{"node", "server.js"}, "run"},
      {{"./a.out"}, "run"},
      {{"sh", "-c", "echo hello"}, "run"},
      {{"bash", "run.sh"}, "run"},
      {{"env", "PYTHONPATH=src", "python", "main.py"}, "run"},
      // nothing recognised
      {{"curl", "-sS", "https://example.com"}, "default"},
      {{"docker", "ps"}, "default"},
  };
  for (const auto& c : cases) {
    auto choice = choose_intent(default_policy(), std::nullopt, c.argv);
    ASSERT_TRUE(choice.ok());
    std::string joined;
    for (const auto& a : c.argv) joined += (joined.empty() ? "" : " ") + a;
    EXPECT_EQ(choice->intent, c.intent) << joined << "\n  because " << choice->because;
    EXPECT_TRUE(choice->inferred);
  }
}

// The inference regexes are compiled with ClassicRegexTraits, whose transform_primary skips the
// base's vector and strxfrm: in the classic locale it must give the base's answer for every
// byte, and the built-in patterns and ones using what transform_primary serves (equivalence
// classes, ranges, classes, icase) must match exactly what std::regex matches.
TEST(InferenceRegex, ClassicTraitsAgreeWithTheStandardOnes) {
  ClassicRegexTraits fast;
  std::regex_traits<char> standard;
  ASSERT_EQ(fast.getloc(), std::locale::classic());
  for (int c = 0; c < 256; ++c) {
    const char ch = static_cast<char>(c);
    EXPECT_EQ(fast.transform_primary(&ch, &ch + 1), standard.transform_primary(&ch, &ch + 1))
        << "byte " << c;
  }
  const std::string two = "Ab";
  EXPECT_EQ(fast.transform_primary(two.begin(), two.end()),
            standard.transform_primary(two.begin(), two.end()));

  std::vector<std::string> patterns;
  for (const auto& rule : default_policy().inference) patterns.push_back(rule.pattern);
  for (const char* p : {"^[[=a=]]+$", "[[:alpha:]][[:digit:]]", "^[^a-z\\s]+$", "[B-Y]{2}",
                        "\\w+\\.\\d", "^[\\x80-\\xff]"})
    patterns.emplace_back(p);
  const std::vector<std::string> texts = {"make -j4",
                                          "python3 -m pytest -k x",
                                          "gcc-12 -c x.c",
                                          "sed -E -i.bak s/x/y/ f",
                                          "cat a > b",
                                          "./a.out",
                                          "bash run.sh",
                                          "aaa",
                                          "AAA",
                                          "aAa",
                                          "a1",
                                          "Q9",
                                          "X",
                                          "BY",
                                          "ab",
                                          "x.1",
                                          "\x80\xff",
                                          "\xe9t\xe9",
                                          "ZZZ",
                                          "",
                                          " ",
                                          "apt update",
                                          "uv sync"};
  for (const auto& pattern : patterns) {
    for (auto flags : {std::regex::ECMAScript, std::regex::ECMAScript | std::regex::icase}) {
      InferenceRegex fast_regex(pattern, flags);
      std::regex standard_regex(pattern, flags);
      for (const auto& text : texts)
        EXPECT_EQ(std::regex_search(text, fast_regex), std::regex_search(text, standard_regex))
            << "/" << pattern << "/ on '" << text << "'";
    }
  }
}

TEST(InferenceTexts, ShellScriptCommandsFirstThenTheArgv) {
  EXPECT_EQ(inference_texts({"sh", "-c", "make -j4"}),
            (std::vector<std::string>{"make -j4", "sh -c make -j4"}));
  EXPECT_EQ(inference_texts({"bash", "-e", "-o", "pipefail", "-c", "cd b; FOO=1 ninja && ./t"}),
            (std::vector<std::string>{"cd b", "ninja", "./t",
                                      "bash -e -o pipefail -c cd b; FOO=1 ninja && ./t"}));
  EXPECT_EQ(inference_texts({"make", "2>&1"}), (std::vector<std::string>{"make 2>&1"}));
  EXPECT_EQ(inference_texts({"bash", "-c", "make 2>&1 | tee log"}),
            (std::vector<std::string>{"make 2>&1", "tee log", "bash -c make 2>&1 | tee log"}));
  EXPECT_EQ(inference_texts({"/usr/local/bin/cargo", "build"}),
            (std::vector<std::string>{"cargo build"}));
  EXPECT_EQ(inference_texts({"timeout", "-s", "KILL", "60", "pytest"}),
            (std::vector<std::string>{"pytest"}));
  EXPECT_EQ(inference_texts({"bash", "script.sh"}), (std::vector<std::string>{"bash script.sh"}));
  EXPECT_TRUE(inference_texts({}).empty());
}

TEST(InferenceTexts, ALongScriptDoesNotExhaustTheStack) {
  // `.*` rules over a long heredoc would recurse once per character in libstdc++'s regex.
  std::string body(1 << 20, 'x');
  auto c = choose_intent(default_policy(), std::nullopt, {"cat", body + " > out.txt"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->intent, "search");  // the `>` lies beyond what is matched: not seen
  auto e = choose_intent(default_policy(), std::nullopt, {"bash", "-c", "cat > f <<EOF\n" + body});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->intent, "edit");
}

TEST(ChooseIntent, PolicyRulesAreTriedInOrder) {
  auto p = parse_text(R"({
    "schema_version": 1,
    "intents": {"compile": {}, "test": {}, "install": {}, "search": {}, "edit": {}, "run": {},
                "default": {}},
    "inference": [{"match": "make", "intent": "search"}, {"match": "^make", "intent": "compile"}]
  })");
  ASSERT_TRUE(p.ok()) << p.error().message();
  auto c = choose_intent(*p, std::nullopt, {"make"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->intent, "search");
  EXPECT_EQ(c->because, "rule /make/");
}

TEST(PolicyFile, TheBudgetRuleTurnedOffNeedsNoThawBelowIt) {
  auto p = parse_text(R"({
    "schema_version": 1,
    "intents": {"compile": {}, "test": {}, "install": {}, "search": {}, "edit": {}, "run": {},
                "default": {}},
    "ladder": {"freeze_budget_at": 0, "thaw_budget_at": 0.5, "budget_freeze_max": "1m"}
  })");
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(p->ladder.freeze_budget_at, 0);
  EXPECT_EQ(p->ladder.thaw_budget_at, 0.5);
  EXPECT_EQ(p->ladder.budget_freeze_max, std::chrono::minutes(1));
}

}  // namespace
}  // namespace sandgate::controller
