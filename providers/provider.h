// The isolation provider interface: the one object an orchestrator holds to make environments
// and run calls in them. Behind it sits a host directory, a namespace jail, a container, a
// microVM or something in-house; swapping it changes one line.
//
// Providers know nothing of policy or intents. They meet the controller at Placement
// (core/placement.h): the cgroup directories a call's first process must be in before it
// execs. The vocabulary both sides share (Capability, Placement, ProcessLimits, ExecResult)
// lives in core/.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/capability.h"
#include "core/egress.h"
#include "core/exec_result.h"
#include "core/files.h"
#include "core/host_paths.h"
#include "core/id_ranges.h"
#include "core/placement.h"
#include "core/process.h"
#include "core/result.h"
#include "core/units.h"
#include "providers/weakening.h"
#include "providers/workspace.h"

namespace sandgate::providers {

// kNone: loopback only. kAllowlist: the run reaches an upstream network namespace, and only
// what EnvSpec::egress allows (the provider wires it; the run session attaches the kernel's
// egress guard that enforces the list).
enum class NetworkMode { kNone, kAllowlist };
std::string to_string(NetworkMode mode);  // "none", "allowlist"
// Refused by providers that cannot wire an allowlisted network, naming the provider.
Status refuse_allowlist(const std::string& provider, NetworkMode mode);

// A credential for one run (--secret NAME=FILE): the provider puts `value` at
// <secrets dir>/NAME, memory-backed, readable by the run's user only, gone when the run ends.
// It never passes through an environment variable or a command line.
struct Secret {
  std::string name;   // [A-Za-z0-9_.-], 1-128 characters, not "." or ".."
  std::string value;  // the bytes, at most kMaxSecretBytes
};
inline constexpr size_t kMaxSecretBytes = 1 << 20;
// Checks a secret's name (the error names the rule).
Status check_secret_name(const std::string& name);
// Environment::put_file's name: one file name (no '/', not "." or "..").
Status check_put_name(const std::string& name);
// "NAME=FILE" (--secret): FILE is read here, by sandgate (a regular file, at most
// kMaxSecretBytes); its contents never pass through a command line or an environment.
Result<Secret> read_secret(const std::string& name, const std::string& file);
Result<Secret> parse_secret_arg(const std::string& name_eq_file);

struct BindMount {
  std::string source;  // host path
  std::string target;  // path inside the environment
};
// "SRC[:DST]" (--ro-bind, the protocol's ro_binds): DST defaults to SRC.
BindMount parse_bind_mount(const std::string& spec);

// What an environment is made from.
struct EnvSpec {
  std::string run_id;  // empty: generated
  std::string tenant = "default";
  std::string workspace_recipe;  // the fresh workspace's content; empty: an empty one
  // How the recipe becomes the workspace: a copy-on-write view (overlayfs) where possible, or a
  // copy (providers/workspace.h).
  RecipeMode recipe_mode = RecipeMode::kAuto;
  // How large a recipe may be (total file bytes, entries): a recipe is data, possibly made by an
  // earlier run, and is copied as root before any sandbox limit applies.
  CopyLimits recipe_limits;
  // Non-zero: the workspace lives on a filesystem of its own of this many bytes, an ext4 image
  // in the run directory on a loop device (providers/workspace.h make_workspace_filesystem):
  // its mount names no host path, and the run's writes to it stop at ENOSPC at this size.
  // Honoured by the namespaces provider; refused by the rest. 0: the workspace is a directory
  // (or an overlay) on the host's filesystem, as before.
  uint64_t workspace_size = 0;
  // Host environment allowlist: "NAME" passes the host's value when set, "NAME=VALUE" sets it.
  // Nothing else from the host environment passes (providers with creds.scrubbed_env).
  std::vector<std::string> env;
  std::vector<BindMount> readonly_mounts;
  // The read-only base narrowed to these host paths (resolved by resolve_base_paths in
  // providers/base_root.h: absolute, existing, each bound at its own path), instead of the
  // default (the host's whole /usr and its links). Empty: the default base. Honoured by the
  // providers that assemble a root (namespaces, podman without --image); refused by the rest.
  std::vector<std::string> base_paths;
  // Credentials for this run only, at /run/secrets/NAME (SANDGATE_SECRETS_DIR tells calls where).
  std::vector<Secret> secrets;
  uid_t uid = 10001;  // uid/gid inside the environment
  gid_t gid = 10001;
  NetworkMode network = NetworkMode::kNone;
  // kAllowlist: where the run may connect or send (besides its own loopback), and the network
  // namespace its traffic goes to (an nsfs path: the lab's, or one the operator prepared with
  // a route out). providers/egress_link.h says how a jail is wired to it.
  std::vector<EgressRule> egress;
  std::string upstream_netns;
  Duration timeout{0};  // wall clock for the whole run; 0: none
  // Where the run's long-lived processes (the supervisor) live, placed before they exec: the
  // controller's <run>/main cgroup. Empty: wherever sandgate runs.
  Placement placement;
  // The run ceiling, for providers that enforce it themselves as well (podman: --memory,
  // --cpus, --pids-limit on the container); the run session fills it from the policy. Unset:
  // the provider's own default.
  struct Ceiling {
    std::optional<uint64_t> memory_bytes;
    std::optional<double> cpus;
    std::optional<uint64_t> pids;
  } ceiling;
  // A local container image for the root filesystem (podman: `--image NAME`, checked with
  // `podman image exists`; no registry is contacted). Empty: the provider assembles one.
  // Providers without images refuse a spec that names one.
  std::string image;
  // Test-only weakenings (providers/weakening.h) for `sandgate probe --self-test`. A provider
  // refuses a spec carrying any unless ProviderOptions::self_test_weakenings is set.
  std::vector<Weakening> weakenings;
};

struct Call {
  std::vector<std::string> argv;  // argv[0] is looked up in the environment's PATH
  std::vector<std::string> env;   // extra NAME=VALUE for this call only
  std::string cwd;                // inside the environment; empty: the workspace
  Duration timeout{0};            // 0: only the run's timeout applies
  size_t output_limit = 1 << 20;  // per stream; the rest is counted, not kept
  int cancel_fd = -1;             // readable: cancel the call (e.g. a signalfd for SIGINT)
  // The call's stdin (e.g. the terminal end of a pty the host made), where a descriptor can be
  // passed in (host_dir, namespaces, podman; into a microVM's guest only a file's content, up
  // to 1 MiB); -1: /dev/null. The caller keeps it open until exec returns.
  int stdin_fd = -1;
  ProcessLimits rlimits;
  // Called with (1 or 2, bytes) as output arrives, for streaming; capture happens regardless.
  std::function<void(int stream, std::string_view data)> on_output;
  // Called with the call's host pid once its first process exists, has its rlimits and sits in
  // the placement's cgroups, parked before it execs: the moment to check from the host what
  // the call was given (prlimit, cgroup files). Setting it parks the call until it returns,
  // with or without a placement.
  std::function<void(pid_t host_pid)> on_started;
  // Once this call has started, make the next call's process and park it (Environment::park);
  // its host pid comes back in ExecResult::parked_next_pid. Ignored where the provider cannot.
  bool park_next = false;
  // For a provider whose calls run under a kernel of its own (microvm): the grant and ladder
  // settings the controller's part inside the guest applies to the call's cgroup there
  // (core/guest_call_control.h; encoded by controller/guest_control.h and carried unread).
  // Null: none. Other providers ignore it; their calls are placed in the host's cgroups.
  Json guest_control;
  // A process of the run itself (RunSession::run_resident: the agent's own resident memory, a
  // language server), not a tool call: it keeps the supervisor's OOM priority where a call
  // raises its own to the maximum. Under a shared memory limit (the run's ceiling, a tenant's
  // budget) the kernel then takes a running call, whose loss the call's outcome reports,
  // before the process the run lives on. Ignored by external providers.
  bool resident = false;
};

// How a run's workspace was made, for the run's info: "overlay" (copy-on-write view of the
// recipe), "copy" (file by file), "empty", or "shared" (a test-only weakening); `note` says
// why a copy was made where a view was possible, or what a view hides.
struct WorkspaceInfo {
  std::string kind;
  std::string note;
  std::string storage;  // a host path on the filesystem that holds the run's writes (io grants)
};

class Environment {
 public:
  virtual ~Environment() = default;
  virtual const std::string& run_id() const = 0;
  // The workspace as the host sees it (for recipes, canaries and checks from outside).
  virtual std::string workspace_host_path() const = 0;
  // The workspace as calls see it.
  virtual std::string workspace_path() const = 0;
  virtual WorkspaceInfo workspace_info() const { return {}; }
  // The run's secrets directory as the host sees it ("" when the run has none): for checks
  // from outside (the probes' cross-run and persistence witnesses).
  virtual std::string secrets_host_path() const { return ""; }
  // Makes workspace_host_path() hold everything the run wrote, before an export reads it: a
  // no-op where the host sees the workspace live; a microVM powers off and reads its workspace
  // image back, after which no call runs.
  virtual Status settle_workspace() { return {}; }
  // The host id that uid/gid 0 of the run's user namespace maps to (65536 ids from there);
  // 0 when the run has no user namespace of its own (host_dir) or the provider does not say.
  virtual uid_t host_id_base() const { return 0; }
  // A run with NetworkMode::kAllowlist: the address on the upstream side of the run's link
  // that its /etc/resolv.conf names (IPv4, port 53), where the run session serves the run's
  // allowlisting DNS resolver (session/dns_resolver.h); "" for any other run.
  virtual std::string dns_address() const { return ""; }
  // Makes the next call's first process ahead of the call and parks it, so that the controller
  // can put it in the next call's cgroups off the call's path (Placement::placed_pid): its host
  // pid, or 0 where the provider cannot park (the next call then starts as usual). A process
  // parked already is returned again. Precondition: not concurrent with exec.
  virtual Result<pid_t> park() { return pid_t{0}; }
  // The process a call parked for the next one (ExecResult::parked_next_pid) when the word of it
  // came only after that call had ended: its host pid once it is here, else 0. Never waits.
  // Asked before each call, so that a run of short calls on a busy host keeps starting calls
  // in parked processes instead of dropping each one that parked late. Precondition: not
  // concurrent with exec.
  virtual pid_t take_late_parked() { return 0; }
  // Whether the run can still take a call, checked without blocking or running anything: an
  // error naming what went away (its supervisor was killed, its wall clock ran out). For a run
  // made ahead and kept idle until it is handed out (session/run_pool.h).
  virtual Status alive() const { return {}; }
  // Writes `data` as the file `name` in the workspace, replacing it whole (a reader sees the
  // old content or the new, never a part): how the host hands a run its inputs while it runs
  // (a replay's segments and held level). `name` is relative, without `.` or `..`
  // components. Here: written on the host at workspace_host_path(); a microVM writes it in its
  // guest with a resident exec (no host directory is shared into it).
  // Precondition: not concurrent with exec.
  virtual Status put_file(const std::string& name, std::string_view data);
  // Reads the file `name` of the workspace (named as for put_file), at most max_bytes: how the
  // host reads what a run hands back while it runs (the probe suite's crossrun holder's ready
  // file and report). nullopt: no such file yet. Here: read at workspace_host_path(), never
  // through a link (read_file_in); a microVM reads it in its guest with a resident exec.
  // Precondition: not concurrent with exec where the workspace is not live on the host.
  virtual Result<std::optional<std::string>> get_file(const std::string& name, size_t max_bytes);
  // Whether workspace_host_path() shows the run's writes as they happen, so that get_file and
  // put_file run nothing in the run and may go on beside an exec. A microVM's workspace is a
  // disk image of its guest's, read back at the end (settle_workspace): false.
  virtual bool workspace_live_on_host() const { return true; }
  // Whether every route the run's calls have ends in the launcher's network namespace (in
  // `sandgate probe`, the lab, which has no route off the machine): a microVM whose one network
  // device is a tap there (share_host_network). The probes then send to decoys that are not
  // local to them (lab_routed=1). Default: no such guarantee.
  virtual bool routes_end_in_launcher() const { return false; }
  // The Landlock ABI of the kernel the calls run under, as far as the calls' ruleset uses it
  // (0: no Landlock); -1: unknown (host_dir, external providers).
  virtual int landlock_abi() const { return -1; }
  // What the run holds outside its calls where its kernel is not the host's (a microVM's
  // guest): as of the end of its last exec (Call::resident ones included). nullopt: the run's
  // processes are in the host's cgroups; read those (RunSession::resident_usage).
  virtual std::optional<ResidentUsage> guest_resident_usage() { return std::nullopt; }
  // Runs a call to completion. Precondition: not called concurrently on one environment.
  virtual Result<ExecResult> exec(const Call& call, const Placement& placement) = 0;
  // Kills every process of the run, removes its workspace and record. Idempotent; also done
  // by the destructor (errors are then logged).
  virtual Status destroy() = 0;
};

// How the podman provider runs Podman (`--podman-mode`, SANDGATE_PODMAN_MODE; providers/podman.h):
// kRootful: as root, with --uidmap onto the run's id range (the user namespace is owned by
// root). kRootless: as the run's own first host id, in a user namespace that id owns (the
// kernel's per-user counts are then the run's own). kAuto: rootless where this host can, and
// rootful for a run from a container image (a rootless run's Podman storage is its own, empty).
enum class PodmanMode { kAuto, kRootful, kRootless };
std::string to_string(PodmanMode mode);  // "auto", "rootful", "rootless"
// "auto", "rootful" or "rootless"; anything else is an error naming the accepted words.
Result<PodmanMode> parse_podman_mode(const std::string& text);

struct ProviderInfo {
  std::string name;
  std::string summary;
  bool unsafe = false;  // offers no isolation; needs an explicit flag and is marked in reports
  CapabilitySet capabilities;
  // Not among the providers `qualify` takes by default (name it with --provider): microvm,
  // which boots a VM per run.
  bool opt_in = false;
  // The test-only weakenings it honours, where it does not honour every one (microvm: only
  // share_host_network); `probe --self-test` runs these and lists the others as not
  // applicable. Empty: every weakening.
  std::vector<Weakening> only_weakenings = {};
};
// The weakenings `info`'s provider honours (ProviderInfo::only_weakenings, else all).
std::vector<Weakening> honoured_weakenings(const ProviderInfo& info);

// How a provider is constructed: host paths and the explicit unsafe opt-in.
struct ProviderOptions {
  HostPaths paths;
  bool allow_unsafe_host = false;
  // Each run's own host ids (core/id_ranges.h): uid/gid 0 inside maps to the first id of a
  // range taken from this pool for the run, recorded in the state directory and released
  // with the run (or by `sandgate gc`). SANDGATE_ID_POOL=FIRST:RANGES sets it for the CLI.
  IdPool id_pool;
  // The fixed host id that uid/gid 0 inside maps to for runs that share one (the test-only
  // shared_uid and reuse_workspace weakenings, as every run did before issue 16); 65536 ids.
  uid_t id_map_base = 1'000'000;
  // The binary run as each run's supervisor (it must call maybe_run_supervisor() first in
  // main). Empty: this very binary (/proc/self/exe). A program that embeds the library
  // without that hook, or a benchmark that wants the production supervisor, names the
  // sandgate binary here.
  std::string supervisor_exe;
  // Honour EnvSpec::weakenings. Set only by the probe self-test (`sandgate probe --self-test`);
  // no other command, flag, policy or environment variable sets it.
  bool self_test_weakenings = false;
  // A local container image every run's root filesystem comes from, unless EnvSpec::image
  // names another (`probe` and `qualify --image`). Providers without images ignore it; the
  // commands refuse it for them. Empty: the provider assembles the root.
  std::string image;
  // How the podman provider runs Podman (PodmanMode); other providers ignore it.
  PodmanMode podman_mode = PodmanMode::kAuto;
  // The namespaces and podman providers' per-run /proc views (proc_views.h; podman: the files
  // runc binds, kPodmanProcViewFiles): on unless --no-proc-views or SANDGATE_PROC_VIEWS=0 (read
  // by the provider itself, so every entry point honours it). A run whose views cannot be set
  // up fails; it never silently shows the host's /proc.
  bool proc_views = true;
  // The namespaces provider's views server also answers the calls' sysinfo(2)
  // (sysinfo_notify.h). false: sysinfo stays the kernel's (the host's numbers); only
  // jail_bench's A/B baseline of the listener's per-call cost turns it off.
  bool answer_sysinfo = true;
};

class Provider {
 public:
  virtual ~Provider() = default;
  virtual const ProviderInfo& info() const = 0;
  const std::string& name() const { return info().name; }
  const CapabilitySet& capabilities() const { return info().capabilities; }
  // Whether this host can run the provider now, and why not.
  virtual Status available() const = 0;
  virtual Result<std::unique_ptr<Environment>> create(const EnvSpec& spec) = 0;
  // Prepares what every run of this provider in this process shares (the compiled seccomp
  // program, the shared /etc/alternatives mount), which the first create would otherwise
  // make on its critical path. A command about to create a run calls it in a thread beside
  // its own set-up (WarmUp); create waits for what it needs. Thread-safe; a failure is left
  // for create to meet and report.
  virtual void warm_up() {}
};

// Runs provider.warm_up() in a thread of its own from construction, joined on destruction:
// hold it for as long as the provider is used.
class WarmUp {
 public:
  explicit WarmUp(Provider& provider);
  ~WarmUp();
  WarmUp(const WarmUp&) = delete;
  WarmUp& operator=(const WarmUp&) = delete;

 private:
  std::thread thread_;
};

// Refuses a provider that lacks any required capability, naming all it lacks.
Status check_requirements(const Provider& provider, const std::vector<Capability>& required);

// The name a provider is printed with: unsafe ones carry a marker everywhere.
std::string display_name(const ProviderInfo& info);

}  // namespace sandgate::providers
