// The podman provider: each run is one Podman container, hardened by default, whose first
// process is sandgate's own supervisor.
//
// Why the supervisor, not `podman exec`: `podman exec` costs about 100 ms per call (a Go binary,
// conmon, runc exec) and lands the call in the container's cgroup, so a call could not be put
// in its own <run>/call-N cgroup before it execs. Instead the sandgate binary is bound
// read-only at /.sandgate/supervisor and started as the container's pid 1 with the control
// socket passed in (`--preserve-fds 1`, fd 3). Calls then go over that socket exactly as in the
// namespace jail: forked by the supervisor, parked until the host has written the call's pid
// into its call cgroups, then no_new_privs, the Landlock ruleset and sandgate's seccomp filter
// (on top of the runtime's profile) and exec. A call costs a fork and a few messages.
//
// What the runtime does (each setting a named step, read back after start from the kernel's
// files of the supervisor, /proc/PID/{status,mountinfo,cgroup,uid_map,environ,net/dev} and its
// cgroup limits, not from `podman inspect`: what the kernel holds is the witness, and one Go
// process start less per run; a setting that did not hold is an error naming it):
//   network      --network none: a network namespace with loopback only
//   cap-drop     --cap-drop ALL: empty effective, permitted and bounding sets
//   no-new-privs --security-opt no-new-privileges
//   seccomp      the runtime's default profile (Seccomp: 2), sandgate's filter on top per call
//   read-only    --read-only root (the assembled rootfs or the image)
//   user         --user 10001:10001 inside a user namespace (--uidmap 0:<id_map_base>:65536,
//                as the jail: the run's ids are not the host's; rootless: the run's own
//                namespace, whose owner is checked too)
//   tmpfs        /tmp, /var/tmp and the home as tmpfs
//   workspace    the run's workspace as the only writable volume
//   env          no host environment (calls get the supervisor's explicit environment)
//   pids-limit / memory / cpus
//                the run ceiling on the container's own cgroup
//   cgroup-parent
//                the run's <run>/main cgroup (--cgroup-parent): the container and its conmon
//                live under the run's ceiling and are removed with the run
//   proc-views   the run's own /proc/meminfo, stat, loadavg and uptime (proc_views.h): a views
//                server started before `podman run`, its files bound read-only over the
//                container's (--volume VIEW:/proc/meminfo:ro, ...) and read back as its mounts.
//                runc binds nothing else inside /proc, so /proc/pressure/* and /proc/vmstat
//                stay the kernel's.
//                Off with --no-proc-views (ProviderOptions::proc_views, SANDGATE_PROC_VIEWS=0)
// One Podman process per run: `podman run --rm` in the foreground (no --detach) creates,
// starts, waits for and removes the container, as a bare run does; destroy waits for it and
// needs no `podman rm` unless it did not end cleanly (podman_rm_incomplete). The assembled
// root, and rootless Podman's state, are tmpfs mounts of the run (one unmount at destroy).
// Podman with `--runtime runc --cgroup-manager cgroupfs` (crun refuses hybrid cgroup hosts)
// and explicit ulimits (Podman's defaults exceed this host's hard limits), in one of two modes
// (ProviderOptions::podman_mode, `--podman-mode`):
//   rootful   Podman runs as root and makes the container's user namespace (--uidmap onto the
//             run's id range): root owns it, so the kernel's per-user counts (inotify
//             instances, ...) of every container are root's, shared (crossrun.user_inotify).
//   rootless  Podman runs as uid 0 of a user (and mount) namespace that sandgate creates as
//             the run's first host id U, which owns it, with 0..65535 mapped onto U.. (maps
//             written by sandgate as root, as for the jail: no /etc/subuid line and no setuid
//             newuidmap, which refuses an id without a passwd entry). Podman is told it is
//             already in its configured namespace (_CONTAINERS_USERNS_CONFIGURED, what its own
//             re-exec sets), so it makes no pause process. Its storage, tmpdir, HOME and
//             XDG_RUNTIME_DIR are <run_dir>/podman (a tmpfs), its --runroot (at most 50 characters
//             for Podman) /run/sandgate-podman/<hash>, all owned by U. Rootless runc cannot make
//             cgroups here, so sandgate writes Podman into the run's cgroup
//             (<run>/main/podman, or /sandgate-podman/<run>) before it execs, and writes the
//             ceiling there itself (memory, cpu quota, pids.max): the settings
//             "pids-limit", "memory", "cpus" and "cgroup-parent" are read back from that
//             cgroup, and "user" also checks that U owns the user namespace. No container
//             image (the run's Podman storage is its own). Destroy and gc kill what is in the
//             cgroup and remove the run directory: nothing of the run is in root's Podman.
//   auto      rootless where the host allows it and the run names no image; else rootful.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "providers/provider.h"
#include "providers/supervisor.h"

namespace sandgate::providers {

// Which way Podman can run on this host, and why the other cannot (`sandgate doctor`).
struct PodmanModes {
  std::string podman;  // path of the podman binary; empty: not found
  std::string runc;    // path of runc; empty: not found
  Status rootful;      // ok: this mode works
  Status rootless;
};
PodmanModes podman_modes(const HostPaths& paths);
// The mode a run with `image` ("" for none) gets under `options.podman_mode` here, or why none.
Result<PodmanMode> resolve_podman_mode(const ProviderOptions& options, const std::string& image);
// The environment of a rootless Podman started as uid 0 of a user namespace owned by host id
// `id`, with its storage, home and runtime directories under `dir`: what Podman's own re-exec
// into its namespace sets (pkg/rootless), so it runs no pause process. Shared by the provider
// and the benchmark's bare rootless baseline.
std::vector<std::string> rootless_podman_env(uid_t id, const std::string& dir);

// The settings a run is hardened with, by name (what the read-back names on failure).
std::vector<std::string> podman_setting_names();

// Why a foreground `podman run --rm` cannot be trusted to have removed its container (then
// destroy removes it with `podman rm`, as gc does); nullopt: it did.
std::optional<std::string> podman_rm_incomplete(const RuntimeExit& exit);

class PodmanProvider : public Provider {
 public:
  static const ProviderInfo& static_info();
  static Result<std::unique_ptr<Provider>> make(const ProviderOptions& options);
  explicit PodmanProvider(ProviderOptions options) : options_(std::move(options)) {}

  const ProviderInfo& info() const override { return static_info(); }
  Status available() const override;
  Result<std::unique_ptr<Environment>> create(const EnvSpec& spec) override;
  // The default seccomp program (the contained supervisor installs it in each call).
  void warm_up() override;

  // Test hook: the named setting's flags are left off `podman run`, so a test can show that
  // the read-back catches a setting the runtime did not apply ("network" becomes `--network
  // host`, not Podman's default bridge, which would change the host's network).
  void drop_setting_for_test(std::string name) { dropped_setting_ = std::move(name); }
  // Test hook: how long destroy waits for `podman run --rm` to remove its container before it
  // kills it and removes the container itself (ContainedLaunch::stop_grace; 60 s otherwise),
  // so that a test can reach that fallback without waiting a minute.
  void set_stop_grace_for_test(std::chrono::milliseconds grace) { stop_grace_ = grace; }

 private:
  ProviderOptions options_;
  std::string dropped_setting_;
  std::optional<std::chrono::milliseconds> stop_grace_;
};

}  // namespace sandgate::providers
