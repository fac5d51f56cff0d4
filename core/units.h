// Units: byte sizes and durations, parsed from what people type ("512MiB", "1.5GiB", "250ms",
// "2s") with errors that say what was wrong, and formatted back the same way.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"

namespace sandgate {

struct Bytes {
  uint64_t value = 0;
  constexpr auto operator<=>(const Bytes&) const = default;
};

constexpr Bytes KiB(uint64_t n) { return {n << 10}; }
constexpr Bytes MiB(uint64_t n) { return {n << 20}; }
constexpr Bytes GiB(uint64_t n) { return {n << 30}; }

using Duration = std::chrono::nanoseconds;

// "4096", "512KiB", "512MiB", "1.5GiB", "2TiB"; K/M/G/T are binary like cgroupfs's
// memory.max; KB/MB/GB/TB are decimal. Case-insensitive suffix, no negative values.
Result<Bytes> parse_bytes(std::string_view text);
// "250ms", "2s", "1.5s", "100us", "500ns", "5m", "1h". A bare number is an error: a unit
// must be named, because "30" means seconds to one reader and milliseconds to another.
Result<Duration> parse_duration(std::string_view text);

// The largest binary unit that keeps the value exact to two decimals: "512MiB", "1.50GiB".
std::string format_bytes(Bytes b);
// For people, not for parsing back: three significant digits in the largest binary unit that
// keeps the number >= 1 ("57.9MiB", "1.50GiB", "512B").
std::string human_bytes(Bytes b);
// "250ms", "2.000s", "15us".
std::string format_duration(Duration d);

double to_seconds(Duration d);
double to_millis(Duration d);

}  // namespace sandgate
