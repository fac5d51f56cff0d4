// A fixture for tests that run the real `sandgate` binary: the provider fixture's private state
// and work directories passed through the environment, a cgroup root of the test's own, and
// checks that nothing is left behind.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/defer.h"
#include "core/fd.h"
#include "core/files.h"
#include "core/json.h"
#include "core/process.h"
#include "tests/support/cgroup_dirs.h"
#include "tests/support/provider_fixture.h"

namespace sandgate::testing {

class CliTest : public ProviderTest {
 protected:
  void SetUp() override {
    ProviderTest::SetUp();
    ::setenv("SANDGATE_STATE_DIR", options_.paths.state_dir.c_str(), 1);
    ::setenv("SANDGATE_WORK_DIR", options_.paths.work_dir.c_str(), 1);
    // Never the real "sandgate" cgroup tree.
    cgroup_root_ = "sandgate-test-" + std::to_string(::getpid());
    ::setenv("SANDGATE_CGROUP_ROOT", cgroup_root_.c_str(), 1);
  }
  void TearDown() override {
    // A test that stopped at a failed ASSERT can leave a server's runs (killed with the test's
    // ChildProcess): a failure, and then collected as after any crash, so that one failing
    // test does not leave supervisors, mounts and cgroups on the machine.
    if (count_entries(options_.paths.state_dir + "/runs") > 0) {
      ADD_FAILURE() << "a run record was left; collecting it with `sandgate gc`";
      auto gc = sandgate({"gc"});
      EXPECT_EQ(gc.status.shell_code(), 0) << gc.output;
    }
    ::unsetenv("SANDGATE_STATE_DIR");
    ::unsetenv("SANDGATE_WORK_DIR");
    ::unsetenv("SANDGATE_CGROUP_ROOT");
    expect_no_cgroup_left(cgroup_root_);  // every hierarchy of this host's layout
    ProviderTest::TearDown();             // checks the work directory is empty, wherever it is
    if (!tmpfs_dir_.empty()) (void)remove_tree(tmpfs_dir_);
  }
  // Moves the work directory (where workspaces live) to tmpfs, for the tests that make
  // 100,000-level trees: this machine's ext4 is mounted with `discard`, so each rmdir waits
  // for the device (~2 ms, 200 s for such a tree whatever removes it). Where /dev/shm is not
  // tmpfs, the work directory stays where it was: slower, the same test.
  void use_tmpfs_work_dir() {
    struct statfs fs;
    if (::statfs("/dev/shm", &fs) != 0 || fs.f_type != TMPFS_MAGIC) return;
    char tmpl[] = "/dev/shm/sgtest-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmpfs_dir_ = tmpl;
    ::chmod(tmpfs_dir_.c_str(), 0711);
    options_.paths.work_dir = tmpfs_dir_ + "/work";
    ::setenv("SANDGATE_WORK_DIR", options_.paths.work_dir.c_str(), 1);
  }
  std::string tmpfs_dir_;
  CommandResult sandgate(std::vector<std::string> args,
                         Duration timeout = std::chrono::seconds(120)) {
    args.insert(args.begin(), SANDGATE_BINARY);
    auto r = run_command(args, timeout, 8 << 20);
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.ok() ? *r : CommandResult{};
  }
  // `sandgate serve --socket PATH [extra...]`, once its socket exists (a failure is recorded; the
  // caller checks the result).
  Result<ChildProcess> serve_on(const std::string& path, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {SANDGATE_BINARY, "serve", "--socket", path};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto server = spawn(argv);
    if (!server.ok()) return std::move(server).error();
    for (int i = 0; i < 500 && ::access(path.c_str(), F_OK) != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (::access(path.c_str(), F_OK) != 0) return logic_error("serve", "no socket after 5 s", path);
    return server;
  }
  // A client of `serve --socket PATH`: one JSON request per line, its reply (null when the
  // server closed the connection).
  struct ServeClient {
    UniqueFd fd;
    std::string buffer;
    bool connect(const std::string& path) {
      fd = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      struct sockaddr_un addr = {};
      addr.sun_family = AF_UNIX;
      std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
      return ::connect(fd.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof addr) == 0;
    }
    Json ask(const Json& request) {
      EXPECT_TRUE(write_all(fd.get(), request.dump() + "\n").ok());
      return next();
    }
    // The next reply, without sending anything (a reply to a request sent before).
    Json next() {
      char chunk[65536];
      size_t nl;
      while ((nl = buffer.find('\n')) == std::string::npos) {
        ssize_t n = ::read(fd.get(), chunk, sizeof chunk);
        if (n <= 0) return Json();
        buffer.append(chunk, static_cast<size_t>(n));
      }
      auto j = parse_json(buffer.substr(0, nl), "reply");
      buffer.erase(0, nl + 1);
      return j.ok() ? *j : Json();
    }
  };
  // Waits until a run has recorded its supervisor process; returns the record's JSON.
  Json wait_for_running_record() {
    for (int i = 0; i < 500; ++i) {
      std::string dir = options_.paths.state_dir + "/runs";
      DIR* d = ::opendir(dir.c_str());
      while (struct dirent* e = d ? ::readdir(d) : nullptr) {
        std::string n = e->d_name;
        if (!n.ends_with(".json")) continue;
        auto j = read_json_file(dir + "/" + n);
        // The environment's record, once its supervisor exists (the controller keeps a record
        // of its own for the run's cgroups).
        if (j.ok() && supervisor_pid(*j) > 0) {
          ::closedir(d);
          return *j;
        }
      }
      if (d) ::closedir(d);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "no run record with a process appeared";
    return Json::object();
  }
  std::string cgroup_root_;
  static pid_t supervisor_pid(const Json& record) {
    for (const auto& r : record.at("resources"))
      // The supervisor's record names no path; a helper's does (a run's /proc views server
      // names its mount point, and is recorded first).
      if (r.at("kind") == "process" && r.value("path", "").empty()) return r.at("pid").get<pid_t>();
    return 0;
  }
  // A name no other process carries: the command gives it to its daemon as an argument, and
  // the host finds the daemon by it in /proc, whatever pid namespace the daemon is in (inside
  // one, $$ or $! name a pid the host does not know).
  std::string daemon_token() {
    return "sgtest-daemon-" + std::to_string(::getpid()) + "-" + std::to_string(++daemon_serial_);
  }
  // A shell command that starts a daemon (its own session, out of the call's process group)
  // carrying `token`: `sh -c SCRIPT TOKEN` makes TOKEN the shell's $0, a whole argument of its
  // command line, and the loop keeps that shell alive (a last simple command would be exec'd).
  static std::string start_daemon(const std::string& token) {
    return "setsid sh -c 'while :; do sleep 1; done' " + token + " </dev/null >/dev/null 2>&1 &";
  }
  int daemon_serial_ = 0;

  // kill -9 of sandgate mid-run: the run's processes die with it (parent-death signal), and
  // `sandgate gc` removes what is left on disk. The command writes `started_marker` in its
  // workspace once it is under way; with a `daemon_token`, it has started a daemon carrying it
  // (start_daemon), which must be found on the host before the kill and be gone after.
  // `before_kill` (optional) checks, with the run directory, what the crash will leave.
  void crash_then_gc(const std::vector<std::string>& exec_args, const std::string& started_marker,
                     const std::string& daemon_token = {},
                     const std::function<void(const std::string& run_dir)>& before_kill = {}) {
    std::vector<std::string> argv = {SANDGATE_BINARY, "exec"};
    argv.insert(argv.end(), exec_args.begin(), exec_args.end());
    auto child = spawn(argv);
    ASSERT_TRUE(child.ok()) << child.error().message();
    // A check that gives up before the kill and gc below must not leave the run behind.
    bool collected = false;
    Defer collect_anyway([&] {
      if (collected) return;
      child->kill_and_reap();
      (void)sandgate({"gc"});
    });
    Json record = wait_for_running_record();
    pid_t sup = supervisor_pid(record);
    std::string run_dir = options_.paths.work_dir + "/" + record.value("run_id", "?");
    // Give the command time to start (and to start its daemon).
    std::string marker_file = run_dir + "/workspace/" + started_marker;
    for (int i = 0; i < 500 && ::access(marker_file.c_str(), F_OK) != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_EQ(::access(marker_file.c_str(), F_OK), 0) << "the command never started";
    pid_t daemon = 0;
    if (!daemon_token.empty()) {
      // The daemon's own forks (each `sleep`) carry the token until they exec: the daemon is
      // the one whose parent does not. One scan of /proc is not a snapshot: it can pass the
      // daemon's pid while that process still execs its way to the token (it is the command's
      // forked subshell, then setsid, then sh) and reach the pid of the daemon's first fork
      // after it has the token, and that fork alone looks topmost. So the same single pid must
      // come out of two scans 20 ms apart (a fork execs `sleep` within that, and loses the token).
      std::set<pid_t> found, again;
      for (int i = 0; i < 500; ++i) {
        found = topmost(pids_with_argument(daemon_token));
        if (found.size() == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          again = topmost(pids_with_argument(daemon_token));
          if (again == found) break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      // Not found, the survival check below would prove nothing.
      ASSERT_TRUE(found.size() == 1 && again == found)
          << "no single process carries " << daemon_token
          << " in /proc in two scans: the command's daemon was not found";
      daemon = *found.begin();
      // Inside a pid namespace of its own, the run's daemon is in the supervisor's.
      if (!same_pid_namespace(sup, ::getpid())) {
        EXPECT_TRUE(pids_in_pidns_of(sup).count(daemon))
            << "daemon " << daemon << " is not in the run's pid namespace";
      }
    }
    // Still the daemon right before the kill (not a process that went away by itself).
    if (daemon > 0) {
      ASSERT_TRUE(pids_with_argument(daemon_token).count(daemon))
          << "daemon " << daemon << " went away by itself";
    }
    if (before_kill) before_kill(run_dir);
    ASSERT_TRUE(child->signal(SIGKILL).ok());
    ASSERT_TRUE(child->wait().ok());
    EXPECT_EQ(::access(run_dir.c_str(), F_OK), 0)
        << "nothing was left to collect; the test proves nothing";

    auto gc = sandgate({"gc"});
    collected = true;
    EXPECT_EQ(gc.status.shell_code(), 0) << gc.output;
    // Two records: the environment's and the controller's (the run's cgroups).
    EXPECT_NE(gc.output.find("2 run record(s), 2 removed"), std::string::npos) << gc.output;
    EXPECT_NE(::access(run_dir.c_str(), F_OK), 0) << "gc left the run directory";
    auto daemon_alive = [&] {
      return daemon > 0 && (process_exists(daemon) || !pids_with_argument(daemon_token).empty());
    };
    for (int i = 0; i < 200 && (process_exists(sup) || daemon_alive()); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_FALSE(process_exists(sup)) << "supervisor " << sup << " survived";
    if (daemon > 0) {
      EXPECT_FALSE(daemon_alive()) << "daemon " << daemon << " (" << daemon_token << ") survived";
    }
  }
};

}  // namespace sandgate::testing
