// Output of a sandbox on its way to the caller's terminal. A terminal obeys what it is sent:
// ESC and CSI sequences move the cursor and clear the screen, OSC sequences set the window
// title and (OSC 52) write the clipboard, some terminals answer queries by typing into the
// shell. So when sandgate copies a call's output to a terminal, the control characters are
// shown, not obeyed: each becomes visible text ("\x1b", "\x9b", "\x07"), the way cat -v does it,
// and the rest passes through unchanged. Newline, carriage return, tab and backspace pass:
// ordinary tools use them. Output going to a pipe or a file is not touched (the bytes are the
// program's), and `sandgate exec --raw-output` turns the filter off for a terminal too.
//
// A stream arrives in chunks and a sequence may be split between two; the filter carries the
// part of a UTF-8 character it has not seen the end of to the next chunk.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace sandgate {

// The length of the valid UTF-8 sequence at text[i] and its code point; 0 when the bytes there
// are not one (a stray continuation byte, a truncated or overlong sequence, a surrogate).
size_t decode_utf8(std::string_view text, size_t i, char32_t* cp);

// `text` made inert on a terminal, on one line: valid UTF-8 is kept; C0 controls (ESC, CR,
// BEL, ...), DEL, C1 controls (U+0080-U+009F: a terminal may read U+009B as CSI) and bytes
// that are not valid UTF-8 are shown as \xNN; '\n' as the two characters \n; '\t' as a space;
// bidirectional controls (U+202A-202E, U+2066-2069, U+200E/F, U+061C) as \u{NNNN}. The same
// spelling as reports::clean_text, without its cut and its noncharacter rule. For a status
// line or a name; TerminalText below is the same rule for a stream of output.
std::string terminal_safe(std::string_view text);

// The stream form: as terminal_safe, except that newline, carriage return, tab and backspace
// pass (ordinary tools use them).
class TerminalText {
 public:
  // The shown form of `chunk`, given everything fed before it.
  std::string feed(std::string_view chunk);
  // What is left at the end of the stream (the start of a character never completed), shown.
  std::string finish();

 private:
  std::string pending_;  // the first bytes of a UTF-8 sequence, waiting for the rest
};

}  // namespace sandgate
