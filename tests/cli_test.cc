// The sandgate command line, end to end: exit statuses, clear errors for bad input, --json,
// and clean-up after SIGTERM and after kill -9 (+ `sandgate gc`).
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "core/defer.h"
#include "core/fd.h"
#include "core/json.h"
#include "core/process.h"
#include "tests/support/cli_fixture.h"
#include "tests/support/eventually.h"

namespace sandgate::testing {
namespace {

// A file's text, or `fallback` when it cannot be read.
std::string text_or(const Result<std::string>& r, const std::string& fallback) {
  return r.ok() ? *r : fallback;
}

TEST_F(CliTest, QualifyWritesTheReport) {
  SANDGATE_REQUIRE_ROOT();
  auto r = sandgate({"qualify", "--out", tmp_ + "/report", "--cycles", "2", "--calls", "5"});
  // 1 is a verdict: rootful Podman creates each container's user namespace as root, so the
  // kernel's per-user inotify count is shared by every container (crossrun.user_inotify,
  // checked below); the jail, and rootless Podman, own each run's namespace as the run's id.
  EXPECT_TRUE(r.status.shell_code() == 0 || r.status.shell_code() == 1) << r.output;
  auto j = read_json_file(tmp_ + "/report/qualify.json");
  ASSERT_TRUE(j.ok()) << j.error().message();
  EXPECT_EQ((*j)["schema_version"], 2);
  EXPECT_TRUE((*j)["doctor"].contains("cgroup_layout"));
  // Every safe provider by default (namespaces, podman; microvm is opt-in), never the bypass
  // cable.
  ASSERT_EQ((*j)["providers"].size(), 2u) << (*j)["providers"].dump();
  const Json* ns = nullptr;
  for (const auto& p : (*j)["providers"]) {
    EXPECT_EQ(p["unsafe"], false) << "only safe providers by default: " << p.dump();
    if (p["name"] == "namespaces") ns = &p;
  }
  ASSERT_NE(ns, nullptr) << (*j)["providers"].dump();
  EXPECT_EQ((*ns)["ok"], true) << ns->dump();
  EXPECT_EQ((*ns)["cycles_ms"].size(), 2u);
  // The cost of one call, with the controller and without: both measured, the controller's
  // cgroup and placement cannot make a call cheaper than the provider's exec alone.
  ASSERT_TRUE(ns->contains("exec_ms") && ns->contains("call_ms")) << ns->dump();
  EXPECT_GT((*ns)["exec_ms"].get<double>(), 0);
  EXPECT_GT((*ns)["call_ms"].get<double>(), (*ns)["exec_ms"].get<double>() * 0.5);
  // The escape probes ran against it, in the lab, and found nothing exposed.
  ASSERT_TRUE(ns->contains("probes")) << ns->dump();
  // Exposed only where a shared kernel cannot hide it (known limits: uname, the workspace's
  // host path, the default base's canaries; meminfo and the load side channel are the run's
  // own /proc views), and nothing that fails it.
  EXPECT_EQ((*ns)["probes"]["failing_ids"], Json::array()) << (*ns)["probes"].dump();
  EXPECT_EQ((*ns)["probes"]["exposed"], (*ns)["probes"]["known_limit"]) << (*ns)["probes"].dump();
  for (const auto& p : (*j)["providers"]) {
    if (p["name"] != "podman" || !p.contains("probes")) continue;
    // The column names the mode the default (auto) picked, and the mode decides this probe:
    // rootless where the host allows it (doctor says), and then nothing fails.
    bool rootless = (*j)["doctor"]["podman"].value("rootless", false);
    EXPECT_EQ(p["podman_mode"], rootless ? "rootless" : "rootful") << p.dump();
    EXPECT_NE(p["display_name"].get<std::string>().find(rootless ? "(rootless)" : "(rootful)"),
              std::string::npos)
        << p.dump();
    Json failing = p["probes"]["failing_ids"];
    EXPECT_EQ(failing, rootless ? Json::array() : Json::array({"crossrun.user_inotify"}))
        << p["probes"].dump();
    EXPECT_EQ(r.status.shell_code(), failing.empty() ? 0 : 1) << r.output;
  }
  EXPECT_GT((*ns)["probes"]["blocked"].get<int>(), 50) << (*ns)["probes"].dump();
  auto full = read_json_file((*ns)["probes"]["report"].get<std::string>());
  ASSERT_TRUE(full.ok()) << full.error().message();
  EXPECT_EQ((*full)["runs"][0]["provider"], "namespaces");
  // The short replay: every call of the built-in burst completed through the provider.
  ASSERT_TRUE(ns->contains("replay")) << ns->dump();
  EXPECT_GE((*ns)["replay"]["calls"].get<int>(), 3) << "the built-in burst has 4 calls";
  EXPECT_EQ((*ns)["replay"]["completed"], (*ns)["replay"]["calls"]) << (*ns)["replay"].dump();
  // Providers are columns of one table.
  EXPECT_NE(r.output.find("call: with the controller"), std::string::npos) << r.output;
  // Asking for the bypass cable without the flag is refused and fails the job.
  auto unsafe = sandgate({"qualify", "--out", tmp_ + "/report2", "--cycles", "1", "--no-probes",
                          "--no-replay", "--provider", "host_dir"});
  EXPECT_EQ(unsafe.status.shell_code(), 1) << unsafe.output;
  EXPECT_NE(unsafe.output.find("--allow-unsafe-host"), std::string::npos);
}

// Side by side: a provider this host cannot run (here: one that does not exist) is a column
// with the reason, not left out; and where the probes disagree (the jail against the unsafe
// negative control), each provider's verdict comes with its evidence.
TEST_F(CliTest, QualifyPutsProvidersSideBySideAndShowsWhereTheProbesDisagree) {
  SANDGATE_REQUIRE_ROOT();
  auto r = sandgate({"qualify", "--out", tmp_ + "/report", "--cycles", "1", "--calls", "3",
                     "--no-replay", "--only", "creds", "--allow-unsafe-host", "--provider",
                     "namespaces", "--provider", "host_dir", "--provider", "no_such_provider"});
  EXPECT_EQ(r.status.shell_code(), 1) << r.output;
  auto j = read_json_file(tmp_ + "/report/qualify.json");
  ASSERT_TRUE(j.ok()) << j.error().message();
  ASSERT_EQ((*j)["providers"].size(), 3u) << (*j)["providers"].dump();
  EXPECT_EQ((*j)["providers"][0]["ok"], true) << (*j)["providers"][0].dump();
  EXPECT_EQ((*j)["providers"][1]["ok"], false) << "host_dir is exposed";
  EXPECT_EQ((*j)["providers"][2]["ok"], false);
  EXPECT_NE((*j)["providers"][2]["error"].get<std::string>().find("no_such_provider"),
            std::string::npos);
  const Json& diff = (*j)["probe_differences"];
  ASSERT_FALSE(diff.empty()) << "host_dir and the jail must disagree on creds probes";
  bool exposed_on_host = false;
  for (const auto& d : diff) {
    ASSERT_TRUE(d["providers"].contains("namespaces")) << d.dump();
    ASSERT_TRUE(d["providers"].contains("host_dir")) << d.dump();
    for (const auto& [provider, v] : d["providers"].items())
      EXPECT_FALSE(v["why"].get<std::string>().empty()) << provider << ": " << d.dump();
    if (d["providers"]["host_dir"]["verdict"] == "exposed") exposed_on_host = true;
  }
  EXPECT_TRUE(exposed_on_host) << diff.dump();
  // The table has a column per provider, the missing one included.
  EXPECT_NE(r.output.find("no_such_provider"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("where the probes disagree"), std::string::npos) << r.output;
  // The same findings as the report model, in every format, the missing provider included.
  for (const char* f : {"report.json", "report.html", "junit.xml", "report.sarif", "summary.md"})
    EXPECT_EQ(::access((tmp_ + "/report/" + f).c_str(), R_OK), 0) << f;
  auto model = read_json_file(tmp_ + "/report/report.json");
  ASSERT_TRUE(model.ok()) << model.error().message();
  EXPECT_EQ((*model)["type"], "sandgate-report");
  EXPECT_EQ((*model)["baseline_provider"], "host_dir");
  EXPECT_EQ((*model)["providers"][2]["disqualifications"].size(), 1u) << (*model)["providers"][2];
  auto md = sandgate({"report", "render", "--format", "md", tmp_ + "/report/report.json"});
  EXPECT_EQ(md.status.shell_code(), 0) << md.output;
  EXPECT_NE(md.output.find("1 of 3 providers qualified"), std::string::npos) << md.output;
  EXPECT_NE(md.output.find("| no\\_such\\_provider | **no**"), std::string::npos) << md.output;
}

// A saved report rendered again: from the model or from a qualify.json with its probe files
// beside it (the committed fixture's recorded paths point at a directory that is gone).
TEST_F(CliTest, ReportRenderReRendersASavedReport) {
  const std::string fixture = source_dir() + "/reports/testdata/qualify-creds/qualify.json";
  struct Want {
    const char* format;
    const char* starts;
  };
  for (Want w :
       {Want{"html", "<!DOCTYPE html>"}, Want{"junit", "<?xml version=\"1.0\""}, Want{"sarif", "{"},
        Want{"md", "## sandgate qualify: 1 of 2"}, Want{"json", "{"}}) {
    std::string out = tmp_ + "/out." + w.format;
    auto r = sandgate({"report", "render", "--format", w.format, fixture, "-o", out});
    EXPECT_EQ(r.status.shell_code(), 0) << w.format << ": " << r.output;
    auto text = read_file(out);
    ASSERT_TRUE(text.ok()) << w.format;
    EXPECT_EQ(text->rfind(w.starts, 0), 0u) << w.format << ": " << text->substr(0, 80);
  }
  // The model re-rendered is the model.
  auto again = sandgate({"report", "render", "--format", "json", tmp_ + "/out.json"});
  EXPECT_EQ(again.status.shell_code(), 0) << again.output;
  EXPECT_EQ(again.output, *read_file(tmp_ + "/out.json"));

  auto bad_format = sandgate({"report", "render", "--format", "pdf", fixture});
  EXPECT_EQ(bad_format.status.shell_code(), 2);
  EXPECT_NE(bad_format.output.find("expected html, junit, sarif, md or json"), std::string::npos)
      << bad_format.output;
  auto model = read_json_file(tmp_ + "/out.json");
  ASSERT_TRUE(model.ok());
  (*model)["providers"][1]["probes"]["verdicts"][0]["layer"] = 7;
  ASSERT_TRUE(write_json_file_atomic(tmp_ + "/broken.json", *model).ok());
  auto broken = sandgate({"report", "render", "--format", "html", tmp_ + "/broken.json"});
  EXPECT_EQ(broken.status.shell_code(), 2);
  EXPECT_NE(broken.output.find("providers[1].probes.verdicts[0].layer: expected a string, got 7"),
            std::string::npos)
      << broken.output;
}

// The gate end to end: the same report passes (0), a probe that was blocked and is now exposed
// fails (1) with the finding first and in the Markdown, an accepted one passes, bad input is 2.
TEST_F(CliTest, GateFailsOnARegressionAndOnlyThen) {
  const std::string fixture = source_dir() + "/reports/testdata/qualify-creds/qualify.json";
  const std::string base = tmp_ + "/base.json";
  ASSERT_EQ(
      sandgate({"report", "render", "--format", "json", fixture, "-o", base}).status.shell_code(),
      0);
  auto same = sandgate({"gate", "--baseline", base, base});
  EXPECT_EQ(same.status.shell_code(), 0) << same.output;
  EXPECT_NE(same.output.find("nothing regressed"), std::string::npos) << same.output;

  auto model = read_json_file(base);
  ASSERT_TRUE(model.ok());
  Json& provider = (*model)["providers"][0];
  ASSERT_EQ(provider["name"], "namespaces");
  Json* blocked = nullptr;
  for (auto& v : provider["probes"]["verdicts"])
    if (v["verdict"] == "blocked") blocked = &v;
  ASSERT_NE(blocked, nullptr);
  const std::string id = (*blocked)["id"];
  (*blocked)["verdict"] = "exposed";
  blocked->erase("layer");
  (*blocked)["why"] = "the token was read";
  ASSERT_TRUE(write_json_file_atomic(tmp_ + "/weakened.json", *model).ok());
  auto worse = sandgate({"gate", "--baseline", base, tmp_ + "/weakened.json", "--markdown",
                         tmp_ + "/gate.md", "--json", tmp_ + "/gate.json"});
  EXPECT_EQ(worse.status.shell_code(), 1) << worse.output;
  EXPECT_NE(worse.output.find("WORSE            namespaces: " + id + ": exposed, was blocked"),
            std::string::npos)
      << worse.output;
  auto md = read_file(tmp_ + "/gate.md");
  ASSERT_TRUE(md.ok());
  EXPECT_LT(md->find("### What changed"), md->find("| provider |")) << *md;
  auto findings = read_json_file(tmp_ + "/gate.json");
  ASSERT_TRUE(findings.ok());
  EXPECT_EQ((*findings)["regressions"], 1);

  ASSERT_TRUE(write_file(tmp_ + "/tolerance.json",
                         std::string("{\"accept\": [\"namespaces/") + id + "\"]}",
                         O_WRONLY | O_CREAT | O_CLOEXEC)
                  .ok());
  auto accepted = sandgate({"gate", "--baseline", base, tmp_ + "/weakened.json", "--tolerance",
                            tmp_ + "/tolerance.json"});
  EXPECT_EQ(accepted.status.shell_code(), 0) << accepted.output;
  EXPECT_NE(accepted.output.find("worse (accepted)"), std::string::npos) << accepted.output;

  ASSERT_TRUE(
      write_file(tmp_ + "/bad-tolerance.json", "{\"acept\": []}", O_WRONLY | O_CREAT | O_CLOEXEC)
          .ok());
  auto bad =
      sandgate({"gate", "--baseline", base, base, "--tolerance", tmp_ + "/bad-tolerance.json"});
  EXPECT_EQ(bad.status.shell_code(), 2);
  EXPECT_NE(bad.output.find("acept: unknown field"), std::string::npos) << bad.output;
  auto missing = sandgate({"gate", "--baseline", tmp_ + "/nope.json", base});
  EXPECT_EQ(missing.status.shell_code(), 2);
  EXPECT_NE(missing.output.find("nope.json"), std::string::npos) << missing.output;
}

// probe --report: the same findings as the report model, in every format, as qualify writes.
TEST_F(CliTest, ProbeWritesTheReportModel) {
  SANDGATE_REQUIRE_ROOT();
  auto r = sandgate(
      {"probe", "--provider", "namespaces", "--only", "creds", "--report", tmp_ + "/probe-report"});
  EXPECT_EQ(r.status.shell_code(), 0) << r.output;
  for (const char* f : {"report.json", "report.html", "junit.xml", "report.sarif", "summary.md"})
    EXPECT_EQ(::access((tmp_ + "/probe-report/" + f).c_str(), F_OK), 0) << f;
  auto model = read_json_file(tmp_ + "/probe-report/report.json");
  ASSERT_TRUE(model.ok());
  EXPECT_EQ((*model)["job"], "probe");
  EXPECT_EQ((*model)["providers"][0]["name"], "namespaces");
  EXPECT_EQ((*model)["providers"][0]["qualified"], true);
  EXPECT_GE((*model)["providers"][0]["probes"]["verdicts"].size(), 5u);
  EXPECT_TRUE((*model)["host"].contains("cgroup_layout"));
}

// --image on probe and qualify: podman only, passed through to every run (a missing image is
// named by the run that needed it).
TEST_F(CliTest, ProbeAndQualifyTakeAnImageForPodmanOnly) {
  SANDGATE_REQUIRE_ROOT();
  auto jail = sandgate({"probe", "--provider", "namespaces", "--image", "x", "--only", "creds"});
  EXPECT_EQ(jail.status.shell_code(), 2);
  EXPECT_NE(jail.output.find("only the podman provider runs a container image, not namespaces"),
            std::string::npos)
      << jail.output;
  auto no_podman = sandgate({"qualify", "--provider", "namespaces", "--image", "x", "--out",
                             tmp_ + "/q", "--no-probes", "--no-replay"});
  EXPECT_EQ(no_podman.status.shell_code(), 2);
  EXPECT_NE(no_podman.output.find("it is not selected"), std::string::npos) << no_podman.output;
  auto missing = sandgate({"probe", "--provider", "podman", "--image",
                           "sandgate-no-such-image:never", "--only", "creds"});
  EXPECT_NE(missing.status.shell_code(), 0);
  EXPECT_NE(missing.output.find("sandgate-no-such-image:never"), std::string::npos)
      << missing.output;
}

// Runs sandgate with its stdout and stderr on a pseudo-terminal; returns what the terminal got.
std::string sandgate_on_a_terminal(const std::vector<std::string>& args) {
  int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0) return "no pty";
  UniqueFd m(master);
  std::string slave = ::ptsname(master);
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(slave.c_str(), O_RDWR);
    if (fd < 0) ::_exit(127);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<std::string> all = {SANDGATE_BINARY};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  std::string out;
  char buf[4096];
  for (;;) {
    struct pollfd p = {m.get(), POLLIN, 0};
    if (::poll(&p, 1, 60000) <= 0) break;  // a minute without output: give up, the test fails
    ssize_t n = ::read(m.get(), buf, sizeof buf);
    if (n <= 0) break;  // EIO once the child (the last holder of the slave) is gone
    out.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return out;
}

// The sandbox's output on the caller's terminal: escape sequences shown as text, not obeyed
// (a title change, a screen clear); --raw-output and a pipe get the bytes unchanged.
TEST_F(CliTest, ExecShowsControlSequencesOnATerminalInsteadOfObeyingThem) {
  SANDGATE_REQUIRE_ROOT();
  std::vector<std::string> call = {"exec",
                                   "--provider",
                                   "namespaces",
                                   "--no-controller",
                                   "--",
                                   "printf",
                                   "\\033]0;pwned\\007\\033[2J ok\\n"};
  std::string shown = sandgate_on_a_terminal(call);
  EXPECT_NE(shown.find("\\x1b]0;pwned\\x07\\x1b[2J ok"), std::string::npos) << shown;
  EXPECT_EQ(shown.find('\x1b'), std::string::npos) << shown;
  EXPECT_EQ(shown.find('\x07'), std::string::npos) << shown;

  std::vector<std::string> raw = call;
  raw.insert(raw.begin() + 1, "--raw-output");
  EXPECT_NE(sandgate_on_a_terminal(raw).find("\x1b]0;pwned\x07\x1b[2J ok"), std::string::npos);
  auto piped = sandgate(call);
  EXPECT_EQ(piped.status.shell_code(), 0) << piped.output;
  EXPECT_NE(piped.output.find("\x1b]0;pwned\x07\x1b[2J ok\n"), std::string::npos) << piped.output;
}

// The clipboard (OSC 52, "c;<base64>" sets it in xterm, kitty, iTerm2 and tmux), an 8-bit CSI
// (0x9b: a terminal in 8-bit mode reads it as ESC [) and a screen clear on stderr: none of
// them reaches the caller's terminal as a control sequence.
TEST_F(CliTest, ExecKeepsTheClipboardAndStderrSequencesFromTheTerminal) {
  SANDGATE_REQUIRE_ROOT();
  std::string shown = sandgate_on_a_terminal(
      {"exec", "--provider", "namespaces", "--no-controller", "--", "sh", "-c",
       "printf '\\033]52;c;cHduZWQ=\\007 clip\\n'; printf '\\233''2J c1\\n';"
       " printf '\\033[2J\\033]0;t\\033\\\\ err\\n' >&2"});
  EXPECT_NE(shown.find("\\x1b]52;c;cHduZWQ=\\x07 clip"), std::string::npos) << shown;
  EXPECT_NE(shown.find("\\x9b2J c1"), std::string::npos) << shown;
  EXPECT_NE(shown.find("\\x1b[2J\\x1b]0;t\\x1b\\ err"), std::string::npos) << shown;
  EXPECT_EQ(shown.find('\x1b'), std::string::npos) << shown;
  EXPECT_EQ(shown.find('\x07'), std::string::npos) << shown;
  EXPECT_EQ(shown.find('\x9b'), std::string::npos) << shown;
}

TEST_F(CliTest, DoctorReportsThisHost) {
  auto r = sandgate({"doctor", "--json"});
  EXPECT_EQ(r.status.shell_code(), 0);
  auto j = parse_json(r.output, "doctor --json");
  ASSERT_TRUE(j.ok()) << r.output;
  EXPECT_EQ((*j)["schema_version"], 1);
  EXPECT_GE((*j)["sections"].size(), 7u);
  // The run's own /proc views: a line that says whether they work here (and why not), and
  // that they are off when turned off.
  auto proc_views = [](const Json& report) {
    for (const auto& section : report["sections"])
      for (const auto& c : section["checks"])
        if (c["name"] == "proc views") return c;
    return Json();
  };
  Json on = proc_views(*j);
  ASSERT_TRUE(on.is_object()) << "no proc views line: " << r.output.substr(0, 300);
  EXPECT_FALSE(on["detail"].get<std::string>().empty());
  // Where they work, the line says what podman runs go without, and why.
  if (on["ok"] == true) {
    EXPECT_NE(on["detail"].get<std::string>().find("podman runs get all but /proc/pressure/*"),
              std::string::npos)
        << on.dump();
  }
  auto off = sandgate({"--no-proc-views", "doctor", "--json"});
  auto jo = parse_json(off.output, "doctor --json");
  ASSERT_TRUE(jo.ok()) << off.output;
  Json turned_off = proc_views(*jo);
  EXPECT_EQ(turned_off["ok"], false) << turned_off.dump();
  EXPECT_NE(turned_off["detail"].get<std::string>().find("turned off"), std::string::npos);
}

TEST_F(CliTest, HelpForEveryCommand) {
  const std::vector<std::string> commands = {
      "exec",   "providers", "gc",   "doctor", "qualify", "serve", "probe", "record",
      "replay", "trace",     "plan", "policy", "report",  "gate",  "bench", "provider"};
  for (const auto& cmd : commands) {
    auto r = sandgate({cmd, "--help"});
    EXPECT_EQ(r.status.shell_code(), 0) << cmd;
    EXPECT_NE(r.output.find("Usage"), std::string::npos) << r.output;
  }
  // Only the named subcommand is made (cli/main.cc): the top level's help still lists all.
  auto top = sandgate({"--help"});
  EXPECT_EQ(top.status.shell_code(), 0);
  for (const auto& cmd : commands)
    EXPECT_NE(top.output.find("\n  " + cmd + " "), std::string::npos) << cmd << "\n" << top.output;
  // A global option's value is not taken for the subcommand, in either spelling.
  for (auto global : std::vector<std::vector<std::string>>{
           {"--cgroup-root", "exec", "gc", "--help"}, {"--cgroup-root=exec", "gc", "--help"}}) {
    auto r = sandgate(global);
    EXPECT_EQ(r.status.shell_code(), 0) << r.output;
    EXPECT_NE(r.output.find("Remove everything recorded"), std::string::npos) << r.output;
  }
  auto none = sandgate({"nosuch"});
  EXPECT_EQ(none.status.shell_code(), 2);
  EXPECT_NE(none.output.find("A subcommand is required"), std::string::npos) << none.output;
}

TEST_F(CliTest, BadInputGivesOneClearLine) {
  auto unknown = sandgate({"exec", "--provider", "nope", "--", "true"});
  EXPECT_EQ(unknown.status.shell_code(), 2);
  EXPECT_NE(
      unknown.output.find(
          "unknown provider 'nope' (known: host_dir, namespaces, podman, microvm, external:...)"),
      std::string::npos)
      << unknown.output;
  auto duration = sandgate({"exec", "--provider", "namespaces", "--timeout", "30", "--", "true"});
  EXPECT_EQ(duration.status.shell_code(), 2);
  EXPECT_NE(duration.output.find("has no unit"), std::string::npos) << duration.output;
  auto workspace = sandgate(
      {"exec", "--provider", "namespaces", "--workspace", tmp_ + "/missing", "--", "true"});
  EXPECT_NE(workspace.status.shell_code(), 0);
  EXPECT_NE(workspace.output.find("missing"), std::string::npos) << workspace.output;
  auto unsafe = sandgate({"exec", "--provider", "host_dir", "--", "true"});
  EXPECT_EQ(unsafe.status.shell_code(), 2);
  EXPECT_NE(unsafe.output.find("--allow-unsafe-host"), std::string::npos) << unsafe.output;
  // The network options: each mistake named, nothing made.
  auto stray =
      sandgate({"exec", "--provider", "namespaces", "--allow", "203.0.113.20:443", "--", "true"});
  EXPECT_EQ(stray.status.shell_code(), 2);
  EXPECT_NE(stray.output.find("--allow, --net-upstream and --dns-upstream need --net allowlist"),
            std::string::npos)
      << stray.output;
  auto no_upstream = sandgate({"exec", "--provider", "namespaces", "--net", "allowlist", "--allow",
                               "203.0.113.20:443", "--", "true"});
  EXPECT_EQ(no_upstream.status.shell_code(), 2);
  EXPECT_NE(no_upstream.output.find("needs --net-upstream"), std::string::npos)
      << no_upstream.output;
  auto named =
      sandgate({"exec", "--provider", "namespaces", "--net", "allowlist", "--allow",
                "registry.example:443", "--net-upstream", "/proc/self/ns/net", "--", "true"});
  EXPECT_EQ(named.status.shell_code(), 2);
  EXPECT_NE(named.output.find("names a host (registry.example:443): --dns-upstream"),
            std::string::npos)
      << named.output;
  auto wildcard = sandgate({"exec", "--provider", "namespaces", "--net", "allowlist", "--allow",
                            "*.example:443", "--net-upstream", "/proc/self/ns/net", "--", "true"});
  EXPECT_EQ(wildcard.status.shell_code(), 2);
  EXPECT_NE(wildcard.output.find("\"*.example:443\""), std::string::npos) << wildcard.output;
  EXPECT_NE(wildcard.output.find("wildcards are not supported"), std::string::npos)
      << wildcard.output;
  auto dns_name = sandgate({"exec", "--provider", "namespaces", "--net", "allowlist", "--allow",
                            "registry.example:443", "--net-upstream", "/proc/self/ns/net",
                            "--dns-upstream", "dns.example", "--", "true"});
  EXPECT_EQ(dns_name.status.shell_code(), 2);
  EXPECT_NE(dns_name.output.find("--dns-upstream"), std::string::npos) << dns_name.output;
  EXPECT_NE(dns_name.output.find("a name would need a resolver"), std::string::npos)
      << dns_name.output;
  auto dns_none = sandgate(
      {"exec", "--provider", "namespaces", "--dns-upstream", "203.0.113.53", "--", "true"});
  EXPECT_EQ(dns_none.status.shell_code(), 2);
  EXPECT_NE(dns_none.output.find("need --net allowlist"), std::string::npos) << dns_none.output;
  auto bad_mode = sandgate({"exec", "--provider", "namespaces", "--net", "host", "--", "true"});
  EXPECT_EQ(bad_mode.status.shell_code(), 2);
  EXPECT_NE(bad_mode.output.find("--net"), std::string::npos) << bad_mode.output;
}

// A command that cannot be started inside the sandbox exits as a shell would (127 not found,
// 126 not executable), with the step that failed named; 2 stays for sandgate's own errors.
TEST_F(CliTest, CommandThatCannotStartExitsLikeAShell) {
  SANDGATE_REQUIRE_ROOT();
  auto nocmd = sandgate({"exec", "--provider", "namespaces", "--", "no-such-command-xyz"});
  EXPECT_EQ(nocmd.status.shell_code(), 127) << nocmd.output;
  EXPECT_NE(nocmd.output.find(
                "could not start 'no-such-command-xyz' in the sandbox: execve: No such file "
                "or directory (ENOENT)"),
            std::string::npos)
      << nocmd.output;
  auto noexec = sandgate({"exec", "--provider", "namespaces", "--", "/etc/hostname"});
  EXPECT_EQ(noexec.status.shell_code(), 126) << noexec.output;
  EXPECT_NE(noexec.output.find("execve: Permission denied (EACCES)"), std::string::npos)
      << noexec.output;
  auto plain = sandgate(
      {"exec", "--provider", "namespaces", "--no-controller", "--", "no-such-command-xyz"});
  EXPECT_EQ(plain.status.shell_code(), 127) << plain.output;
  auto j = sandgate({"exec", "--provider", "namespaces", "--json", "--", "no-such-command-xyz"});
  EXPECT_EQ(j.status.shell_code(), 127);
  auto parsed = parse_json(j.output, "exec --json");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message() << "\n" << j.output;
  EXPECT_EQ((*parsed)["exit_code"], 127);
  EXPECT_EQ((*parsed)["start_failure"]["step"], "execve");
  EXPECT_EQ((*parsed)["outcome"]["termination"], "not_started");
  // The twin: a command that starts and fails keeps its own status.
  auto runs = sandgate({"exec", "--provider", "namespaces", "--", "sh", "-c", "exit 127"});
  EXPECT_EQ(runs.status.shell_code(), 127);
  EXPECT_EQ(runs.output.find("could not start"), std::string::npos) << runs.output;
}

TEST_F(CliTest, ExecPassesExitStatusAndPrintsJson) {
  SANDGATE_REQUIRE_ROOT();
  auto r = sandgate({"exec", "--provider", "namespaces", "--", "sh", "-c", "echo out; exit 7"});
  EXPECT_EQ(r.status.shell_code(), 7);
  EXPECT_EQ(r.output, "out\n");
  auto j = sandgate(
      {"exec", "--provider", "namespaces", "--json", "--", "sh", "-c", "echo out; echo err >&2"});
  ASSERT_EQ(j.status.shell_code(), 0) << j.output;
  auto parsed = parse_json(j.output, "exec --json");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message() << "\n" << j.output;
  EXPECT_EQ((*parsed)["schema_version"], 1);
  EXPECT_EQ((*parsed)["provider"], "namespaces");
  EXPECT_EQ((*parsed)["unsafe"], false);
  EXPECT_EQ((*parsed)["exit_code"], 0);
  EXPECT_EQ((*parsed)["stdout"], "out\n");
  EXPECT_EQ((*parsed)["stderr"], "err\n");
  EXPECT_GT((*parsed)["wall_ms"].get<double>(), 0.0);
  auto host =
      sandgate({"exec", "--provider", "host_dir", "--allow-unsafe-host", "--json", "--", "true"});
  // The unsafe warning comes first (stderr and stdout are captured together here).
  EXPECT_NE(host.output.find("UNSAFE"), std::string::npos) << host.output;
  auto hp = parse_json(host.output.substr(std::min(host.output.find('{'), host.output.size())),
                       "exec --json");
  ASSERT_TRUE(hp.ok()) << host.output;
  EXPECT_EQ((*hp)["unsafe"], true);
}

// `exec` has one call: it runs in a process of its own, with nothing parked beside it for a
// call that will not come (a park is a round trip to the supervisor and a fork on the way).
// The second of sleep leaves time for a park made while the call runs to show.
TEST_F(CliTest, ExecsOneCallRunsWithNoProcessParkedBesideIt) {
  SANDGATE_REQUIRE_ROOT();
  auto r = sandgate({"exec", "--provider", "namespaces", "--", "sh", "-c",
                     "sleep 1; for p in /proc/[0-9]*; do cat $p/comm; done"});
  ASSERT_EQ(r.status.shell_code(), 0) << r.output;
  // The run's supervisor (pid 1) and the call's shell; a parked process is a supervisor's fork.
  EXPECT_EQ(r.output, "sandgate-superv\nsh\n");
}

TEST_F(CliTest, ExecReportsTheCallOutcome) {
  SANDGATE_REQUIRE_ROOT();
  auto j = sandgate({"exec", "--provider", "namespaces", "--intent", "search", "--json", "--", "sh",
                     "-c", "x=$(head -c 400000000 /dev/zero | tr '\\0' a); echo ${#x}"});
  auto parsed = parse_json(j.output, "exec --json");
  ASSERT_TRUE(parsed.ok()) << j.output;
  const Json& o = (*parsed)["outcome"];
  EXPECT_EQ(o["termination"], "memory_limit") << o.dump(2);
  EXPECT_EQ(o["intent"]["name"], "search");
  EXPECT_EQ(o["intent"]["because"], "declared");
  EXPECT_EQ(o["retry"], "retry_with_smaller_scope");
  EXPECT_EQ(o["grant"]["memory_max"], "256MiB");
  // Without --json, the outcome is one explained line on stderr, not a bare 137.
  auto plain = sandgate({"exec", "--provider", "namespaces", "--intent", "search", "--", "sh", "-c",
                         "x=$(head -c 400000000 /dev/zero | tr '\\0' a)"});
  EXPECT_NE(plain.output.find("sandgate: memory_limit: the call used all of its 256MiB"),
            std::string::npos)
      << plain.output;
  auto bad =
      sandgate({"exec", "--provider", "namespaces", "--policy", tmp_ + "/nope.json", "--", "true"});
  EXPECT_EQ(bad.status.shell_code(), 2);
  EXPECT_NE(bad.output.find("nope.json"), std::string::npos) << bad.output;
  auto intent = sandgate({"exec", "--provider", "namespaces", "--intent", "bake", "--", "true"});
  EXPECT_EQ(intent.status.shell_code(), 2);
  EXPECT_NE(intent.output.find("bake"), std::string::npos) << intent.output;
}

TEST_F(CliTest, ServeOnAUnixSocket) {
  SANDGATE_REQUIRE_ROOT();
  std::string path = tmp_ + "/serve.sock";
  auto server = serve_on(path);
  ASSERT_TRUE(server.ok()) << server.error().message();
  ServeClient client;
  ASSERT_TRUE(client.connect(path));
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "only its owner may drive sandboxes through it";
  auto ask = [&](const Json& request) { return client.ask(request); };
  Json created = ask({{"id", 1}, {"op", "create"}, {"provider", "namespaces"}});
  ASSERT_EQ(created["ok"], true) << created.dump();
  Json ran = ask({{"id", 2},
                  {"op", "exec"},
                  {"env", created["env"]},
                  {"argv", {"sh", "-c", "echo over the socket"}}});
  ASSERT_EQ(ran["ok"], true) << ran.dump();
  EXPECT_EQ(ran["outcome"]["stdout"], "over the socket\n");
  EXPECT_EQ(ran["outcome"]["intent"]["name"], "run");
  // SIGTERM: every environment still open is destroyed, and the socket is removed.
  ASSERT_TRUE(server->signal(SIGTERM).ok());
  auto st2 = server->wait_for(std::chrono::seconds(10));
  ASSERT_TRUE(st2.ok() && st2->has_value());
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
  // TearDown checks that no run record, directory or cgroup is left.
}

// `sandgate` is a front (cli/front_main.cc): it answers `exec --socket` itself and runs
// sandgate-main, from beside itself, for every other command line. A copy of the front alone
// in a directory shows which is which: the call through the server works with no sandgate-main
// there; any other command (and exec's help, and a socket call it cannot parse) says it
// cannot run sandgate-main, naming the path it looked for. Beside its sandgate-main, the same
// command lines work, with the process's own pid (serve's pid is the one the test signals).
TEST_F(CliTest, TheFrontAnswersSocketCallsItselfAndRunsTheFullSandgateForTheRest) {
  SANDGATE_REQUIRE_ROOT();
  std::string path = tmp_ + "/serve.sock", alone = tmp_ + "/front";
  ASSERT_EQ(::mkdir(alone.c_str(), 0755), 0);
  auto copied = run_command({"cp", SANDGATE_BINARY, alone + "/sandgate"});
  ASSERT_TRUE(copied.ok() && copied->status.code == 0);
  auto server = serve_on(path);
  ASSERT_TRUE(server.ok()) << server.error().message();
  auto front = [&](std::vector<std::string> args) {
    args.insert(args.begin(), alone + "/sandgate");
    auto r = run_command(args, std::chrono::seconds(120));
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.ok() ? *r : CommandResult{};
  };
  auto call = front({"exec", "--socket", path, "--provider", "namespaces", "--", "sh", "-c",
                     "echo from the run; exit 3"});
  EXPECT_EQ(call.status.shell_code(), 3) << call.output;
  EXPECT_NE(call.output.find("from the run"), std::string::npos) << call.output;
  const std::string missing = "cannot run " + alone + "/sandgate-main";
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"doctor"},
           {"exec", "--provider", "namespaces", "--", "true"},
           {"exec", "--help"},
           {"exec", "--socket", path, "--intent"},  // no value: refused by sandgate-main
       }) {
    auto r = front(args);
    EXPECT_EQ(r.status.shell_code(), 2) << args[0] << ": " << r.output;
    EXPECT_NE(r.output.find(missing), std::string::npos) << args[0] << ": " << r.output;
  }
  // Beside it, sandgate-main says the same command lines' answers.
  auto help = sandgate({"exec", "--help"});
  EXPECT_EQ(help.status.shell_code(), 0) << help.output;
  EXPECT_NE(help.output.find("--socket"), std::string::npos) << help.output;
  auto bad = sandgate({"exec", "--socket", path, "--intent"});
  EXPECT_EQ(bad.status.shell_code(), 2) << bad.output;
  EXPECT_NE(bad.output.find("--intent"), std::string::npos) << bad.output;
  ASSERT_TRUE(server->signal(SIGTERM).ok());
  auto st = server->wait_for(std::chrono::seconds(20));
  ASSERT_TRUE(st.ok() && st->has_value())
      << "serve (sandgate-main in the front's process) did not end on its pid's SIGTERM";
  EXPECT_EQ((*st)->shell_code(), 128 + SIGTERM);
}

// A repeatable option right before `--` takes its one value, and the command after `--` keeps
// its own dash arguments (CLI11's default let `--env X=1 -- sh -c ...` refuse `-c`).
TEST_F(CliTest, ARepeatableOptionBeforeTheDoubleDashLeavesTheCommandItsDashArguments) {
  auto r = sandgate({"exec", "--provider", "host_dir", "--allow-unsafe-host", "--no-controller",
                     "--env", "X=1", "--env", "Y=2", "--", "sh", "-c", "echo $X$Y -n"});
  EXPECT_EQ(r.status.shell_code(), 0) << r.output;
  EXPECT_NE(r.output.find("12 -n\n"), std::string::npos) << r.output;
  // Two words after one --env: the second is the command, not a second value.
  auto two = sandgate({"exec", "--provider", "host_dir", "--allow-unsafe-host", "--no-controller",
                       "--env", "X=3", "printenv", "X"});
  EXPECT_EQ(two.status.shell_code(), 0) << two.output;
  EXPECT_NE(two.output.find("3\n"), std::string::npos) << two.output;
}

// serve --base-path: every run it creates has the narrowed read-only base (here the preset
// 'minimal', which leaves /usr/share/doc out); the default base shows the host's whole /usr.
TEST_F(CliTest, ServeRunsEveryEnvironmentOnItsNarrowedBase) {
  SANDGATE_REQUIRE_ROOT();
  ASSERT_EQ(::access("/usr/share/doc", F_OK), 0) << "the control needs /usr/share/doc on the host";
  auto seen_in = [&](std::vector<std::string> extra) {
    std::string path = tmp_ + "/serve-base.sock";
    auto server = serve_on(path, extra);
    EXPECT_TRUE(server.ok()) << server.error().message();
    if (!server.ok()) return std::string("(no server)");
    ServeClient client;
    EXPECT_TRUE(client.connect(path));
    auto ask = [&](const Json& request) { return client.ask(request); };
    std::string seen;
    Json created = ask({{"id", 1}, {"op", "create"}, {"provider", "namespaces"}});
    EXPECT_EQ(created["ok"], true) << created.dump();
    if (created["ok"] == true) {
      Json ran =
          ask({{"id", 2},
               {"op", "exec"},
               {"env", created["env"]},
               {"argv", {"sh", "-c", "test -e /usr/share/doc && echo visible || echo hidden"}}});
      EXPECT_EQ(ran["ok"], true) << ran.dump();
      seen = ran["outcome"].value("stdout", std::string());
    }
    EXPECT_TRUE(server->signal(SIGTERM).ok());
    auto st = server->wait_for(std::chrono::seconds(10));
    EXPECT_TRUE(st.ok() && st->has_value());
    return seen;
  };
  EXPECT_EQ(seen_in({}), "visible\n");
  EXPECT_EQ(seen_in({"--base-path", "minimal"}), "hidden\n");
}

// --base-path is checked before anything is made, by every command that takes it, naming the
// entry (serve, record and qualify as exec and probe).
TEST_F(CliTest, EveryCommandWithABasePathRefusesABadOneNamingIt) {
  for (std::vector<std::string> args :
       {std::vector<std::string>{"serve", "--base-path", "usr/lib"},
        std::vector<std::string>{"record", "--out", tmp_ + "/t.trace", "--base-path", "usr/lib",
                                 "--", "true"},
        std::vector<std::string>{"qualify", "--out", tmp_ + "/q", "--base-path", "usr/lib"}}) {
    auto r = sandgate(args);
    EXPECT_EQ(r.status.shell_code(), 2) << args[0] << ": " << r.output;
    EXPECT_NE(r.output.find("--base-path[0]: 'usr/lib' is not an absolute path"), std::string::npos)
        << args[0] << ": " << r.output;
  }
  EXPECT_NE(::access((tmp_ + "/t.trace").c_str(), F_OK), 0) << "record wrote a trace";
}

// A run outlives the connection that created it. Its supervisor dies with the thread that
// forked it (PR_SET_PDEATHSIG follows the parent thread, not the process), and serve ends each
// connection's thread when the client hangs up, as `exec --socket` does after every call. So
// creation must happen on a thread that lives as long as the server (the control strand): this
// pins it, with a call on a second connection after the first one's thread has ended.
TEST_F(CliTest, ServeRunOutlivesTheConnectionThatCreatedIt) {
  SANDGATE_REQUIRE_ROOT();
  std::string path = tmp_ + "/serve.sock";
  auto server = serve_on(path);
  ASSERT_TRUE(server.ok()) << server.error().message();
  // One request on a connection of its own, closed after the reply.
  auto ask_once = [&](const Json& request) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    struct sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    if (::connect(fd.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof addr) != 0)
      return Json();
    if (!write_all(fd.get(), request.dump() + "\n").ok()) return Json();
    std::string buffer;
    char chunk[65536];
    while (buffer.find('\n') == std::string::npos) {
      ssize_t n = ::read(fd.get(), chunk, sizeof chunk);
      if (n <= 0) return Json();
      buffer.append(chunk, static_cast<size_t>(n));
    }
    auto j = parse_json(buffer.substr(0, buffer.find('\n')), "reply");
    return j.ok() ? *j : Json();
  };
  Json created = ask_once({{"id", 1}, {"op", "create"}, {"provider", "namespaces"}});
  ASSERT_EQ(created["ok"], true) << created.dump();
  // The first connection's thread ends once serve sees the hang-up; a supervisor killed by
  // that would be gone well within this.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (int i = 0; i < 2; ++i) {
    Json ran = ask_once({{"id", 2 + i},
                         {"op", "exec"},
                         {"env", created["env"]},
                         {"argv", {"sh", "-c", "echo still here"}}});
    ASSERT_EQ(ran["ok"], true) << "call " << i << " on a later connection: " << ran.dump();
    EXPECT_EQ(ran["outcome"]["stdout"], "still here\n");
  }
  Json destroyed = ask_once({{"id", 9}, {"op", "destroy"}, {"env", created["env"]}});
  EXPECT_EQ(destroyed["ok"], true) << destroyed.dump();
  ASSERT_TRUE(server->signal(SIGTERM).ok());
  auto st = server->wait_for(std::chrono::seconds(10));
  ASSERT_TRUE(st.ok() && st->has_value());
}

// The supervisor of every run whose record names one, by run id (the environment's record; the
// controller's own record of the run's cgroups names no process).
std::map<std::string, pid_t> supervisors_by_run(const std::string& state_dir) {
  std::map<std::string, pid_t> out;
  std::string dir = state_dir + "/runs";
  DIR* d = ::opendir(dir.c_str());
  while (struct dirent* e = d ? ::readdir(d) : nullptr) {
    auto j = read_json_file(dir + "/" + e->d_name);
    if (!j.ok() || !j->contains("resources")) continue;
    for (const auto& r : (*j)["resources"])
      if (r.value("kind", "") == "process" && r.value("path", "").empty())
        out[j->value("run_id", "")] = r.value("pid", 0);
  }
  if (d) ::closedir(d);
  return out;
}

// serve --pool (issue 15): the first create of a shape is made then and teaches serve the
// shape; the next ones are answered by runs made ahead. Each is a fresh run of its own: two
// clients get two different runs, nothing the first run left (files in its workspace and /tmp)
// is seen in the next, each run's identity is its own, the pool refills, and serve's
// end leaves nothing of any run (TearDown: no record, run directory, id range or cgroup).
TEST_F(CliTest, ServePoolHandsEachCreateAFreshRunOfItsOwn) {
  SANDGATE_REQUIRE_ROOT();
  std::string path = tmp_ + "/serve.sock";
  auto server = serve_on(path, {"--pool", "2"});
  ASSERT_TRUE(server.ok()) << server.error().message();
  ServeClient a, b;
  ASSERT_TRUE(a.connect(path));
  ASSERT_TRUE(b.connect(path));
  auto pooled_ready = [&](size_t want) {
    Json listed;
    if (eventually([&] {
          listed = a.ask({{"op", "list"}});
          return listed.is_object() && listed.value("pooled", 0u) == want;
        }))
      return true;
    ADD_FAILURE() << "the pool never held " << want << " runs: " << listed.dump();
    return false;
  };
  const Json create = {{"op", "create"}, {"provider", "namespaces"}, {"env", {"A=1"}}};
  Json first = a.ask(create);
  ASSERT_EQ(first["ok"], true) << first.dump();
  EXPECT_FALSE(first.value("pooled", false)) << "the first create of a shape is made then";
  Json left = a.ask({{"op", "exec"},
                     {"env", first["env"]},
                     {"argv", {"sh", "-c", "echo x > /workspace/left; echo x > /tmp/left"}}});
  ASSERT_EQ(left["ok"], true) << left.dump();
  ASSERT_EQ(left["outcome"]["exit"]["code"], 0) << left.dump();
  ASSERT_TRUE(pooled_ready(2));

  // Two clients at once: two runs, made ahead, neither the first one.
  Json second, third;
  std::thread other([&] { third = b.ask(create); });
  second = a.ask(create);
  other.join();
  ASSERT_EQ(second["ok"], true) << second.dump();
  ASSERT_EQ(third["ok"], true) << third.dump();
  EXPECT_EQ(second.value("pooled", false), true) << second.dump();
  EXPECT_EQ(third.value("pooled", false), true) << third.dump();
  std::set<std::string> ids = {first["env"], second["env"], third["env"]};
  EXPECT_EQ(ids.size(), 3u) << "a run was handed out twice";
  std::set<std::string> hosts = {first["workspace_host"], second["workspace_host"],
                                 third["workspace_host"]};
  EXPECT_EQ(hosts.size(), 3u) << "two runs share a workspace";
  auto supervisors = supervisors_by_run(options_.paths.state_dir);
  for (const Json* run : {&second, &third}) {
    std::string id = (*run)["env"];
    Json seen = a.ask(
        {{"op", "exec"},
         {"env", id},
         {"argv", {"sh", "-c", "ls -A /workspace /tmp; echo \"run=$SANDGATE_RUN_ID A=$A\""}}});
    ASSERT_EQ(seen["ok"], true) << seen.dump();
    std::string out = seen["outcome"].value("stdout", "");
    EXPECT_EQ(out, "/tmp:\n\n/workspace:\nrun=" + id + " A=1\n")
        << "run " << id << " is not fresh, or not its own";
    EXPECT_EQ(seen["outcome"]["exit"]["code"], 0) << seen.dump();
  }
  // Each supervisor is its own, in a pid namespace of its own.
  pid_t s1 = supervisors[first["env"]], s2 = supervisors[second["env"]],
        s3 = supervisors[third["env"]];
  ASSERT_TRUE(s1 > 0 && s2 > 0 && s3 > 0) << "a run's supervisor is not recorded";
  EXPECT_TRUE(s1 != s2 && s2 != s3 && s1 != s3);
  EXPECT_FALSE(same_pid_namespace(s1, s2));
  EXPECT_FALSE(same_pid_namespace(s2, s3));
  // Taken runs are made again: at once when the shape ran dry, else once a run is destroyed.
  EXPECT_TRUE(pooled_ready(2));
  Json fourth = a.ask(create);
  ASSERT_EQ(fourth.value("pooled", false), true) << fourth.dump();
  Json destroyed = a.ask({{"op", "destroy"}, {"env", fourth["env"]}});
  EXPECT_EQ(destroyed["ok"], true) << destroyed.dump();
  EXPECT_TRUE(pooled_ready(2));
  destroyed = a.ask({{"op", "destroy"}, {"env", first["env"]}});
  EXPECT_EQ(destroyed["ok"], true) << destroyed.dump();
  // A create of another shape is made then, and never gets a run of this one.
  Json other_shape = a.ask({{"op", "create"}, {"provider", "namespaces"}, {"env", {"A=2"}}});
  ASSERT_EQ(other_shape["ok"], true) << other_shape.dump();
  EXPECT_FALSE(other_shape.value("pooled", false)) << other_shape.dump();

  // SIGTERM: every run, handed out or made ahead, is destroyed.
  supervisors = supervisors_by_run(options_.paths.state_dir);
  EXPECT_GE(supervisors.size(), 5u) << "three runs open and at least two made ahead";
  ASSERT_TRUE(server->signal(SIGTERM).ok());
  auto st = server->wait_for(std::chrono::seconds(20));
  ASSERT_TRUE(st.ok() && st->has_value());
  EXPECT_EQ((*st)->shell_code(), 128 + SIGTERM);
  for (const auto& [id, pid] : supervisors) EXPECT_FALSE(process_exists(pid)) << id;
  // TearDown checks that no run record, directory, id range or cgroup is left.
}

// serve --pool: a run made ahead whose supervisor died while it waited (an OOM kill, an
// operator) is not handed out: the create is made cold instead, the dead run is removed, and
// the pool is made up again.
TEST_F(CliTest, ServePoolHandsOutNoRunWhoseSupervisorDied) {
  SANDGATE_REQUIRE_ROOT();
  std::string path = tmp_ + "/serve.sock";
  auto server = serve_on(path, {"--pool", "1"});
  ASSERT_TRUE(server.ok()) << server.error().message();
  ServeClient client;
  ASSERT_TRUE(client.connect(path));
  auto wait_for = [](const std::function<bool()>& done) {
    return eventually(done, std::chrono::seconds(20));
  };
  auto pooled = [&] { return client.ask({{"op", "list"}}).value("pooled", 0u); };
  const Json create = {{"op", "create"}, {"provider", "namespaces"}};
  Json first = client.ask(create);
  ASSERT_EQ(first["ok"], true) << first.dump();
  ASSERT_TRUE(wait_for([&] { return pooled() == 1u; })) << "the pool never made its run";

  std::string ahead;
  pid_t supervisor = 0;
  for (const auto& [id, pid] : supervisors_by_run(options_.paths.state_dir))
    if (id != first["env"]) ahead = id, supervisor = pid;
  ASSERT_GT(supervisor, 0) << "the run made ahead has no recorded supervisor";
  ASSERT_EQ(::kill(supervisor, SIGKILL), 0);
  // Dead once its files are closed: a zombie (its parent is serve's pool thread) or gone.
  auto dead = [&] {
    auto stat = read_file("/proc/" + std::to_string(supervisor) + "/stat", 4096);
    return !stat.ok() || stat->find(") Z ") != std::string::npos;
  };
  ASSERT_TRUE(wait_for(dead)) << "the supervisor outlived SIGKILL";

  Json second = client.ask(create);
  ASSERT_EQ(second["ok"], true) << second.dump();
  EXPECT_NE(second["env"], ahead) << "the dead run was handed out";
  EXPECT_FALSE(second.value("pooled", false)) << "the pool's only run was dead: made cold";
  Json ran = client.ask({{"op", "exec"}, {"env", second["env"]}, {"argv", {"true"}}});
  ASSERT_EQ(ran["ok"], true) << ran.dump();
  EXPECT_EQ(ran["outcome"]["exit"]["code"], 0) << ran.dump();
  EXPECT_TRUE(wait_for([&] { return !supervisors_by_run(options_.paths.state_dir).count(ahead); }))
      << "the dead run's record was not removed";
  EXPECT_TRUE(wait_for([&] { return pooled() == 1u; })) << "the pool was not made up again";

  ASSERT_TRUE(server->signal(SIGTERM).ok());
  auto st = server->wait_for(std::chrono::seconds(20));
  ASSERT_TRUE(st.ok() && st->has_value());
  // TearDown checks that no run record, directory, id range or cgroup is left.
}

// kill -9 of a `serve --pool`: the runs it made ahead are recorded as its own, and `sandgate
// gc` removes them (processes, the /proc views' mounts, cgroups, directories, records).
TEST_F(CliTest, GcAfterKillNineOfServeRemovesTheRunsItMadeAhead) {
  SANDGATE_REQUIRE_ROOT();
  std::string path = tmp_ + "/serve.sock";
  auto server = serve_on(path, {"--pool", "2"});
  ASSERT_TRUE(server.ok()) << server.error().message();
  bool collected = false;
  Defer collect_anyway([&] {
    if (collected) return;
    server->kill_and_reap();
    (void)sandgate({"gc"});
  });
  // `exec --socket` teaches serve the shape (its own run is made then and destroyed after).
  auto r = sandgate({"exec", "--socket", path, "--provider", "namespaces", "--", "true"});
  ASSERT_EQ(r.status.shell_code(), 0) << r.output;
  ServeClient client;
  ASSERT_TRUE(client.connect(path));
  // The exec's own run is removed after its answer, beside the pool's filling: wait for both
  // (under load the pool could be full while that run and its cgroups' record were still
  // being removed). Two records per run made ahead: its own and its cgroups'.
  Json listed = Json::object();
  auto supervisors = supervisors_by_run(options_.paths.state_dir);
  eventually([&] {
    listed = client.ask({{"op", "list"}});
    if (!listed.is_object()) return true;  // the server went away: the checks below say so
    supervisors = supervisors_by_run(options_.paths.state_dir);
    return listed.value("pooled", 0u) == 2u && supervisors.size() == 2u &&
           count_entries(options_.paths.state_dir + "/runs") == 4u;
  });
  ASSERT_EQ(listed.value("pooled", 0u), 2u) << listed.dump();
  ASSERT_EQ(supervisors.size(), 2u) << "two runs made ahead, the exec's one gone";
  auto views_mounted = [&] {
    auto info = read_file("/proc/self/mountinfo", 1 << 22);
    return info.ok() && info->find(" " + options_.paths.work_dir + "/") != std::string::npos;
  };
  EXPECT_TRUE(views_mounted()) << "no mount of the runs made ahead: the test proves less";

  ASSERT_TRUE(server->signal(SIGKILL).ok());
  ASSERT_TRUE(server->wait().ok());
  EXPECT_GT(count_entries(options_.paths.state_dir + "/runs"), 0u) << "nothing left to collect";
  auto gc = sandgate({"gc"});
  collected = true;
  EXPECT_EQ(gc.status.shell_code(), 0) << gc.output;
  EXPECT_NE(gc.output.find("4 run record(s), 4 removed"), std::string::npos) << gc.output;
  eventually([&] {
    for (const auto& [id, pid] : supervisors)
      if (process_exists(pid)) return false;
    return true;
  });
  for (const auto& [id, pid] : supervisors) EXPECT_FALSE(process_exists(pid)) << id;
  EXPECT_FALSE(views_mounted()) << "gc left a mount under " << options_.paths.work_dir;
  // TearDown checks that no run record, directory, id range or cgroup is left.
}

TEST_F(CliTest, TimeoutKillsTheRun) {
  SANDGATE_REQUIRE_ROOT();
  auto start = std::chrono::steady_clock::now();
  auto r =
      sandgate({"exec", "--provider", "namespaces", "--timeout", "300ms", "--", "sleep", "30"});
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status.shell_code(), 128 + SIGKILL);
  EXPECT_NE(r.output.find("sandgate: timeout: the call ran past the run's wall-clock limit"),
            std::string::npos)
      << r.output;
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST_F(CliTest, OutputIsBoundedAndTruncationReported) {
  SANDGATE_REQUIRE_ROOT();
  auto j = sandgate({"exec", "--provider", "namespaces", "--json", "--", "sh", "-c",
                     "head -c 3000000 /dev/zero | tr '\\0' x"});
  auto parsed = parse_json(j.output, "exec --json");
  ASSERT_TRUE(parsed.ok()) << j.output.substr(0, 200);
  EXPECT_EQ((*parsed)["stdout_bytes"], 3000000);
  EXPECT_EQ((*parsed)["stdout_truncated"], true);
  EXPECT_EQ((*parsed)["stdout"].get<std::string>().size(), 1u << 20);
}

TEST_F(CliTest, SigtermTearsDownTheRun) {
  SANDGATE_REQUIRE_ROOT();
  auto child = spawn({SANDGATE_BINARY, "exec", "--provider", "namespaces", "--", "sleep", "60"});
  ASSERT_TRUE(child.ok()) << child.error().message();
  Json record = wait_for_running_record();
  pid_t sup = supervisor_pid(record);
  ASSERT_GT(sup, 0);
  std::set<pid_t> run_pids = pids_in_pidns_of(sup);
  ASSERT_TRUE(child->signal(SIGTERM).ok());
  auto st = child->wait_for(std::chrono::seconds(10));
  ASSERT_TRUE(st.ok() && st->has_value());
  EXPECT_EQ((*st)->shell_code(), 128 + SIGTERM);  // exited with that code, after teardown
  EXPECT_TRUE((*st)->exited) << "killed by the signal instead of handling it";
  for (pid_t pid : run_pids) EXPECT_FALSE(process_exists(pid)) << pid;
  // TearDown checks that the record and the run directory are gone.
}

// The daemon is found on the host by the argument it carries (inside the run's pid namespace
// its own idea of its pid means nothing to the host), before the kill and again after gc.
TEST_F(CliTest, GcAfterKillNineNamespaces) {
  SANDGATE_REQUIRE_ROOT();
  std::string token = daemon_token();
  crash_then_gc({"--provider", "namespaces", "--", "sh", "-c",
                 start_daemon(token) + " touch /workspace/started; sleep 60"},
                "started", token);
}

// A run's /proc views (providers/proc_views.h) outlive a kill -9 of its sandgate: the views
// server is in a session of its own and the mount is the host's. gc stops the server (it is
// recorded, by its mount point, before it mounts) and detaches the mount. The same for each
// provider that has them (namespaces, podman in both modes).
class CliProcViewsTest : public CliTest {
 protected:
  void views_go_with_gc(const std::string& provider) {
    std::string mount;
    pid_t server = 0;
    auto mounted = [&] {
      auto info = read_file("/proc/self/mountinfo", 1 << 22);
      return info.ok() && info->find(" " + mount + " ") != std::string::npos;
    };
    crash_then_gc(
        {"--provider", provider, "--", "sh", "-c",
         "head -1 /proc/meminfo > /workspace/meminfo; touch /workspace/started; sleep 60"},
        "started", {}, [&](const std::string& run_dir) {
          mount = run_dir + "/proc-views";
          std::string dir = options_.paths.state_dir + "/runs";
          DIR* d = ::opendir(dir.c_str());
          while (struct dirent* e = d ? ::readdir(d) : nullptr) {
            auto j = read_json_file(dir + "/" + e->d_name);
            if (!j.ok() || !j->contains("resources")) continue;
            for (const auto& r : (*j)["resources"])
              if (r.value("kind", "") == "process" && r.value("path", "") == mount)
                server = r.value("pid", 0);
          }
          if (d) ::closedir(d);
          ASSERT_GT(server, 0) << "no views server recorded with the mount point " << mount;
          EXPECT_TRUE(process_exists(server));
          EXPECT_TRUE(mounted()) << mount;
          // What the call read was the view (the run's grant), not the host's line.
          auto seen = read_file(run_dir + "/workspace/meminfo");
          auto host = read_file("/proc/meminfo");
          ASSERT_TRUE(seen.ok() && host.ok());
          EXPECT_EQ(seen->rfind("MemTotal:", 0), 0u) << *seen;
          EXPECT_NE(*seen, host->substr(0, host->find('\n') + 1));
        });
    ASSERT_GT(server, 0);
    eventually([&] { return !process_exists(server); });
    EXPECT_FALSE(process_exists(server)) << "the views server " << server << " survived gc";
    EXPECT_FALSE(mounted()) << "gc left the views mounted at " << mount;
  }
  // Skips unless Podman runs in `mode` here; SANDGATE_PODMAN_MODE pins it for the exec.
  bool podman_mode_available(const std::string& mode) {
    auto doctor = sandgate({"doctor", "--json"});
    auto facts = parse_json(doctor.output, "doctor --json");
    if (!facts.ok()) return false;
    return (*facts)["podman"].value(mode, false);
  }
};

TEST_F(CliProcViewsTest, GcRemovesALeftoverProcViewAfterKillNine) {
  SANDGATE_REQUIRE_ROOT();
  views_go_with_gc("namespaces");
}

TEST_F(CliProcViewsTest, GcRemovesALeftoverPodmanProcViewAfterKillNine) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_REQUIRE(podman_mode_available("rootful"), "podman rootful is not available here");
  ::setenv("SANDGATE_PODMAN_MODE", "rootful", 1);
  Defer unset([] { ::unsetenv("SANDGATE_PODMAN_MODE"); });
  views_go_with_gc("podman");
}

TEST_F(CliProcViewsTest, GcRemovesALeftoverRootlessPodmanProcViewAfterKillNine) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_REQUIRE(podman_mode_available("rootless"), "podman rootless is not available here");
  ::setenv("SANDGATE_PODMAN_MODE", "rootless", 1);
  Defer unset([] { ::unsetenv("SANDGATE_PODMAN_MODE"); });
  views_go_with_gc("podman");
}

// The container Podman runs a run in: "sandgate-<run id>", the run directory's name.
std::string podman_container_of(const std::string& run_dir) {
  return "sandgate-" + run_dir.substr(run_dir.rfind('/') + 1);
}

// Whether root's Podman lists the container `name`, by its exact name: tests running beside
// this one have containers of their own, also named "sandgate-...".
bool root_podman_lists(const std::string& name) {
  auto ps = run_command({"podman", "ps", "--all", "--format", "{{.Names}}"});
  EXPECT_TRUE(ps.ok()) << (ps.ok() ? "" : ps.error().message());
  if (!ps.ok()) return false;
  std::istringstream lines(ps->output);
  for (std::string line; std::getline(lines, line);)
    if (line == name) return true;
  return false;
}

// The same for a rootful Podman run: gc removes the container (recorded before `podman run`), the
// cgroups the runtime made under the run (conmon, libpod-<id>, the parent path in every
// hierarchy) and the controller's run cgroups, whichever record it reads first.
TEST_F(CliTest, GcAfterKillNinePodman) {
  SANDGATE_REQUIRE_ROOT();
  auto avail = sandgate({"providers"});
  SANDGATE_REQUIRE(avail.output.find("podman") != std::string::npos,
                   "no podman provider in this build");
  std::string token = daemon_token();
  ::setenv("SANDGATE_PODMAN_MODE", "rootful", 1);
  Defer unset([] { ::unsetenv("SANDGATE_PODMAN_MODE"); });
  std::string container;
  crash_then_gc({"--provider", "podman", "--", "sh", "-c",
                 start_daemon(token) + " touch /workspace/started; sleep 60"},
                "started", token, [&](const std::string& run_dir) {
                  container = podman_container_of(run_dir);
                  EXPECT_TRUE(root_podman_lists(container)) << container << " was never made";
                });
  ASSERT_FALSE(container.empty());
  EXPECT_FALSE(root_podman_lists(container)) << "the run's container was left: " << container;
}

// The same in rootless mode: Podman ran as the run's own id, in the run's cgroup, with its
// storage in the run directory. gc leaves no process of the run's ids, no container in root's
// Podman, no cgroup, no directory, and /etc/subuid and /etc/subgid as they were (sandgate writes
// the id maps itself).
TEST_F(CliTest, GcAfterKillNinePodmanRootless) {
  SANDGATE_REQUIRE_ROOT();
  auto doctor = sandgate({"doctor", "--json"});
  auto facts = parse_json(doctor.output, "doctor --json");
  ASSERT_TRUE(facts.ok()) << doctor.output.substr(0, 300);
  SANDGATE_REQUIRE((*facts)["podman"].value("rootless", false),
                   "podman rootless is not available: " +
                       (*facts)["podman"].value("rootless_why", std::string("?")));
  std::string subuid = text_or(read_file("/etc/subuid"), "<none>");
  std::string subgid = text_or(read_file("/etc/subgid"), "<none>");
  std::string token = daemon_token();
  ::setenv("SANDGATE_PODMAN_MODE", "rootless", 1);
  Defer unset([] { ::unsetenv("SANDGATE_PODMAN_MODE"); });
  std::string container;
  crash_then_gc({"--provider", "podman", "--", "sh", "-c",
                 start_daemon(token) + " touch /workspace/started; sleep 60"},
                "started", token,
                [&](const std::string& run_dir) { container = podman_container_of(run_dir); });
  ASSERT_FALSE(container.empty());
  // No process is left in the test's cgroup tree, where everything of the run lived (Podman,
  // conmon, the container, its daemon): the run's ids are not a witness once gc freed them.
  std::vector<pid_t> left_in_tree;
  eventually([&] {
    left_in_tree.clear();
    DIR* d = ::opendir("/proc");
    while (struct dirent* e = d ? ::readdir(d) : nullptr) {
      pid_t pid = static_cast<pid_t>(std::strtol(e->d_name, nullptr, 10));
      if (pid <= 0) continue;
      auto cg = read_file("/proc/" + std::to_string(pid) + "/cgroup");
      if (cg.ok() && cg->find("/" + cgroup_root_ + "/") != std::string::npos)
        left_in_tree.push_back(pid);
    }
    if (d) ::closedir(d);
    return left_in_tree.empty();
  });
  EXPECT_TRUE(left_in_tree.empty()) << left_in_tree.size() << " process(es) of the run survived gc";
  EXPECT_FALSE(root_podman_lists(container)) << "the run's container is in root's Podman";
  EXPECT_EQ(text_or(read_file("/etc/subuid"), "<none>"), subuid);
  EXPECT_EQ(text_or(read_file("/etc/subgid"), "<none>"), subgid);
}

// crossrun.user_inotify, the kernel's per-user inotify count: blocked when each run's Podman
// runs as the run's own id (rootless), exposed when Podman makes every namespace as root
// (rootful). The same probe, the same host, the mode the only difference. In both modes run B
// does not see run A's burst in /proc/loadavg (crossrun.load_side_channel): each run's
// /proc/loadavg is its own view (providers/proc_views.h).
TEST_F(CliTest, UserInotifyIsBlockedRootlessAndExposedRootful) {
  SANDGATE_REQUIRE_ROOT();
  auto verdicts_of = [&](const std::string& mode) -> std::map<std::string, std::string> {
    std::string file = tmp_ + "/crossrun-" + mode + ".json";
    auto r = sandgate({"--podman-mode", mode, "probe", "--provider", "podman", "--only", "crossrun",
                       "--json", file},
                      std::chrono::seconds(300));
    std::map<std::string, std::string> out;
    for (const char* id : {"crossrun.user_inotify", "crossrun.load_side_channel"})
      out[id] = "not judged (" + r.output.substr(0, 400) + ")";
    auto j = read_json_file(file);
    if (!j.ok()) return out;
    for (const auto& run : (*j)["runs"])
      for (const auto& judgement : run["judgements"])
        if (out.count(judgement["id"].get<std::string>()))
          out[judgement["id"].get<std::string>()] = judgement["verdict"].get<std::string>() + ": " +
                                                    judgement.value("why", std::string());
    return out;
  };
  auto rootless = verdicts_of("rootless");
  EXPECT_TRUE(rootless["crossrun.user_inotify"].starts_with("blocked"))
      << rootless["crossrun.user_inotify"];
  auto rootful = verdicts_of("rootful");
  EXPECT_TRUE(rootful["crossrun.user_inotify"].starts_with("exposed"))
      << rootful["crossrun.user_inotify"];
  for (auto* mode : {&rootless, &rootful})
    EXPECT_TRUE((*mode)["crossrun.load_side_channel"].starts_with("blocked"))
        << (*mode)["crossrun.load_side_channel"];
}

TEST_F(CliTest, GcAfterKillNineHostDir) {
  std::string token = daemon_token();
  crash_then_gc({"--provider", "host_dir", "--allow-unsafe-host", "--", "sh", "-c",
                 start_daemon(token) + " touch started; sleep 60"},
                "started", token);
}

// A workspace 100,000 directories deep (issue 9): the recursive removal died of SIGSEGV in
// teardown, leaving the record, the cgroups and the workspace, and every later gc died the same
// way. python3 makes it as an agent's code would: mkdir, chdir, 100,000 times.
constexpr const char* kDeepTree =
    "import os\n"
    "for i in range(100000):\n"
    "    os.mkdir('d')\n"
    "    os.chdir('d')\n"
    "print('levels', i + 1)\n";

TEST_F(CliTest, ExecTearsDownA100000LevelWorkspace) {
  SANDGATE_REQUIRE_ROOT();
  use_tmpfs_work_dir();
  auto r = sandgate({"exec", "--provider", "namespaces", "--", "python3", "-c", kDeepTree});
  EXPECT_EQ(r.status.shell_code(), 0) << r.output;
  EXPECT_NE(r.output.find("levels 100000"), std::string::npos)
      << "the tree was not made; the test proves nothing: " << r.output;
  // TearDown checks that no record, run directory or cgroup is left.
}

TEST_F(CliTest, GcAfterKillNineRemovesA100000LevelWorkspace) {
  SANDGATE_REQUIRE_ROOT();
  use_tmpfs_work_dir();
  // The command goes back to /workspace before it waits: a process whose cwd is the bottom
  // keeps the whole chain's dentries pinned (and it is killed only as gc starts).
  std::string script = std::string(kDeepTree) +
                       "os.chdir('/workspace')\n"
                       "open('/workspace/made', 'w').close()\n"
                       "import time\n"
                       "time.sleep(60)\n";
  crash_then_gc({"--provider", "namespaces", "--", "python3", "-c", script}, "made");
}

TEST_F(CliTest, GcRemovesAnOrphaned100000LevelTree) {
  // A run directory whose record was lost, holding what a sandbox made: gc's sweep of the work
  // directory removes it like any other.
  use_tmpfs_work_dir();
  // A host that has made runs before has <state>/runs (gc sweeps the work directory only then).
  ASSERT_TRUE(make_dirs(options_.paths.state_dir + "/runs", 0711).ok());
  std::string run_dir = options_.paths.work_dir + "/lost-run";
  ASSERT_TRUE(make_dirs(run_dir + "/workspace", 0711).ok());
  {
    UniqueFd fd(::open((run_dir + "/workspace").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    for (int i = 0; i < 100'000 && fd; ++i) {
      ASSERT_EQ(::mkdirat(fd.get(), "d", 0755), 0) << i;
      fd = UniqueFd(::openat(fd.get(), "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    }
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::mkdirat(fd.get(), "bottom", 0755), 0);
  }
  auto gc = sandgate({"gc"});
  EXPECT_EQ(gc.status.shell_code(), 0) << gc.output;
  EXPECT_NE(gc.output.find("1 orphaned run directory removed"), std::string::npos) << gc.output;
  EXPECT_NE(::access(run_dir.c_str(), F_OK), 0) << "gc left the deep tree";
}

TEST_F(CliTest, RecipeOverItsLimitsIsRefusedAndLeavesNothing) {
  // EnvSpec::recipe_limits reach the copy; a refused recipe leaves no half-made workspace or
  // run directory behind (TearDown checks).
  std::string recipe = tmp_ + "/recipe";
  ASSERT_TRUE(make_dirs(recipe + "/sub").ok());
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(
        write_file(recipe + "/sub/f" + std::to_string(i), "x", O_WRONLY | O_CREAT | O_CLOEXEC)
            .ok());
  auto p = provider("host_dir");
  ASSERT_NE(p, nullptr);
  providers::EnvSpec spec;
  spec.workspace_recipe = recipe;
  spec.uid = ::getuid();
  spec.gid = ::getgid();
  spec.recipe_limits.max_entries = 5;
  auto env = p->create(spec);
  ASSERT_FALSE(env.ok()) << "a recipe of 12 entries passed a limit of 5";
  EXPECT_NE(env.error().message().find("more than 5 entries (limit max_entries)"),
            std::string::npos)
      << env.error().message();
  // Its positive twin: the same recipe under the default limits.
  spec.recipe_limits = {};
  auto fine = p->create(spec);
  ASSERT_TRUE(fine.ok()) << fine.error().message();
  EXPECT_TRUE((*fine)->destroy().ok());
}

// The run contract end to end through the namespace jail: the recipe comes in as a
// copy-on-write view, the secret is readable inside and nowhere on the command line, the commit
// made inside arrives as a branch of the recipe's repository, and nothing else comes out.
TEST_F(CliTest, ExecRunContractSecretInCommitsOut) {
  SANDGATE_REQUIRE_ROOT();
  std::string repo = tmp_ + "/repo", token = tmp_ + "/token";
  auto git_setup = run_command({"/bin/sh", "-c",
                                "git init -q -b main " + repo + " && cd " + repo +
                                    " && echo one > f && git add f && git -c user.name=u -c "
                                    "user.email=u@x commit -qm one && chown -R 1000:1000 " +
                                    repo});
  ASSERT_TRUE(git_setup.ok() && git_setup->status.code == 0)
      << (git_setup.ok() ? git_setup->output : "");
  ASSERT_TRUE(write_file(token, "tok-5ecret", O_WRONLY | O_CREAT | O_CLOEXEC, 0600).ok());
  auto r = sandgate(
      {"exec", "--provider", "namespaces", "--workspace", repo, "--recipe-mode", "overlay",
       "--secret", "GH_TOKEN=" + token, "--export-branch", "agent/fix", "--json", "--", "sh", "-c",
       "cat /run/secrets/GH_TOKEN; echo; grep -lF -f /run/secrets/GH_TOKEN /proc/[0-9]*/cmdline "
       "/proc/[0-9]*/environ 2>/dev/null | wc -l; echo two >> f && git -c user.name=agent -c "
       "user.email=a@x commit -qam inside"});
  ASSERT_EQ(r.status.shell_code(), 0) << r.output;
  auto j = parse_json(r.output, "exec --json");
  ASSERT_TRUE(j.ok()) << r.output;
  EXPECT_EQ((*j)["stdout"], "tok-5ecret\n0\n");
  EXPECT_EQ((*j)["workspace"]["kind"], "overlay");
  auto log =
      run_command({"git", "-c", "safe.directory=*", "-C", repo, "log", "--format=%s", "agent/fix"});
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(log->output, "inside\none\n");
  // The recipe itself: its working tree and main untouched.
  EXPECT_EQ(read_file(repo + "/f").value(), "one\n");
  // Again: the branch exists, so the export is refused, clearly, and the run still goes.
  auto again = sandgate({"exec", "--provider", "namespaces", "--workspace", repo, "--export-branch",
                         "agent/fix", "--", "true"});
  EXPECT_EQ(again.status.shell_code(), 2) << again.output;
  EXPECT_NE(again.output.find("branch 'agent/fix' already exists"), std::string::npos)
      << again.output;
  auto bad = sandgate({"exec", "--provider", "namespaces", "--workspace", repo, "--export-branch",
                       "a..b", "--", "true"});
  EXPECT_EQ(bad.status.shell_code(), 2);
  EXPECT_NE(bad.output.find("not a valid branch name"), std::string::npos) << bad.output;
  auto secret =
      sandgate({"exec", "--provider", "namespaces", "--secret", "NOEQUALS", "--", "true"});
  EXPECT_EQ(secret.status.shell_code(), 2);
  EXPECT_NE(secret.output.find("is not NAME=FILE"), std::string::npos) << secret.output;
}

// Loop devices backed by a file under `dir` (/sys/block/loop*/loop/backing_file), after a
// bounded wait for autoclear.
std::vector<std::string> loop_devices_under(const std::string& dir) {
  std::vector<std::string> left;
  eventually([&] {
    left.clear();
    DIR* d = ::opendir("/sys/block");
    while (struct dirent* e = d ? ::readdir(d) : nullptr) {
      std::string n = e->d_name;
      if (n.rfind("loop", 0) != 0) continue;
      auto f = read_file("/sys/block/" + n + "/loop/backing_file");
      if (f.ok() && f->find(dir) != std::string::npos) left.push_back(n + " " + *f);
    }
    if (d) ::closedir(d);
    return left.empty();
  });
  return left;
}

// The run contract on a workspace filesystem of its own: the recipe in (copy-on-write, its
// layers on the run's image), the commits out, through the CLI and through the protocol's
// "workspace_size"; a bad size is refused naming the option.
TEST_F(CliTest, ExecRunContractOnAWorkspaceFilesystem) {
  SANDGATE_REQUIRE_ROOT();
  std::string repo = tmp_ + "/repo";
  auto git_setup = run_command({"/bin/sh", "-c",
                                "git init -q -b main " + repo + " && cd " + repo +
                                    " && echo one > f && git add f && git -c user.name=u -c "
                                    "user.email=u@x commit -qm one && chown -R 1000:1000 " +
                                    repo});
  ASSERT_TRUE(git_setup.ok() && git_setup->status.code == 0)
      << (git_setup.ok() ? git_setup->output : "");
  auto r = sandgate({"exec", "--provider", "namespaces", "--workspace", repo, "--workspace-size",
                     "64MiB", "--export-branch", "agent/fs", "--json", "--", "sh", "-c",
                     "awk '$5 == \"/workspace\"' /proc/self/mountinfo | grep -c " +
                         options_.paths.work_dir +
                         "; echo two >> f && git -c user.name=agent -c user.email=a@x commit "
                         "-qam inside"});
  ASSERT_EQ(r.status.shell_code(), 0) << r.output;
  auto j = parse_json(r.output, "exec --json");
  ASSERT_TRUE(j.ok()) << r.output;
  EXPECT_EQ((*j)["stdout"], "0\n") << "the workspace's mount names the work directory";
  EXPECT_EQ((*j)["workspace"]["kind"], "overlay");
  auto log =
      run_command({"git", "-c", "safe.directory=*", "-C", repo, "log", "--format=%s", "agent/fs"});
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(log->output, "inside\none\n");
  EXPECT_EQ(read_file(repo + "/f").value(), "one\n");

  std::string socket = tmp_ + "/sg.sock";
  auto server = serve_on(socket);
  ASSERT_TRUE(server.ok()) << server.error().message();
  Defer stop([&] {
    (void)server->signal(SIGTERM);
    (void)server->wait_for(std::chrono::seconds(10));
  });
  auto via = sandgate({"exec", "--socket", socket, "--provider", "namespaces", "--workspace-size",
                       "32MiB", "--", "sh", "-c",
                       "dd if=/dev/zero of=/workspace/fill bs=1M count=64 2>&1 | "
                       "grep -c 'No space left'"});
  EXPECT_EQ(via.status.shell_code(), 0) << via.output;
  EXPECT_EQ(via.output, "1\n");

  auto bad =
      sandgate({"exec", "--provider", "namespaces", "--workspace-size", "lots", "--", "true"});
  EXPECT_EQ(bad.status.shell_code(), 2) << bad.output;
  EXPECT_NE(bad.output.find("--workspace-size"), std::string::npos) << bad.output;
  auto small =
      sandgate({"exec", "--provider", "namespaces", "--workspace-size", "1MiB", "--", "true"});
  EXPECT_NE(small.status.shell_code(), 0) << small.output;
  EXPECT_NE(small.output.find("16MiB..16TiB"), std::string::npos) << small.output;
}

// kill -9 of `sandgate exec` while its command runs on a workspace filesystem, then gc: no
// loop device backed by anything under the work directory, no mount there, no image.
TEST_F(CliTest, GcAfterKillNineLeavesNoLoopDeviceMountOrImage) {
  SANDGATE_REQUIRE_ROOT();
  crash_then_gc({"--provider", "namespaces", "--workspace-size", "64MiB", "--", "sh", "-c",
                 "touch /workspace/started; sleep 60"},
                "started", {}, [](const std::string& run_dir) {
                  // Otherwise the checks after gc prove nothing.
                  ASSERT_EQ(loop_devices_under(run_dir + "/workspace.img").size(), 1u);
                });
  EXPECT_EQ(loop_devices_under(options_.paths.work_dir), std::vector<std::string>{});
  auto mounts = read_file("/proc/self/mountinfo");
  ASSERT_TRUE(mounts.ok());
  EXPECT_EQ(mounts->find(options_.paths.work_dir + "/"), std::string::npos) << *mounts;
  // TearDown checks that the work directory (images included) and the records are gone.
}

// The same contract through the protocol: `exec --socket` creates its run on a serve server
// with "secrets" and destroys it with "export_branch".
TEST_F(CliTest, ServeRunContractThroughTheProtocol) {
  SANDGATE_REQUIRE_ROOT();
  std::string repo = tmp_ + "/repo", token = tmp_ + "/token", path = tmp_ + "/serve.sock";
  auto git_setup = run_command({"/bin/sh", "-c",
                                "git init -q -b main " + repo + " && cd " + repo +
                                    " && echo one > f && git add f && git -c user.name=u -c "
                                    "user.email=u@x commit -qm one"});
  ASSERT_TRUE(git_setup.ok() && git_setup->status.code == 0);
  ASSERT_TRUE(write_file(token, "tok-over-socket", O_WRONLY | O_CREAT | O_CLOEXEC, 0600).ok());
  auto server = serve_on(path);
  ASSERT_TRUE(server.ok()) << server.error().message();
  auto r = sandgate({"exec", "--socket", path, "--provider", "namespaces", "--workspace", repo,
                     "--secret", "T=" + token, "--export-branch", "agent/sock", "--", "sh", "-c",
                     "cat /run/secrets/T; echo two >> f && git -c user.name=a -c user.email=a@x "
                     "commit -qam sock"});
  EXPECT_EQ(r.status.shell_code(), 0) << r.output;
  EXPECT_NE(r.output.find("tok-over-socket"), std::string::npos) << r.output;
  auto log = run_command({"git", "-C", repo, "log", "--format=%s", "agent/sock"});
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(log->output, "sock\none\n");
  ASSERT_TRUE(server->signal(SIGTERM).ok());
  auto st = server->wait_for(std::chrono::seconds(10));
  ASSERT_TRUE(st.ok() && st->has_value());
}

// `exec --socket` sends the run's options to the server's create (--image reaches the
// namespaces provider, which refuses it by name) and refuses, before connecting, those the
// server decides and those that shape a run that exists already: none is dropped unsaid.
TEST_F(CliTest, ExecSocketForwardsTheRunsOptionsAndRefusesTheServersOwn) {
  SANDGATE_REQUIRE_ROOT();
  std::string path = tmp_ + "/serve.sock";
  auto server = serve_on(path);
  ASSERT_TRUE(server.ok()) << server.error().message();
  auto image = sandgate({"exec", "--socket", path, "--provider", "namespaces", "--image",
                         "localhost/none", "--", "true"});
  EXPECT_EQ(image.status.shell_code(), 2) << image.output;
  EXPECT_NE(image.output.find("no images (--image is for podman)"), std::string::npos)
      << image.output;
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--policy", tmp_ + "/p.json"},
        {"--trace"},
        {"--no-controller"},
        {"--net-upstream", "x"}}) {
    std::vector<std::string> argv = {"exec", "--socket", path, "--provider", "namespaces"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {"--", "true"});
    auto r = sandgate(argv);
    EXPECT_EQ(r.status.shell_code(), 2) << r.output;
    EXPECT_NE(r.output.find(extra[0] + " does not apply with --socket"), std::string::npos)
        << r.output;
  }
  auto shaped =
      sandgate({"exec", "--socket", path, "--run", "r1", "--workspace", tmp_, "--", "true"});
  EXPECT_EQ(shaped.status.shell_code(), 2) << shaped.output;
  EXPECT_NE(shaped.output.find("--workspace shapes a new run; run r1 exists"), std::string::npos)
      << shaped.output;
  // The plain call still goes through.
  auto ok = sandgate({"exec", "--socket", path, "--provider", "namespaces", "--", "true"});
  EXPECT_EQ(ok.status.shell_code(), 0) << ok.output;
  ASSERT_TRUE(server->signal(SIGTERM).ok());
  auto st = server->wait_for(std::chrono::seconds(10));
  ASSERT_TRUE(st.ok() && st->has_value());
}

// ^C on `exec --socket` (SIGINT to the client) stops the call in the server: the client shows
// the cancelled outcome and exits 128+2, and the call's processes are gone. A client that goes
// away mid-call (its connection closed) stops its call the same. On a named run, a `cancel` on
// the connection answers at once, the call it stops answers "cancelled", and the run then takes
// the connection's next call. Nothing is timed: each wait is bounded at 30 s.
TEST_F(CliTest, ExecSocketInterruptedOrGoneCancelsItsCall) {
  SANDGATE_REQUIRE_ROOT();
  const std::string path = tmp_ + "/serve.sock";
  auto server = serve_on(path);
  ASSERT_TRUE(server.ok()) << server.error().message();
  auto within_30s = [](const std::function<bool()>& done) {
    return eventually(done, std::chrono::seconds(30));
  };
  // The call's shell keeps `token` as its $0 (sleep is not its last command, so it is not
  // exec'd away): the host finds the call by it (the client's own command line names it too).
  pid_t client_pid = -1;
  auto running = [&](const std::string& token) {
    auto pids = pids_with_argument(token);
    pids.erase(client_pid);
    return !pids.empty();
  };
  auto long_call = [](const std::string& token) {
    return std::vector<std::string>{"sh", "-c", "sleep 600; :", token};
  };

  // SIGINT to the client.
  const std::string interrupted = daemon_token();
  const std::string out_path = tmp_ + "/client.out";
  UniqueFd out(::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  ASSERT_TRUE(out.valid());
  std::vector<std::string> argv = {SANDGATE_BINARY, "exec",       "--socket", path,
                                   "--provider",    "namespaces", "--"};
  for (const auto& a : long_call(interrupted)) argv.push_back(a);
  SpawnOptions options;
  options.out_fd = out.get();
  auto client = spawn(argv, options);
  ASSERT_TRUE(client.ok()) << client.error().message();
  client_pid = client->pid();
  ASSERT_TRUE(within_30s([&] { return running(interrupted); })) << "the call did not start";
  ASSERT_TRUE(client->signal(SIGINT).ok());
  auto ended = client->wait_for(std::chrono::seconds(30));
  ASSERT_TRUE(ended.ok() && ended->has_value()) << "the client did not end after SIGINT";
  EXPECT_EQ((*ended)->shell_code(), 128 + SIGINT) << (*ended)->describe();
  EXPECT_TRUE((*ended)->exited) << "killed by its ^C instead of answering it: "
                                << (*ended)->describe();
  auto said = read_file(out_path, 1 << 20);
  ASSERT_TRUE(said.ok());
  EXPECT_NE(said->find("cancelled: the caller cancelled the call"), std::string::npos) << *said;
  EXPECT_NE(said->find("interrupted; the call was cancelled and its run destroyed"),
            std::string::npos)
      << *said;
  EXPECT_TRUE(within_30s([&] { return !running(interrupted); })) << "the call outlived ^C";

  // A client that goes away: its connection closes while the call runs.
  const std::string gone = daemon_token();
  {
    ServeClient c;
    ASSERT_TRUE(c.connect(path));
    Json request = {{"id", 1},
                    {"op", "exec"},
                    {"create", {{"provider", "namespaces"}}},
                    {"argv", long_call(gone)}};
    ASSERT_TRUE(write_all(c.fd.get(), request.dump() + "\n").ok());
    ASSERT_TRUE(within_30s([&] { return running(gone); })) << "the call did not start";
  }
  EXPECT_TRUE(within_30s([&] { return !running(gone); })) << "the call outlived its client";

  // cancel on a named run's connection.
  ServeClient c;
  ASSERT_TRUE(c.connect(path));
  Json created = c.ask({{"id", 1}, {"op", "create"}, {"provider", "namespaces"}});
  ASSERT_EQ(created["ok"], true) << created.dump();
  const std::string named = daemon_token();
  Json call = {{"id", 2}, {"op", "exec"}, {"env", created["env"]}, {"argv", long_call(named)}};
  ASSERT_TRUE(write_all(c.fd.get(), call.dump() + "\n").ok());
  ASSERT_TRUE(within_30s([&] { return running(named); })) << "the call did not start";
  Json ack = c.ask({{"id", 3}, {"op", "cancel"}});
  EXPECT_EQ(ack["id"], 3) << "a cancel is answered at once, before the call it stops";
  EXPECT_EQ(ack["ok"], true) << ack.dump();
  Json stopped = c.next();
  EXPECT_EQ(stopped["id"], 2) << stopped.dump();
  EXPECT_EQ(stopped["outcome"]["termination"], "cancelled") << stopped.dump();
  EXPECT_FALSE(running(named));
  Json next = c.ask(
      {{"id", 5}, {"op", "exec"}, {"env", created["env"]}, {"argv", {"sh", "-c", "echo after"}}});
  ASSERT_EQ(next["id"], 5) << next.dump();
  EXPECT_EQ(next["outcome"]["termination"], "exited") << "a cancel outlived its calls";
  EXPECT_EQ(next["outcome"]["stdout"], "after\n");
  Json destroyed = c.ask({{"id", 6}, {"op", "destroy"}, {"env", created["env"]}});
  EXPECT_EQ(destroyed["ok"], true) << destroyed.dump();

  ASSERT_TRUE(server->signal(SIGTERM).ok());
  auto st = server->wait_for(std::chrono::seconds(10));
  ASSERT_TRUE(st.ok() && st->has_value());
}

// sandgate bench, kept short: two paired figures, 3 rounds each, into the report model, and
// the gate of that report against itself passes. No timing is asserted: the figures are the
// timing, the gate judges them.
TEST_F(CliTest, BenchWritesPairedFiguresTheGateReads) {
  SANDGATE_REQUIRE_ROOT();
  if (::access("/usr/bin/bwrap", X_OK) != 0)
    GTEST_SKIP() << "bwrap is not installed (ci/bootstrap installs bubblewrap): no baseline";
  auto r = sandgate({"bench", "--out", tmp_ + "/bench", "--rounds", "3", "--only",
                     "run.namespaces_vs_bwrap", "--only", "call.controller_vs_exec"});
  ASSERT_EQ(r.status.shell_code(), 0) << r.output;
  EXPECT_NE(r.output.find("run.namespaces_vs_bwrap"), std::string::npos) << r.output;
  for (const char* f : {"report.json", "report.html", "junit.xml", "report.sarif", "summary.md"})
    EXPECT_EQ(::access((tmp_ + "/bench/" + f).c_str(), R_OK), 0) << f;
  auto model = read_json_file(tmp_ + "/bench/report.json");
  ASSERT_TRUE(model.ok()) << model.error().message();
  EXPECT_EQ((*model)["job"], "bench");
  const Json& figures = (*model)["bench"];
  ASSERT_EQ(figures.size(), 2u) << figures.dump();  // --only: the others are absent
  EXPECT_EQ(figures[0]["name"], "run.namespaces_vs_bwrap");
  EXPECT_EQ(figures[1]["name"], "call.controller_vs_exec");
  for (const auto& f : figures) {
    EXPECT_FALSE(f.contains("skipped")) << f.dump();
    EXPECT_EQ(f["samples"].size(), 3u) << f.dump();
    EXPECT_EQ(f["baseline_samples"].size(), 3u) << f.dump();  // paired, round by round
    for (const auto& v : f["samples"]) EXPECT_GT(v.get<double>(), 0) << f.dump();
  }
  auto same =
      sandgate({"gate", "--baseline", tmp_ + "/bench/report.json", tmp_ + "/bench/report.json"});
  EXPECT_EQ(same.status.shell_code(), 0) << same.output;
  EXPECT_NE(same.output.find("nothing regressed"), std::string::npos) << same.output;
  // A figure the set does not have is bad input.
  auto bad = sandgate({"bench", "--out", tmp_ + "/bench2", "--only", "run.fast"});
  EXPECT_EQ(bad.status.shell_code(), 2) << bad.output;
  EXPECT_NE(bad.output.find("--only run.fast: no such figure"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace sandgate::testing
