#include "reports/text.h"

#include <fmt/format.h>

#include "core/json.h"

namespace sandgate::reports {
namespace {

// Decodes one UTF-8 sequence of a string already made valid (make_valid_utf8): its code point
// and length.
char32_t decode(std::string_view s, size_t i, size_t* len) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    *len = 1;
    return b;
  }
  size_t n = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
  char32_t cp = b & (0x7F >> n);
  for (size_t k = 1; k < n && i + k < s.size(); ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  *len = n;
  return cp;
}

bool reorders_text(char32_t cp) {
  return (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200E ||
         cp == 0x200F || cp == 0x061C;
}

}  // namespace

std::string clean_text(std::string_view text, const CleanOptions& options) {
  std::string s;
  size_t cut_bytes = 0;
  if (options.max_bytes > 0 && text.size() > options.max_bytes) {
    size_t keep = utf8_safe_cut(text, options.max_bytes);
    cut_bytes = text.size() - keep;
    s.assign(text.substr(0, keep));
  } else {
    s.assign(text);
  }
  make_valid_utf8(s);
  std::string out;
  out.reserve(s.size() + 16);
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    char32_t cp = decode(s, i, &len);
    if (cp == '\n' && options.keep_newlines) {
      out += '\n';
    } else if (cp == '\t') {
      out += ' ';
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F)) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(cp));
    } else if (reorders_text(cp) || cp == 0xFFFE || cp == 0xFFFF) {
      out += fmt::format("\\u{{{:04X}}}", static_cast<unsigned>(cp));
    } else {
      out.append(s, i, len);
    }
    i += len;
  }
  if (cut_bytes > 0) out += fmt::format(" … [cut: {} more bytes]", cut_bytes);
  return out;
}

std::string escape_markup(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 16);
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string escape_markdown(std::string_view text, size_t max_bytes) {
  CleanOptions o;
  o.max_bytes = max_bytes;
  std::string clean = clean_text(text, o);
  std::string out;
  out.reserve(clean.size() + 16);
  for (char c : clean) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\\':
      case '`':
      case '*':
      case '_':
      case '[':
      case ']':
      case '|':
      case '~':
        out += '\\';
        out += c;
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace sandgate::reports
