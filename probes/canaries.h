// Canaries: what the probes look for, planted on the host for one suite invocation and all
// removed afterwards (recorded in the state directory first, so `sandgate gc` removes them after
// a crash).
//
//   - a unique marker, carried by every canary, so a probe's evidence and a host-side find can be
//     matched to this invocation and nothing else;
//   - canary tokens in sandgate's own environment (AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN,
//     ACTIONS_ID_TOKEN_REQUEST_TOKEN, SANDGATE_TOKEN), each value carrying the marker, set before
//     any provider starts and restored at removal;
//   - a canary home with the usual credential files (.ssh/id_ed25519, .aws/credentials,
//     .docker/config.json, .netrc, .kube/config, .git-credentials) and HOME pointed at it, so
//     neither the probes nor a weakened provider ever go near the real one;
//   - a host canary file and a host directory for write attempts, outside every workspace;
//   - a sentinel: a host process, its argv carrying the marker, that logs every signal it receives;
//     it is launched with the tokens in its environment and one on its command line, as a
//     launcher's processes are, for the /proc/*/environ and /proc/*/cmdline probes;
//   - decoy sockets, listening (nothing answers): an SSH agent at home()/.ssh/agent.sock, named
//     by SSH_AUTH_SOCK in sandgate's environment as a launcher's agent is, and a container
//     runtime socket at <dir>/run/docker.sock. Natively net.ssh_agent and net.runtime_sockets
//     reach them, so the baseline shows those probes work; a sandbox must not;
//   - a setuid-root copy of sandgate-probe, when the probe binary is given;
//   - a workspace recipe with a .git directory (config, hooks) for the persistence probes;
//   - base canaries: one file, sandgate-base-canary-<marker>, in each directory the default
//     read-only base binds (base_canary_sites(): /usr and the places under it where hosts keep
//     world-readable configuration, /usr/local/etc, /usr/share, ...), for fs.read_base_canary.
//     These are the only canaries outside <parent_dir>: each is recorded (a marked file,
//     core/state.h) before it is made, and removed, here or by `sandgate gc`, only while it
//     is still a regular file carrying the marker. A directory on a read-only filesystem
//     gets none (the probe is told only of those planted).
//
// Canary files are world-readable (directories 0755, files 0644) on purpose: what keeps them from
// a sandbox must be its isolation, not the host's file modes, or the filesystem probes would
// test permissions instead of the boundary.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/host_paths.h"
#include "core/process.h"
#include "core/result.h"
#include "core/state.h"

namespace sandgate::probes {

struct CanaryOptions {
  HostPaths paths;                      // state_dir gets the record
  std::string parent_dir = "/var/tmp";  // canaries go in <parent_dir>/sandgate-canary-<marker>
  std::string probe_binary;             // sandgate-probe: copied setuid-root; empty: no helper
  bool set_environment = true;          // the tokens and HOME in this process's environment
  std::string marker;                   // empty: a fresh one
  // Host directories to plant a base canary in (base_canary_sites()); empty: none.
  std::vector<std::string> base_canary_dirs;
};

class Canaries {
 public:
  // Precondition for set_environment: no other thread reads the environment (call it before
  // any provider, controller or thread starts).
  static Result<std::unique_ptr<Canaries>> plant(const CanaryOptions& options);
  ~Canaries();  // remove(); errors are logged
  Canaries(const Canaries&) = delete;
  Canaries& operator=(const Canaries&) = delete;

  // Kills the sentinel, removes every file, restores the environment, removes the record.
  // Idempotent.
  Status remove();

  const std::string& marker() const { return marker_; }
  const std::string& dir() const { return dir_; }
  std::string home() const { return dir_ + "/home"; }
  std::string host_canary() const { return dir_ + "/host-canary"; }
  std::string host_write_dir() const { return dir_ + "/write-here"; }
  std::string recipe() const { return dir_ + "/recipe"; }
  std::string agent_socket() const { return home() + "/.ssh/agent.sock"; }
  std::string runtime_socket() const { return dir_ + "/run/docker.sock"; }
  const std::string& setuid_helper() const { return setuid_helper_; }  // "" when none
  // The base canaries planted (host paths; the same paths inside a jail's base).
  const std::vector<std::string>& base_canaries() const { return base_canaries_; }
  // Where base canaries go: each directory the default read-only base binds
  // (providers/base_root.h, default_base_dirs(): /usr on a merged-/usr host), and below them
  // the directories that exist (real directories, not links) of /usr/local/etc,
  // /usr/local/share, /usr/local, /usr/share, /usr/lib, /etc/alternatives (none inside
  // the preset "minimal", which a narrowed base may hold whole).
  static std::vector<std::string> base_canary_sites();
  pid_t sentinel_pid() const { return sentinel_.pid(); }
  const std::vector<std::pair<std::string, std::string>>& tokens() const { return tokens_; }
  std::string token_names() const;  // "AWS_SECRET_ACCESS_KEY,GITHUB_TOKEN,..."
  // The credential files under home(), relative ("".ssh/id_ed25519", ...).
  static const std::vector<std::string>& credential_files();

  // Signals the sentinel received ("SIGWINCH received"), from the `from`th on. (A shell cannot
  // tell who sent them; the window they arrived in tells which probe did.)
  std::vector<std::string> sentinel_signals(size_t from = 0) const;

 private:
  Canaries() = default;
  Status plant_files(const CanaryOptions& options);
  Status plant_base_canaries(const std::vector<std::string>& dirs);
  Status start_sentinel();
  void set_environment();
  void restore_environment();

  std::string marker_, dir_, setuid_helper_;
  std::vector<std::string> base_canaries_;
  std::vector<std::pair<std::string, std::string>> tokens_;
  // The environment before plant: name -> value (nullopt: was unset).
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_env_;
  ChildProcess sentinel_;
  UniqueFd block_;            // the write end of the pipe the sentinel waits on
  UniqueFd agent_, runtime_;  // the decoy sockets, listening
  std::optional<RunState> state_;
  HostPaths paths_;
  bool removed_ = false;
};

}  // namespace sandgate::probes
