// The probe suite: runs the catalogue natively (the baseline), then inside a provider, collects
// the host-side witnesses around every probe and hands both to the judge.
//
// Order matters and is fixed by create(): a fresh lab first, entered by the calling thread before
// any provider, controller or other thread starts (so every thread and process made afterwards,
// host_dir's included, lands on the decoys); then the canaries (tokens and HOME in this process's
// environment); then the native baseline. run() then takes one provider (optionally weakened,
// for the self-test):
//   fs, net, creds, proc   each probe its own call in one fresh environment, so every decoy
//                          event, sentinel signal and host file in the call's window is its own;
//   crossrun               two environments at once: A's crossrun.plant held in a thread, B's
//                          probes given A's ready file as parameters, then A released;
//   persist                persist.plant, destroy, look at the host (processes, cgroups, files),
//                          then a fresh run from the same recipe runs persist.find;
//   resource               through the controller, each probe a call with a small grant read
//                          back from the host before it execs.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/guards.h"
#include "core/host_paths.h"
#include "core/id_ranges.h"
#include "core/json.h"
#include "core/result.h"
#include "ebpf/activity_tracer.h"
#include "ebpf/egress.h"
#include "probes/canaries.h"
#include "probes/judge.h"
#include "probes/lab/lab.h"
#include "probes/plan.h"
#include "providers/provider.h"

namespace sandgate::probes {

inline constexpr int kReportSchemaVersion = 1;

struct SuiteOptions {
  HostPaths paths;
  // The native baseline takes one range of it for crossrun.user_inotify: run A's inotify hold
  // is taken as that range's uid, a throwaway one, so host root is never starved of instances.
  IdPool id_pool;
  std::string cgroup_root = "sandgate";  // the controller's top cgroup
  std::string probe_binary;              // sandgate-probe on the host
  std::vector<std::string> only;         // boundaries to run; empty: all
  // The third witness (judge.h, kernel_crossings): every probe call traced by the kernel, what
  // it saw in each judgement's notes, and a network action the kernel let through that the
  // probe called denied makes it exposed. Null: two witnesses only (the report says so).
  ebpf::ActivityTracer* tracer = nullptr;
  // The allowlist variant (`probe --net allowlist`): each provider that declares
  // net.egress_policy runs wired to the lab (its upstream) with this allowlist, enforced by
  // `egress_guard`; the allowed endpoint must be reachable (a warning: allowed by design),
  // everything else blocked with layer egress. Empty: --net none. Others run as before.
  std::vector<EgressRule> egress_allow;
  ebpf::EgressGuard* egress_guard = nullptr;
  // Every run's read-only base narrowed to these host paths (EnvSpec::base_paths, resolved by
  // providers::resolve_base_paths); empty: each provider's default base. fs.read_base_canary
  // exposed on the default base carries a known limit (what a narrowed base hides); on a
  // narrowed one it counts in full.
  std::vector<std::string> base_paths;
  // Non-zero: the namespaces provider's runs get a workspace filesystem of this size
  // (EnvSpec::workspace_size, `probe --workspace-size`); other providers run as before.
  uint64_t workspace_size = 0;
  // One line per step ("lab: ...", "namespaces: net (2/7)"), for stderr; called only on the
  // thread that calls create() and run().
  std::function<void(const std::string&)> progress;
};

struct ProviderRun {
  std::string provider;
  bool unsafe = false;
  CapabilitySet declared;  // what the provider claims; the probes test it
  std::vector<providers::Weakening> weakenings;
  std::vector<std::string> egress_allow;  // the allowlist it ran with (texts); empty: --net none
  std::vector<std::string> base_paths;    // the narrowed base it ran with; empty: the default
  uint64_t workspace_size = 0;            // its workspace filesystem's size; 0: none
  int landlock_abi = -1;  // of the kernel its calls ran under (Environment::landlock_abi)
  std::vector<Judgement> judgements;
  Duration wall{0};

  Json to_json() const;
  // The judgements that are exposed.
  std::vector<const Judgement*> exposed() const;
  // The exposed judgements without a known limit (Judgement::known_limit): what fails
  // `sandgate probe`, `qualify` and the hardened self-test.
  std::vector<const Judgement*> failing() const;
  // Declared capabilities the probes found exposed (plan.h), and what remains of the
  // declaration once they are taken away: what a policy check may rely on.
  std::vector<Contradiction> contradictions() const;
  CapabilitySet effective() const;
};

class Suite {
 public:
  // Lab (entered by the calling thread), canaries, native baseline. Needs root.
  static Result<std::unique_ptr<Suite>> create(SuiteOptions options);
  ~Suite();  // close(); errors logged

  // Every selected boundary against one provider. `weakenings` only with a provider made with
  // ProviderOptions::self_test_weakenings.
  Result<ProviderRun> run(providers::Provider& provider,
                          const std::vector<providers::Weakening>& weakenings = {});

  // Removes what the probes may have left (markers, linger processes), the canaries, the lab.
  Status close();

  const std::string& marker() const { return canaries_->marker(); }
  Duration baseline_wall() const { return baseline_wall_; }
  const std::map<std::string, ProbeReport>& baseline() const { return baseline_; }

 private:
  struct Listed {
    std::string id, boundary, attempt;
    std::vector<std::string> params;
  };
  class Context;  // one provider run's state (suite.cc)
  friend class Context;

  explicit Suite(SuiteOptions options) : options_(std::move(options)) {}
  bool selected(const std::string& boundary) const;
  std::vector<const Listed*> probes_of(const std::string& boundary) const;
  Status run_baseline();
  // The parameters every probe gets: this suite's canaries, the workspace and the setuid
  // helper as the probe sees them ("" when there is none).
  std::vector<std::string> base_params(const std::string& workspace,
                                       const std::string& setuid_helper) const;
  void progress(const std::string& line) const;

  SuiteOptions options_;
  std::unique_ptr<lab::Lab> lab_;
  std::optional<NetnsGuard> in_lab_;
  std::unique_ptr<Canaries> canaries_;
  std::vector<Listed> catalogue_;
  std::map<std::string, ProbeReport> baseline_;
  Duration baseline_wall_{0};
  unsigned long long host_pidns_ = 0, host_mntns_ = 0;
  bool closed_ = false;
};

// The witness that confirms a probe's `reached` (judge.h, rule 2), by id.
Witness witness_for(const std::string& id);

// The probe reports in a probe binary's output (one JSON object per line; other lines ignored).
Result<std::vector<ProbeReport>> parse_reports(const std::string& output,
                                               const std::string& source);

}  // namespace sandgate::probes
