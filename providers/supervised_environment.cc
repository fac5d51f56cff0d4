#include "providers/supervised_environment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/defer.h"
#include "core/fd.h"
#include "core/files.h"
#include "core/log.h"
#include "providers/proc_views.h"

namespace sandgate::providers {
namespace {

bool valid_env_name(std::string_view n) {
  if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
  for (char c : n)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

bool valid_run_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  return true;
}

}  // namespace

Result<std::vector<std::string>> resolve_env_allowlist(const std::vector<std::string>& allow,
                                                       char** host_env) {
  std::vector<std::string> out;
  for (const auto& entry : allow) {
    auto eq = entry.find('=');
    std::string name = entry.substr(0, eq);
    if (!valid_env_name(name))
      return logic_error("environment allowlist", "'" + entry + "' is not NAME or NAME=VALUE");
    if (eq != std::string::npos) {
      out.push_back(entry);
      continue;
    }
    for (char** e = host_env; e && *e; ++e) {
      if (std::strncmp(*e, name.c_str(), name.size()) == 0 && (*e)[name.size()] == '=') {
        out.emplace_back(*e);
        break;
      }
    }
  }
  return out;
}

Result<RunIds> assign_run_ids(const ProviderOptions& options, const EnvSpec& spec, bool shared) {
  RunIds ids;
  ids.run_id = spec.run_id.empty() ? new_run_id() : spec.run_id;
  if (!valid_run_id(ids.run_id))
    return logic_error("create environment", "run id must be 1-64 of [A-Za-z0-9_-]", ids.run_id);
  if (shared) {
    ids.base = options.id_map_base;
    return ids;
  }
  SG_ASSIGN_OR_RETURN(auto lease, acquire_id_range(options.paths, options.id_pool, ids.run_id));
  ids.base = lease.first();
  ids.lease.emplace(std::move(lease));
  return ids;
}

Result<std::unique_ptr<SupervisedEnvironment>> SupervisedEnvironment::create(const HostPaths& paths,
                                                                             const EnvSpec& spec,
                                                                             const Recipe& recipe) {
  std::string run_id = spec.run_id.empty() ? new_run_id() : spec.run_id;
  if (!valid_run_id(run_id))
    return logic_error("create environment", "run id must be 1-64 of [A-Za-z0-9_-]", run_id);
  if (!spec.workspace_recipe.empty()) {
    struct stat st;
    if (::stat(spec.workspace_recipe.c_str(), &st) != 0)
      return sys_error("read workspace recipe", spec.workspace_recipe);
    if (!S_ISDIR(st.st_mode))
      return logic_error("read workspace recipe", "not a directory", spec.workspace_recipe);
  }

  if (spec.workspace_size != 0) {
    if (!recipe.workspace_filesystem)
      return logic_error(
          "create environment",
          recipe.provider + ": no workspace filesystem (--workspace-size is for namespaces)");
    if (!recipe.shared_workspace.empty())
      return logic_error("create environment",
                         "--workspace-size and the reuse_workspace weakening exclude each other");
    if (spec.workspace_size < kMinWorkspaceSize || spec.workspace_size > kMaxWorkspaceSize)
      return logic_error("create environment", "--workspace-size must be 16MiB..16TiB (got " +
                                                   std::to_string(spec.workspace_size) + " bytes)");
  }
  RunLayout layout{run_id, paths.work_dir + "/" + run_id, "", ""};
  if (spec.workspace_size != 0) layout.workspace_image = layout.run_dir + "/workspace.img";
  layout.workspace =
      recipe.shared_workspace.empty() ? layout.run_dir + "/workspace" : recipe.shared_workspace;
  layout.root = layout.run_dir + "/root";
  layout.upper = layout.run_dir + "/upper";
  layout.overlay_work = layout.run_dir + "/overlay-work";
  if (!spec.secrets.empty()) layout.secrets_dir = layout.run_dir + "/secrets";
  for (const auto& secret : spec.secrets) {
    SG_TRY(check_secret_name(secret.name));
    if (secret.value.size() > kMaxSecretBytes)
      return logic_error("secret " + secret.name,
                         "larger than " + std::to_string(kMaxSecretBytes) + " bytes");
  }
  // The record names the run directory (and its id range) from the start: one write, before
  // the mkdir.
  std::vector<Resource> initial = {{Resource::Kind::kDirectory, layout.run_dir}};
  if (recipe.id_range) {
    if (recipe.id_range->run_id() != run_id)
      return logic_error("create environment", "the id range was taken for another run",
                         recipe.id_range->run_id());
    initial.push_back(
        {Resource::Kind::kIdRange, recipe.id_range->lock_path(), 0, 0, recipe.id_range->run_id()});
  }
  StepClock clock("run " + run_id, "create");
  SG_ASSIGN_OR_RETURN(RunState state,
                      RunState::create(paths, run_id, recipe.provider, std::move(initial)));
  clock.lap("record");
  std::unique_ptr<SupervisedEnvironment> env(
      new SupervisedEnvironment(paths, std::move(state), layout));
  env->id_base_ = recipe.id_base;
  env->runtime_exited_ = recipe.runtime_exited;
  env->stopping_ = recipe.stopping;
  env->workspace_inside_ =
      recipe.workspace_inside.empty() ? layout.workspace : recipe.workspace_inside;
  // From here on a failure must undo what was made: destroy() does, from the record.
  auto fail = [&](Error e) -> Error {
    // The record stays when something could not be undone; say what, for `sandgate gc`.
    if (auto undone = env->destroy(); !undone.ok())
      spdlog::warn("undoing the failed run {}: {}", run_id, undone.error().message());
    e.context.push_back("creating a " + recipe.provider + " environment");
    return e;
  };

  if (auto s = make_dirs(paths.work_dir, 0711); !s.ok()) return fail(std::move(s).error());
  // The run directory is traversable, not listable: one run cannot enumerate the others.
  if (::mkdir(layout.run_dir.c_str(), 0711) != 0)
    return fail(sys_error("mkdir run directory", layout.run_dir));
  if (auto s = env->make_workspace(spec, recipe); !s.ok()) return fail(std::move(s).error());
  if (auto s = env->make_secrets(spec, recipe); !s.ok()) return fail(std::move(s).error());
  if (recipe.needs_root_dir && ::mkdir(layout.root.c_str(), 0755) != 0)
    return fail(sys_error("mkdir jail root", layout.root));
  clock.lap("workspace");

  auto config = recipe.configure(layout);
  if (!config.ok()) return fail(std::move(config).error());
  if (!layout.secrets_dir.empty()) {
    // Where calls find their secrets, whatever the provider: a path, never a secret.
    std::string inside = recipe.secrets_inside.empty() ? layout.secrets_dir : recipe.secrets_inside;
    config->base_env = merge_env(std::move(config->base_env), {"SANDGATE_SECRETS_DIR=" + inside});
  }
  clock.lap("configure");
  if (recipe.before_start) {
    if (auto s = recipe.before_start(layout, *config, env->state_); !s.ok())
      return fail(std::move(s).error());
    clock.lap("before-start");
  }
  Result<Supervisor> supervisor = logic_error("start supervisor", "not started");
  if (recipe.launch) {
    auto launch = recipe.launch(layout, env->state_);
    if (!launch.ok()) return fail(std::move(launch).error());
    clock.lap("launch-recipe");
    supervisor = Supervisor::start_contained(*config, *launch);
  } else {
    supervisor = Supervisor::start(*config, spec.placement, env->state_, recipe.supervisor_exe);
  }
  if (!supervisor.ok()) return fail(std::move(supervisor).error());
  clock.lap("supervisor-ready");
  env->supervisor_.emplace(std::move(supervisor).value());
  if (recipe.launch) {
    // The runtime made it (the container was recorded before): its host pid is known only now.
    // A foreground runtime too (our child, which waits for the container): killed by gc if
    // sandgate dies first. One write for both.
    std::vector<Resource> procs;
    for (pid_t pid : {env->supervisor_->pid(), env->supervisor_->runtime_pid()})
      if (pid > 0)
        procs.push_back(
            {Resource::Kind::kProcess, "", pid, process_start_time(paths.proc, pid).value_or(0)});
    if (auto s = env->state_.record_all(std::move(procs)); !s.ok())
      return fail(std::move(s).error());
    clock.lap("record-pid");
  }
  if (recipe.verify) {
    if (auto s = recipe.verify(layout, env->supervisor_->pid()); !s.ok())
      return fail(std::move(s).error());
    clock.lap("read-back");
  }
  if (recipe.network) {
    auto wired = recipe.network(layout, env->supervisor_->pid(), env->state_);
    if (!wired.ok()) return fail(std::move(wired).error());
    env->dns_address_ = std::move(wired).value();
    clock.lap("network");
  }
  if (spec.timeout.count() > 0) env->deadline_ = std::chrono::steady_clock::now() + spec.timeout;
  return env;
}

Status SupervisedEnvironment::make_workspace(const EnvSpec& spec, const Recipe& recipe) {
  const RunLayout& layout = layout_;
  const uid_t uid = recipe.workspace_uid;
  const gid_t gid = recipe.workspace_gid;
  if (!recipe.shared_workspace.empty()) {
    // Made (and recorded) by prepare_shared_dir(); not part of this run.
    workspace_info_ = {"shared", "reuse_workspace: a test-only weakening"};
    return {};
  }
  if (spec.workspace_size != 0) return make_workspace_on_filesystem(spec, uid, gid);
  if (spec.workspace_recipe.empty()) {
    if (::mkdir(layout.workspace.c_str(), 0700) != 0)
      return sys_error("mkdir workspace", layout.workspace);
    if (::chown(layout.workspace.c_str(), uid, gid) != 0)
      return sys_error("chown workspace", layout.workspace);
    workspace_info_ = {"empty", ""};
    return {};
  }
  std::string why_copy = "--recipe-mode copy";
  if (spec.recipe_mode != RecipeMode::kCopy) {
    auto view = make_overlay(spec, uid, gid);
    if (view.ok()) return {};
    if (spec.recipe_mode == RecipeMode::kOverlay)
      return std::move(view).error().context_add("copy-on-write workspace (--recipe-mode overlay)");
    why_copy = "no copy-on-write view: " + view.error().message();
    spdlog::debug("run {}: {}; copying the recipe", layout.run_id, why_copy);
    // What the failed attempt made goes; the mount was never attached, or is now detached.
    SG_TRY(release_resources(paths_, {{Resource::Kind::kMount, layout.workspace}}));
    SG_TRY(state_.forget({Resource::Kind::kMount, layout.workspace}));
    for (const auto* dir : {&layout.upper, &layout.overlay_work, &layout.workspace})
      SG_TRY(remove_tree(*dir));
  }
  // A failed copy leaves nothing at layout.workspace, and fail() removes the run directory.
  SG_TRY(std::move(copy_tree(spec.workspace_recipe, layout.workspace, uid, gid, spec.recipe_limits))
             .context("copy workspace recipe"));
  if (::chmod(layout.workspace.c_str(), 0700) != 0) return sys_error("chmod", layout.workspace);
  workspace_info_ = {"copy", why_copy};
  return {};
}

Status SupervisedEnvironment::make_overlay(const EnvSpec& spec, uid_t uid, gid_t gid) {
  SG_ASSIGN_OR_RETURN(RecipeSurvey survey,
                      survey_recipe(spec.workspace_recipe, spec.recipe_limits.max_entries));
  SG_TRY(mount_overlay_workspace(spec.workspace_recipe, survey,
                                 {layout_.upper, layout_.overlay_work, layout_.workspace}, uid, gid,
                                 state_));
  workspace_info_ = {"overlay", "", layout_.upper};
  if (!survey.hidden.empty())
    workspace_info_.note =
        std::to_string(survey.hidden.size()) +
        " FIFO/socket/device entries of the recipe hidden (first: " + survey.hidden.front() + ")";
  return {};
}

// The workspace on a filesystem of its own (EnvSpec::workspace_size). The same three shapes as
// on the host's filesystem: empty (the filesystem's root is the workspace), a copy-on-write
// view (its upper and work layers on the filesystem, which is never attached to the host's
// tree: the overlay reaches them by descriptor), or a copy (into the attached filesystem).
// Either way layout.workspace is the workspace on the host, where the run's results are read
// back from, and the jail binds it as before.
Status SupervisedEnvironment::make_workspace_on_filesystem(const EnvSpec& spec, uid_t uid,
                                                           gid_t gid) {
  const RunLayout& layout = layout_;
  const std::string size_note = "on a filesystem of its own (" +
                                std::to_string(spec.workspace_size >> 20) + "MiB ext4 image)";
  SG_ASSIGN_OR_RETURN(
      WorkspaceFilesystem fs,
      make_workspace_filesystem(layout.workspace_image, spec.workspace_size, uid, gid, state_));
  // Attaches the filesystem's root at the workspace (recorded first).
  auto attach_root = [&]() -> Status {
    SG_TRY(state_.record({Resource::Kind::kMount, layout.workspace}));
    if (::mkdir(layout.workspace.c_str(), 0700) != 0)
      return sys_error("mkdir workspace", layout.workspace);
    if (syscall(SYS_move_mount, fs.mount.get(), "", AT_FDCWD, layout.workspace.c_str(),
                MOVE_MOUNT_F_EMPTY_PATH) != 0)
      return sys_error("attach the workspace filesystem", layout.workspace);
    return {};
  };
  if (spec.workspace_recipe.empty()) {
    SG_TRY(attach_root());
    workspace_info_ = {"empty", size_note, layout.workspace_image};
    return {};
  }
  std::string why_copy = "--recipe-mode copy";
  if (spec.recipe_mode != RecipeMode::kCopy) {
    auto view = [&]() -> Status {
      SG_ASSIGN_OR_RETURN(RecipeSurvey survey,
                          survey_recipe(spec.workspace_recipe, spec.recipe_limits.max_entries));
      // Made here; mount_overlay_workspace gives the upper its owner and mode.
      for (const char* dir : {"upper", "work"})
        if (::mkdirat(fs.mount.get(), dir, 0700) != 0)
          return sys_error("mkdir in the workspace filesystem", dir);
      UniqueFd upper(::openat(fs.mount.get(), "upper", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      UniqueFd work(::openat(fs.mount.get(), "work", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (!upper || !work) return sys_error("open a layer of the workspace filesystem");
      OverlayLayout overlay{layout.workspace_image + ":/upper", layout.workspace_image + ":/work",
                            layout.workspace, upper.get(), work.get()};
      SG_TRY(mount_overlay_workspace(spec.workspace_recipe, survey, overlay, uid, gid, state_));
      workspace_info_ = {"overlay", size_note, layout.workspace_image};
      if (!survey.hidden.empty())
        workspace_info_.note +=
            "; " + std::to_string(survey.hidden.size()) +
            " FIFO/socket/device entries of the recipe hidden (first: " + survey.hidden.front() +
            ")";
      return {};
    }();
    if (view.ok()) return {};
    if (spec.recipe_mode == RecipeMode::kOverlay)
      return std::move(view).error().context_add("copy-on-write workspace (--recipe-mode overlay)");
    why_copy = "no copy-on-write view: " + view.error().message();
    spdlog::debug("run {}: {}; copying the recipe", layout.run_id, why_copy);
    // The overlay was never attached (or is detached now); the layers the attempt made go
    // with a fresh filesystem: a copy must not show them.
    SG_TRY(release_resources(paths_, {{Resource::Kind::kMount, layout.workspace}}));
    SG_TRY(state_.forget({Resource::Kind::kMount, layout.workspace}));
    SG_TRY(remove_tree(layout.workspace));
    Resource loop{Resource::Kind::kLoopDevice, fs.device, 0, 0, layout.workspace_image};
    fs.mount.reset();  // the filesystem goes, and its device detaches itself (autoclear)
    SG_TRY(release_resources(paths_, {loop}));
    SG_TRY(state_.forget(loop));
    if (::unlink(layout.workspace_image.c_str()) != 0)
      return sys_error("unlink", layout.workspace_image);
    SG_ASSIGN_OR_RETURN(fs, make_workspace_filesystem(layout.workspace_image, spec.workspace_size,
                                                      uid, gid, state_));
  }
  SG_TRY(attach_root());
  // copy_tree makes its destination: a staging directory on the filesystem, whose entries then
  // move up to its root (renames within one filesystem).
  const std::string staging = layout.workspace + "/.sandgate-recipe";
  SG_TRY(std::move(copy_tree(spec.workspace_recipe, staging, uid, gid, spec.recipe_limits))
             .context("copy workspace recipe"));
  {
    DIR* d = ::opendir(staging.c_str());
    if (d == nullptr) return sys_error("opendir", staging);
    Defer close_dir([&] { ::closedir(d); });
    for (;;) {
      errno = 0;
      struct dirent* e = ::readdir(d);
      if (e == nullptr) {
        if (errno != 0) return sys_error("readdir", staging);
        break;
      }
      std::string_view n = e->d_name;
      if (n == "." || n == "..") continue;
      if (::renameat(::dirfd(d), e->d_name, AT_FDCWD,
                     (layout.workspace + "/" + e->d_name).c_str()) != 0)
        return sys_error("move the copied recipe into place", staging + "/" + e->d_name);
    }
  }
  if (::rmdir(staging.c_str()) != 0) return sys_error("rmdir", staging);
  workspace_info_ = {"copy", why_copy + "; " + size_note, layout.workspace_image};
  return {};
}

// A tmpfs of the run's own: memory only (noswap where the kernel has it, Linux 6.4), mode 0500
// and one 0400 file per secret, owned by the call's host uid, then read-only. Recorded before
// it is mounted; destroy (or gc after a crash) unmounts it, and the secret is gone with it.
Status SupervisedEnvironment::make_secrets(const EnvSpec& spec, const Recipe& recipe) {
  if (layout_.secrets_dir.empty()) return {};
  const std::string& dir = layout_.secrets_dir;
  size_t total = 0;
  for (const auto& s : spec.secrets) total += s.value.size();
  if (::mkdir(dir.c_str(), 0700) != 0) return sys_error("mkdir secrets", dir);
  SG_TRY(state_.record({Resource::Kind::kMount, dir}));
  std::string opts = "mode=0500,uid=" + std::to_string(recipe.workspace_uid) +
                     ",gid=" + std::to_string(recipe.workspace_gid) +
                     ",size=" + std::to_string(total + (64 << 10)) +
                     ",nr_inodes=" + std::to_string(spec.secrets.size() + 16);
  const unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
  if (::mount("sandgate-secrets", dir.c_str(), "tmpfs", flags, (opts + ",noswap").c_str()) != 0 &&
      ::mount("sandgate-secrets", dir.c_str(), "tmpfs", flags, opts.c_str()) != 0)
    return sys_error("mount secrets tmpfs", dir);
  for (const auto& s : spec.secrets) {
    std::string path = dir + "/" + s.name;
    SG_ASSIGN_OR_RETURN(UniqueFd f,
                        open_fd(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400));
    SG_TRY(write_all(f.get(), s.value));
    if (::fchown(f.get(), recipe.workspace_uid, recipe.workspace_gid) != 0 ||
        ::fchmod(f.get(), 0400) != 0)
      return sys_error("chown/chmod secret", path);
  }
  if (::mount(nullptr, dir.c_str(), nullptr, MS_REMOUNT | MS_RDONLY | flags, nullptr) != 0)
    return sys_error("remount secrets read-only", dir);
  return {};
}

SupervisedEnvironment::~SupervisedEnvironment() {
  if (auto s = destroy(); !s.ok())
    spdlog::error("destroying run {}: {}", layout_.run_id, s.error().message());
}

Result<pid_t> SupervisedEnvironment::park() {
  if (destroyed_) return logic_error("park", "the environment was destroyed", layout_.run_id);
  if (timed_out_ || !supervisor_) return pid_t{0};
  return supervisor_->park();
}

pid_t SupervisedEnvironment::take_late_parked() {
  if (destroyed_ || timed_out_ || !supervisor_) return 0;
  return supervisor_->take_late_parked();
}

Status SupervisedEnvironment::alive() const {
  if (destroyed_) return logic_error("alive", "the environment was destroyed", layout_.run_id);
  if (timed_out_ || std::chrono::steady_clock::now() >= deadline_)
    return logic_error("alive", "the run's wall-clock timeout has expired", layout_.run_id);
  if (!supervisor_) return {};
  if (auto st = supervisor_->reachable(); !st.ok())
    return std::move(st).error().context_add("run " + layout_.run_id);
  return {};
}

Result<ExecResult> SupervisedEnvironment::exec(const Call& call, const Placement& placement) {
  if (destroyed_) return logic_error("exec", "the environment was destroyed", layout_.run_id);
  if (timed_out_)
    return logic_error("exec", "the run's wall-clock timeout has expired", layout_.run_id);
  Call bounded = call;
  bool run_deadline_applies = false;
  if (deadline_ != std::chrono::steady_clock::time_point::max()) {
    auto left = std::chrono::duration_cast<Duration>(deadline_ - std::chrono::steady_clock::now());
    if (left.count() <= 0) left = Duration(1);
    if (bounded.timeout.count() == 0 || left < bounded.timeout) {
      bounded.timeout = left;
      run_deadline_applies = true;
    }
  }
  auto result = supervisor_->exec(bounded, placement);
  if (result.ok() && result->timed_out && run_deadline_applies) {
    // The run's own timeout: the whole run ends, not only this call.
    timed_out_ = true;
    (void)supervisor_->stop();
  }
  return result;
}

Status SupervisedEnvironment::destroy() {
  if (destroyed_) return {};
  destroyed_ = true;
  StepClock clock("run " + layout_.run_id, "destroy");
  Status first;
  stop_proc_views_servers(paths_, state_.resources());  // released (reaped) below
  if (supervisor_) {
    if (stopping_) {
      stopping_();
      clock.lap("stopping");
    }
    first = supervisor_->stop();
    if (supervisor_->runtime_exit() && runtime_exited_) {
      if (auto s = runtime_exited_(*supervisor_->runtime_exit(), state_); !s.ok() && first.ok())
        first = std::move(s);
    }
    supervisor_.reset();
    clock.lap("stop");
  }
  // What remains in the record (the supervisor process, now reaped; the run directory) goes.
  auto released = release_resources(paths_, state_.resources());
  if (!released.ok()) {
    // Keep the record: `sandgate gc` will retry.
    return released;
  }
  clock.lap("release");
  SG_TRY(state_.finish());
  clock.lap("finish");
  return first;
}

}  // namespace sandgate::providers
