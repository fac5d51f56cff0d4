// external: a provider that is another program, speaking the external-provider protocol
// (docs/PROVIDER_PROTOCOL.md, providers/external_protocol.h) as JSON lines on its stdin and
// stdout; its stderr is its log, kept (the last lines) and shown when it fails.
//
// One process per environment: `create` starts the program placed in the run's cgroup
// (<run>/main) before it execs, so the run's ceiling covers the provider and everything it
// starts, and a crash takes down one run, not all of them. `describe` runs once, in a process
// of its own, when the provider is made.
//
// Nothing the program says is trusted more than it has to be: every reply is parsed strictly
// and bounded in size and time (a hung provider is killed and the error names the request it
// did not answer), the pid it reports for a call must be its own descendant before sandgate
// writes it into a cgroup, and placement is read back from /proc/<pid>/cgroup. Its declared
// capabilities are what `probe`/`qualify` test, not what they believe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "core/units.h"
#include "providers/external_protocol.h"
#include "providers/provider.h"

namespace sandgate::providers {

// How to run one external provider: from `--provider external:/path/to/program` or an entry
// of a providers config file.
struct ExternalCommand {
  std::string name;               // "external:<name>" is the provider's name
  std::vector<std::string> argv;  // argv[0]: the program (a path, or looked up in PATH)
  // Extra environment for the program ("NAME" passes sandgate's value, "NAME=VALUE" sets
  // one). The program otherwise gets only PATH and LANG: nothing of sandgate's environment.
  std::vector<std::string> env;
};

// How long sandgate waits for each reply before it kills the provider and says which request
// went unanswered. The exec reply waits for the call's own timeout plus `exec_grace`.
struct ExternalTimeouts {
  Duration describe = std::chrono::seconds(30);
  Duration create = std::chrono::seconds(120);  // copies the recipe
  Duration started = std::chrono::seconds(30);  // exec: until the call is parked
  Duration exec_grace = std::chrono::seconds(30);
  Duration destroy = std::chrono::seconds(60);
  Duration exit = std::chrono::seconds(10);  // after stdin is closed
};

class ExternalProvider : public Provider {
 public:
  // Runs the program's `describe`; an error names what was wrong with it (and the program's
  // log). An unsafe provider needs options.allow_unsafe_host, as host_dir does.
  static Result<std::unique_ptr<Provider>> make(const ProviderOptions& options,
                                                ExternalCommand command,
                                                ExternalTimeouts timeouts = {});

  const ProviderInfo& info() const override { return info_; }
  Status available() const override { return {}; }
  Result<std::unique_ptr<Environment>> create(const EnvSpec& spec) override;

  const external::DescribeReply& described() const { return described_; }
  const ExternalCommand& command() const { return command_; }

 private:
  ExternalProvider(ProviderOptions options, ExternalCommand command, ExternalTimeouts timeouts)
      : options_(std::move(options)), command_(std::move(command)), timeouts_(timeouts) {}
  ProviderOptions options_;
  ExternalCommand command_;
  ExternalTimeouts timeouts_;
  external::DescribeReply described_;
  ProviderInfo info_;
};

// "external:/path/prog" and "external:./prog" name a program directly; "external:NAME" a
// configured one. The part after the prefix, or "" when `name` has no such prefix.
inline constexpr char kExternalPrefix[] = "external:";
std::string external_target(const std::string& name);
bool names_program(const std::string& target);  // contains a '/'

// A providers config file: {"schema_version": 1, "providers": [{"name": "bwrap",
// "command": ["/usr/local/lib/sandgate/bwrap-provider"], "env": ["TMPDIR"]}]}, read strictly.
Result<std::vector<ExternalCommand>> load_providers_config(const std::string& path);
Result<std::vector<ExternalCommand>> parse_providers_config(const Json& j,
                                                            const std::string& source);

}  // namespace sandgate::providers
