#include "session/export.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <string_view>
#include <vector>

#include "core/defer.h"
#include "core/fd.h"
#include "core/files.h"
#include "core/log.h"
#include "core/process.h"

namespace sandgate::session {
namespace {

// Who host git runs as: the recipe repository's owner, so that what the fetch writes there
// (objects, refs, reflogs) is theirs, not root's, and git's own ownership check holds.
struct GitUser {
  uid_t uid = 0;
  gid_t gid = 0;
};

// Host git as `user`, with nothing of sandgate's environment (GIT_DIR, GIT_CONFIG_* of whoever
// started it) and no terminal prompt.
Result<CommandResult> git(const std::vector<std::string>& args,
                          GitUser user = {::geteuid(), ::getegid()}) {
  std::vector<std::string> argv;
  if (user.uid != ::geteuid() || user.gid != ::getegid())
    argv = {"setpriv", "--reuid=" + std::to_string(user.uid), "--regid=" + std::to_string(user.gid),
            "--clear-groups", "--"};
  for (std::string a :
       {"/usr/bin/env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/nonexistent",
        "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "git"})
    argv.push_back(a);
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, std::chrono::minutes(10));
}

Status git_ok(const std::string& step, const std::vector<std::string>& args,
              GitUser user = {::geteuid(), ::getegid()}) {
  SG_ASSIGN_OR_RETURN(CommandResult r, git(args, user));
  if (r.timed_out || !r.status.exited || r.status.code != 0) {
    std::string out = r.output.substr(0, 2000);
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return logic_error(step, "git " + r.status.describe() + (out.empty() ? "" : ": " + out));
  }
  return {};
}

// A regular file below `dir`, read without following a symlink anywhere (openat2, Linux 5.6).
Result<std::string> read_beneath(int dir, const std::string& rel, size_t max) {
  struct open_how how = {};
  how.flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  UniqueFd fd(static_cast<int>(syscall(SYS_openat2, dir, rel.c_str(), &how, sizeof how)));
  if (!fd) return sys_error("open .git/" + rel);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return sys_error("fstat .git/" + rel);
  if (!S_ISREG(st.st_mode)) return logic_error("read .git/" + rel, "not a regular file");
  return read_all(fd.get(), max);
}

bool is_hex_id(std::string_view s) {
  if (s.size() != 40 && s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string first_line(std::string s) {
  auto nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// A ref name as a loose ref's path: below refs/, no "..", no component starting with '.'.
bool safe_ref(const std::string& ref) {
  if (ref.rfind("refs/", 0) != 0 || ref.size() > 1024) return false;
  if (ref.find("..") != std::string::npos || ref.find("/.") != std::string::npos) return false;
  for (char c : ref)
    if (c <= ' ' || c == '\\' || c == ':' || c == '~' || c == '^' || c == '?' || c == '*' ||
        c == '[')
      return false;
  return true;
}

// The commit id HEAD names, read from the workspace's HEAD, loose refs and packed-refs by
// sandgate itself: no git runs in the workspace.
Result<std::string> resolve_head(int git_dir) {
  SG_ASSIGN_OR_RETURN(std::string head, read_beneath(git_dir, "HEAD", 4096));
  std::string value = first_line(head);
  for (int depth = 0; depth < 5; ++depth) {
    if (is_hex_id(value)) return value;
    if (value.rfind("ref: ", 0) != 0)
      return logic_error("read .git/HEAD", "neither a commit id nor 'ref: refs/...'");
    std::string ref = value.substr(5);
    if (!safe_ref(ref))
      return logic_error("read .git/HEAD", "not a ref name: '" + ref.substr(0, 200) + "'");
    auto loose = read_beneath(git_dir, ref, 4096);
    if (loose.ok()) {
      value = first_line(*loose);
      continue;
    }
    auto packed = read_beneath(git_dir, "packed-refs", 64 << 20);
    value.clear();
    if (packed.ok()) {
      size_t pos = 0;
      while (pos < packed->size() && value.empty()) {
        size_t end = packed->find('\n', pos);
        if (end == std::string::npos) end = packed->size();
        std::string_view line(packed->data() + pos, end - pos);
        auto space = line.find(' ');
        if (space != std::string_view::npos && line.substr(space + 1) == ref)
          value = line.substr(0, space);
        pos = end + 1;
      }
    }
    if (value.empty())
      return logic_error("resolve HEAD", ref + " has no commit (nothing was committed on it?)");
  }
  return logic_error("resolve HEAD", "symbolic refs nested more than 5 deep");
}

}  // namespace

Status check_export_branch(const std::string& name) {
  if (name.empty() || name[0] == '-' || name.size() > 255)
    return logic_error("--export-branch", "'" + name + "' is not a branch name");
  SG_ASSIGN_OR_RETURN(CommandResult r, git({"check-ref-format", "--branch", name}));
  if (!r.status.exited || r.status.code != 0 || first_line(r.output) != name)
    return logic_error("--export-branch",
                       "'" + name + "' is not a valid branch name (git check-ref-format --branch)");
  return {};
}

Status export_branch(const std::string& workspace_host, const std::string& recipe_repo,
                     const std::string& branch, bool force) {
  SG_TRY(check_export_branch(branch));
  if (recipe_repo.empty())
    return logic_error("--export-branch",
                       "the run has no recipe: there is no repository to bring the branch into");
  char* abs = ::realpath(recipe_repo.c_str(), nullptr);
  if (!abs) return sys_error("--export-branch: resolve the recipe", recipe_repo);
  std::string recipe(abs);
  std::free(abs);
  struct stat owner;
  if (::stat(recipe.c_str(), &owner) != 0) return sys_error("--export-branch: stat", recipe);
  const GitUser user{owner.st_uid, owner.st_gid};
  const std::vector<std::string> in_recipe = {"-C", recipe};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.begin(), in_recipe.begin(), in_recipe.end());
    return args;
  };
  SG_TRY(std::move(git_ok("find the recipe's repository", with({"rev-parse", "--git-dir"}), user))
             .context("--export-branch: the recipe " + recipe + " is not a git repository"));
  SG_ASSIGN_OR_RETURN(
      CommandResult exists,
      git(with({"rev-parse", "--verify", "--quiet", "refs/heads/" + branch}), user));
  if (exists.status.exited && exists.status.code == 0 && !force)
    return logic_error("--export-branch", "branch '" + branch + "' already exists in " + recipe +
                                              " (--export-force replaces it)");

  // The workspace's .git: a real directory, never a gitfile or a link pointing elsewhere.
  std::string git_dir = workspace_host + "/.git";
  UniqueFd gd(::open(git_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!gd) return sys_error("--export-branch: open the workspace's .git directory", git_dir);
  SG_ASSIGN_OR_RETURN(std::string head,
                      std::move(resolve_head(gd.get())).context("--export-branch"));

  // A fresh bare repository of sandgate's own: empty template (no hooks), its own config.
  const char* tmp_env = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(tmp_env && *tmp_env ? tmp_env : "/var/tmp") + "/sandgate-export.XXXXXX";
  if (!::mkdtemp(tmpl.data())) return sys_error("mkdtemp", tmpl);
  const std::string bare = tmpl;
  // The recipe's owner runs the fetch, so reads the bare repository: theirs, and only theirs.
  if (::chown(bare.c_str(), user.uid, user.gid) != 0) return sys_error("chown", bare);
  Defer remove_bare([&] {
    if (auto s = remove_tree(bare); !s.ok())
      spdlog::error("removing {}: {}", bare, s.error().message());
  });
  SG_TRY(git_ok("--export-branch: init a bare repository",
                {"init", "--bare", "--quiet", "--template=", bare}, user));
  // The objects only, owned by the recipe's owner: bounded, nothing followed, FIFOs and devices
  // skipped (copy_tree); then everything in objects/info (alternates, http-alternates,
  // commit-graph) and the multi-pack-index go: they point git at other stores or describe objects
  // without being them.
  SG_TRY(remove_tree(bare + "/objects"));
  SG_TRY(std::move(copy_tree(git_dir + "/objects", bare + "/objects", user.uid, user.gid))
             .context("--export-branch: copy the workspace's objects"));
  SG_TRY(remove_tree(bare + "/objects/info"));
  SG_TRY(remove_tree(bare + "/objects/pack/multi-pack-index"));
  for (const char* dir : {"/objects/info", "/objects/pack"}) {
    SG_TRY(make_dirs(bare + dir, 0755));
    if (::chown((bare + dir).c_str(), user.uid, user.gid) != 0)
      return sys_error("chown", bare + dir);
  }
  SG_TRY(git_ok("--export-branch: point a ref at the workspace's HEAD " + head,
                {"--git-dir=" + bare, "update-ref", "refs/heads/export", head}, user));
  // fsck of every object on the way in: a corrupt or malformed object fails the fetch.
  std::string refspec = std::string(force ? "+" : "") + "refs/heads/export:refs/heads/" + branch;
  return git_ok("--export-branch: fetch the commits into " + recipe,
                with({"-c", "fetch.fsckObjects=true", "-c", "transfer.fsckObjects=true", "fetch",
                      "--no-tags", "--quiet", "--no-write-fetch-head", bare, refspec}),
                user);
}

Status export_directory(const std::string& workspace_host, const std::string& directory) {
  if (directory.empty()) return logic_error("--export", "no directory named");
  struct stat st;
  if (::lstat(directory.c_str(), &st) == 0) {
    // Empty directories only: never merge into, or replace, something that holds data.
    if (!S_ISDIR(st.st_mode) || ::rmdir(directory.c_str()) != 0)
      return logic_error("--export", "must name a directory that does not exist or is empty",
                         directory);
  } else if (errno != ENOENT) {
    return sys_error("--export: stat", directory);
  }
  return std::move(copy_tree(workspace_host, directory, ::geteuid(), ::getegid()))
      .context("--export: copy the final workspace");
}

}  // namespace sandgate::session
