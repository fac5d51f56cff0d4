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

#include <string>
#include <string_view>

namespace sandgate {

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
