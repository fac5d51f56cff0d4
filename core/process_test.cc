#include "core/process.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>

#include "core/defer.h"
#include "core/files.h"
#include "core/test_temp_dir.h"

namespace sandgate {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

bool proc_exists(pid_t pid) {
  struct stat st;
  return ::stat(("/proc/" + std::to_string(pid)).c_str(), &st) == 0;
}

// Neither a live process nor a zombie of ours any more.
bool fully_gone(pid_t pid) {
  int status;
  return ::waitpid(pid, &status, WNOHANG) < 0 && errno == ECHILD && !proc_exists(pid);
}

pid_t beyond_pid_max() {
  auto text = read_file("/proc/sys/kernel/pid_max");
  EXPECT_TRUE(text.ok());
  return text.ok() ? static_cast<pid_t>(std::stol(*text) + 1) : 4194304 + 1;
}

// Field 22 of a stat line, parsed independently of the code under test.
unsigned long long start_time_field(const std::string& stat) {
  std::istringstream in(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) in >> field;
  return std::stoull(field);
}

// PATH as the test wants it for one scope: an inherited PATH with an unreadable directory
// (/root/... when not root) turns execvp's ENOENT into EACCES.
class ScopedPath {
 public:
  explicit ScopedPath(const char* value) {
    if (const char* old = std::getenv("PATH")) old_ = old;
    ::setenv("PATH", value, 1);
  }
  ~ScopedPath() { ::setenv("PATH", old_.c_str(), 1); }

 private:
  std::string old_;
};

ChildProcess must_spawn(const std::vector<std::string>& argv) {
  auto c = spawn(argv);
  EXPECT_TRUE(c.ok()) << c.error().message();
  return c.ok() ? std::move(c).value() : ChildProcess();
}

// --- ExitStatus ---

TEST(ExitStatus, FromWaitStatusAndDescribe) {
  ExitStatus ok = ExitStatus::from_wait_status(0);
  EXPECT_TRUE(ok.exited);
  EXPECT_EQ(ok.code, 0);
  EXPECT_EQ(ok.describe(), "exit 0");
  EXPECT_EQ(ok.shell_code(), 0);

  ExitStatus three = ExitStatus::from_wait_status(3 << 8);
  EXPECT_TRUE(three.exited);
  EXPECT_EQ(three.code, 3);
  EXPECT_EQ(three.describe(), "exit 3");
  EXPECT_EQ(three.shell_code(), 3);

  ExitStatus killed = ExitStatus::from_wait_status(SIGKILL);
  EXPECT_FALSE(killed.exited);
  EXPECT_EQ(killed.signal, SIGKILL);
  EXPECT_EQ(killed.describe(), "signal 9 (SIGKILL)");
  EXPECT_EQ(killed.shell_code(), 137);

  ExitStatus cored = ExitStatus::from_wait_status(SIGSEGV | 0x80);
  EXPECT_FALSE(cored.exited);
  EXPECT_EQ(cored.signal, SIGSEGV);
  EXPECT_EQ(cored.describe(), "signal 11 (SIGSEGV)");
}

// --- spawn and wait ---

TEST(Spawn, ExitCodes) {
  for (int code : {0, 1, 7, 255}) {
    ChildProcess c = must_spawn({"sh", "-c", "exit " + std::to_string(code)});
    ASSERT_TRUE(c.running());
    EXPECT_GE(c.pidfd(), 0);
    auto st = c.wait();
    ASSERT_TRUE(st.ok()) << st.error().message();
    EXPECT_TRUE(st->exited);
    EXPECT_EQ(st->code, code);
    EXPECT_FALSE(c.running());
  }
}

TEST(MergeEnv, OverridesByNameAndNotByPrefix) {
  auto merged = merge_env({"A=1", "B=2", "AB=3", "A=dup"}, {"A=9", "C=4"});
  EXPECT_EQ(merged, (std::vector<std::string>{"B=2", "AB=3", "A=9", "C=4"}));
}

TEST(Spawn, EnvSetReplacesTheInheritedValue) {
  ::setenv("SANDGATE_SPAWN_T", "inherited", 1);
  auto c = spawn({"sh", "-c", "test \"$SANDGATE_SPAWN_T\" = set && test \"$HOME\" = \"$H0\""},
                 {.env_set = {"SANDGATE_SPAWN_T=set", "H0=" + std::string(std::getenv("HOME"))}});
  ::unsetenv("SANDGATE_SPAWN_T");
  ASSERT_TRUE(c.ok()) << c.error().message();
  auto st = c->wait();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->code, 0) << "the set value replaced the inherited one and the rest passed";
}

TEST(Spawn, AWholeEnvironmentIsAllTheChildSeesWithEnvSetOnTop) {
  auto c = spawn({"/bin/sh", "-c", "test \"$A\" = 1 && test \"$B\" = 3 && test -z \"$HOME\""},
                 {.env_set = {"B=3"}, .env = std::vector<std::string>{"A=1", "B=2", "B=2b"}});
  ASSERT_TRUE(c.ok()) << c.error().message();
  auto st = c->wait();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->code, 0) << "A kept, both B= replaced by env_set, nothing of sandgate's (HOME)";
}

TEST(Spawn, NewProcessGroupOnlyWhenAsked) {
  for (bool own : {false, true}) {
    auto c = spawn({"sleep", "5"}, {.new_process_group = own});
    ASSERT_TRUE(c.ok()) << c.error().message();
    EXPECT_EQ(::getpgid(c->pid()) == c->pid(), own);
    c->kill_and_reap();
  }
}

TEST(Spawn, SearchesPath) {
  ChildProcess c = must_spawn({"true"});
  auto st = c.wait();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->describe(), "exit 0");
}

TEST(Spawn, KilledBySignal) {
  ChildProcess c = must_spawn({"sh", "-c", "kill -TERM $$; sleep 5"});
  auto st = c.wait();
  ASSERT_TRUE(st.ok());
  EXPECT_FALSE(st->exited);
  EXPECT_EQ(st->signal, SIGTERM);
  EXPECT_EQ(st->describe(), "signal 15 (SIGTERM)");
}

TEST(Spawn, SignalThroughThePidfd) {
  ChildProcess c = must_spawn({"sleep", "30"});
  ASSERT_TRUE(c.signal(SIGUSR1).ok());
  auto st = c.wait();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->signal, SIGUSR1);
}

TEST(Spawn, MissingBinaryIsEnoent) {
  ScopedPath path("/usr/bin:/bin");
  auto c = spawn({"sandgate-no-such-binary-anywhere"});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().err, ENOENT);
  EXPECT_EQ(c.error().step, "exec");
  EXPECT_EQ(c.error().path, "sandgate-no-such-binary-anywhere");

  auto abs = spawn({"/nonexistent/bin/x"});
  ASSERT_FALSE(abs.ok());
  EXPECT_EQ(abs.error().err, ENOENT);
}

TEST(Spawn, NotExecutableIsEacces) {
  testing::TempDir tmp;
  std::string path = tmp / "script";
  ASSERT_TRUE(write_file(path, "#!/bin/sh\n", O_WRONLY | O_CREAT, 0644).ok());
  auto c = spawn({path});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().err, EACCES);
}

TEST(Spawn, EmptyArgvIsAnError) {
  auto c = spawn({});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().err, 0);
}

TEST(Spawn, ChildStartsWithAnEmptySignalMask) {
  // sandgate blocks SIGINT/SIGTERM for its signalfd; children must not inherit that.
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &block, &old), 0);
  Defer restore([&] { ::pthread_sigmask(SIG_SETMASK, &old, nullptr); });
  ChildProcess c = must_spawn({"sh", "-c", "kill -TERM $$; exit 0"});
  auto st = c.wait();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->signal, SIGTERM) << st->describe();
}

TEST(ChildProcess, WaitForTimesOutThenSucceeds) {
  ChildProcess c = must_spawn({"sleep", "30"});
  auto t0 = std::chrono::steady_clock::now();
  auto r = c.wait_for(milliseconds(100));
  auto elapsed = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  EXPECT_GE(elapsed, milliseconds(90));
  EXPECT_LT(elapsed, seconds(5));
  EXPECT_TRUE(c.running());
  ASSERT_TRUE(c.signal(SIGKILL).ok());
  auto done = c.wait_for(seconds(10));
  ASSERT_TRUE(done.ok());
  ASSERT_TRUE(done->has_value());
  EXPECT_EQ((*done)->signal, SIGKILL);
  EXPECT_FALSE(c.running());
}

TEST(ChildProcess, WaitWithoutAProcessIsAnError) {
  ChildProcess c;
  EXPECT_FALSE(c.wait().ok());
  EXPECT_FALSE(c.wait_for(milliseconds(1)).ok());
  EXPECT_TRUE(c.signal(SIGKILL).ok());  // nothing to signal
  c.kill_and_reap();                    // no-op
}

TEST(ChildProcess, SignalAfterExitIsNotAnError) {
  ChildProcess c = must_spawn({"true"});
  // Let it exit but leave it unreaped (WNOWAIT): signalling the zombie is not an error.
  siginfo_t info = {};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(c.pid()), &info, WEXITED | WNOWAIT), 0);
  EXPECT_TRUE(c.signal(SIGTERM).ok());
  auto st = c.wait();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->code, 0);
}

TEST(ChildProcess, DestructorKillsAndReaps) {
  pid_t pid;
  {
    ChildProcess c = must_spawn({"sleep", "30"});
    pid = c.pid();
    ASSERT_GT(pid, 0);
    ASSERT_TRUE(proc_exists(pid));
  }
  EXPECT_TRUE(fully_gone(pid));
}

TEST(ChildProcess, KillAndReapTwiceIsSafe) {
  ChildProcess c = must_spawn({"sleep", "30"});
  pid_t pid = c.pid();
  c.kill_and_reap();
  EXPECT_FALSE(c.running());
  EXPECT_TRUE(fully_gone(pid));
  c.kill_and_reap();
}

TEST(ChildProcess, MoveAssignmentKillsTheOldChild) {
  ChildProcess a = must_spawn({"sleep", "30"});
  ChildProcess b = must_spawn({"sleep", "30"});
  pid_t old_b = b.pid();
  pid_t pid_a = a.pid();
  b = std::move(a);
  EXPECT_TRUE(fully_gone(old_b));
  EXPECT_EQ(b.pid(), pid_a);
  EXPECT_FALSE(a.running());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(proc_exists(pid_a));
  ChildProcess c(std::move(b));
  EXPECT_EQ(c.pid(), pid_a);
  EXPECT_FALSE(b.running());  // NOLINT(bugprone-use-after-move)
}

TEST(ChildProcess, ReleaseKeepsTheProcessRunning) {
  pid_t pid;
  {
    ChildProcess c = must_spawn({"sleep", "30"});
    pid = c.release();
    EXPECT_FALSE(c.running());
  }
  Defer reap([&] {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  });
  EXPECT_EQ(::kill(pid, 0), 0);
  int status;
  EXPECT_EQ(::waitpid(pid, &status, WNOHANG), 0) << "still running, not reaped";
}

// --- run_command ---

TEST(RunCommand, CapturesStdoutAndStderrAndExitCode) {
  auto r = run_command({"sh", "-c", "echo out; echo err >&2; exit 3"}, seconds(30));
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_FALSE(r->timed_out);
  EXPECT_TRUE(r->status.exited);
  EXPECT_EQ(r->status.code, 3);
  EXPECT_EQ(r->output, "out\nerr\n");
}

TEST(RunCommand, StdinIsDevNull) {
  auto r = run_command({"sh", "-c", "cat; echo done"}, seconds(10));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->timed_out);
  EXPECT_EQ(r->output, "done\n");
}

TEST(RunCommand, OutputIsBounded) {
  auto r = run_command({"sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a; echo; exit 4"},
                       seconds(30), 1000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->output, std::string(1000, 'a'));
  EXPECT_EQ(r->status.code, 4) << "the rest is drained, so the command still finishes";
}

TEST(RunCommand, TimesOutAndKills) {
  auto t0 = std::chrono::steady_clock::now();
  auto r = run_command({"sh", "-c", "echo $$; exec sleep 10"}, milliseconds(300));
  auto elapsed = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_TRUE(r->timed_out);
  EXPECT_FALSE(r->status.exited);
  EXPECT_EQ(r->status.signal, SIGKILL);
  EXPECT_GE(elapsed, milliseconds(290));
  EXPECT_LT(elapsed, seconds(3));
  ASSERT_FALSE(r->output.empty());
  pid_t pid = static_cast<pid_t>(std::stol(r->output));
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(fully_gone(pid)) << "pid " << pid << " survived the timeout";
}

TEST(RunCommand, TimesOutEvenWhenTheCommandClosesItsOutput) {
  // The output pipe reaches EOF long before the command ends: the deadline still holds.
  auto t0 = std::chrono::steady_clock::now();
  auto r = run_command({"sh", "-c", "echo $$; exec sleep 10 >/dev/null 2>&1"}, milliseconds(300));
  auto elapsed = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->status.signal, SIGKILL);
  EXPECT_LT(elapsed, seconds(3));
  ASSERT_FALSE(r->output.empty());
  pid_t pid = static_cast<pid_t>(std::stol(r->output));
  EXPECT_TRUE(fully_gone(pid));
}

TEST(RunCommand, MissingBinaryIsEnoent) {
  ScopedPath path("/usr/bin:/bin");
  auto r = run_command({"sandgate-no-such-binary-anywhere"}, seconds(5));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ENOENT);
  EXPECT_THAT(r.error().message(), HasSubstr("sandgate-no-such-binary-anywhere"));
}

// --- process_start_time ---

TEST(ProcessStartTime, SelfMatchesProcStat) {
  auto stat = read_file("/proc/self/stat");
  ASSERT_TRUE(stat.ok());
  auto t = process_start_time("/proc", ::getpid());
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(*t, start_time_field(*stat));
  EXPECT_GT(*t, 0u);
}

TEST(ProcessStartTime, ChildDiffersFromSelfAndIsStable) {
  ChildProcess c = must_spawn({"sleep", "30"});
  auto a = process_start_time("/proc", c.pid());
  auto b = process_start_time("/proc", c.pid());
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a, b);
  auto stat = read_file("/proc/" + std::to_string(c.pid()) + "/stat");
  ASSERT_TRUE(stat.ok());
  EXPECT_EQ(*a, start_time_field(*stat));
}

TEST(ProcessStartTime, MissingPidIsNullopt) {
  EXPECT_FALSE(process_start_time("/proc", beyond_pid_max()).has_value());
  pid_t reaped;
  {
    ChildProcess c = must_spawn({"true"});
    reaped = c.pid();
    ASSERT_TRUE(c.wait().ok());
  }
  if (!proc_exists(reaped)) {
    EXPECT_FALSE(process_start_time("/proc", reaped).has_value());
  }
}

class FakeProcTest : public ::testing::Test {
 protected:
  void write_stat(pid_t pid, const std::string& content) {
    std::string dir = tmp_ / std::to_string(pid);
    ASSERT_TRUE(make_dirs(dir).ok());
    ASSERT_TRUE(write_file(dir + "/stat", content, O_WRONLY | O_CREAT | O_TRUNC).ok());
  }
  // A full 52-field stat line with `comm` and starttime (field 22) as given.
  static std::string stat_line(pid_t pid, const std::string& comm, unsigned long long start) {
    std::string s = std::to_string(pid) + " (" + comm + ") S";
    for (int f = 4; f <= 52; ++f)
      s += " " + (f == 22 ? std::to_string(start) : std::to_string(1000 + f));
    return s + "\n";
  }
  testing::TempDir tmp_;
};

TEST_F(FakeProcTest, CommWithSpacesAndParentheses) {
  write_stat(123, stat_line(123, "a b) c", 987654321ULL));
  auto t = process_start_time(tmp_.path(), 123);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(*t, 987654321ULL);
}

TEST_F(FakeProcTest, CommThatLooksLikeFields) {
  write_stat(7, stat_line(7, ") S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22", 42));
  auto t = process_start_time(tmp_.path(), 7);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(*t, 42u);
}

TEST_F(FakeProcTest, LargeStartTime) {
  write_stat(5, stat_line(5, "x", 18446744073709551000ULL));
  EXPECT_EQ(process_start_time(tmp_.path(), 5), 18446744073709551000ULL);
}

TEST_F(FakeProcTest, TruncatedOrGarbledStatIsNullopt) {
  write_stat(8, "8 (short) S 1 2 3\n");
  EXPECT_FALSE(process_start_time(tmp_.path(), 8).has_value());
  write_stat(9, "9 (no closing paren S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20\n");
  EXPECT_FALSE(process_start_time(tmp_.path(), 9).has_value());
  write_stat(10, "10 (ends here)");
  EXPECT_FALSE(process_start_time(tmp_.path(), 10).has_value());
  std::string to_21 = "12 (x) S";
  for (int f = 4; f <= 21; ++f) to_21 += " " + std::to_string(f);
  write_stat(12, to_21 + " ");
  EXPECT_FALSE(process_start_time(tmp_.path(), 12).has_value());
  write_stat(11, "");
  EXPECT_FALSE(process_start_time(tmp_.path(), 11).has_value());
}

TEST_F(FakeProcTest, MissingPidIsNullopt) {
  EXPECT_FALSE(process_start_time(tmp_.path(), 123).has_value());
}

}  // namespace
}  // namespace sandgate
