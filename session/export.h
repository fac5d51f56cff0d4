// "Commits out, nothing else": what a run may hand back to the host when it ends, whatever the
// provider. Everything else is destroyed with the run.
//
// The workspace is attacker-controlled: its .git/config can name a core.fsmonitor command,
// hooks, alternates pointing at other repositories, corrupt objects. So the host never runs
// git in it. export_branch copies only the object store (no info/alternates, no commit-graph,
// no multi-pack-index) into a fresh temporary bare repository with sandgate's own (empty)
// template and config, resolves HEAD itself from the workspace's HEAD and refs (regular files
// only, beneath .git, no symlink followed), and then `git fetch`es that one commit into the
// recipe's repository with every object fsck'ed on the way in (fetch.fsckObjects). An existing
// branch is never overwritten unless asked.
#pragma once

#include <string>

#include "core/result.h"

namespace sandgate::session {

struct RunExport {
  std::string branch;     // --export-branch: the recipe repository's new branch; "": none
  bool force = false;     // --export-force: replace an existing branch of that name
  std::string directory;  // --export: a copy of the final workspace; "": none
};

// git check-ref-format --branch NAME, and not a name git would read as something else.
Status check_export_branch(const std::string& name);

// Brings the commit at the workspace's HEAD (and the commits it needs) into `recipe_repo` as
// refs/heads/<branch>. The error says which step refused (no repository, a missing or corrupt
// object, the branch exists).
Status export_branch(const std::string& workspace_host, const std::string& recipe_repo,
                     const std::string& branch, bool force);

// Copies the final workspace to `directory`, which must not exist or be empty (core/files.h
// copy_tree: nothing followed, FIFOs/sockets/devices skipped, owned by the caller's uid).
Status export_directory(const std::string& workspace_host, const std::string& directory);

}  // namespace sandgate::session
