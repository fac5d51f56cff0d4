#include "core/meminfo.h"

#include <charconv>
#include <limits>
#include <string>

#include "core/fd.h"

namespace sandgate {
namespace {

constexpr std::string_view kStep = "parse meminfo";

std::string_view trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// "24684100 kB" (proc(5): kB means KiB) or a bare count.
Result<uint64_t> parse_value(std::string_view key, std::string_view value, size_t line_no) {
  auto bad = [&](const std::string& why) {
    return logic_error(std::string(kStep),
                       "line " + std::to_string(line_no) + ": " + std::string(key) + ": " + why);
  };
  value = trim(value);
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc() || end == value.data())
    return bad("expected a number, got '" + std::string(value) + "'");
  std::string_view unit = trim(value.substr(static_cast<size_t>(end - value.data())));
  if (unit.empty()) return n;
  if (unit != "kB") return bad("unknown unit '" + std::string(unit) + "'");
  if (n > std::numeric_limits<uint64_t>::max() / 1024) return bad("out of range");
  return n * 1024;
}

}  // namespace

std::optional<uint64_t> MemInfo::used_bytes() const {
  if (!available_bytes) return std::nullopt;
  return total_bytes > *available_bytes ? total_bytes - *available_bytes : 0;
}

Result<MemInfo> parse_meminfo(std::string_view text) {
  MemInfo m;
  bool total = false;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view key = line.substr(0, colon), value = line.substr(colon + 1);
    if (key == "MemTotal") {
      SG_ASSIGN_OR_RETURN(m.total_bytes, parse_value(key, value, line_no));
      total = true;
    } else if (key == "MemAvailable") {
      SG_ASSIGN_OR_RETURN(m.available_bytes, parse_value(key, value, line_no));
    }
  }
  if (!total) return logic_error(std::string(kStep), "no MemTotal line");
  return m;
}

Result<MemInfo> read_meminfo(const HostPaths& paths) {
  std::string path = paths.proc + "/meminfo";
  SG_ASSIGN_OR_RETURN(std::string text, read_file(path, 1 << 16));
  auto m = parse_meminfo(text);
  if (!m.ok()) return std::move(m).error().context_add("reading " + path);
  return m;
}

}  // namespace sandgate
