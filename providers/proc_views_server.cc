// The per-run /proc views server (proc_views.h): a read-only FUSE filesystem of eight files,
// each generated at open from the run's cgroup. Started by the launcher (proc_views.cc) as
//   EXE --sandgate-proc-views CONTROL_FD
// ahead of the run that will use it, possibly: it loads and initialises, then waits for its go
// on CONTROL_FD (a SOCK_SEQPACKET socket; EOF: exit unmounted), which names the mount point and
// the run's cgroup and may carry the run's sysinfo channel (sysinfo_notify.h); mounts, answers
// "ok" (or the error), and serves until SIGTERM or until the mount is gone.
// Single-threaded: a read is a few small cgroup files; the loop also samples the run's load
// every 5 s, as the kernel's own load average does, and answers each call's sysinfo(2) that
// the jail's filter hands to it (the listeners come over the sysinfo channel), with the numbers
// the views show that caller.
#define FUSE_USE_VERSION 31
#include <fuse.h>
#include <fuse_lowlevel.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "core/fd.h"
#include "core/strings.h"
#include "providers/proc_views.h"
#include "providers/supervisor_protocol.h"
#include "providers/sysinfo_notify.h"

namespace sandgate::providers {
namespace {

constexpr int kLoadSampleMs = 5000;  // LOAD_FREQ (kernel/sched/loadavg.c)

struct Views {
  std::vector<std::string> run_dirs;         // empty: follow the reader's cgroup
  std::vector<std::string> run_controllers;  // controller_of() each run dir, found once
  std::string proc = "/proc";
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  long long btime = static_cast<long long>(std::time(nullptr));
  int host_cpus = 1;
  uint64_t host_mem_kb = 0;
  uint64_t page_size = 4096;
  std::vector<std::string> vmstat_keys;  // this kernel's /proc/vmstat keys, read once
  LoadAverage load;
  std::chrono::steady_clock::time_point sampled = started;
  SysinfoCache sysinfo_cache;
};
Views* g_views = nullptr;

double age_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_views->started).count();
}

// Which hierarchy a run directory is in, as /proc/<pid>/cgroup names it: the first component
// under the cgroup mount ("memory"; "cpu" of "cpu,cpuacct"), "" for the v2 one.
std::string controller_of(const std::string& run) {
  const std::string mount = "/sys/fs/cgroup/";
  auto base = run.find(mount);
  if (base == std::string::npos) return "";
  // A pure v2 host mounts the one hierarchy at /sys/fs/cgroup itself.
  if (::access((run.substr(0, base + mount.size()) + "cgroup.controllers").c_str(), F_OK) == 0)
    return "";
  std::string rest = run.substr(base + mount.size());
  std::string controller = rest.substr(0, rest.find_first_of("/,"));
  return controller == "unified" ? "" : controller;
}

// The cgroup directories of the reader, one per hierarchy of the run's (or, with no run
// cgroup, every hierarchy the reader is in under /sys/fs/cgroup). `in_run`, when given: whether
// the reader is in the run (always, with no run cgroup).
std::vector<std::string> reader_dirs(pid_t pid, bool* in_run = nullptr) {
  auto text = read_file(g_views->proc + "/" + std::to_string(pid) + "/cgroup", 1 << 16);
  std::vector<std::string> out;
  if (in_run) *in_run = g_views->run_dirs.empty();
  if (!text.ok()) return out;
  if (!g_views->run_dirs.empty()) {
    for (size_t i = 0; i < g_views->run_dirs.size(); ++i) {
      const std::string& run = g_views->run_dirs[i];
      std::string d = reader_cgroup_dir(run, *text, g_views->run_controllers[i]);
      if (in_run && !d.empty()) *in_run = true;
      out.push_back(d.empty() ? run : d);
    }
    return out;
  }
  // No run cgroup: the reader's own, in each v1 hierarchy and the v2 one.
  for (std::string_view piece : split(*text, '\n')) {
    std::string line(piece);
    auto c1 = line.find(':'), c2 = line.find(':', c1 + 1);
    if (c1 == std::string::npos || c2 == std::string::npos) continue;
    std::string ctl = line.substr(c1 + 1, c2 - c1 - 1), path = line.substr(c2 + 1);
    if (ctl.rfind("name=", 0) == 0) continue;
    std::string mount = ctl.empty() ? "/sys/fs/cgroup/unified" : "/sys/fs/cgroup/" + ctl;
    if (ctl.empty() && ::access("/sys/fs/cgroup/unified", F_OK) != 0) mount = "/sys/fs/cgroup";
    out.push_back(mount + (path == "/" ? "" : path));
  }
  return out;
}

std::vector<std::string> run_or_reader_dirs(pid_t pid) {
  return g_views->run_dirs.empty() ? reader_dirs(pid) : g_views->run_dirs;
}

// The run's tasks as the reader should see them: the kernel counts a reader of its own
// /proc/loadavg or /proc/stat as running, but here the reader sleeps, waiting for this very
// answer. A reader in the run (always, when the views follow the reader's own cgroup) counts
// as running.
TaskCounts seen_by(bool reader_in_run, TaskCounts t) {
  if (reader_in_run && t.running < t.threads) ++t.running;
  return t;
}

Result<TaskCounts> tasks_seen_by(pid_t pid, const std::vector<std::string>& dirs) {
  SG_ASSIGN_OR_RETURN(auto t, count_tasks(dirs, g_views->proc));
  bool in_run = g_views->run_dirs.empty();
  if (!in_run) reader_dirs(pid, &in_run);
  return seen_by(in_run, t);
}

void sample_load(const TaskCounts& tasks) {
  auto now = std::chrono::steady_clock::now();
  g_views->load.update(tasks.running + tasks.blocked,
                       std::chrono::duration<double>(now - g_views->sampled).count());
  g_views->sampled = now;
}

void sample_load(const std::vector<std::string>& dirs) {
  auto tasks = count_tasks(dirs, g_views->proc);
  if (tasks.ok()) sample_load(*tasks);
}

// The text of one view for the reader `pid`; an errno (negative) when it cannot be made: the
// reader then gets that error, never the host's file.
Result<std::string> generate(const std::string& path, pid_t pid) {
  if (path == "/meminfo") {
    for (const auto& d : reader_dirs(pid)) {
      auto m = read_memory(d);
      if (m.ok()) return render_meminfo(*m, g_views->host_mem_kb);
    }
    return sys_error(EIO, "meminfo: no memory cgroup");
  }
  if (path == "/vmstat") {
    for (const auto& d : reader_dirs(pid)) {
      auto m = read_memory(d);
      if (m.ok())
        return render_vmstat(*m, g_views->host_mem_kb, g_views->vmstat_keys, g_views->page_size);
    }
    return sys_error(EIO, "vmstat: no memory cgroup");
  }
  auto dirs = run_or_reader_dirs(pid);
  if (path == "/stat" || path == "/uptime") {
    SG_ASSIGN_OR_RETURN(auto cpu, read_cpu(dirs, g_views->host_cpus));
    if (path == "/uptime") return render_uptime(cpu, age_s());
    SG_ASSIGN_OR_RETURN(auto tasks, tasks_seen_by(pid, dirs));
    return render_stat(cpu, tasks, age_s(), g_views->btime);
  }
  if (path == "/loadavg") {
    sample_load(dirs);
    SG_ASSIGN_OR_RETURN(auto tasks, tasks_seen_by(pid, dirs));
    return render_loadavg(g_views->load, tasks);
  }
  if (path.rfind("/pressure/", 0) == 0) return read_pressure(dirs, path.substr(10) + ".pressure");
  return sys_error(ENOENT, "no such view", path);
}

bool is_dir(const std::string& p) { return p == "/" || p == "/pressure"; }
bool is_file(const std::string& p) {
  for (const char* f : kProcViewFiles)
    if (p == std::string("/") + f) return true;
  return false;
}

int op_getattr(const char* path, struct stat* st, struct fuse_file_info*) {
  std::memset(st, 0, sizeof *st);
  std::string p = path;
  if (is_dir(p)) {
    st->st_mode = S_IFDIR | 0555;
    st->st_nlink = 2;
  } else if (is_file(p)) {
    st->st_mode = S_IFREG | 0444;  // size 0, as procfs says: the content is made at open
    st->st_nlink = 1;
  } else {
    return -ENOENT;
  }
  return 0;
}

int op_readdir(const char* path, void* buf, fuse_fill_dir_t fill, off_t, struct fuse_file_info*,
               enum fuse_readdir_flags) {
  std::string p = path;
  if (!is_dir(p)) return -ENOTDIR;
  fill(buf, ".", nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  fill(buf, "..", nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  const std::string prefix = p == "/" ? "" : "pressure/";
  bool pressure_listed = false;
  for (const char* f : kProcViewFiles) {
    std::string name = f;
    if (prefix.empty()) {
      if (name.rfind("pressure/", 0) == 0) {
        if (pressure_listed) continue;
        name = "pressure";
        pressure_listed = true;
      }
    } else {
      if (name.rfind(prefix, 0) != 0) continue;
      name = name.substr(prefix.size());
    }
    fill(buf, name.c_str(), nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  }
  return 0;
}

int op_open(const char* path, struct fuse_file_info* fi) {
  if (!is_file(path)) return -ENOENT;
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EACCES;
  auto text = generate(path, fuse_get_context()->pid);
  if (!text.ok()) return -(text.error().err ? text.error().err : EIO);
  // One snapshot per open: a reader that reads in pieces gets one consistent text.
  fi->fh = reinterpret_cast<uint64_t>(new std::string(std::move(text).value()));
  fi->direct_io = 1;
  return 0;
}

int op_read(const char*, char* buf, size_t size, off_t off, struct fuse_file_info* fi) {
  const auto* text = reinterpret_cast<const std::string*>(fi->fh);
  if (!text || off < 0 || static_cast<size_t>(off) >= text->size()) return 0;
  size_t n = std::min(size, text->size() - static_cast<size_t>(off));
  std::memcpy(buf, text->data() + off, n);
  return static_cast<int>(n);
}

int op_release(const char*, struct fuse_file_info* fi) {
  delete reinterpret_cast<std::string*>(fi->fh);
  fi->fh = 0;
  return 0;
}

void* op_init(struct fuse_conn_info*, struct fuse_config* cfg) {
  cfg->direct_io = 1;
  cfg->kernel_cache = 0;
  cfg->attr_timeout = 3600;  // the tree never changes
  cfg->entry_timeout = 3600;
  cfg->negative_timeout = 3600;
  return nullptr;
}

// sysinfo(2) for the caller `pid` (a host pid): what its /proc/meminfo, /proc/loadavg and
// /proc/uptime say (make_sysinfo). The cgroup numbers come from a sample of the caller's cgroup
// at most kSysinfoCacheWindow old (the tasks counted once, for the load and the answer); the
// uptime and the reader's own running state are the answer's own.
Result<struct sysinfo> sysinfo_for(pid_t pid) {
  bool in_run = false;
  const auto readers = reader_dirs(pid, &in_run);
  std::string key;
  for (const auto& d : readers) key += d + '\n';
  auto sample = g_views->sysinfo_cache.get(key, [&]() -> Result<SysinfoSample> {
    for (const auto& d : readers) {
      auto m = read_memory(d);
      if (!m.ok()) continue;
      // The reader's dirs when the views follow the reader: the key.
      SG_ASSIGN_OR_RETURN(
          auto tasks,
          count_tasks(g_views->run_dirs.empty() ? readers : g_views->run_dirs, g_views->proc));
      sample_load(tasks);
      return SysinfoSample{std::move(m).value(), tasks};
    }
    return sys_error(EIO, "sysinfo: no memory cgroup");
  });
  if (!sample.ok()) return std::move(sample).error();
  return make_sysinfo(sample->memory, g_views->host_mem_kb, g_views->load,
                      seen_by(in_run, sample->tasks), age_s());
}

// The go: the launcher has recorded us and says where to mount and for which cgroup (one
// directory per hierarchy; none: each view follows its reader's cgroup), with the run's sysinfo
// channel when it sends one. Nothing at end of stream (the launcher died, or dropped us unused)
// or for a message that is not a go.
struct Go {
  std::string mount_point;
  std::vector<std::string> run_dirs;
  UniqueFd sysinfo_channel;
};
std::optional<Go> receive_go(int control) {
  auto msg = recv_message(control);
  if (!msg.ok()) return std::nullopt;
  const Json& body = msg->body;
  if (!body.is_object() || !body.contains("op") || body["op"] != "go") return std::nullopt;
  Go go;
  const auto mount_point = body.find("mount_point");
  if (mount_point == body.end() || !mount_point->is_string()) return std::nullopt;
  go.mount_point = mount_point->get<std::string>();
  if (const auto dirs = body.find("cgroup_dirs"); dirs != body.end()) {
    if (!dirs->is_array()) return std::nullopt;
    for (const auto& d : *dirs) {
      if (!d.is_string()) return std::nullopt;
      go.run_dirs.push_back(d.get<std::string>());
    }
  }
  if (!msg->fds.empty()) go.sysinfo_channel = std::move(msg->fds.front());
  return go;
}

uint64_t host_mem_total_kb(const std::string& proc) {
  auto text = read_file(proc + "/meminfo", 1 << 16);
  if (!text.ok()) return 0;
  auto at = text->find("MemTotal:");
  return at == std::string::npos ? 0 : std::strtoull(text->c_str() + at + 9, nullptr, 10);
}

}  // namespace

std::string proc_views_library_version() { return fuse_pkgversion(); }

int run_proc_views_server(int argc, char** argv) {
  if (argc != 3) return 2;
  const int control = std::atoi(argv[2]);
  auto answer = [&](const std::string& s) { (void)!::write(control, s.data(), s.size()); };
  // What does not depend on the run first: a server started ahead of its run has done it by
  // the time it is told where to mount.
  Views views;
  long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  views.host_cpus = cpus > 0 ? static_cast<int>(cpus) : 1;
  views.host_mem_kb = host_mem_total_kb(views.proc);
  long page = ::sysconf(_SC_PAGESIZE);
  if (page > 0) views.page_size = static_cast<uint64_t>(page);
  // Only the keys: the view has the kernel's layout, none of the host's numbers.
  if (auto vm = read_file(views.proc + "/vmstat", 1 << 16); vm.ok())
    views.vmstat_keys = vmstat_keys(*vm);
  struct fuse_operations ops = {};
  ops.getattr = op_getattr;
  ops.readdir = op_readdir;
  ops.open = op_open;
  ops.read = op_read;
  ops.release = op_release;
  ops.init = op_init;
  // allow_other: the jail's calls are other users; read-only, and nothing on it may be a
  // device, a setuid program or executable.
  const char* fargv[] = {"sandgate-proc-views", "-o",
                         "allow_other,ro,nosuid,nodev,noexec,fsname=sandgate-proc-views,"
                         "subtype=sandgate-proc-views"};
  struct fuse_args args = FUSE_ARGS_INIT(3, const_cast<char**>(fargv));
  struct fuse* f = fuse_new(&args, &ops, sizeof ops, nullptr);
  fuse_opt_free_args(&args);

  auto go = receive_go(control);
  // The launcher died before recording us, or dropped us unused: nothing to flush or unmount
  // (and no exit handlers: a sanitizer's leak scan would report what fuse_new holds).
  if (!go) ::_exit(1);
  if (!f) {
    answer("error: fuse_new failed");
    return 1;
  }
  views.run_dirs = std::move(go->run_dirs);
  // The hierarchies do not change under a run: not an access() per hierarchy per read.
  for (const auto& run : views.run_dirs) views.run_controllers.push_back(controller_of(run));
  g_views = &views;
  UniqueFd sysinfo_channel = std::move(go->sysinfo_channel);  // invalid: none, no sysinfo here
  std::vector<UniqueFd> listeners;  // one per call, until its last process is gone
  const std::string& mount_point = go->mount_point;
  if (fuse_mount(f, mount_point.c_str()) != 0) {
    answer("error: mount the proc views at " + mount_point + " failed");
    fuse_destroy(f);
    return 1;
  }
  struct fuse_session* se = fuse_get_session(f);
  fuse_set_signal_handlers(se);
  answer("ok");
  ::close(control);

  struct fuse_buf buf = {};
  auto next_sample = std::chrono::steady_clock::now() + std::chrono::milliseconds(kLoadSampleMs);
  while (!fuse_session_exited(se)) {
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
                    next_sample - std::chrono::steady_clock::now())
                    .count();
    std::vector<struct pollfd> p = {{fuse_session_fd(se), POLLIN, 0}};
    p.push_back({sysinfo_channel.valid() ? sysinfo_channel.get() : -1, POLLIN, 0});
    for (const auto& l : listeners) p.push_back({l.get(), POLLIN, 0});
    int r = ::poll(p.data(), p.size(), static_cast<int>(std::max<long long>(0, wait)));
    if (r < 0 && errno != EINTR) break;
    if (std::chrono::steady_clock::now() >= next_sample) {
      if (!views.run_dirs.empty()) sample_load(views.run_dirs);
      next_sample += std::chrono::milliseconds(kLoadSampleMs);
    }
    if (r <= 0) continue;
    // The calls' sysinfo first (each caller waits, stopped), then new listeners; a listener
    // whose call has no process left says POLLHUP and is closed.
    std::vector<bool> done(listeners.size(), false);
    for (size_t i = 0; i < listeners.size(); ++i) {
      short ev = p[2 + i].revents;
      if (ev & POLLIN) {
        auto a = answer_sysinfo_notification(listeners[i].get(), views.proc, sysinfo_for);
        if (!a.ok()) done[i] = true;  // unreadable: drop it (its calls then get ENOSYS)
      } else if (ev & (POLLHUP | POLLERR | POLLNVAL)) {
        done[i] = true;
      }
    }
    for (size_t i = listeners.size(); i-- > 0;)
      if (done[i]) listeners.erase(listeners.begin() + static_cast<long>(i));
    if (p[1].revents) {
      bool closed = false;
      for (auto& l : receive_sysinfo_listeners(sysinfo_channel.get(), closed))
        listeners.push_back(std::move(l));
      // Every holder gone (the supervisor and each call's child before its exec): the calls
      // already here are still answered.
      if (closed || (p[1].revents & (POLLERR | POLLNVAL))) sysinfo_channel.reset();
    }
    if (!p[0].revents) continue;
    int n = fuse_session_receive_buf(se, &buf);
    if (n == -EINTR) continue;
    if (n <= 0) break;  // the mount is gone (ENODEV), or an error
    fuse_session_process_buf(se, &buf);
  }
  std::free(buf.mem);
  fuse_remove_signal_handlers(se);
  fuse_unmount(f);
  fuse_destroy(f);
  // Nothing left to flush: no exit handlers (a sanitizer's leak scan at exit would hold the
  // run's teardown, which waits for this process, for most of a second).
  ::_exit(0);
}

}  // namespace sandgate::providers
