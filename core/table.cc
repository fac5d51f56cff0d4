#include "core/table.h"

#include <algorithm>

namespace sandgate {
namespace {

bool continuation(std::string_view s, size_t i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
  if (i >= s.size()) return false;
  auto c = static_cast<unsigned char>(s[i]);
  return c >= lo && c <= hi;
}

// The length of the valid UTF-8 sequence at s[i] (RFC 3629: no overlong forms, surrogates or
// code points above U+10FFFF), or 0 when the byte there does not begin one.
size_t sequence_length(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return continuation(s, i + 1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    bool valid = continuation(s, i + 1, lo, hi) && continuation(s, i + 2);
    return valid ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    bool valid = continuation(s, i + 1, lo, hi) && continuation(s, i + 2) && continuation(s, i + 3);
    return valid ? 4 : 0;
  }
  return 0;
}

// One line of printable text: C0 and C1 controls, DEL and bytes that are not valid UTF-8 become
// '?', each counting as one character.
std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = sequence_length(s, i);
    auto c = static_cast<unsigned char>(s[i]);
    bool control = (n == 1 && (c < 0x20 || c == 0x7F)) ||
                   (n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0);
    if (n == 0 || control) {
      out += '?';
      i += n ? n : 1;
      continue;
    }
    out.append(s.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace

size_t display_width(std::string_view text) {
  size_t width = 0;
  for (size_t i = 0; i < text.size(); ++width) i += std::max<size_t>(1, sequence_length(text, i));
  return width;
}

std::string cut_to_width(std::string_view text, size_t width) {
  if (display_width(text) <= width) return std::string(text);
  size_t keep = width > 3 ? width - 3 : 0, i = 0;
  for (size_t chars = 0; chars < keep && i < text.size(); ++chars)
    i += std::max<size_t>(1, sequence_length(text, i));
  return std::string(text.substr(0, i)) + "...";
}

TextTable::TextTable(std::vector<Column> columns, Style style)
    : columns_(std::move(columns)), style_(std::move(style)) {}

TextTable& TextTable::row(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  for (size_t c = 0; c < cells.size(); ++c) {
    cells[c] = printable(cells[c]);
    if (columns_[c].max_width) cells[c] = cut_to_width(cells[c], columns_[c].max_width);
  }
  lines_.push_back({Line::kRow, std::move(cells)});
  return *this;
}

TextTable& TextTable::section(std::string line) {
  lines_.push_back({Line::kSection, {printable(line)}});
  return *this;
}

TextTable& TextTable::separator() {
  lines_.push_back({Line::kSeparator, {}});
  return *this;
}

std::string TextTable::render() const {
  std::vector<Line> lines;
  if (style_.header) {
    std::vector<std::string> headers;
    for (const auto& c : columns_) headers.push_back(c.header);
    lines.push_back({Line::kRow, std::move(headers)});
  }
  lines.insert(lines.end(), lines_.begin(), lines_.end());

  std::vector<size_t> width(columns_.size(), 0);
  for (const auto& l : lines) {
    if (l.kind != Line::kRow) continue;
    for (size_t c = 0; c < l.cells.size(); ++c)
      width[c] = std::max(width[c], display_width(l.cells[c]));
  }
  size_t total = 0;
  for (size_t c = 0; c < width.size(); ++c) total += width[c] + (c ? style_.gap : 0);

  std::string out;
  for (const auto& l : lines) {
    std::string text;
    if (l.kind == Line::kSection) {
      text = l.cells.front();
    } else if (l.kind == Line::kSeparator) {
      text = style_.indent + std::string(total, '-');
    } else {
      text = style_.indent;
      for (size_t c = 0; c < l.cells.size(); ++c) {
        if (c) text += std::string(style_.gap, ' ');
        std::string pad(width[c] - display_width(l.cells[c]), ' ');
        text += columns_[c].align == Align::kRight ? pad + l.cells[c] : l.cells[c] + pad;
      }
    }
    text.erase(text.find_last_not_of(' ') + 1);
    out += text + "\n";
  }
  return out;
}

}  // namespace sandgate
