// What reaches the caller's terminal from a sandbox: controls shown, never obeyed; text, line
// breaks and every valid UTF-8 character unchanged, however the stream is cut into chunks.
#include "core/terminal_text.h"

#include <gtest/gtest.h>

namespace sandgate {
namespace {

std::string shown(std::string_view s) {
  TerminalText t;
  std::string out = t.feed(s);  // before finish(): the operands of + have no set order
  return out + t.finish();
}

// Fed one byte at a time: every split point at once.
std::string shown_bytewise(std::string_view s) {
  TerminalText t;
  std::string out;
  for (char c : s) out += t.feed(std::string_view(&c, 1));
  return out + t.finish();
}

TEST(TerminalText, TextAndLineControlsPass) {
  std::string text =
      "plain text\nline two\r\n\ttabbed, back\bspace, em\xe2\x80\x94"
      "dash, \xf0\x9f\x98\x80, \xc3\xa9\n";
  EXPECT_EQ(shown(text), text);
  EXPECT_EQ(shown_bytewise(text), text);
}

TEST(TerminalText, EscapeSequencesAreShownNotObeyed) {
  // A title change, a screen clear, a clipboard write (OSC 52), a bell, a query that makes
  // some terminals type an answer.
  std::string evil = "\x1b]0;pwned\x07\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07\x1b[6n";
  std::string out = shown(evil);
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
  EXPECT_EQ(out.find('\x07'), std::string::npos);
  EXPECT_EQ(out, "\\x1b]0;pwned\\x07\\x1b[2J\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[6n");
  EXPECT_EQ(shown_bytewise(evil), out);
  EXPECT_EQ(shown(std::string("\x7f\x01\x00", 3)), std::string("\\x7f\\x01\\x00"));
}

TEST(TerminalText, C1ControlsInEitherSpellingAreShown) {
  // CSI as the UTF-8 of U+009B, and as the single 8-bit byte; OSC (U+009D) likewise.
  EXPECT_EQ(shown("a\xc2\x9b"
                  "2Jb"),
            "a\\x9b2Jb");
  EXPECT_EQ(shown_bytewise("a\xc2\x9b"
                           "2Jb"),
            "a\\x9b2Jb");
  EXPECT_EQ(shown("a\x9b"
                  "2Jb\x9d"),
            "a\\x9b2Jb\\x9d");
  // U+00A0 (C2 A0) is a character, not a control.
  EXPECT_EQ(shown("\xc2\xa0"), "\xc2\xa0");
}

TEST(TerminalText, BidirectionalOverridesAndOverlongSequencesAreShown) {
  EXPECT_EQ(shown("a\xe2\x80\xae"
                  "b"),
            "a\\u{202E}b");                             // RIGHT-TO-LEFT OVERRIDE
  EXPECT_EQ(shown("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");  // an overlong '/'
  // The one-line form shows the newline too, and makes a tab a space.
  EXPECT_EQ(terminal_safe("a\nb\tc\x1b"), "a\\nb c\\x1b");
}

TEST(TerminalText, InvalidUtf8IsShownAndACutCharacterWaitsForItsEnd) {
  EXPECT_EQ(shown("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(shown("\xe2\x80"
                  "x"),
            "\\xe2\\x80x");  // cut short by an ASCII byte
  TerminalText t;
  EXPECT_EQ(t.feed("ok \xe2\x80"), "ok ");  // the em dash is not complete yet
  EXPECT_EQ(t.feed("\x94!"), "\xe2\x80\x94!");
  EXPECT_EQ(t.feed("\xc2"), "");
  EXPECT_EQ(t.finish(), "\\xc2");  // never completed: shown at the end
}

}  // namespace
}  // namespace sandgate
