// The microVM guest agent (providers/microvm.h): the supervisor binary as the guest's /init.
//
// It loads the few modules the cloud kernel has virtio-serial as, mounts the read-only base
// image and the run's workspace image (NVMe disks, found by their serial numbers; a third,
// sandgate-ro, when the run has read-only binds: binds=1 on its command line; sandgate-sec,
// the run's secrets, mounted read-only at /run/secrets: secrets=1), builds the
// calls' root from them (procfs, sysfs, cgroup2, a tmpfs /dev with the usual nodes, tmpfs
// /tmp, /var/tmp, /run and home), moves it to / and chroots there; then forks the ordinary
// supervisor loop (supervisor_main.cc) in the cgroup /agent and bridges its control socket to
// the virtio-serial port (guest_bridge.h). Each call is parked until the agent has put it in a
// cgroup of its own, /calls/call-<id>, with the grant the host sent (Call::guest_control),
// written and watched by the controller's own v2 backend, monitor and ladder running here
// (core/guest_call_control.h, controller/guest_control.h); when it ends, what they observed
// travels back with "exited" (the host's outcome is built from it), and whatever it left in
// the cgroup is killed. A resident process of the run (Call::resident: the agent's own memory,
// a server that detaches) goes to /main instead and outlives its exec; every "exited" carries
// what /agent and /main hold and the OOM kills in /main ("guest_resident").
//
// At "shutdown" (or when the host goes away) every other process is killed, the workspace is
// synced and unmounted, and the guest powers off: the host reads the image back afterwards.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "core/fd.h"
#include "core/files.h"
#include "providers/guest_bridge.h"
#include "providers/supervisor.h"
#include "providers/supervisor_protocol.h"

namespace sandgate::providers {
namespace {

constexpr char kNewRoot[] = "/newroot";
constexpr char kCallsCgroup[] = "/sys/fs/cgroup/calls";
constexpr char kMainCgroup[] = "/sys/fs/cgroup/main";
constexpr char kAgentCgroup[] = "/sys/fs/cgroup/agent";

int g_port = -1;  // the virtio-serial port, once open: setup errors are told to the host

[[noreturn]] void power_off() {
  ::sync();
  ::reboot(RB_POWER_OFF);
  ::_exit(1);  // pid 1 exiting panics the kernel; panic=-1 and -no-reboot end QEMU
}

[[noreturn]] void fail(const Error& e) {
  std::fprintf(stderr, "sandgate guest agent: %s\n", e.message().c_str());
  if (g_port >= 0) {
    Json j = error_to_json(Error(e).context_add("the microVM guest agent"));
    j["op"] = "error";
    (void)write_frame(g_port, {FrameType::kMessage, 0, dump_json(j)});
  }
  power_off();
}

void check(const Status& s) {
  if (!s.ok()) fail(s.error());
}

void do_mount(const char* source, const std::string& target, const char* type, unsigned long flags,
              const char* data = nullptr) {
  if (::mount(source, target.c_str(), type, flags, data) != 0)
    fail(sys_error(std::string("mount ") + type, target));
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

// Waits for a device the kernel probes asynchronously: /sys/<class_dir>/*/<file> == want.
std::string wait_for_device(const std::string& class_dir, const std::string& file,
                            const std::string& want) {
  for (int i = 0; i < 3000; ++i) {
    if (DIR* d = ::opendir(class_dir.c_str())) {
      std::string found;
      while (struct dirent* e = ::readdir(d)) {
        if (e->d_name[0] == '.') continue;
        auto text = read_file(class_dir + "/" + e->d_name + "/" + file, 4096);
        if (text.ok() && trimmed(*text) == want) found = e->d_name;
      }
      ::closedir(d);
      if (!found.empty()) {
        std::string dev = std::string("/dev/") + found;
        if (::access(dev.c_str(), F_OK) == 0) return dev;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  fail(logic_error("find device", "no device with " + file + " '" + want + "' after 30 s",
                   class_dir));
}

void load_modules() {
  auto order = read_file("/sandgate/modules/order", 1 << 16);
  if (!order.ok()) return;  // a kernel with everything built in
  size_t at = 0;
  while (at < order->size()) {
    size_t nl = order->find('\n', at);
    if (nl == std::string::npos) nl = order->size();
    std::string name = order->substr(at, nl - at);
    at = nl + 1;
    if (name.empty()) continue;
    std::string path = "/sandgate/modules/" + name;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(sys_error("open module", path));
    if (syscall(SYS_finit_module, fd, "", 0) != 0 && errno != EEXIST)
      fail(sys_error("load module", path));
    ::close(fd);
  }
}

void make_dev(const std::string& dev) {
  do_mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k");
  struct Node {
    const char* name;
    unsigned major, minor;
  };
  for (Node n : {Node{"null", 1, 3}, Node{"zero", 1, 5}, Node{"full", 1, 7}, Node{"random", 1, 8},
                 Node{"urandom", 1, 9}, Node{"tty", 5, 0}}) {
    std::string path = dev + "/" + n.name;
    if (::mknod(path.c_str(), S_IFCHR | 0666, makedev(n.major, n.minor)) != 0)
      fail(sys_error("mknod", path));
    ::chmod(path.c_str(), 0666);
  }
  for (auto [name, target] :
       {std::pair{"fd", "/proc/self/fd"}, std::pair{"stdin", "/proc/self/fd/0"},
        std::pair{"stdout", "/proc/self/fd/1"}, std::pair{"stderr", "/proc/self/fd/2"}})
    (void)::symlink(target, (dev + "/" + name).c_str());
  ::mkdir((dev + "/shm").c_str(), 01777);
  do_mount("tmpfs", dev + "/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
}

void load_module_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return;  // built in, or absent: the mount that needs it says which
    fail(sys_error("open module", path));
  }
  if (syscall(SYS_finit_module, fd, "", 0) != 0 && errno != EEXIST)
    fail(sys_error("load module", path));
  ::close(fd);
}

// The root for a run with read-only binds: an overlay whose lower layer is the read-only base
// and whose upper layer is a tmpfs, so that bind_entries() can make the mount points a
// destination needs (/opt/x where the base has no /opt) without touching the base. Made
// read-only again by bind_entries() before any call runs.
void mount_overlay_root(const std::string& base_dev, const std::string& root) {
  ::mkdir("/base", 0755);
  ::mkdir("/upper", 0755);
  do_mount(base_dev.c_str(), "/base", "squashfs", MS_RDONLY | MS_NOSUID | MS_NODEV);
  load_module_file("/sandgate/modules/overlay.ko");
  do_mount("tmpfs", "/upper", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m");
  ::mkdir("/upper/up", 0755);
  ::mkdir("/upper/work", 0755);
  do_mount("overlay", root, "overlay", MS_NOSUID | MS_NODEV,
           "lowerdir=/base,upperdir=/upper/up,workdir=/upper/work");
}

// Each entry of the binds image (make_bind_image: /<i> and a manifest "i<TAB>destination") at
// its destination under `root`, read-only, nosuid and nodev; a missing destination gets a mount
// point of the entry's kind, its missing parents directories of mode 0755. Then the root itself
// (the overlay) read-only: calls have no capability to remount it.
void bind_entries(const std::string& ro_dev, const std::string& root) {
  ::mkdir("/binds", 0755);
  do_mount(ro_dev.c_str(), "/binds", "squashfs", MS_RDONLY | MS_NOSUID | MS_NODEV);
  auto manifest = read_file("/binds/manifest", 1 << 20);
  if (!manifest.ok()) fail(manifest.error());
  size_t at = 0;
  while (at < manifest->size()) {
    size_t nl = manifest->find('\n', at);
    if (nl == std::string::npos) nl = manifest->size();
    std::string line = manifest->substr(at, nl - at);
    at = nl + 1;
    size_t tab = line.find('\t');
    if (tab == std::string::npos || line.size() < tab + 2 || line[tab + 1] != '/')
      fail(logic_error("read-only binds", "malformed manifest line", line));
    std::string source = "/binds/" + line.substr(0, tab);
    std::string target = root + line.substr(tab + 1);
    struct stat src;
    if (::lstat(source.c_str(), &src) != 0) fail(sys_error("stat bind entry", source));
    const bool dir = S_ISDIR(src.st_mode);
    for (size_t slash = target.find('/', root.size() + 1); slash != std::string::npos;
         slash = target.find('/', slash + 1)) {
      std::string parent = target.substr(0, slash);
      if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST)
        fail(sys_error("make the bind's parent directory", parent));
    }
    struct stat dst;
    if (::lstat(target.c_str(), &dst) != 0) {
      if (dir ? ::mkdir(target.c_str(), 0755) != 0
              : ::mknod(target.c_str(), S_IFREG | 0644, 0) != 0)
        fail(sys_error("make the bind's mount point", target));
    } else if (S_ISDIR(dst.st_mode) != dir) {
      fail(logic_error("read-only binds",
                       std::string("the destination is ") +
                           (dir ? "not a directory" : "a directory") +
                           " in the guest, the source " + (dir ? "is one" : "is a file"),
                       line.substr(tab + 1)));
    }
    do_mount(source.c_str(), target, nullptr, MS_BIND);
    do_mount(nullptr, target, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV);
  }
  do_mount(nullptr, root, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV);
}

void reap_all(int) {
  int saved = errno;
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  errno = saved;
}

std::string cgroup_stat(const std::string& dir, const std::string& file, const std::string& key) {
  auto text = read_file(dir + "/" + file, 1 << 16);
  if (!text.ok()) return "";
  if (key.empty()) return trimmed(*text);
  size_t at = text->find(key + " ");
  if (at == std::string::npos) return "";
  size_t end = text->find('\n', at);
  return text->substr(at + key.size() + 1, end - at - key.size() - 1);
}

uint64_t cgroup_number(const std::string& dir, const std::string& file, const std::string& key) {
  std::string text = cgroup_stat(dir, file, key);
  return text.empty() ? 0 : std::strtoull(text.c_str(), nullptr, 10);
}

// What the run holds outside its calls, as the guest's kernel counts it (core/exec_result.h,
// ResidentUsage): the agent with its supervisor, and the run's resident processes.
Json resident_usage() {
  return {{"memory_bytes", cgroup_number(kAgentCgroup, "memory.current", "") +
                               cgroup_number(kMainCgroup, "memory.current", "")},
          {"oom_kills", cgroup_number(kMainCgroup, "memory.events", "oom_kill")}};
}

// The network device of a guest that has one (share_host_network, test-only): its driver
// loaded, the first interface but lo given `cidr` (a /30) and up, the default route through
// `gateway` (the host's end of the tap). Plain ioctls: no netlink library in /init.
void configure_network(const std::string& spec) {
  size_t comma = spec.find(',');
  size_t slash = spec.find('/');
  if (comma == std::string::npos || slash == std::string::npos || slash > comma)
    fail(logic_error("network", "net= wants ADDRESS/PREFIX,GATEWAY", spec));
  std::string address = spec.substr(0, slash);
  int prefix = std::atoi(spec.substr(slash + 1, comma - slash - 1).c_str());
  std::string gateway = spec.substr(comma + 1);
  struct in_addr addr = {};
  struct in_addr gw = {};
  if (prefix < 1 || prefix > 32 || ::inet_pton(AF_INET, address.c_str(), &addr) != 1 ||
      ::inet_pton(AF_INET, gateway.c_str(), &gw) != 1)
    fail(logic_error("network", "net= wants ADDRESS/PREFIX,GATEWAY", spec));
  for (const char* m : {"failover.ko", "net_failover.ko", "virtio_net.ko"})
    load_module_file(std::string("/sandgate/modules/") + m);
  std::string ifname;
  for (int i = 0; i < 3000 && ifname.empty(); ++i) {
    if (DIR* d = ::opendir("/sys/class/net")) {
      while (auto* e = ::readdir(d))
        if (e->d_name[0] != '.' && std::strcmp(e->d_name, "lo") != 0) ifname = e->d_name;
      ::closedir(d);
    }
    if (ifname.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (ifname.empty()) fail(logic_error("network", "no network device after 30 s"));
  int sock = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) fail(sys_error("socket"));
  auto set = [&](unsigned long request, in_addr_t value, const char* what) {
    struct ifreq ifr {};
    std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
    auto* sin = reinterpret_cast<struct sockaddr_in*>(&ifr.ifr_addr);
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = value;
    if (::ioctl(sock, request, &ifr) != 0) fail(sys_error(what, ifname));
  };
  set(SIOCSIFADDR, addr.s_addr, "set the address of");
  set(SIOCSIFNETMASK, htonl(prefix == 32 ? 0xFFFFFFFFu : ~((1u << (32 - prefix)) - 1)),
      "set the netmask of");
  for (const std::string& name : {std::string("lo"), ifname}) {
    struct ifreq ifr {};
    std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
    if (::ioctl(sock, SIOCGIFFLAGS, &ifr) != 0) fail(sys_error("SIOCGIFFLAGS", name));
    ifr.ifr_flags |= IFF_UP;
    if (::ioctl(sock, SIOCSIFFLAGS, &ifr) != 0) fail(sys_error("bring up", name));
  }
  struct rtentry route {};
  auto* dst = reinterpret_cast<struct sockaddr_in*>(&route.rt_dst);
  auto* mask = reinterpret_cast<struct sockaddr_in*>(&route.rt_genmask);
  auto* via = reinterpret_cast<struct sockaddr_in*>(&route.rt_gateway);
  dst->sin_family = mask->sin_family = via->sin_family = AF_INET;
  via->sin_addr = gw;
  route.rt_flags = RTF_UP | RTF_GATEWAY;
  if (::ioctl(sock, SIOCADDRT, &route) != 0) fail(sys_error("add the default route via", gateway));
  ::close(sock);
}

}  // namespace

int run_guest_agent(int argc, char** argv, const GuestCallControlFactory& guest_control) {
  uid_t uid = 10001;
  gid_t gid = 10001;
  bool binds = false;    // a disk, sandgate-ro, holds read-only binds
  bool secrets = false;  // a disk, sandgate-sec, holds the run's secrets
  std::string network;   // ADDRESS/PREFIX,GATEWAY: a network device (share_host_network)
  for (int i = 2; i < argc; ++i) {
    if (std::strncmp(argv[i], "uid=", 4) == 0) uid = static_cast<uid_t>(std::atoi(argv[i] + 4));
    if (std::strncmp(argv[i], "gid=", 4) == 0) gid = static_cast<gid_t>(std::atoi(argv[i] + 4));
    if (std::strcmp(argv[i], "binds=1") == 0) binds = true;
    if (std::strcmp(argv[i], "secrets=1") == 0) secrets = true;
    if (std::strncmp(argv[i], "net=", 4) == 0) network = argv[i] + 4;
  }
  if (::getpid() != 1) {
    std::fprintf(stderr, "the guest agent runs only as pid 1 of a microVM\n");
    return 2;
  }
  struct sigaction sa = {};
  sa.sa_handler = reap_all;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  ::sigaction(SIGCHLD, &sa, nullptr);

  // The initramfs: what the agent needs to find its devices.
  ::mkdir("/proc", 0555);
  ::mkdir("/sys", 0555);
  ::mkdir("/dev", 0755);
  do_mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC);
  do_mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC);
  do_mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID | MS_NOEXEC);
  load_modules();
  std::string port_dev = wait_for_device("/sys/class/virtio-ports", "name", "sandgate");
  g_port = ::open(port_dev.c_str(), O_RDWR | O_CLOEXEC);
  if (g_port < 0) fail(sys_error("open the agent's port", port_dev));
  // After the port: a network that cannot be set up is told to the host.
  if (!network.empty()) configure_network(network);
  std::string base_dev = wait_for_device("/sys/class/nvme", "serial", "sandgate-base");
  std::string ws_dev = wait_for_device("/sys/class/nvme", "serial", "sandgate-ws");
  std::string ro_dev = binds ? wait_for_device("/sys/class/nvme", "serial", "sandgate-ro") : "";
  // /sys/class/nvme/nvmeN is the controller; its one namespace is the disk.
  base_dev += "n1";
  ws_dev += "n1";
  if (binds) ro_dev += "n1";
  std::string sec_dev =
      secrets ? wait_for_device("/sys/class/nvme", "serial", "sandgate-sec") + "n1" : "";

  // The calls' root.
  const std::string root = kNewRoot;
  ::mkdir(kNewRoot, 0755);
  if (binds)
    mount_overlay_root(base_dev, root);
  else
    do_mount(base_dev.c_str(), root, "squashfs", MS_RDONLY | MS_NOSUID | MS_NODEV);
  do_mount(ws_dev.c_str(), root + "/workspace", "ext4", MS_NOSUID | MS_NODEV);
  do_mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC);
  do_mount("sysfs", root + "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY);
  // favordynmods (Linux 6.0): moving a process into a cgroup then takes no RCU grace period,
  // which under TCG is tens of milliseconds on every call's path (each call's first process is
  // placed before it execs); forks and exits pay a little more. The guest's kernel is the run's
  // own, so this is ours to choose, unlike the host's mounts. A kernel without it mounts plain.
  if (::mount("cgroup2", (root + "/sys/fs/cgroup").c_str(), "cgroup2",
              MS_NOSUID | MS_NODEV | MS_NOEXEC, "favordynmods") != 0)
    do_mount("cgroup2", root + "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC);
  make_dev(root + "/dev");
  do_mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
  do_mount("tmpfs", root + "/var/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
  do_mount("tmpfs", root + "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
  std::string home_opts = "mode=0700,uid=" + std::to_string(uid) + ",gid=" + std::to_string(gid);
  do_mount("tmpfs", root + "/home/sandbox", "tmpfs", MS_NOSUID | MS_NODEV, home_opts.c_str());
  if (secrets) {
    ::mkdir((root + "/run/secrets").c_str(), 0755);
    do_mount(sec_dev.c_str(), root + "/run/secrets", "squashfs",
             MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC);
  }
  // Last: a destination below /tmp or the home lands on its tmpfs, not under it.
  if (binds) bind_entries(ro_dev, root);
  if (::chdir(kNewRoot) != 0) fail(sys_error("chdir", kNewRoot));
  do_mount(".", "/", nullptr, MS_MOVE);
  if (::chroot(".") != 0 || ::chdir("/") != 0) fail(sys_error("chroot", kNewRoot));

  // Pure cgroup v2: the agent's supervisor in /agent, the run's resident processes
  // (Call::resident) in /main, each call in /calls/call-<id>.
  check(write_file("/sys/fs/cgroup/cgroup.subtree_control", "+cpu +memory +pids +io"));
  check(make_dirs("/sys/fs/cgroup/agent", 0755));
  check(make_dirs(kMainCgroup, 0755));
  check(make_dirs(kCallsCgroup, 0755));
  check(
      write_file(std::string(kCallsCgroup) + "/cgroup.subtree_control", "+cpu +memory +pids +io"));

  auto pair = make_control_pair();
  if (!pair.ok()) fail(pair.error());
  pid_t child = ::fork();
  if (child < 0) fail(sys_error("fork the supervisor"));
  if (child == 0) {
    ::close(g_port);
    pair->first.reset();
    (void)write_file("/sys/fs/cgroup/agent/cgroup.procs", std::to_string(::getpid()));
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGCHLD, &dfl, nullptr);
    ::_exit(serve_supervisor(pair->second.get()));
  }
  pair->second.reset();

  // The controller's part for each call (core/guest_call_control.h): the call's grant written
  // to its cgroup here, the monitor and the ladder watching it, what they saw returned with
  // "exited". Made after the fork: it runs a thread (the monitor), which a forked child that
  // goes on to allocate must not have been copied from.
  std::unique_ptr<GuestCallControl> calls;
  if (guest_control) {
    auto made = guest_control();
    if (!made.ok()) fail(std::move(made).error().context_add("the calls' controller"));
    calls = std::move(made).value();
  }

  std::map<uint64_t, bool> host_wants_go;      // by call id: the host parks it itself
  std::map<uint64_t, std::string> refused;     // by call id: why it cannot run as granted
  std::set<uint64_t> resident;                 // by call id: a process of the run, not a call
  GuestBridgeHooks hooks;
  int control = pair->first.get();
  auto call_dir = [](uint64_t id) {
    return std::string(kCallsCgroup) + "/call-" + std::to_string(id);
  };
  hooks.to_supervisor = [&](Json& body) {
    if (body.value("op", "") != "exec") return;
    uint64_t id = body.value("id", uint64_t{0});
    host_wants_go[id] = body.value("wait_for_go", false);
    body["wait_for_go"] = true;  // parked until it is in its own cgroup
    if (body.value("resident", false)) {
      // It outlives the exec (a hold, a server that detaches): /main, never a call's cgroup,
      // whose leftovers are killed when the call ends.
      resident.insert(id);
      body.erase("guest_control");
      return;
    }
    Json grant;
    if (auto g = body.find("guest_control"); g != body.end()) {
      grant = std::move(*g);
      body.erase("guest_control");
    }
    if (calls) {
      if (auto begun = calls->begin(id, grant); !begun.ok())
        refused[id] = begun.error().message();
    } else {
      (void)make_dirs(call_dir(id), 0755);
      // Never quietly unbounded: a grant this agent cannot apply refuses the call.
      if (!grant.is_null())
        refused[id] = "this guest agent has no controller to apply the call's grant with";
    }
  };
  hooks.to_host = [&](Json& body, pid_t sender) {
    std::string op = body.value("op", "");
    uint64_t id = body.value("id", uint64_t{0});
    if (op == "started") {
      body["guest_pid"] = sender;
      body["guest_cgroup"] = calls ? calls->cgroup_of(id) : "/calls/call-" + std::to_string(id);
      Status placed;
      if (resident.count(id))
        placed = write_file(std::string(kMainCgroup) + "/cgroup.procs", std::to_string(sender));
      else if (auto r = refused.find(id); r != refused.end())
        placed = logic_error("grant the call's cgroup", r->second, call_dir(id));
      else if (calls)
        placed = calls->place(id, sender);
      else
        placed = write_file(call_dir(id) + "/cgroup.procs", std::to_string(sender));
      if (!placed.ok()) {
        // Killed parked: it never runs outside its cgroup or without its grant.
        (void)send_message(control, {{"op", "kill"}, {"id", id}, {"signal", SIGKILL}});
        body["guest_cgroup_error"] = placed.error().message();
      } else if (!host_wants_go[id]) {
        (void)send_message(control, {{"op", "go"}, {"id", id}});
      }
    } else if (op == "exited" || op == "exec_failed") {
      body["guest_resident"] = resident_usage();
      if (resident.erase(id)) {
        // A resident process's own exit; what it started lives on in /main.
      } else if (calls) {
        // Its last reading, its leftovers killed, its cgroup removed.
        Json seen = calls->end(id);
        if (!seen.is_null()) body["guest_observation"] = std::move(seen);
      } else {
        std::string dir = call_dir(id);
        body["guest_cgroup_stats"] = {
            {"memory_peak", cgroup_stat(dir, "memory.peak", "")},
            {"cpu_usage_usec", cgroup_stat(dir, "cpu.stat", "usage_usec")},
            {"pids_peak", cgroup_stat(dir, "pids.peak", "")}};
        (void)write_file(dir + "/cgroup.kill", "1");
        for (int i = 0; i < 100 && ::rmdir(dir.c_str()) != 0 && errno == EBUSY; ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      host_wants_go.erase(id);
      refused.erase(id);
    }
  };
  std::string why = run_guest_bridge(control, g_port, hooks);
  std::fprintf(stderr, "sandgate guest agent: %s; powering off\n", why.c_str());
  // Everything but us, then the workspace clean on its disk for the host to read back.
  ::kill(-1, SIGKILL);
  for (int i = 0; i < 200 && ::waitpid(-1, nullptr, WNOHANG) >= 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::sync();
  if (::umount2("/workspace", 0) != 0) ::umount2("/workspace", MNT_DETACH);
  power_off();
}

}  // namespace sandgate::providers
