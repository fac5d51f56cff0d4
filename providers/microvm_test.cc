// The microvm provider against a real QEMU guest (TCG or KVM, whichever microvm_host picks),
// and the bridge's framing without one. Each guest test boots one VM (about 5-10 s under TCG
// here), so the checks of a running guest share one test.
#include "providers/microvm.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>

#include "core/state.h"
#include "providers/guest_bridge.h"
#include "providers/guest_image.h"
#include "providers/supervisor_protocol.h"
#include "tests/support/provider_fixture.h"

namespace sandgate::testing {
namespace {

TEST(GuestBridgeFrames, RoundTripAcrossArbitraryCuts) {
  std::string wire =
      providers::encode_frame({providers::FrameType::kMessage, 0, R"({"op":"go"})"}) +
      providers::encode_frame({providers::FrameType::kData, 7, std::string(70000, 'x')}) +
      providers::encode_frame({providers::FrameType::kEof, 7, ""});
  for (size_t cut : {size_t{1}, size_t{5}, size_t{9}, size_t{4096}}) {
    providers::FrameReader reader;
    std::vector<providers::Frame> got;
    for (size_t at = 0; at < wire.size(); at += cut) {
      reader.feed(std::string_view(wire).substr(at, cut));
      for (;;) {
        auto f = reader.next();
        ASSERT_TRUE(f.ok()) << f.error().message();
        if (!f->has_value()) break;
        got.push_back(std::move(**f));
      }
    }
    ASSERT_EQ(got.size(), 3u) << "cut " << cut;
    EXPECT_EQ(got[0].payload, R"({"op":"go"})");
    EXPECT_EQ(got[1].channel, 7u);
    EXPECT_EQ(got[1].payload.size(), 70000u);
    EXPECT_EQ(got[2].type, providers::FrameType::kEof);
  }
}

TEST(GuestBridgeFrames, MalformedFramesAreErrorsNotCrashes) {
  providers::FrameReader unknown;
  unknown.feed(std::string("\x09\0\0\0\0\0\0\0\0", 9));
  EXPECT_FALSE(unknown.next().ok()) << "unknown frame type";
  providers::FrameReader huge;
  huge.feed(std::string("\x02\0\0\0\0\xff\xff\xff\x7f", 9));
  auto f = huge.next();
  ASSERT_FALSE(f.ok()) << "a payload above the limit must be refused before it is buffered";
  EXPECT_NE(f.error().message().find("too large"), std::string::npos);
}

// As a call's stdin reads it: from the descriptor's offset on.
std::string read_to_end(int fd) {
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

// Both bridges over a socketpair, no guest: an exec's stdin (a memfd on the host) reaches the
// guest's supervisor as a third descriptor, after stdout and stderr, with the whole content.
TEST(GuestBridgeStdin, AFileStdinCrossesWholeAfterTheOutputs) {
  auto host_pair = providers::make_control_pair();   // host Supervisor <-> host bridge
  auto guest_pair = providers::make_control_pair();  // guest bridge <-> guest supervisor
  ASSERT_TRUE(host_pair.ok() && guest_pair.ok());
  int serial[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, serial), 0);
  UniqueFd serial_host(serial[0]), serial_guest(serial[1]);
  UniqueFd stop(::eventfd(0, EFD_CLOEXEC));
  std::thread host([&] {
    providers::run_host_bridge(std::move(host_pair->second), std::move(serial_host), stop.get(),
                               {});
  });
  std::string guest_why;
  std::thread guest([&] {
    guest_why = providers::run_guest_bridge(guest_pair->first.get(), serial_guest.get(), {});
  });

  auto pipe_out = make_pipe(O_CLOEXEC);
  auto pipe_err = make_pipe(O_CLOEXEC);
  ASSERT_TRUE(pipe_out.ok() && pipe_err.ok());
  UniqueFd mem(::memfd_create("stdin", MFD_CLOEXEC));
  std::string content(300000, 'q');
  content += "the end\n";
  ASSERT_TRUE(write_all(mem.get(), content).ok());
  const int sup = host_pair->first.get();
  const int guest_sup = guest_pair->second.get();
  ASSERT_TRUE(providers::send_message(sup, {{"op", "exec"}, {"id", 1}, {"stdin", true}},
                                      {pipe_out->write.get(), pipe_err->write.get(), mem.get()})
                  .ok());
  auto got = providers::recv_message(guest_sup);
  ASSERT_TRUE(got.ok()) << got.error().message();
  EXPECT_EQ(got->body.value("op", ""), "exec");
  EXPECT_FALSE(got->body.contains("_stdin_blob")) << "the bridge's own field stays the bridge's";
  ASSERT_EQ(got->fds.size(), 3u);
  struct stat st {};
  ASSERT_EQ(::fstat(got->fds[2].get(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "stdin is the memfd";
  EXPECT_EQ(read_to_end(got->fds[2].get()), content);
  for (int i : {0, 1}) {
    ASSERT_EQ(::fstat(got->fds[i].get(), &st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "output " << i << " is a pipe the guest made";
  }
  // What the call writes on its stdout reaches the host's pipe.
  ASSERT_TRUE(write_all(got->fds[0].get(), "out").ok());
  got->fds.clear();
  char buf[8] = {};
  ASSERT_EQ(::read(pipe_out->read.get(), buf, 3), 3);
  EXPECT_EQ(std::string(buf, 3), "out");

  // Without stdin an exec carries its two outputs only.
  ASSERT_TRUE(providers::send_message(sup, {{"op", "exec"}, {"id", 2}},
                                      {pipe_out->write.get(), pipe_err->write.get()})
                  .ok());
  auto plain = providers::recv_message(guest_sup);
  ASSERT_TRUE(plain.ok()) << plain.error().message();
  EXPECT_EQ(plain->fds.size(), 2u);

  ASSERT_TRUE(providers::send_message(sup, {{"op", "shutdown"}}).ok());
  guest.join();
  EXPECT_EQ(guest_why, "the host said shutdown");
  uint64_t one = 1;
  ASSERT_EQ(::write(stop.get(), &one, sizeof one), 8);
  host.join();
}

TEST(GuestImage, CpioEntriesAreFourByteAligned) {
  providers::CpioWriter w;
  w.add_dir("/a");
  w.add_file("/a/b", "hello", 0644);
  std::string out = w.finish();
  EXPECT_EQ(out.size() % 4, 0u);
  EXPECT_EQ(out.substr(0, 6), "070701");
  EXPECT_NE(out.find("a/b"), std::string::npos);
  EXPECT_NE(out.find("TRAILER!!!"), std::string::npos);
}

TEST(GuestImage, InputKeyChangesWithItsInputs) {
  char tmpl[] = "/tmp/sg-key-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string f = std::string(tmpl) + "/f";
  std::ofstream(f) << "one";
  std::string k1 = providers::input_key({f}, "v1");
  EXPECT_EQ(k1, providers::input_key({f}, "v1"));
  EXPECT_NE(k1, providers::input_key({f}, "v2"));
  std::ofstream(f) << "three";  // another size
  EXPECT_NE(k1, providers::input_key({f}, "v1"));
  (void)remove_tree(tmpl);
}

TEST(GuestImage, BadBindDestinationsAreRefusedNamingTheEntry) {
  char tmpl[] = "/tmp/sg-binds-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string src = std::string(tmpl) + "/f";
  std::ofstream(src) << "x";
  EXPECT_TRUE(providers::check_guest_binds({{src, "/opt/f"}, {tmpl, "/usr/share/d"}}).ok());
  for (const std::string bad :
       {"relative/x", "/", "/opt/../etc/x", "/opt/./x", "/opt//x", "/opt/x/", "/proc",
        "/proc/self/x", "/sys/x", "/dev/null", "/workspace", "/workspace/x", "/opt/a\nb"}) {
    auto st = providers::check_guest_binds({{src, "/opt/good"}, {src, bad}});
    ASSERT_FALSE(st.ok()) << "accepted " << bad;
    EXPECT_NE(st.error().message().find("--ro-bind entry 2 (" + src + ":" + bad + ")"),
              std::string::npos)
        << st.error().message();
  }
  // Entries do not nest (the inner mount point would be in the outer, read-only image).
  for (const std::string nested : {"/opt/good", "/opt/good/x", "/opt"}) {
    auto st = providers::check_guest_binds({{tmpl, "/opt/good"}, {src, nested}});
    ASSERT_FALSE(st.ok()) << "accepted " << nested;
    EXPECT_NE(st.error().message().find("entry 1 (/opt/good)"), std::string::npos)
        << st.error().message();
  }
  EXPECT_TRUE(providers::check_guest_binds({{tmpl, "/opt/good"}, {src, "/opt/goodness"}}).ok());
  // Paths that only look like the agent's own are fine.
  EXPECT_TRUE(providers::check_guest_binds({{src, "/procx"}, {src, "/opt/workspace"}}).ok());
  auto missing = providers::check_guest_binds({{std::string(tmpl) + "/nope", "/opt/x"}});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find("--ro-bind entry 1"), std::string::npos)
      << missing.error().message();
  auto device = providers::check_guest_binds({{"/dev/null", "/opt/null"}});
  ASSERT_FALSE(device.ok());
  EXPECT_NE(device.error().message().find("regular file or a directory"), std::string::npos)
      << device.error().message();
  (void)remove_tree(tmpl);
}

class MicrovmTest : public ProviderTest {
 protected:
  void SetUp() override {
    ProviderTest::SetUp();
    options_.supervisor_exe = SANDGATE_SUPERVISOR_BIN;
    host_ = providers::microvm_host(options_.paths);
  }
  bool ready() const { return host_.ready.ok(); }
  std::string why_not() const { return ready() ? "" : host_.ready.error().message(); }

  std::unique_ptr<providers::MicrovmEnvironment> boot(providers::EnvSpec spec = {}) {
    providers::MicrovmProvider p(options_);
    auto env = p.create_vm(spec);
    EXPECT_TRUE(env.ok()) << env.error().message();
    if (!env.ok()) return nullptr;
    std::printf("[ microvm  ] boot to ready %.2f s (%s, machine %s)\n",
                std::chrono::duration<double>((*env)->boot_time()).count(), (*env)->accel().c_str(),
                (*env)->machine().c_str());
    return std::move(env).value();
  }

  providers::MicrovmHost host_;
};

TEST_F(MicrovmTest, CallsRunInTheGuestAsTheSandboxUserInTheirOwnCgroup) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_REQUIRE(ready(), why_not());
  auto env = boot();
  ASSERT_TRUE(env);

  auto echo = run(*env, {"/bin/echo", "hello", "guest"});
  std::printf("[ microvm  ] first call %.1f ms (%s)\n",
              std::chrono::duration<double, std::milli>(echo.wall).count(), env->accel().c_str());
  EXPECT_EQ(echo.stdout_data, "hello guest\n");
  EXPECT_TRUE(echo.status.exited);
  EXPECT_EQ(echo.status.code, 0);
  auto code = sh(*env, "echo to-stderr >&2; exit 7");
  EXPECT_EQ(code.status.code, 7);
  EXPECT_EQ(code.stderr_data, "to-stderr\n");
  auto missing = run(*env, {"/no/such/program"});
  EXPECT_EQ(missing.status.shell_code(), 127);

  // The machine is labelled beside the accelerator.
  EXPECT_TRUE(env->machine() == "microvm" || env->machine() == "pc") << env->machine();
  EXPECT_NE(env->workspace_info().note.find("machine " + env->machine()), std::string::npos)
      << env->workspace_info().note;
  // The guest's clock runs at the host's rate: under TCG on the microvm machine its TSC rate
  // is what the host measured (tsc_early_khz), and a wrong one would make the guest's
  // 2 seconds shorter (or far longer) on the host's clock. The wall clock comes from the RTC.
  auto clock = sh(*env, "date +%s; sleep 2");
  EXPECT_EQ(clock.status.code, 0) << clock.stderr_data;
  EXPECT_GE(clock.wall, std::chrono::milliseconds(1800));
  EXPECT_LT(clock.wall, std::chrono::seconds(60));
  long guest_now = std::atol(clock.stdout_data.c_str());
  EXPECT_LT(std::labs(guest_now - static_cast<long>(::time(nullptr))), 300) << clock.stdout_data;

  // Its own kernel: the guest's release, not the host's.
  auto uname = run(*env, {"uname", "-r"});
  auto host_release = read_file("/proc/sys/kernel/osrelease");
  ASSERT_TRUE(host_release.ok());
  EXPECT_NE(uname.stdout_data, *host_release);
  EXPECT_NE(uname.stdout_data.find("cloud-amd64"), std::string::npos) << uname.stdout_data;

  // Dropped as in the jail: the sandbox user, no capabilities, no_new_privs, seccomp filter.
  auto status =
      sh(*env, "grep -E '^(Uid|Gid|CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status");
  EXPECT_NE(status.stdout_data.find("Uid:\t10001\t10001\t10001\t10001"), std::string::npos)
      << status.stdout_data;
  EXPECT_NE(status.stdout_data.find("CapEff:\t0000000000000000"), std::string::npos)
      << status.stdout_data;
  EXPECT_NE(status.stdout_data.find("CapBnd:\t0000000000000000"), std::string::npos)
      << status.stdout_data;
  EXPECT_NE(status.stdout_data.find("NoNewPrivs:\t1"), std::string::npos) << status.stdout_data;
  EXPECT_NE(status.stdout_data.find("Seccomp:\t2"), std::string::npos) << status.stdout_data;

  // The guest kernel's Landlock holds the call to the jail's ruleset: writing its own
  // oom_score_adj, even the value it has (allowed without Landlock), is refused.
  auto landlock = sh(*env, "(echo 1000 > /proc/self/oom_score_adj) 2>&1; echo rc=$?");
  EXPECT_NE(landlock.stdout_data.find("Permission denied"), std::string::npos)
      << landlock.stdout_data;
  EXPECT_EQ(landlock.stdout_data.find("rc=0"), std::string::npos) << landlock.stdout_data;

  // Each call in a cgroup of its own inside the guest, on pure cgroup v2.
  auto cg1 = run(*env, {"cat", "/proc/self/cgroup"});
  auto cg2 = run(*env, {"cat", "/proc/self/cgroup"});
  EXPECT_EQ(cg1.stdout_data.rfind("0::/calls/call-", 0), 0u) << cg1.stdout_data;
  EXPECT_NE(cg1.stdout_data, cg2.stdout_data);
  auto v1 =
      run(*env, {"sh", "-c", "grep -c cgroup2 /proc/mounts; grep -c ' cgroup ' /proc/mounts"});
  EXPECT_EQ(v1.stdout_data, "1\n0\n");
  // favordynmods: moving a call's process into its cgroup waits for no RCU grace period.
  auto mount = sh(*env, "grep ' /sys/fs/cgroup ' /proc/mounts");
  EXPECT_NE(mount.stdout_data.find("favordynmods"), std::string::npos) << mount.stdout_data;

  // No network device, the base read-only, the workspace writable, /tmp private.
  auto net = run(*env, {"ls", "/sys/class/net"});
  EXPECT_EQ(net.stdout_data, "lo\n");
  auto ro = sh(*env, "touch /usr/bin/x 2>&1; echo rc=$?");
  EXPECT_NE(ro.stdout_data.find("rc=1"), std::string::npos) << ro.stdout_data;
  auto ws = sh(*env, "echo data > /workspace/f && cat /workspace/f && pwd");
  EXPECT_EQ(ws.stdout_data, "data\n/workspace\n") << ws.stderr_data;
  // The host's files are not there: no host directory is shared.
  auto host = sh(*env,
                 "for p in /var/tmp/sandgate /etc/shadow /root/.bashrc /var/lib/dpkg /boot; do "
                 "test -e $p; echo $?; done");
  EXPECT_EQ(host.stdout_data, "1\n1\n1\n1\n1\n");

  // Large output crosses the bridge whole.
  auto big = sh(*env, "head -c 300000 /dev/zero | tr '\\0' a");
  EXPECT_EQ(big.stdout_bytes, 300000u);
  EXPECT_EQ(big.stdout_data.size(), 300000u);

  // A call that outlives its timeout is killed inside the guest.
  providers::Call slow;
  slow.argv = {"sleep", "30"};
  slow.timeout = std::chrono::milliseconds(500);
  auto killed = env->exec(slow, {});
  ASSERT_TRUE(killed.ok()) << killed.error().message();
  EXPECT_TRUE(killed->timed_out);

  pid_t qemu = env->qemu_pid();
  EXPECT_TRUE(process_exists(qemu));
  ASSERT_TRUE(env->destroy().ok());
  EXPECT_FALSE(process_exists(qemu)) << "QEMU outlived destroy";
}

// What a replay needs of a run while it runs (replay/replayer.h): files put into the guest's
// workspace, a file's content as a call's stdin, resident processes that outlive their exec
// in the guest's /main, and what those hold as the guest's kernel counts it.
TEST_F(MicrovmTest, FilesArePutResidentsLiveInMainAndTheGuestCountsTheirMemory) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_REQUIRE(ready(), why_not());
  auto env = boot();
  ASSERT_TRUE(env);

  // Before any exec, the guest is asked (a resident `true`).
  auto before = env->guest_resident_usage();
  ASSERT_TRUE(before.has_value()) << "the guest reports what /agent and /main hold";
  EXPECT_GT(before->memory_bytes, 0u) << "the agent's supervisor holds some memory";
  EXPECT_EQ(before->oom_kills, 0u);

  ASSERT_TRUE(env->put_file("level", "123\n").ok());
  ASSERT_TRUE(env->put_file("level", "4567\n").ok());
  auto put = sh(*env, "cat /workspace/level; stat -c '%u %a' /workspace/level; ls -a /workspace");
  EXPECT_EQ(put.stdout_data.rfind("4567\n10001 644\n", 0), 0u) << put.stdout_data;
  EXPECT_EQ(put.stdout_data.find(".put"), std::string::npos) << "no temporary left";
  auto bad = env->put_file("../etc/x", "1");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("one file name"), std::string::npos);
  // And read back from the guest: what the run wrote there, no file, too much.
  auto got = env->get_file("level", 1024);
  ASSERT_TRUE(got.ok()) << got.error().message();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, "4567\n");
  auto none = env->get_file("nothing-here", 1024);
  ASSERT_TRUE(none.ok()) << none.error().message();
  EXPECT_FALSE(none->has_value());
  EXPECT_FALSE(env->get_file("level", 2).ok()) << "more than max_bytes is an error, not cut";
  EXPECT_FALSE(env->workspace_live_on_host());

  // A memfd as stdin crosses whole; a pipe stays the guest's /dev/null; too much is refused.
  UniqueFd mem(::memfd_create("stdin", MFD_CLOEXEC));
  std::string content(200000, 'z');
  ASSERT_TRUE(write_all(mem.get(), content + "\n").ok());
  providers::Call wc;
  wc.argv = {"wc", "-c"};
  wc.stdin_fd = mem.get();
  auto counted = env->exec(wc, {});
  ASSERT_TRUE(counted.ok()) << counted.error().message();
  EXPECT_EQ(counted->stdout_data, "200001\n");
  auto pipe = make_pipe(O_CLOEXEC);
  ASSERT_TRUE(pipe.ok());
  ASSERT_TRUE(write_all(pipe->write.get(), "not carried").ok());
  wc.stdin_fd = pipe->read.get();
  auto from_pipe = env->exec(wc, {});
  ASSERT_TRUE(from_pipe.ok()) << from_pipe.error().message();
  EXPECT_EQ(from_pipe->stdout_data, "0\n");
  UniqueFd big(::memfd_create("big", MFD_CLOEXEC));
  ASSERT_EQ(::ftruncate(big.get(), (1 << 20) + 1), 0);
  wc.stdin_fd = big.get();
  auto refused = env->exec(wc, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("at most 1048576"), std::string::npos)
      << refused.error().message();

  // A resident process that detaches lives on in /main; a call's leftovers do not.
  providers::Call resident;
  resident.argv = {"sh", "-c",
                   "(exec python3 -c 'import time; b = bytearray(40 << 20); "
                   "open(\"/tmp/held\", \"w\").close(); time.sleep(600)' "
                   "</dev/null >/dev/null 2>&1 &)"};
  resident.resident = true;
  auto started = env->exec(resident, {});
  ASSERT_TRUE(started.ok()) << started.error().message();
  EXPECT_EQ(started->status.code, 0) << started->stderr_data;
  auto leftover = sh(*env, "(sleep 600 </dev/null >/dev/null 2>&1 &); echo left");
  EXPECT_EQ(leftover.stdout_data, "left\n");
  auto procs = sh(*env,
                  "i=0; while [ ! -e /tmp/held ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); "
                  "done; sleep 1; for p in $(cat /sys/fs/cgroup/main/cgroup.procs); do "
                  "tr '\\0' ' ' < /proc/$p/cmdline; echo; done; "
                  "pgrep -x sleep >/dev/null && echo sleep-lives || echo sleep-gone");
  EXPECT_NE(procs.stdout_data.find("bytearray"), std::string::npos) << procs.stdout_data;
  EXPECT_NE(procs.stdout_data.find("sleep-gone"), std::string::npos) << procs.stdout_data;
  auto after = env->guest_resident_usage();
  ASSERT_TRUE(after.has_value());
  EXPECT_GE(after->memory_bytes, before->memory_bytes + (40u << 20))
      << "the resident's 40 MiB, as the guest counts it";
  EXPECT_EQ(after->oom_kills, 0u);
  ASSERT_TRUE(env->destroy().ok());
}

// share_host_network (test-only), the one weakening a guest takes: a network device on the
// launcher's network. Here the launcher is a thread in a network namespace of the test's own
// (nothing leaves it), with a decoy address on its loopback, as `sandgate probe`'s lab has.
// What the guest sends reaches the decoy; the tap goes with the guest.
TEST_F(MicrovmTest, ShareHostNetworkIsATapOnTheLaunchersNetworkAndGoesWithTheGuest) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_REQUIRE(ready(), why_not());
  providers::EnvSpec spec;
  spec.weakenings = {providers::Weakening::kShareHostNetwork};
  {
    providers::MicrovmProvider plain(options_);
    auto refused = plain.create(spec);
    ASSERT_FALSE(refused.ok()) << "a weakening outside the self-test";
    EXPECT_NE(refused.error().message().find("--self-test"), std::string::npos)
        << refused.error().message();
  }
  options_.self_test_weakenings = true;
  {
    providers::MicrovmProvider p(options_);
    providers::EnvSpec other;
    other.weakenings = {providers::Weakening::kNoSeccomp};
    auto refused = p.create(other);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().message().find("no test-only weakening no_seccomp"),
              std::string::npos)
        << refused.error().message();
  }

  std::string failure, seen, tap_after, received;
  std::thread lab([&] {
    auto step = [&](bool ok, const std::string& what) {
      if (!ok && failure.empty()) failure = what + ": " + std::strerror(errno);
      return ok;
    };
    if (!step(::unshare(CLONE_NEWNET) == 0, "unshare(CLONE_NEWNET)")) return;
    auto ip = run_command({"ip", "link", "set", "lo", "up"});
    auto addr = run_command({"ip", "addr", "add", "203.0.113.10/32", "dev", "lo"});
    if (!step(ip.ok() && addr.ok() && ip->status.code == 0 && addr->status.code == 0,
              "ip on the test's namespace"))
      return;
    UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    struct sockaddr_in at {};
    at.sin_family = AF_INET;
    at.sin_port = htons(4443);
    ::inet_pton(AF_INET, "203.0.113.10", &at.sin_addr);
    int one = 1;
    ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (!step(::bind(listener.get(), reinterpret_cast<sockaddr*>(&at), sizeof at) == 0 &&
                  ::listen(listener.get(), 4) == 0,
              "listen on the decoy"))
      return;
    auto env = boot(spec);
    if (!env) return;
    auto net = sh(*env, "ls /sys/class/net");
    seen = net.stdout_data;
    // The guest connects to the decoy and says hello; the decoy reads it.
    std::thread accept([&] {
      struct pollfd pfd {
        listener.get(), POLLIN, 0
      };
      if (::poll(&pfd, 1, 60000) != 1) return;
      UniqueFd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
      char buf[64] = {};
      ssize_t n = conn.valid() ? ::recv(conn.get(), buf, sizeof buf - 1, MSG_WAITALL) : -1;
      if (n > 0) received.assign(buf, static_cast<size_t>(n));
    });
    auto hello = sh(*env,
                    "python3 -c \"import socket; s = socket.create_connection(('203.0.113.10', "
                    "4443), timeout=30); s.sendall(b'hello from the guest'); s.close()\"");
    accept.join();
    if (hello.status.code != 0) failure = "the guest's connect: " + hello.stderr_data;
    std::string tap;
    for (auto* list = ::if_nameindex(); list; list = nullptr) {
      for (auto* i = list; i->if_index; ++i)
        if (std::string(i->if_name).rfind("sgvm", 0) == 0) tap = i->if_name;
      ::if_freenameindex(list);
    }
    if (tap.empty() && failure.empty()) failure = "no sgvm tap in the launcher's namespace";
    (void)env->destroy();
    if (!tap.empty() && ::if_nametoindex(tap.c_str()) != 0) tap_after = tap;
  });
  lab.join();
  ASSERT_EQ(failure, "");
  EXPECT_EQ(seen, "eth0\nlo\n");
  EXPECT_EQ(received, "hello from the guest");
  EXPECT_EQ(tap_after, "") << "the tap outlived its guest";
}

TEST_F(MicrovmTest, WorkspaceIsReadBackAfterTheGuestStopsAndDestroyLeavesNothing) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_REQUIRE(ready(), why_not());
  std::string recipe = tmp_ + "/recipe";
  ASSERT_TRUE(make_dirs(recipe + "/src").ok());
  std::ofstream(recipe + "/src/main.c") << "int main(){return 0;}\n";
  providers::EnvSpec spec;
  spec.workspace_recipe = recipe;
  auto env = boot(spec);
  ASSERT_TRUE(env);
  auto r = sh(*env, "stat -c '%U %a' /workspace/src/main.c && echo written > /workspace/src/out");
  EXPECT_EQ(r.stdout_data, "sandbox 644\n") << r.stderr_data;
  EXPECT_EQ(r.status.code, 0);
  std::string run_dir = env->run_dir();
  pid_t qemu = env->qemu_pid();

  ASSERT_TRUE(env->read_back().ok());
  EXPECT_FALSE(process_exists(qemu)) << "the guest did not stop before the read-back";
  auto out = read_file(env->workspace_host_path() + "/src/out");
  ASSERT_TRUE(out.ok()) << out.error().message();
  EXPECT_EQ(*out, "written\n");
  struct stat st;
  ASSERT_EQ(::stat((env->workspace_host_path() + "/src/out").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, options_.id_map_base + 10001);
  // The recipe itself is untouched.
  EXPECT_NE(::access((recipe + "/src/out").c_str(), F_OK), 0);
  EXPECT_FALSE(env->exec(providers::Call{.argv = {"true"}}, {}).ok())
      << "no call after the read-back";

  ASSERT_TRUE(env->destroy().ok());
  EXPECT_NE(::access(run_dir.c_str(), F_OK), 0) << "images and run directory left";
  // TearDown checks that no record and no run directory is left.
}

TEST_F(MicrovmTest, ReadOnlyBindsAndSecretsAreReadNotWrittenAndDestroyLeavesNothing) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_REQUIRE(ready(), why_not());
  // A file to a new path under /opt (its mount point, and /opt's, made in the guest), a
  // directory to a new child of an existing one, with a setuid-root file inside.
  std::string file = tmp_ + "/tool";
  std::ofstream(file) << "tool contents\n";
  std::string dir = tmp_ + "/data";
  ASSERT_TRUE(make_dirs(dir + "/sub").ok());
  std::ofstream(dir + "/sub/f") << "data contents\n";
  std::ofstream(dir + "/suid") << "#!/bin/sh\nid -u\n";
  ASSERT_EQ(::chown((dir + "/suid").c_str(), 0, 0), 0);
  ASSERT_EQ(::chmod((dir + "/suid").c_str(), 04755), 0);
  providers::EnvSpec spec;
  spec.readonly_mounts = {{file, "/opt/sandgate-test/tool"}, {dir, "/usr/share/sandgate-data"}};
  spec.secrets = {{"TOKEN", "s3cret"}};
  auto env = boot(spec);
  ASSERT_TRUE(env);
  std::string run_dir = env->run_dir();
  std::string secrets_dir = env->secrets_host_path();
  EXPECT_EQ(secrets_dir, run_dir + "/secrets");

  auto read = sh(*env,
                 "cat /opt/sandgate-test/tool /usr/share/sandgate-data/sub/f; "
                 "stat -c '%a %u' /usr/share/sandgate-data/suid; ls /usr/share/sandgate-data");
  EXPECT_EQ(read.stdout_data, "tool contents\ndata contents\n4755 0\nsub\nsuid\n")
      << read.stderr_data;
  // Neither bind, nor the base under or beside them, can be written.
  for (const char* path :
       {"/opt/sandgate-test/tool", "/usr/share/sandgate-data/sub/f", "/usr/share/sandgate-data/new",
        "/opt/sandgate-test/new", "/opt/new", "/usr/bin/new", "/new"}) {
    auto w = sh(*env, std::string("(echo x >> ") + path + ") 2>&1; echo rc=$?");
    EXPECT_NE(w.stdout_data.find("Read-only file system"), std::string::npos)
        << path << ": " << w.stdout_data;
    EXPECT_NE(w.stdout_data.find("rc=2"), std::string::npos) << path << ": " << w.stdout_data;
  }
  // The binds are nosuid, and the root (the overlay over the base) read-only.
  auto mounts = sh(*env,
                   "grep -E ' /(opt/sandgate-test/tool|usr/share/sandgate-data) ' /proc/mounts | "
                   "grep -c 'ro,nosuid,nodev'; awk '$2 == \"/\" {print $4}' /proc/mounts");
  EXPECT_EQ(mounts.stdout_data.substr(0, 2), "2\n") << mounts.stdout_data;
  EXPECT_EQ(mounts.stdout_data.substr(2, 3), "ro,") << mounts.stdout_data;
  // The secret: the sandbox user's alone, read-only, where SANDGATE_SECRETS_DIR says.
  auto secret = sh(*env,
                   "cat $SANDGATE_SECRETS_DIR/TOKEN; echo; stat -c '%a %U' /run/secrets "
                   "/run/secrets/TOKEN; ls /run/secrets; (echo x > /run/secrets/TOKEN) 2>&1");
  EXPECT_EQ(secret.stdout_data.rfind("s3cret\n500 sandbox\n400 sandbox\nTOKEN\n", 0), 0u)
      << secret.stdout_data << secret.stderr_data;
  EXPECT_NE(secret.stdout_data.find("/run/secrets/TOKEN: Read-only file system"), std::string::npos)
      << secret.stdout_data;
  // The host's sources are as they were.
  EXPECT_EQ(*read_file(file), "tool contents\n");
  EXPECT_EQ(count_entries(dir), 2u);

  ASSERT_TRUE(env->destroy().ok());
  EXPECT_NE(::access(run_dir.c_str(), F_OK), 0) << "images and run directory left";
  auto host_mounts = read_file("/proc/self/mountinfo", 1 << 22);
  ASSERT_TRUE(host_mounts.ok());
  EXPECT_EQ(host_mounts->find(secrets_dir), std::string::npos) << "the secrets' tmpfs is left";
  // TearDown checks that no record and no run directory is left.
}

TEST_F(MicrovmTest, GcKillsAQemuWhoseOwnerWasKilledAndUnmountsItsSecrets) {
  SANDGATE_REQUIRE_ROOT();
  SANDGATE_REQUIRE(ready(), why_not());
  // A child process makes the VM and dies by SIGKILL: its QEMU and run are left for gc.
  Pipe report = make_pipe(0).value();
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    report.read.reset();
    providers::MicrovmProvider p(options_);
    // With a secret and a read-only bind: gc must unmount the secrets' tmpfs and remove the
    // images with the run directory.
    providers::EnvSpec spec;
    spec.secrets = {{"TOKEN", "s3cret"}};
    spec.readonly_mounts = {{SANDGATE_SUPERVISOR_BIN, "/opt/sandgate-test/bin"}};
    auto env = p.create_vm(spec);
    pid_t qemu = env.ok() ? (*env)->qemu_pid() : -1;
    (void)!::write(report.write.get(), &qemu, sizeof qemu);
    ::kill(::getpid(), SIGKILL);
  }
  report.write.reset();
  pid_t qemu = -1;
  ASSERT_EQ(::read(report.read.get(), &qemu, sizeof qemu), static_cast<ssize_t>(sizeof qemu));
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_GT(qemu, 0) << "the child could not boot a VM";
  // QEMU has no parent-death signal (it would fire when the creating thread ends): only the
  // record finds it.
  EXPECT_TRUE(process_exists(qemu)) << "QEMU died with its owner; gc is not what killed it";
  auto gc = collect_garbage(options_.paths);
  EXPECT_TRUE(gc.errors.empty()) << gc.errors.front();
  EXPECT_EQ(gc.runs_removed, 1);
  for (int i = 0; i < 100 && process_exists(qemu); ++i) ::usleep(20000);
  EXPECT_FALSE(process_exists(qemu));
  auto host_mounts = read_file("/proc/self/mountinfo", 1 << 22);
  ASSERT_TRUE(host_mounts.ok());
  EXPECT_EQ(host_mounts->find(options_.paths.work_dir), std::string::npos)
      << "a mount of the run is left (the secrets' tmpfs)";
}

}  // namespace
}  // namespace sandgate::testing
