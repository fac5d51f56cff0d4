// What the disclosure probes and the host compare: the probe reports a digest of what it read,
// the host computes the digest of its own copy (suite.cc), and the same bytes on both sides
// mean the host's information reached the sandbox. Header-only: the static probe binary and
// the suite share it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace sandgate::probes {

// FNV-1a 64 of `data` without trailing newlines, as 16 hex digits: equal text, equal digest.
inline std::string content_digest(std::string_view data) {
  while (!data.empty() && (data.back() == '\n' || data.back() == '\0')) data.remove_suffix(1);
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : data) h = (h ^ c) * 1099511628211ull;
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

// The "MemTotal:" line of a /proc/meminfo text, without its newline; "" when absent.
inline std::string meminfo_total_line(std::string_view text) {
  size_t at = text.find("MemTotal:");
  if (at == std::string_view::npos) return "";
  size_t end = text.find('\n', at);
  return std::string(text.substr(at, end == std::string_view::npos ? text.size() - at : end - at));
}

}  // namespace sandgate::probes
