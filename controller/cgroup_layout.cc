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

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t end = text.find(sep, start);
    out.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

// mountinfo escapes space, tab, newline and backslash as \ooo (fs/proc_namespace.c, mangle()).
std::string unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    auto octal = [&](size_t j) { return j < s.size() && s[j] >= '0' && s[j] <= '7'; };
    if (s[i] == '\\' && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out.push_back(
          static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::vector<std::string> split_options(std::string_view s) {
  std::vector<std::string> out;
  for (auto o : split(s, ',')) {
    if (!o.empty()) out.push_back(unescape(o));
  }
  return out;
}

bool parse_int(std::string_view s, int& out) {
  if (s.empty()) return false;
  long v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
    if (v > 1'000'000'000) return false;
  }
  out = static_cast<int>(v);
  return true;
}

Result<MountEntry> parse_line(std::string_view line, int number) {
  auto bad = [&](const std::string& why) {
    return logic_error("parse mountinfo", "line " + std::to_string(number) + ": " + why);
  };
  std::vector<std::string_view> f;
  for (auto field : split(line, ' ')) {
    if (!field.empty()) f.push_back(field);
  }
  // id parent major:minor root mount-point options [optional...] - fstype source super-options
  // The separator is searched after the six fixed fields: a mount point may be named "-".
  if (f.size() < 6) return bad("fewer than 6 fields before ' - '");
  auto dash = std::find(f.begin() + 6, f.end(), "-");
  if (dash == f.end()) return bad("no ' - ' separator before the filesystem type");
  size_t sep = static_cast<size_t>(dash - f.begin());
  // fstype and source are always there; super options may be missing on old kernels.
  if (f.size() - sep < 3) return bad("fewer than 2 fields after ' - '");
  MountEntry e;
  if (!parse_int(f[0], e.mount_id) || !parse_int(f[1], e.parent_id))
    return bad("mount ids are not numbers");
  e.root = unescape(f[3]);
  e.mount_point = unescape(f[4]);
  e.mount_options = split_options(f[5]);
  e.fstype = unescape(f[sep + 1]);
  e.source = unescape(f[sep + 2]);
  if (sep + 3 < f.size()) e.super_options = split_options(f[sep + 3]);
  return e;
}

}  // namespace

Result<std::vector<MountEntry>> parse_mount_table(std::string_view text) {
  std::vector<MountEntry> out;
  int number = 0;
  for (auto line : split(text, '\n')) {
    ++number;
    if (line.empty()) continue;
    SG_ASSIGN_OR_RETURN(MountEntry e, parse_line(line, number));
    out.push_back(std::move(e));
  }
  return out;
}

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
