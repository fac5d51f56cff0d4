#include "providers/provider.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "core/fd.h"

namespace sandgate::providers {

Status check_requirements(const Provider& provider, const std::vector<Capability>& required) {
  auto missing = missing_capabilities(provider.capabilities(), required);
  if (missing.empty()) return {};
  std::string list;
  for (auto c : missing) list += (list.empty() ? "" : ", ") + to_string(c);
  return logic_error("check provider requirements",
                     "provider " + display_name(provider.info()) + " is disqualified: it lacks " + list);
}

Status check_put_name(const std::string& name) {
  if (name.empty() || name.size() > 255 || name == "." || name == ".." ||
      name.find('/') != std::string::npos || name.find('\0') != std::string::npos)
    return logic_error("name a file in the workspace",
                       "'" + name + "' must be one file name in the workspace, not a path");
  return {};
}

// The workspace is the run's: whatever is in it may be the sandbox's doing, a link placed to
// make root write elsewhere. replace_file_in follows none.
Status Environment::put_file(const std::string& name, std::string_view data) {
  SG_TRY(check_put_name(name));
  return replace_file_in(workspace_host_path(), name, data);
}

Result<std::optional<std::string>> Environment::get_file(const std::string& name,
                                                         size_t max_bytes) {
  SG_TRY(check_put_name(name));
  return read_file_in(workspace_host_path(), name, max_bytes);
}

std::vector<Weakening> honoured_weakenings(const ProviderInfo& info) {
  return info.only_weakenings.empty() ? all_weakenings() : info.only_weakenings;
}

BindMount parse_bind_mount(const std::string& spec) {
  auto colon = spec.find(':');
  if (colon == std::string::npos) return {spec, spec};
  return {spec.substr(0, colon), spec.substr(colon + 1)};
}

Status check_secret_name(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 128 && name != "." && name != "..";
  for (char c : name)
    ok = ok && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '.' || c == '-');
  if (!ok)
    return logic_error("secret name",
                       "'" + name + "' must be 1-128 of [A-Za-z0-9_.-] and not '.' or '..'");
  return {};
}

Result<Secret> read_secret(const std::string& name, const std::string& file) {
  SG_TRY(check_secret_name(name));
  SG_ASSIGN_OR_RETURN(UniqueFd fd, open_fd(file, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return sys_error("fstat secret " + name, file);
  if (!S_ISREG(st.st_mode)) return logic_error("secret " + name, "not a regular file", file);
  SG_ASSIGN_OR_RETURN(std::string value, read_all(fd.get(), kMaxSecretBytes + 1));
  if (value.size() > kMaxSecretBytes)
    return logic_error("secret " + name,
                       "larger than " + std::to_string(kMaxSecretBytes) + " bytes", file);
  return Secret{name, std::move(value)};
}

Result<Secret> parse_secret_arg(const std::string& arg) {
  auto eq = arg.find('=');
  if (eq == std::string::npos || eq + 1 == arg.size())
    return logic_error("--secret", "'" + arg + "' is not NAME=FILE");
  return read_secret(arg.substr(0, eq), arg.substr(eq + 1));
}

WarmUp::WarmUp(Provider& provider) : thread_([&provider] { provider.warm_up(); }) {}

WarmUp::~WarmUp() { thread_.join(); }

std::string display_name(const ProviderInfo& info) {
  return info.unsafe ? info.name + " (UNSAFE: no isolation)" : info.name;
}

std::string to_string(NetworkMode mode) { return mode == NetworkMode::kAllowlist ? "allowlist" : "none"; }

std::string to_string(PodmanMode mode) {
  switch (mode) {
    case PodmanMode::kAuto:
      return "auto";
    case PodmanMode::kRootful:
      return "rootful";
    case PodmanMode::kRootless:
      return "rootless";
  }
  return "auto";
}

Result<PodmanMode> parse_podman_mode(const std::string& text) {
  if (text == "auto") return PodmanMode::kAuto;
  if (text == "rootful") return PodmanMode::kRootful;
  if (text == "rootless") return PodmanMode::kRootless;
  return logic_error("podman mode", "'" + text + "' is not one of auto, rootful, rootless");
}

Status refuse_allowlist(const std::string& provider, NetworkMode mode) {
  if (mode == NetworkMode::kNone) return {};
  return Error{ENOTSUP, "create environment", provider,
               "--net allowlist is not supported by this provider (the namespaces provider "
               "wires it; others have no network or the host's)"};
}

}  // namespace sandgate::providers
