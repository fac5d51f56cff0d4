#include "core/mounts.h"

#include <algorithm>

#include "core/fd.h"

namespace sandgate {

namespace {

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

Result<std::vector<MountEntry>> read_mount_table(const std::string& mountinfo_path) {
  SG_ASSIGN_OR_RETURN(std::string text, read_file(mountinfo_path));
  return std::move(parse_mount_table(text)).context("reading " + mountinfo_path);
}

std::vector<std::string> mount_points_under(const std::vector<MountEntry>& mounts,
                                            const std::string& path) {
  std::vector<std::string> out;
  for (const auto& m : mounts)
    if (m.mount_point == path || m.mount_point.starts_with(path + "/"))
      out.push_back(m.mount_point);
  return out;
}

std::string cgroup2_mount_point() {
  auto mounts = read_mount_table("/proc/self/mountinfo");
  if (!mounts.ok()) return "";
  for (const auto& m : *mounts)
    if (m.fstype == "cgroup2") return m.mount_point;
  return "";
}

}  // namespace sandgate
