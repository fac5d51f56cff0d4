#include "core/terminal_text.h"

#include <cstdio>

namespace sandgate {
namespace {

void show_byte(std::string& out, unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  out += buf;
}

bool reorders_text(char32_t cp) {
  return (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200E ||
         cp == 0x200F || cp == 0x061C;
}

// A decoded character (not newline or tab: the callers decide those) as a terminal may see it.
void show(std::string& out, std::string_view bytes, char32_t cp) {
  if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F)) {
    show_byte(out, static_cast<unsigned char>(cp));
  } else if (reorders_text(cp)) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "\\u{%04X}", static_cast<unsigned>(cp));
    out += buf;
  } else {
    out.append(bytes);
  }
}

// Whether text[i..] is the start of a multi-byte character cut by the end of the text.
bool incomplete_at_end(std::string_view text, size_t i) {
  auto b = static_cast<unsigned char>(text[i]);
  size_t len = b >= 0xC2 && b <= 0xDF   ? 2
               : b >= 0xE0 && b <= 0xEF ? 3
               : b >= 0xF0 && b <= 0xF4 ? 4
                                        : 0;
  if (len == 0 || i + len <= text.size()) return false;
  for (size_t k = i + 1; k < text.size(); ++k)
    if ((static_cast<unsigned char>(text[k]) & 0xC0) != 0x80) return false;
  return true;
}

}  // namespace

// The length of the valid UTF-8 sequence at text[i] and its code point; 0 when the bytes there
// are not one (a stray continuation byte, a truncated or overlong sequence, a surrogate).
size_t decode_utf8(std::string_view text, size_t i, char32_t* cp) {
  auto b = static_cast<unsigned char>(text[i]);
  size_t len;
  char32_t c;
  if (b < 0x80) {
    *cp = b;
    return 1;
  } else if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
    c = b & 0x1F;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    c = b & 0x0F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    c = b & 0x07;
  } else {
    return 0;
  }
  if (i + len > text.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    auto cont = static_cast<unsigned char>(text[i + k]);
    if ((cont & 0xC0) != 0x80) return 0;
    c = (c << 6) | (cont & 0x3F);
  }
  if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10FFFF)) ||
      (c >= 0xD800 && c <= 0xDFFF))
    return 0;
  *cp = c;
  return len;
}

std::string terminal_safe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    size_t len = decode_utf8(text, i, &cp);
    if (len == 0) {
      show_byte(out, static_cast<unsigned char>(text[i]));
      i += 1;
      continue;
    }
    if (cp == '\n')
      out += "\\n";
    else if (cp == '\t')
      out += ' ';
    else
      show(out, text.substr(i, len), cp);
    i += len;
  }
  return out;
}

std::string TerminalText::feed(std::string_view chunk) {
  std::string in = std::move(pending_);
  pending_.clear();
  in.append(chunk);
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size();) {
    char32_t cp = 0;
    size_t len = decode_utf8(in, i, &cp);
    if (len == 0) {
      if (incomplete_at_end(in, i)) {
        pending_ = in.substr(i);  // the rest of the character arrives with the next chunk
        break;
      }
      show_byte(out, static_cast<unsigned char>(in[i]));
      i += 1;
      continue;
    }
    if (cp == '\n' || cp == '\r' || cp == '\t' || cp == '\b')
      out += static_cast<char>(cp);
    else
      show(out, in.substr(i, len), cp);
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
