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

// At most `max_bytes` of `text` for an error message: cut where no UTF-8 character is split,
// control characters shown as \xNN (a message stays one line), and an ellipsis after a
// cut ("\u2026 [N more bytes]"); invalid UTF-8 becomes U+FFFD. Every message that quotes input (a
// value, a key, a token) quotes it through this, so a 50 MB number in a file gives an error line of
// a few hundred bytes, not 50 MB.
inline constexpr size_t kExcerptBytes = 80;
std::string excerpt(std::string_view text, size_t max_bytes = kExcerptBytes);

}  // namespace sandgate
