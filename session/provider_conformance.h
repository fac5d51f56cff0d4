// The external-provider conformance suite (`sandgate provider conformance -- PROGRAM`): does a
// program speak docs/PROVIDER_PROTOCOL.md and keep its promises? Each check is named and says
// why it failed. Two kinds:
//   protocol.*, describe.*, create.*, destroy.*   raw exchanges with one process, including
//        what a well-behaved sandgate never sends (bad input must be refused, not obeyed,
//        and must not kill the provider);
//   exec.*   calls through sandgate's own stack (ExternalProvider in a RunSession with a real
//        controller), checked from the host: status, bytes of output, environment, cwd,
//        timeout, rlimits, and that the call's cgroup saw the call's CPU time (placement).
// Needs root: it makes cgroups.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/host_paths.h"
#include "core/json.h"
#include "core/result.h"
#include "providers/external.h"

namespace sandgate::session {

struct ConformanceCheck {
  std::string name;
  bool passed = false;
  std::string detail;  // why it failed, or what was seen
};

struct ConformanceOptions {
  HostPaths paths;
  std::string cgroup_root = "sandgate";
  std::vector<std::string> argv;  // the program and its arguments
  // As in production, but a call that overruns its timeout gets 10s of grace, not 30s: the
  // timeout and cancel checks of a provider that ignores them end sooner.
  providers::ExternalTimeouts timeouts = [] {
    providers::ExternalTimeouts t;
    t.exec_grace = std::chrono::seconds(10);
    return t;
  }();
  std::function<void(const ConformanceCheck&)> progress;
};

// Every check, in order; an error only when the suite itself could not run (no root, no
// controller), never for a provider's failure.
Result<std::vector<ConformanceCheck>> run_conformance(const ConformanceOptions& options);

Json to_json(const std::vector<ConformanceCheck>& checks);

}  // namespace sandgate::session
