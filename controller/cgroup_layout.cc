#include "controller/cgroup_layout.h"

#include <algorithm>
#include <array>

#include "core/fd.h"

namespace sandgate::controller {
namespace {

// The v1 controllers a kernel can bind to a hierarchy (Documentation/admin-guide/cgroup-v1/).
// v1 is frozen, so an allowlist is safe, and it keeps mount options (rw, xattr, noprefix,
// clone_children, release_agent=...) from being mistaken for controllers.
constexpr std::array<std::string_view, 15> kV1Controllers = {
    "blkio", "cpu",     "cpuacct",  "cpuset",     "debug", "devices", "freezer", "hugetlb",
    "misc",  "net_cls", "net_prio", "perf_event", "pids",  "rdma",    "memory"};

bool is_v1_controller(std::string_view option) {
  return std::find(kV1Controllers.begin(), kV1Controllers.end(), option) != kV1Controllers.end();
}

}  // namespace

std::string to_string(CgroupLayoutKind kind) {
  switch (kind) {
    case CgroupLayoutKind::kNone:
      return "none";
    case CgroupLayoutKind::kV1:
      return "v1";
    case CgroupLayoutKind::kHybrid:
      return "hybrid";
    case CgroupLayoutKind::kV2:
      return "v2";
  }
  return "unknown";
}

std::string CgroupLayout::v1_mount(const std::string& controller) const {
  auto it = v1_mounts.find(controller);
  return it == v1_mounts.end() ? std::string() : it->second;
}

bool CgroupLayout::has_v2_controller(const std::string& controller) const {
  return std::find(v2_controllers.begin(), v2_controllers.end(), controller) !=
         v2_controllers.end();
}

std::vector<std::string> CgroupLayout::v1_controllers() const {
  std::vector<std::string> out;
  for (const auto& [name, path] : v1_mounts) {
    if (name.rfind("name=", 0) != 0) out.push_back(name);
  }
  return out;
}

CgroupLayout classify_cgroup_mounts(const std::vector<MountEntry>& mounts) {
  CgroupLayout layout;
  for (const auto& m : mounts) {
    if (m.fstype == "cgroup2") {
      if (layout.unified_mount.empty()) layout.unified_mount = m.mount_point;
    } else if (m.fstype == "cgroup") {
      for (const auto& opt : m.super_options) {
        if (is_v1_controller(opt) || opt.rfind("name=", 0) == 0)
          layout.v1_mounts.emplace(opt, m.mount_point);
      }
    }
  }
  bool v1 = !layout.v1_controllers().empty();
  bool v2 = !layout.unified_mount.empty();
  if (v1 && v2)
    layout.kind = CgroupLayoutKind::kHybrid;
  else if (v1)
    layout.kind = CgroupLayoutKind::kV1;
  else if (v2)
    layout.kind = CgroupLayoutKind::kV2;
  // Only named v1 hierarchies (name=systemd without controllers) and no cgroup2: still v1,
  // a layout in which nothing can be limited.
  else if (!layout.v1_mounts.empty())
    layout.kind = CgroupLayoutKind::kV1;
  return layout;
}

Result<CgroupLayout> parse_mountinfo(std::string_view text) {
  SG_ASSIGN_OR_RETURN(auto mounts, parse_mount_table(text));
  return classify_cgroup_mounts(mounts);
}

Result<CgroupLayout> detect_cgroup_layout(const std::string& mountinfo_path) {
  SG_ASSIGN_OR_RETURN(std::string text, read_file(mountinfo_path));
  SG_ASSIGN_OR_RETURN(CgroupLayout layout,
                      std::move(parse_mountinfo(text)).context("reading " + mountinfo_path));
  if (!layout.unified_mount.empty()) {
    SG_ASSIGN_OR_RETURN(DirFd root, DirFd::open(layout.unified_mount));
    SG_ASSIGN_OR_RETURN(std::string controllers, root.read("cgroup.controllers"));
    std::replace(controllers.begin(), controllers.end(), '\n', ' ');
    for (auto c : split(controllers, ' ')) {
      if (!c.empty()) layout.v2_controllers.emplace_back(c);
    }
  }
  return layout;
}

std::string describe(const CgroupLayout& layout) {
  std::string out = to_string(layout.kind);
  if (layout.kind == CgroupLayoutKind::kNone) return out + ": no cgroup filesystem is mounted";
  std::string sep = ": ";
  if (!layout.v1_mounts.empty()) {
    out += sep + "v1";
    for (const auto& [name, path] : layout.v1_mounts) out += " " + name + "=" + path;
    sep = "; ";
  }
  if (!layout.unified_mount.empty()) {
    out += sep + "cgroup2 at " + layout.unified_mount + " (controllers: ";
    if (layout.v2_controllers.empty()) out += "none";
    for (size_t i = 0; i < layout.v2_controllers.size(); ++i)
      out += (i ? " " : "") + layout.v2_controllers[i];
    out += ")";
  }
  return out;
}

}  // namespace sandgate::controller
