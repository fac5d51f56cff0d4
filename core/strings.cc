#include "core/strings.h"

#include <cstdio>

#include "core/json.h"

namespace sandgate {

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

namespace {
// No fmt here: the static helper binaries (sandgate-probe, sandgate-load) compile this file
// without sandgate_core's shared dependencies.
std::string hex_escape(unsigned char c) {
  char buf[5];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  return buf;
}
}  // namespace

std::string excerpt(std::string_view text, size_t max_bytes) {
  size_t cut = utf8_safe_cut(text, max_bytes);
  std::string out;
  out.reserve(cut + 32);
  for (char ch : text.substr(0, cut)) {
    auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f)
      out += hex_escape(c);
    else
      out += ch;
  }
  make_valid_utf8(out);
  if (cut < text.size()) out += "\u2026 [" + std::to_string(text.size() - cut) + " more bytes]";
  return out;
}

}  // namespace sandgate
