// Where a test's cgroup root could be left behind, on this host's layout.
//
// A leak check that probes hard-coded paths (/sys/fs/cgroup/memory/<root>, ...) passes vacuously
// on a layout it does not know: on a pure cgroup2 host the root is /sys/fs/cgroup/<root>, and a
// hybrid host also has blkio, cpuacct, freezer. These helpers list every directory from the
// layout the controller itself detects (controller/cgroup_layout.h) and refuse to check nothing:
// a layout that cannot be read or has no cgroup mount is an error, never zero paths.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "controller/cgroup_layout.h"
#include "core/result.h"

namespace sandgate::testing {

// <mount>/<root> for the cgroup2 mount and for every v1 hierarchy (controllers and named ones;
// comounted controllers share one directory, listed once), sorted. An error when the layout has
// no cgroup mount at all.
inline Result<std::vector<std::string>> cgroup_dirs_of_root(const controller::CgroupLayout& layout,
                                                            const std::string& root) {
  if (root.empty() || root.find('/') != std::string::npos || root == "." || root == "..")
    return logic_error("cgroup_dirs_of_root", "not a top-level cgroup name", root);
  std::vector<std::string> dirs;
  if (!layout.unified_mount.empty()) dirs.push_back(layout.unified_mount + "/" + root);
  for (const auto& [hierarchy, mount] : layout.v1_mounts) dirs.push_back(mount + "/" + root);
  std::sort(dirs.begin(), dirs.end());
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  if (dirs.empty())
    return logic_error("cgroup_dirs_of_root",
                       "no cgroup hierarchy is mounted (" + controller::describe(layout) +
                           "): nothing could be checked",
                       root);
  return dirs;
}

// The same from this host's layout (<mountinfo>, normally /proc/self/mountinfo).
inline Result<std::vector<std::string>> cgroup_dirs_of_root(
    const std::string& root, const std::string& mountinfo = "/proc/self/mountinfo") {
  SG_ASSIGN_OR_RETURN(controller::CgroupLayout layout,
                      std::move(controller::detect_cgroup_layout(mountinfo))
                          .context("detecting the cgroup layout for a leak check"));
  return cgroup_dirs_of_root(layout, root);
}

// Fails the test for every directory of `root` that still exists, and fails it loudly when the
// layout cannot be read (a check of zero paths is no check).
inline void expect_no_cgroup_left(const std::string& root) {
  auto dirs = cgroup_dirs_of_root(root);
  if (!dirs.ok()) {
    ADD_FAILURE() << "cannot check for a leaked cgroup " << root << ": " << dirs.error().message();
    return;
  }
  for (const auto& dir : *dirs) EXPECT_NE(::access(dir.c_str(), F_OK), 0) << "cgroup left: " << dir;
}

}  // namespace sandgate::testing
