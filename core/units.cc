#include "core/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "core/strings.h"

namespace sandgate {
namespace {

// Splits "1.5GiB" into a non-negative number and its suffix.
Result<std::pair<double, std::string>> split_number(std::string_view text, const char* what) {
  std::string s(text);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  size_t start = i;
  bool digits = false, dot = false;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digits = true;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  if (!digits)
    return logic_error(std::string("parse ") + what,
                       "'" + excerpt(text) + "' does not start with a number");
  // strtod, not stod: a number too large for a double is inf here (said below), not an exception.
  double value = std::strtod(s.substr(start, i - start).c_str(), nullptr);
  if (!std::isfinite(value))
    return logic_error(std::string("parse ") + what, "'" + excerpt(text) + "' is too large");
  std::string suffix = s.substr(i);
  while (!suffix.empty() && std::isspace(static_cast<unsigned char>(suffix.front())))
    suffix.erase(0, 1);
  for (auto& c : suffix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return std::make_pair(value, suffix);
}

}  // namespace

Result<Bytes> parse_bytes(std::string_view text) {
  SG_ASSIGN_OR_RETURN(auto parts, split_number(text, "size"));
  auto [value, suffix] = parts;
  double mult;
  if (suffix.empty() || suffix == "b")
    mult = 1;
  else if (suffix == "k" || suffix == "kib")
    mult = 1ULL << 10;
  else if (suffix == "m" || suffix == "mib")
    mult = 1ULL << 20;
  else if (suffix == "g" || suffix == "gib")
    mult = 1ULL << 30;
  else if (suffix == "t" || suffix == "tib")
    mult = 1ULL << 40;
  else if (suffix == "kb")
    mult = 1e3;
  else if (suffix == "mb")
    mult = 1e6;
  else if (suffix == "gb")
    mult = 1e9;
  else if (suffix == "tb")
    mult = 1e12;
  else
    return logic_error("parse size", "unknown unit '" + excerpt(suffix) + "' in '" + excerpt(text) +
                                         "' (use B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB)");
  double bytes = std::round(value * mult);
  // 2^64 is exact as a double, while UINT64_MAX rounds up to it: compare against 2^64, and
  // convert without a signed intermediate (llround is undefined above 2^63).
  if (bytes >= 18446744073709551616.0)
    return logic_error("parse size", "'" + excerpt(text) + "' is too large");
  if (mult == 1 && value != std::floor(value))
    return logic_error("parse size", "'" + excerpt(text) + "' is a fraction of a byte");
  return Bytes{static_cast<uint64_t>(bytes)};
}

Result<Duration> parse_duration(std::string_view text) {
  SG_ASSIGN_OR_RETURN(auto parts, split_number(text, "duration"));
  auto [value, suffix] = parts;
  double ns;
  if (suffix == "ns")
    ns = 1;
  else if (suffix == "us" || suffix == "µs")
    ns = 1e3;
  else if (suffix == "ms")
    ns = 1e6;
  else if (suffix == "s")
    ns = 1e9;
  else if (suffix == "m" || suffix == "min")
    ns = 60e9;
  else if (suffix == "h")
    ns = 3600e9;
  else if (suffix.empty())
    return logic_error("parse duration",
                       "'" + excerpt(text) + "' has no unit (write e.g. 250ms, 2s, 5m)");
  else
    return logic_error("parse duration", "unknown unit '" + excerpt(suffix) + "' in '" +
                                             excerpt(text) + "' (use ns, us, ms, s, m, h)");
  double total = value * ns;
  if (total > 1e18) return logic_error("parse duration", "'" + excerpt(text) + "' is too long");
  return Duration(static_cast<int64_t>(std::llround(total)));
}

std::string human_bytes(Bytes b) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b.value);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0fB", v);
  else
    std::snprintf(buf, sizeof buf, v < 10 ? "%.2f%s" : v < 100 ? "%.1f%s" : "%.0f%s", v, units[u]);
  return buf;
}

std::string format_bytes(Bytes b) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  // The largest unit in which the value is exact to two decimals (b * 100 divisible by the
  // unit), so the text parses back to the same number of bytes.
  int u = 0;
  while (u < 4) {
    unsigned shift = 10 * static_cast<unsigned>(u + 1);
    uint64_t unit = 1ULL << shift;
    if (b.value < unit) break;
    // b * 100 % 2^shift == 0  <=>  b % 2^(shift - 2) == 0, since 100 = 4 * 25.
    if (b.value % (unit >> 2) != 0) break;
    ++u;
  }
  double v = static_cast<double>(b.value) / static_cast<double>(1ULL << (10 * u));
  char buf[64];
  if (v == std::floor(v)) {
    std::snprintf(buf, sizeof buf, "%.0f%s", v, units[u]);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f%s", v, units[u]);
  }
  return buf;
}

namespace {

// "%.3f" without trailing zeros: "1.5", "250", never exponent notation.
std::string trimmed(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  std::string s = buf;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

std::string format_duration(Duration d) {
  int64_t ns = d.count();
  char buf[64];
  if (ns % 1'000'000'000 == 0 && ns != 0) {
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(ns / 1'000'000'000));
    return buf;
  }
  if (ns >= 1'000'000'000) {
    std::snprintf(buf, sizeof buf, "%.3fs", static_cast<double>(ns) / 1e9);
    return buf;
  }
  if (ns >= 1'000'000) return trimmed(static_cast<double>(ns) / 1e6) + "ms";
  if (ns >= 1'000) return trimmed(static_cast<double>(ns) / 1e3) + "us";
  std::snprintf(buf, sizeof buf, "%lldns", static_cast<long long>(ns));
  return buf;
}

double to_seconds(Duration d) { return static_cast<double>(d.count()) / 1e9; }
double to_millis(Duration d) { return static_cast<double>(d.count()) / 1e6; }

}  // namespace sandgate
