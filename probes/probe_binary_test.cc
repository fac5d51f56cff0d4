// sandgate-probe, the real static binary: the native baseline (every probe whose action can
// work here reports reached, and the ones that cannot say so honestly), that it leaves nothing
// behind, the network probes inside a private network namespace with decoy addresses on its
// loopback, and the negative twin inside the namespaces provider (denied for the right reason).
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/fd.h"
#include "core/json.h"
#include "probes/probe_report.h"
#include "providers/seccomp_policy.h"
#include "tests/support/eventually.h"
#include "tests/support/privileged.h"
#include "tests/support/provider_fixture.h"

namespace sandgate::probes {
namespace {

using sandgate::testing::is_root;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kProbeInside[] = "/opt/sandgate-probe";

struct BinaryRun {
  int status = -1;
  std::string out, err;
};

// Runs argv (no shell) with extra environment, optionally leaking one fd and with another
// as stdin, capturing output.
BinaryRun run_binary(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                     int leak_fd = -1, int stdin_fd = -1) {
  BinaryRun r;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return r;
  pid_t pid = ::fork();
  if (pid == 0) {
    if (stdin_fd >= 0) ::dup2(stdin_fd, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    if (leak_fd >= 0) ::fcntl(leak_fd, F_SETFD, 0);  // inherited across exec on purpose
    for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  auto drain = [](int fd, std::string& into) {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) into.append(buf, static_cast<size_t>(n));
    ::close(fd);
  };
  drain(out[0], r.out);
  drain(err[0], r.err);
  ::waitpid(pid, &r.status, 0);
  return r;
}

std::map<std::string, ProbeReport> parse_reports(const std::string& out) {
  std::map<std::string, ProbeReport> reports;
  size_t start = 0;
  while (start < out.size()) {
    size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    std::string line = out.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    auto j = parse_json(line, "probe output");
    EXPECT_TRUE(j.ok()) << line;
    if (!j.ok()) continue;
    auto r = ProbeReport::from_json(*j);
    EXPECT_TRUE(r.ok()) << r.error().message() << ": " << line;
    if (r.ok()) reports[r->id] = *r;
  }
  return reports;
}

std::string describe(const ProbeReport& r) { return r.to_json().dump(); }

// The running kernel is at least major.minor (uname -r).
bool kernel_at_least(int major, int minor) {
  struct utsname u;
  int a = 0, b = 0;
  if (::uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &a, &b) != 2) return false;
  return a > major || (a == major && b >= minor);
}

// The number proc.newer_syscall tries, as the suite passes it: above what the filter knows.
std::string newer_syscall_param() {
  return "newer_syscall_nr=" + std::to_string(providers::seccomp_highest_known_syscall() + 1);
}

// The probes of syscalls a filter may not know, and the kernel that first has each (older
// kernels answer ENOSYS natively, which the baseline then shows).
const std::map<std::string, std::pair<int, int>>& new_syscall_probes() {
  static const std::map<std::string, std::pair<int, int>> probes = {
      {"proc.open_tree_attr", {6, 15}},
      {"proc.listmount", {6, 8}},
      {"proc.statmount", {6, 8}},
      {"proc.mseal", {6, 10}},
      {"proc.memfd_secret", {5, 14}},
      {"proc.modify_ldt", {2, 6}},
      // 457 (statmount) with the libseccomp these machines have; a newer library names more.
      {"proc.newer_syscall", {6, 8}},
  };
  return probes;
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// Files named sandgate-* carrying MARKER in the shared temporary directories (what this test's
// probe could leave). Only this test's marker counts: ctest runs other tests that plant and
// remove their own sandgate-* files at the same time.
std::set<std::string> sandgate_leftovers(const std::string& marker) {
  std::set<std::string> out;
  for (const char* dir : {"/tmp", "/var/tmp", "/dev/shm"}) {
    DIR* d = ::opendir(dir);
    while (struct dirent* e = d ? ::readdir(d) : nullptr) {
      std::string n = e->d_name;
      if (n.find("sandgate-probe") != std::string::npos ||
          n.find("sandgate-persist") != std::string::npos ||
          n.find("sandgate-crossrun") != std::string::npos) {
        if (n.find(marker) != std::string::npos) out.insert(std::string(dir) + "/" + n);
      }
    }
    if (d) ::closedir(d);
  }
  return out;
}

std::vector<pid_t> processes_with(const std::string& needle) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    // A process may exit between the listing and the read (ESRCH): not one of ours then. An
    // istreambuf_iterator threw on that, seen when tests beside this one ended processes.
    auto cmd = read_file(e.path() / "cmdline", 1 << 16);
    if (cmd.ok() && cmd->find(needle) != std::string::npos) out.push_back(std::stoi(name));
  }
  return out;
}

// A private tree for one native run: workspace, another workspace, a host canary, a write
// directory, a canary home, a setuid-root copy of the binary, a unix listener standing in for
// a runtime socket, and a sentinel process carrying the marker and a canary in its environ.
class NativeProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/var/tmp/sgprobe-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::chmod(dir_.c_str(), 0755);  // the setuid helper runs as nobody from here
    marker_ = "t" + std::to_string(::getpid()) + "x" + std::to_string(::time(nullptr) % 100000);
    for (const char* d : {"/ws", "/other", "/wd", "/home", "/home/.ssh", "/home/.aws", "/bin",
                          "/base-a", "/base-b"})
      ASSERT_EQ(::mkdir((dir_ + d).c_str(), 0755), 0) << d;
    std::ofstream(dir_ + "/canary") << "host canary " << marker_ << "\n";
    std::ofstream(dir_ + "/other/file") << "other run\n";
    for (const char* d : {"/base-a", "/base-b"})
      std::ofstream(base_canary(d)) << "sandgate base canary " << marker_ << "\n";
    std::ofstream(dir_ + "/home/.ssh/id_ed25519") << "key " << marker_ << "\n";
    std::ofstream(dir_ + "/home/.aws/credentials") << "aws " << marker_ << "\n";
    if (is_root()) {
      std::filesystem::copy_file(SANDGATE_PROBE_BINARY, dir_ + "/bin/setuid-probe");
      ::chown((dir_ + "/bin/setuid-probe").c_str(), 0, 0);
      ::chmod((dir_ + "/bin/setuid-probe").c_str(), 04755);
    }
    // A unix listener: connect() succeeds against its backlog, nothing is ever accepted.
    listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::string sock = dir_ + "/runtime.sock";
    std::strncpy(a.sun_path, sock.c_str(), sizeof a.sun_path - 1);
    ASSERT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::listen(listener_, 16), 0);
    // The sentinel: a process with no children (so nothing outlives the test holding its
    // output open), the marker in its argv[0] and a canary in its environment. It is this
    // binary's linger action, with an argv[2] that is not the marker so persist cleanup
    // leaves it alone.
    sentinel_ = ::fork();
    if (sentinel_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int null = ::open("/dev/null", O_RDWR);
      ::dup2(null, 1);
      ::dup2(null, 2);
      std::string env = "SANDGATE_TEST_CANARY=canary-" + marker_;
      std::string name = "sentinel-" + marker_;
      char* argv[] = {name.data(), const_cast<char*>("linger"), const_cast<char*>("sentinel"),
                      const_cast<char*>("60"), nullptr};
      char* envp[] = {env.data(), nullptr};
      ::execve(SANDGATE_PROBE_BINARY, argv, envp);
      ::_exit(127);
    }
    for (int i = 0; i < 100 && processes_with("sentinel-" + marker_).empty(); ++i) ::usleep(10000);
  }

  void TearDown() override {
    if (sentinel_ > 0) {
      ::kill(sentinel_, SIGKILL);  // the child this fixture started
      ::waitpid(sentinel_, nullptr, 0);
    }
    if (listener_ >= 0) ::close(listener_);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::vector<std::string> params() const {
    struct stat pidns, mntns;
    ::stat("/proc/self/ns/pid", &pidns);
    ::stat("/proc/self/ns/mnt", &mntns);
    return {"--param", "marker=" + marker_, "--param", "workspace=" + dir_ + "/ws", "--param",
            "host_canary=" + dir_ + "/canary", "--param", "host_write_dir=" + dir_ + "/wd",
            "--param", "other_workspace=" + dir_ + "/other", "--param", "home=" + dir_ + "/home",
            "--param", "token_names=SANDGATE_TEST_TOKEN,GITHUB_TOKEN", "--param",
            "sentinel_pid=" + std::to_string(sentinel_), "--param",
            "host_pidns=" + std::to_string(pidns.st_ino), "--param",
            "host_mntns=" + std::to_string(mntns.st_ino), "--param",
            "setuid_helper=" + dir_ + "/bin/setuid-probe", "--param",
            "extra_sockets=" + dir_ + "/runtime.sock", "--param",
            "ssh_auth_sock=" + dir_ + "/runtime.sock", "--param",
            "base_canaries=" + base_canary("/base-a") + "," + base_canary("/base-b"),
            // Safe caps: natively every resource probe finishes in well under a second.
            "--param", "mem_bytes=32MiB", "--param", "max_procs=32", "--param", "spin_ms=100",
            "--param", "spin_procs=1", "--param", "fill_bytes=4MiB", "--param", "max_fds=256",
            "--param", "sleep_ms=50", "--param", "linger_s=30", "--param", "hold_ms=20000",
            "--param", newer_syscall_param()};
  }

  std::string base_canary(const std::string& d) const {
    return dir_ + d + "/sandgate-base-canary-" + marker_;
  }

  BinaryRun probe(std::vector<std::string> args, const std::vector<std::string>& env = {},
                  int leak = -1) {
    // The fixture's parameters first: a later --param of the same key (in args) wins.
    std::vector<std::string> argv = {SANDGATE_PROBE_BINARY, args.at(0)};
    auto p = params();
    if (args[0] == "run" || args[0] == "cleanup") argv.insert(argv.end(), p.begin(), p.end());
    argv.insert(argv.end(), args.begin() + 1, args.end());
    return run_binary(argv, env, leak);
  }

  std::string dir_, marker_;
  pid_t sentinel_ = -1;
  int listener_ = -1;
};

TEST_F(NativeProbeTest, ListAndUsageErrors) {
  BinaryRun list = run_binary({SANDGATE_PROBE_BINARY, "list"});
  ASSERT_EQ(WEXITSTATUS(list.status), 0);
  size_t lines = 0;
  for (size_t at = 0; (at = list.out.find('\n', at)) != std::string::npos; ++at) ++lines;
  EXPECT_GT(lines, 70u);
  EXPECT_THAT(list.out, HasSubstr(R"("id":"fs.read_host_canary")"));

  BinaryRun bad = run_binary({SANDGATE_PROBE_BINARY, "run", "--id", "fs.nope"});
  EXPECT_EQ(WEXITSTATUS(bad.status), 2);
  EXPECT_THAT(bad.err, HasSubstr("unknown probe id 'fs.nope'"));
  BinaryRun typo = run_binary({SANDGATE_PROBE_BINARY, "run", "--param", "hom=/x"});
  EXPECT_EQ(WEXITSTATUS(typo.status), 2);
  EXPECT_THAT(typo.err, HasSubstr("'hom': unknown parameter"));
  BinaryRun noeq = run_binary({SANDGATE_PROBE_BINARY, "run", "--param", "marker"});
  EXPECT_EQ(WEXITSTATUS(noeq.status), 2);
  BinaryRun help = run_binary({SANDGATE_PROBE_BINARY, "--help"});
  EXPECT_EQ(WEXITSTATUS(help.status), 0);
  EXPECT_THAT(help.out, HasSubstr("host_canary=PATH"));
}

TEST_F(NativeProbeTest, MissingParameterIsAPreconditionNeverAGuess) {
  BinaryRun r =
      run_binary({SANDGATE_PROBE_BINARY, "run", "--id", "fs.read_host_canary", "--id",
                  "proc.kill_all", "--id", "creds.env_tokens", "--id", "fs.read_base_canary"});
  ASSERT_EQ(WEXITSTATUS(r.status), 0) << r.err;
  auto reports = parse_reports(r.out);
  ASSERT_EQ(reports.size(), 4u);
  for (const auto& [id, rep] : reports) {
    EXPECT_FALSE(rep.preconditions) << describe(rep);
    EXPECT_EQ(rep.result, ProbeResult::kError) << describe(rep);
    EXPECT_THAT(rep.detail, HasSubstr("needs --param")) << describe(rep);
  }
}

// Per directory of the base: read (with the marker) or why not; reached if any was read.
TEST_F(NativeProbeTest, BaseCanaryReportsEachDirectory) {
  ASSERT_EQ(::unlink(base_canary("/base-b").c_str()), 0);
  BinaryRun r = probe({"run", "--id", "fs.read_base_canary"});
  ASSERT_EQ(WEXITSTATUS(r.status), 0) << r.err;
  auto reports = parse_reports(r.out);
  const auto& rep = reports["fs.read_base_canary"];
  EXPECT_EQ(rep.result, ProbeResult::kReached) << describe(rep);
  EXPECT_EQ(rep.evidence["readable"], Json::array({dir_ + "/base-a"})) << describe(rep);
  EXPECT_EQ(rep.evidence["tried"][dir_ + "/base-a"]["marker_found"], true) << describe(rep);
  EXPECT_EQ(rep.evidence["tried"][dir_ + "/base-b"]["open"], "ENOENT") << describe(rep);
  // The evidence names directories; the marker is in it only as bytes read.
  EXPECT_EQ(rep.evidence["tried"].dump().find("sandgate-base-canary-"), std::string::npos);

  ASSERT_EQ(::unlink(base_canary("/base-a").c_str()), 0);
  r = probe({"run", "--id", "fs.read_base_canary"});
  reports = parse_reports(r.out);
  EXPECT_EQ(reports["fs.read_base_canary"].result, ProbeResult::kNotFound)
      << describe(reports["fs.read_base_canary"]);
  EXPECT_EQ(reports["fs.read_base_canary"].evidence["readable"], Json::array());
}

// With the host's pid namespace unknown (host_pidns=0), proc.kill_all must not conclude it is
// sandboxed and kill(-1): natively that signals every process on the host. Run in a pid
// namespace of its own, so that a regression signals nothing but itself.
TEST_F(NativeProbeTest, KillAllNeverSignalsBlindWithoutTheHostsPidNamespace) {
  SANDGATE_REQUIRE_ROOT();
  BinaryRun r = run_binary({"/usr/bin/unshare", "--pid", "--fork", SANDGATE_PROBE_BINARY, "run",
                            "--id", "proc.kill_all", "--param", "host_pidns=0", "--param",
                            "sentinel_pid=1", "--param", "marker=" + marker_});
  ASSERT_EQ(WEXITSTATUS(r.status), 0) << r.err;
  auto reports = parse_reports(r.out);
  ASSERT_EQ(reports.count("proc.kill_all"), 1u) << r.out;
  const auto& rep = reports["proc.kill_all"];
  EXPECT_FALSE(rep.preconditions) << describe(rep);
  EXPECT_THAT(rep.detail, HasSubstr("never tried blind")) << describe(rep);
  EXPECT_FALSE(rep.evidence.contains("mode")) << "it chose a way to signal: " << describe(rep);
}

// Outside a lab the decoy addresses route off this namespace (the host has a default route):
// the network probes refuse before sending anything.
TEST_F(NativeProbeTest, NetworkProbesSendNothingOutsideALab) {
  std::ifstream route("/proc/net/route");
  std::string header, first;
  std::getline(route, header);
  SANDGATE_REQUIRE(static_cast<bool>(std::getline(route, first)), "this host has no IPv4 route");
  BinaryRun r = probe({"run", "--id", "net.metadata_v4_get", "--id", "net.production_tcp", "--id",
                       "net.udp_exfil", "--id", "net.dns_exfil"});
  auto reports = parse_reports(r.out);
  ASSERT_EQ(reports.size(), 4u);
  for (const auto& [id, rep] : reports) {
    EXPECT_FALSE(rep.preconditions) << describe(rep);
    EXPECT_THAT(rep.detail, HasSubstr("not inside the lab, nothing sent")) << describe(rep);
  }
}

// The baseline: as root, natively, every action that can work on this host does.
TEST_F(NativeProbeTest, NativeBaselineReachesEveryProbeThatCanWorkHere) {
  SANDGATE_REQUIRE_ROOT();
  int leaked = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(leaked, 0);
  BinaryRun r = probe({"run", "--boundary", "fs", "--boundary", "creds", "--boundary", "proc",
                       "--boundary", "resource", "--boundary", "net"},
                      {"SANDGATE_TEST_TOKEN=token-" + marker_}, leaked);
  ::close(leaked);
  ASSERT_EQ(WEXITSTATUS(r.status), 0) << r.err;
  auto reports = parse_reports(r.out);

  // What cannot be reached natively on some hosts, and the honest reason each gives.
  auto absent = [](const char* path) { return !exists(path); };
  std::map<std::string, bool> allowed_not_found = {
      {"fs.sysrq_trigger", absent("/proc/sysrq-trigger")},
      {"fs.dev_mem", absent("/dev/mem") && absent("/dev/kmem") && absent("/dev/port")},
      {"fs.proc_kcore", absent("/proc/kcore")},
      {"fs.dev_kvm", absent("/dev/kvm")},
      {"proc.init_module", absent("/proc/modules")},
      {"net.vsock", absent("/dev/vsock")},
  };
  // A kernel older than a syscall says ENOSYS natively: denied, and the suite's judge then
  // calls the probe inconclusive. This one (6.18) has them all.
  std::map<std::string, bool> allowed_enosys;
  for (const auto& [id, version] : new_syscall_probes())
    allowed_enosys[id] = !kernel_at_least(version.first, version.second);
  // Not baseline probes natively: the real home may hold nothing; the network decoys exist
  // only in a lab (NetworkProbesInALab below); the sandbox's own state probes are compared.
  std::set<std::string> not_native = {
      "creds.own_home_files", "net.metadata_v4_get", "net.metadata_v4_imdsv2",
      "net.metadata_v4_google", "net.metadata_v6_get", "net.production_tcp", "net.registry_allowed",
      "net.registry_other_port", "net.udp_exfil", "net.dns_exfil",
      // a sandgate run's resolver only (198.18.0.0/15)
      "net.dns_exfil_resolver", "net.registry_by_name"};
  size_t reached = 0;
  for (const auto& [id, rep] : reports) {
    if (not_native.count(id)) continue;
    auto allowed = allowed_not_found.find(id);
    if (allowed != allowed_not_found.end() && allowed->second) {
      EXPECT_EQ(rep.result, ProbeResult::kNotFound) << describe(rep);
      continue;
    }
    if (allowed_enosys.count(id) && allowed_enosys[id] && rep.errno_name == "ENOSYS") continue;
    EXPECT_EQ(rep.result, ProbeResult::kReached) << describe(rep);
    EXPECT_TRUE(rep.preconditions) << describe(rep);
    if (rep.result == ProbeResult::kReached) ++reached;
  }
  EXPECT_GT(reached, 50u);
  // Evidence is data: a few spot checks.
  EXPECT_EQ(reports["fs.read_host_canary"].evidence["marker_found"], true);
  EXPECT_EQ(reports["creds.env_tokens"].evidence["present"]["SANDGATE_TEST_TOKEN"],
            "token-" + marker_);
  EXPECT_THAT(reports["creds.proc_environ"].evidence["hits"].dump(),
              HasSubstr("canary-" + marker_));
  EXPECT_EQ(reports["proc.setuid_helper"].evidence["whoami"]["euid"], 0);
  EXPECT_EQ(reports["resource.memory"].evidence["bytes_reached"], 32 << 20);
  EXPECT_EQ(reports["resource.fork_bomb"].evidence["procs_made"], 32);
  EXPECT_EQ(reports["proc.kill_all"].evidence["mode"], "sentinel only")
      << "natively, kill(-1) must never be sent";
  // The variants that differ only in bits the kernel ignores work natively too: each probe of
  // an argument-filtered call tried both, and the kernel ran both.
  for (const char* id : {"proc.tiocsti", "proc.clone_newuser", "net.packet_socket"}) {
    EXPECT_EQ(reports[id].evidence["plain"].dump() + reports[id].evidence["high_bits"].dump(),
              std::string(id) == "net.packet_socket" ? R"({"socket":"ok"}{"socket":"ok"})"
                                                     : R"("ok""ok")")
        << describe(reports[id]);
  }
  if (exists("/dev/vsock")) {
    EXPECT_EQ(reports["net.vsock"].evidence["high_bits"]["socket"], "ok")
        << describe(reports["net.vsock"]);
  }
  // Probes of new syscalls: no filter here, and the kernel ran each (its own argument checks
  // answered, or modify_ldt read nothing and returned 0).
  for (const auto& [id, version] : new_syscall_probes()) {
    EXPECT_EQ(reports[id].evidence["seccomp_mode"], 0) << describe(reports[id]);
    EXPECT_NE(reports[id].errno_name, "EPERM") << describe(reports[id]);
  }
  // The write outside the workspace is there for the host to witness; nothing else is.
  EXPECT_TRUE(exists(dir_ + "/wd/sandgate-probe-" + marker_));
  EXPECT_EQ(sandgate::testing::count_entries(dir_ + "/ws"), 0u) << "the workspace is left empty";
}

TEST_F(NativeProbeTest, NativeRunLeavesNothingBehind) {
  SANDGATE_REQUIRE_ROOT();
  ASSERT_THAT(sandgate_leftovers(marker_), IsEmpty());
  BinaryRun r = probe({"run"});
  ASSERT_EQ(WEXITSTATUS(r.status), 0) << r.err;
  EXPECT_GT(parse_reports(r.out).size(), 60u);
  BinaryRun plant = probe({"run", "--id", "persist.plant"});
  auto planted = parse_reports(plant.out);
  ASSERT_EQ(planted["persist.plant"].result, ProbeResult::kReached) << plant.out;
  // cmdline has NULs: the marker is its own argument after "linger".
  const std::string linger_arg = std::string("linger\0", 7) + marker_;
  EXPECT_FALSE(processes_with(linger_arg).empty()) << "the detached process is there to clean";
  BinaryRun find = probe({"run", "--id", "persist.find"});
  auto found = parse_reports(find.out)["persist.find"];
  EXPECT_EQ(found.result, ProbeResult::kReached) << describe(found);
  EXPECT_THAT(found.evidence["absent"].dump(), ::testing::Not(HasSubstr("detached_process")));
  // Natively crontabs and the real $HOME are never touched.
  EXPECT_THAT(planted["persist.plant"].evidence["skipped"].dump(), HasSubstr("crontab"));

  BinaryRun clean = probe({"cleanup"});
  ASSERT_EQ(WEXITSTATUS(clean.status), 0) << clean.err;
  // cleanup SIGTERMs the detached process and returns; it ends a moment later (a zombie's
  // cmdline reads empty).
  EXPECT_TRUE(sandgate::testing::eventually([&] { return processes_with(linger_arg).empty(); }))
      << "the detached process outlived cleanup by 10 s";
  BinaryRun after = probe({"run", "--id", "persist.find"});
  EXPECT_EQ(parse_reports(after.out)["persist.find"].result, ProbeResult::kNotFound) << after.out;
  EXPECT_THAT(sandgate_leftovers(marker_), IsEmpty());
  EXPECT_EQ(sandgate::testing::count_entries(dir_ + "/ws"), 0u);
  EXPECT_EQ(sandgate::testing::count_entries(dir_ + "/home"), 2u) << ".ssh and .aws only";
  for (const auto& e : std::filesystem::directory_iterator("/sys/fs/cgroup/memory"))
    EXPECT_EQ(e.path().filename().string().find("sandgate-probe-" + marker_), std::string::npos);
}

// Two runs on the host: B reaches every one of A's objects, A saw B, and A removes them all.
TEST_F(NativeProbeTest, NativeCrossRunReachesEveryObjectAndCleansUp) {
  SANDGATE_REQUIRE_ROOT();
  ASSERT_THAT(sandgate_leftovers(marker_), IsEmpty());
  std::string ready = dir_ + "/ws/sandgate-crossrun-" + marker_ + ".ready.json";
  BinaryRun plant_run;
  pid_t a = ::fork();
  if (a == 0) {
    BinaryRun r = probe({"run", "--id", "crossrun.plant"});
    std::ofstream(dir_ + "/plant.out") << r.out;
    ::_exit(0);
  }
  for (int i = 0; i < 500 && !exists(ready); ++i) ::usleep(10000);
  ASSERT_TRUE(exists(ready));
  auto info = read_json_file(ready);
  ASSERT_TRUE(info.ok()) << info.error().message();
  // Run A's secret, natively a host file like any other.
  ASSERT_TRUE(make_dirs(dir_ + "/secrets").ok());
  std::ofstream(dir_ + "/secrets/" + std::string(kProbeSecretName))
      << "sandgate-secret-" << marker_ << "\n";
  BinaryRun b =
      probe({"run", "--boundary", "crossrun", "--param", "other_workspace=" + dir_ + "/ws",
             "--param", "other_port=" + std::to_string((*info)["port"].get<int>()), "--param",
             "other_secrets=" + dir_ + "/secrets"});
  std::ofstream(dir_ + "/ws/sandgate-crossrun-" + marker_ + ".release").flush();
  ::waitpid(a, nullptr, 0);
  auto reports = parse_reports(b.out);
  EXPECT_EQ(reports.count("crossrun.plant"), 0u) << "explicit: never run by --boundary";
  EXPECT_EQ(reports.size(), 11u);
  for (const auto& [id, rep] : reports)
    EXPECT_EQ(rep.result, ProbeResult::kReached) << describe(rep);
  EXPECT_EQ(reports["crossrun.secret"].evidence["marker_found"], true);
  std::ifstream in(dir_ + "/plant.out");
  std::string out((std::istreambuf_iterator<char>(in)), {});
  auto plant = parse_reports(out)["crossrun.plant"];
  EXPECT_EQ(plant.result, ProbeResult::kReached) << out;
  EXPECT_EQ(plant.evidence["observed"]["released"], true);
  EXPECT_EQ(plant.evidence["observed"]["connections"].size(), 2u);
  EXPECT_GE(plant.evidence["observed"]["signals_received"].get<int>(), 1);
  EXPECT_EQ(plant.evidence["observed"]["msg_left"], 0);
  EXPECT_THAT(sandgate_leftovers(marker_), IsEmpty());
  EXPECT_EQ(sandgate::testing::count_entries(dir_ + "/ws"), 0u);
}

// The network probes in a namespace of their own whose loopback carries the decoy addresses
// and which has a veth pair of its own, both ends inside (as the lab does): an HTTP decoy
// answers on 169.254.169.254:80; the others are absent.
TEST_F(NativeProbeTest, NetworkProbesInALab) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_REQUIRE(exists("/usr/sbin/ip") || exists("/sbin/ip") || exists("/bin/ip"),
                   "needs ip(8)");
  std::string out_file = dir_ + "/net.out", log_file = dir_ + "/decoy.log";
  pid_t child = ::fork();
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::unshare(CLONE_NEWNET) != 0) ::_exit(10);
    std::string setup =
        "ip link set lo up && ip addr add 169.254.169.254/32 dev lo && "
        "ip addr add 203.0.113.10/32 dev lo && ip addr add 203.0.113.53/32 dev lo && "
        "ip addr add 203.0.113.20/32 dev lo && ip -6 addr add fd00:ec2::254/128 dev lo nodad && "
        "ip link add sg-lab0 type veth peer name sg-lab1 && "
        "echo 1 >/proc/sys/net/ipv6/conf/sg-lab0/disable_ipv6 && "
        "echo 1 >/proc/sys/net/ipv6/conf/sg-lab1/disable_ipv6 && "
        "ip addr add 203.0.113.241/32 dev sg-lab0 && ip addr add 203.0.113.242/32 dev sg-lab1 && "
        "ip link set sg-lab0 up && ip link set sg-lab1 up";
    if (std::system(setup.c_str()) != 0) ::_exit(11);
    int http = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(80);
    ::inet_pton(AF_INET, "169.254.169.254", &a.sin_addr);
    if (::bind(http, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(http, 8) != 0)
      ::_exit(12);
    pid_t probe_pid = ::fork();
    if (probe_pid == 0) {
      int fd = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      std::vector<std::string> argv = {SANDGATE_PROBE_BINARY, "run", "--boundary", "net", "--param",
                                       "marker=" + marker_};
      std::vector<char*> args;
      for (auto& s : argv) args.push_back(s.data());
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    // The decoy: log each request's first line, answer 200, until the probes are done.
    std::ofstream log(log_file);
    while (true) {
      struct pollfd pfd = {http, POLLIN, 0};
      if (::poll(&pfd, 1, 50) > 0) {
        int c = ::accept(http, nullptr, nullptr);
        char buf[2048] = {};
        ssize_t n = ::read(c, buf, sizeof buf - 1);
        std::string req(buf, n > 0 ? static_cast<size_t>(n) : 0);
        log << req.substr(0, req.find('\r')) << "\n" << std::flush;
        static const char kReply[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        (void)::write(c, kReply, sizeof kReply - 1);
        ::close(c);
      }
      if (::waitpid(probe_pid, nullptr, WNOHANG) == probe_pid) break;
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "lab set-up step " << WEXITSTATUS(status);
  std::ifstream in(out_file);
  auto reports = parse_reports(std::string((std::istreambuf_iterator<char>(in)), {}));
  std::ifstream lin(log_file);
  std::string log((std::istreambuf_iterator<char>(lin)), {});
  for (const char* id :
       {"net.metadata_v4_get", "net.metadata_v4_imdsv2", "net.metadata_v4_google"}) {
    EXPECT_EQ(reports[id].result, ProbeResult::kReached) << describe(reports[id]);
    EXPECT_EQ(reports[id].evidence["response_first_line"], "HTTP/1.1 200 OK");
  }
  EXPECT_THAT(log,
              HasSubstr("GET /latest/meta-data/iam/security-credentials/?sandgate=" + marker_));
  EXPECT_THAT(log, HasSubstr("PUT /latest/api/token?sandgate=" + marker_));
  // No listener: the decoy address is local, so the attempt is made and refused on loopback.
  for (const char* id : {"net.metadata_v6_get", "net.production_tcp", "net.registry_other_port"}) {
    EXPECT_TRUE(reports[id].preconditions) << describe(reports[id]);
    EXPECT_EQ(reports[id].errno_name, "ECONNREFUSED") << describe(reports[id]);
  }
  EXPECT_EQ(reports["net.udp_exfil"].result, ProbeResult::kReached)
      << describe(reports["net.udp_exfil"]);
  EXPECT_EQ(reports["net.dns_exfil"].result, ProbeResult::kReached);
  EXPECT_EQ(reports["net.dns_exfil"].evidence["name"], marker_ + ".exfil.sandgate.test");
  EXPECT_EQ(reports["net.raw_socket"].result, ProbeResult::kReached);
  EXPECT_EQ(reports["net.packet_socket"].result, ProbeResult::kReached);
  EXPECT_EQ(reports["net.io_uring_socket"].result, ProbeResult::kReached);
  // The namespace's own interface beyond loopback is seen: natively, the probe reaches.
  const auto& ifs = reports["net.interfaces"];
  EXPECT_EQ(ifs.result, ProbeResult::kReached) << describe(ifs);
  EXPECT_TRUE(ifs.preconditions) << describe(ifs);
  std::set<std::string> names;
  for (const auto& n : ifs.evidence["interfaces"]) names.insert(n.get<std::string>());
  EXPECT_EQ(names, (std::set<std::string>{"lo", "sg-lab0", "sg-lab1"})) << describe(ifs);
  EXPECT_EQ(ifs.evidence["ipv6_routes_off_loopback"], 0) << describe(ifs);
}

// A pseudo-terminal pair as the suite makes one for proc.tiocsti: nobody's controlling tty.
struct TestPty {
  UniqueFd master, terminal;
};
TestPty open_test_pty() {
  TestPty p;
  p.master = UniqueFd(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!p.master.valid() || ::grantpt(p.master.get()) != 0 || ::unlockpt(p.master.get()) != 0)
    return p;
  p.terminal = UniqueFd(::open(::ptsname(p.master.get()), O_RDWR | O_NOCTTY | O_CLOEXEC));
  return p;
}

// proc.tiocsti through a terminal the launcher gives as stdin (what the suite does, for a
// jail whose /dev has no ptmx): natively the kernel takes both forms, and what was pushed is
// flushed again. The negative twin: a terminal that already is another session's controlling
// tty (as a user's real terminal is) is not taken, so nothing is pushed into it.
TEST(TiocstiProbe, UsesTheLaunchersPtyAndNeverAnotherSessionsTerminal) {
  TestPty pty = open_test_pty();
  ASSERT_TRUE(pty.terminal.valid());
  const UniqueFd& slave = pty.terminal;
  std::vector<std::string> argv = {SANDGATE_PROBE_BINARY, "run", "--id", "proc.tiocsti",
                                   "--param", "stdin_pty=1"};
  auto r = run_binary(argv, {}, -1, slave.get());
  auto reports = parse_reports(r.out);
  const auto& rep = reports["proc.tiocsti"];
  EXPECT_TRUE(rep.preconditions) << describe(rep);
  EXPECT_EQ(rep.evidence["terminal"], "stdin (the launcher's pty)") << describe(rep);
  const bool kernel_refuses = rep.evidence["legacy_tiocsti"] == "0" && !is_root();
  if (kernel_refuses) {
    EXPECT_EQ(rep.errno_name, "EIO") << describe(rep);
    EXPECT_TRUE(rep.evidence.contains("kernel_refuses")) << describe(rep);
  } else {
    EXPECT_EQ(rep.result, ProbeResult::kReached) << describe(rep);
    EXPECT_EQ(rep.evidence["plain"], "ok") << describe(rep);
    EXPECT_EQ(rep.evidence["high_bits"], "ok") << describe(rep);
  }
  int queued = -1;
  ASSERT_EQ(::ioctl(slave.get(), FIONREAD, &queued), 0);
  EXPECT_EQ(queued, 0) << "what was pushed was left in the terminal's input";

  // Another session holds the terminal as its controlling tty.
  Pipe ready = make_pipe(O_CLOEXEC).value();
  pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::setsid() < 0 || ::ioctl(slave.get(), TIOCSCTTY, 0) != 0) ::_exit(1);
    (void)!::write(ready.write.get(), "r", 1);
    for (;;) ::pause();
  }
  ready.write.reset();
  char byte = 0;
  ASSERT_EQ(::read(ready.read.get(), &byte, 1), 1) << "the holder could not take the terminal";
  auto held = run_binary(argv, {}, -1, slave.get());
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  auto held_reports = parse_reports(held.out);
  const auto& h = held_reports["proc.tiocsti"];
  EXPECT_FALSE(h.preconditions) << describe(h);
  EXPECT_THAT(h.detail, HasSubstr("controlling tty")) << describe(h);
  EXPECT_FALSE(h.evidence.contains("plain")) << "TIOCSTI was tried: " << describe(h);
  queued = -1;
  ASSERT_EQ(::ioctl(slave.get(), FIONREAD, &queued), 0);
  EXPECT_EQ(queued, 0);
}

// The negative twin: the same binary inside the namespaces provider.
class JailedProbeTest : public sandgate::testing::ProviderTest {};

TEST_F(JailedProbeTest, NamespacesProviderDeniesForTheRightReason) {
  SANDGATE_REQUIRE_ROOT();
  std::string canary = tmp_ + "/host-canary", wd = tmp_ + "/wd";
  std::ofstream(canary) << "host secret\n";
  ASSERT_EQ(::mkdir(wd.c_str(), 0777), 0);
  ::setenv("SANDGATE_TEST_TOKEN", "jailed-canary", 1);
  auto p = provider("namespaces");
  ASSERT_TRUE(p);
  providers::EnvSpec spec;
  spec.readonly_mounts.push_back({SANDGATE_PROBE_BINARY, kProbeInside});
  auto env = make_env(*p, spec);
  ASSERT_TRUE(env);
  struct stat pidns;
  ::stat("/proc/self/ns/pid", &pidns);
  auto r = run(*env, {kProbeInside, "run",
                      "--id",       "fs.read_host_canary",
                      "--id",       "fs.write_host_dir",
                      "--id",       "fs.readonly_base",
                      "--id",       "fs.core_pattern",
                      "--id",       "creds.env_tokens",
                      "--id",       "creds.keyctl_session",
                      "--id",       "proc.capabilities",
                      "--id",       "proc.seccomp",
                      "--id",       "proc.no_new_privs",
                      "--id",       "proc.bpf_prog_load",
                      "--id",       "proc.mount",
                      "--id",       "proc.unshare_user",
                      "--id",       "proc.kill_all",
                      "--id",       "net.io_uring_socket",
                      "--id",       "net.metadata_v4_get",
                      "--id",       "net.vsock",
                      "--id",       "net.packet_socket",
                      "--id",       "net.interfaces",
                      "--id",       "proc.tiocsti",
                      "--id",       "proc.clone_newuser",
                      "--id",       "proc.newer_syscall",
                      "--id",       "proc.open_tree_attr",
                      "--id",       "proc.listmount",
                      "--id",       "proc.statmount",
                      "--id",       "proc.mseal",
                      "--id",       "proc.memfd_secret",
                      "--id",       "proc.modify_ldt",
                      "--id",       "proc.lower_oom_priority",
                      "--param",    newer_syscall_param(),
                      "--param",    "marker=jailtest",
                      "--param",    "host_canary=" + canary,
                      "--param",    "host_write_dir=" + wd,
                      "--param",    "token_names=SANDGATE_TEST_TOKEN",
                      "--param",    "sentinel_pid=" + std::to_string(::getpid()),
                      "--param",    "host_pidns=" + std::to_string(pidns.st_ino)});
  ::unsetenv("SANDGATE_TEST_TOKEN");
  ASSERT_EQ(r.status.shell_code(), 0) << r.stderr_data;
  auto reports = parse_reports(r.stdout_data);
  ASSERT_EQ(reports.size(), 28u) << r.stdout_data;
  auto expect = [&](const char* id, ProbeResult result, const char* err) {
    const auto& rep = reports[id];
    EXPECT_EQ(rep.result, result) << describe(rep);
    EXPECT_EQ(rep.errno_name, err) << describe(rep);
    EXPECT_TRUE(rep.preconditions) << describe(rep);
  };
  expect("fs.read_host_canary", ProbeResult::kNotFound, "ENOENT");  // mount namespace
  expect("fs.write_host_dir", ProbeResult::kNotFound, "ENOENT");
  expect("fs.readonly_base", ProbeResult::kDenied, "EROFS");      // read-only binds
  expect("creds.env_tokens", ProbeResult::kNotFound, "ENOENT");   // scrubbed environment
  expect("creds.keyctl_session", ProbeResult::kDenied, "EPERM");  // seccomp
  expect("proc.bpf_prog_load", ProbeResult::kDenied, "EPERM");
  expect("proc.mount", ProbeResult::kDenied, "EPERM");
  expect("proc.unshare_user", ProbeResult::kDenied, "EPERM");
  expect("net.io_uring_socket", ProbeResult::kDenied, "EPERM");
  // The run's own network namespace has no route (Landlock leaves TCP to it: jail.cc).
  expect("net.metadata_v4_get", ProbeResult::kDenied, "ENETUNREACH");
  expect("proc.kill_all", ProbeResult::kNotFound, "ESRCH");            // own pid namespace
  expect("net.interfaces", ProbeResult::kDenied, "ENETUNREACH");       // own network namespace
  EXPECT_EQ(reports["net.interfaces"].evidence["interfaces"], Json::array({"lo"}));
  // The jail gave the call oom_score_adj 1000; Landlock keeps it from writing procfs at all.
  expect("proc.lower_oom_priority", ProbeResult::kDenied, "EACCES");
  EXPECT_EQ(reports["proc.lower_oom_priority"].evidence["after"], "1000");
  EXPECT_EQ(reports["proc.kill_all"].evidence["mode"], "kill(-1)");
  for (const char* id : {"proc.capabilities", "proc.seccomp", "proc.no_new_privs"})
    EXPECT_EQ(reports[id].result, ProbeResult::kDenied) << describe(reports[id]);
  EXPECT_EQ(reports["proc.seccomp"].evidence["mode"], 2);
  EXPECT_NE(reports["fs.core_pattern"].result, ProbeResult::kReached);
  EXPECT_FALSE(exists(wd + "/sandgate-probe-jailtest")) << "the host saw the write";

  // Argument-filtered calls: refused by the filter in both forms, the plain call and its twin
  // with bits set above the 32 the kernel reads. (proc.tiocsti cannot make a terminal here: the
  // jail's /dev has no ptmx, so on its own it is a precondition failure; with the host's pty
  // as its stdin it runs, below.)
  for (const char* id : {"net.vsock", "net.packet_socket", "proc.clone_newuser"}) {
    expect(id, ProbeResult::kDenied, "EPERM");
    const Json& ev = reports[id].evidence;
    for (const char* variant : {"plain", "high_bits"}) {
      Json v = ev.value(variant, Json());
      if (v.is_object()) v = v.value("socket", Json());
      EXPECT_EQ(v, "EPERM") << id << " " << variant << ": " << describe(reports[id]);
    }
  }
  EXPECT_FALSE(reports["proc.tiocsti"].preconditions) << describe(reports["proc.tiocsti"]);
  {
    // The terminal end of a host pty as the call's stdin, as the suite gives it: the child
    // takes it as its controlling tty, and the filter refuses TIOCSTI in both forms.
    TestPty pty = open_test_pty();
    ASSERT_TRUE(pty.terminal.valid());
    providers::Call call;
    call.argv = {kProbeInside, "run", "--id", "proc.tiocsti", "--param", "stdin_pty=1"};
    call.stdin_fd = pty.terminal.get();
    auto t = env->exec(call, {});
    ASSERT_TRUE(t.ok()) << t.error().message();
    auto tr = parse_reports(t->stdout_data);
    const auto& rep = tr["proc.tiocsti"];
    EXPECT_TRUE(rep.preconditions) << describe(rep);
    EXPECT_EQ(rep.evidence["terminal"], "stdin (the launcher's pty)") << describe(rep);
    EXPECT_EQ(rep.errno_name, "EPERM") << describe(rep);
    EXPECT_EQ(rep.evidence["plain"], "EPERM") << describe(rep);
    EXPECT_EQ(rep.evidence["high_bits"], "EPERM") << describe(rep);
    EXPECT_EQ(rep.evidence["cap_sys_admin"], false) << describe(rep);
    int queued = -1;
    ASSERT_EQ(::ioctl(pty.terminal.get(), FIONREAD, &queued), 0);
    EXPECT_EQ(queued, 0) << "something reached the host's terminal";
  }
  // Syscalls the kernel has (the native test above) that the filter refuses: ENOSYS when the
  // library cannot name them or they are left off the allow list, EPERM when denied by name;
  // and the probe saw the filter it ran under, which is how the judge attributes them.
  for (const auto& [id, version] : new_syscall_probes()) {
    const auto& rep = reports[id];
    EXPECT_EQ(rep.result, ProbeResult::kDenied) << describe(rep);
    EXPECT_TRUE(rep.errno_name == "ENOSYS" || rep.errno_name == "EPERM") << describe(rep);
    EXPECT_EQ(rep.evidence["seccomp_mode"], 2) << describe(rep);
    EXPECT_TRUE(rep.preconditions) << describe(rep);
  }
}

}  // namespace
}  // namespace sandgate::probes
