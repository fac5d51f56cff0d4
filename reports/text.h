// Text that came out of a sandbox, made safe to print. Probe evidence, attempts and reasons are
// attacker-controlled (docs/DESIGN.md, idea 10): invalid UTF-8, control characters, ANSI escape
// sequences, bidirectional overrides, markup metacharacters, very long lines. Every writer
// passes such text through clean_text() first and then through its own format's escaper, so
// the two concerns stay apart: clean_text() decides what characters exist, the escaper decides
// how a character is spelled in HTML, XML or Markdown.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace sandgate::reports {

struct CleanOptions {
  // At most this many bytes of the input are kept (cut at a character boundary); the rest is
  // replaced by a note saying how much was cut. 0: no limit.
  size_t max_bytes = 4000;
  // Keep '\n' as a line break (a <pre> block); otherwise it is shown as the two characters \n
  // so that one value stays on one line (a table cell, an attribute, a Markdown row).
  bool keep_newlines = false;
};

// Valid UTF-8 with no control characters and nothing that reorders text:
//   - invalid UTF-8 sequences become U+FFFD;
//   - C0 controls (except '\n' when kept, and '\t' which becomes a space), DEL and C1 controls
//     are shown as \xNN (an ESC of an ANSI sequence becomes the text "\x1b[31m": inert);
//   - Unicode bidirectional controls (U+202A-202E, U+2066-2069, U+200E/F, U+061C) as \u{NNNN}
//     ("Trojan Source": text that reads differently from what it is);
//   - the noncharacters U+FFFE and U+FFFF, which XML 1.0 forbids, as \u{FFFE} / \u{FFFF};
//   - the input cut at max_bytes with " … [cut: N more bytes]".
std::string clean_text(std::string_view text, const CleanOptions& options = {});

// &, <, >, " and ' as character references: for HTML and XML text and attribute values
// (after clean_text, so no character XML 1.0 forbids is left to escape).
std::string escape_markup(std::string_view text);

// Markdown inline text that never starts a line (a table cell, the rest of a list item):
// clean_text'd on one line, &, < and > as character references (GitHub renders inline HTML),
// and the characters that open emphasis, code, links, images or cells (\ ` * _ [ ] | ~)
// backslash-escaped. Characters that mean something only at the start of a line (# - + 1.)
// are left alone, so the text stays readable in its raw form.
std::string escape_markdown(std::string_view text, size_t max_bytes = 300);
// A Markdown table cell or inline span: escaped, at most 200 bytes.
inline std::string md(std::string_view text, size_t max_bytes = 200) {
  return escape_markdown(text, max_bytes);
}

}  // namespace sandgate::reports
