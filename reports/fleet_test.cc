#include "reports/fleet.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "core/process.h"
#include "core/test_temp_dir.h"
#include "reports/test_reports.h"

namespace sandgate::reports {
namespace {

using testing::count;
using testing::hostile_report;
using testing::hostile_text;
using testing::real_report;

// A host's report as qualify writes it there: the committed real run, with the doctor's facts
// of a host of the given kind.
Report host_report(const std::string& hostname, const std::string& kernel = "6.1.0-57-cloud-amd64",
                   const std::string& layout = "hybrid", bool kvm = false) {
  Report r = real_report();
  r.host["system"] = {{"hostname", hostname}, {"kernel_release", kernel}, {"machine", "x86_64"}};
  r.host["cgroup_layout"]["kind"] = layout;
  r.host["kvm"]["usable"] = kvm;
  return r;
}

ProviderReport& provider(Report& r, const std::string& name) {
  for (auto& p : r.providers)
    if (p.name == name) return p;
  ADD_FAILURE() << "no provider " << name;
  static ProviderReport none;
  return none;
}

ProbeVerdict& verdict(Report& r, const std::string& provider_name, const std::string& id) {
  for (auto& v : *provider(r, provider_name).probes)
    if (v.id == id) return v;
  ADD_FAILURE() << "no probe " << id;
  static ProbeVerdict none;
  return none;
}

// What a weakened jail on one host looks like: the probe finds the canary tokens, and the
// provider is disqualified for it, as qualify would have written it.
void expose_env_tokens(Report& r, const std::string& evidence) {
  ProbeVerdict& v = verdict(r, "namespaces", "creds.env_tokens");
  v.verdict = probes::Verdict::kExposed;
  v.layer.clear();
  v.why = evidence;
  v.judgement["host"] = {{"notes", {"canary token AWS_SECRET_ACCESS_KEY seen in the sandbox"}}};
  ProviderReport& p = provider(r, "namespaces");
  p.qualified = false;
  p.disqualifications = {"the escape probes found it exposed"};
}

Fleet merged(std::vector<Report> reports, const MergeOptions& options = {}) {
  std::vector<MergeInput> inputs;
  for (auto& r : reports) {
    std::string name = doctor_hostname(r.host).value_or("unnamed");
    inputs.push_back({"hosts/" + name + "/report.json", "", std::move(r)});
  }
  auto f = merge_reports(std::move(inputs), options);
  EXPECT_TRUE(f.ok()) << f.error().message();
  return f.ok() ? std::move(f).value() : Fleet{};
}

TEST(FleetClass, FollowsTheDoctorsFactsAndSaysWhatItDoesNotKnow) {
  Report r = host_report("node-a", "6.1.0-57-cloud-amd64", "v2", true);
  EXPECT_EQ(class_name(host_facts(r.host)), "x86_64/linux-6.1/v2/kvm");
  // Patch releases of one kernel are one kind; another minor version is another.
  EXPECT_EQ(host_facts(host_report("b", "6.1.0-58-cloud-amd64").host).kernel, "6.1");
  EXPECT_EQ(host_facts(host_report("b", "6.12.3").host).kernel, "6.12");
  EXPECT_EQ(host_facts(host_report("b", "custom").host).kernel, "custom");
  // The committed report predates system facts: what it lacks is "?", not guessed.
  Report old = real_report();
  EXPECT_EQ(class_name(host_facts(old.host)), "?/linux-?/hybrid/tcg");
  EXPECT_FALSE(doctor_hostname(old.host));
  EXPECT_EQ(class_name(host_facts(Json::object())), "?/linux-?/?/?");
}

TEST(FleetNames, ComeFromTheOperatorThenTheHostnameThenTheFile) {
  EXPECT_EQ(host_name_from_file("/ci/artifacts/node-7/report.json"), "node-7");
  EXPECT_EQ(host_name_from_file("node-7/qualify.json"), "node-7");
  EXPECT_EQ(host_name_from_file("/tmp/node-9.json"), "node-9");
  EXPECT_EQ(host_name_from_file("report.json"), "report");
  std::vector<MergeInput> in;
  in.push_back({"a/report.json", "", host_report("from-doctor")});
  in.push_back({"b/report.json", "", real_report()});  // no hostname in its facts
  in.push_back({"c/report.json", "chosen", host_report("ignored")});
  auto f = merge_reports(std::move(in), {});
  ASSERT_TRUE(f.ok()) << f.error().message();
  EXPECT_EQ(f->hosts[0].name, "from-doctor");
  EXPECT_EQ(f->hosts[0].name_from, NameFrom::kHostname);
  EXPECT_EQ(f->hosts[1].name, "b");
  EXPECT_EQ(f->hosts[1].name_from, NameFrom::kFile);
  EXPECT_EQ(f->hosts[2].name, "chosen");
  EXPECT_EQ(f->hosts[2].name_from, NameFrom::kArgument);
}

TEST(FleetMerge, DuplicateHostNamesAreAnErrorNamingBothFiles) {
  std::vector<MergeInput> in;
  in.push_back({"east/qualify.json", "", host_report("vm")});
  in.push_back({"west/report.json", "", host_report("other")});
  in.push_back({"north/report.json", "", host_report("vm")});
  auto f = merge_reports(std::move(in), {});
  ASSERT_FALSE(f.ok());
  std::string m = f.error().message();
  EXPECT_NE(m.find("two hosts named \"vm\": east/qualify.json and north/report.json"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("west"), std::string::npos) << m;
  // Named apart by the operator, the same reports merge.
  in.clear();
  in.push_back({"east/qualify.json", "", host_report("vm")});
  in.push_back({"north/report.json", "north", host_report("vm")});
  EXPECT_TRUE(merge_reports(std::move(in), {}).ok());
}

TEST(FleetMerge, SameClassHostsThatAgreeHaveNoDifferences) {
  Fleet f = merged({host_report("node-a"), host_report("node-b")});
  auto classes = fleet_classes(f);
  ASSERT_EQ(classes.size(), 1u);
  EXPECT_EQ(classes[0].name, "x86_64/linux-6.1/hybrid/tcg");
  EXPECT_EQ(classes[0].hosts, (std::vector<std::string>{"node-a", "node-b"}));
  EXPECT_TRUE(classes[0].differences.empty());
  EXPECT_TRUE(between_classes(f).empty());
  // The matrix: every host × every provider, with the report's own counts and costs.
  Report r = real_report();
  auto matrix = fleet_matrix(f);
  ASSERT_EQ(matrix.size(), 2u);
  ASSERT_EQ(fleet_providers(f), (std::vector<std::string>{"namespaces", "host_dir"}));
  for (const auto& row : matrix) {
    ASSERT_EQ(row.cells.size(), 2u);
    const FleetCell& ns = row.cells[0];
    const FleetCell& host = row.cells[1];
    EXPECT_EQ(ns.status, FleetCell::Status::kQualified);
    EXPECT_EQ(host.status, FleetCell::Status::kNotQualified);
    EXPECT_EQ(host.why_not, provider(r, "host_dir").disqualifications);
    EXPECT_EQ(host.exposed, count(provider(r, "host_dir"), probes::Verdict::kExposed));
    EXPECT_EQ(ns.blocked, count(provider(r, "namespaces"), probes::Verdict::kBlocked));
    EXPECT_EQ(ns.run_ms, provider(r, "namespaces").costs.run_ms);
    EXPECT_EQ(ns.run_ratio, cost_ratios(r, provider(r, "namespaces")).run);
  }
  std::string md = render_fleet_markdown(f);
  EXPECT_NE(md.find("Agree on everything: x86\\_64/linux-6.1/hybrid/tcg (2 hosts)"),
            std::string::npos)
      << md;
  EXPECT_EQ(md.find("#### "), std::string::npos) << "a difference claimed:\n" << md;
}

TEST(FleetMerge, SameClassHostsThatDisagreeOnAProbeShowBothVerdictsAndEvidence) {
  Report b = host_report("node-b");
  expose_env_tokens(b, "read canary bytes carrying the marker: AWS_SECRET_ACCESS_KEY");
  Fleet f = merged({host_report("node-a"), b});
  auto classes = fleet_classes(f);
  ASSERT_EQ(classes.size(), 1u);
  const auto& diffs = classes[0].differences;
  ASSERT_EQ(diffs.size(), 2u);  // its qualification, and the one probe
  EXPECT_EQ(diffs[0].kind, HostDifference::Kind::kProvider);
  EXPECT_EQ(diffs[0].hosts[0].value, "qualified");
  EXPECT_EQ(diffs[0].hosts[1].value, "not qualified");
  EXPECT_EQ(diffs[0].hosts[1].evidence, "the escape probes found it exposed");
  const HostDifference& d = diffs[1];
  EXPECT_EQ(d.kind, HostDifference::Kind::kProbe);
  EXPECT_EQ(d.provider, "namespaces");
  EXPECT_EQ(d.id, "creds.env_tokens");
  ASSERT_EQ(d.hosts.size(), 2u);
  Report a = real_report();
  EXPECT_EQ(d.hosts[0].host, "node-a");
  EXPECT_EQ(d.hosts[0].value, "blocked (environment)");
  EXPECT_EQ(d.hosts[0].evidence, verdict(a, "namespaces", "creds.env_tokens").why);
  EXPECT_EQ(d.hosts[1].host, "node-b");
  EXPECT_EQ(d.hosts[1].value, "exposed");
  EXPECT_EQ(d.hosts[1].evidence, "read canary bytes carrying the marker: AWS_SECRET_ACCESS_KEY");

  std::string md = render_fleet_markdown(f);
  auto differences = md.find("#### x86\\_64/linux-6.1/hybrid/tcg: 2 hosts (node-a, node-b)");
  ASSERT_NE(differences, std::string::npos) << md;
  EXPECT_LT(differences, md.find("### Hosts × providers")) << "the differences come first";
  // Two hosts, one each way: in fleet order (in a larger class the odd ones out come first).
  EXPECT_NE(md.find("- **namespaces** probe creds.env\\_tokens\n"
                    "  - node-a: blocked (environment) — ENOENT: the launching environment"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find(" tokens is in the environment\n"
                    "  - node-b: **exposed** — read canary bytes carrying the marker: "
                    "AWS\\_SECRET\\_ACCESS\\_KEY\n"),
            std::string::npos)
      << md;
  std::string html = render_fleet_html(f);
  EXPECT_NE(html.find("<b>node-b</b>: <span class=\"bad\">exposed</span>"), std::string::npos);
  EXPECT_NE(html.find("notes: canary token AWS_SECRET_ACCESS_KEY seen"), std::string::npos)
      << "the host's own witness";
}

// In a class of three where the last host disagrees, it is listed first and the two that agree
// after it, in fleet order.
TEST(FleetMarkdown, TheHostThatDisagreesIsListedFirst) {
  Report c = host_report("node-c");
  expose_env_tokens(c, "read the canary tokens");
  std::string md = render_fleet_markdown(merged({host_report("node-a"), host_report("node-b"), c}));
  auto probe = md.find("- **namespaces** probe creds.env\\_tokens\n");
  ASSERT_NE(probe, std::string::npos) << md;
  EXPECT_EQ(md.find("  - node-c: **exposed**", probe), md.find('\n', probe) + 1) << md;
  EXPECT_LT(md.find("  - node-a: blocked", probe), md.find("  - node-b: blocked", probe)) << md;
}

// The layer that blocked a probe is part of its verdict: blocked by seccomp on one host and by
// the mount table on another is a difference, and so is a capability one host declares.
TEST(FleetMerge, ALayerOrACapabilityIsADifferenceToo) {
  Report b = host_report("node-b");
  verdict(b, "namespaces", "creds.keyctl_session").layer = "namespace";
  provider(b, "namespaces").capabilities.push_back("net.egress_allowlist");
  Fleet f = merged({host_report("node-a"), b});
  auto diffs = fleet_classes(f)[0].differences;
  ASSERT_EQ(diffs.size(), 2u);
  EXPECT_EQ(diffs[0].id, "creds.keyctl_session");
  EXPECT_EQ(diffs[0].hosts[0].value, "blocked (seccomp)");
  EXPECT_EQ(diffs[0].hosts[1].value, "blocked (namespace)");
  EXPECT_EQ(diffs[1].kind, HostDifference::Kind::kCapability);
  EXPECT_EQ(diffs[1].id, "net.egress_allowlist");
  EXPECT_EQ(diffs[1].hosts[0].value, "not declared");
}

TEST(FleetMerge, DifferentClassesClaimNoWithinClassDifferences) {
  Report b = host_report("node-b", "6.1.0-57-cloud-amd64", "v2", true);
  expose_env_tokens(b, "read the canary tokens");
  Fleet f = merged({host_report("node-a"), b});
  auto classes = fleet_classes(f);
  ASSERT_EQ(classes.size(), 2u);
  EXPECT_EQ(classes[1].name, "x86_64/linux-6.1/v2/kvm");
  for (const auto& c : classes) EXPECT_TRUE(c.differences.empty()) << c.name;
  // Summarised between the classes instead.
  auto between = between_classes(f);
  ASSERT_EQ(between.size(), 2u);
  EXPECT_EQ(between[0].provider, "namespaces");
  EXPECT_EQ(between[0].probes_differing, std::vector<std::string>{"creds.env_tokens"});
  EXPECT_EQ(between[0].classes[0].qualified, 1u);
  EXPECT_EQ(between[0].classes[1].qualified, 0u);
  EXPECT_TRUE(between[1].probes_differing.empty()) << "host_dir is exposed alike on both";
  std::string md = render_fleet_markdown(f);
  EXPECT_NE(md.find("No two hosts are of one class"), std::string::npos) << md;
  EXPECT_NE(md.find("- **namespaces** qualified on 1 of 1 in x86\\_64/linux-6.1/hybrid/tcg, 0 of "
                    "1 in x86\\_64/linux-6.1/v2/kvm; 1 probe judged differently between "
                    "classes: creds.env\\_tokens"),
            std::string::npos)
      << md;

  // The operator says they are one kind after all: the difference is called out.
  MergeOptions one;
  one.classes = {{"node-a", "pool-1"}, {"node-b", "pool-1"}};
  Report b2 = host_report("node-b", "6.1.0-57-cloud-amd64", "v2", true);
  expose_env_tokens(b2, "read the canary tokens");
  Fleet together = merged({host_report("node-a"), b2}, one);
  auto c = fleet_classes(together);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].name, "pool-1");
  EXPECT_EQ(together.hosts[1].class_from, ClassFrom::kArgument);
  EXPECT_EQ(c[0].differences.size(), 2u);
}

TEST(FleetMerge, AClassForAHostThatIsNotThereIsAnError) {
  MergeOptions o;
  o.classes = {{"node-z", "pool"}};
  std::vector<MergeInput> in;
  in.push_back({"a/report.json", "", host_report("node-a")});
  auto f = merge_reports(std::move(in), o);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message().find("--class: no host named \"node-z\" (the hosts: node-a)"),
            std::string::npos)
      << f.error().message();
}

// Two hosts of one class carrying a hostile provider whose verdicts differ: everything a
// sandbox or a hostile report wrote is shown, inert.
Fleet hostile_fleet() {
  std::string evil = hostile_text();
  Report a = hostile_report(), b = hostile_report();
  a.host["system"] = {{"hostname", "a-" + evil.substr(0, 120)}, {"kernel_release", evil}};
  b.host["system"] = {{"hostname", "b-" + evil.substr(0, 120)}, {"kernel_release", evil}};
  b.providers.back().probes->front().verdict = probes::Verdict::kBlocked;
  b.providers.back().probes->front().layer = evil.substr(0, 60);
  Fleet f = merged({a, b});
  EXPECT_EQ(fleet_classes(f).size(), 1u);
  EXPECT_FALSE(fleet_classes(f)[0].differences.empty());
  return f;
}

void expect_fleet_inert(const std::string& out, const std::string& shown) {
  std::string copy = out;
  EXPECT_EQ(make_valid_utf8(copy), 0u) << "invalid UTF-8";
  for (size_t i = 0; i < out.size(); ++i) {
    auto c = static_cast<unsigned char>(out[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7f) {
      ADD_FAILURE() << "control byte " << int(c) << " at " << i;
      break;
    }
  }
  EXPECT_EQ(out.find("\xc2\x9b"), std::string::npos) << "C1 CSI";
  EXPECT_EQ(out.find("\xe2\x80\xae"), std::string::npos) << "bidi override";
  EXPECT_EQ(out.find("TAIL-NEVER-SHOWN"), std::string::npos) << "the long text was not cut";
  EXPECT_EQ(out.find("<script"), std::string::npos);
  EXPECT_EQ(out.find("<img"), std::string::npos);
  EXPECT_NE(out.find(shown), std::string::npos) << "the hostile text is shown, not dropped";
}

TEST(FleetMarkdown, HostileTextIsEscaped) {
  Fleet f = hostile_fleet();
  std::string out = render_fleet_markdown(f);
  expect_fleet_inert(out, "\\\\x1b\\[31mRED");
  EXPECT_EQ(out.find("[link]("), std::string::npos) << "a live link";
  // Every row of the matrix keeps its cells (host, class, each provider): no '|' from the text
  // opens another.
  size_t providers = fleet_providers(f).size();
  std::regex unescaped_pipe(R"((^|[^\\])\|)");
  size_t start = out.find("### Hosts × providers");
  size_t end = out.find("\n\n", out.find("\n|", start) + 1);
  ASSERT_NE(start, std::string::npos);
  for (size_t at = out.find("\n| ", start); at < end; at = out.find("\n| ", at + 1)) {
    std::string row = out.substr(at + 1, out.find('\n', at + 1) - at - 1);
    auto n = std::distance(std::sregex_iterator(row.begin(), row.end(), unescaped_pipe),
                           std::sregex_iterator());
    EXPECT_EQ(static_cast<size_t>(n), providers + 3) << row.substr(0, 300);
  }
}

TEST(FleetHtml, HostileTextIsInertAndNothingIsFetched) {
  std::string out = render_fleet_html(hostile_fleet());
  expect_fleet_inert(out, "\\x1b[31mRED");
  EXPECT_NE(out.find("&lt;script&gt;"), std::string::npos);
  EXPECT_EQ(out.find("-->"), std::string::npos);
  std::regex fetch(R"((src|href|action|poster|data)\s*=\s*["']?\s*(https?:)?//)",
                   std::regex::icase);
  EXPECT_FALSE(std::regex_search(out, fetch));
  EXPECT_EQ(out.find("url("), std::string::npos);
  EXPECT_NE(out.find("default-src 'none'"), std::string::npos);
}

TEST(FleetJson, RoundTripsThroughItsReader) {
  Report b = host_report("node-b");
  expose_env_tokens(b, "read the canary tokens");
  MergeOptions o;
  o.created = "2026-12-01T18:09:12Z";
  o.classes = {{"node-c", "gpu-pool"}};
  Fleet f = merged({host_report("node-a"), b, host_report("node-c", "6.12.1", "v2", true)}, o);
  Json once = to_json(f);
  EXPECT_EQ(once["type"], "sandgate-fleet");
  EXPECT_FALSE(once["classes"][0]["differences"].empty());
  auto back = fleet_from_json(once);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(to_json(*back), once);
  // And through the text a file holds.
  auto parsed = parse_json(render_fleet_json(f), "fleet.json");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  auto again = fleet_from_json(*parsed);
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_EQ(render_fleet_markdown(*again), render_fleet_markdown(f));
  // Hostile text survives the trip too.
  Json hostile = to_json(hostile_fleet());
  auto hostile_back = fleet_from_json(*parse_json(dump_json(hostile), "fleet.json"));
  ASSERT_TRUE(hostile_back.ok()) << hostile_back.error().message();
}

std::string fleet_error_of(const Json& j) {
  auto r = fleet_from_json(j);
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.error().message();
}

TEST(FleetJson, ErrorsNameTheField) {
  Report b = host_report("node-b");
  expose_env_tokens(b, "read the canary tokens");
  const Json good = to_json(merged({host_report("node-a"), b}));
  Json j = good;
  j["hosts"][1]["report"]["providers"][0]["qualified"] = "yes";
  EXPECT_NE(fleet_error_of(j).find(
                "hosts[1].report.providers[0].qualified: expected true or false, got \"yes\""),
            std::string::npos)
      << fleet_error_of(j);
  j = good;
  j["hosts"][0]["colour"] = "red";
  EXPECT_NE(fleet_error_of(j).find("hosts[0].colour: unknown field"), std::string::npos)
      << fleet_error_of(j);
  j = good;
  j["schema_version"] = 99;
  EXPECT_NE(fleet_error_of(j).find("schema_version: this sandgate reads versions 1 to 1, got 99"),
            std::string::npos);
  j = good;
  j["hosts"][1]["name"] = "node-a";
  EXPECT_NE(fleet_error_of(j).find("hosts[1].name: a second host named \"node-a\""),
            std::string::npos)
      << fleet_error_of(j);
  j = good;
  j.erase("matrix");
  EXPECT_NE(fleet_error_of(j).find("matrix: missing"), std::string::npos) << fleet_error_of(j);
  // A derived section edited by hand: named where it departs from the reports.
  j = good;
  j["classes"][0]["differences"][1]["hosts"][1]["value"] = "blocked (seccomp)";
  EXPECT_NE(fleet_error_of(j).find("classes[0].differences[1].hosts[1].value: does not follow from "
                                   "the hosts' reports"),
            std::string::npos)
      << fleet_error_of(j);
  j = good;
  j["hosts"][0]["facts"]["kvm"] = true;
  EXPECT_NE(fleet_error_of(j).find("hosts[0].facts.kvm: does not follow from report.host"),
            std::string::npos)
      << fleet_error_of(j);
  j = good;
  j["hosts"][0]["class"] = "pool-9";
  EXPECT_NE(fleet_error_of(j).find("hosts[0].class: class_from is facts"), std::string::npos)
      << fleet_error_of(j);
  j = good;
  j["type"] = "sandgate-report";
  EXPECT_NE(fleet_error_of(j).find("type: expected \"sandgate-fleet\""), std::string::npos);
}

// ---- The command line: the real binary.

CommandResult sandgate(std::vector<std::string> args) {
  args.insert(args.begin(), SANDGATE_BINARY);
  auto r = run_command(args, std::chrono::seconds(60), 8 << 20);
  EXPECT_TRUE(r.ok()) << r.error().message();
  return r.ok() ? *r : CommandResult{};
}

void write_report(const std::string& path, const Report& r) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  ASSERT_TRUE(write_json_file_atomic(path, to_json(r)).ok());
}

TEST(FleetCli, MergesReportsIntoAFleet) {
  sandgate::testing::TempDir dir;
  Report b = real_report();  // no hostname: named by its directory
  expose_env_tokens(b, "read the canary tokens");
  write_report(dir / "node-a/report.json", real_report());
  write_report(dir / "node-b/report.json", b);
  auto r = sandgate({"report", "merge", dir / "node-a/report.json", dir / "node-b/report.json",
                     "-o", dir / "fleet.json"});
  ASSERT_EQ(r.status.shell_code(), 0) << r.output;
  auto j = read_json_file(dir / "fleet.json");
  ASSERT_TRUE(j.ok()) << j.error().message();
  auto f = fleet_from_json(*j);
  ASSERT_TRUE(f.ok()) << f.error().message();
  ASSERT_EQ(f->hosts.size(), 2u);
  EXPECT_EQ(f->hosts[1].name, "node-b");
  EXPECT_EQ(f->hosts[1].source, dir / "node-b/report.json");
  EXPECT_FALSE(f->created.empty());
  EXPECT_EQ(fleet_classes(*f)[0].differences.size(), 2u);

  // Markdown to standard output; a qualify.json (with its probe files) named on the line.
  std::string fixture = testing::fixture_dir() + "/qualify.json";
  auto md = sandgate({"report", "merge", "--format", "md", dir / "node-b/report.json",
                      fixture + "=node-q", "--class", "node-q=old-run"});
  ASSERT_EQ(md.status.shell_code(), 0) << md.output;
  EXPECT_EQ(md.output.rfind("## sandgate fleet: 2 hosts in 2 classes", 0), 0u) << md.output;
  EXPECT_NE(md.output.find("| node-q | old-run |"), std::string::npos) << md.output;

  auto help = sandgate({"report", "merge", "--help"});
  EXPECT_EQ(help.status.shell_code(), 0);
  EXPECT_NE(help.output.find("Example:"), std::string::npos) << help.output;
}

// Bad input: one line naming the file and the field (or both files), exit status 2.
TEST(FleetCli, BadInputIsOneLineAndExitTwo) {
  sandgate::testing::TempDir dir;
  write_report(dir / "a/report.json", real_report());
  write_report(dir / "b/report.json", real_report());
  Json broken = to_json(real_report());
  broken["providers"][1]["probes"]["verdicts"][0]["layer"] = 7;
  std::filesystem::create_directories(dir / "c");
  ASSERT_TRUE(write_json_file_atomic(dir / "c/report.json", broken).ok());
  auto one_line = [](const CommandResult& r) {
    EXPECT_EQ(r.status.shell_code(), 2) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  };

  auto field = sandgate({"report", "merge", dir / "a/report.json", dir / "c/report.json"});
  one_line(field);
  EXPECT_NE(field.output.find("providers[1].probes.verdicts[0].layer: expected a string, got 7"),
            std::string::npos)
      << field.output;
  EXPECT_NE(field.output.find(dir / "c/report.json"), std::string::npos) << field.output;

  auto twice = sandgate({"report", "merge", dir / "a/report.json", dir / "b/report.json=a"});
  one_line(twice);
  EXPECT_NE(twice.output.find("two hosts named \"a\": " + (dir / "a/report.json") + " and " +
                              (dir / "b/report.json")),
            std::string::npos)
      << twice.output;

  auto format = sandgate({"report", "merge", "--format", "sarif", dir / "a/report.json"});
  one_line(format);
  EXPECT_NE(format.output.find("json, md or html"), std::string::npos) << format.output;

  auto bad_class = sandgate({"report", "merge", dir / "a/report.json", "--class", "a"});
  one_line(bad_class);
  EXPECT_NE(bad_class.output.find("--class: expected HOST=CLASS"), std::string::npos)
      << bad_class.output;
}

// The doctor's own facts name the host and make its class.
TEST(FleetCli, NamesAHostByItsDoctorsHostname) {
  sandgate::testing::TempDir dir;
  auto doctor = sandgate({"doctor", "--json"});
  ASSERT_EQ(doctor.status.shell_code(), 0) << doctor.output;
  auto facts = parse_json(doctor.output, "doctor --json");
  ASSERT_TRUE(facts.ok()) << facts.error().message();
  ASSERT_TRUE((*facts)["system"]["hostname"].is_string()) << doctor.output.substr(0, 400);
  Report r = real_report();
  r.host = *facts;
  write_report(dir / "x/report.json", r);
  auto merged_run = sandgate({"report", "merge", dir / "x/report.json"});
  ASSERT_EQ(merged_run.status.shell_code(), 0) << merged_run.output;
  auto fleet = fleet_from_json(*parse_json(merged_run.output, "fleet"));
  ASSERT_TRUE(fleet.ok()) << fleet.error().message();
  EXPECT_EQ(fleet->hosts[0].name, (*facts)["system"]["hostname"].get<std::string>());
  EXPECT_EQ(fleet->hosts[0].name_from, NameFrom::kHostname);
  HostFacts hf = host_facts(*facts);
  EXPECT_EQ(hf.machine, (*facts)["system"]["machine"].get<std::string>());
  ASSERT_TRUE(hf.kernel);
  EXPECT_EQ((*facts)["system"]["kernel_release"].get<std::string>().rfind(*hf.kernel + ".", 0), 0u)
      << *hf.kernel;
  EXPECT_EQ(fleet->hosts[0].host_class, class_name(hf));
}

}  // namespace
}  // namespace sandgate::reports
