// Boundary between runs. crossrun.plant (in run A) leaves one object of each kind another run
// could reach: workspace, /tmp and /dev/shm canaries, an abstract unix socket, a loopback TCP
// listener, SysV shared memory and a message queue. It writes a ready file, holds them while
// recording who touches them (connections accepted, signals received, shm attaches, messages
// taken), and removes everything when released. The other crossrun probes (in run B) try each.
//
// Names derive from the marker: files "sandgate-crossrun-MARKER", the abstract socket
// "@sandgate-crossrun-MARKER", SysV key crossrun_key(MARKER) for both shm and msg. The ready
// file, WORKSPACE/sandgate-crossrun-MARKER.ready.json, holds:
//   {"marker", "pids": [holder, runner], "host_pid" (or null when this pid namespace is not
//    the host's), "pidns", "port", "abstract", "shm_key", "shm_id", "msg_key", "msg_id",
//    "files": {"workspace", "tmp", "dev_shm"}}
// and plant holds until WORKSPACE/sandgate-crossrun-MARKER.release exists or hold_ms passes.
//
// Two more things A holds for the probes of what the kernel shares between runs:
//   - with hold_inotify=1, every inotify instance its host uid may have
//   (fs.inotify.max_user_instances is counted
//     per user, across namespaces: kernel/ucount.c), taken before the ready file is written
//     ("inotify_held", "inotify_user_limit" in it) and closed as soon as
//     WORKSPACE/sandgate-crossrun-MARKER.inotify-release exists (the host writes it right after
//     crossrun.user_inotify ran), or after kMaxInotifyHoldMs. When A's uid is shared with the
//     host's (natively, or under an unsafe provider), the host's processes of that uid cannot
//     make an inotify instance either while A holds them: the hold is kept that short.
//     With inotify_uid=N (the native baseline, run as root), the instances are held by a child
//     that first becomes host uid N, a throwaway uid from sandgate's id pool, and
//     crossrun.user_inotify tries as uid N too: the host's root is never the one starved.
//   - a burst of kBurstThreads sleeping threads, kBurstDelayMs after
//     WORKSPACE/sandgate-crossrun-MARKER.burst appears, for kBurstMs: what
//     crossrun.load_side_channel looks for in /proc/loadavg.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "probes/catalogue.h"
#include "probes/probe_util.h"

namespace sandgate::probes {
namespace {

using namespace util;

constexpr long long kDefaultHoldMs = 30000;
constexpr long long kMaxHoldMs = 600000;
constexpr long long kMaxInotifyHoldMs = 15000;
constexpr int kMaxInotify = 65536;  // far above any max_user_instances default (128)
constexpr int kBurstThreads = 64;
constexpr long long kBurstDelayMs = 1000;
constexpr long long kBurstMs = 2000;
// crossrun.load_side_channel: how long run B watches, and what a step must be to count.
constexpr long long kWatchMs = 6000;
constexpr long long kSampleMs = 25;
constexpr int kStepMin = kBurstThreads * 3 / 4;
constexpr size_t kStepSamples = 6;  // 150 ms: a burst, not a compiler starting

// A child of this process that has become host uid/gid `uid` (no supplementary groups) and
// dies with its parent. Returns its pid in the parent, 0 in the child; -1 with errno.
pid_t fork_as(uid_t uid) {
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 ||
      ::setresuid(uid, uid, uid) != 0)
    ::_exit(97);
  // After the credential change, which clears it.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(98);
  return 0;
}

// Every inotify instance the current uid may have (kMaxInotify at most); errno of the call that
// stopped it in *err (0: the cap).
std::vector<int> take_inotify_instances(int* err) {
  std::vector<int> fds;
  *err = 0;
  while (static_cast<int>(fds.size()) < kMaxInotify) {
    int fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (fd < 0) {
      *err = errno;
      break;
    }
    fds.push_back(fd);
  }
  return fds;
}

// What the holder child tells its parent through a pipe.
struct InotifyHold {
  uint64_t held = 0;
  int err = 0;
};

// The 4th field of /proc/loadavg, "running/total": the total threads of the whole kernel
// (not of a pid namespace). -1 when unreadable.
int loadavg_threads() {
  FileRead r = read_prefix("/proc/loadavg", 256);
  if (r.err) return -1;
  std::istringstream in(r.data);
  std::string a, b, c, rt;
  in >> a >> b >> c >> rt;
  auto slash = rt.find('/');
  if (slash == std::string::npos) return -1;
  return std::atoi(rt.c_str() + slash + 1);
}

// Holds `threads` threads asleep on a pipe for `ms`; returns how many started.
int burst(int threads, long long ms) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return 0;
  std::vector<std::thread> held;
  for (int i = 0; i < threads; ++i) {
    try {
      held.emplace_back([fd = fds[0]] {
        char c;
        while (::read(fd, &c, 1) < 0 && errno == EINTR) {
        }
      });
    } catch (...) {
      break;  // a pids limit: what started is the burst
    }
  }
  sleep_ms(ms);
  ::close(fds[1]);  // EOF wakes every thread
  for (auto& t : held) t.join();
  ::close(fds[0]);
  return static_cast<int>(held.size());
}

std::string base_name(const std::string& m) { return "sandgate-crossrun-" + m; }

// FNV-1a of the base name, never IPC_PRIVATE (0).
key_t crossrun_key(const std::string& m) {
  uint32_t h = 2166136261u;
  for (char c : base_name(m)) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  return static_cast<key_t>((h & 0x7fffffff) | 0x10000);
}

int write_text(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int err = ::write(fd, text.data(), text.size()) < 0 ? errno : 0;
  ::close(fd);
  return err;
}

volatile sig_atomic_t g_signals = 0;
volatile sig_atomic_t g_last_sender = 0;
void on_winch(int, siginfo_t* info, void*) {
  g_signals = g_signals + 1;
  g_last_sender = info ? info->si_pid : 0;
}

ProbeReport plant(const Params& p) {
  std::string attempt =
      "plant cross-run canaries and listeners, hold them, record who touches them";
  auto m = marker(p);
  if (!m) return missing_param(attempt, "marker");
  long long hold = p.number_or("hold_ms", kDefaultHoldMs, kMaxHoldMs);
  std::string ws = workspace(p), base = base_name(*m);
  std::string line = "sandgate " + *m + "\n";
  Json planted = Json::object();
  bool any = false;
  auto note = [&](const char* what, int err) {
    planted[what] = outcome(err);
    any = any || err == 0;
  };

  struct sigaction sa {};
  sa.sa_sigaction = on_winch;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  ::sigaction(SIGWINCH, &sa, nullptr);

  std::string ws_file = ws + "/" + base, tmp_file = "/tmp/" + base, shm_file = "/dev/shm/" + base;
  note("workspace_file", write_text(ws_file, line));
  note("tmp_file", write_text(tmp_file, line));
  note("dev_shm_file", write_text(shm_file, line));

  int abstract_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_un ua{};
  ua.sun_family = AF_UNIX;
  std::memcpy(ua.sun_path + 1, base.data(), std::min(base.size(), sizeof ua.sun_path - 2));
  socklen_t ulen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + base.size());
  int err = abstract_fd < 0 ? errno
            : (::bind(abstract_fd, reinterpret_cast<sockaddr*>(&ua), ulen) == 0 &&
               ::listen(abstract_fd, 8) == 0)
                ? 0
                : errno;
  note("abstract_socket", err);

  int tcp_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in ta{};
  ta.sin_family = AF_INET;
  ta.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t tlen = sizeof ta;
  err = tcp_fd < 0 ? errno
        : (::bind(tcp_fd, reinterpret_cast<sockaddr*>(&ta), sizeof ta) == 0 &&
           ::listen(tcp_fd, 8) == 0 &&
           ::getsockname(tcp_fd, reinterpret_cast<sockaddr*>(&ta), &tlen) == 0)
            ? 0
            : errno;
  note("loopback_listener", err);
  int port = err == 0 ? ntohs(ta.sin_port) : 0;

  // World-accessible on purpose: isolation between runs must come from the IPC namespace,
  // not from permission bits.
  key_t key = crossrun_key(*m);
  int shm_id = ::shmget(key, 4096, IPC_CREAT | IPC_EXCL | 0666);
  err = shm_id < 0 ? errno : 0;
  if (shm_id >= 0) {
    void* at = ::shmat(shm_id, nullptr, 0);
    if (at != reinterpret_cast<void*>(-1)) {
      std::memcpy(at, line.c_str(), line.size() + 1);
      ::shmdt(at);
    }
  }
  note("sysv_shm", err);
  int msg_id = ::msgget(key, IPC_CREAT | IPC_EXCL | 0666);
  err = msg_id < 0 ? errno : 0;
  if (msg_id >= 0) {
    struct {
      long mtype;
      char text[128];
    } msg{1, {}};
    std::strncpy(msg.text, line.c_str(), sizeof msg.text - 1);
    if (::msgsnd(msg_id, &msg, line.size(), IPC_NOWAIT) != 0) err = errno;
  }
  note("sysv_msg", err);

  // Every inotify instance this uid may have. EMFILE is also the process's own descriptor
  // limit: the hold counts as the per-user limit only when it stopped well below that.
  std::vector<int> inotify_fds;
  size_t inotify_held = 0;
  int inotify_errno = 0;
  const bool hold_inotify = p.get("hold_inotify") == "1";
  auto inotify_uid = p.number("inotify_uid");
  pid_t inotify_holder = -1;
  int inotify_release_fd = -1;  // closing it ends the holder child
  if (hold_inotify && inotify_uid) {
    int report[2], release[2];
    if (::pipe2(report, O_CLOEXEC) != 0 || ::pipe2(release, O_CLOEXEC) != 0) {
      inotify_errno = errno;
    } else {
      inotify_holder = fork_as(static_cast<uid_t>(*inotify_uid));
      if (inotify_holder == 0) {
        ::close(report[0]);
        ::close(release[1]);  // else its own copy would keep the release pipe open forever
        InotifyHold h;
        std::vector<int> fds = take_inotify_instances(&h.err);
        h.held = fds.size();
        (void)!::write(report[1], &h, sizeof h);
        char byte;
        (void)!::read(release[0], &byte, 1);  // EOF: released, or the parent is gone
        ::_exit(0);
      }
      ::close(report[1]);
      ::close(release[0]);
      inotify_release_fd = release[1];
      InotifyHold h;
      if (inotify_holder < 0) {
        inotify_errno = errno;
      } else if (::read(report[0], &h, sizeof h) == static_cast<ssize_t>(sizeof h)) {
        inotify_held = h.held;
        inotify_errno = h.err;
      } else {
        inotify_errno = ECHILD;  // it could not become the uid (exit 97) or died
      }
      ::close(report[0]);
    }
  } else if (hold_inotify) {
    inotify_fds = take_inotify_instances(&inotify_errno);
    inotify_held = inotify_fds.size();
  }
  struct rlimit nofile {};
  ::getrlimit(RLIMIT_NOFILE, &nofile);
  bool user_limit =
      inotify_errno == EMFILE && inotify_held + 64 < static_cast<size_t>(nofile.rlim_cur);
  planted["inotify"] = {{"held", inotify_held},
                        {"stopped_by", outcome(inotify_errno)},
                        {"nofile", static_cast<unsigned long long>(nofile.rlim_cur)},
                        {"uid", inotify_uid ? Json(*inotify_uid) : Json(::geteuid())}};
  auto release_inotify = [&] {
    for (int fd : inotify_fds) ::close(fd);
    inotify_fds.clear();
    if (inotify_release_fd >= 0) {
      ::close(inotify_release_fd);
      inotify_release_fd = -1;
    }
    if (inotify_holder > 0) {
      ::waitpid(inotify_holder, nullptr, 0);
      inotify_holder = -1;
    }
    inotify_held = 0;
  };

  unsigned long long pidns = ns_inode("pid");
  auto host_pidns = p.number("host_pidns");
  bool host_ns = host_pidns && static_cast<unsigned long long>(*host_pidns) == pidns;
  Json ready = {{"marker", *m},
                {"pids", {::getpid(), ::getppid()}},
                {"host_pid", host_ns ? Json(::getpid()) : Json(nullptr)},
                {"pidns", pidns},
                {"port", port},
                {"abstract", base},
                {"shm_key", key},
                {"shm_id", shm_id},
                {"msg_key", key},
                {"msg_id", msg_id},
                {"inotify_held", inotify_held},
                {"inotify_user_limit", user_limit},
                {"files", {{"workspace", ws_file}, {"tmp", tmp_file}, {"dev_shm", shm_file}}}};
  std::string ready_path = ws + "/" + base + ".ready.json";
  std::string release_path = ws + "/" + base + ".release";
  std::string inotify_release_path = ws + "/" + base + ".inotify-release";
  std::string burst_path = ws + "/" + base + ".burst";
  note("ready_file", write_text(ready_path + ".tmp", ready.dump() + "\n") ||
                             ::rename((ready_path + ".tmp").c_str(), ready_path.c_str()) != 0
                         ? EIO
                         : 0);

  // Hold: accept and log whatever connects until released or hold_ms passes.
  Json connections = Json::array();
  unsigned long max_attached = 0;
  long long deadline = now_ms() + hold;
  long long inotify_deadline = now_ms() + kMaxInotifyHoldMs;
  bool released = false;
  Json burst_seen = nullptr;
  while (now_ms() < deadline) {
    if (::access(release_path.c_str(), F_OK) == 0) {
      released = true;
      break;
    }
    if (inotify_held > 0 &&
        (now_ms() >= inotify_deadline || ::access(inotify_release_path.c_str(), F_OK) == 0))
      release_inotify();
    if (burst_seen.is_null() && ::access(burst_path.c_str(), F_OK) == 0) {
      sleep_ms(kBurstDelayMs);
      int before = loadavg_threads();
      long long started = now_ms();
      int threads = burst(kBurstThreads, kBurstMs);
      burst_seen = {{"threads", threads},
                    {"delay_ms", kBurstDelayMs},
                    {"ms", now_ms() - started},
                    {"loadavg_threads_before", before}};
    }
    struct pollfd fds[2] = {{abstract_fd, POLLIN, 0}, {tcp_fd, POLLIN, 0}};
    int n = ::poll(fds, 2, 50);
    for (int i = 0; n > 0 && i < 2; ++i) {
      if (!(fds[i].revents & POLLIN)) continue;
      int c = ::accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::string got = recv_some(c, 200, 256);
      ::close(c);
      if (connections.size() < 32)
        connections.push_back({{"via", i == 0 ? "abstract_socket" : "loopback_listener"},
                               {"first_line", printable(first_line(got), 120)}});
    }
    if (shm_id >= 0) {
      struct shmid_ds ds {};
      if (::shmctl(shm_id, IPC_STAT, &ds) == 0)
        max_attached = std::max<unsigned long>(max_attached, ds.shm_nattch);
    }
  }
  release_inotify();
  Json observed = {{"released", released},
                   {"burst", burst_seen},
                   {"connections", connections},
                   {"signals_received", static_cast<int>(g_signals)},
                   {"last_signal_sender", static_cast<int>(g_last_sender)},
                   {"shm_max_attached", max_attached}};
  if (msg_id >= 0) {
    struct msqid_ds ds {};
    if (::msgctl(msg_id, IPC_STAT, &ds) == 0) {
      observed["msg_left"] = ds.msg_qnum;
      observed["msg_last_receiver"] = ds.msg_lrpid;
    }
  }

  // Remove everything planted.
  if (abstract_fd >= 0) ::close(abstract_fd);
  if (tcp_fd >= 0) ::close(tcp_fd);
  if (shm_id >= 0) ::shmctl(shm_id, IPC_RMID, nullptr);
  if (msg_id >= 0) ::msgctl(msg_id, IPC_RMID, nullptr);
  for (const auto& f :
       {ws_file, tmp_file, shm_file, ready_path, release_path, inotify_release_path, burst_path})
    ::unlink(f.c_str());

  Json ev = {{"planted", planted}, {"ready", ready}, {"observed", observed}, {"hold_ms", hold}};
  if (any) return reached(attempt, ev);
  return failed(attempt, EPERM, ev, "nothing could be planted");
}

// A canary file another run planted; reached when it is readable here.
ProbeReport read_canary(const Params& p, const std::string& dir, const std::string& what) {
  std::string attempt = "read run A's " + what + " canary";
  auto m = marker(p);
  if (!m) return missing_param(attempt, "marker");
  std::string path = dir + "/" + base_name(*m);
  attempt = "read run A's " + what + " canary " + path;
  FileRead r = read_prefix(path);
  if (r.err) return failed(attempt, r.err, {{"path", path}});
  return reached(attempt, {{"path", path},
                           {"first_bytes", printable(r.data)},
                           {"marker_found", r.data.find(*m) != std::string::npos}});
}

ProbeReport workspace_canary(const Params& p) {
  auto other = p.get("other_workspace");
  if (!other) return missing_param("read run A's workspace canary", "other_workspace");
  return read_canary(p, *other, "workspace");
}
// Run A's credential (its --secret), by the path the host keeps it at: only a run that shares
// the host's filesystem view (and is as privileged as sandgate) can open it.
ProbeReport other_secret(const Params& p) {
  return read_other_secret(p, "run A's secret at its host path");
}
ProbeReport tmp_canary(const Params& p) { return read_canary(p, "/tmp", "/tmp"); }
ProbeReport dev_shm_canary(const Params& p) { return read_canary(p, "/dev/shm", "/dev/shm"); }

// Run A's processes as seen from here: every pid whose cmdline carries crossrun.plant and the
// marker (a pid number alone could be another process in this pid namespace).
std::vector<pid_t> find_holders(const std::string& m, const Params& p, Json& ev) {
  std::vector<pid_t> candidates = proc_pids();
  for (const auto& s : p.list("other_pids"))
    candidates.push_back(static_cast<pid_t>(std::atoi(s.c_str())));
  std::vector<pid_t> found;
  for (pid_t pid : candidates) {
    if (pid <= 0 || pid == ::getpid() || pid == ::getppid()) continue;
    if (std::find(found.begin(), found.end(), pid) != found.end()) continue;
    std::string cmd = proc_file(pid, "cmdline", 4096);
    if (cmd.find("crossrun.plant") != std::string::npos && cmd.find(m) != std::string::npos)
      found.push_back(pid);
  }
  ev["pids_visible"] = proc_pids().size();
  ev["holders_found"] = found;
  return found;
}

ProbeReport see_processes(const Params& p) {
  std::string attempt =
      "find run A's processes in /proc (cmdline carries crossrun.plant and the marker)";
  auto m = marker(p);
  if (!m) return missing_param(attempt, "marker");
  Json ev = Json::object();
  auto found = find_holders(*m, p, ev);
  if (!found.empty()) return reached(attempt, ev);
  return failed(attempt, ESRCH, ev);
}

ProbeReport signal_process(const Params& p) {
  std::string attempt = "SIGWINCH run A's processes (ignored by default; A counts them)";
  auto m = marker(p);
  if (!m) return missing_param(attempt, "marker");
  Json ev = Json::object();
  auto found = find_holders(*m, p, ev);
  if (found.empty()) return failed(attempt, ESRCH, ev);
  std::vector<int> errs;
  for (pid_t pid : found) errs.push_back(::kill(pid, SIGWINCH) == 0 ? 0 : errno);
  return combine(attempt, errs, ev);
}

ProbeReport ptrace_process(const Params& p) {
  std::string attempt = "PTRACE_SEIZE run A's holder, interrupt it and detach";
  auto m = marker(p);
  if (!m) return missing_param(attempt, "marker");
  Json ev = Json::object();
  auto found = find_holders(*m, p, ev);
  if (found.empty()) return failed(attempt, ESRCH, ev);
  pid_t pid = found.front();
  if (::ptrace(static_cast<__ptrace_request>(PTRACE_SEIZE), pid, nullptr, nullptr) != 0)
    return failed(attempt, errno, ev);
  if (::ptrace(static_cast<__ptrace_request>(PTRACE_INTERRUPT), pid, nullptr, nullptr) == 0) {
    int status = 0;
    ::waitpid(pid, &status, __WALL);
  }
  ev["detach"] = outcome(::ptrace(PTRACE_DETACH, pid, nullptr, nullptr) == 0 ? 0 : errno);
  return reached(attempt, ev);
}

ProbeReport talk(const std::string& attempt, int fd, const std::string& m, Json ev) {
  if (fd < 0) return failed(attempt, -fd, ev);
  std::string line = "sandgate " + m + " from run B\n";
  ev["send"] = outcome(send_all(fd, line));
  ::close(fd);
  return reached(attempt, ev);
}

ProbeReport abstract_socket(const Params& p) {
  auto m = marker(p);
  if (!m) return missing_param("connect to run A's abstract unix socket", "marker");
  std::string name = p.get("other_abstract").value_or(base_name(*m));
  std::string attempt = "connect to run A's abstract unix socket @" + name;
  return talk(attempt, connect_unix(name, true, 1000), *m,
              {{"name", name}, {"syscall", "connect"}, {"abstract", true}});
}

ProbeReport loopback_port(const Params& p) {
  auto m = marker(p);
  auto port = p.number("other_port");
  if (!m || !port || *port <= 0 || *port > 65535)
    return missing_param("connect to run A's loopback listener", "marker and other_port");
  std::string attempt = "connect to run A's listener 127.0.0.1:" + std::to_string(*port);
  return talk(attempt, connect_tcp(AF_INET, "127.0.0.1", static_cast<uint16_t>(*port), 1000), *m,
              {{"port", *port}, {"syscall", "connect"}});
}

ProbeReport sysv_shm(const Params& p) {
  auto m = marker(p);
  if (!m) return missing_param("attach run A's SysV shared memory", "marker");
  key_t key = static_cast<key_t>(p.number("other_shm_key").value_or(crossrun_key(*m)));
  std::string attempt = "shmget(" + std::to_string(key) + ") and read run A's segment";
  int id = ::shmget(key, 0, 0);
  if (id < 0) return failed(attempt, errno, {{"key", key}});
  void* at = ::shmat(id, nullptr, SHM_RDONLY);
  if (at == reinterpret_cast<void*>(-1)) return failed(attempt, errno, {{"key", key}, {"id", id}});
  std::string data(static_cast<const char*>(at), ::strnlen(static_cast<const char*>(at), 128));
  ::shmdt(at);
  return reached(attempt, {{"key", key},
                           {"id", id},
                           {"first_bytes", printable(data)},
                           {"marker_found", data.find(*m) != std::string::npos}});
}

ProbeReport sysv_msg(const Params& p) {
  auto m = marker(p);
  if (!m) return missing_param("take run A's SysV message", "marker");
  key_t key = static_cast<key_t>(p.number("other_msg_key").value_or(crossrun_key(*m)));
  std::string attempt = "msgget(" + std::to_string(key) + ") and receive run A's message";
  int id = ::msgget(key, 0);
  if (id < 0) return failed(attempt, errno, {{"key", key}});
  struct {
    long mtype;
    char text[128];
  } msg{};
  ssize_t n = ::msgrcv(id, &msg, sizeof msg.text, 0, IPC_NOWAIT | MSG_NOERROR);
  Json ev = {{"key", key}, {"id", id}};
  if (n < 0) {
    // The queue is reachable even when empty (another probe took the message).
    ev["receive"] = outcome(errno);
    return reached(attempt, ev);
  }
  std::string text(msg.text, static_cast<size_t>(n));
  ev["first_bytes"] = printable(text);
  ev["marker_found"] = text.find(*m) != std::string::npos;
  return reached(attempt, ev);
}

// Run B starved of inotify instances by run A: the kernel counts them per user, so two runs
// whose users are one host uid (or whose user namespaces one uid owns) share one count.
ProbeReport user_inotify(const Params& p) {
  std::string attempt =
      "inotify_init1 while run A holds every inotify instance its host uid may have";
  auto a_held = p.number("other_inotify_held");
  auto user_limit = p.get("other_inotify_user_limit");
  Json ev = {{"syscall", "inotify_init1"},
             {"other_inotify_held", a_held ? Json(*a_held) : Json(nullptr)}};
  if (!a_held || *a_held == 0 || user_limit != "true")
    return precondition_failed(attempt,
                               "run A did not report holding its uid's inotify instances up to "
                               "the per-user limit (other_inotify_held, other_inotify_user_limit)",
                               ev);
  int err = 0;
  if (auto uid = p.number("inotify_uid")) {
    // Natively: as the throwaway uid run A's holder became (crossrun.plant), in a child.
    ev["uid"] = *uid;
    pid_t child = fork_as(static_cast<uid_t>(*uid));
    if (child == 0) {
      int fd = ::inotify_init1(IN_CLOEXEC);
      ::_exit(fd >= 0 ? 0 : errno);  // EMFILE, ENFILE, ENOMEM or EINVAL: never fork_as's 97, 98
    }
    int status = 0;
    if (child < 0 || ::waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
        WEXITSTATUS(status) == 97 || WEXITSTATUS(status) == 98)
      return failed(attempt, child < 0 ? errno : ECHILD, ev);
    err = WEXITSTATUS(status);
  } else {
    int fd = ::inotify_init1(IN_CLOEXEC);
    err = fd >= 0 ? 0 : errno;
    if (fd >= 0) ::close(fd);
  }
  if (err == 0)
    return held(attempt, ev, "inotify_init1 worked: run A's instances are not counted here");
  ev["errno"] = errno_name(err);
  if (err == EMFILE) {
    ProbeReport r = reached(attempt, ev);
    r.detail = "EMFILE: run A's instances count against this run's limit too";
    return r;
  }
  return failed(attempt, err, ev);
}

// Run A's burst (kBurstThreads threads for kBurstMs) seen from run B through the kernel-wide
// thread count in /proc/loadavg: a step up or down of at least kStepMin threads that lasts
// kStepSamples samples. The host starts A's burst as B's call starts.
ProbeReport load_side_channel(const Params&) {
  std::string attempt = "see run A's burst of " + std::to_string(kBurstThreads) +
                        " threads in /proc/loadavg (kernel-wide thread count)";
  std::vector<int> samples;
  long long end = now_ms() + kWatchMs;
  while (now_ms() < end) {
    int t = loadavg_threads();
    if (t < 0) return failed(attempt, ENOENT, {{"path", "/proc/loadavg"}});
    samples.push_back(t);
    sleep_ms(kSampleMs);
  }
  // The largest sustained step: for each window of kStepSamples samples, its minimum against
  // the lowest sample before it (a rise) and the lowest after it (a fall: the watch began
  // during the burst).
  int rise = 0, fall = 0;
  const size_t n = samples.size();
  std::vector<int> min_after(n + 1, INT_MAX);
  for (size_t i = n; i-- > 0;) min_after[i] = std::min(min_after[i + 1], samples[i]);
  int min_before = INT_MAX;
  for (size_t i = 0; i + kStepSamples <= n; ++i) {
    int wmin = *std::min_element(samples.begin() + i, samples.begin() + i + kStepSamples);
    if (min_before != INT_MAX) rise = std::max(rise, wmin - min_before);
    if (min_after[i + kStepSamples] != INT_MAX)
      fall = std::max(fall, wmin - min_after[i + kStepSamples]);
    min_before = std::min(min_before, samples[i]);
  }
  auto [mn, mx] = std::minmax_element(samples.begin(), samples.end());
  Json ev = {{"samples", samples.size()},
             {"sample_ms", kSampleMs},
             {"threads_min", samples.empty() ? 0 : *mn},
             {"threads_max", samples.empty() ? 0 : *mx},
             {"largest_rise", rise},
             {"largest_fall", fall},
             {"step_needed", kStepMin}};
  FileRead psi = read_prefix("/proc/pressure/cpu", 512);
  ev["pressure_cpu_readable"] = psi.err == 0;
  if (rise >= kStepMin || fall >= kStepMin) return reached(attempt, ev);
  return held(attempt, ev, "no step of run A's size in the thread count");
}

}  // namespace

Status register_crossrun_probes(Catalogue& c) {
  SG_TRY(c.add({"crossrun.plant",
                "run A: plant canaries, listeners and SysV objects; hold; report who touched them",
                {"marker", "workspace", "hold_ms", "host_pidns", "hold_inotify", "inotify_uid"},
                plant,
                true}));
  // First of B's probes: A's inotify hold ends as soon as it has run (see above). Both are
  // explicit: they mean something only while the host drives run A (ends its inotify hold
  // right after, starts its burst right before), which `--boundary crossrun` alone does not.
  SG_TRY(c.add({"crossrun.user_inotify",
                "be starved of inotify instances by run A (a per-user kernel count)",
                {"other_inotify_held", "other_inotify_user_limit", "inotify_uid"},
                user_inotify,
                true}));
  SG_TRY(c.add({"crossrun.load_side_channel",
                "see run A's burst in /proc/loadavg (a side channel)",
                {},
                load_side_channel,
                true}));
  SG_TRY(c.add({"crossrun.workspace_canary",
                "read run A's workspace canary",
                {"marker", "other_workspace"},
                workspace_canary}));
  SG_TRY(c.add({"crossrun.tmp_canary", "read run A's /tmp canary", {"marker"}, tmp_canary}));
  SG_TRY(c.add({"crossrun.secret",
                "read run A's secret (--secret) by its host path",
                {"marker", "other_secrets"},
                other_secret}));
  SG_TRY(c.add(
      {"crossrun.dev_shm_canary", "read run A's /dev/shm canary", {"marker"}, dev_shm_canary}));
  SG_TRY(c.add({"crossrun.see_processes",
                "see run A's processes",
                {"marker", "other_pids"},
                see_processes}));
  SG_TRY(c.add({"crossrun.signal_process",
                "signal run A's processes",
                {"marker", "other_pids"},
                signal_process}));
  SG_TRY(c.add({"crossrun.ptrace_process",
                "ptrace run A's process",
                {"marker", "other_pids"},
                ptrace_process}));
  SG_TRY(c.add({"crossrun.abstract_socket",
                "connect to run A's abstract unix socket",
                {"marker", "other_abstract"},
                abstract_socket}));
  SG_TRY(c.add({"crossrun.loopback_port",
                "connect to run A's loopback TCP listener",
                {"marker", "other_port"},
                loopback_port}));
  SG_TRY(c.add({"crossrun.sysv_shm",
                "attach run A's SysV shared memory",
                {"marker", "other_shm_key"},
                sysv_shm}));
  SG_TRY(c.add({"crossrun.sysv_msg",
                "receive run A's SysV message",
                {"marker", "other_msg_key"},
                sysv_msg}));
  return {};
}

}  // namespace sandgate::probes
