// What one probe says about one attempt: the first of a verdict's two witnesses (docs/DESIGN.md,
// idea 8). sandgate-probe prints one of these per line as JSON; the judge reads them back and
// combines each with host-side evidence.
#pragma once

#include <string>

#include "core/json.h"
#include "core/result.h"

namespace sandgate::probes {

// The secret the suite gives every run (--secret NAME=...), its value "sandgate-secret-MARKER":
// the crossrun and persist probes look for another run's copy by its host path.
inline constexpr char kProbeSecretName[] = "SANDGATE_PROBE_SECRET";

enum class ProbeResult {
  kReached,   // the action worked: the boundary was crossed (or, natively, the baseline holds)
  kDenied,    // the kernel refused it (errno says how)
  kNotFound,  // the target does not exist from here (ENOENT, no such host, no such process)
  kError,     // the probe itself failed (bad parameter, unexpected errno); proves nothing
};

std::string to_string(ProbeResult r);                       // "reached", "denied", ...
Result<ProbeResult> probe_result_from_string(const std::string& s);

// Boundaries, one file each under probes/ (docs/STYLE.md, "Shape").
// "fs", "net", "creds", "proc", "disclosure", "crossrun", "persist", "resource".

struct ProbeReport {
  std::string id;          // "fs.read_host_canary": <boundary>.<name>, unique
  std::string boundary;    // "fs"
  std::string attempt;     // what was tried, in words, with the target: "open(/home/u/canary)"
  ProbeResult result = ProbeResult::kError;
  std::string errno_name;  // "EACCES"; empty when the action did not fail with an errno
  Json evidence = Json::object();  // bytes read, peer reached, pids seen, values found ...
  bool preconditions = true;       // false: the probe could not set up what it needs
  std::string detail;              // free text for humans

  Json to_json() const;
  // Every error names the field (and the caller adds the line).
  static Result<ProbeReport> from_json(const Json& j);
};

}  // namespace sandgate::probes
