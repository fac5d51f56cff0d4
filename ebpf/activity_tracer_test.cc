#include "ebpf/activity_tracer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/fd.h"
#include "core/files.h"
#include "core/mounts.h"
#include "tests/support/privileged.h"

namespace sandgate::ebpf {
namespace {

TEST(SensitivePath, KeepsSecretsAndSocketsOnly) {
  EXPECT_TRUE(sensitive_path("/proc/1/environ"));
  EXPECT_TRUE(sensitive_path("/proc/self/environ"));
  EXPECT_TRUE(sensitive_path("/proc/42/mem"));
  EXPECT_TRUE(sensitive_path("/root/.ssh/id_ed25519"));
  EXPECT_TRUE(sensitive_path("/home/dev/.aws/credentials"));
  EXPECT_TRUE(sensitive_path("/etc/shadow"));
  EXPECT_TRUE(sensitive_path("/etc/ssh/ssh_host_ed25519_key"));
  EXPECT_TRUE(sensitive_path("/run/podman/podman.sock"));
  EXPECT_TRUE(sensitive_path("/var/run/docker.sock"));
  EXPECT_TRUE(sensitive_path("/run/secrets/token"));
  EXPECT_FALSE(sensitive_path("/proc/self/status"));
  EXPECT_FALSE(sensitive_path("/proc/cpuinfo"));
  EXPECT_FALSE(sensitive_path("/etc/passwd"));
  EXPECT_FALSE(sensitive_path("/run/lock"));
  EXPECT_FALSE(sensitive_path("/workspace/home/x"));
}

TEST(TracedConnect, VerdictFromErrno) {
  TracedConnect c;
  EXPECT_EQ(c.verdict(), "allowed");
  c.err = EINPROGRESS;
  EXPECT_EQ(c.verdict(), "allowed");
  c.err = EPERM;
  EXPECT_EQ(c.verdict(), "denied");
  c.err = EACCES;
  EXPECT_EQ(c.verdict(), "denied");
  c.err = ENETUNREACH;
  EXPECT_EQ(c.verdict(), "failed");
}

TEST(ActivityTracerOptions, RefusesPrefixesTheKernelSideCannotHold) {
  ActivityOptions o;
  o.kernel_prefixes.assign(9, "/x/");
  auto t = ActivityTracer::open(o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message().find("at most 8"), std::string::npos) << t.error().message();
  o.kernel_prefixes = {std::string(48, 'a')};
  t = ActivityTracer::open(o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message().find("1 to 47 bytes"), std::string::npos) << t.error().message();
}

// A cgroup2 directory of this test's own, removed when done.
class TracedCgroup {
 public:
  explicit TracedCgroup(const std::string& name) {
    std::string mount = cgroup2_mount_point();
    if (mount.empty()) return;
    dir_ = mount + "/sandgate-test-" + name + "-" + std::to_string(::getpid());
    if (::mkdir(dir_.c_str(), 0755) != 0) dir_.clear();
  }
  ~TracedCgroup() {
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// Runs `body` in a child that first moves itself into `cgroup_dir`; returns its wait status.
template <typename Body>
int run_in_cgroup(const std::string& cgroup_dir, Body body) {
  pid_t pid = ::fork();
  if (pid == 0) {
    std::string me = std::to_string(::getpid());
    int fd = ::open((cgroup_dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::write(fd, me.data(), me.size()) != static_cast<ssize_t>(me.size())) ::_exit(90);
    ::close(fd);
    body();
    ::_exit(0);
  }
  int status = -1;
  ::waitpid(pid, &status, 0);
  return status;
}

class ActivityTracerReal : public ::testing::Test {
 protected:
  void SetUp() override {
    SANDGATE_REQUIRE_ROOT();
    auto t = ActivityTracer::open();
    SANDGATE_REQUIRE(t.ok(), "the activity tracer cannot load here: " +
                                 (t.ok() ? std::string() : t.error().message()));
    tracer_ = std::move(*t);
  }
  std::unique_ptr<ActivityTracer> tracer_;
};

TEST_F(ActivityTracerReal, AttributesExecForkOpenAndConnectToTheirCgroup) {
  TracedCgroup cg("ebpf-activity");
  ASSERT_FALSE(cg.dir().empty()) << "no cgroup2 mount to make a test cgroup in";
  auto id = cgroup_id_of(cg.dir());
  ASSERT_TRUE(id.ok()) << id.error().message();
  ASSERT_TRUE(tracer_->watch(*id).ok());
  tracer_->begin(*id);

  int status = run_in_cgroup(cg.dir(), [] {
    // A network namespace of its own with nothing up: the connects below fail with
    // ENETUNREACH inside it, and nothing can leave the machine.
    if (::unshare(CLONE_NEWNET) != 0) ::_exit(91);
    int fd = ::open("/proc/self/environ", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) ::close(fd);
    (void)::open("/root/.sandgate-test-no-such-credential", O_RDONLY | O_CLOEXEC);
    (void)::open("/etc/hostname", O_RDONLY | O_CLOEXEC);  // not sensitive: not kept
    int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(8443);
    ::inet_pton(AF_INET, "203.0.113.30", &to.sin_addr);
    (void)::connect(s, reinterpret_cast<sockaddr*>(&to), sizeof to);
    int u = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    to.sin_port = htons(53);
    ::inet_pton(AF_INET, "203.0.113.53", &to.sin_addr);
    (void)::sendto(u, "q", 1, 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
    pid_t child = ::fork();
    if (child == 0) {
      ::execl("/bin/true", "true", "--sandgate-test-arg", static_cast<char*>(nullptr));
      ::_exit(92);
    }
    int st;
    ::waitpid(child, &st, 0);
    ::_exit(WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 93);
  });
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  TracedActivity a = tracer_->end(*id);
  tracer_->unwatch(*id);

  ASSERT_EQ(a.execs.size(), 1u) << to_json(a).dump();
  EXPECT_EQ(a.execs[0].path, "/bin/true");
  EXPECT_EQ(a.execs[0].argv, (std::vector<std::string>{"true", "--sandgate-test-arg"}));
  EXPECT_EQ(a.forks, 1u);  // the test's fork() before the cgroup move is not the cgroup's
  EXPECT_EQ(a.exits, 2u);
  ASSERT_EQ(a.sensitive_opens.size(), 2u) << to_json(a).dump();
  EXPECT_EQ(a.sensitive_opens[0].path, "/proc/self/environ");
  EXPECT_EQ(a.sensitive_opens[0].err, 0);
  EXPECT_EQ(a.sensitive_opens[1].path, "/root/.sandgate-test-no-such-credential");
  EXPECT_EQ(a.sensitive_opens[1].err, ENOENT);
  ASSERT_EQ(a.connects.size(), 2u) << to_json(a).dump();
  EXPECT_EQ(a.connects[0].syscall, "connect");
  EXPECT_EQ(a.connects[0].family, "inet");
  EXPECT_EQ(a.connects[0].address, "203.0.113.30");
  EXPECT_EQ(a.connects[0].port, 8443);
  EXPECT_EQ(a.connects[0].protocol, "tcp");
  EXPECT_EQ(a.connects[0].err, ENETUNREACH);
  EXPECT_EQ(a.connects[0].verdict(), "failed");
  EXPECT_EQ(a.connects[1].syscall, "sendto");
  EXPECT_EQ(a.connects[1].address, "203.0.113.53");
  EXPECT_EQ(a.connects[1].port, 53);
  EXPECT_EQ(a.connects[1].protocol, "udp");
  EXPECT_EQ(a.lost, 0u);
}

// Nothing watched: the syscall tracepoints every host process would pass through are detached.
TEST_F(ActivityTracerReal, SyscallTracepointsAreAttachedOnlyWhileSomethingIsWatched) {
  EXPECT_FALSE(tracer_->syscalls_attached());
  ASSERT_TRUE(tracer_->watch(1001).ok());
  ASSERT_TRUE(tracer_->watch(1002).ok());
  EXPECT_TRUE(tracer_->syscalls_attached());
  tracer_->unwatch(1001);
  EXPECT_TRUE(tracer_->syscalls_attached());
  tracer_->unwatch(1002);
  EXPECT_FALSE(tracer_->syscalls_attached());
  tracer_->unwatch(1002);  // idempotent
  EXPECT_FALSE(tracer_->syscalls_attached());
}

// Three processes spinning on one CPU for 300 ms each take turns: each waits in the run queue
// for much of that time, and the meter sums those waits for their cgroup.
TEST_F(ActivityTracerReal, RunQueueDelayOfTasksSharingOneCpu) {
  TracedCgroup cg("ebpf-runq");
  ASSERT_FALSE(cg.dir().empty()) << "no cgroup2 mount to make a test cgroup in";
  auto id = cgroup_id_of(cg.dir());
  ASSERT_TRUE(id.ok()) << id.error().message();
  ASSERT_TRUE(tracer_->watch(*id).ok());
  tracer_->begin(*id);
  int status = run_in_cgroup(cg.dir(), [] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    if (::sched_setaffinity(0, sizeof one, &one) != 0) ::_exit(94);
    for (int i = 0; i < 3; ++i) {
      if (::fork() == 0) {
        timespec start, now;
        ::clock_gettime(CLOCK_MONOTONIC, &start);
        do {
          ::clock_gettime(CLOCK_MONOTONIC, &now);
        } while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 <
                 300);
        ::_exit(0);
      }
    }
    while (::wait(nullptr) > 0) {
    }
  });
  TracedActivity a = tracer_->end(*id);
  tracer_->unwatch(*id);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  // 900 ms of spinning on one CPU over at least 300 ms of wall time: at least 300 ms of it
  // spent waiting, whatever else the machine runs (a wide margin below the ~600 ms expected).
  EXPECT_GE(a.runq_delay_ns, 300'000'000u) << to_json(a).dump();
  EXPECT_GT(a.runq_waits, 3u);
  EXPECT_GT(a.runq_delay_max_ns, 0u);
  EXPECT_LE(a.runq_delay_max_ns, a.runq_delay_ns);
}

// Unwatched, the same contention is not measured: the meter follows the watched set.
TEST_F(ActivityTracerReal, ProcessesOutsideWatchedCgroupsAreNotTraced) {
  TracedCgroup cg("ebpf-unwatched");
  ASSERT_FALSE(cg.dir().empty()) << "no cgroup2 mount to make a test cgroup in";
  auto id = cgroup_id_of(cg.dir());
  ASSERT_TRUE(id.ok()) << id.error().message();
  tracer_->begin(*id);  // collected, but never watched: the kernel side filters it out
  int status = run_in_cgroup(cg.dir(), [] {
    ::execl("/bin/true", "true", static_cast<char*>(nullptr));
    ::_exit(92);
  });
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  TracedActivity a = tracer_->end(*id);
  EXPECT_TRUE(a.execs.empty()) << to_json(a).dump();
  EXPECT_EQ(a.exits, 0u);
}

TEST_F(ActivityTracerReal, AChildCgroupOfAWatchedOneIsTraced) {
  TracedCgroup run("ebpf-run");
  ASSERT_FALSE(run.dir().empty()) << "no cgroup2 mount to make a test cgroup in";
  std::string call = run.dir() + "/call-1";
  ASSERT_EQ(::mkdir(call.c_str(), 0755), 0) << std::strerror(errno);
  auto run_id = cgroup_id_of(run.dir()), call_id = cgroup_id_of(call);
  ASSERT_TRUE(run_id.ok() && call_id.ok());
  ASSERT_TRUE(tracer_->watch(*run_id).ok());  // the run only, as RunSession does
  tracer_->begin(*call_id);
  int status = run_in_cgroup(call, [] {
    ::execl("/bin/true", "true", static_cast<char*>(nullptr));
    ::_exit(92);
  });
  TracedActivity a = tracer_->end(*call_id);
  tracer_->unwatch(*run_id);
  ::rmdir(call.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  ASSERT_EQ(a.execs.size(), 1u) << to_json(a).dump();
  EXPECT_EQ(a.execs[0].path, "/bin/true");
}

}  // namespace
}  // namespace sandgate::ebpf
