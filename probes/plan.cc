#include "probes/plan.h"

#include <algorithm>

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
      // The lab's network namespace: every decoy is reachable (each logs the probe's request),
      // and so is run A from run B: its abstract socket and its loopback listener, with run A's
      // own account of those connections (crossrun.plant).
      {Weakening::kShareHostNetwork,
       {"net.metadata_v4_get", "net.metadata_v4_imdsv2", "net.metadata_v4_google",
        "net.metadata_v6_get", "net.production_tcp", "net.registry_allowed",
        "net.registry_other_port", "net.udp_exfil", "net.dns_exfil", "crossrun.abstract_socket",
        "crossrun.loopback_port", "crossrun.plant"}},
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
      // still meets the kernel's CAP_NET_RAW check, nor proc.tiocsti, whose twin depends on
      // dev.tty.legacy_tiocsti and needs a terminal the jail does not offer.
      {Weakening::kSeccompFullWidthCompare, {"net.vsock", "proc.clone_newuser"}},
  };
  return kCatchers;
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
                         "net.registry_other_port", "net.udp_exfil", "net.dns_exfil"})
    plans.push_back(witnessed(id, Witness::kDecoy));
  plans.push_back(witnessed("proc.kill_all", Witness::kSentinel));

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

controller::Policy probe_policy() {
  controller::Policy p = controller::default_policy();
  p.name = "sandgate-probe";
  p.intents["probe"] = probe_grant();
  for (const auto& plan : probe_plans()) p.intents[plan.intent] = plan.grant;
  return p;
}

}  // namespace sandgate::probes
