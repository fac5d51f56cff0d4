#include "core/state.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include "core/fd.h"
#include "core/files.h"
#include "core/id_ranges.h"
#include "core/log.h"
#include "core/process.h"

namespace sandgate {

std::string to_string(Resource::Kind k) {
  switch (k) {
    case Resource::Kind::kDirectory: return "directory";
    case Resource::Kind::kProcess: return "process";
    case Resource::Kind::kMount: return "mount";
    case Resource::Kind::kCgroup: return "cgroup";
    case Resource::Kind::kCgroupParent: return "cgroup_parent";
    case Resource::Kind::kNetns: return "netns";
    case Resource::Kind::kContainer: return "container";
    case Resource::Kind::kIdRange: return "id_range";
    case Resource::Kind::kMarkedFile: return "marked_file";
    case Resource::Kind::kLoopDevice: return "loop_device";
  }
  return "unknown";
}

Json to_json(const Resource& r) {
  Json j = {{"kind", to_string(r.kind)}, {"path", r.path}};
  if (r.kind == Resource::Kind::kProcess) {
    j["pid"] = r.pid;
    j["start_time"] = r.start_time;
  }
  if (r.kind == Resource::Kind::kIdRange || r.kind == Resource::Kind::kMarkedFile ||
      r.kind == Resource::Kind::kLoopDevice)
    j["owner"] = r.owner;
  return j;
}

Result<Resource> resource_from_json(const Json& j) {
  Resource r;
  try {
    std::string kind = j.at("kind").get<std::string>();
    if (kind == "directory") r.kind = Resource::Kind::kDirectory;
    else if (kind == "process") r.kind = Resource::Kind::kProcess;
    else if (kind == "mount") r.kind = Resource::Kind::kMount;
    else if (kind == "cgroup") r.kind = Resource::Kind::kCgroup;
    else if (kind == "cgroup_parent") r.kind = Resource::Kind::kCgroupParent;
    else if (kind == "netns") r.kind = Resource::Kind::kNetns;
    else if (kind == "container") r.kind = Resource::Kind::kContainer;
    else if (kind == "id_range") r.kind = Resource::Kind::kIdRange;
    else if (kind == "marked_file") r.kind = Resource::Kind::kMarkedFile;
    else if (kind == "loop_device") r.kind = Resource::Kind::kLoopDevice;
    else return logic_error("read run record", "unknown resource kind '" + kind + "'");
    r.path = j.value("path", "");
    r.pid = j.value("pid", 0);
    r.start_time = j.value("start_time", 0ULL);
    r.owner = j.value("owner", "");
  } catch (const Json::exception& e) {
    return logic_error("read run record", e.what());
  }
  return r;
}

Status detach_loop_device(const HostPaths& paths, const std::string& device,
                          const std::string& image) {
  auto slash = device.rfind('/');
  std::string name = device.substr(slash == std::string::npos ? 0 : slash + 1);
  if (name.size() <= 4 || name.compare(0, 4, "loop") != 0 ||
      name.find_first_not_of("0123456789", 4) != std::string::npos || image.empty())
    return logic_error("detach loop device", "not a loop device with its image", device);
  // What the kernel says backs the device now; no file: the device is free (or gone).
  auto backing = read_file(paths.sys + "/block/" + name + "/loop/backing_file");
  if (!backing.ok()) return {};
  std::string file = *backing;
  while (!file.empty() && file.back() == '\n') file.pop_back();
  // d_path marks an unlinked file (the run directory went first after a crash).
  const std::string deleted = " (deleted)";
  if (file != image && file != image + deleted) return {};
  UniqueFd fd(::open(device.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return errno == ENOENT || errno == ENXIO ? Status{} : sys_error("open", device);
  // ENXIO: detached meanwhile (autoclear at the last close). A busy device is marked autoclear
  // and the call succeeds (drivers/block/loop.c loop_clr_fd).
  if (::ioctl(fd.get(), LOOP_CLR_FD, 0) != 0 && errno != ENXIO)
    return sys_error("LOOP_CLR_FD", device);
  return {};
}

Status remove_marked_file(const std::string& path, const std::string& marker) {
  if (marker.empty()) return logic_error("remove marked file", "the record names no marker", path);
  // O_NOFOLLOW | O_NONBLOCK: a symlink or a fifo put there since is not ours to open or wait on.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return {};
    return sys_error("open marked file", path);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return sys_error("fstat", path);
  if (!S_ISREG(st.st_mode))
    return logic_error("remove marked file", "not a regular file: left alone", path);
  std::string head(65536, '\0');
  ssize_t n = ::read(fd.get(), head.data(), head.size());
  if (n < 0) return sys_error("read marked file", path);
  head.resize(static_cast<size_t>(n));
  if (head.find(marker) == std::string::npos)
    return logic_error("remove marked file",
                       "does not carry the marker " + marker + ": not sandgate's, left alone",
                       path);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return sys_error("unlink", path);
  return {};
}

namespace {

int release_order(Resource::Kind k) {
  switch (k) {
    // First: `podman rm` stops the container through its runtime and removes its cgroups.
    case Resource::Kind::kContainer: return -1;
    case Resource::Kind::kProcess: return 0;
    case Resource::Kind::kMount: return 1;
    // After the mounts on it, before the directory that holds its image.
    case Resource::Kind::kLoopDevice: return 2;
    case Resource::Kind::kNetns: return 3;
    case Resource::Kind::kCgroup: return 4;
    case Resource::Kind::kCgroupParent: return 5;
    case Resource::Kind::kDirectory:
    case Resource::Kind::kMarkedFile: return 6;
    // Last: the ids may be given to another run only once nothing of this one holds them.
    case Resource::Kind::kIdRange:
      return 7;
  }
  return 6;
}

// A zombie has finished dying: only its parent's wait is missing, and that parent is gone or
// will reap it.
bool is_zombie(const HostPaths& paths, pid_t pid) {
  auto stat = read_file(paths.proc + "/" + std::to_string(pid) + "/stat", 4096);
  if (!stat.ok()) return true;
  auto close = stat->rfind(')');
  return close != std::string::npos && close + 2 < stat->size() && (*stat)[close + 2] == 'Z';
}

Status kill_recorded_process(const HostPaths& paths, const Resource& r) {
  auto now = process_start_time(paths.proc, r.pid);
  // Gone, or the pid now names another process: nothing of ours to kill.
  if (!now || *now != r.start_time) return {};
  if (is_zombie(paths, r.pid)) {
    // Exited already (signalled early, signal_recorded_process, or by itself): reaped here if
    // it is our child, else it is its parent's or init's to reap.
    int status;
    ::waitpid(r.pid, &status, WNOHANG);
    return {};
  }
  // A process that leads its own process group (record's driver, started in one of its own)
  // is killed with its group: what it started is ours too, and would otherwise outlive it
  // (the chaos test found record's driver's calls still running after gc). A group id cannot
  // be reused while any member lives, so -pid names only that group.
  const pid_t target = ::getpgid(r.pid) == r.pid ? -r.pid : r.pid;
  // A pidfd becomes readable as the process exits (pidfd_open(2), Linux 5.3): the wait below
  // ends when it does, instead of on the next 2 ms poll (most of a run's teardown was that
  // sleep). Opened before the signal and checked against the recorded start time, so it
  // names the recorded process.
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, r.pid, 0)));
  if (pidfd && process_start_time(paths.proc, r.pid) != r.start_time) return {};
  // SIGTERM first: a supervisor on the host uses it to kill its own descendants, which only it
  // can find. SIGKILL after a grace period.
  if (::kill(target, SIGTERM) != 0 && errno != ESRCH)
    return sys_error("kill", std::to_string(r.pid));
  if (pidfd) {
    struct pollfd p = {pidfd.get(), POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) {
      ::kill(target, SIGKILL);
      p.revents = 0;
      if (::poll(&p, 1, 1000) <= 0)
        return logic_error("kill", "process still present after SIGKILL", std::to_string(r.pid));
    }
    int status;
    ::waitpid(r.pid, &status, WNOHANG);  // ours: reaped here; else its parent's or init's
    if (target < 0) ::kill(target, SIGKILL);  // the rest of its group; ESRCH when none
    return {};
  }
  // It may not be our child (the owner crashed), so poll until it is gone.
  for (int i = 0; i < 1000; ++i) {
    if (i == 500) ::kill(target, SIGKILL);
    auto t = process_start_time(paths.proc, r.pid);
    if (!t || *t != r.start_time || is_zombie(paths, r.pid)) {
      if (target < 0) ::kill(target, SIGKILL);  // the rest of its group; ESRCH when none
      return {};
    }
    // A zombie whose parent is dead is reaped by init shortly; a zombie of ours is reaped here.
    int status;
    ::waitpid(r.pid, &status, WNOHANG);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return logic_error("kill", "process still present after SIGKILL", std::to_string(r.pid));
}

}  // namespace

void signal_recorded_process(const HostPaths& paths, const Resource& r, int sig) {
  if (r.kind != Resource::Kind::kProcess || r.pid <= 0) return;
  // Through a pidfd opened before the check: the signal reaches the process checked, even if
  // it exits and its pid is taken again in between.
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, r.pid, 0)));
  if (!pidfd) return;
  auto now = process_start_time(paths.proc, r.pid);
  if (!now || *now != r.start_time || is_zombie(paths, r.pid)) return;
  ::syscall(SYS_pidfd_send_signal, pidfd.get(), sig, nullptr, 0);
}

namespace {

// A container named in a record: removed with its runtime's state and cgroups. Gone already is
// fine (--ignore).
Status remove_container(const Resource& r) {
  if (r.path.empty() || r.path[0] == '-')
    return logic_error("remove container", "bad name", r.path);
  // Removed, then checked to be gone (a few times) before the record may be dropped: once,
  // under ctest, two runs left their containers behind (exited, not removed) with no error
  // seen; a race of `rm` with the cleanup conmon starts when pid 1 exits is suspected.
  // Two minutes in all, however the attempts go: a Podman stuck on its storage lock fails
  // the removal (and gc retries later) instead of holding the caller for many minutes.
  std::string last;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  auto left = [&] {
    return std::max<std::chrono::milliseconds>(
        std::chrono::seconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(
                                     deadline - std::chrono::steady_clock::now()));
  };
  for (int attempt = 0; attempt < 5 && std::chrono::steady_clock::now() < deadline; ++attempt) {
    auto res = run_command({"podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs", "rm",
                            "--force", "--ignore", "--time", "0", r.path},
                           left());
    if (!res.ok()) return std::move(res).error().context_add("remove container " + r.path);
    last = res->status.describe() + ": " + res->output;
    // rm names each container it removed: then it is gone. Anything else is checked.
    if (res->status.exited && res->status.code == 0 &&
        res->output.find(r.path) != std::string::npos)
      return {};
    auto exists = run_command({"podman", "container", "exists", r.path}, left());
    if (!exists.ok()) return std::move(exists).error().context_add("look for container " + r.path);
    // podman container exists: 0 it exists, 1 it does not.
    if (exists->status.exited && exists->status.code == 1) return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(100 << attempt));
  }
  return logic_error("podman rm",
                     "the container is still there after 5 attempts or 120 s (" + last + ")",
                     r.path);
}

// The cgroups a runtime made beneath `root` (conmon, libpod-<id>), deepest first, so that each
// is empty of children when it is removed. Iterative: the depth is whatever the runtime made.
std::vector<std::string> child_cgroups_deepest_first(const std::string& root) {
  std::vector<std::string> found, todo = {root};
  while (!todo.empty()) {
    std::string dir = std::move(todo.back());
    todo.pop_back();
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (e->d_type != DT_DIR || n == "." || n == "..") continue;
      found.push_back(dir + "/" + n);
      todo.push_back(found.back());
    }
    ::closedir(d);
  }
  std::stable_sort(found.begin(), found.end(), [](const std::string& a, const std::string& b) {
    return std::count(a.begin(), a.end(), '/') > std::count(b.begin(), b.end(), '/');
  });
  return found;
}

Status remove_one_cgroup(const std::string& path);

Status remove_cgroup(const Resource& r) {
  struct stat st;
  if (::stat(r.path.c_str(), &st) != 0) return {};
  Status first;
  for (const auto& child : child_cgroups_deepest_first(r.path))
    if (auto s = remove_one_cgroup(child); !s.ok() && first.ok()) first = std::move(s);
  if (!first.ok()) return first;
  return remove_one_cgroup(r.path);
}

Status remove_one_cgroup(const std::string& path) {
  Resource r{Resource::Kind::kCgroup, path};
  // Kill anything still inside (cgroup.kill on v2 / unified; procs list otherwise), then rmdir.
  struct stat st;
  if (::stat(r.path.c_str(), &st) != 0) return {};
  if (::access((r.path + "/cgroup.kill").c_str(), W_OK) == 0) {
    (void)write_file(r.path + "/cgroup.kill", "1");
  } else if (auto procs = read_file(r.path + "/cgroup.procs"); procs.ok()) {
    size_t pos = 0;
    while (pos < procs->size()) {
      size_t end = procs->find('\n', pos);
      if (end == std::string::npos) end = procs->size();
      pid_t pid =
          static_cast<pid_t>(std::strtol(procs->substr(pos, end - pos).c_str(), nullptr, 10));
      if (pid > 0) ::kill(pid, SIGKILL);
      pos = end + 1;
    }
  }
  // rmdir fails with EBUSY until the killed tasks have exited: retry for a bounded time.
  for (int i = 0; i < 500; ++i) {
    if (::rmdir(r.path.c_str()) == 0 || errno == ENOENT) return {};
    if (errno != EBUSY) return sys_error("rmdir cgroup", r.path);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return sys_error(EBUSY, "rmdir cgroup", r.path);
}

}  // namespace

Status release_resources(const HostPaths& paths, std::vector<Resource> resources) {
  // Reverse creation order within a kind (children before parents), kinds by intrusiveness.
  std::reverse(resources.begin(), resources.end());
  std::stable_sort(resources.begin(), resources.end(), [](const Resource& a, const Resource& b) {
    return release_order(a.kind) < release_order(b.kind);
  });
  Status first;
  auto note = [&](Status s) {
    if (!s.ok() && first.ok()) first = std::move(s);
  };
  // Time per kind, at debug level: what a run's teardown spends where.
  std::map<std::string, double> spent;
  for (const auto& r : resources) {
    kill_point("release:" + to_string(r.kind));
    auto began = std::chrono::steady_clock::now();
    switch (r.kind) {
      case Resource::Kind::kContainer:
        note(remove_container(r));
        break;
      case Resource::Kind::kProcess:
        note(kill_recorded_process(paths, r));
        break;
      case Resource::Kind::kMount:
      case Resource::Kind::kNetns:
        if (::umount2(r.path.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT)
          note(sys_error("umount2", r.path));
        if (r.kind == Resource::Kind::kNetns && ::unlink(r.path.c_str()) != 0 && errno != ENOENT)
          note(sys_error("unlink", r.path));
        break;
      case Resource::Kind::kCgroup:
        note(remove_cgroup(r));
        break;
      case Resource::Kind::kCgroupParent:
        // Busy means another run still uses it: that run will remove it.
        if (::rmdir(r.path.c_str()) != 0 && errno != ENOENT && errno != EBUSY && errno != ENOTEMPTY)
          note(sys_error("rmdir cgroup", r.path));
        break;
      case Resource::Kind::kDirectory: note(remove_tree(r.path)); break;
      case Resource::Kind::kMarkedFile: note(remove_marked_file(r.path, r.owner)); break;
      case Resource::Kind::kLoopDevice: note(detach_loop_device(paths, r.path, r.owner)); break;
      case Resource::Kind::kIdRange:
        // Only after everything else went: a process or file left would keep the ids in use.
        if (first.ok()) note(release_id_range(r.path, r.owner));
        break;
    }
    spent[to_string(r.kind)] +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count();
  }
  if (spdlog::should_log(spdlog::level::debug) && !spent.empty()) {
    std::string line;
    for (const auto& [kind, ms] : spent) line += fmt::format(" {} {:.1f}", kind, ms);
    spdlog::debug("released (ms):{}", line);
  }
  return first;
}

Result<RunState> RunState::create(const HostPaths& paths, std::string run_id, std::string provider,
                                  std::vector<Resource> initial) {
  SG_TRY(make_dirs(paths.state_dir + "/runs", 0711));
  RunState s;
  s.file_ = paths.state_dir + "/runs/" + run_id + ".json";
  s.run_id_ = std::move(run_id);
  s.provider_ = std::move(provider);
  s.owner_pid_ = ::getpid();
  s.owner_start_ = process_start_time(paths.proc, s.owner_pid_).value_or(0);
  s.resources_ = std::move(initial);
  kill_point("before-create:" + s.provider_);
  SG_TRY(s.save());
  kill_point("after-create:" + s.provider_);
  return s;
}

Status RunState::save() const {
  Json res = Json::array();
  for (const auto& r : resources_) res.push_back(to_json(r));
  Json j = {{"schema_version", 1},     {"run_id", run_id_},           {"provider", provider_},
            {"owner_pid", owner_pid_}, {"owner_start", owner_start_}, {"resources", res}};
  return write_json_file_atomic(file_, j, Durability::kCrashSafe);
}

Status RunState::record(Resource r) {
  const std::string point = provider_ + ":" + to_string(r.kind);
  kill_point("before-record:" + point);
  resources_.push_back(std::move(r));
  SG_TRY(save());
  kill_point("after-record:" + point);
  return {};
}

Status RunState::record_all(std::vector<Resource> rs) {
  kill_point("before-record-all:" + provider_);
  for (auto& r : rs) resources_.push_back(std::move(r));
  SG_TRY(save());
  kill_point("after-record-all:" + provider_);
  return {};
}

Status RunState::forget(const Resource& r) {
  const std::string point = provider_ + ":" + to_string(r.kind);
  kill_point("before-forget:" + point);
  std::erase(resources_, r);
  SG_TRY(save());
  kill_point("after-forget:" + point);
  return {};
}

Status RunState::forget_all(const std::vector<Resource>& rs) {
  kill_point("before-forget-all:" + provider_);
  for (const auto& r : rs) std::erase(resources_, r);
  SG_TRY(save());
  kill_point("after-forget-all:" + provider_);
  return {};
}

Status RunState::finish() {
  kill_point("before-finish:" + provider_);
  if (::unlink(file_.c_str()) != 0 && errno != ENOENT) return sys_error("unlink", file_);
  resources_.clear();
  kill_point("after-finish:" + provider_);
  return {};
}

namespace {

// A directory <work_dir>/<id> with no <state_dir>/runs/<id>.json: its record was lost (power
// loss: records are not fsynced). Records are written before a run directory is made, so a
// live run's directory always has one.
void sweep_orphan_run_dirs(const HostPaths& paths, GcReport& report) {
  DIR* d = ::opendir(paths.work_dir.c_str());
  if (!d) return;
  std::vector<std::string> orphans;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    if (::access((paths.state_dir + "/runs/" + n + ".json").c_str(), F_OK) == 0) continue;
    orphans.push_back(paths.work_dir + "/" + n);
  }
  ::closedir(d);
  for (const auto& dir : orphans) {
    if (auto s = remove_tree(dir); !s.ok()) {
      report.errors.push_back(s.error().message());
    } else {
      ++report.orphans_removed;
      spdlog::info("gc: removed orphaned run directory {}", dir);
    }
  }
}

}  // namespace

GcReport collect_garbage(const HostPaths& paths) {
  GcReport report;
  std::string dir = paths.state_dir + "/runs";
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    if (errno != ENOENT) {
      report.errors.push_back(sys_error("opendir", dir).message());
      return report;
    }
    // No run was ever recorded here; the host-wide id range locks may still hold orphans.
    report.id_ranges_reclaimed = reclaim_orphan_id_ranges(paths, report.errors);
    return report;
  }
  std::vector<std::string> files, stale_tmp;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > 5 && n.ends_with(".json")) files.push_back(dir + "/" + n);
    // A record being rewritten is <record>.tmp.<writer pid> until it is exchanged into place
    // (write_json_file_atomic), and the old record is that file until it is removed; a writer
    // killed in between leaves it (the chaos test found one after a kill -9 of serve). Its
    // content is the record's next state, whose new resource was not made yet, or its last
    // but one, whose resources the record in place names or no longer has: it goes once its
    // writer is gone.
    if (auto at = n.find(".json.tmp."); at != std::string::npos) {
      pid_t writer = static_cast<pid_t>(std::strtol(n.c_str() + at + 10, nullptr, 10));
      if (writer > 0 && ::kill(writer, 0) != 0 && errno == ESRCH)
        stale_tmp.push_back(dir + "/" + n);
    }
  }
  ::closedir(d);
  for (const auto& f : stale_tmp) {
    if (::unlink(f.c_str()) == 0) spdlog::info("gc: removed {}, left by a writer that died", f);
  }
  for (const auto& file : files) {
    ++report.runs_seen;
    // Records are not synced (kCrashSafe): after a power loss one may be empty. Its run's
    // processes, mounts and cgroups went with the machine; its run directory is an orphan,
    // removed below once the record is gone.
    if (struct stat st; ::stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0) {
      if (::unlink(file.c_str()) == 0) {
        spdlog::info("gc: removed the empty record {} (a power loss)", file);
        ++report.runs_removed;
      }
      continue;
    }
    auto j = read_json_file(file);
    if (!j.ok()) {
      report.errors.push_back(j.error().message());
      continue;
    }
    // A record of the wrong shape ("owner_pid": "abc", an array) is reported, not a crash:
    // nlohmann's accessors throw on a type mismatch.
    pid_t owner = 0;
    unsigned long long owner_start = 0;
    std::string run_id;
    Json resource_list;
    try {
      if (!j->is_object()) throw std::runtime_error("the record is not a JSON object");
      owner = j->value("owner_pid", 0);
      owner_start = j->value("owner_start", 0ULL);
      run_id = j->value("run_id", "?");
      resource_list = j->value("resources", Json::array());
      if (!resource_list.is_array()) throw std::runtime_error("\"resources\" is not an array");
    } catch (const std::exception& e) {
      report.errors.push_back(logic_error("read run record", e.what(), file).message());
      continue;
    }
    auto now = process_start_time(paths.proc, owner);
    if (owner > 0 && now && *now == owner_start) {
      ++report.runs_live;
      continue;
    }
    std::vector<Resource> resources;
    bool unreadable = false;
    for (const auto& rj : resource_list) {
      auto r = resource_from_json(rj);
      if (r.ok()) {
        resources.push_back(*r);
      } else {
        report.errors.push_back(r.error().message() + " in " + file);
        unreadable = true;
      }
    }
    auto s = release_resources(paths, resources);
    if (!s.ok()) {
      report.errors.push_back(s.error().message());
      continue;  // keep the record so a later gc can retry
    }
    // A resource gc could not read was not released: keep the record for a person to see.
    if (unreadable) continue;
    ::unlink(file.c_str());
    ++report.runs_removed;
    spdlog::info("gc: removed run {} ({} resources)", run_id, resources.size());
  }
  sweep_orphan_run_dirs(paths, report);
  report.id_ranges_reclaimed = reclaim_orphan_id_ranges(paths, report.errors);
  return report;
}

#ifdef SANDGATE_KILL_POINTS

bool kill_points_compiled_in() { return true; }

void kill_point(std::string_view name) {
  // Read once: the environment of this process as it started.
  static const char* const at = std::getenv("SANDGATE_KILL_AT");
  static const char* const trace = std::getenv("SANDGATE_KILL_TRACE");
  if ((!at || !*at) && (!trace || !*trace)) return;
  // Counted per process, across threads (serve's environments run concurrently).
  static std::mutex mu;
  static std::map<std::string, int, std::less<>> passed;
  std::lock_guard lock(mu);
  auto it = passed.find(name);
  if (it == passed.end()) it = passed.emplace(std::string(name), 0).first;
  std::string id = it->first + "#" + std::to_string(++it->second);
  if (trace && *trace) {
    // One append per passage: whole lines, whatever else writes the file.
    int fd = ::open(trace, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) {
      std::string line = id + "\n";
      (void)!::write(fd, line.data(), line.size());
      ::close(fd);
    }
  }
  if (at && id == at) {
    ::kill(::getpid(), SIGKILL);
    ::pause();  // SIGKILL cannot be caught; nothing after this point runs
  }
}

#else

bool kill_points_compiled_in() { return false; }
void kill_point(std::string_view) {}

#endif

std::string new_run_id() {
  static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  auto now = std::chrono::system_clock::now().time_since_epoch();
  uint64_t t =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(now).count());
  std::string id;
  while (t) {
    id.insert(id.begin(), digits[t % 36]);
    t /= 36;
  }
  // Random per process, then a counter: ids made in the same millisecond by one process never
  // collide (4 random base-36 digits alone repeat within ~1000 draws), and two processes
  // still differ with high probability.
  static std::atomic<uint32_t> next{std::random_device{}()};
  uint32_t r = next.fetch_add(1, std::memory_order_relaxed) % (36u * 36u * 36u * 36u);
  for (int i = 0; i < 4; ++i) {
    id += digits[r % 36];
    r /= 36;
  }
  return "r" + id;
}

}  // namespace sandgate
