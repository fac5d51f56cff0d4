#include "core/terminal_text.h"

#include <cstdio>

namespace sandgate {
namespace {

void show_byte(std::string& out, unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  out += buf;
}

bool passes(unsigned char c) { return c == '\n' || c == '\r' || c == '\t' || c == '\b'; }

}  // namespace

std::string TerminalText::feed(std::string_view chunk) {
  std::string in = std::move(pending_);
  pending_.clear();
  in.append(chunk);
  std::string out;
  out.reserve(in.size());
  size_t i = 0;
  while (i < in.size()) {
    unsigned char c = static_cast<unsigned char>(in[i]);
    if (c < 0x20 || c == 0x7f) {
      if (passes(c))
        out += static_cast<char>(c);
      else
        show_byte(out, c);
      ++i;
      continue;
    }
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A stray continuation byte (0x80..0xBF with no lead): a C1 control to a terminal in
    // 8-bit mode (0x9B is CSI), invalid UTF-8 to the others. Shown.
    if (c < 0xc0 || c > 0xf4) {
      show_byte(out, c);
      ++i;
      continue;
    }
    const size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
    size_t have = 1;
    while (have < len && i + have < in.size() &&
           (static_cast<unsigned char>(in[i + have]) & 0xc0) == 0x80)
      ++have;
    if (have < len && i + have == in.size()) {
      pending_ = in.substr(i);  // the rest of the character arrives with the next chunk
      break;
    }
    if (have < len) {  // cut short by a byte that is not a continuation: invalid, shown
      show_byte(out, c);
      ++i;
      continue;
    }
    // U+0080..U+009F, the C1 controls (CSI is U+009B), are C2 80..C2 9F in UTF-8: some
    // terminals obey them too.
    unsigned char second = static_cast<unsigned char>(in[i + 1]);
    if (c == 0xc2 && second <= 0x9f) {
      show_byte(out, second);
    } else {
      out.append(in, i, len);
    }
    i += len;
  }
  return out;
}

std::string TerminalText::finish() {
  std::string out;
  for (unsigned char c : pending_) show_byte(out, c);
  pending_.clear();
  return out;
}

}  // namespace sandgate
