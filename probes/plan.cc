#include "probes/plan.h"

#include <algorithm>
#include <map>

namespace sandgate::probes {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

controller::Grant grant(std::optional<Bytes> mem, std::optional<uint64_t> pids, std::optional<double> cpu,
                        Duration timeout) {
  controller::Grant g;
  g.memory_max = mem;
  g.pids_max = pids;
  g.cpu_cores = cpu;
  g.timeout = timeout;
  return g;
}

// What every probe runs under unless its plan says otherwise.
controller::Grant probe_grant() { return grant(MiB(512), 256, 1.0, seconds(60)); }

ProbePlan witnessed(const std::string& id, Witness w) {
  ProbePlan p;
  p.id = id;
  p.witness = w;
  p.grant = probe_grant();
  return p;
}

// A resource probe: its own intent with a small grant, parameters well past the grant (and
// capped), and the terminations that mean the limit held.
ProbePlan resource(const std::string& id, const std::string& intent, controller::Grant g,
                   std::vector<std::string> params, std::vector<std::string> expected) {
  ProbePlan p;
  p.id = id;
  p.witness = Witness::kResource;
  p.intent = intent;
  p.grant = std::move(g);
  p.params = std::move(params);
  p.expected_terminations = std::move(expected);
  return p;
}

// The probes each weakening must be flagged by (the self-test and its test hold every one of
// them to exposed): those that test directly what the weakening opens, chosen from what the
// self-test flags on this project's hosts. A probe that only happens to notice one (a sentinel
// that took a stray signal during it) is not listed, nor one whose exposure also depends on a
// host setting the weakening does not touch; those are named below with the reason.
using providers::Weakening;
struct Catchers {
  Weakening weakening;
  std::vector<const char*> probes;
};
const std::vector<Catchers>& catchers() {
  static const std::vector<Catchers> kCatchers = {
      // The launcher's home bound at its own path: the suite's canary home, read by its host
      // path and through $HOME, which calls get pointed at it.
      {Weakening::kMountHome, {"creds.home_files", "creds.own_home_files"}},
      // The launcher's environment: the canary tokens the suite put in it.
      {Weakening::kPassHostEnv, {"creds.env_tokens"}},
      // The lab's network namespace: every decoy is reachable, but Landlock (where the kernel
      // has it: proc.landlock) still refuses every TCP connect and the abstract socket of the
      // other run (its holders, below), so what is caught everywhere is the traffic Landlock
      // does not cover: UDP, and DNS over it; and the lab's own interfaces (its veth pair),
      // which the call sees beside loopback.
      {Weakening::kShareHostNetwork, {"net.udp_exfil", "net.dns_exfil", "net.interfaces"}},
      // Full capability sets and no no_new_privs: read from /proc/self/status and prctl, and
      // used: a raw socket needs CAP_NET_RAW (the filter lets AF_INET/SOCK_RAW through).
      {Weakening::kRootWithCaps, {"proc.capabilities", "proc.no_new_privs", "net.raw_socket"}},
      // No filter: Seccomp: 0 itself, and every probe the filter alone refuses: the syscalls
      // newer than its libseccomp or refused with ENOSYS, the socket families, namespace
      // creation, keyrings, userfaultfd, io_uring. Not proc.perf_event_open: without the
      // filter, kernel.perf_event_paranoid decides (Debian's default, 3, refuses it to an
      // unprivileged caller), and not proc.syslog or proc.bpf_prog_load, which need a
      // capability the call does not have.
      {Weakening::kNoSeccomp,
       {"proc.seccomp", "proc.newer_syscall", "proc.open_tree_attr", "proc.listmount",
        "proc.statmount", "proc.mseal", "proc.memfd_secret", "proc.modify_ldt", "net.vsock",
        "net.io_uring_socket", "proc.clone_newuser", "proc.unshare_user", "proc.userfaultfd",
        "creds.keyctl_session", "creds.keyctl_user_keyring"}},
      // A fresh run from the same recipe finds the earlier run's marker in its workspace.
      {Weakening::kReuseWorkspace, {"persist.find"}},
      // /tmp shared: run B reads run A's /tmp canary, and a fresh run finds a marker in /tmp.
      {Weakening::kShareTmp, {"crossrun.tmp_canary", "persist.find"}},
      // Argument rules on all 64 bits: the twins with a bit above the 32 the kernel reads get
      // past them: an AF_VSOCK socket (no capability needed) and a clone into a new user
      // namespace (allowed unprivileged inside the jail). Not net.packet_socket, whose twin
      // still meets the kernel's CAP_NET_RAW check, nor proc.tiocsti, whose twin past the
      // filter meets dev.tty.legacy_tiocsti: where that is 0 the kernel refuses it (EIO).
      {Weakening::kSeccompFullWidthCompare, {"net.vsock", "proc.clone_newuser"}},
      // No Landlock: procfs is writable by its mount and the file is the call's own; only
      // Landlock kept the call from lowering the OOM priority it was given.
      {Weakening::kNoLandlock, {"proc.lower_oom_priority"}},
      // One fixed host uid for every run, its user namespace owned by host root: run A's
      // inotify instances count against run B's (and the host's root) limit.
      {Weakening::kSharedUid, {"crossrun.user_inotify"}},
  };
  return kCatchers;
}

struct Holders {
  struct Probe {
    const char* id;
    Layer layer;
    int landlock_abi = 0;  // a Landlock holder: the ABI its rule needs
  };
  Weakening weakening;
  std::vector<Probe> probes;
};
const std::vector<Holders>& holders() {
  static const std::vector<Holders> kHolders = {
      // The namespace layer taken away (the lab's network shared): Landlock alone refuses TCP
      // to the decoys (ABI 4) and run A's abstract socket (its scope, ABI 6). Without the
      // weakening the run's own namespace refuses the TCP ones (no route; Landlock then leaves
      // TCP alone) and the scope still refuses the abstract socket.
      // TCP rules came with ABI 4 and the abstract socket scope with ABI 6: a kernel with an
      // older Landlock (a microVM's guest on Debian 12's 6.1: ABI 2) holds none of them.
      {Weakening::kShareHostNetwork,
       {{"net.metadata_v4_get", Layer::kLandlock, 4},
        {"net.production_tcp", Layer::kLandlock, 4},
        {"net.registry_other_port", Layer::kLandlock, 4},
        {"crossrun.abstract_socket", Layer::kLandlock, 6}}},
      // Landlock taken away: the network namespace has no route to the decoys, and does not
      // share abstract names with run A; the base is read-only by its mount.
      {Weakening::kNoLandlock,
       {{"net.metadata_v4_get", Layer::kNamespace},
        {"crossrun.abstract_socket", Layer::kNamespace},
        {"fs.readonly_base", Layer::kMount}}},
  };
  return kHolders;
}

// Records each catcher in its probe's plan; a probe without a plan gets the one plan_for()
// would have given it (self-witnessed, "probe" intent, the default grant), so the witness and
// grant stay what they were.
void add_catchers(std::vector<ProbePlan>& plans) {
  for (const auto& c : catchers()) {
    for (const char* id : c.probes) {
      auto it =
          std::find_if(plans.begin(), plans.end(), [&](const ProbePlan& p) { return p.id == id; });
      if (it == plans.end()) {
        plans.push_back(witnessed(id, Witness::kSelf));
        it = plans.end() - 1;
      }
      it->catches.push_back(c.weakening);
    }
  }
}

std::vector<ProbePlan> make_plans() {
  std::vector<ProbePlan> plans;
  for (const char* id :
       {"fs.read_host_canary", "fs.proc_pid_root", "fs.hardlink_escape", "creds.env_tokens",
        "creds.proc_environ", "creds.proc_cmdline", "creds.home_files", "creds.own_home_files",
        "crossrun.workspace_canary", "crossrun.tmp_canary", "crossrun.dev_shm_canary",
        "crossrun.secret", "persist.find", "persist.secret"})
    plans.push_back(witnessed(id, Witness::kCanary));
  plans.push_back(witnessed("fs.write_host_dir", Witness::kHostFile));
  for (const char* id : {"net.metadata_v4_get", "net.metadata_v4_imdsv2", "net.metadata_v4_google",
                         "net.metadata_v6_get", "net.production_tcp", "net.registry_allowed",
                         "net.registry_other_port", "net.udp_exfil", "net.dns_exfil",
                         "net.dns_exfil_resolver", "net.registry_by_name"})
    plans.push_back(witnessed(id, Witness::kDecoy));
  plans.push_back(witnessed("proc.kill_all", Witness::kSentinel));
  // Disclosure: the host's own copy is the witness. /proc/cmdline, /proc/version, the boot id
  // and the block devices can be masked by the jail, /proc/meminfo replaced by the run's own
  // view; the rest a shared kernel shows anyway.
  for (const char* id : {"disclosure.proc_cmdline", "disclosure.proc_version", "disclosure.boot_id",
                         "disclosure.block_devices", "disclosure.interrupts"})
    plans.push_back(witnessed(id, Witness::kHostView));
  const char* kSeparateKernel = "a separate kernel (a microVM)";
  // What a per-run /proc view (the namespaces jail's and podman's, providers/proc_views.h) hides
  // as well.
  const char* kProcView =
      "a per-run /proc view (namespaces, podman) or a separate kernel (a microVM)";
  plans.push_back(witnessed("disclosure.kernel_release", Witness::kHostView));
  plans.back().only_hidden_by = kSeparateKernel;
  plans.push_back(witnessed("disclosure.meminfo", Witness::kHostView));
  plans.back().only_hidden_by = kProcView;
  // runc refuses a bind over /proc/vmstat (proc_views.h, kPodmanProcViewFiles): only the jail's
  // view hides it.
  plans.push_back(witnessed("disclosure.vmstat", Witness::kHostView));
  plans.back().only_hidden_by =
      "a per-run /proc view (namespaces; runc refuses podman's) or a separate kernel (a microVM)";
  // sysinfo(2) is the kernel's answer unless the sandbox answers it itself: the namespaces
  // and podman providers hand it to the run's views server (providers/sysinfo_notify.h).
  plans.push_back(witnessed("disclosure.sysinfo", Witness::kHostView));
  plans.back().only_hidden_by =
      "a per-run answer to sysinfo(2) (the run's views server through a seccomp listener: "
      "namespaces, podman) or a separate kernel (a microVM)";
  plans.push_back(witnessed("disclosure.mountinfo_host_path", Witness::kHostView));
  plans.back().only_hidden_by =
      "a per-run filesystem for the workspace (a loop-mounted image: --workspace-size, "
      "namespaces), or a separate kernel";
  plans.push_back(witnessed("crossrun.load_side_channel", Witness::kSelf));
  plans.back().only_hidden_by = kProcView;
  // A canary in each directory the default base binds: the default base is the host's whole
  // /usr, so a jail on it shows them (the truth, exposed); a narrowed base hides them.
  plans.push_back(witnessed("fs.read_base_canary", Witness::kCanary));
  plans.back().default_base_hidden_by =
      "a narrowed read-only base (--base-path, policy base.allow)";

  plans.push_back(resource("resource.memory", "probe_memory", grant(MiB(64), 256, 1.0, seconds(20)),
                           {"mem_bytes=256MiB", "resource_hold_ms=300"}, {"memory_limit"}));
  plans.push_back(resource("resource.fork_bomb", "probe_pids", grant(MiB(512), 32, 1.0, seconds(20)),
                           {"max_procs=256", "resource_hold_ms=800"}, {"pids_limit"}));
  plans.push_back(resource("resource.cpu_spin", "probe_cpu", grant(MiB(512), 256, 0.25, seconds(20)),
                           {"spin_ms=600", "spin_procs=2"}, {}));
  ProbePlan wall = resource("resource.wall_clock", "probe_wall", grant(MiB(512), 256, 1.0, milliseconds(800)),
                            {"sleep_ms=3000"}, {"timeout"});
  // Natively there is no deadline: a short sleep shows the action works.
  wall.native_params = {"sleep_ms=100"};
  wall.native_params_differ = true;
  plans.push_back(wall);
  // Held by rlimits well under what the probes try (4096 descriptors, a 32MiB file) and under
  // the supervisor's own limits, so the value the host reads back is the grant itself.
  ProbePlan fds = resource("resource.fd_exhaust", "probe_fds", grant(MiB(512), 256, 1.0, seconds(20)),
                           {"max_fds=4096"}, {});
  fds.grant.open_files = 256;
  fds.rlimit = "open_files";
  fds.rlimit_count_key = "fds_opened";
  fds.rlimit_errno = "EMFILE";
  plans.push_back(fds);
  ProbePlan disk = resource("resource.disk_fill", "probe_disk", grant(MiB(512), 256, 1.0, seconds(20)),
                            {"fill_bytes=32MiB"}, {});
  disk.grant.file_size = MiB(8);
  disk.rlimit = "file_size";
  disk.rlimit_count_key = "bytes_written";
  disk.rlimit_errno = "EFBIG";
  plans.push_back(disk);
  add_catchers(plans);
  return plans;
}

}  // namespace

const std::vector<ProbePlan>& probe_plans() {
  static const std::vector<ProbePlan> kPlans = make_plans();
  return kPlans;
}

const ProbePlan& plan_for(const std::string& id) {
  for (const auto& p : probe_plans())
    if (p.id == id) return p;
  // Any other probe: self-witnessed, under "probe". Resource probes all have plans.
  static const ProbePlan kDefault = [] {
    ProbePlan p;
    p.grant = probe_grant();
    return p;
  }();
  return kDefault;
}

std::vector<std::string> probes_catching(providers::Weakening w) {
  std::vector<std::string> out;
  for (const auto& p : probe_plans())
    if (std::find(p.catches.begin(), p.catches.end(), w) != p.catches.end()) out.push_back(p.id);
  return out;
}

namespace {

// Advice per boundary: what isolates it. Written for the person who owns the sandbox's
// configuration, not for sandgate's own providers only.
const std::map<std::string, std::string>& boundary_remediation() {
  static const std::map<std::string, std::string> kAdvice = {
      {"fs",
       "Give the sandbox its own mount namespace with a minimal root: the base read-only, only "
       "the workspace writable, no host paths bound in, /proc, /sys and /dev limited to what a "
       "build needs (no raw devices), and no file descriptors inherited from the launcher."},
      {"net",
       "Put the sandbox in its own network namespace with no route, or behind an egress policy "
       "that allows only the registries it needs; block the metadata addresses "
       "(169.254.169.254, fd00:ec2::254) explicitly and refuse raw, packet and vsock sockets in "
       "the syscall filter."},
      {"creds",
       "Start the sandbox from a scrubbed environment (an allow list of variables), with a "
       "fresh empty home instead of the launching user's, no view of other processes' environ "
       "or cmdline (a pid namespace), and no access to the kernel keyrings (seccomp)."},
      {"proc",
       "Run as an unprivileged user in a user namespace with no capabilities and no_new_privs, "
       "in its own pid namespace, under a seccomp allow list that refuses module loading, bpf, "
       "perf, ptrace of outsiders, mount and namespace creation and every syscall newer than "
       "the filter."},
      {"disclosure",
       "Mask what the sandbox has no use for (/proc/cmdline, /proc/version, the boot id, "
       "/proc/partitions, /proc/diskstats, /proc/interrupts and /proc/softirqs: an empty or "
       "per-run read-only file bound over each, as container runtimes do), and show the run's "
       "own memory counters in /proc/meminfo and /proc/vmstat, and in sysinfo(2) (a seccomp "
       "listener that answers it with the run's numbers). What the kernel answers itself "
       "(uname(2), mountinfo's sources) only a separate kernel (a microVM) or a per-run "
       "filesystem hides."},
      {"crossrun",
       "Give every run its own namespaces (pid, ipc, net, mount) and its own /tmp, /dev/shm and "
       "workspace, and its own host id range, so that nothing one run holds is visible to "
       "another."},
      {"persist",
       "Make every run start from a fresh copy of its recipe and throw the whole copy away at "
       "the end: no workspace, home, /tmp or process outlives the run; review files a run leaves "
       "in a repository (git hooks, config) before using it outside the sandbox."},
      {"resource",
       "Put every call in its own cgroup with memory, pids, CPU and I/O limits and a deadline, "
       "and set per-process rlimits (open files, file size) in the grant; check from the host "
       "that the limits written are the limits held."},
  };
  return kAdvice;
}

// Probes whose fix is more specific than their boundary's.
const std::map<std::string, std::string>& probe_remediation() {
  static const std::map<std::string, std::string> kAdvice = {
      {"net.metadata_v4_get",
       "Block 169.254.169.254 from the sandbox (no route, or an egress rule before any allow "
       "rule); cloud credentials are one GET away."},
      {"net.metadata_v4_imdsv2",
       "Block 169.254.169.254 from the sandbox; IMDSv2's token does not help when the sandbox "
       "can make the PUT itself."},
      {"net.metadata_v6_get", "Block fd00:ec2::254 from the sandbox as well as the IPv4 address."},
      {"net.dns_exfil",
       "Give the sandbox no resolver, or one that answers only allowed names: DNS carries data "
       "out even when TCP is blocked."},
      {"net.dns_exfil_resolver",
       "Give the sandbox a resolver that answers only the allowlist's names and refuses (never "
       "forwards) every other: a forwarding resolver carries any name, and the data in it, out."},
      {"creds.env_tokens",
       "Launch the sandbox with an allow list of environment variables; never pass CI tokens "
       "(GITHUB_TOKEN, ACTIONS_ID_TOKEN_REQUEST_TOKEN) or cloud keys through."},
      {"fs.read_base_canary",
       "Narrow the read-only base to what runs need (--base-path minimal, or the policy's "
       "base.allow): the host's whole /usr shows every world-readable file in it "
       "(/usr/local/etc/npmrc, an SDK's properties) to the sandbox."},
      {"creds.home_files",
       "Do not bind the launching user's home into the sandbox; give it an empty home."},
      {"proc.seccomp", "Install a seccomp filter (an allow list) before the sandbox's first exec."},
      {"proc.no_new_privs", "Set no_new_privs (prctl PR_SET_NO_NEW_PRIVS) before exec."},
      {"proc.capabilities", "Drop every capability (effective, permitted, bounding, ambient)."},
      {"proc.newer_syscall",
       "Make the seccomp filter an allow list whose default action refuses syscalls it does not "
       "know (ENOSYS), so syscalls newer than the filter are refused too."},
      {"proc.lower_oom_priority",
       "Hold calls to a Landlock ruleset that grants no write beneath /proc, so that a call "
       "cannot undo the OOM priority it was given."},
      {"proc.kill_all",
       "Run the sandbox in its own pid namespace so that kill(-1) reaches nothing outside."},
      {"persist.git_hooks",
       "Treat a workspace's .git/hooks and .git/config as untrusted after a run: export "
       "commits, not the directory, or review them before running git outside the sandbox."},
  };
  return kAdvice;
}

}  // namespace

std::vector<Holder> probes_holding(Weakening w, const CapabilitySet& declared, int landlock_abi) {
  std::vector<Holder> out;
  for (const auto& h : holders()) {
    if (h.weakening != w) continue;
    for (const auto& p : h.probes) {
      bool landlock = p.layer == Layer::kLandlock;
      if (landlock && !declared.count(Capability::kProcLandlock)) continue;
      if (landlock && landlock_abi >= 0 && landlock_abi < p.landlock_abi) continue;
      out.push_back({p.id, p.layer});
    }
  }
  return out;
}

std::vector<std::string> missing_holders(Weakening w, const CapabilitySet& declared,
                                         const std::vector<Judgement>& judgements,
                                         int landlock_abi) {
  std::vector<std::string> out;
  for (const auto& h : probes_holding(w, declared, landlock_abi)) {
    auto it = std::find_if(judgements.begin(), judgements.end(),
                           [&](const Judgement& j) { return j.id == h.id; });
    std::string expected = "expected blocked by " + to_string(h.layer);
    if (it == judgements.end()) {
      out.push_back(h.id + ": did not run, " + expected);
    } else if (it->verdict != Verdict::kBlocked || it->layer != h.layer) {
      std::string got = it->verdict == Verdict::kBlocked ? "blocked by " + to_string(it->layer)
                                                         : to_string(it->verdict);
      out.push_back(h.id + ": " + got + ", " + expected);
    }
  }
  return out;
}

std::string remediation(const std::string& id) {
  if (auto it = probe_remediation().find(id); it != probe_remediation().end()) return it->second;
  std::string boundary = id.substr(0, id.find('.'));
  if (auto it = boundary_remediation().find(boundary); it != boundary_remediation().end())
    return it->second;
  return "Find which layer should have refused this attempt (namespace, mount, seccomp, "
         "credentials, egress, limit) and add it; the probe's evidence says what crossed.";
}

std::vector<std::string> probes_testing(Capability c) {
  // Each probe is listed under what it tests directly; a probe that several layers stop
  // (proc.kill_all: a pid namespace, or uids) is listed under the capability that promises it.
  static const std::map<Capability, std::vector<std::string>> kTested = {
      {Capability::kFsIsolated,
       {"fs.read_host_canary", "fs.write_host_dir", "fs.symlink_escape", "fs.hardlink_escape",
        "fs.dotdot_escape", "fs.leaked_fds", "fs.open_by_handle", "fs.read_shadow",
        "creds.home_files", "crossrun.workspace_canary"}},
      {Capability::kFsReadonlyBase, {"fs.readonly_base", "fs.write_system_dirs"}},
      // The lab's decoys and the other run's loopback and abstract sockets are reachable only
      // from the launcher's network namespace.
      {Capability::kNetNone,
       {"net.metadata_v4_get", "net.metadata_v4_imdsv2", "net.metadata_v4_google",
        "net.metadata_v6_get", "net.production_tcp", "net.registry_allowed",
        "net.registry_other_port", "net.udp_exfil", "net.dns_exfil", "crossrun.loopback_port",
        "crossrun.abstract_socket"}},
      {Capability::kCredsScrubbedEnv, {"creds.env_tokens"}},
      {Capability::kProcPidNs,
       {"proc.host_pids", "proc.kill_all", "proc.ptrace_sentinel", "proc.process_vm_readv",
        "proc.pidfd_getfd", "fs.proc_pid_root", "creds.proc_environ", "creds.proc_cmdline",
        "crossrun.see_processes", "crossrun.signal_process", "crossrun.ptrace_process"}},
      {Capability::kProcUserNs, {"proc.uid_map"}},
      {Capability::kProcNoNewPrivs, {"proc.no_new_privs", "proc.setuid_helper"}},
      {Capability::kProcNoCaps, {"proc.capabilities", "net.raw_socket", "proc.init_module"}},
      {Capability::kIpcIsolated,
       {"crossrun.sysv_shm", "crossrun.sysv_msg", "crossrun.dev_shm_canary"}},
      {Capability::kEphemeralWorkspace, {"persist.find"}},
      // Every process under the host's kernel reads its boot id: a run that does has no kernel
      // of its own, whatever it declares.
      {Capability::kKernelSeparate, {"disclosure.boot_id"}},
      {Capability::kLimitsPerCall,
       {"resource.memory", "resource.fork_bomb", "resource.cpu_spin", "resource.wall_clock",
        "resource.fd_exhaust", "resource.disk_fill"}},
  };
  // The filter's probes are those the no_seccomp weakening must be caught by: one list.
  if (c == Capability::kProcSeccomp) return probes_catching(providers::Weakening::kNoSeccomp);
  if (c == Capability::kProcLandlock) return probes_catching(providers::Weakening::kNoLandlock);
  auto it = kTested.find(c);
  return it == kTested.end() ? std::vector<std::string>{} : it->second;
}

std::vector<Contradiction> contradicted_capabilities(const CapabilitySet& declared,
                                                     const std::vector<Judgement>& judgements) {
  std::vector<Contradiction> out;
  for (Capability c : declared) {
    Contradiction k{c, {}};
    for (const auto& id : probes_testing(c))
      for (const auto& j : judgements)
        if (j.id == id && j.verdict == Verdict::kExposed) k.probes.push_back(id);
    if (!k.probes.empty()) out.push_back(std::move(k));
  }
  return out;
}

controller::Policy probe_policy() {
  controller::Policy p = controller::default_policy();
  p.name = "sandgate-probe";
  p.intents["probe"] = probe_grant();
  for (const auto& plan : probe_plans()) p.intents[plan.intent] = plan.grant;
  return p;
}

}  // namespace sandgate::probes
