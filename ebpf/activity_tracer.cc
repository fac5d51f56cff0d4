#include "ebpf/activity_tracer.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

#include "ebpf/activity.h"
#include "ebpf/activity.skel.h"

namespace sandgate::ebpf {

std::vector<std::string> ActivityOptions::default_kernel_prefixes() {
  return {"/proc/", "/root/", "/home/", "/etc/shadow", "/etc/ssh/", "/run/", "/var/run/"};
}

bool sensitive_path(const std::string& path) {
  // fnmatch without FNM_PATHNAME: `*` also matches '/', so "/run/*.sock" covers
  // /run/podman/podman.sock.
  static const char* const kPatterns[] = {
      "/proc/*/environ", "/proc/*/mem", "/root/*",       "/home/*",         "/etc/shadow*",
      "/etc/ssh/*",      "/run/secrets/*", "/run/*.sock", "/var/run/*.sock",
  };
  for (const char* p : kPatterns)
    if (::fnmatch(p, path.c_str(), 0) == 0) return true;
  return false;
}

Result<uint64_t> cgroup_id_of(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return sys_error("stat", dir);
  if (!S_ISDIR(st.st_mode)) return Error{ENOTDIR, "cgroup id", dir, "not a directory"};
  return static_cast<uint64_t>(st.st_ino);
}

namespace {

std::string family_name(int family) {
  switch (family) {
    case AF_INET: return "inet";
    case AF_INET6: return "inet6";
    case AF_UNIX: return "unix";
    default: return "af" + std::to_string(family);
  }
}

std::string protocol_name(int family, int type, int protocol) {
  if (family == AF_UNIX) return type == SOCK_DGRAM ? "unix-dgram" : type == SOCK_STREAM ? "unix-stream" : "unix";
  if (type == SOCK_RAW) return "raw";
  if (protocol == IPPROTO_TCP) return "tcp";
  if (protocol == IPPROTO_UDP) return "udp";
  if (protocol == IPPROTO_ICMP || protocol == IPPROTO_ICMPV6) return "icmp";
  return protocol == 0 ? "" : "ip" + std::to_string(protocol);
}

// The sockaddr the process passed, as far as the tracer copied it.
void decode_addr(const sg_event& e, TracedConnect& c) {
  sa_family_t family = 0;
  if (e.addr_len >= sizeof family) std::memcpy(&family, e.addr, sizeof family);
  c.family = family_name(family);
  char text[INET6_ADDRSTRLEN] = {};
  if (family == AF_INET && e.addr_len >= sizeof(sockaddr_in)) {
    sockaddr_in sin;
    std::memcpy(&sin, e.addr, sizeof sin);
    ::inet_ntop(AF_INET, &sin.sin_addr, text, sizeof text);
    c.address = text;
    c.port = ntohs(sin.sin_port);
  } else if (family == AF_INET6 && e.addr_len >= sizeof(sockaddr_in6)) {
    sockaddr_in6 sin6;
    std::memcpy(&sin6, e.addr, sizeof sin6);
    ::inet_ntop(AF_INET6, &sin6.sin6_addr, text, sizeof text);
    c.address = text;
    c.port = ntohs(sin6.sin6_port);
  } else if (family == AF_UNIX && e.addr_len > sizeof family) {
    // sun_path as far as copied (SG_ADDR_MAX - 2 bytes); abstract names start with NUL.
    const char* p = reinterpret_cast<const char*>(e.addr) + sizeof family;
    size_t n = e.addr_len - sizeof family;
    if (p[0] == '\0') {
      c.address = "@" + std::string(p + 1, ::strnlen(p + 1, n - 1));
    } else {
      c.address = std::string(p, ::strnlen(p, n));
    }
  }
  c.protocol = protocol_name(family, e.sock_type, e.protocol);
}

std::string bounded(const char* s, size_t max) { return std::string(s, ::strnlen(s, max)); }

ActivityEvent decode(const sg_event& e) {
  ActivityEvent out;
  out.cgroup_id = e.cgroup_id;
  out.pid = static_cast<pid_t>(e.pid);
  switch (e.kind) {
    case SG_EV_EXEC: {
      out.kind = ActivityEvent::Kind::kExec;
      out.exec.pid = e.pid;
      out.exec.ppid = e.ppid;
      out.exec.path = bounded(e.path, sizeof e.path);
      size_t n = std::min<size_t>(e.args_len, sizeof e.args);
      for (size_t i = 0; i < n;) {
        size_t len = ::strnlen(e.args + i, n - i);
        out.exec.argv.emplace_back(e.args + i, len);
        i += len + 1;
      }
      out.exec.args_cut = (e.flags & SG_EVF_ARGS_CUT) != 0;
      break;
    }
    case SG_EV_FORK:
      out.kind = ActivityEvent::Kind::kFork;
      out.exec.pid = e.pid;
      out.exec.ppid = e.ppid;
      break;
    case SG_EV_EXIT:
      out.kind = ActivityEvent::Kind::kExit;
      out.exit_status = e.ret;
      break;
    case SG_EV_CONNECT:
    case SG_EV_SENDTO:
      out.kind = e.kind == SG_EV_CONNECT ? ActivityEvent::Kind::kConnect : ActivityEvent::Kind::kSendto;
      out.connect.pid = e.pid;
      out.connect.syscall = e.kind == SG_EV_CONNECT ? "connect" : "sendto";
      out.connect.err = e.ret < 0 ? -e.ret : 0;
      decode_addr(e, out.connect);
      break;
    case SG_EV_OPEN:
      out.kind = ActivityEvent::Kind::kOpen;
      out.open.pid = e.pid;
      out.open.path = bounded(e.path, sizeof e.path);
      out.open.flags = static_cast<int>(e.open_flags);
      out.open.err = e.ret < 0 ? -e.ret : 0;
      break;
  }
  return out;
}

template <typename T>
void keep(std::vector<T>& list, uint64_t& not_kept, T value) {
  if (list.size() < kTracedKeep) list.push_back(std::move(value));
  else ++not_kept;
}

void add(TracedActivity& a, const ActivityEvent& e) {
  switch (e.kind) {
    case ActivityEvent::Kind::kExec: keep(a.execs, a.execs_not_kept, e.exec); break;
    case ActivityEvent::Kind::kFork: ++a.forks; break;
    case ActivityEvent::Kind::kExit: ++a.exits; break;
    case ActivityEvent::Kind::kConnect:
    case ActivityEvent::Kind::kSendto: keep(a.connects, a.connects_not_kept, e.connect); break;
    case ActivityEvent::Kind::kOpen:
      if (sensitive_path(e.open.path)) keep(a.sensitive_opens, a.opens_not_kept, e.open);
      break;
  }
}

}  // namespace

ActivityTracer::~ActivityTracer() {
  if (ring_) ring_buffer__free(ring_);
  if (skel_) activity_bpf__destroy(skel_);
}

Result<std::unique_ptr<ActivityTracer>> ActivityTracer::open(const ActivityOptions& options) {
  const auto& prefixes = options.kernel_prefixes;
  if (prefixes.size() > SG_MAX_PREFIXES)
    return Error{EINVAL, "activity tracer", "", "at most " + std::to_string(SG_MAX_PREFIXES) + " path prefixes"};
  std::unique_ptr<ActivityTracer> t(new ActivityTracer());
  t->skel_ = activity_bpf__open();
  if (!t->skel_) return sys_error(errno, "open the activity tracer's BPF object");
  auto* ro = t->skel_->rodata;
  ro->n_prefixes = static_cast<__u32>(prefixes.size());
  for (size_t i = 0; i < prefixes.size(); ++i) {
    if (prefixes[i].empty() || prefixes[i].size() >= SG_PREFIX_MAX)
      return Error{EINVAL, "activity tracer", prefixes[i],
                   "a path prefix must have 1 to " + std::to_string(SG_PREFIX_MAX - 1) + " bytes"};
    ro->prefix_len[i] = static_cast<__u32>(prefixes[i].size());
    std::memcpy(const_cast<char*>(ro->prefixes[i]), prefixes[i].data(), prefixes[i].size());
  }
  if (int err = bpf_map__set_max_entries(t->skel_->maps.events, static_cast<__u32>(options.ring_bytes)))
    return sys_error(-err, "size the activity ring buffer", std::to_string(options.ring_bytes));
  if (int err = activity_bpf__load(t->skel_))
    return sys_error(-err, "load the activity tracer (BPF verifier or permission)");
  if (int err = activity_bpf__attach(t->skel_))
    return sys_error(-err, "attach the activity tracer (tp_btf sched_process_*, sys_enter/exit)");
  // Attached once to prove they attach; detached until a cgroup is watched (watch()).
  t->detach_watch_programs();
  t->ring_ = ring_buffer__new(
      bpf_map__fd(t->skel_->maps.events),
      [](void* ctx, void* data, size_t size) {
        static_cast<ActivityTracer*>(ctx)->on_event(data, size);
        return 0;
      },
      t.get(), nullptr);
  if (!t->ring_) return sys_error(errno, "open the activity ring buffer");
  return t;
}

// The programs every process on the host (or every context switch) passes through, attached
// only while something is watched.
std::vector<std::pair<bpf_program*, bpf_link**>> ActivityTracer::watch_programs() {
  auto& p = skel_->progs;
  auto& l = skel_->links;
  return {{p.sys_enter, &l.sys_enter},
          {p.sys_exit, &l.sys_exit},
          {p.on_wakeup, &l.on_wakeup},
          {p.on_wakeup_new, &l.on_wakeup_new},
          {p.on_switch, &l.on_switch}};
}

Status ActivityTracer::watch(uint64_t cgroup_id) {
  std::lock_guard lock(mu_);
  if (watched_.empty()) {
    for (auto [prog, link] : watch_programs()) {
      *link = bpf_program__attach(prog);
      if (!*link) {
        int err = errno;
        detach_watch_programs();
        return sys_error(err, std::string("attach ") + bpf_program__name(prog));
      }
    }
  }
  __u8 one = 1;
  if (bpf_map__update_elem(skel_->maps.watched, &cgroup_id, sizeof cgroup_id, &one, sizeof one, BPF_ANY) != 0) {
    int err = errno;
    if (watched_.empty()) detach_watch_programs();
    return sys_error(err, "watch cgroup", std::to_string(cgroup_id));
  }
  ++watched_[cgroup_id];
  return {};
}

void ActivityTracer::unwatch(uint64_t cgroup_id) {
  std::lock_guard lock(mu_);
  auto it = watched_.find(cgroup_id);
  if (it == watched_.end()) return;
  if (--it->second > 0) return;
  watched_.erase(it);
  (void)bpf_map__delete_elem(skel_->maps.watched, &cgroup_id, sizeof cgroup_id, 0);
  if (watched_.empty()) detach_watch_programs();
}

void ActivityTracer::detach_watch_programs() {
  for (auto [prog, link] : watch_programs()) {
    bpf_link__destroy(*link);
    *link = nullptr;
  }
}

bool ActivityTracer::syscalls_attached() const {
  std::lock_guard lock(mu_);
  return skel_->links.sys_enter != nullptr;
}

uint64_t ActivityTracer::lost() const {
  return __atomic_load_n(&skel_->bss->dropped, __ATOMIC_RELAXED);
}

uint64_t ActivityTracer::unattributed() const {
  std::lock_guard lock(mu_);
  return unattributed_;
}

void ActivityTracer::begin(uint64_t cgroup_id) {
  std::lock_guard lock(mu_);
  drain_locked(nullptr);  // what an earlier holder of this id left is not this call's
  (void)bpf_map__delete_elem(skel_->maps.runq, &cgroup_id, sizeof cgroup_id, 0);
  calls_[cgroup_id] = Call{{}, lost()};
}

TracedActivity ActivityTracer::end(uint64_t cgroup_id) {
  std::lock_guard lock(mu_);
  drain_locked(nullptr);
  auto it = calls_.find(cgroup_id);
  if (it == calls_.end()) return {};
  TracedActivity a = std::move(it->second.activity);
  a.lost = lost() - it->second.lost_at_begin;
  sg_runq q{};
  if (bpf_map__lookup_elem(skel_->maps.runq, &cgroup_id, sizeof cgroup_id, &q, sizeof q, 0) == 0) {
    (void)bpf_map__delete_elem(skel_->maps.runq, &cgroup_id, sizeof cgroup_id, 0);
    a.runq_delay_ns = q.total_ns;
    a.runq_waits = q.waits;
    a.runq_delay_max_ns = q.max_ns;
  }
  calls_.erase(it);
  return a;
}

RunqSoFar ActivityTracer::runq(uint64_t cgroup_id) const {
  // No lock: the map is the kernel's, and a monitor thread must not wait for a drain.
  sg_runq q{};
  if (bpf_map__lookup_elem(skel_->maps.runq, &cgroup_id, sizeof cgroup_id, &q, sizeof q, 0) != 0)
    return RunqSoFar{};  // no wait yet
  return RunqSoFar{q.total_ns, q.waits, q.max_ns};
}

void ActivityTracer::drain(const std::function<void(const ActivityEvent&)>& sink) {
  std::lock_guard lock(mu_);
  drain_locked(sink ? &sink : nullptr);
}

void ActivityTracer::drain_locked(const std::function<void(const ActivityEvent&)>* sink) {
  sink_ = sink;
  (void)ring_buffer__consume(ring_);
  sink_ = nullptr;
}

void ActivityTracer::on_event(const void* data, size_t size) {
  if (size < sizeof(sg_event)) return;
  sg_event raw;
  std::memcpy(&raw, data, sizeof raw);
  ActivityEvent e = decode(raw);
  if (sink_) (*sink_)(e);
  auto it = calls_.find(e.cgroup_id);
  if (it == calls_.end()) {
    ++unattributed_;
    return;
  }
  add(it->second.activity, e);
}

}  // namespace sandgate::ebpf
