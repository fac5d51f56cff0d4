// Text tables for the commands that print them (`plan`, `trace stats`, `replay`, `probe`,
// `qualify`): one way to lay out columns, so every table looks the same and none can fall out of
// alignment.
//
// Widths come from the content: a column is as wide as its widest cell or header, measured in
// characters, not bytes ("✓", "×" and "—" are one column each; wide East Asian characters are
// not told apart). Columns are separated by `gap` spaces; numbers are right-aligned by asking
// for it. A column may have a maximum width: a longer cell is cut at a character boundary and
// ends in "...". No line ends in spaces. A cell is one line: control characters (a newline, an
// escape sequence from a sandbox's output) are shown as '?', so they cannot break the layout.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace sandgate {

class TextTable {
 public:
  enum class Align { kLeft, kRight };
  struct Column {
    std::string header;
    Align align = Align::kLeft;
    size_t max_width = 0;  // 0: no maximum; otherwise at least 4
  };
  struct Style {
    std::string indent;  // before every row (not before section lines)
    size_t gap = 2;      // spaces between columns
    bool header = true;  // print the headers as the first row
  };

  explicit TextTable(std::vector<Column> columns, Style style);
  explicit TextTable(std::vector<Column> columns) : TextTable(std::move(columns), Style{}) {}

  // One row; missing cells are empty, extra cells are an error of the caller (dropped).
  TextTable& row(std::vector<std::string> cells);
  // A line of its own between rows, outside the columns (a group's title; "" for a blank line).
  TextTable& section(std::string line);
  // A rule under the columns: dashes as wide as the table.
  TextTable& separator();

  std::string render() const;

 private:
  struct Line {
    enum Kind { kRow, kSection, kSeparator } kind;
    std::vector<std::string> cells;  // kRow: one per column; kSection: the line
  };
  std::vector<Column> columns_;
  Style style_;
  std::vector<Line> lines_;
};

// Characters (code points) in UTF-8 text; a byte that is not part of a valid sequence counts as
// one.
size_t display_width(std::string_view text);
// `text` cut to at most `width` characters, ending in "..." when it was cut (width >= 4).
std::string cut_to_width(std::string_view text, size_t width);

}  // namespace sandgate
