// A run as an orchestrator sees it: an environment from a provider and a run scope from the
// controller, met at Placement. Each call goes through the controller (its own cgroup, its
// grant, the monitor and the ladder) and comes back as a CallOutcome.
//
// This is the one place that knows both sides of the seam (DESIGN.md, "The seams").
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "controller/controller.h"
#include "providers/provider.h"

namespace sandgate::controller {

struct CallRequest {
  std::vector<std::string> argv;
  std::optional<std::string> intent;  // declared; nullopt: inferred from argv
  std::vector<std::string> env;       // extra NAME=VALUE for this call
  std::string cwd;
  int cancel_fd = -1;
  std::function<void(int stream, std::string_view data)> on_output;
};

// "MAJOR:MINOR" of the block device `path` is on (stat's st_dev), for io grants; the whole disk
// when that is a partition (the kernel throttles disks only; found through <sysfs>/dev/block);
// "" when it is on an anonymous device (major 0: tmpfs, overlayfs) or cannot be stat'ed (logged).
std::string io_device_of(const std::string& path, const std::string& sysfs = "/sys");

class RunSession {
 public:
  // begin_run, then the provider's environment with its supervisor placed in <run>/main, then
  // the io device of its workspace (Controller::set_io_device).
  static Result<std::unique_ptr<RunSession>> open(Controller& controller,
                                                  providers::Provider& provider,
                                                  providers::EnvSpec spec);
  ~RunSession();

  // One call, start to outcome. An error means the call could not be run at all (no cgroup,
  // the command does not exist); everything that happened to a call that ran is an outcome.
  Result<CallOutcome> call(const CallRequest& request);
  // Destroys the environment, then the run's cgroups. Idempotent.
  Status close();

  providers::Environment& environment() { return *env_; }
  const RunScope& run() const { return *run_; }

 private:
  RunSession(Controller& c) : controller_(c) {}
  Controller& controller_;
  std::unique_ptr<RunScope> run_;
  std::unique_ptr<providers::Environment> env_;
  bool closed_ = false;
};

}  // namespace sandgate::controller
