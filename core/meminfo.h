// The host's memory from /proc/meminfo (proc(5)): the one parser behind the replay's host
// sampler (host peak = MemTotal - MemAvailable, the budget = MemTotal) and the host description
// in a recorded trace's header.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/host_paths.h"
#include "core/result.h"

namespace sandgate {

struct MemInfo {
  uint64_t total_bytes = 0;                 // MemTotal
  std::optional<uint64_t> available_bytes;  // MemAvailable (Linux 3.14+; absent before)
  // What the host is using: MemTotal - MemAvailable (0 if the kernel reports more available
  // than total); nullopt without MemAvailable.
  std::optional<uint64_t> used_bytes() const;
};

// The whole text of a meminfo file. Lines are "Key: value [kB]"; only MemTotal (required) and
// MemAvailable are read, and a malformed value of either is an error naming the line.
Result<MemInfo> parse_meminfo(std::string_view text);
// parse_meminfo of <paths.proc>/meminfo.
Result<MemInfo> read_meminfo(const HostPaths& paths);

}  // namespace sandgate
