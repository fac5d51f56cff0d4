// A fixture for tests that make real environments: a private state and work directory per
// test (removed afterwards, and checked to be empty of runs), a provider, and helpers that run
// commands and look at the host from outside.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/nsfs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/fd.h"
#include "core/files.h"
#include "core/id_ranges.h"
#include "core/json.h"
#include "core/process.h"
#include "providers/registry.h"
#include "tests/support/privileged.h"

namespace sandgate::testing {

// Host pids of every process whose pid namespace is the one `pid` is in (read from outside).
inline std::set<pid_t> pids_in_pidns_of(pid_t pid) {
  std::set<pid_t> out;
  char target[64] = {}, link[64] = {};
  std::string self = "/proc/" + std::to_string(pid) + "/ns/pid";
  if (::readlink(self.c_str(), target, sizeof target - 1) < 0) return out;
  DIR* d = ::opendir("/proc");
  while (struct dirent* e = d ? ::readdir(d) : nullptr) {
    pid_t p = static_cast<pid_t>(std::atoi(e->d_name));
    if (p <= 0) continue;
    std::string ns = "/proc/" + std::string(e->d_name) + "/ns/pid";
    std::fill(std::begin(link), std::end(link), 0);
    if (::readlink(ns.c_str(), link, sizeof link - 1) > 0 && std::string(link) == target) out.insert(p);
  }
  if (d) ::closedir(d);
  return out;
}

// Host pids of every process with `arg` as one whole argument of its command line (a process
// whose argument only contains it, such as the shell script that started it, is not one).
// Zombies have an empty command line and are not found.
inline std::set<pid_t> pids_with_argument(const std::string& arg) {
  std::set<pid_t> out;
  DIR* d = ::opendir("/proc");
  while (struct dirent* e = d ? ::readdir(d) : nullptr) {
    pid_t p = static_cast<pid_t>(std::atoi(e->d_name));
    if (p <= 0) continue;
    auto cmdline = read_file("/proc/" + std::string(e->d_name) + "/cmdline");
    if (!cmdline.ok()) continue;  // gone meanwhile
    for (size_t at = 0; at < cmdline->size();) {
      size_t end = cmdline->find('\0', at);
      if (end == std::string::npos) end = cmdline->size();
      if (cmdline->compare(at, end - at, arg) == 0) {
        out.insert(p);
        break;
      }
      at = end + 1;
    }
  }
  if (d) ::closedir(d);
  return out;
}

// The parent of `pid` (/proc/<pid>/stat, after the command name in parentheses); 0 if gone.
// A shell line that lists /etc/alternatives' links, one "name target" per line; and the host's
// own list by the same line, which a run's list must equal (its links are copied or cloned from
// the host's). "" with a test failure when the host's cannot be listed.
inline constexpr char kListAlternatives[] =
    "cd /etc/alternatives && for f in *; do [ -L \"$f\" ] && echo \"$f $(readlink \"$f\")\"; done";
inline std::string host_alternatives() {
  auto host = run_command({"/bin/sh", "-c", kListAlternatives}, std::chrono::seconds(30), 1 << 20);
  EXPECT_TRUE(host.ok()) << host.error().message();
  if (!host.ok()) return "";
  EXPECT_NE(host->output, "");
  return host->output;
}

inline pid_t parent_of(pid_t pid) {
  auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return 0;
  size_t close = stat->rfind(')');
  if (close == std::string::npos) return 0;
  int ppid = 0;
  char state = 0;
  if (std::sscanf(stat->c_str() + close + 1, " %c %d", &state, &ppid) != 2) return 0;
  return static_cast<pid_t>(ppid);
}

// The members of `pids` whose parent is not a member.
inline std::set<pid_t> topmost(const std::set<pid_t>& pids) {
  std::set<pid_t> out;
  for (pid_t p : pids)
    if (!pids.count(parent_of(p))) out.insert(p);
  return out;
}

inline bool same_pid_namespace(pid_t a, pid_t b) {
  char la[64] = {}, lb[64] = {};
  std::string pa = "/proc/" + std::to_string(a) + "/ns/pid",
              pb = "/proc/" + std::to_string(b) + "/ns/pid";
  if (::readlink(pa.c_str(), la, sizeof la - 1) < 0 ||
      ::readlink(pb.c_str(), lb, sizeof lb - 1) < 0)
    return false;
  return std::string(la) == lb;
}

// The pid of a run's /proc views server, from the run's record (the process recorded with
// the views' mount point as its path); 0 when the record names none.
inline pid_t recorded_proc_views_server(const std::string& state_dir, const std::string& run_id) {
  auto record = read_file(state_dir + "/runs/" + run_id + ".json");
  if (!record.ok()) return 0;
  auto j = parse_json(*record, "record");
  if (!j.ok() || !j->contains("resources")) return 0;
  for (const auto& res : (*j)["resources"])
    if (res.value("kind", "") == "process" && res.value("path", "").ends_with("/proc-views"))
      return res.value("pid", 0);
  return 0;
}

// The host uid that owns a process's user namespace (NS_GET_OWNER_UID), or -1.
inline long userns_owner(pid_t pid) {
  int fd = ::open(("/proc/" + std::to_string(pid) + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  uid_t owner = 0;
  long r = ::ioctl(fd, NS_GET_OWNER_UID, &owner);
  ::close(fd);
  return r == 0 ? static_cast<long>(owner) : -1;
}

inline bool process_exists(pid_t pid) {
  return pid > 0 && ::access(("/proc/" + std::to_string(pid)).c_str(), F_OK) == 0;
}

inline size_t count_entries(const std::string& dir) {
  size_t n = 0;
  DIR* d = ::opendir(dir.c_str());
  while (struct dirent* e = d ? ::readdir(d) : nullptr)
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") ++n;
  if (d) ::closedir(d);
  return n;
}

class ProviderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/var/tmp/sgtest-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmp_ = tmpl;
    ::chmod(tmp_.c_str(), 0711);
    options_.paths.state_dir = tmp_ + "/state";
    options_.paths.work_dir = tmp_ + "/work";
    options_.allow_unsafe_host = true;
    providers::register_builtin_providers(registry_);
  }
  void TearDown() override {
    // Nothing may be left by any run: no record, no run directory.
    EXPECT_EQ(count_entries(options_.paths.state_dir + "/runs"), 0u) << "a run record was left";
    EXPECT_EQ(count_entries(options_.paths.work_dir), 0u) << "a run directory was left";
    EXPECT_THAT(id_range_locks_of(options_.paths), ::testing::IsEmpty()) << "an id range was left";
    (void)remove_tree(tmp_);
  }

  std::unique_ptr<providers::Provider> provider(const std::string& name) {
    auto p = registry_.create(name, options_);
    EXPECT_TRUE(p.ok()) << p.error().message();
    return p.ok() ? std::move(p).value() : nullptr;
  }

  std::unique_ptr<providers::Environment> make_env(providers::Provider& p,
                                                    providers::EnvSpec spec = {}) {
    auto env = p.create(spec);
    EXPECT_TRUE(env.ok()) << env.error().message();
    return env.ok() ? std::move(env).value() : nullptr;
  }

  ExecResult run(providers::Environment& env, std::vector<std::string> argv) {
    providers::Call call;
    call.argv = std::move(argv);
    auto r = env.exec(call, {});
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.ok() ? std::move(r).value() : ExecResult{};
  }

  ExecResult sh(providers::Environment& env, const std::string& script) {
    return run(env, {"/bin/sh", "-c", script});
  }

  std::string tmp_;
  providers::ProviderOptions options_;
  providers::Registry registry_;
};

}  // namespace sandgate::testing
