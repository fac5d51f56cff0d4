// The microvm provider (see microvm.h for the design).
#include "providers/microvm.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "core/host_features.h"
#include "core/kvm_check.h"
#include "core/log.h"
#include "core/process.h"
#include "providers/guest_bridge.h"
#include "providers/guest_image.h"
#include "providers/supervised_environment.h"
#include "providers/supervisor_protocol.h"

extern char** environ;

namespace sandgate::providers {
namespace {

constexpr char kHome[] = "/home/sandbox";
constexpr uint64_t kDefaultGuestMemory = uint64_t{1} << 30;
constexpr uint64_t kQemuOverhead = uint64_t{192} << 20;  // QEMU's own RSS beside guest RAM
constexpr uint64_t kMinGuestMemory = uint64_t{384} << 20;
constexpr auto kKvmBootDeadline = std::chrono::seconds(30);
constexpr auto kTcgBootDeadline = std::chrono::seconds(180);

std::string find_qemu() {
  return find_on_path("qemu-system-x86_64", "/usr/local/bin:/usr/bin:/bin").value_or("");
}

std::string kvm_failed_marker(const std::string& kernel_version) {
  return guest_cache_dir() + "/kvm-boot-failed-" + kernel_version;
}

// The accelerator for the next guest, and why.
std::pair<std::string, std::string> choose_accel(const HostPaths& paths,
                                                 const std::string& kernel_version,
                                                 const KvmCheckResult* known = nullptr) {
  if (const char* forced = std::getenv("SANDGATE_MICROVM_ACCEL")) {
    std::string f = forced;
    if (f == "kvm" || f == "tcg") return {f, "SANDGATE_MICROVM_ACCEL=" + f};
  }
  if (::access(kvm_failed_marker(kernel_version).c_str(), F_OK) == 0)
    return {"tcg", "an earlier KVM guest of this kernel did not boot (" +
                       kvm_failed_marker(kernel_version) + ")"};
  static std::mutex mu;
  static std::optional<KvmCheckResult> checked;
  std::lock_guard lock(mu);
  if (known) checked = *known;
  if (!checked) checked = check_kvm(paths);
  if (checked->verdict == KvmVerdict::kUsable) return {"kvm", "kvm check: " + describe(*checked)};
  return {"tcg", "kvm check: " + describe(*checked)};
}

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + "M"; }

Result<std::string> supervisor_binary(const ProviderOptions& o) {
  std::string exe = o.supervisor_exe.empty() ? "/proc/self/exe" : o.supervisor_exe;
  char buf[PATH_MAX];
  if (!::realpath(exe.c_str(), buf)) return sys_error("realpath supervisor binary", exe);
  return std::string(buf);
}

std::string tail_of(const std::string& path) {
  auto text = read_file(path, 1 << 20);
  if (!text.ok() || text->empty()) return "(no console output)";
  std::string t = *text;
  std::erase(t, '\r');
  if (t.size() > 1500) t = "..." + t.substr(t.size() - 1500);
  return t;
}

Result<UniqueFd> connect_unix(const std::string& path, ChildProcess& qemu, Duration within) {
  auto until = std::chrono::steady_clock::now() + within;
  for (;;) {
    UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!s.valid()) return sys_error("socket");
    struct sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path) return logic_error("connect", "path too long", path);
    std::memcpy(addr.sun_path, path.c_str(), path.size());
    if (::connect(s.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof addr) == 0) return s;
    auto st = qemu.wait_for(std::chrono::milliseconds(0));
    if (st.ok() && st->has_value())
      return logic_error("start QEMU", "QEMU exited (" + (*st)->describe() +
                                           ") before its agent socket was there");
    if (std::chrono::steady_clock::now() > until)
      return sys_error("connect to the guest agent's socket", path);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The host's TSC rate in kHz, measured once against CLOCK_MONOTONIC_RAW over 50 ms; nullopt
// when it is not usable as the TCG guest's clock: not x86-64, or a TSC that is not constant
// (constant_tsc) or stops in deep sleep (nonstop_tsc). Under TCG, QEMU's guest rdtsc reads
// the host's counter, so this is the guest's TSC rate.
std::optional<uint64_t> host_tsc_khz() {
#if defined(__x86_64__)
  static const std::optional<uint64_t> khz = []() -> std::optional<uint64_t> {
    auto cpuinfo = read_file("/proc/cpuinfo", 1 << 20);
    if (!cpuinfo.ok()) return std::nullopt;
    auto flags_at = cpuinfo->find("\nflags");
    if (flags_at == std::string::npos) return std::nullopt;
    std::string flags = cpuinfo->substr(flags_at, cpuinfo->find('\n', flags_at + 1) - flags_at);
    flags += " ";
    if (flags.find(" constant_tsc ") == std::string::npos ||
        flags.find(" nonstop_tsc ") == std::string::npos)
      return std::nullopt;
    // One reading of both clocks, bracketed by two TSC reads: of a few, the narrowest (the
    // one no preemption fell into) is kept.
    auto sample = [](uint64_t& tsc, int64_t& ns) {
      uint64_t best_width = ~uint64_t{0};
      for (int i = 0; i < 8; ++i) {
        struct timespec ts;
        uint64_t a = __rdtsc();
        ::clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
        uint64_t b = __rdtsc();
        if (b - a < best_width) {
          best_width = b - a;
          tsc = a + (b - a) / 2;
          ns = int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
        }
      }
    };
    uint64_t t0 = 0, t1 = 0;
    int64_t n0 = 0, n1 = 0;
    sample(t0, n0);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    sample(t1, n1);
    if (n1 <= n0 || t1 <= t0) return std::nullopt;
    uint64_t khz =
        static_cast<uint64_t>(static_cast<double>(t1 - t0) * 1e6 / static_cast<double>(n1 - n0));
    if (khz < 100000 || khz > 20000000) return std::nullopt;  // not a believable rate
    return khz;
  }();
  return khz;
#else
  return std::nullopt;
#endif
}

// The guest's network device for share_host_network (test-only): a tap in the launcher's
// network namespace (in `sandgate probe`, the lab's), its own /30 there, and the guest's
// address and gateway for the agent. Not persistent: it goes with its last descriptor (QEMU's
// and ours), so no crash leaves it behind.
struct GuestTap {
  UniqueFd fd;
  std::string name;
  std::string guest_cidr;  // "203.0.113.130/30"
  std::string gateway;     // the tap's own address, "203.0.113.129"
};

Status set_ipv4(int sock, const std::string& ifname, unsigned long request, in_addr_t addr) {
  struct ifreq ifr {};
  std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  auto* sin = reinterpret_cast<struct sockaddr_in*>(&ifr.ifr_addr);
  sin->sin_family = AF_INET;
  sin->sin_addr.s_addr = addr;
  if (::ioctl(sock, request, &ifr) != 0) return sys_error("configure the guest's tap", ifname);
  return {};
}

// The /30s of 203.0.113.128/26 (TEST-NET-3, the lab's range; never the machine's own), the
// first one no interface of this namespace holds yet.
Result<GuestTap> make_guest_tap() {
  static std::mutex mu;  // two runs of this process picking at once
  std::lock_guard lock(mu);
  GuestTap tap;
  tap.fd = UniqueFd(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
  if (!tap.fd.valid()) return sys_error("open /dev/net/tun for the guest's network");
  struct ifreq ifr {};
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  std::strncpy(ifr.ifr_name, "sgvm%d", IFNAMSIZ - 1);
  if (::ioctl(tap.fd.get(), TUNSETIFF, &ifr) != 0) return sys_error("make the guest's tap");
  tap.name = ifr.ifr_name;
  std::set<in_addr_t> taken;
  struct ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return sys_error("getifaddrs");
  for (auto* a = list; a; a = a->ifa_next)
    if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET)
      taken.insert(reinterpret_cast<struct sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr);
  ::freeifaddrs(list);
  std::optional<uint32_t> base;
  for (uint32_t net = 0xCB007180; net < 0xCB0071C0; net += 4)  // 203.0.113.128 .. .188
    if (!taken.count(htonl(net + 1)) && !taken.count(htonl(net + 2))) {
      base = net;
      break;
    }
  if (!base) return logic_error("guest network", "no free /30 left in 203.0.113.128/26");
  UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return sys_error("socket");
  SG_TRY(set_ipv4(sock.get(), tap.name, SIOCSIFADDR, htonl(*base + 1)));
  SG_TRY(set_ipv4(sock.get(), tap.name, SIOCSIFNETMASK, htonl(0xFFFFFFFC)));
  std::strncpy(ifr.ifr_name, tap.name.c_str(), IFNAMSIZ - 1);
  if (::ioctl(sock.get(), SIOCGIFFLAGS, &ifr) != 0) return sys_error("SIOCGIFFLAGS", tap.name);
  ifr.ifr_flags |= IFF_UP;
  if (::ioctl(sock.get(), SIOCSIFFLAGS, &ifr) != 0) return sys_error("bring up", tap.name);
  auto dotted = [](uint32_t host_order) {
    struct in_addr a = {};
    a.s_addr = htonl(host_order);
    char buf[INET_ADDRSTRLEN];
    return std::string(::inet_ntop(AF_INET, &a, buf, sizeof buf));
  };
  tap.gateway = dotted(*base + 1);
  tap.guest_cidr = dotted(*base + 2) + "/30";
  return tap;
}

}  // namespace

MicrovmHost microvm_host(const HostPaths& paths, const KvmCheckResult* kvm) {
  MicrovmHost h;
  h.qemu = find_qemu();
  auto kernel = find_guest_kernel();
  if (kernel.ok()) h.kernel = kernel->image;
  if (h.qemu.empty()) {
    h.ready =
        logic_error("microvm provider",
                    "qemu-system-x86_64 is not installed (ci/bootstrap installs qemu-system-x86)");
  } else if (!kernel.ok()) {
    h.ready = kernel.error();
  } else if (!find_on_path("mksquashfs", "/usr/local/bin:/usr/bin:/bin")) {
    h.ready = logic_error("microvm provider",
                          "mksquashfs is not installed (ci/bootstrap installs squashfs-tools)");
  } else if (::geteuid() != 0) {
    h.ready = logic_error("microvm provider",
                          "needs root (the run's cgroups, the workspace image's read-back mount)");
  }
  if (kernel.ok()) std::tie(h.accel, h.accel_why) = choose_accel(paths, kernel->version, kvm);
  return h;
}

const ProviderInfo& MicrovmProvider::static_info() {
  static const ProviderInfo info{
      "microvm",
      "QEMU virtual machine with its own kernel (KVM where a guest runs, TCG otherwise): "
      "read-only base image, no network device, sandgate's supervisor as guest agent",
      /*unsafe=*/false,
      {Capability::kKernelSeparate, Capability::kFsIsolated, Capability::kFsReadonlyBase,
       Capability::kNetNone, Capability::kCredsScrubbedEnv, Capability::kProcPidNs,
       Capability::kProcSeccomp, Capability::kProcNoNewPrivs, Capability::kProcNoCaps,
       Capability::kIpcIsolated, Capability::kEphemeralWorkspace, Capability::kProcLandlock},
      /*opt_in=*/true,
      /*only_weakenings=*/{Weakening::kShareHostNetwork}};
  return info;
}

Result<std::unique_ptr<Provider>> MicrovmProvider::make(const ProviderOptions& options) {
  return std::unique_ptr<Provider>(new MicrovmProvider(options));
}

Status MicrovmProvider::available() const {
  MicrovmHost h = microvm_host(options_.paths);
  return h.ready;
}

Result<std::unique_ptr<Environment>> MicrovmProvider::create(const EnvSpec& spec) {
  SG_ASSIGN_OR_RETURN(auto env, create_vm(spec));
  return std::unique_ptr<Environment>(std::move(env));
}

Result<std::unique_ptr<MicrovmEnvironment>> MicrovmProvider::create_vm(const EnvSpec& spec) {
  SG_TRY(available());
  // The one weakening a guest takes: share_host_network, a network device on the launcher's
  // network. The others are settings of the host's jail, which the guest does not have.
  for (auto w : spec.weakenings)
    if (!weakened(static_info().only_weakenings, w))
      return logic_error("create environment",
                         "the microvm provider has no test-only weakening " + to_string(w) +
                             " (only share_host_network: a network device on the launcher's "
                             "network)");
  SG_TRY(check_weakenings_allowed(spec.weakenings, options_.self_test_weakenings, "microvm"));
  SG_TRY(refuse_allowlist("microvm", spec.network));
  if (!spec.image.empty())
    return logic_error("create environment",
                       "the microvm provider boots its own base image; --image is not supported");
  if (!spec.base_paths.empty())
    return logic_error("create environment",
                       "the microvm provider boots its own base image (the preset 'minimal' of "
                       "--base-path); a narrowed base is not supported");
  // --ro-bind: no host directory is shared into the guest; each source is copied into an image
  // of the run's own (make_bind_image), checked here before anything is made.
  SG_TRY(check_guest_binds(spec.readonly_mounts));
  for (const auto& secret : spec.secrets) {
    SG_TRY(check_secret_name(secret.name));
    if (secret.value.size() > kMaxSecretBytes)
      return logic_error("secret " + secret.name, "larger than 1 MiB");
  }
  if (spec.uid == 0 || spec.uid >= 65536 || spec.gid >= 65536)
    return logic_error("create environment",
                       "uid/gid inside must be in 1..65535 (got " + std::to_string(spec.uid) + ")");
  uint64_t guest_memory = kDefaultGuestMemory;
  if (spec.ceiling.memory_bytes) {
    if (*spec.ceiling.memory_bytes < kMinGuestMemory + kQemuOverhead)
      return logic_error("create environment",
                         "the memory ceiling (" + mib(*spec.ceiling.memory_bytes) +
                             ") is below what a microVM needs (" +
                             mib(kMinGuestMemory + kQemuOverhead) + ": guest RAM plus QEMU)");
    guest_memory = *spec.ceiling.memory_bytes - kQemuOverhead;
  }
  long host_cpus = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  int vcpus = static_cast<int>(std::clamp<double>(std::ceil(spec.ceiling.cpus.value_or(1.0)), 1.0,
                                                  static_cast<double>(host_cpus)));

  // Cached inputs first: a failure here leaves no run behind.
  std::string qemu = find_qemu();
  SG_ASSIGN_OR_RETURN(GuestKernel kernel, find_guest_kernel());
  SG_ASSIGN_OR_RETURN(std::string exe, supervisor_binary(options_));
  const std::string cache = guest_cache_dir();
  SG_ASSIGN_OR_RETURN(std::string initramfs, guest_initramfs(cache, kernel, exe));
  SG_ASSIGN_OR_RETURN(std::string base, guest_base_image(cache, spec.uid, spec.gid));
  auto [accel, accel_why] = choose_accel(options_.paths, kernel.version);

  // The guest's environment for calls, as the jail's.
  SupervisorConfig config;
  config.contained = true;
  config.guest = true;
  config.jail.workspace = "/workspace";
  config.jail.home = kHome;
  config.jail.uid = spec.uid;
  config.jail.gid = spec.gid;
  config.default_cwd = "/workspace";
  // Landlock: the guest kernel (Debian's cloud kernel) has it in its default LSM list; the
  // guest's supervisor builds the jail's ruleset for its ABI (2 on 6.1: files, no TCP rules).
  std::string run_id = spec.run_id.empty() ? new_run_id() : spec.run_id;
  config.base_env = {"PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
                     std::string("HOME=") + kHome,
                     "USER=sandbox",
                     "LOGNAME=sandbox",
                     "SHELL=/bin/sh",
                     "TMPDIR=/tmp",
                     "LANG=C.UTF-8",
                     "SANDGATE_RUN_ID=" + run_id};
  SG_ASSIGN_OR_RETURN(auto allowed, resolve_env_allowlist(spec.env, environ));
  config.base_env = merge_env(std::move(config.base_env), allowed);
  if (!spec.secrets.empty())
    config.base_env = merge_env(std::move(config.base_env), {"SANDGATE_SECRETS_DIR=/run/secrets"});

  for (int attempt = 0; attempt < 2; ++attempt) {
    EnvSpec s = spec;
    s.run_id = attempt == 0 ? run_id : new_run_id();
    std::string run_dir = options_.paths.work_dir + "/" + s.run_id;
    SG_ASSIGN_OR_RETURN(RunState state, RunState::create(options_.paths, s.run_id, "microvm",
                                                         {{Resource::Kind::kDirectory, run_dir}}));
    std::unique_ptr<MicrovmEnvironment> env(
        new MicrovmEnvironment(options_.paths, std::move(state)));
    env->run_dir_ = run_dir;
    env->accel_ = accel;
    env->host_uid_ = options_.id_map_base + spec.uid;
    env->host_gid_ = options_.id_map_base + spec.gid;
    env->read_back_limits_ = spec.recipe_limits;
    auto fail = [&](Error e) -> Error {
      if (auto undone = env->destroy(); !undone.ok())
        spdlog::warn("undoing the failed run {}: {}", s.run_id, undone.error().message());
      e.context.push_back("creating a microvm environment (" + accel + ")");
      return e;
    };
    if (auto st = make_dirs(options_.paths.work_dir, 0711); !st.ok()) return fail(st.error());
    if (::mkdir(run_dir.c_str(), 0700) != 0) return fail(sys_error("mkdir run directory", run_dir));
    env->workspace_image_ = run_dir + "/workspace.ext4";
    env->console_ = run_dir + "/console.log";
    if (auto st = make_workspace_image(env->workspace_image_, spec.workspace_recipe,
                                       kWorkspaceBytes, spec.uid, spec.gid,
                                       run_dir + "/recipe-staging", spec.recipe_limits);
        !st.ok())
      return fail(st.error());
    // Inside the run directory (recorded above): destroy and gc remove it with it.
    const bool binds = !spec.readonly_mounts.empty();
    if (binds) {
      env->binds_image_ = run_dir + "/binds.squashfs";
      if (auto st =
              make_bind_image(env->binds_image_, spec.readonly_mounts, run_dir + "/binds-staging");
          !st.ok())
        return fail(st.error());
    }
    // The secrets: an image in a tmpfs of the run's own (recorded before it is mounted, so
    // destroy or gc unmounts it), attached read-only; never written to a disk of the host.
    const bool secrets = !spec.secrets.empty();
    if (secrets) {
      env->secrets_dir_ = run_dir + "/secrets";
      if (::mkdir(env->secrets_dir_.c_str(), 0700) != 0)
        return fail(sys_error("mkdir secrets", env->secrets_dir_));
      if (auto st = env->state_.record({Resource::Kind::kMount, env->secrets_dir_}); !st.ok())
        return fail(st.error());
      uint64_t total = 0;
      for (const auto& secret : spec.secrets) total += secret.value.size();
      // Twice the image (sparse, but written by mkfs) and its staged files.
      std::string opts = "mode=0700,size=" + std::to_string(2 * (total * 2 + (uint64_t{5} << 20)));
      const unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
      if (::mount("sandgate-secrets", env->secrets_dir_.c_str(), "tmpfs", flags,
                  (opts + ",noswap").c_str()) != 0 &&
          ::mount("sandgate-secrets", env->secrets_dir_.c_str(), "tmpfs", flags, opts.c_str()) != 0)
        return fail(sys_error("mount secrets tmpfs", env->secrets_dir_));
      if (auto st = make_secrets_image(env->secrets_dir_ + "/secrets.squashfs", spec.secrets,
                                       spec.uid, spec.gid, env->secrets_dir_ + "/staging");
          !st.ok())
        return fail(st.error());
    }

    const std::string sock = run_dir + "/agent.sock";
    std::optional<uint64_t> tsc_khz = accel == "tcg" ? host_tsc_khz() : std::nullopt;
    const bool microvm_machine = tsc_khz.has_value();
    env->machine_ = microvm_machine ? "microvm" : "pc";
    std::string cmdline =
        "console=ttyS0 rdinit=/init panic=-1 quiet cgroup_no_v1=all "
        "systemd.unified_cgroup_hierarchy=1";
    // Boot-time options, each measured under TCG (bench/microvm_bench.cc):
    //  - cryptomgr.notests: the crypto self-tests at boot (the CTR-KDF and algapi ones run
    //    for 0.1-0.3 s of emulated CPU); the guest's kernel is Debian's, already tested.
    //  - 8250.nr_uarts=1: the console is the one serial port; no probing of three more.
    //  - i8042.noaux i8042.nokbd i8042.nopnp: no PS/2 keyboard or mouse to find (pc has a
    //    controller whose probe and the AT keyboard's reset cost emulated time; microvm has
    //    none, where they are harmless).
    cmdline += " cryptomgr.notests 8250.nr_uarts=1 i8042.noaux i8042.nokbd i8042.nopnp";
    if (microvm_machine) {
      // The microvm machine has no PIT, HPET or ACPI PM timer to calibrate the TSC against
      // (without these the kernel hangs at "could not calculate TSC khz"). Under TCG the
      // guest's TSC is the host's counter, so the rate measured here is the guest's; it is
      // constant and stops in no sleep state (host_tsc_khz() checks both), hence reliable
      // (no clocksource watchdog, which would have nothing to compare with).
      cmdline += " tsc_early_khz=" + std::to_string(*tsc_khz) + " tsc=reliable no_timer_check";
    }
    // No network device, but for share_host_network (test-only): a tap on the launcher's.
    std::optional<GuestTap> tap;
    if (weakened(spec.weakenings, Weakening::kShareHostNetwork)) {
      auto made = make_guest_tap();
      if (!made.ok()) return fail(made.error());
      tap = std::move(made).value();
      env->tap_name_ = tap->name;
    }
    cmdline += " -- " + std::string(kGuestAgentArg) + " uid=" + std::to_string(spec.uid) +
               " gid=" + std::to_string(spec.gid) + (binds ? " binds=1" : "") +
               (secrets ? " secrets=1" : "") +
               (tap ? " net=" + tap->guest_cidr + "," + tap->gateway : "");
    // Under TCG, the microvm machine (the biggest cut: qboot instead of SeaBIOS, no legacy
    // PCI/ISA devices to probe, no ACPI interpreter work for a PC's DSDT). pcie=on gives it
    // a PCIe host bridge for the same devices as on pc: virtio-serial-pci and the two NVMe
    // disks; rtc=on keeps the guest's wall clock (file times). Under KVM (or where the host
    // TSC rate is unknown) the pc machine as before. Its console shows "PCI: Fatal: No config
    // space access function found" even with quiet: harmless, the early probe looks for the
    // PC's port 0xcf8; the PCIe bridge is found through ACPI's MCFG moments later.
    std::string machine =
        microvm_machine ? "microvm,accel=tcg,pcie=on,rtc=on" : "pc,accel=" + accel;
    std::vector<std::string> argv = {qemu,
                                     "-M",
                                     machine,
                                     "-m",
                                     mib(guest_memory),
                                     "-smp",
                                     std::to_string(vcpus),
                                     "-nodefaults",
                                     "-no-user-config",
                                     "-display",
                                     "none",
                                     "-no-reboot",
                                     "-nic",
                                     "none",
                                     "-serial",
                                     "file:" + env->console_,
                                     "-kernel",
                                     kernel.image,
                                     "-initrd",
                                     initramfs,
                                     "-append",
                                     cmdline,
                                     "-device",
                                     "virtio-serial-pci",
                                     "-chardev",
                                     "socket,id=agent,path=" + sock + ",server=on,wait=off",
                                     "-device",
                                     "virtserialport,chardev=agent,name=sandgate",
                                     "-drive",
                                     "file=" + base + ",if=none,id=base,format=raw,readonly=on",
                                     "-device",
                                     "nvme,drive=base,serial=sandgate-base",
                                     "-drive",
                                     "file=" + env->workspace_image_ + ",if=none,id=ws,format=raw",
                                     "-device",
                                     "nvme,drive=ws,serial=sandgate-ws"};
    if (binds) {
      // readonly=on: the guest cannot write the image even with its own root.
      argv.insert(argv.end(),
                  {"-drive", "file=" + env->binds_image_ + ",if=none,id=ro,format=raw,readonly=on",
                   "-device", "nvme,drive=ro,serial=sandgate-ro"});
    }
    if (secrets) {
      argv.insert(argv.end(), {"-drive",
                               "file=" + env->secrets_dir_ +
                                   "/secrets.squashfs,if=none,id=sec,format=raw,readonly=on",
                               "-device", "nvme,drive=sec,serial=sandgate-sec"});
    }
    if (tap) {
      // QEMU gets the tap as its descriptor 3 (kTapFd below).
      argv.insert(argv.end(), {"-netdev", "tap,id=net0,fd=3", "-device",
                               "virtio-net-pci,netdev=net0,mac=52:54:00:53:47:01"});
    }
    if (accel == "kvm") argv.insert(argv.begin() + 3, {"-cpu", "host"});

    // Prepared before fork: the child only waits for "go" and execs.
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    std::vector<std::string> env_s = {"PATH=/usr/bin:/bin"};
    std::vector<char*> cenv;
    for (auto& e : env_s) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    auto go = make_pipe(O_CLOEXEC);
    if (!go.ok()) return fail(go.error());
    int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    const int tap_fd = tap ? tap->fd.get() : -1;
    auto start = std::chrono::steady_clock::now();
    pid_t pid = ::fork();
    if (pid < 0) return fail(sys_error("fork QEMU"));
    if (pid == 0) {
      char byte;
      if (::read(go->read.get(), &byte, 1) != 1) ::_exit(126);
      // No parent-death signal: it fires when the *thread* that forked ends, and an
      // environment may be made by a worker thread. A QEMU left by a crash is killed by
      // `sandgate gc`, from the record written below before it runs.
      ::dup2(null_fd, 0);
      ::dup2(null_fd, 1);
      ::dup2(null_fd, 2);
      // dup2 clears close-on-exec on the copy; a tap that is 3 already keeps its flag.
      if (tap_fd == 3)
        ::fcntl(3, F_SETFD, 0);
      else if (tap_fd >= 0)
        ::dup2(tap_fd, 3);
      syscall(SYS_close_range, tap_fd >= 0 ? 4 : 3, ~0U, 0);
      ::execve(cargv[0], cargv.data(), cenv.data());
      ::_exit(127);
    }
    ::close(null_fd);
    go->read.reset();
    auto pidfd = pidfd_open(pid);
    env->qemu_ = ChildProcess(pid, pidfd.ok() ? std::move(pidfd).value() : UniqueFd());
    env->qemu_pid_ = pid;
    // Recorded before it runs: `sandgate gc` kills it by pid after a crash.
    Resource proc{Resource::Kind::kProcess, "", pid,
                  process_start_time(options_.paths.proc, pid).value_or(0)};
    if (auto st = env->state_.record(proc); !st.ok()) return fail(st.error());
    for (const auto& dir : spec.placement.cgroup_dirs)
      if (auto st = write_file(dir + "/cgroup.procs", std::to_string(pid)); !st.ok())
        return fail(std::move(st).error().context_add("place QEMU in the run's cgroup"));
    if (auto st = write_all(go->write.get(), "g"); !st.ok()) return fail(st.error());
    go->write.reset();

    auto serial = connect_unix(sock, env->qemu_, std::chrono::seconds(30));
    if (!serial.ok()) return fail(std::move(serial).error().context_add(tail_of(env->console_)));
    auto pair = make_control_pair();
    if (!pair.ok()) return fail(pair.error());
    env->bridge_stop_ = UniqueFd(::eventfd(0, EFD_CLOEXEC));
    HostBridgeOptions bo;
    bo.cred_pid = pid;
    bo.first_frame_deadline =
        start + (accel == "kvm" ? Duration(kKvmBootDeadline) : Duration(kTcgBootDeadline));
    auto heard = std::make_shared<std::atomic<bool>>(false);
    auto why = std::make_shared<std::string>();
    env->bridge_ = std::thread([sup = std::move(pair->second), ser = std::move(serial).value(),
                                stop = env->bridge_stop_.get(), bo, heard, why]() mutable {
      auto r = run_host_bridge(std::move(sup), std::move(ser), stop, bo);
      *why = r.why;
      heard->store(r.heard_guest);
    });
    auto supervisor = Supervisor::attach(config, std::move(pair->first));
    if (!supervisor.ok()) {
      // The bridge ended (it closed the socket): its reason, and the console, explain.
      if (env->bridge_.joinable()) {
        (void)write_all(env->bridge_stop_.get(), std::string("\1\0\0\0\0\0\0\0", 8));
        env->bridge_.join();
      }
      if (accel == "kvm" && !heard->load() && attempt == 0 &&
          !std::getenv("SANDGATE_MICROVM_ACCEL")) {
        spdlog::warn("microvm: the KVM guest did not boot ({}); using TCG from now on ({})", *why,
                     kvm_failed_marker(kernel.version));
        (void)make_dirs(cache, 0700);
        (void)write_file(kvm_failed_marker(kernel.version), *why + "\n",
                         O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        (void)env->destroy();
        accel = "tcg";
        accel_why = "KVM guest did not boot";
        continue;
      }
      Error e = std::move(supervisor).error();
      e.context.push_back("bridge: " + *why + "; console: " + tail_of(env->console_));
      return fail(e);
    }
    env->supervisor_.emplace(std::move(supervisor).value());
    env->boot_time_ =
        std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - start);
    if (spec.timeout.count() > 0) env->deadline_ = std::chrono::steady_clock::now() + spec.timeout;
    spdlog::debug("microvm {}: {} on {} ({}), ready after {} ms", s.run_id, accel, env->machine_,
                  accel_why,
                  std::chrono::duration_cast<std::chrono::milliseconds>(env->boot_time_).count());
    return env;
  }
  return logic_error("create environment", "the microVM did not boot under KVM or TCG");
}

WorkspaceInfo MicrovmEnvironment::workspace_info() const {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(boot_time_).count();
  return {"image",
          "ext4 image in the guest, read back after it stops; microVM accel " + accel_ +
              " (machine " + machine_ + "), boot to ready " + std::to_string(ms) + " ms (" +
              accel_ + ")",
          workspace_image_};
}

Result<ExecResult> MicrovmEnvironment::exec(const Call& call, const Placement&) {
  if (destroyed_ || stopped_ || !supervisor_)
    return logic_error("exec", "the microVM is stopped", state_.run_id());
  // The host's call cgroups cannot hold a process of the guest: the agent gives each call its
  // own cgroup inside the guest instead. There is no host pid of the call to look at either,
  // so on_started is not called (ExecResult::host_pid is QEMU's).
  Call bounded = call;
  bounded.on_started = nullptr;
  // A host descriptor cannot cross into the guest (the bridge carries bytes, not terminals): a
  // file's content can, whole.
  if (call.stdin_fd >= 0) {
    struct stat st {};
    if (::fstat(call.stdin_fd, &st) != 0) return sys_error("fstat the call's stdin");
    if (!S_ISREG(st.st_mode))
      bounded.stdin_fd = -1;  // a terminal or a pipe: the guest's /dev/null
    else if (static_cast<uint64_t>(st.st_size) > kMaxStdinBytes)
      return logic_error("exec", "the call's stdin is " + std::to_string(st.st_size) +
                                     " bytes; a microVM's guest takes at most " +
                                     std::to_string(kMaxStdinBytes));
  }
  if (deadline_ != std::chrono::steady_clock::time_point::max()) {
    auto left = std::chrono::duration_cast<Duration>(deadline_ - std::chrono::steady_clock::now());
    if (left.count() <= 0) return logic_error("exec", "the run's wall-clock timeout has expired");
    if (bounded.timeout.count() == 0 || left < bounded.timeout) bounded.timeout = left;
  }
  auto result = supervisor_->exec(bounded, Placement{});
  if (result.ok() && result->guest_resident) guest_resident_ = result->guest_resident;
  return result;
}

Status MicrovmEnvironment::put_file(const std::string& name, std::string_view data) {
  SG_TRY(check_put_name(name));
  if (data.size() > kMaxStdinBytes)
    return logic_error("put a file in the guest", std::to_string(data.size()) + " bytes; at most " +
                                                      std::to_string(kMaxStdinBytes));
  UniqueFd mem(::memfd_create("sandgate-put", MFD_CLOEXEC));
  if (!mem.valid()) return sys_error("memfd_create");
  SG_TRY(write_all(mem.get(), data));
  Call put;
  // The name travels as an argument, never inside the script.
  put.argv = {"/bin/sh", "-c", "cat > \"$1.put\" && mv -f \"$1.put\" \"$1\"", "put", name};
  put.stdin_fd = mem.get();
  put.resident = true;  // no call's cgroup, no grant: the run's own bookkeeping
  SG_ASSIGN_OR_RETURN(auto r, exec(put, {}));
  if (!r.status.exited || r.status.code != 0)
    return logic_error("put a file in the guest",
                       name + ": " + r.status.describe() + ": " + r.stderr_data);
  return {};
}

Result<std::optional<std::string>> MicrovmEnvironment::get_file(const std::string& name,
                                                                size_t max_bytes) {
  SG_TRY(check_put_name(name));
  Call get;
  get.argv = {"/bin/sh", "-c", "[ -f \"$1\" ] || exit 3; exec cat -- \"$1\"", "get", name};
  get.resident = true;
  get.output_limit = max_bytes;
  SG_ASSIGN_OR_RETURN(auto r, exec(get, {}));
  if (r.status.exited && r.status.code == 3) return std::optional<std::string>();
  if (!r.status.exited || r.status.code != 0)
    return logic_error("read a file in the guest",
                       name + ": " + r.status.describe() + ": " + r.stderr_data);
  if (r.stdout_truncated)
    return logic_error("read a file in the guest",
                       name + ": more than " + std::to_string(max_bytes) + " bytes");
  return std::optional<std::string>(std::move(r.stdout_data));
}

std::optional<ResidentUsage> MicrovmEnvironment::guest_resident_usage() {
  if (!guest_resident_ && supervisor_ && !stopped_ && !destroyed_) {
    Call ask;
    ask.argv = {"/bin/true"};
    ask.resident = true;
    (void)exec(ask, {});
  }
  return guest_resident_;
}

Status MicrovmEnvironment::power_off(Duration grace) {
  if (supervisor_) {
    (void)supervisor_->stop();  // "shutdown": the agent syncs, unmounts and powers off
    supervisor_.reset();
  }
  Status result;
  if (qemu_.running()) {
    auto st = qemu_.wait_for(grace);
    if (!st.ok() || !st->has_value()) {
      result =
          logic_error("power off the microVM", "QEMU did not stop within the grace period; killed");
      qemu_.kill_and_reap();
    }
  }
  if (bridge_.joinable()) {
    if (bridge_stop_.valid())
      (void)write_all(bridge_stop_.get(), std::string("\1\0\0\0\0\0\0\0", 8));
    bridge_.join();
  }
  stopped_ = true;
  return result;
}

Status MicrovmEnvironment::read_back() {
  if (destroyed_) return logic_error("read back", "the environment was destroyed");
  if (read_back_done_) return {};
  SG_TRY(power_off(std::chrono::seconds(60)));
  // The image was written by the guest: checked before the host kernel mounts it, read-only,
  // without replaying a journal, and nothing on it can be executed or open a device.
  SG_ASSIGN_OR_RETURN(auto fsck,
                      run_command({"e2fsck", "-fn", workspace_image_}, std::chrono::minutes(5)));
  if (!fsck.status.exited || fsck.status.code != 0)
    return logic_error("read back the workspace",
                       "e2fsck found the guest's workspace image inconsistent: " + fsck.output,
                       workspace_image_);
  std::string mnt = run_dir_ + "/read-back";
  if (::mkdir(mnt.c_str(), 0700) != 0) return sys_error("mkdir", mnt);
  Resource mount{Resource::Kind::kMount, mnt};
  SG_TRY(state_.record(mount));
  SG_ASSIGN_OR_RETURN(
      auto mounted, run_command({"mount", "-t", "ext4", "-o", "loop,ro,noload,nosuid,nodev,noexec",
                                 workspace_image_, mnt}));
  if (!mounted.status.exited || mounted.status.code != 0)
    return logic_error("mount the workspace image read-only", mounted.output, workspace_image_);
  Status copied = copy_tree(mnt, workspace_host_path(), host_uid_, host_gid_, read_back_limits_);
  // lost+found is mkfs's, not the run's.
  if (copied.ok()) (void)::rmdir((workspace_host_path() + "/lost+found").c_str());
  auto released = release_resources(paths_, {mount});
  if (released.ok()) SG_TRY(state_.forget(mount));
  SG_TRY(std::move(copied).context("copy the workspace out of its image"));
  read_back_done_ = true;
  return released;
}

Status MicrovmEnvironment::destroy() {
  if (destroyed_) return {};
  destroyed_ = true;
  Status first = power_off(std::chrono::seconds(10));
  auto released = release_resources(paths_, state_.resources());
  if (!released.ok()) return released;
  SG_TRY(state_.finish());
  (void)first;  // a guest that had to be killed is no error of the run's end
  return {};
}

MicrovmEnvironment::~MicrovmEnvironment() {
  if (auto s = destroy(); !s.ok())
    spdlog::error("destroying microvm run {}: {}", state_.run_id(), s.error().message());
}

}  // namespace sandgate::providers
