// core/terminal_text.h: a sandbox's output on its way to the caller's terminal. terminal_safe's
// result is inert (valid UTF-8, no C0, DEL, C1 or bidirectional control); TerminalText passes
// only \n, \r, \t and backspace of C0, and the stream cut anywhere gives what it gives whole.
#include <string>

#include "core/terminal_text.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using sandgate::decode_utf8;

// Every character of `s` is valid UTF-8 and none is a control a terminal obeys, except `allowed`.
void check_inert(const std::string& s, std::string_view allowed, std::string_view what) {
  for (size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    size_t n = decode_utf8(s, i, &cp);
    FUZZ_CHECK(n > 0, std::string(what) + ": invalid UTF-8 at byte " + std::to_string(i));
    bool c0 = cp < 0x20 || cp == 0x7f;
    bool c1 = cp >= 0x80 && cp <= 0x9f;
    bool bidi = (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) ||
                cp == 0x200e || cp == 0x200f || cp == 0x061c;
    if (c0) {
      FUZZ_CHECK(allowed.find(static_cast<char>(cp)) != std::string_view::npos,
                 std::string(what) + ": control " + std::to_string(cp) + " passed at byte " +
                     std::to_string(i));
    }
    FUZZ_CHECK(!c1 && !bidi, std::string(what) + ": control U+" + std::to_string(cp) +
                                 " passed at byte " + std::to_string(i));
    i += n;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandgate;
  std::string_view text = fuzz::as_text(data, size);
  // decode_utf8 never reads past the end, and says a length within it.
  for (size_t i = 0; i < text.size(); ++i) {
    char32_t cp = 0;
    size_t n = decode_utf8(text, i, &cp);
    FUZZ_CHECK(n <= 4 && i + n <= text.size(), "decode_utf8 length out of range");
    if (n > 0) FUZZ_CHECK(cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff), "bad code point");
  }
  check_inert(terminal_safe(text), "", "terminal_safe");

  TerminalText whole;
  std::string all = whole.feed(text);  // before finish(): the operands of + have no set order
  all += whole.finish();
  check_inert(all, "\n\r\t\b", "TerminalText");
  // The same stream in two chunks, cut where the first byte says, and byte by byte for short
  // inputs: a sequence split between chunks is shown as it is whole.
  if (!text.empty()) {
    size_t cut = static_cast<uint8_t>(text[0]) % (text.size() + 1);
    TerminalText two;
    std::string parts = two.feed(text.substr(0, cut));
    parts += two.feed(text.substr(cut));
    parts += two.finish();
    FUZZ_CHECK(parts == all, "a stream cut at " + std::to_string(cut) + " is shown differently");
  }
  if (text.size() <= 64) {
    TerminalText bytes;
    std::string each;
    for (char c : text) each += bytes.feed(std::string_view(&c, 1));
    each += bytes.finish();
    FUZZ_CHECK(each == all, "a stream fed byte by byte is shown differently");
  }
  return 0;
}
