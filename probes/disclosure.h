// What the disclosure probes and the host compare: the probe reports a digest of what it read,
// the host computes the digest of its own copy (suite.cc), and the same bytes on both sides
// mean the host's information reached the sandbox. Header-only: the static probe binary and
// the suite share it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/strings.h"

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

// The value of `key` in a /proc/vmstat text ("key value" lines); nullopt when absent.
inline std::optional<uint64_t> vmstat_value(std::string_view text, std::string_view key) {
  for (std::string_view line : split(text, '\n')) {
    if (line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ' ')
      continue;
    uint64_t v = 0;
    bool digits = false;
    for (char c : line.substr(key.size() + 1)) {
      if (c < '0' || c > '9') break;
      v = v * 10 + static_cast<uint64_t>(c - '0');
      digits = true;
    }
    if (digits) return v;
  }
  return std::nullopt;
}

// What /proc/interrupts names, without the counts that move: the CPU header, and each line's
// label and source ("24: IO-APIC 5-edge ACPI:Ged", "NMI: Non-maskable interrupts"), one a line.
// The host's devices and drivers, as stable as the hardware; "" for a text with no lines.
inline std::string interrupt_sources(std::string_view text) {
  std::string out;
  size_t cpus = 0;
  bool header = true;
  for (std::string_view line : split(text, '\n')) {
    std::vector<std::string_view> fields;
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && line[i] == ' ') ++i;
      size_t j = i;
      while (j < line.size() && line[j] != ' ') ++j;
      if (j > i) fields.push_back(line.substr(i, j - i));
      i = j;
    }
    if (fields.empty()) continue;
    if (header) {  // "CPU0 CPU1 ...": how many count columns follow each label
      header = false;
      cpus = fields.size();
      out += "cpus " + std::to_string(cpus) + "\n";
      continue;
    }
    std::string kept(fields[0]);
    size_t i = 1;
    // Up to one count per CPU (ERR: and MIS: have one), then the source's words.
    while (i < fields.size() && i <= cpus &&
           fields[i].find_first_not_of("0123456789") == std::string_view::npos)
      ++i;
    for (; i < fields.size(); ++i) kept += " " + std::string(fields[i]);
    out += kept + "\n";
  }
  return out;
}

}  // namespace sandgate::probes
