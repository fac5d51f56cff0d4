#include "probes/judge.h"

#include <algorithm>

#include "providers/seccomp_policy.h"

namespace sandgate::probes {
namespace {

bool one_of(const std::string& s, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return s == n; });
}

// Refusals of traffic: the packet had nowhere to go, or nobody answered where it went.
bool network_refusal(const std::string& e) {
  return one_of(e, {"ENETUNREACH", "EHOSTUNREACH", "ECONNREFUSED", "ETIMEDOUT", "EADDRNOTAVAIL",
                    "ENETDOWN", "EAI_NONAME", "EAI_AGAIN"});
}

// The kernel does not offer the thing here (a socket family, a device, a feature).
bool not_offered(const std::string& e) {
  return one_of(e, {"EAFNOSUPPORT", "EPROTONOSUPPORT", "ESOCKTNOSUPPORT", "EOPNOTSUPP",
                    "ENOSYS", "EINVAL", "ENOTTY", "ENODEV", "ENXIO"});
}

// A refusal on a path (the attempt names one): its absence is the filesystem view's doing.
bool about_a_path(const ProbeReport& r) {
  if (r.evidence.is_object() && r.evidence.contains("path")) return true;
  return r.attempt.find("(/") != std::string::npos || r.attempt.find(" /") != std::string::npos ||
         r.attempt.rfind("/", 0) == 0;
}

Layer network_layer(const ProviderFacts& f) {
  if (f.capabilities.count(Capability::kNetNone)) return Layer::kNamespace;
  if (f.capabilities.count(Capability::kNetEgressPolicy)) return Layer::kEgress;
  // Nothing declared: the traffic went out and nobody answered; call it what it looked like.
  return Layer::kEgress;
}

// What a boundary's refusals are, when the errno alone does not say (a token absent, a
// capability set empty).
Layer boundary_default(const ProbeReport& r, const ProviderFacts& f) {
  if (r.boundary == "fs" || r.boundary == "persist" || r.boundary == "disclosure")
    return Layer::kMount;
  if (r.boundary == "net") return network_layer(f);
  if (r.boundary == "creds") return about_a_path(r) ? Layer::kMount : Layer::kEnvironment;
  if (r.boundary == "proc") return Layer::kPermissions;
  if (r.boundary == "resource") return Layer::kLimit;
  if (!kernel_refusal(r).empty()) return Layer::kKernel;
  return Layer::kNamespace;  // crossrun and anything new: the other side is not visible
}

// The evidence in one short line for a table cell.
std::string short_json(const Json& j, size_t max = 120) {
  if (j.is_null() || (j.is_object() && j.empty())) return "";
  std::string s = j.dump();
  if (s.size() > max) s = s.substr(0, max - 3) + "...";
  return s;
}

std::string describe_report(const ProbeReport& r) {
  std::string s = to_string(r.result);
  if (!r.errno_name.empty()) s += " " + r.errno_name;
  if (!r.detail.empty()) s += " (" + r.detail + ")";
  return s;
}

Judgement start(const ProbeReport& r, Witness w, const std::optional<ProbeReport>& baseline,
                const HostEvidence& host) {
  Judgement j;
  j.id = r.id;
  j.boundary = r.boundary;
  j.attempt = r.attempt;
  j.witness = w;
  j.baseline = baseline;
  j.sandbox = r;
  j.host = host;
  return j;
}

Judgement& decide(Judgement& j, Verdict v, std::string why, Layer layer = Layer::kNone) {
  j.verdict = v;
  j.why = std::move(why);
  j.layer = v == Verdict::kBlocked ? layer : Layer::kNone;
  return j;
}

const char* missing_witness(Witness w) {
  switch (w) {
    case Witness::kDecoy: return "no decoy logged its traffic";
    case Witness::kHostFile: return "no file appeared on the host";
    case Witness::kSentinel: return "the host sentinel received no signal";
    default: return "nothing on the host confirms it";
  }
}

// A probe held by a per-process rlimit: its own count against the grant, and the value the
// host read back. A count is compared with the grant as is (file descriptors the process held
// before it started counting make the true total a few higher, so "past" is conservative).
Judgement judge_rlimit(Judgement& j, const ProbeReport& r, const ResourceEvidence& ev) {
  const std::string granted = std::to_string(ev.rlimit_granted);
  if (!r.evidence.is_object() || !r.evidence.contains(ev.rlimit_count_key) ||
      !r.evidence[ev.rlimit_count_key].is_number_integer() ||
      r.evidence[ev.rlimit_count_key].get<int64_t>() < 0)
    return decide(j, Verdict::kInconclusive,
                  "the report has no " + ev.rlimit_count_key + " to compare with the grant of " + granted);
  auto count = static_cast<uint64_t>(r.evidence[ev.rlimit_count_key].get<int64_t>());
  std::string counted = ev.rlimit_count_key + " " + std::to_string(count);
  if (count > ev.rlimit_granted || r.result == ProbeResult::kReached)
    return decide(j, Verdict::kExposed,
                  counted + ", past the grant of " + granted + ": " + short_json(r.evidence));
  if (!ev.rlimit_host)
    return decide(j, Verdict::kInconclusive,
                  "stopped at " + counted + ", but the limit was not read back from the host");
  // The probes report EMFILE / EFBIG as an error result (they are not permission refusals):
  // the errno is what says the limit stopped them.
  if (r.errno_name == ev.rlimit_errno)
    return decide(j, Verdict::kBlocked,
                  r.errno_name + " at " + counted + ", within the grant of " + granted +
                      " (host /proc/<pid>/limits: " + std::to_string(*ev.rlimit_host) + ")",
                  Layer::kLimit);
  return decide(j, Verdict::kInconclusive,
                "probe said " + describe_report(r) + " at " + counted + "; the grant's limit would say " +
                    ev.rlimit_errno);
}

}  // namespace

std::string to_string(Verdict v) {
  switch (v) {
    case Verdict::kBlocked: return "blocked";
    case Verdict::kExposed: return "exposed";
    case Verdict::kInconclusive: return "inconclusive";
    case Verdict::kWarning: return "warning";
  }
  return "?";
}

std::string to_string(Layer l) {
  switch (l) {
    case Layer::kNone: return "";
    case Layer::kNamespace: return "namespace";
    case Layer::kSeccomp: return "seccomp";
    case Layer::kLandlock: return "landlock";
    case Layer::kMount: return "mount";
    case Layer::kPermissions: return "permissions";
    case Layer::kEgress: return "egress";
    case Layer::kLimit: return "limit";
    case Layer::kEnvironment: return "environment";
    case Layer::kKernel: return "kernel";
  }
  return "?";
}

std::string to_string(Witness w) {
  switch (w) {
    case Witness::kSelf: return "self";
    case Witness::kCanary: return "canary";
    case Witness::kDecoy: return "decoy";
    case Witness::kHostFile: return "host_file";
    case Witness::kSentinel: return "sentinel";
    case Witness::kResource: return "resource";
    case Witness::kHostView: return "host_view";
  }
  return "?";
}

ProviderFacts ProviderFacts::of(const providers::ProviderInfo& info) {
  ProviderFacts f;
  f.name = info.name;
  f.capabilities = info.capabilities;
  // Only a provider that declares the filter is credited with it: a refusal of a listed
  // syscall elsewhere comes from somewhere else (capabilities, the kernel).
  if (info.capabilities.count(Capability::kProcSeccomp))
    for (const auto& rule : providers::seccomp_denied_syscalls()) f.seccomp_denied.insert(rule.syscall);
  return f;
}

bool HostEvidence::any() const {
  return !decoy_events.empty() || !files_appeared.empty() || !sentinel_signals.empty() ||
         !leftover_processes.empty() || !leftover_cgroups.empty() || !other_run.empty() ||
         !kernel.empty() || !disclosed.empty();
}

std::vector<std::string> HostEvidence::all() const {
  std::vector<std::string> out;
  for (const auto& e : decoy_events) out.push_back("decoy saw: " + e);
  for (const auto& e : files_appeared) out.push_back("appeared on the host: " + e);
  for (const auto& e : sentinel_signals) out.push_back("sentinel received: " + e);
  for (const auto& e : leftover_processes) out.push_back("process alive after destroy: " + e);
  for (const auto& e : leftover_cgroups) out.push_back("cgroup left after destroy: " + e);
  for (const auto& e : other_run) out.push_back("run A saw: " + e);
  for (const auto& e : kernel) out.push_back("the kernel let it through: " + e);
  for (const auto& e : disclosed) out.push_back("the host's own " + e);
  return out;
}

std::string probe_syscall(const ProbeReport& r) {
  if (r.evidence.is_object() && r.evidence.contains("syscall") && r.evidence["syscall"].is_string())
    return r.evidence["syscall"].get<std::string>();
  auto paren = r.attempt.find('(');
  if (paren == std::string::npos || paren == 0) return "";
  std::string name = r.attempt.substr(0, paren);
  // "open(/x)" names a syscall; "read the canary (/x)" does not.
  if (name.find(' ') != std::string::npos) return "";
  return name;
}

bool refused_by_seccomp_filter(const ProbeReport& r, const std::optional<ProbeReport>& baseline) {
  if (r.errno_name != "ENOSYS" && r.errno_name != "EPERM") return false;
  // The probe's own reading of /proc/self/status: a filter was in place when it was refused.
  if (!r.evidence.is_object() || r.evidence.value("seccomp_mode", Json()) != 2) return false;
  // Natively the same call got past the syscall table (an implemented syscall), so neither
  // answer can be the kernel's "no such syscall": with the filter the only change, it is its.
  return baseline && baseline->result == ProbeResult::kReached && baseline->preconditions &&
         baseline->errno_name != "ENOSYS";
}

std::string kernel_refusal(const ProbeReport& r) {
  if (!r.evidence.is_object() || !r.evidence.contains("kernel_refuses")) return "";
  const Json& v = r.evidence["kernel_refuses"];
  return v.is_string() ? v.get<std::string>() : "";
}

bool refused_by_landlock(const ProbeReport& r, const ProviderFacts& f) {
  if (!f.capabilities.count(Capability::kProcLandlock) || !r.evidence.is_object()) return false;
  const std::string sc = probe_syscall(r);
  if (r.errno_name == "EACCES") {
    // access(2) checks the mount and the file modes, and no Landlock right: it said yes.
    if (r.evidence.value("access_w", Json()) == "ok") return true;
    return sc == "connect" || sc == "bind";
  }
  // Nothing else refuses a connect to a listening abstract socket with EPERM. (A kill refused
  // by the signal scope is not told apart: EPERM is also the file modes' answer there.)
  if (r.errno_name == "EPERM")
    return sc == "connect" && r.evidence.value("abstract", Json()) == true;
  return false;
}

namespace {

Layer layer_in_one_kernel(const ProbeReport& r, const ProviderFacts& f,
                          const std::optional<ProbeReport>& baseline) {
  const std::string& e = r.errno_name;
  if (r.boundary == "resource") return Layer::kLimit;
  if (!kernel_refusal(r).empty()) return Layer::kKernel;
  // Nothing of the host's to read there: the sandbox's filesystem view masks it.
  if (r.boundary == "disclosure" && r.result == ProbeResult::kNotFound) return Layer::kMount;
  if (refused_by_seccomp_filter(r, baseline)) return Layer::kSeccomp;
  if (refused_by_landlock(r, f)) return Layer::kLandlock;
  if (e == "EROFS") return Layer::kMount;
  if (e == "EACCES") return Layer::kPermissions;
  if (e == "EPERM") {
    std::string sc = probe_syscall(r);
    // A run with an allowlist: the egress guard answers EPERM to a connect or send (a probe
    // aimed at a peer) that the list leaves out.
    const bool sent = sc == "connect" || sc == "sendto" || sc == "sendmsg" ||
                      (r.evidence.is_object() && r.evidence.contains("peer"));
    if (r.boundary == "net" && !f.egress_allow.empty() && sent && !f.seccomp_denied.count(sc))
      return Layer::kEgress;
    if (!sc.empty() && f.seccomp_denied.count(sc)) return Layer::kSeccomp;
    return Layer::kPermissions;
  }
  // The run's own resolver answered REFUSED (rcode 5): the allowlist's DNS side.
  if (e == "ECONNREFUSED" && r.boundary == "net" && !f.egress_allow.empty() &&
      r.evidence.is_object() && r.evidence.contains("reply") && r.evidence["reply"].is_object() &&
      r.evidence["reply"].value("rcode", 0) == 5)
    return Layer::kEgress;
  if (network_refusal(e)) return network_layer(f);
  if (e == "ESRCH") return Layer::kNamespace;
  if (one_of(e, {"EMFILE", "ENFILE", "ENOSPC", "EDQUOT", "EAGAIN", "ENOMEM", "EFBIG"}))
    return Layer::kLimit;
  if (one_of(e, {"ENOENT", "ENOTDIR"})) {
    if (about_a_path(r)) return Layer::kMount;
    return r.boundary == "creds" ? Layer::kEnvironment : Layer::kNamespace;
  }
  if (not_offered(e)) return Layer::kNamespace;
  return boundary_default(r, f);
}

}  // namespace

// Which layer refused: as in a sandbox under the host's kernel, but where the run has a kernel
// of its own (kernel.separate: a microVM) what a namespace would hide is simply not in the
// run's kernel: the host's and other runs' processes, cgroups, keyrings, IPC objects and network.
Layer blocking_layer(const ProbeReport& r, const ProviderFacts& f,
                     const std::optional<ProbeReport>& baseline) {
  Layer l = layer_in_one_kernel(r, f, baseline);
  if (l == Layer::kNamespace && f.capabilities.count(Capability::kKernelSeparate))
    return Layer::kKernel;
  return l;
}

std::string blocking_reason(const ProbeReport& r, Layer layer) {
  std::string what = r.errno_name.empty() ? to_string(r.result) : r.errno_name;
  std::string sc = probe_syscall(r);
  std::string why;
  switch (layer) {
    case Layer::kSeccomp: why = what + " from the seccomp filter" + (sc.empty() ? "" : " (" + sc + ")"); break;
    case Layer::kLandlock:
      why = what + " from Landlock" +
            (r.errno_name == "EPERM"           ? " (outside the run's scope)"
             : sc == "connect" || sc == "bind" ? " (no TCP port of the run's allowlist)"
                                               : " (the mount and file modes allow it)");
      break;
    case Layer::kMount: why = what + ": not in the sandbox's filesystem view, or read-only"; break;
    case Layer::kNamespace: why = what + ": not visible from the sandbox's namespaces"; break;
    case Layer::kPermissions: why = what + ": no privilege for it inside"; break;
    case Layer::kEgress: why = what + ": egress dropped it, no decoy saw it"; break;
    case Layer::kLimit: why = what + ": a resource limit held"; break;
    case Layer::kEnvironment: why = what + ": the launching environment did not pass"; break;
    case Layer::kKernel:
      // The probe's own account of the kernel's setting says it all; its detail repeats it.
      if (!kernel_refusal(r).empty())
        return what + ": refused by the kernel itself, not by the sandbox (" + kernel_refusal(r) +
               ")";
      why = what +
            ": not in the run's own kernel (the host's and other runs' processes and "
            "kernel objects are not there)";
      break;
    case Layer::kNone: why = what; break;
  }
  if (!r.detail.empty()) why += " — " + r.detail;
  return why;
}

Judgement judge_probe(const std::optional<ProbeReport>& baseline, const ProbeReport& sandbox,
                      Witness witness, const HostEvidence& host, const ProviderFacts& facts,
                      const std::string& marker) {
  Judgement j = start(sandbox, witness, baseline, host);

  // Rule 1: the host saw the crossing. Whatever the probe says, it is exposed.
  if (host.any()) {
    std::string seen = host.all().front();
    if (sandbox.result != ProbeResult::kReached)
      return decide(j, Verdict::kExposed,
                    "probe said " + describe_report(sandbox) + " but the host disagrees: " + seen);
    return decide(j, Verdict::kExposed, seen);
  }

  // Rule 2: reached, confirmed by the witness that fits the probe.
  if (sandbox.result == ProbeResult::kReached) {
    std::string evidence = short_json(sandbox.evidence);
    switch (witness) {
      case Witness::kCanary:
        if (!marker.empty() && sandbox.evidence.dump().find(marker) != std::string::npos)
          return decide(j, Verdict::kExposed, "read canary bytes carrying the marker: " + evidence);
        return decide(j, Verdict::kInconclusive,
                      "reached by its own account, but what it read carries no canary marker");
      case Witness::kSelf:
        // A run with --net allowlist has an interface and a default route by design: what it
        // reaches through them is the guard's to decide, and the net probes judge that.
        if (sandbox.id == "net.interfaces" && !facts.egress_allow.empty())
          return decide(j, Verdict::kWarning,
                        "an interface and a route off loopback, as --net allowlist wires the run "
                        "(by design; the egress guard decides where they lead): " + evidence);
        if (sandbox.preconditions)
          return decide(j, Verdict::kExposed,
                        "the kernel allowed it" + (evidence.empty() ? "" : ": " + evidence));
        break;  // rule 3 says why it proves nothing
      case Witness::kDecoy:
        if (!host.allowlisted.empty())
          return decide(j, Verdict::kWarning,
                        "reached " + host.allowlisted.front() +
                            ", which the run's egress allowlist permits: allowed by design, and "
                            "whatever runs here can send data there");
        [[fallthrough]];
      case Witness::kHostFile:
      case Witness::kSentinel:
        return decide(j, Verdict::kInconclusive,
                      std::string("reached by its own account, but ") + missing_witness(witness));
      case Witness::kResource:
        return decide(j, Verdict::kInconclusive,
                      "a resource probe needs the controller's outcome (judge_resource)");
      case Witness::kHostView:
        // Rule 1 did not fire: what it read is not the host's. A file's view is a mount over
        // it; sysinfo(2)'s own answer comes from the syscall filter's listener; a run with a
        // kernel of its own read that kernel's.
        if (facts.capabilities.count(Capability::kKernelSeparate))
          return decide(j, Verdict::kBlocked,
                        "it read its own kernel's, not the host's" +
                            (evidence.empty() ? "" : ": " + evidence),
                        Layer::kKernel);
        return decide(
            j, Verdict::kBlocked,
            "it read a view of its own, not the host's" + (evidence.empty() ? "" : ": " + evidence),
            sandbox.id == "disclosure.sysinfo" ? Layer::kSeccomp : Layer::kMount);
    }
  }

  // Rule 3: nothing proven either way.
  if (sandbox.result == ProbeResult::kError)
    return decide(j, Verdict::kInconclusive, "probe error: " + describe_report(sandbox));
  if (!sandbox.preconditions)
    return decide(j, Verdict::kInconclusive,
                  "preconditions did not hold" + (sandbox.detail.empty() ? "" : ": " + sandbox.detail));
  if (!baseline)
    return decide(j, Verdict::kInconclusive, "no native baseline was run");
  if (baseline->result != ProbeResult::kReached || !baseline->preconditions)
    return decide(j, Verdict::kInconclusive,
                  "baseline did not reach natively (" + describe_report(*baseline) + ")");

  // Rule 4: refused, and the refusal has a layer.
  Layer layer = blocking_layer(sandbox, facts, baseline);
  std::string why = blocking_reason(sandbox, layer);
  if (refused_by_seccomp_filter(sandbox, baseline))
    why += " (natively the kernel ran it: " + describe_report(*baseline) + "; here Seccomp: 2)";
  return decide(j, Verdict::kBlocked, why, layer);
}

Judgement judge_resource(const std::optional<ProbeReport>& baseline,
                         const std::optional<ProbeReport>& sandbox, const std::string& id,
                         const ResourceEvidence& ev) {
  Judgement j;
  if (sandbox) {
    j = start(*sandbox, Witness::kResource, baseline, {});
  } else {
    j.id = id;
    j.boundary = "resource";
    j.attempt = baseline ? baseline->attempt : id;
    j.witness = Witness::kResource;
    j.baseline = baseline;
  }
  j.host.notes = ev.limits_checked;
  std::string ended = "the call ended " + ev.termination + (ev.reason.empty() ? "" : ": " + ev.reason);

  if (!ev.limit_mismatches.empty())
    return decide(j, Verdict::kExposed, "limit not applied on the host: " + ev.limit_mismatches.front());
  bool expected = std::find(ev.expected.begin(), ev.expected.end(), ev.termination) != ev.expected.end();
  if (baseline && (baseline->result != ProbeResult::kReached || !baseline->preconditions))
    return decide(j, Verdict::kInconclusive,
                  "baseline did not reach natively (" + describe_report(*baseline) + ")");
  if (ev.rlimit_granted > 0 && sandbox) return judge_rlimit(j, *sandbox, ev);
  if (expected) return decide(j, Verdict::kBlocked, ended, Layer::kLimit);
  if (!ev.held_by.empty() && ev.termination == "exited")
    return decide(j, Verdict::kBlocked, ev.held_by, Layer::kLimit);
  if (!ev.limit_declared && sandbox && sandbox->result == ProbeResult::kReached)
    return decide(j, Verdict::kInconclusive,
                  "no limit is declared for this; it reached its cap: " + short_json(sandbox->evidence));
  if (sandbox && sandbox->result == ProbeResult::kReached && ev.termination == "exited")
    return decide(j, Verdict::kExposed,
                  "went past the grant and exited normally: " + short_json(sandbox->evidence));
  if (sandbox && sandbox->result == ProbeResult::kDenied && !sandbox->errno_name.empty())
    return decide(j, Verdict::kBlocked, blocking_reason(*sandbox, Layer::kLimit), Layer::kLimit);
  if (sandbox && sandbox->result == ProbeResult::kError)
    return decide(j, Verdict::kInconclusive, "probe error: " + describe_report(*sandbox));
  if (!sandbox) return decide(j, Verdict::kInconclusive, "no report, and " + ended);
  return decide(j, Verdict::kInconclusive,
                "probe said " + describe_report(*sandbox) + ", " + ended);
}

Judgement judge_host_check(const std::string& id, const std::string& boundary,
                           const std::string& attempt, const HostEvidence& host, Layer layer,
                           const std::string& blocked_why) {
  Judgement j;
  j.id = id;
  j.boundary = boundary;
  j.attempt = attempt;
  j.witness = Witness::kSelf;
  j.host = host;
  if (host.any()) return decide(j, Verdict::kExposed, host.all().front());
  return decide(j, Verdict::kBlocked, blocked_why, layer);
}

Judgement judge_git_persistence(const std::optional<ProbeReport>& plant, const std::string& failure) {
  Judgement j;
  j.id = "persist.git_hooks";
  j.boundary = "persist";
  j.attempt = "write a hook to .git/hooks and a line to .git/config in the workspace";
  j.witness = Witness::kSelf;
  j.sandbox = plant;
  if (!plant)
    return decide(j, Verdict::kInconclusive,
                  "persist.plant did not report" + (failure.empty() ? "" : ": " + failure));
  const Json& ev = plant->evidence;
  std::vector<std::string> written, refused;
  for (const char* target : {"git_hook", "git_config"}) {
    if (!ev.is_object() || !ev.contains("planted") || !ev["planted"].contains(target))
      return decide(j, Verdict::kInconclusive, std::string("persist.plant has no entry for ") + target);
    const Json& t = ev["planted"][target];
    std::string path = t.value("path", target);
    std::string write = t.value("write", "");
    if (write == "ok") written.push_back(path);
    else refused.push_back(write);
  }
  if (!written.empty()) {
    std::string files;
    for (const auto& f : written) files += (files.empty() ? "" : ", ") + f;
    return decide(j, Verdict::kWarning,
                  "wrote " + files + " inside the workspace: allowed by design, but a `git` run on "
                  "this workspace outside the sandbox executes what the run planted (hooks, "
                  "core.hooksPath, core.fsmonitor); review or discard .git before using it");
  }
  // Both refused: the workspace (or its .git) was not writable.
  Layer layer = refused.front() == "EROFS" ? Layer::kMount : Layer::kPermissions;
  return decide(j, Verdict::kBlocked, refused.front() + ": .git in the workspace is not writable", layer);
}

Json Judgement::to_json() const {
  Json j = {{"id", id},
            {"boundary", boundary},
            {"attempt", attempt},
            {"verdict", to_string(verdict)},
            {"why", why},
            {"witness", to_string(witness)}};
  if (verdict == Verdict::kBlocked) j["layer"] = to_string(layer);
  if (!known_limit.empty()) j["known_limit"] = known_limit;
  if (baseline) j["baseline"] = baseline->to_json();
  if (sandbox) j["sandbox"] = sandbox->to_json();
  Json h = Json::object();
  auto put = [&](const char* key, const std::vector<std::string>& v) {
    if (!v.empty()) h[key] = v;
  };
  put("decoy_events", host.decoy_events);
  put("files_appeared", host.files_appeared);
  put("sentinel_signals", host.sentinel_signals);
  put("leftover_processes", host.leftover_processes);
  put("leftover_cgroups", host.leftover_cgroups);
  put("other_run", host.other_run);
  put("kernel", host.kernel);
  put("disclosed", host.disclosed);
  put("notes", host.notes);
  j["host"] = h;
  return j;
}

std::vector<std::string> kernel_crossings(const ProbeReport& r, const TracedActivity& seen) {
  if (r.result != ProbeResult::kDenied && r.result != ProbeResult::kNotFound) return {};
  std::string syscall = probe_syscall(r);
  bool network = syscall == "connect" || syscall == "sendto" || syscall == "sendmsg" ||
                 (syscall.empty() && r.boundary == "net");
  if (!network) return {};
  // A resolver that answered REFUSED (a run's own, --net allowlist) was reached on purpose: the
  // refusal is its answer, and whether it passed the name on is the host's to say (its log,
  // its upstream's), not the kernel's.
  std::string refused_by;
  if (r.evidence.is_object() && r.evidence.contains("reply") && r.evidence["reply"].is_object() &&
      r.evidence["reply"].value("rcode", 0) == 5 && r.evidence.contains("peer") &&
      r.evidence["peer"].is_string())
    refused_by = r.evidence["peer"].get<std::string>();
  std::vector<std::string> out;
  for (const auto& c : seen.connects) {
    if (c.verdict() != "allowed") continue;
    // Only IP leaves a network namespace. A sendto with no address on a raw socket is netlink
    // talking to the kernel (the probe listing its own interfaces), and a unix socket's peer
    // is another boundary's witness (run A, the decoys): neither crossed anything here. Once
    // counted, every net probe under bubblewrap read "exposed" although routing refused it.
    if (c.family != "inet" && c.family != "inet6") continue;
    bool loopback = (c.family == "inet" && c.address.rfind("127.", 0) == 0) ||
                    (c.family == "inet6" && c.address == "::1");
    if (loopback) continue;
    std::string where = c.family == "inet6" ? "[" + c.address + "]:" + std::to_string(c.port)
                        : c.family == "inet" ? c.address + ":" + std::to_string(c.port)
                                             : c.address;
    if (!refused_by.empty() && where == refused_by) continue;
    out.push_back(c.syscall + " " + c.protocol + " " + where + " allowed (pid " + std::to_string(c.pid) + ")");
  }
  return out;
}

Tally tally(const std::vector<Judgement>& judgements) {
  Tally t;
  for (const auto& j : judgements) {
    if (j.verdict == Verdict::kBlocked) ++t.blocked;
    if (j.verdict == Verdict::kExposed) ++t.exposed;
    if (j.verdict == Verdict::kInconclusive) ++t.inconclusive;
    if (j.verdict == Verdict::kWarning) ++t.warning;
  }
  return t;
}

}  // namespace sandgate::probes
