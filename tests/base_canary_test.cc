// The read-only base end to end (issue 16): a canary in each directory the default base binds,
// read natively (the baseline: the probe works), shown by the jail on its default base (the
// host's whole /usr: exposed, the truthful verdict, with the directories as evidence), hidden
// by a narrowed base in which programs still run; and no canary left on the host, after the
// suite and after `sandgate probe` is killed with SIGKILL and `sandgate gc` runs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "core/defer.h"
#include "core/files.h"
#include "core/process.h"
#include "probes/canaries.h"
#include "probes/suite.h"
#include "probes/witness.h"
#include "providers/base_root.h"
#include "tests/support/cgroup_dirs.h"
#include "tests/support/provider_fixture.h"

namespace sandgate::testing {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

constexpr char kProbe[] = "fs.read_base_canary";

// Every base canary of `marker` still on the host, wherever the suite may plant one.
std::vector<std::string> base_canaries_left(const std::string& marker) {
  std::vector<std::string> left;
  for (const auto& dir : probes::Canaries::base_canary_sites())
    for (const auto& f : probes::marked_entries(dir, marker)) left.push_back(f);
  return left;
}

class BaseCanaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/var/tmp/sgbase-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmp_ = tmpl;
    ::chmod(tmp_.c_str(), 0711);
    options_.paths.state_dir = tmp_ + "/state";
    options_.paths.work_dir = tmp_ + "/work";
    options_.cgroup_root = "sgtest-base-" + std::to_string(::getpid());
    options_.probe_binary = SANDGATE_PROBE_BINARY;
    options_.only = {"fs"};
    providers::register_builtin_providers(registry_);
  }
  void TearDown() override {
    EXPECT_EQ(count_entries(options_.paths.state_dir + "/runs"), 0u) << "a run record was left";
    EXPECT_EQ(count_entries(options_.paths.state_dir + "/netns"), 0u) << "a lab namespace was left";
    EXPECT_EQ(count_entries(options_.paths.work_dir), 0u) << "a run directory was left";
    expect_no_cgroup_left(options_.cgroup_root);
    for (const auto& m : markers_) {
      EXPECT_THAT(base_canaries_left(m), ::testing::IsEmpty()) << "a base canary was left";
      EXPECT_TRUE(probes::marked_processes("/proc", m, {::getpid()}).empty())
          << "a process was left";
    }
    (void)remove_tree(tmp_);
  }

  std::unique_ptr<probes::Suite> suite() {
    auto s = probes::Suite::create(options_);
    EXPECT_TRUE(s.ok()) << s.error().message();
    if (!s.ok()) return nullptr;
    markers_.push_back((*s)->marker());
    return std::move(s).value();
  }
  std::unique_ptr<providers::Provider> provider(const std::string& name) {
    providers::ProviderOptions o;
    o.paths = options_.paths;
    o.allow_unsafe_host = true;
    auto p = registry_.create(name, o);
    EXPECT_TRUE(p.ok()) << p.error().message();
    return p.ok() ? std::move(p).value() : nullptr;
  }
  static const probes::Judgement* find(const probes::ProviderRun& run, const std::string& id) {
    for (const auto& j : run.judgements)
      if (j.id == id) return &j;
    return nullptr;
  }
  // The directories the probe reports readable, and each directory's outcome ("ok", "ENOENT").
  static std::map<std::string, std::string> outcomes(const probes::ProbeReport& r) {
    std::map<std::string, std::string> out;
    if (r.evidence.contains("tried"))
      for (const auto& [dir, v] : r.evidence["tried"].items()) out[dir] = v.value("open", "?");
    return out;
  }

  std::string tmp_;
  std::vector<std::string> markers_;
  probes::SuiteOptions options_;
  providers::Registry registry_;
};

TEST_F(BaseCanaryTest, NativeReadsEveryCanaryAndTheDefaultJailShowsThoseUnderUsr) {
  SANDGATE_REQUIRE_ROOT();
  auto s = suite();
  ASSERT_TRUE(s);
  const std::string marker = s->marker();
  // Planted: one per site, world-readable, carrying the marker.
  auto sites = probes::Canaries::base_canary_sites();
  ASSERT_THAT(sites, Contains(std::string("/usr")));
  for (const auto& dir : sites) {
    auto found = probes::marked_entries(dir, marker);
    ASSERT_EQ(found.size(), 1u) << dir;
    struct stat st;
    ASSERT_EQ(::stat(found[0].c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0644u) << found[0];
  }

  // The baseline: natively every canary is read, so the probe is conclusive.
  auto base = s->baseline().find(kProbe);
  ASSERT_NE(base, s->baseline().end());
  EXPECT_EQ(base->second.result, probes::ProbeResult::kReached) << base->second.detail;
  for (const auto& dir : sites) EXPECT_EQ(outcomes(base->second)[dir], "ok") << dir;

  // The jail on its default base: the host's whole /usr, so every canary under it is read.
  auto p = provider("namespaces");
  ASSERT_TRUE(p);
  auto run = s->run(*p);
  ASSERT_TRUE(run.ok()) << run.error().message();
  const probes::Judgement* j = find(*run, kProbe);
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->verdict, probes::Verdict::kExposed) << j->why;
  EXPECT_THAT(j->why, HasSubstr("marker"));
  ASSERT_TRUE(j->sandbox.has_value());
  auto seen = outcomes(*j->sandbox);
  const Json& readable = j->sandbox->evidence["readable"];
  for (const auto& dir : sites) {
    if (dir == "/usr" || dir.rfind("/usr/", 0) == 0) {
      EXPECT_EQ(seen[dir], "ok") << dir << " is in the default base";
      EXPECT_THAT(readable, Contains(Json(dir)));
    } else {
      // /etc/alternatives: its links are copied, never bound; a file there is not seen.
      EXPECT_EQ(seen[dir], "ENOENT") << dir;
    }
  }
  // Exposed in every table, with what hides it named; a known limit of the default base only.
  EXPECT_THAT(j->known_limit, HasSubstr("narrowed read-only base"));
  for (const auto* f : run->failing()) EXPECT_NE(f->id, kProbe);

  ASSERT_TRUE(s->close().ok());
  EXPECT_THAT(base_canaries_left(marker), ::testing::IsEmpty());
}

TEST_F(BaseCanaryTest, NarrowedBaseHidesEveryCanaryAndStillRunsPrograms) {
  SANDGATE_REQUIRE_ROOT();
  auto minimal = providers::resolve_base_paths({"minimal"}, "--base-path");
  ASSERT_TRUE(minimal.ok()) << minimal.error().message();
  options_.base_paths = *minimal;
  auto s = suite();
  ASSERT_TRUE(s);
  auto p = provider("namespaces");
  ASSERT_TRUE(p);
  auto run = s->run(*p);
  ASSERT_TRUE(run.ok()) << run.error().message();
  EXPECT_EQ(run->base_paths, *minimal);
  const probes::Judgement* j = find(*run, kProbe);
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->verdict, probes::Verdict::kBlocked) << j->why;
  EXPECT_EQ(j->layer, probes::Layer::kMount) << j->why;
  EXPECT_TRUE(j->known_limit.empty());
  ASSERT_TRUE(j->sandbox.has_value());
  auto seen = outcomes(*j->sandbox);
  ASSERT_FALSE(seen.empty());
  for (const auto& [dir, outcome] : seen) EXPECT_NE(outcome, "ok") << dir;
  // The baseline read them all: the block is the base's doing, not an unreadable canary.
  EXPECT_EQ(s->baseline().at(kProbe).result, probes::ProbeResult::kReached);
  // Nothing else of the fs boundary got through the narrowed base either.
  for (const auto* f : run->failing()) ADD_FAILURE() << f->id << ": " << f->why;

  // A program in the narrowed base runs: the shell, coreutils, perl, python; what the base
  // leaves out is absent.
  providers::EnvSpec spec;
  spec.base_paths = *minimal;
  auto env = p->create(spec);
  ASSERT_TRUE(env.ok()) << env.error().message();
  providers::Call call;
  call.argv = {"/bin/sh", "-c",
               "ls /usr/bin >/dev/null && echo hi | tr a-z A-Z && "
               "if command -v python3 >/dev/null; then python3 -c 'print(6*7)'; else echo 42; fi; "
               "test -e /usr/share/doc && echo share-visible; "
               "test -e /usr/local/etc && echo local-etc-visible; echo done"};
  auto r = (*env)->exec(call, {});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->stdout_data, "HI\n42\ndone\n") << r->stderr_data;
  ASSERT_TRUE((*env)->destroy().ok());
}

TEST_F(BaseCanaryTest, ProvidersWithoutABaseToNarrowRefuseIt) {
  auto p = provider("host_dir");
  ASSERT_TRUE(p);
  providers::EnvSpec spec;
  spec.base_paths = {"/usr/bin"};
  auto env = p->create(spec);
  ASSERT_FALSE(env.ok());
  EXPECT_THAT(env.error().message(), HasSubstr("no read-only base to narrow"));
}

// Bad input is refused before anything is made, naming the entry and what is wrong with it.
TEST_F(BaseCanaryTest, BadBasePathsAreRefusedNamingTheEntry) {
  auto exec = [](std::vector<std::string> args) {
    args.insert(args.begin(), {SANDGATE_BINARY, "exec", "--provider", "namespaces"});
    args.insert(args.end(), {"--", "true"});
    auto r = run_command(args, std::chrono::seconds(60));
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : CommandResult{};
  };
  auto relative = exec({"--no-controller", "--base-path", "/usr/bin", "--base-path", "usr/lib"});
  EXPECT_EQ(relative.status.shell_code(), 2);
  EXPECT_THAT(relative.output,
              HasSubstr("--base-path[1]: 'usr/lib' is not an absolute path (nor the preset"));
  auto absent = exec({"--no-controller", "--base-path", "/no/such/sandgate-base"});
  EXPECT_EQ(absent.status.shell_code(), 2);
  EXPECT_THAT(absent.output, HasSubstr("--base-path[0]"));
  EXPECT_THAT(absent.output, HasSubstr("ENOENT"));
  auto etc = exec({"--no-controller", "--base-path", "/etc/ssl"});
  EXPECT_THAT(etc.output, HasSubstr("under /etc, which the jail makes its own"));
  // A policy file: its syntax when it is read, naming the JSON path.
  auto printed = run_command({SANDGATE_BINARY, "policy", "--print-default"});
  ASSERT_TRUE(printed.ok());
  auto policy = parse_json(printed->output, "default policy");
  ASSERT_TRUE(policy.ok()) << policy.error().message();
  (*policy)["base"] = {{"allow", {"minimal", "lib"}}};
  const std::string file = tmp_ + "/policy.json";
  ASSERT_TRUE(write_file(file, policy->dump(), O_WRONLY | O_CREAT | O_TRUNC).ok());
  auto bad_policy = exec({"--policy", file});
  EXPECT_EQ(bad_policy.status.shell_code(), 2);
  EXPECT_THAT(bad_policy.output, HasSubstr("base.allow[1]: 'lib' is not an absolute path"));
}

// kill -9 of `sandgate probe` while its base canaries are planted: `sandgate gc` removes each
// (it carries the marker), the lab and the rest of the run.
class BaseCanaryGcTest : public BaseCanaryTest {};

TEST_F(BaseCanaryGcTest, KilledProbeLeavesNoCanaryAfterGc) {
  SANDGATE_REQUIRE_ROOT();
  // The command's state, work directory and cgroup root are this test's own.
  ::setenv("SANDGATE_STATE_DIR", options_.paths.state_dir.c_str(), 1);
  ::setenv("SANDGATE_WORK_DIR", options_.paths.work_dir.c_str(), 1);
  ::setenv("SANDGATE_CGROUP_ROOT", options_.cgroup_root.c_str(), 1);
  Defer unset([] {
    ::unsetenv("SANDGATE_STATE_DIR");
    ::unsetenv("SANDGATE_WORK_DIR");
    ::unsetenv("SANDGATE_CGROUP_ROOT");
  });
  std::vector<std::string> argv = {SANDGATE_BINARY, "probe",  "--provider",
                                   "namespaces",    "--only", "fs"};
  auto child = spawn(argv);
  ASSERT_TRUE(child.ok()) << child.error().message();
  // Wait for the canaries' record to list the base canaries and for them to exist.
  std::string marker;
  std::vector<std::string> planted;
  const std::string runs = options_.paths.state_dir + "/runs";
  for (int i = 0; i < 6000 && planted.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    DIR* d = ::opendir(runs.c_str());
    while (struct dirent* e = d ? ::readdir(d) : nullptr) {
      std::string n = e->d_name;
      if (n.rfind("canaries-", 0) != 0 || !n.ends_with(".json")) continue;
      auto j = read_json_file(runs + "/" + n);
      if (!j.ok()) continue;
      std::vector<std::string> files;
      for (const auto& r : (*j)["resources"])
        if (r.value("kind", "") == "marked_file") {
          files.push_back(r.value("path", ""));
          marker = r.value("owner", "");
        }
      // Planted once the last one exists (made in order after the record).
      if (!files.empty() && ::access(files.back().c_str(), F_OK) == 0) planted = files;
    }
    if (d) ::closedir(d);
  }
  ASSERT_FALSE(planted.empty()) << "sandgate probe never planted its base canaries";
  markers_.push_back(marker);
  ASSERT_TRUE(child->signal(SIGKILL).ok());
  auto st = child->wait_for(std::chrono::seconds(30));
  ASSERT_TRUE(st.ok() && st->has_value());
  // Left behind by the kill: what gc is for.
  EXPECT_FALSE(base_canaries_left(marker).empty());

  auto gc = run_command({SANDGATE_BINARY, "gc"}, std::chrono::seconds(120));
  ASSERT_TRUE(gc.ok()) << gc.error().message();
  EXPECT_EQ(gc->status.shell_code(), 0) << gc->output;
  for (const auto& f : planted) EXPECT_NE(::access(f.c_str(), F_OK), 0) << f << " left by gc";
  // TearDown: no record, lab, run directory, cgroup, process or canary of the marker left.
}

}  // namespace
}  // namespace sandgate::testing
