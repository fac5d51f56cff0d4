#include "reports/model.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/test_temp_dir.h"
#include "reports/from_qualify.h"
#include "reports/test_reports.h"
#include "reports/writers.h"

namespace sandgate::reports {
namespace {

using testing::count;
using testing::error_of;
using testing::fixture_dir;
using testing::real_report;

const ProviderReport& provider(const Report& r, const std::string& name) {
  for (const auto& p : r.providers)
    if (p.name == name) return p;
  ADD_FAILURE() << "no provider " << name;
  static ProviderReport none;
  return none;
}

TEST(FromQualify, ReadsARealRunWithItsProbeFilesBesideIt) {
  Report r = real_report();
  ASSERT_EQ(r.providers.size(), 2u);
  const auto& ns = provider(r, "namespaces");
  const auto& host = provider(r, "host_dir");
  EXPECT_TRUE(ns.qualified);
  EXPECT_FALSE(host.qualified);
  EXPECT_TRUE(host.unsafe);
  EXPECT_EQ(host.disqualifications, std::vector<std::string>{"the escape probes found it exposed"});
  EXPECT_EQ(count(ns, probes::Verdict::kBlocked), 7u);
  EXPECT_EQ(count(host, probes::Verdict::kExposed), 7u);
  // The blocking layer and the whole judgement travel with each verdict.
  const auto& keyctl = (*ns.probes)[5];
  EXPECT_EQ(keyctl.id, "creds.keyctl_session");
  EXPECT_EQ(keyctl.layer, "seccomp");
  EXPECT_EQ(keyctl.judgement["sandbox"]["errno"], "EPERM");
  // A rule per probe id, with the native baseline's attempt and a remediation.
  EXPECT_EQ(r.rules.size(), 7u);
  EXPECT_FALSE(r.rules.at("creds.env_tokens").remediation.empty());
  EXPECT_NE(r.rules.at("creds.env_tokens").remediation.find("allow list"), std::string::npos);
  // The unsafe provider is the cost baseline; the ratios follow from the costs.
  EXPECT_EQ(r.baseline_provider, "host_dir");
  auto ratios = cost_ratios(r, ns);
  ASSERT_TRUE(ratios.run && ratios.controller);
  EXPECT_DOUBLE_EQ(*ratios.run, *ns.costs.run_ms / *host.costs.run_ms);
  EXPECT_DOUBLE_EQ(*ratios.controller, *ns.costs.call_ms / *ns.costs.exec_ms);
  ASSERT_TRUE(ns.replay);
  EXPECT_EQ(ns.replay->calls, 4u);
  EXPECT_FALSE(host.replay);  // exposed: qualify did not go on to replay it
  EXPECT_EQ(probe_differences(r).size(), 7u);
  EXPECT_EQ(r.host["cgroup_layout"]["kind"], "hybrid");
}

// `qualify --policy policy-agents.json` (requires fs.isolated, creds.scrubbed_env,
// proc.seccomp) on namespaces and host_dir: host_dir is refused before anything runs in it.
TEST(FromQualify, ReadsThePolicyCheckAndAVisiblyDisqualifiedProvider) {
  auto r = load_report(sandgate::testing::source_dir() +
                       "/reports/testdata/qualify-policy/qualify.json");
  ASSERT_TRUE(r.ok()) << r.error().message();
  const auto& ns = provider(*r, "namespaces");
  const auto& host = provider(*r, "host_dir");
  ASSERT_TRUE(ns.policy && host.policy);
  EXPECT_EQ(ns.policy->name, "agents");
  EXPECT_TRUE(ns.policy->qualified);
  EXPECT_FALSE(host.policy->qualified);
  EXPECT_EQ(host.policy->missing,
            (std::vector<std::string>{"fs.isolated", "creds.scrubbed_env", "proc.seccomp"}));
  EXPECT_EQ(host.disqualifications.size(), 2u);  // "errors": one reason each
  EXPECT_FALSE(host.probes);
  EXPECT_FALSE(host.costs.exec_ms);
  ASSERT_TRUE(ns.probes);
  EXPECT_TRUE(ns.contradicted_capabilities.empty());
  EXPECT_FALSE(r->created.empty());
  // Only its run was measured, and that is enough to be the baseline of run costs.
  EXPECT_EQ(r->baseline_provider, "host_dir");
  EXPECT_TRUE(cost_ratios(*r, ns).run);
  EXPECT_FALSE(cost_ratios(*r, ns).call);
  std::string html = render_html(*r);
  EXPECT_NE(html.find("policy agents needs fs.isolated, creds.scrubbed_env, proc.seccomp"),
            std::string::npos);
}

TEST(Model, CarriesContradictedCapabilitiesAndThePolicy) {
  Report r = real_report();
  r.providers[0].contradicted_capabilities = {{"net.none", {"net.metadata_v4_get"}}};
  r.providers[0].policy = PolicyCheck{"agents", {"net.none"}, {"net.none"}, {"net.none"}, false};
  Json once = to_json(r);
  auto back = report_from_json(once);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(to_json(*back), once);
  EXPECT_NE(render_html(*back).find("net.none contradicted by net.metadata_v4_get"),
            std::string::npos);
  once["providers"][0]["policy"]["qualified"] = true;
  auto bad = report_from_json(once);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("providers[0].policy.qualified: says the opposite"),
            std::string::npos)
      << bad.error().message();
}

TEST(Model, RoundTripsThroughJson) {
  Report r = real_report();
  Json once = to_json(r);
  auto back = report_from_json(once);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(to_json(*back), once);
}

TEST(Model, LoadsTheModelFileItself) {
  sandgate::testing::TempDir dir;
  ASSERT_TRUE(write_json_file_atomic(dir / "report.json", to_json(real_report())).ok());
  auto r = load_report(dir / "report.json");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->providers.size(), 2u);
}

// Each broken field is named by its path.
TEST(Model, ErrorsNameTheField) {
  Json good = to_json(real_report());
  Json j = good;
  j["providers"][0]["probes"]["verdicts"][2]["verdict"] = "escaped";
  EXPECT_NE(error_of(j).find("providers[0].probes.verdicts[2].verdict: expected one of"),
            std::string::npos)
      << error_of(j);
  j = good;
  j["providers"][1]["costz"] = 1;
  EXPECT_NE(error_of(j).find("providers[1].costz: unknown field"), std::string::npos);
  j = good;
  j["schema_version"] = 99;
  EXPECT_NE(error_of(j).find("schema_version: this sandgate reads versions 1 to 2, got 99"),
            std::string::npos);
  j = good;
  j["providers"][0]["costs"].erase("run_ms");
  EXPECT_NE(error_of(j).find("providers[0].costs.run_ms: missing"), std::string::npos);
  j = good;
  j["baseline_provider"] = "podman";
  EXPECT_NE(error_of(j).find("baseline_provider: names no provider"), std::string::npos);
  j = good;
  j["providers"][0]["qualified"] = "yes";
  EXPECT_NE(error_of(j).find("providers[0].qualified: expected true or false, got \"yes\""),
            std::string::npos);
}

// A version-1 report (before the spawn baseline and the call samples) still reads, and a
// version-2 report must carry them.
TEST(Model, ReadsVersionOneWithoutTheSamplesOfVersionTwo) {
  Json j = to_json(real_report());
  j["schema_version"] = 1;
  j.erase("spawn_samples_ms");
  for (auto& p : j["providers"]) {
    p["costs"].erase("exec_samples_ms");
    p["costs"].erase("call_samples_ms");
    p["costs"]["ratios"].erase("spawn");
  }
  auto r = report_from_json(j);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_TRUE(r->spawn_samples_ms.empty());
  j["schema_version"] = 2;
  EXPECT_NE(error_of(j).find("spawn_samples_ms: missing"), std::string::npos) << error_of(j);
}

TEST(Model, SpawnRatioIsTheMedianOfPairedSamples) {
  Report r;
  r.spawn_samples_ms = {1, 2, 1, 0, 1};
  ProviderReport p;
  p.costs.run_samples_ms = {5, 12, 6, 9};  // the 4th pairs with a 0 spawn: skipped
  EXPECT_EQ(paired_ratios(p.costs.run_samples_ms, r.spawn_samples_ms),
            (std::vector<double>{5, 6, 6}));
  auto ratios = cost_ratios(r, p);
  ASSERT_TRUE(ratios.spawn);
  EXPECT_EQ(*ratios.spawn, 6);
  r.spawn_samples_ms.clear();
  EXPECT_FALSE(cost_ratios(r, p).spawn);
}

// `sandgate probe --json` as a report: job "probe", a provider per run with its verdicts, and
// readable by `report render` (load_report) like the other reports.
TEST(FromProbeReport, AProviderPerRunWithItsVerdicts) {
  auto file = read_json_file(fixture_dir() + "/probe-host_dir.json");
  ASSERT_TRUE(file.ok());
  auto r = from_probe_report(*file, Json{{"cgroup_layout", {{"kind", "hybrid"}}}});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->job, "probe");
  ASSERT_EQ(r->providers.size(), 1u);
  const auto& p = r->providers[0];
  EXPECT_EQ(p.name, "host_dir");
  EXPECT_TRUE(p.unsafe);
  ASSERT_TRUE(p.probes);
  EXPECT_EQ(p.probes->size(), (*file)["runs"][0]["judgements"].size());
  size_t exposed = (*file)["runs"][0]["tally"]["exposed"].get<size_t>();
  EXPECT_GT(exposed, 0u);  // the bypass cable
  EXPECT_FALSE(p.qualified);
  EXPECT_EQ(p.disqualifications, std::vector<std::string>{"the escape probes found it exposed"});
  EXPECT_EQ(r->rules.size(), p.probes->size());
  EXPECT_EQ(r->host["cgroup_layout"]["kind"], "hybrid");
  // Round trip through the model, and load_report knows the file for what it is.
  auto again = report_from_json(to_json(*r));
  ASSERT_TRUE(again.ok()) << again.error().message();
  auto loaded = load_report(fixture_dir() + "/probe-namespaces.json");
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  EXPECT_EQ(loaded->job, "probe");
  EXPECT_TRUE(loaded->providers.at(0).qualified);

  Json bad = *file;
  bad["runs"][0]["judgements"][1]["verdict"] = "escaped";
  auto broken = from_probe_report(bad, Json::object());
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.error().message().find("judgements[1].verdict: expected one of"),
            std::string::npos)
      << broken.error().message();
}

TEST(FromQualify, ErrorsNameTheField) {
  auto q = read_json_file(fixture_dir() + "/qualify.json");
  ASSERT_TRUE(q.ok());
  ProbeFiles files;
  for (const char* name : {"namespaces", "host_dir"}) {
    auto f = read_json_file(fixture_dir() + "/probe-" + name + ".json");
    ASSERT_TRUE(f.ok());
    files[name] = *f;
  }
  ASSERT_TRUE(from_qualify(*q, files).ok());

  Json bad = *q;
  bad["providers"][1]["median_ms"] = "fast";
  auto r = from_qualify(bad, files);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("providers[1].median_ms: expected a number"),
            std::string::npos)
      << r.error().message();

  bad = *q;
  bad["schema_version"] = 1;
  r = from_qualify(bad, files);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("schema_version"), std::string::npos);

  ProbeFiles broken = files;
  broken["host_dir"]["runs"][0]["judgements"][3].erase("why");
  r = from_qualify(*q, broken);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("runs[0].judgements[3].why: missing"), std::string::npos)
      << r.error().message();

  ProbeFiles missing = files;
  missing.erase("namespaces");
  r = from_qualify(*q, missing);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("providers[0].probes.report"), std::string::npos);
}

TEST(FromQualify, AMissingProbeFileIsAnErrorNamingIt) {
  sandgate::testing::TempDir dir;
  // The paths qualify.json recorded point into a directory that is gone, as after a move.
  auto q = read_json_file(fixture_dir() + "/qualify.json");
  ASSERT_TRUE(q.ok());
  for (auto& p : (*q)["providers"])
    p["probes"]["report"] = dir / ("gone/probe-" + p["name"].get<std::string>() + ".json");
  ASSERT_TRUE(write_json_file_atomic(dir / "qualify.json", *q).ok());
  std::filesystem::copy_file(fixture_dir() + "/probe-namespaces.json",
                             dir / "probe-namespaces.json");
  auto r = load_report(dir / "qualify.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("probe-host_dir.json"), std::string::npos)
      << r.error().message();
}

// A sandbox shapes its probe's evidence: 100,000 nested arrays must neither crash the reader
// (copying and printing JSON recurse per level) nor any writer.
TEST(LoadReport, CutsEvidenceNestedTooDeep) {
  sandgate::testing::TempDir dir;
  std::filesystem::copy_file(fixture_dir() + "/qualify.json", dir / "qualify.json");
  std::filesystem::copy_file(fixture_dir() + "/probe-namespaces.json",
                             dir / "probe-namespaces.json");
  auto probe = read_json_file(fixture_dir() + "/probe-host_dir.json");
  ASSERT_TRUE(probe.ok());
  (*probe)["runs"][0]["judgements"][0]["sandbox"]["evidence"] = {{"x", "DEEP"}, {"y", 1}};
  std::string text = dump_json(*probe);
  constexpr size_t kLevels = 100000;
  text.replace(text.find("\"DEEP\""), 6, std::string(kLevels, '[') + std::string(kLevels, ']'));
  std::ofstream(dir / "probe-host_dir.json") << text;
  auto r = load_report(dir / "qualify.json");
  ASSERT_TRUE(r.ok()) << r.error().message();
  const Json& evidence = (*r->providers[1].probes)[0].judgement["sandbox"]["evidence"];
  EXPECT_EQ(evidence["y"], 1) << "what is beside the deep value is kept";
  Json at = evidence["x"];
  int depth = 0;
  while (at.is_array() && at.size() == 1) {
    Json next = at[0];
    at = std::move(next);
    ++depth;
  }
  EXPECT_EQ(at, "[cut: nested deeper than 64 levels]");
  EXPECT_LT(depth, 64);
  for (Format f : all_formats()) EXPECT_FALSE(render(*r, f).empty());
}

TEST(LoadReport, RefusesSomethingElse) {
  sandgate::testing::TempDir dir;
  std::ofstream(dir / "x.json") << "{\"calls\": []}";
  auto r = load_report(dir / "x.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("neither a sandgate report"), std::string::npos);
}

}  // namespace
}  // namespace sandgate::reports
