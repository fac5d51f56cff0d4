// Splitting and joining text: the two one-liners every parser and message builder wants.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sandgate {

// Splits at every `sep`; empty fields are kept ("a,,b" -> "a", "", "b").
std::vector<std::string_view> split(std::string_view text, char sep);

// The items with `sep` between them: join({"a", "b"}, ", ") == "a, b". Any range of things a
// std::string_view can be made from.
template <typename Range>
std::string join(const Range& items, std::string_view sep = ", ") {
  std::string out;
  bool first = true;
  for (const auto& item : items) {
    if (!first) out += sep;
    out += std::string_view(item);
    first = false;
  }
  return out;
}

}  // namespace sandgate
