// Boundary in time: what a run leaves behind. persist.plant writes a marker to every place a
// run could persist into and leaves a detached process; persist.find (in a fresh run, after
// the first one was destroyed) looks for every one of them. Writes to .git/hooks and
// .git/config count as a persistence vector even though they stay inside the workspace: the
// next `git` on the host runs them.
//
// Targets, with MARKER the suite's marker:
//   WORKSPACE/.sandgate-persist-MARKER, /tmp/sandgate-persist-MARKER,
//   /var/tmp/sandgate-persist-MARKER                          (always)
//   HOME/.sandgate-persist-MARKER, and the line "# sandgate-persist MARKER" appended to
//   HOME/.bashrc and HOME/.profile                            (HOME: see home_dir())
//   /var/spool/cron/crontabs/sandgate-persist-MARKER and /etc/cron.d/sandgate-persist-MARKER,
//   holding only that comment line                            (only when sandboxed(), below)
//   WORKSPACE/.git/hooks/post-checkout (a hook that does nothing but carry the line) and the
//   line appended to WORKSPACE/.git/config
//   a detached process: setsid + double fork, exec of this binary as
//   `sandgate-probe linger MARKER SECONDS` (at most 120 s)
// Natively these must never touch the real /root/.bashrc or crontab: HOME is the `home`
// parameter, or $HOME only when sandboxed(); crontabs only when sandboxed(). `sandgate-probe
// cleanup` removes every marker (and SIGTERMs the linger processes carrying it).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "probes/catalogue.h"
#include "probes/probe_util.h"

namespace sandgate::probes {
namespace {

using namespace util;

constexpr long long kDefaultLingerS = 60;
constexpr long long kMaxLingerS = 120;

// Provably not the host's mount namespace: only then may $HOME and the crontabs be planted.
bool sandboxed(const Params& p) {
  auto host = p.number("host_mntns");
  unsigned long long own = ns_inode("mnt");
  return host && own != 0 && own != static_cast<unsigned long long>(*host);
}

std::optional<std::string> home_dir(const Params& p) {
  if (auto h = p.get("home"); h && !h->empty()) return h;
  if (sandboxed(p)) {
    if (const char* env = std::getenv("HOME"); env && *env) return std::string(env);
  }
  return std::nullopt;
}

std::string marker_line(const std::string& m) { return "# sandgate-persist " + m; }

enum class Kind { kFile, kAppendLine, kHook };
struct Target {
  std::string name;  // evidence key
  std::string path;
  Kind kind;
};

std::vector<Target> targets(const Params& p, const std::string& m, Json& skipped) {
  std::string ws = workspace(p);
  std::vector<Target> t = {
      {"workspace", ws + "/.sandgate-persist-" + m, Kind::kFile},
      {"tmp", "/tmp/sandgate-persist-" + m, Kind::kFile},
      {"var_tmp", "/var/tmp/sandgate-persist-" + m, Kind::kFile},
      {"git_hook", ws + "/.git/hooks/post-checkout", Kind::kHook},
      {"git_config", ws + "/.git/config", Kind::kAppendLine},
  };
  if (auto home = home_dir(p)) {
    t.push_back({"home", *home + "/.sandgate-persist-" + m, Kind::kFile});
    t.push_back({"bashrc", *home + "/.bashrc", Kind::kAppendLine});
    t.push_back({"profile", *home + "/.profile", Kind::kAppendLine});
  } else {
    skipped["home"] = "no home parameter, and not provably sandboxed (host_mntns)";
  }
  if (sandboxed(p)) {
    t.push_back({"crontab", "/var/spool/cron/crontabs/sandgate-persist-" + m, Kind::kFile});
    t.push_back({"cron_d", "/etc/cron.d/sandgate-persist-" + m, Kind::kFile});
  } else {
    skipped["crontab"] = "not provably sandboxed (host_mntns): the host's crontabs stay untouched";
  }
  return t;
}

int append_line(const std::string& path, const std::string& line, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, mode);
  if (fd < 0) return errno;
  std::string text = line + "\n";
  int err = ::write(fd, text.data(), text.size()) < 0 ? errno : 0;
  ::close(fd);
  return err;
}

int plant_one(const Target& t, const std::string& m) {
  switch (t.kind) {
    case Kind::kFile: {
      int fd = ::open(t.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) return errno;
      std::string text = marker_line(m) + "\n";
      int err = ::write(fd, text.data(), text.size()) < 0 ? errno : 0;
      ::close(fd);
      return err;
    }
    case Kind::kAppendLine: {
      std::string dir = t.path.substr(0, t.path.rfind('/'));
      ::mkdir(dir.c_str(), 0755);  // .git may not exist yet
      return append_line(t.path, marker_line(m), 0644);
    }
    case Kind::kHook: {
      std::string hooks = t.path.substr(0, t.path.rfind('/'));
      ::mkdir(hooks.substr(0, hooks.rfind('/')).c_str(), 0755);
      ::mkdir(hooks.c_str(), 0755);
      bool existed = ::access(t.path.c_str(), F_OK) == 0;
      if (!existed) {
        int err = append_line(t.path, "#!/bin/sh", 0755);
        if (err) return err;
      }
      return append_line(t.path, marker_line(m), 0755);
    }
  }
  return EINVAL;
}

bool has_marker(const std::string& path, const std::string& m) {
  FileRead r = read_prefix(path, 1 << 20);
  return r.err == 0 && r.data.find(marker_line(m)) != std::string::npos;
}

std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "/proc/self/exe";
}

// setsid + double fork: the grandchild is re-parented away from the run's process tree and
// execs `sandgate-probe linger MARKER SECONDS`. Returns its pid (as seen here) or -errno.
pid_t leave_detached_process(const std::string& m, long long seconds) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return -errno;
  std::string exe = self_exe(), secs = std::to_string(seconds);
  pid_t child = ::fork();
  if (child < 0) {
    int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return -err;
  }
  if (child == 0) {
    ::setsid();
    pid_t grandchild = ::fork();
    if (grandchild == 0) {
      // Let go of the call's stdio, or the call would wait for this process's EOF.
      int null = ::open("/dev/null", O_RDWR);
      if (null >= 0) {
        ::dup2(null, 0);
        ::dup2(null, 1);
        ::dup2(null, 2);
      }
      char* argv[] = {const_cast<char*>("sandgate-probe"), const_cast<char*>("linger"),
                      const_cast<char*>(m.c_str()), const_cast<char*>(secs.c_str()), nullptr};
      ::execv(exe.c_str(), argv);
      ::_exit(127);
    }
    pid_t sent = grandchild < 0 ? -errno : grandchild;
    (void)::write(fds[1], &sent, sizeof sent);
    ::_exit(0);
  }
  ::close(fds[1]);
  pid_t grandchild = -EIO;
  if (::read(fds[0], &grandchild, sizeof grandchild) != sizeof grandchild) grandchild = -EIO;
  ::close(fds[0]);
  ::waitpid(child, nullptr, 0);
  return grandchild;
}

// Processes whose argv is exactly [..., "linger", MARKER, SECONDS].
std::vector<pid_t> linger_processes(const std::string& m) {
  std::vector<pid_t> out;
  for (pid_t pid : proc_pids()) {
    if (pid == ::getpid()) continue;
    FileRead r = read_prefix("/proc/" + std::to_string(pid) + "/cmdline", 4096);
    if (r.err) continue;
    std::vector<std::string> argv;
    std::string cur;
    for (char c : r.data) {
      if (c == 0) {
        argv.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    if (argv.size() == 4 && argv[1] == "linger" && argv[2] == m) out.push_back(pid);
  }
  return out;
}

ProbeReport plant_markers(const Params& p) {
  std::string attempt = "plant persistence markers and leave a detached process";
  auto m = marker(p);
  if (!m) return missing_param(attempt, "marker");
  Json skipped = Json::object(), planted = Json::object();
  bool any = false;
  for (const auto& t : targets(p, *m, skipped)) {
    int err = plant_one(t, *m);
    planted[t.name] = {{"path", t.path}, {"write", outcome(err)}};
    any = any || err == 0;
  }
  long long seconds = p.number_or("linger_s", kDefaultLingerS, kMaxLingerS);
  pid_t linger = leave_detached_process(*m, seconds);
  planted["detached_process"] = {{"pid", linger > 0 ? linger : 0},
                                 {"start", outcome(linger > 0 ? 0 : -linger)},
                                 {"seconds", seconds}};
  any = any || linger > 0;
  Json ev = {{"planted", planted}, {"skipped", skipped}};
  if (any) return reached(attempt, ev);
  return failed(attempt, EPERM, ev, "nothing could be planted");
}

ProbeReport find(const Params& p) {
  std::string attempt = "look for every persistence marker and the detached process";
  auto m = marker(p);
  if (!m) return missing_param(attempt, "marker");
  Json skipped = Json::object(), found = Json::array(), absent = Json::array();
  for (const auto& t : targets(p, *m, skipped)) {
    if (has_marker(t.path, *m)) {
      found.push_back({{"target", t.name}, {"path", t.path}});
    } else {
      absent.push_back(t.name);
    }
  }
  auto lingering = linger_processes(*m);
  if (!lingering.empty())
    found.push_back({{"target", "detached_process"}, {"pids", lingering}});
  else
    absent.push_back("detached_process");
  Json ev = {{"found", found}, {"absent", absent}, {"skipped", skipped}};
  if (!found.empty()) return reached(attempt, ev);
  return failed(attempt, ENOENT, ev, "no marker of an earlier run is visible");
}

// Removes the marker line from a file; deletes the file when nothing else (but a bare
// "#!/bin/sh" this probe wrote) remains.
int remove_marker_line(const std::string& path, const std::string& m) {
  FileRead r = read_prefix(path, 1 << 20);
  if (r.err) return r.err;
  std::istringstream in(r.data);
  std::string line, kept;
  bool removed = false;
  while (std::getline(in, line)) {
    if (line == marker_line(m)) {
      removed = true;
      continue;
    }
    kept += line + "\n";
  }
  if (!removed) return ENOENT;
  if (kept.empty() || kept == "#!/bin/sh\n") return ::unlink(path.c_str()) == 0 ? 0 : errno;
  int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = ::write(fd, kept.data(), kept.size()) < 0 ? errno : 0;
  ::close(fd);
  return err;
}

}  // namespace

Json cleanup_markers(const Params& p) {
  auto m = marker(p);
  if (!m) return {{"error", "needs --param marker"}};
  Json skipped = Json::object(), removed = Json::object();
  std::string ws = workspace(p);
  for (const auto& t : targets(p, *m, skipped)) {
    if (!has_marker(t.path, *m)) continue;
    int err = t.kind == Kind::kFile ? (::unlink(t.path.c_str()) == 0 ? 0 : errno)
                                    : remove_marker_line(t.path, *m);
    removed[t.name] = outcome(err);
  }
  // The directories plant may have made, only if now empty.
  ::rmdir((ws + "/.git/hooks").c_str());
  ::rmdir((ws + "/.git").c_str());
  Json signalled = Json::array();
  for (pid_t pid : linger_processes(*m)) {
    if (::kill(pid, SIGTERM) == 0) signalled.push_back(pid);
  }
  return {{"marker", *m}, {"removed", removed}, {"signalled", signalled}, {"skipped", skipped}};
}

// The secret of the run destroyed before this one, by the host path it had: gone with its run.
ProbeReport secret_after(const Params& p) {
  return read_other_secret(p, "the destroyed run's secret at its host path");
}

Status register_persist_probes(Catalogue& c) {
  SG_TRY(c.add({"persist.plant",
                "write persistence markers and leave a detached process",
                {"marker", "workspace", "home", "host_mntns", "linger_s"},
                plant_markers,
                true}));
  SG_TRY(c.add({"persist.find",
                "find markers and processes an earlier run left",
                {"marker", "workspace", "home", "host_mntns"},
                find}));
  SG_TRY(c.add({"persist.secret",
                "read the destroyed run's secret (--secret) by its host path",
                {"marker", "other_secrets"},
                secret_after}));
  return {};
}

}  // namespace sandgate::probes
