#include "probes/suite.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <tuple>

#include "controller/controller.h"
#include "core/files.h"
#include "core/log.h"
#include "core/process.h"
#include "core/strings.h"
#include "probes/catalogue.h"
#include "probes/lab/lab_addresses.h"
#include "probes/plan.h"
#include "probes/witness.h"
#include "providers/seccomp_policy.h"
#include "session/run_session.h"

namespace sandgate::probes {
namespace {

using std::chrono::steady_clock;

// Where the probe binary and the setuid helper are bound inside a jail.
constexpr char kProbeInside[] = "/opt/sandgate-probe";
constexpr char kSetuidInside[] = "/opt/sandgate-setuid-probe";

// The call's rlimits read from the host (prlimit) while it is parked before exec, compared
// with what was granted (soft and hard must both be the grant: a lower soft only would let the
// call raise it back). Returns the hard values read; records checks and mismatches in `out`.
std::map<std::string, uint64_t> read_host_rlimits(pid_t pid, const ProcessLimits& granted,
                                                  LimitReadback& out) {
  std::map<std::string, uint64_t> seen;
  for (auto [key, resource, name] : {std::tuple{"open_files", RLIMIT_NOFILE, "RLIMIT_NOFILE"},
                                     std::tuple{"file_size", RLIMIT_FSIZE, "RLIMIT_FSIZE"}}) {
    std::optional<uint64_t> want =
        std::string(key) == "open_files" ? granted.open_files : granted.file_size;
    if (!want) continue;
    std::string label = std::string(key) + " (" + name + " of pid " + std::to_string(pid) + ")";
    auto got = read_rlimit(pid, resource);
    if (!got.ok()) {
      out.checked.push_back(label + ": could not be read: " + got.error().message());
      continue;
    }
    seen[key] = got->second;
    std::string values = std::to_string(got->first) + " / " + std::to_string(got->second);
    if (got->first != *want || got->second != *want)
      out.mismatches.push_back(label + ": granted " + std::to_string(*want) + ", host has " +
                               values);
    else
      out.checked.push_back(label + " = " + values + " (granted " + std::to_string(*want) + ")");
  }
  return seen;
}

// A probe call's outcome and what the host read back while the call was parked before exec:
// its cgroup limits and (only those the grant sets) its rlimits, hard values by grant field.
struct Called {
  controller::CallOutcome outcome;
  LimitReadback limits;
  std::map<std::string, uint64_t> host_rlimits;
};

Result<Called> call_probe(session::RunSession& run, const std::vector<std::string>& argv,
                          const std::string& intent, int stdin_fd = -1) {
  Called out;
  session::CallRequest req;
  req.argv = argv;
  req.intent = intent;
  req.stdin_fd = stdin_fd;
  req.on_started = [&](const controller::CallScope& scope, pid_t pid) {
    out.limits = read_back_limits(scope.cgroup(), scope.grant());
    ProcessLimits granted = scope.grant().to_process_limits();
    if (!granted.empty()) out.host_rlimits = read_host_rlimits(pid, granted, out.limits);
  };
  SG_ASSIGN_OR_RETURN(out.outcome, run.call(req));
  return out;
}

// A pseudo-terminal pair the host makes for proc.tiocsti, whose terminal end becomes the
// probe's stdin (with --param stdin_pty=1): a jail's /dev has no ptmx to make one from, and
// the native baseline gets the same so that both try the same thing. Opened O_NOCTTY, so it is
// nobody's controlling terminal until the probe's child makes it its own; fresh for each call,
// so nothing one call pushed into it reaches the next. Closed with the pair.
struct HostPty {
  UniqueFd master, terminal;
  std::string terminal_path;  // /dev/pts/N
};
Result<HostPty> open_host_pty() {
  HostPty p;
  p.master = UniqueFd(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!p.master.valid()) return sys_error("posix_openpt", "/dev/ptmx");
  if (::grantpt(p.master.get()) != 0 || ::unlockpt(p.master.get()) != 0)
    return sys_error("grantpt/unlockpt", "/dev/ptmx");
  char name[64];
  if (int e = ::ptsname_r(p.master.get(), name, sizeof name); e != 0)
    return sys_error(e, "ptsname_r");
  p.terminal_path = name;
  SG_ASSIGN_OR_RETURN(p.terminal, open_fd(p.terminal_path, O_RDWR | O_NOCTTY | O_CLOEXEC));
  return p;
}

// The probe that takes the host's pty as its stdin.
constexpr char kPtyProbe[] = "proc.tiocsti";

std::vector<std::string> probe_argv(const std::string& probe, const std::vector<std::string>& ids,
                                    const std::vector<std::string>& params) {
  std::vector<std::string> argv = {probe, "run"};
  for (const auto& id : ids) argv.insert(argv.end(), {"--id", id});
  for (const auto& p : params) argv.insert(argv.end(), {"--param", p});
  return argv;
}

std::optional<ProbeReport> find_report(const std::vector<ProbeReport>& reports,
                                       const std::string& id) {
  for (const auto& r : reports)
    if (r.id == id) return r;
  return std::nullopt;
}

unsigned long long ns_inode(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

// Waits for a file to appear (run A's ready file), polling.
Result<Json> wait_for_json(const std::string& path, Duration timeout) {
  auto deadline = steady_clock::now() + timeout;
  while (steady_clock::now() < deadline) {
    if (::access(path.c_str(), F_OK) == 0) return read_json_file(path);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return logic_error("wait for run A", "no ready file after " + format_duration(timeout), path);
}

std::string join(const Json& list) {
  std::string out;
  if (!list.is_array()) return out;
  for (const auto& v : list)
    if (v.is_number_integer()) out += (out.empty() ? "" : ",") + std::to_string(v.get<long long>());
  return out;
}

// B's parameters from A's ready file (crossrun.cc documents its fields).
std::vector<std::string> crossrun_params(const Json& ready,
                                         const std::string& other_workspace_host) {
  std::vector<std::string> p = {"other_workspace=" + other_workspace_host};
  if (ready.contains("pids")) p.push_back("other_pids=" + join(ready["pids"]));
  if (ready.contains("host_pid") && ready["host_pid"].is_number_integer())
    p.back() += "," + std::to_string(ready["host_pid"].get<long long>());
  auto put = [&](const char* key, const char* param) {
    if (!ready.contains(key) || ready[key].is_null()) return;
    const Json& v = ready[key];
    p.push_back(std::string(param) + "=" + (v.is_string() ? v.get<std::string>() : v.dump()));
  };
  put("abstract", "other_abstract");
  put("port", "other_port");
  put("shm_key", "other_shm_key");
  put("msg_key", "other_msg_key");
  put("inotify_held", "other_inotify_held");
  put("inotify_user_limit", "other_inotify_user_limit");
  return p;
}

// Files in run A's workspace the host writes to drive its holder (crossrun.cc): the end of
// its inotify hold, the start of its burst, its release. The workspace is the run's: a link
// planted at the name is replaced, never followed (as root, it could create a host file).
void signal_holder(const std::string& workspace_a, const std::string& marker, const char* what) {
  (void)replace_file_in(workspace_a, "sandgate-crossrun-" + marker + "." + what, "");
}

// Run A's crossrun.plant: a resident process of run A that holds its canaries, listeners and
// SysV objects while run B's probes run, driven through files in A's workspace (crossrun.cc):
// its ready file, the host's signals (burst, inotify-release, release), and its report.
//
// Where the host sees A's workspace live, the holder is an exec of A's in a thread here; its
// ready file is read and the signals written on the host, nothing followed; its report is its
// stdout. A microVM's run takes one exec at a time and its workspace is in its guest: there the
// holder detaches (a resident process lives on in its run), every file is read or written by
// an exec of A's, and the holder's stdout goes to a file of its own, renamed into place when
// it ends.
class CrossrunHolder {
 public:
  CrossrunHolder(session::RunSession& a, const std::string& marker)
      : a_(a),
        live_(a.workspace_live_on_host()),
        marker_(marker),
        name_("sandgate-crossrun-" + marker) {}
  ~CrossrunHolder() {
    if (started_ && !released_) signal("release");
    if (thread_.joinable()) thread_.join();
  }
  CrossrunHolder(const CrossrunHolder&) = delete;
  CrossrunHolder& operator=(const CrossrunHolder&) = delete;

  // How long it holds at most: it ends when released. A guest's probes take seconds each under
  // TCG, so it waits longer there.
  std::string hold_param() const { return live_ ? "hold_ms=20000" : "hold_ms=600000"; }

  void start(std::vector<std::string> argv) {
    started_ = true;
    providers::Call c;
    if (live_) {
      c.argv = std::move(argv);
      thread_ = std::thread([this, c] { result_ = a_.run_resident(c); });
      return;
    }
    c.argv = {"/bin/sh", "-c",
              "(\"$@\" </dev/null >\"$0.tmp\" 2>/dev/null; mv -f \"$0.tmp\" \"$0\") "
              "</dev/null >/dev/null 2>&1 &",
              report_name()};
    c.argv.insert(c.argv.end(), argv.begin(), argv.end());
    auto r = a_.run_resident(c);
    if (!r.ok())
      result_ = std::move(r).error();
    else if (!r->status.exited || r->status.code != 0)
      result_ = logic_error("start run A's holder", r->status.describe() + ": " + r->stderr_data);
  }

  // Its ready file, once it holds everything.
  Result<Json> wait_ready() {
    const auto timeout = live_ ? std::chrono::seconds(10) : std::chrono::seconds(180);
    const auto deadline = steady_clock::now() + timeout;
    const std::string ready = name_ + ".ready.json";
    while (steady_clock::now() < deadline) {
      if (!live_ && !result_.ok()) return result_.error();
      SG_ASSIGN_OR_RETURN(auto text, a_.get_file(ready, 1 << 20));
      if (text) return parse_json(*text, "run A's " + ready);
      if (!live_) {  // a holder that ended early has left its report
        SG_ASSIGN_OR_RETURN(auto report, a_.get_file(report_name(), 1 << 20));
        if (report)
          return logic_error("wait for run A", "its holder ended before it was ready", *report);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(live_ ? 5 : 100));
    }
    return logic_error("wait for run A", "no ready file after " + format_duration(timeout),
                       name_ + ".ready.json");
  }

  // One of the holder's signals: an empty file of that name in A's workspace.
  void signal(const char* what) {
    if (!started_) return;
    if (std::string_view(what) == "release") released_ = true;
    if (live_)
      signal_holder(a_.workspace_host_path(), marker_, what);
    else
      (void)a_.put_file(name_ + "." + what, "");
  }

  // What it printed, once released: its reports.
  Result<std::string> report() {
    if (live_) {
      if (thread_.joinable()) thread_.join();
      if (!result_.ok()) return result_.error();
      return result_->stdout_data;
    }
    if (!result_.ok()) return result_.error();
    const auto deadline = steady_clock::now() + std::chrono::seconds(120);
    while (steady_clock::now() < deadline) {
      SG_ASSIGN_OR_RETURN(auto text, a_.get_file(report_name(), 4 << 20));
      if (text) return std::move(*text);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return logic_error("wait for run A's holder", "no report 120 s after its release",
                       report_name());
  }

 private:
  std::string report_name() const { return name_ + ".report"; }

  session::RunSession& a_;
  const bool live_;
  const std::string marker_, name_;
  bool started_ = false, released_ = false;
  std::thread thread_;
  Result<ExecResult> result_ = ExecResult{};
};

// What run A's holder saw of B: a touch is host-side evidence against B's probes.
std::vector<std::string> crossrun_touches(const ProbeReport& plant) {
  std::vector<std::string> out;
  const Json& ev = plant.evidence;
  if (!ev.contains("observed")) return out;
  const Json& o = ev["observed"];
  if (o.contains("connections") && o["connections"].is_array())
    for (const auto& c : o["connections"]) out.push_back("a connection: " + c.dump());
  if (o.value("signals_received", 0) > 0)
    out.push_back(std::to_string(o.value("signals_received", 0)) +
                  " signal(s), the last from pid " +
                  std::to_string(o.value("last_signal_sender", 0)));
  if (o.value("shm_max_attached", 0) > 1)
    out.push_back("its shared memory attached by another process");
  if (o.contains("msg_left") && o["msg_left"].is_number() && o["msg_left"].get<long long>() == 0)
    out.push_back("its queued message taken");
  return out;
}

// proc.newer_syscall's number: the first above the highest the seccomp library can name, so
// a filter that allows what it does not know is caught. The native baseline shows whether
// this kernel has it.
std::string newer_syscall_param() {
  return "newer_syscall_nr=" + std::to_string(providers::seccomp_highest_known_syscall() + 1);
}

}  // namespace

// The host kernel's release (uname(2)), for disclosure.kernel_release.
static std::string host_release() {
  struct utsname u {};
  return ::uname(&u) == 0 ? std::string(u.release) : std::string();
}

Witness witness_for(const std::string& id) { return plan_for(id).witness; }

Result<std::vector<ProbeReport>> parse_reports(const std::string& output,
                                               const std::string& source) {
  std::vector<ProbeReport> out;
  std::istringstream in(output);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty() || line[0] != '{') continue;
    SG_ASSIGN_OR_RETURN(Json j, parse_json(line, source + " line " + std::to_string(n)));
    auto r = ProbeReport::from_json(j);
    if (!r.ok()) return std::move(r).error().context_add(source + " line " + std::to_string(n));
    out.push_back(std::move(r).value());
  }
  return out;
}

Json ProviderRun::to_json() const {
  Json j = {{"provider", provider}, {"unsafe", unsafe}, {"wall_ms", to_millis(wall)}};
  Json w = Json::array();
  for (auto x : weakenings) w.push_back(providers::to_string(x));
  j["weakenings"] = w;
  if (!egress_allow.empty()) j["network"] = {{"mode", "allowlist"}, {"allow", egress_allow}};
  if (!base_paths.empty()) j["base_paths"] = base_paths;
  if (workspace_size != 0) j["workspace_size"] = workspace_size;
  if (landlock_abi >= 0) j["landlock_abi"] = landlock_abi;
  Json list = Json::array();
  for (const auto& v : judgements) list.push_back(v.to_json());
  j["judgements"] = list;
  auto t = tally(judgements);
  j["tally"] = {{"blocked", t.blocked},
                {"exposed", t.exposed},
                {"inconclusive", t.inconclusive},
                {"warning", t.warning}};
  Json declared_caps = Json::array(), effective_caps = Json::array(), contradicted = Json::array();
  for (auto c : declared) declared_caps.push_back(to_string(c));
  for (auto c : effective()) effective_caps.push_back(to_string(c));
  for (const auto& k : contradictions())
    contradicted.push_back({{"capability", to_string(k.capability)}, {"probes", k.probes}});
  j["declared_capabilities"] = declared_caps;
  j["contradicted_capabilities"] = contradicted;
  j["effective_capabilities"] = effective_caps;
  return j;
}

std::vector<Contradiction> ProviderRun::contradictions() const {
  return contradicted_capabilities(declared, judgements);
}

CapabilitySet ProviderRun::effective() const {
  CapabilitySet out = declared;
  for (const auto& k : contradictions()) out.erase(k.capability);
  return out;
}

std::vector<const Judgement*> ProviderRun::exposed() const {
  std::vector<const Judgement*> out;
  for (const auto& j : judgements)
    if (j.verdict == Verdict::kExposed) out.push_back(&j);
  return out;
}

std::vector<const Judgement*> ProviderRun::failing() const {
  std::vector<const Judgement*> out;
  for (const auto* j : exposed())
    if (j->known_limit.empty()) out.push_back(j);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Suite set-up and the native baseline.

void Suite::progress(const std::string& line) const {
  if (options_.progress) options_.progress(line);
}

bool Suite::selected(const std::string& boundary) const {
  return options_.only.empty() ||
         std::find(options_.only.begin(), options_.only.end(), boundary) != options_.only.end();
}

std::vector<const Suite::Listed*> Suite::probes_of(const std::string& boundary) const {
  std::vector<const Listed*> out;
  for (const auto& l : catalogue_)
    if (l.boundary == boundary) out.push_back(&l);
  return out;
}

Result<std::unique_ptr<Suite>> Suite::create(SuiteOptions options) {
  if (options.probe_binary.empty() || ::access(options.probe_binary.c_str(), X_OK) != 0)
    return logic_error("probe suite", "sandgate-probe not found beside sandgate",
                       options.probe_binary);
  for (const auto& b : options.only)
    if (std::find(all_boundaries().begin(), all_boundaries().end(), b) == all_boundaries().end())
      return logic_error("probe suite",
                         "unknown boundary '" + b +
                             "' (fs, net, creds, proc, disclosure, crossrun, persist, resource)");
  std::unique_ptr<Suite> s(new Suite(std::move(options)));
  // The host's namespaces: sandgate's own, read before entering anything. Natively the probes
  // are its children and share them. Not /proc/1's: reading another process's namespaces takes
  // ptrace access to it, and where pid 1 refuses that (this project's VMs: EACCES even for
  // root) the answer was 0, so proc.kill_all took the native baseline for a sandbox and sent
  // SIGWINCH to every process on the host.
  s->host_pidns_ = ns_inode(s->options_.paths.proc + "/self/ns/pid");
  s->host_mntns_ = ns_inode(s->options_.paths.proc + "/self/ns/mnt");
  if (s->host_pidns_ == 0 || s->host_mntns_ == 0)
    return sys_error("read sandgate's own namespaces", s->options_.paths.proc + "/self/ns");

  // The lab first, entered before any provider or thread.
  s->progress("lab: creating the network namespace and its decoys");
  SG_ASSIGN_OR_RETURN(s->lab_, lab::Lab::create(s->options_.paths));
  SG_ASSIGN_OR_RETURN(auto guard, s->lab_->enter());
  s->in_lab_.emplace(std::move(guard));

  CanaryOptions copts;
  copts.paths = s->options_.paths;
  copts.probe_binary = s->options_.probe_binary;
  copts.base_canary_dirs = Canaries::base_canary_sites();
  SG_ASSIGN_OR_RETURN(s->canaries_, Canaries::plant(copts));
  s->progress("canaries: marker " + s->canaries_->marker() + " in " + s->canaries_->dir());

  SG_ASSIGN_OR_RETURN(auto listed, run_command({s->options_.probe_binary, "list"}));
  if (!listed.status.exited || listed.status.code != 0)
    return logic_error("sandgate-probe list", listed.output);
  std::istringstream in(listed.output);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;
    SG_ASSIGN_OR_RETURN(Json j, parse_json(line, "sandgate-probe list"));
    Listed l;
    l.id = j.value("id", "");
    l.boundary = j.value("boundary", "");
    l.attempt = j.value("attempt", "");
    if (j.contains("params") && j["params"].is_array())
      for (const auto& p : j["params"]) l.params.push_back(p.get<std::string>());
    if (l.id == "resource.limits_seen") continue;  // informative only: nothing to judge
    s->catalogue_.push_back(std::move(l));
  }
  SG_TRY(s->run_baseline());
  return s;
}

// Probes that ask the sandbox's own resolver (/etc/resolv.conf): run natively (the lab's DNS
// as the resolver) and in allowlisted runs, which have one; a --net none run has none.
bool needs_resolver(const std::string& id) {
  return id == "net.dns_exfil_resolver" || id == "net.registry_by_name";
}

// ---------------------------------------------------------------------------------------------
// One provider run.

class Suite::Context {
 public:
  Context(Suite& s, providers::Provider& p, const std::vector<providers::Weakening>& w)
      : s_(s), provider_(p), weakenings_(w), facts_(ProviderFacts::of(p.info())) {
    jailed_ = !p.info().unsafe;
    provider_name_ = p.name();
    probe_ = jailed_ ? kProbeInside : s.options_.probe_binary;
    if (!s.options_.egress_allow.empty() && p.capabilities().count(Capability::kNetEgressPolicy))
      facts_.egress_allow = s.options_.egress_allow;
  }

  Status run(ProviderRun& out) {
    controller::ControllerOptions copts;
    copts.paths = s_.options_.paths;
    copts.root = s_.options_.cgroup_root;
    copts.policy = probe_policy();
    SG_ASSIGN_OR_RETURN(controller_, controller::Controller::create(std::move(copts)));
    for (const auto& b : all_boundaries()) steps_ += s_.selected(b) ? 1 : 0;
    for (const char* b : {"fs", "net", "creds", "proc", "disclosure"})
      if (s_.selected(b)) SG_TRY(run_simple(b, out.judgements));
    if (s_.selected("crossrun")) SG_TRY(run_crossrun(out.judgements));
    if (s_.selected("persist")) SG_TRY(run_persist(out.judgements));
    if (s_.selected("resource")) SG_TRY(run_resource(out.judgements));
    out.landlock_abi = landlock_abi_;
    return {};
  }

 private:
  providers::EnvSpec spec() const {
    providers::EnvSpec spec;
    spec.workspace_recipe = s_.canaries_->recipe();
    spec.weakenings = weakenings_;
    // The narrowed base where the provider has one to narrow (host_dir has none: it would
    // refuse the spec).
    if (jailed_) spec.base_paths = s_.options_.base_paths;
    // The one provider that has a workspace filesystem (the others refuse the option).
    if (provider_name_ == "namespaces") spec.workspace_size = s_.options_.workspace_size;
    // Every run carries a secret whose value carries the marker: the creds probes that read
    // /proc/*/environ and cmdline find it if it leaks there, crossrun.secret and
    // persist.secret look for another run's copy.
    spec.secrets = {{kProbeSecretName, secret_value()}};
    if (!facts_.egress_allow.empty()) {
      spec.network = providers::NetworkMode::kAllowlist;
      spec.egress = facts_.egress_allow;
      spec.upstream_netns = s_.lab_->netns_path();
    }
    if (jailed_) {
      spec.readonly_mounts.push_back({s_.options_.probe_binary, kProbeInside});
      if (!s_.canaries_->setuid_helper().empty())
        spec.readonly_mounts.push_back({s_.canaries_->setuid_helper(), kSetuidInside});
    }
    return spec;
  }

  // "provider: what (k/n)": the k-th of the n selected boundaries, for the progress line.
  void step(const std::string& what) {
    s_.progress(provider_.name() + ": " + what + " (" + std::to_string(++step_) + "/" +
                std::to_string(steps_) + ")");
  }

  std::string secret_value() const { return "sandgate-secret-" + s_.marker() + "\n"; }

  Result<std::unique_ptr<session::RunSession>> open_run() {
    session::RunOptions options;
    options.tracer = s_.options_.tracer;
    options.egress = s_.options_.egress_guard;
    if (!facts_.egress_allow.empty()) {
      // The run's resolver asks the lab's DNS decoy, which answers the registry's name.
      auto dns = session::parse_dns_upstream(lab::kDnsServer);
      if (!dns.ok()) return std::move(dns).error();
      options.dns_upstream = *dns;
    }
    auto run = session::RunSession::open(*controller_, provider_, spec(), options);
    if (run.ok() && (*run)->landlock_abi() >= 0) landlock_abi_ = (*run)->landlock_abi();
    return run;
  }

  // Parameters every probe gets, with the workspace and the setuid helper as it sees them.
  std::vector<std::string> params(const std::string& workspace) const {
    const Canaries& c = *s_.canaries_;
    return s_.base_params(workspace, c.setuid_helper().empty() ? ""
                                     : jailed_                 ? std::string(kSetuidInside)
                                                               : c.setuid_helper());
  }

  // What the host saw during one call: decoy events, sentinel signals, files in the write dir.
  struct Window {
    uint64_t seq = 0;
    size_t sentinel_lines = 0;
  };
  Window open_window() const {
    Window w;
    auto events = s_.lab_->events();
    w.seq = events.empty() ? 0 : events.back().seq;
    w.sentinel_lines = s_.canaries_->sentinel_signals().size();
    return w;
  }
  HostEvidence close_window(const Window& w) const {
    (void)s_.lab_->settle();
    HostEvidence h;
    auto events = s_.lab_->events_after(w.seq);
    std::vector<EgressRule> allow = facts_.egress_allow;
    allow.insert(allow.end(), resolved_.begin(), resolved_.end());
    h.allowlisted = decoy_evidence(take_allowlisted(events, allow), "", true);
    h.decoy_events = decoy_evidence(events, s_.canaries_->marker(), true);
    h.sentinel_signals = s_.canaries_->sentinel_signals(w.sentinel_lines);
    h.files_appeared = marked_entries(s_.canaries_->host_write_dir(), s_.canaries_->marker());
    // Gone once witnessed, so the next probe's window starts clean.
    for (const auto& f : h.files_appeared) ::unlink(f.c_str());
    return h;
  }

  std::optional<ProbeReport> baseline(const std::string& id) const {
    auto it = s_.baseline_.find(id);
    if (it == s_.baseline_.end()) return std::nullopt;
    return it->second;
  }

  Judgement judge(const std::string& id, const std::optional<ProbeReport>& report,
                  const HostEvidence& host, const std::string& failure) {
    // The kernel's account of the call, when the call ran this probe alone (a call of several
    // probes cannot say whose action the kernel saw).
    if (traced_ && traced_ids_ == std::vector<std::string>{id}) {
      HostEvidence with_kernel = host;
      if (report) with_kernel.kernel = kernel_crossings(*report, *traced_);
      for (const auto& line : describe(*traced_))
        if (line.rfind("connect", 0) == 0 || line.rfind("sendto", 0) == 0 ||
            line.rfind("open ", 0) == 0)
          with_kernel.notes.push_back("kernel saw: " + line);
      traced_.reset();
      return judge(id, report, with_kernel, failure);
    }
    if (report)
      return with_known_limit(
          judge_probe(baseline(id), *report, witness_for(id), host, facts_, s_.marker()));
    // No report: the probe was killed or its output was lost. Host evidence still counts.
    ProbeReport missing;
    missing.id = id;
    missing.boundary = id.substr(0, id.find('.'));
    missing.attempt = id;
    missing.result = ProbeResult::kError;
    missing.detail = failure.empty() ? "no report" : failure;
    return with_known_limit(
        judge_probe(baseline(id), missing, witness_for(id), host, facts_, s_.marker()));
  }

  // An exposure no setting of this provider closes (plan.h, only_hidden_by), unless the
  // provider declares the separate kernel that would.
  // Likewise what the default read-only base shows (plan.h, default_base_hidden_by), when this
  // jailed run used it.
  Judgement with_known_limit(Judgement j) const {
    if (j.verdict != Verdict::kExposed) return j;
    const ProbePlan& plan = plan_for(j.id);
    if (!plan.only_hidden_by.empty() && !facts_.capabilities.count(Capability::kKernelSeparate))
      j.known_limit = "only " + plan.only_hidden_by + " hides it";
    else if (!plan.default_base_hidden_by.empty() && jailed_ && s_.options_.base_paths.empty())
      j.known_limit = "the default base binds the host's whole /usr: only " +
                      plan.default_base_hidden_by + " hides it";
    return j;
  }

  // What keeps one run's processes and kernel objects from another's and the host's: the
  // run's namespaces, or a kernel of its own (judge.h, Layer::kKernel).
  Layer isolating_layer() const {
    return facts_.capabilities.count(Capability::kKernelSeparate) ? Layer::kKernel
                                                                  : Layer::kNamespace;
  }

  // One call of the probe binary; the reports it printed.
  Result<std::vector<ProbeReport>> call(session::RunSession& run,
                                        const std::vector<std::string>& ids,
                                        const std::vector<std::string>& extra,
                                        const std::string& intent = "probe", int stdin_fd = -1) {
    auto p = params(run.workspace_path());
    // The suite runs in the lab: a run whose routes all end in the launcher's namespace (a
    // guest's tap there) can only reach the lab's decoys, though they are not local to it.
    if (run.routes_end_in_launcher()) p.push_back("lab_routed=1");
    p.insert(p.end(), extra.begin(), extra.end());
    SG_ASSIGN_OR_RETURN(auto called,
                        call_probe(run, probe_argv(probe_, ids, p), intent, stdin_fd));
    traced_ = called.outcome.observed.traced;
    traced_ids_ = ids;
    memory_grant_.reset();
    if (called.outcome.grant.memory_max) memory_grant_ = called.outcome.grant.memory_max->value;
    // What the run's resolver admitted: the addresses of the list's names, allowed by design.
    for (const auto& v : called.outcome.observed.egress) {
      if (v.hook != "dns" || !v.allowed || v.address.empty()) continue;
      for (const auto& rule : facts_.egress_allow) {
        if (rule.name != v.name) continue;
        std::istringstream addresses(v.address);
        std::string a;
        while (std::getline(addresses, a, ',')) {
          auto r = parse_egress_rule(a + ":" + std::to_string(rule.port));
          if (!r.ok()) continue;
          r->protocol = rule.protocol;
          r->port = rule.port;
          resolved_.push_back(*r);
        }
      }
    }
    return parse_reports(called.outcome.exec.stdout_data, "sandgate-probe in " + provider_.name());
  }

  Status run_simple(const std::string& boundary, std::vector<Judgement>& out) {
    step(boundary);
    SG_ASSIGN_OR_RETURN(auto run, open_run());
    for (const Listed* l : s_.probes_of(boundary)) {
      // The probes of a run's own resolver need one: only the allowlist variant has it.
      if (facts_.egress_allow.empty() && needs_resolver(l->id)) continue;
      const size_t logged = run->dns_resolver() ? run->dns_resolver()->log().size() : 0;
      Window w = open_window();
      std::optional<HostPty> pty;
      if (l->id == kPtyProbe) {
        SG_ASSIGN_OR_RETURN(pty, open_host_pty());
      }
      auto reports = pty ? call(*run, {l->id}, {"stdin_pty=1"}, "probe", pty->terminal.get())
                         : call(*run, {l->id}, {});
      pty.reset();
      HostEvidence host = close_window(w);
      if (run->dns_resolver() && needs_resolver(l->id)) {
        // The resolver's own log is host-side: what it decided about this call's queries.
        auto log = run->dns_resolver()->log();
        for (size_t i = logged; i < log.size(); ++i)
          host.notes.push_back("the run's resolver " + log[i]);
        if (l->id == "net.dns_exfil_resolver" && host.decoy_events.empty())
          host.notes.push_back(
              "the lab's DNS (the resolver's upstream) saw no query carrying the marker");
      }
      std::optional<ProbeReport> r;
      if (reports.ok()) r = find_report(*reports, l->id);
      if (r && boundary == "disclosure") {
        // The host's own copy of what it read: the second witness of a disclosure.
        // The workspace, its run directory (an overlay's upperdir is there), the work
        // directory, and the run's directory below it as a mount of the work directory's
        // filesystem names it ("/sandgate/<run>/..." when /var/tmp is a mount of its own).
        std::string ws = run->workspace_host_path();
        std::string run_dir = ws.substr(0, ws.rfind('/'));
        std::string run_rel = "/" + run_dir.substr(run_dir.rfind('/') + 1) + "/";
        auto view =
            disclosure_host_view(l->id, *r, s_.options_.paths.proc, host_release(),
                                 {ws, run_dir, s_.options_.paths.work_dir, run_rel}, memory_grant_);
        host.disclosed = std::move(view.disclosed);
        host.notes.insert(host.notes.end(), view.notes.begin(), view.notes.end());
      }
      out.push_back(judge(l->id, r, host, reports.ok() ? "" : reports.error().message()));
    }
    return run->close();
  }

  Status run_crossrun(std::vector<Judgement>& out) {
    step("crossrun, two runs at once");
    SG_ASSIGN_OR_RETURN(auto a, open_run());
    SG_ASSIGN_OR_RETURN(auto b, open_run());
    const std::string m = s_.marker();
    Result<std::string> a_stdout = logic_error("crossrun", "run A did not run");
    {
      CrossrunHolder holder(*a, m);
      auto p = params(a->workspace_path());
      p.push_back(holder.hold_param());
      p.push_back("hold_inotify=1");
      holder.start(probe_argv(probe_, {"crossrun.plant"}, p));
      auto ready = holder.wait_ready();
      std::vector<std::string> extra;
      if (ready.ok()) extra = crossrun_params(*ready, a->workspace_host_path());
      extra.push_back("other_secrets=" + a->secrets_host_path());
      for (const Listed* l : s_.probes_of("crossrun")) {
        if (l->id == "crossrun.plant") continue;
        // A bursts about a second after this, while B watches.
        if (l->id == "crossrun.load_side_channel") holder.signal("burst");
        Window w = open_window();
        auto reports =
            ready.ok() ? call(*b, {l->id}, extra) : Result<std::vector<ProbeReport>>(ready.error());
        // A's inotify hold starves whoever shares its uid's count: it ends as soon as it is seen.
        if (l->id == "crossrun.user_inotify") holder.signal("inotify-release");
        HostEvidence host = close_window(w);
        if (l->id == "crossrun.load_side_channel")
          host.notes.push_back(
              "/proc/loadavg, /proc/stat and /proc/pressure/* count the whole kernel unless the "
              "provider gives each run its own view of them (the per-run /proc views of the "
              "namespaces jail, and of podman but for /proc/pressure/*) or its own kernel (a "
              "microVM)");
        std::optional<ProbeReport> r;
        if (reports.ok()) r = find_report(*reports, l->id);
        out.push_back(judge(l->id, r, host, reports.ok() ? "" : reports.error().message()));
      }
      holder.signal("release");
      a_stdout = holder.report();
    }
    // Run A's own account of who touched its objects: the host-side witness of the whole
    // boundary (a connection, a signal, an attach, a message taken).
    HostEvidence touched;
    std::optional<ProbeReport> plant;
    if (a_stdout.ok()) {
      auto reports = parse_reports(*a_stdout, "crossrun.plant");
      if (reports.ok()) plant = find_report(*reports, "crossrun.plant");
    }
    if (plant) touched.other_run = crossrun_touches(*plant);
    Judgement j =
        judge_host_check("crossrun.plant", "crossrun",
                         "run A holds canaries, listeners and SysV objects while run B runs",
                         touched, isolating_layer(), "run A saw nobody touch what it held");
    if (!plant) {
      j.verdict = Verdict::kInconclusive;
      j.layer = Layer::kNone;
      j.why = "run A's holder did not report" +
              (a_stdout.ok() ? "" : ": " + a_stdout.error().message());
    }
    j.sandbox = plant;
    out.push_back(std::move(j));
    Status first = b->close();
    if (auto s = a->close(); first.ok()) first = std::move(s);
    return first;
  }

  Status run_persist(std::vector<Judgement>& out) {
    step("persist: plant, destroy, look, fresh run");
    const std::string m = s_.marker();
    const std::string home = s_.canaries_->home();
    auto home_before = snapshot_tree(home);
    controller::Cgroup cgroup;
    HeldPidns pidns;  // held until the look below: its number cannot be another run's
    std::string destroyed_secrets;
    {
      SG_ASSIGN_OR_RETURN(auto run, open_run());
      cgroup = run->run().cgroup();
      destroyed_secrets = run->secrets_host_path();
      // The run's pid namespace, from its supervisor (the first process in its main cgroup).
      auto procs = controller_->backend().procs(run->run().main_cgroup());
      if (procs.ok() && !procs->empty()) pidns = hold_pidns(s_.options_.paths.proc, procs->front());
      auto plant = call(*run, {"persist.plant"}, {"linger_s=30"});
      if (!plant.ok()) spdlog::warn("persist.plant: {}", plant.error().message());
      // .git/hooks and .git/config stay inside the workspace, so nothing on the host shows
      // them: the plant's own account is the evidence (a warning, not exposed).
      std::optional<ProbeReport> planted;
      if (plant.ok()) planted = find_report(*plant, "persist.plant");
      out.push_back(judge_git_persistence(planted, plant.ok() ? "" : plant.error().message()));
      SG_TRY(run->close());
    }
    HostEvidence after;
    std::set<pid_t> exclude = {::getpid(), s_.canaries_->sentinel_pid()};
    after.leftover_processes = marked_processes(s_.options_.paths.proc, m, exclude);
    for (auto& p : processes_in_pidns(s_.options_.paths.proc, pidns.inode))
      after.leftover_processes.push_back(p);
    after.leftover_cgroups = remaining_cgroups(cgroup);
    for (const char* dir : {"/tmp", "/var/tmp"})
      for (auto& f : marked_entries(dir, m))
        if (f != s_.canaries_->dir()) after.files_appeared.push_back(f);  // not the canaries' own
    for (auto& f : tree_changes(home, home_before, snapshot_tree(home)))
      after.files_appeared.push_back(f);
    // The run's secret must have died with it: seen from the host, its directory is gone.
    if (!destroyed_secrets.empty() && ::access(destroyed_secrets.c_str(), F_OK) == 0)
      after.files_appeared.push_back(destroyed_secrets);
    out.push_back(judge_host_check(
        "persist.after_destroy", "persist",
        "after destroy: no process, cgroup, marker or secret left on the host", after,
        isolating_layer(), "the run's processes, cgroups and files went with it"));
    // Left by an unsafe provider: removed before the next look.
    (void)run_command(
        {s_.options_.probe_binary, "cleanup", "--param", "marker=" + m, "--param", "home=" + home});
    SG_ASSIGN_OR_RETURN(auto fresh, open_run());
    auto found = call(*fresh, {"persist.find"}, {});
    std::optional<ProbeReport> r;
    if (found.ok()) r = find_report(*found, "persist.find");
    out.push_back(judge("persist.find", r, {}, found.ok() ? "" : found.error().message()));
    auto secret = call(*fresh, {"persist.secret"}, {"other_secrets=" + destroyed_secrets});
    std::optional<ProbeReport> sr;
    if (secret.ok()) sr = find_report(*secret, "persist.secret");
    out.push_back(judge("persist.secret", sr, {}, secret.ok() ? "" : secret.error().message()));
    return fresh->close();
  }

  Status run_resource(std::vector<Judgement>& out) {
    step("resource, through the controller");
    SG_ASSIGN_OR_RETURN(auto run, open_run());
    for (const Listed* l : s_.probes_of("resource")) {
      const ProbePlan& plan = plan_for(l->id);
      if (plan.witness != Witness::kResource) continue;  // informative only
      auto p = params(run->workspace_path());
      p.insert(p.end(), plan.params.begin(), plan.params.end());
      auto called = call_probe(*run, probe_argv(probe_, {plan.id}, p), plan.intent);
      ResourceEvidence ev;
      ev.expected = plan.expected_terminations;
      ev.rlimit_count_key = plan.rlimit_count_key;
      ev.rlimit_errno = plan.rlimit_errno;
      std::optional<ProbeReport> r;
      if (called.ok()) {
        const auto& o = called->outcome;
        ev.termination = controller::to_string(o.termination);
        ev.reason = o.reason;
        ev.limit_mismatches = called->limits.mismatches;
        ev.limits_checked = called->limits.checked;
        if (!plan.rlimit.empty()) {
          // Which rlimit holds this probe, and whether the grant sets it at all.
          ProcessLimits limits = o.grant.to_process_limits();
          std::optional<uint64_t> granted =
              plan.rlimit == "open_files" ? limits.open_files : limits.file_size;
          ev.limit_declared = granted.has_value();
          ev.rlimit_granted = granted.value_or(0);
          if (auto it = called->host_rlimits.find(plan.rlimit); it != called->host_rlimits.end())
            ev.rlimit_host = it->second;
        }
        if (plan.id == std::string("resource.cpu_spin") && o.observed.cpu_throttled_us > 0)
          ev.held_by = "throttled " + std::to_string(o.observed.cpu_throttled_us / 1000) +
                       "ms at the grant's " + std::to_string(o.grant.cpu_cores.value_or(0)) +
                       " cores";
        auto reports = parse_reports(o.exec.stdout_data, plan.id);
        if (reports.ok()) r = find_report(*reports, plan.id);
      } else {
        ev.termination = "not run";
        ev.reason = called.error().message();
      }
      out.push_back(judge_resource(baseline(plan.id), r, plan.id, ev));
    }
    return run->close();
  }

  Suite& s_;
  providers::Provider& provider_;
  std::vector<providers::Weakening> weakenings_;
  ProviderFacts facts_;
  bool jailed_ = true;
  std::string provider_name_;
  std::string probe_;
  // The last call's kernel account (SuiteOptions::tracer) and the probes that call ran.
  std::optional<TracedActivity> traced_;
  std::vector<std::string> traced_ids_;
  std::optional<uint64_t> memory_grant_;  // the last call's memory grant in bytes, if any
  std::vector<EgressRule> resolved_;  // addresses the run's resolver admitted (allowlist)
  int landlock_abi_ = -1;             // of the kernel the runs' calls run under (-1: unknown)
  std::unique_ptr<controller::Controller> controller_;
  size_t step_ = 0, steps_ = 0;  // boundaries run so far, and selected
};

Status Suite::run_baseline() {
  auto start = steady_clock::now();
  progress(
      "baseline: every probe natively, as root (crossrun.user_inotify's hold as a throwaway uid), "
      "in the lab");
  const Canaries& c = *canaries_;
  std::string ws_a = c.dir() + "/native-a", ws_b = c.dir() + "/native-b";
  SG_TRY(copy_tree(c.recipe(), ws_a, 0, 0));
  SG_TRY(copy_tree(c.recipe(), ws_b, 0, 0));
  // Natively a "secret" is a host file like any other: the secret probes must reach it.
  const std::string native_secrets = c.dir() + "/native-secrets";
  SG_TRY(make_dirs(native_secrets, 0755));
  SG_TRY(write_file(native_secrets + "/" + kProbeSecretName, "sandgate-secret-" + c.marker() + "\n",
                    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC));
  auto params = [&](const std::string& ws) { return base_params(ws, c.setuid_helper()); };
  // `wrap` goes before the probe's argv (a shell that sets something up and execs it).
  auto run_native = [&](const std::vector<std::string>& ids, std::vector<std::string> p,
                        std::vector<std::string> wrap = {}) -> Status {
    if (ids.empty()) return {};
    auto argv = probe_argv(options_.probe_binary, ids, p);
    argv.insert(argv.begin(), wrap.begin(), wrap.end());
    SG_ASSIGN_OR_RETURN(auto r, run_command(argv, std::chrono::seconds(120)));
    SG_ASSIGN_OR_RETURN(auto reports, parse_reports(r.output, "native sandgate-probe"));
    for (auto& rep : reports) baseline_[rep.id] = std::move(rep);
    return {};
  };
  std::vector<std::string> simple;
  bool leaked_fds = false, pty_probe = false;
  for (const char* b : {"fs", "net", "creds", "proc", "disclosure"})
    if (selected(b))
      for (const Listed* l : probes_of(b)) {
        if (l->id == "fs.leaked_fds")
          leaked_fds = true;
        else if (l->id == kPtyProbe)
          pty_probe = true;
        else
          simple.push_back(l->id);
      }
  auto simple_params = params(ws_a);
  simple_params.push_back(std::string("nameserver=") + lab::kDnsServer);  // natively, the lab's DNS
  SG_TRY(run_native(simple, simple_params));
  // A launcher that leaks a directory fd (here the canaries' host directory, as fd 9): natively
  // fs.leaked_fds must find it and climb out through it, or its verdicts would rest on nothing.
  if (leaked_fds)
    SG_TRY(run_native({"fs.leaked_fds"}, params(ws_a),
                      {"/bin/sh", "-c", "exec 9<\"$0\" && exec \"$@\"", c.dir()}));
  // The terminal end of a host pty as stdin, as the providers' calls get it (run_simple).
  if (pty_probe) {
    SG_ASSIGN_OR_RETURN(auto pty, open_host_pty());
    auto p = params(ws_a);
    p.push_back("stdin_pty=1");
    SG_TRY(run_native({kPtyProbe}, p,
                      {"/bin/sh", "-c", "exec 0<>\"$0\" && exec \"$@\"", pty.terminal_path}));
  }
  for (const auto& f : marked_entries(c.host_write_dir(), c.marker())) ::unlink(f.c_str());

  if (selected("crossrun")) {
    // Natively A and B share everything: each probe must reach.
    std::string ready_file = ws_a + "/sandgate-crossrun-" + c.marker() + ".ready.json";
    Result<CommandResult> a_result = logic_error("crossrun", "not run");
    auto pa = params(ws_a);
    pa.push_back("hold_ms=20000");
    pa.push_back("hold_inotify=1");
    // Natively A and B are host root: A's hold would starve every root process on the host
    // (for up to 15 s). Both take it as a throwaway uid instead, the first of a range of the id
    // pool held for the baseline (released below; gc reclaims it after a crash).
    SG_ASSIGN_OR_RETURN(auto inotify_ids, acquire_id_range(options_.paths, options_.id_pool,
                                                           "probe-baseline-" + c.marker()));
    std::string inotify_uid = "inotify_uid=" + std::to_string(inotify_ids.first());
    pa.push_back(inotify_uid);
    std::thread holder([&] {
      a_result = run_command(probe_argv(options_.probe_binary, {"crossrun.plant"}, pa),
                             std::chrono::seconds(60));
    });
    auto ready = wait_for_json(ready_file, std::chrono::seconds(10));
    std::vector<std::string> ids;
    for (const Listed* l : probes_of("crossrun"))
      if (l->id != "crossrun.plant" && l->id != "crossrun.user_inotify" &&
          l->id != "crossrun.load_side_channel")
        ids.push_back(l->id);
    Status st;
    if (ready.ok()) {
      auto pb = params(ws_b);
      for (auto& x : crossrun_params(*ready, ws_a)) pb.push_back(x);
      pb.push_back("other_secrets=" + native_secrets);
      // One at a time: A's inotify hold starves every process of its uid and ends right after;
      // A's burst starts as the side channel's watch does.
      auto pi = pb;
      pi.push_back(inotify_uid);
      st = run_native({"crossrun.user_inotify"}, pi);
      signal_holder(ws_a, c.marker(), "inotify-release");
      if (st.ok()) {
        signal_holder(ws_a, c.marker(), "burst");
        st = run_native({"crossrun.load_side_channel"}, pb);
      }
      if (st.ok()) st = run_native(ids, pb);
    }
    signal_holder(ws_a, c.marker(), "release");
    holder.join();
    if (!ready.ok()) return std::move(ready).error();
    SG_TRY(std::move(st));
  }
  if (selected("persist")) {
    auto p = params(ws_a);
    p.push_back("linger_s=5");
    SG_TRY(run_native({"persist.plant"}, p));
    SG_TRY(run_native({"persist.find"}, params(ws_a)));
    auto ps = params(ws_a);
    ps.push_back("other_secrets=" + native_secrets);
    SG_TRY(run_native({"persist.secret"}, ps));
    (void)run_command({options_.probe_binary, "cleanup", "--param", "marker=" + c.marker(),
                       "--param", "workspace=" + ws_a, "--param", "home=" + c.home()});
  }
  if (selected("resource")) {
    for (const Listed* l : probes_of("resource")) {
      const ProbePlan& plan = plan_for(l->id);
      auto p = params(ws_a);
      const auto& extra = plan.native_params_differ ? plan.native_params : plan.params;
      p.insert(p.end(), extra.begin(), extra.end());
      SG_TRY(run_native({plan.id}, p));
    }
  }
  baseline_wall_ = steady_clock::now() - start;
  return {};
}

std::vector<std::string> Suite::base_params(const std::string& workspace,
                                            const std::string& setuid_helper) const {
  const Canaries& c = *canaries_;
  std::vector<std::string> p = {
      "marker=" + c.marker(),
      "workspace=" + workspace,
      "host_canary=" + c.host_canary(),
      "host_write_dir=" + c.host_write_dir(),
      "other_workspace=" + c.recipe(),
      "home=" + c.home(),
      // The decoys' host paths: natively reached; in a sandbox they must not exist.
      "ssh_auth_sock=" + c.agent_socket(),
      "extra_sockets=" + c.runtime_socket(),
      "token_names=" + c.token_names(),
      "sentinel_pid=" + std::to_string(c.sentinel_pid()),
      "host_pidns=" + std::to_string(host_pidns_),
      "host_mntns=" + std::to_string(host_mntns_),
      newer_syscall_param(),
      "base_canaries=" + sandgate::join(c.base_canaries(), ","),
  };
  if (!setuid_helper.empty()) p.push_back("setuid_helper=" + setuid_helper);
  return p;
}

Result<ProviderRun> Suite::run(providers::Provider& provider,
                               const std::vector<providers::Weakening>& weakenings) {
  auto start = steady_clock::now();
  ProviderRun out;
  out.provider = provider.name();
  out.unsafe = provider.info().unsafe;
  out.declared = provider.capabilities();
  out.weakenings = weakenings;
  if (provider.capabilities().count(Capability::kNetEgressPolicy))
    for (const auto& r : options_.egress_allow) out.egress_allow.push_back(r.text);
  if (!provider.info().unsafe) out.base_paths = options_.base_paths;
  if (provider.name() == "namespaces") out.workspace_size = options_.workspace_size;
  Context ctx(*this, provider, weakenings);
  auto st = ctx.run(out);
  // Whatever the probes planted on the host (an unsafe or weakened provider lets them).
  (void)run_command({options_.probe_binary, "cleanup", "--param", "marker=" + marker(), "--param",
                     "home=" + canaries_->home()});
  if (!st.ok()) return std::move(st).error().context_add("probing " + provider.name());
  out.wall = steady_clock::now() - start;
  return out;
}

Status Suite::close() {
  if (closed_) return {};
  closed_ = true;
  Status first;
  if (canaries_) {
    (void)run_command({options_.probe_binary, "cleanup", "--param", "marker=" + marker(), "--param",
                       "home=" + canaries_->home()});
    first = canaries_->remove();
  }
  in_lab_.reset();
  if (lab_) {
    auto s = lab_->destroy();
    if (first.ok()) first = std::move(s);
  }
  return first;
}

Suite::~Suite() {
  if (auto s = close(); !s.ok()) spdlog::error("closing the probe suite: {}", s.error().message());
}

}  // namespace sandgate::probes
