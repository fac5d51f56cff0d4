#include "providers/weakening.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "core/files.h"
#include "core/state.h"

namespace sandgate::providers {

namespace {
struct WeakeningName {
  Weakening w;
  const char* name;
};
constexpr WeakeningName kWeakeningNames[] = {
    {Weakening::kMountHome, "mount_home"},
    {Weakening::kPassHostEnv, "pass_host_env"},
    {Weakening::kShareHostNetwork, "share_host_network"},
    {Weakening::kRootWithCaps, "root_with_caps"},
    {Weakening::kNoSeccomp, "no_seccomp"},
    {Weakening::kReuseWorkspace, "reuse_workspace"},
    {Weakening::kShareTmp, "share_tmp"},
    {Weakening::kSeccompFullWidthCompare, "seccomp_full_width_compare"},
    {Weakening::kNoLandlock, "no_landlock"},
    {Weakening::kSharedUid, "shared_uid"},
};
}  // namespace

bool weakened(const std::vector<Weakening>& list, Weakening w) {
  return std::find(list.begin(), list.end(), w) != list.end();
}

Result<std::string> launcher_home() {
  const char* home = std::getenv("HOME");
  if (!home || home[0] != '/' || std::string_view(home) == "/")
    return logic_error("mount_home", "HOME must name an absolute directory other than /");
  struct stat st;
  if (::stat(home, &st) != 0) return sys_error("stat HOME", home);
  if (!S_ISDIR(st.st_mode)) return logic_error("mount_home", "HOME is not a directory", home);
  return std::string(home);
}

std::string to_string(Weakening w) {
  for (const auto& n : kWeakeningNames)
    if (n.w == w) return n.name;
  return "unknown";
}

Result<Weakening> weakening_from_string(const std::string& name) {
  for (const auto& n : kWeakeningNames)
    if (name == n.name) return n.w;
  std::string known;
  for (const auto& n : kWeakeningNames) known += (known.empty() ? "" : ", ") + std::string(n.name);
  return logic_error("parse weakening", "unknown weakening '" + name + "' (known: " + known + ")");
}

std::vector<Weakening> all_weakenings() {
  std::vector<Weakening> all;
  for (const auto& n : kWeakeningNames) all.push_back(n.w);
  return all;
}

Status check_weakenings_allowed(const std::vector<Weakening>& weakenings, bool allowed,
                                const std::string& provider) {
  if (weakenings.empty() || allowed) return {};
  std::string list;
  for (auto w : weakenings) list += (list.empty() ? "" : ", ") + to_string(w);
  return logic_error("create environment",
                     "the " + provider + " provider refuses the test-only weakenings " + list +
                         ": they exist for `sandgate probe --self-test` alone "
                         "(ProviderOptions::self_test_weakenings)");
}

Result<std::string> prepare_shared_dir(const HostPaths& paths, const std::string& name,
                                       const std::string& recipe, uid_t uid, gid_t gid,
                                       mode_t mode) {
  std::string dir = paths.work_dir + "/" + name;
  // Recorded before it is made, like a run directory; re-recording makes this process the
  // owner, so gc leaves the directory alone while any process using it is alive.
  auto state = RunState::create(paths, name, "weakening", {{Resource::Kind::kDirectory, dir}});
  if (!state.ok()) return std::move(state).error().context_add("record shared directory " + name);
  SG_TRY(make_dirs(paths.work_dir, 0711));
  struct stat st;
  if (::lstat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return logic_error("reuse shared directory", "not a directory", dir);
    return dir;
  }
  if (errno != ENOENT) return sys_error("stat", dir);
  if (!recipe.empty()) {
    SG_TRY(std::move(copy_tree(recipe, dir, uid, gid)).context("copy workspace recipe"));
  } else if (::mkdir(dir.c_str(), mode) != 0) {
    return sys_error("mkdir shared directory", dir);
  } else if (::chown(dir.c_str(), uid, gid) != 0) {
    return sys_error("chown", dir);
  }
  // mkdir applied the umask and copy_tree the recipe's mode: give the exact one asked for.
  if (::chmod(dir.c_str(), mode) != 0) return sys_error("chmod", dir);
  return dir;
}

Status remove_shared_dirs(const HostPaths& paths) {
  Status first;
  for (const char* name : {kSharedWorkspaceDir, kSharedTmpDir}) {
    std::string dir = paths.work_dir + "/" + name;
    std::string record = paths.state_dir + "/runs/" + name + ".json";
    // The directory first: a record without its directory is harmless, the reverse is an orphan.
    if (auto s = remove_tree(dir); !s.ok()) {
      if (first.ok()) first = std::move(s);
      continue;
    }
    if (::unlink(record.c_str()) != 0 && errno != ENOENT && first.ok())
      first = sys_error("unlink", record);
  }
  return first;
}

}  // namespace sandgate::providers
