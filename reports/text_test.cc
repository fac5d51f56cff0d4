#include "reports/text.h"

#include <gtest/gtest.h>

#include "core/json.h"

namespace sandgate::reports {
namespace {

TEST(CleanText, KeepsPlainTextAsIs) {
  EXPECT_EQ(clean_text("open(/home/u/.ssh/id_ed25519): EACCES — é"),
            "open(/home/u/.ssh/id_ed25519): EACCES — é");
}

TEST(CleanText, MakesEscapeSequencesInert) {
  EXPECT_EQ(clean_text("\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");
  EXPECT_EQ(clean_text("a\x07"
                       "b\x7f"
                       "c"),
            "a\\x07b\\x7fc");
  // C1 controls: U+009B is a one-character CSI on some terminals.
  EXPECT_EQ(clean_text("x\xc2\x9b"
                       "2J"),
            "x\\x9b2J");
}

TEST(CleanText, ReplacesInvalidUtf8) {
  std::string out = clean_text(
      "a\xff"
      "b\xc3\x28");
  EXPECT_EQ(out,
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD(");
  EXPECT_EQ(make_valid_utf8(out), 0u);
}

TEST(CleanText, ShowsBidiOverridesAndXmlNoncharacters) {
  EXPECT_EQ(clean_text("a\xe2\x80\xae"
                       "b"),
            "a\\u{202E}b");
  EXPECT_EQ(clean_text("\xef\xbf\xbe"), "\\u{FFFE}");
}

TEST(CleanText, NewlinesKeptOnlyWhenAsked) {
  EXPECT_EQ(clean_text("a\nb\tc"), "a\\nb c");
  CleanOptions o;
  o.keep_newlines = true;
  EXPECT_EQ(clean_text("a\nb\r\n", o), "a\nb\\x0d\n");
}

TEST(CleanText, CutsLongTextAtACharacterWithANote) {
  CleanOptions o;
  o.max_bytes = 5;
  // "é" is two bytes: a cut at 5 would split the third one.
  EXPECT_EQ(clean_text("ééé"
                       "xyz",
                       o),
            "éé … [cut: 5 more bytes]");
  o.max_bytes = 0;
  EXPECT_EQ(clean_text(std::string(10000, 'a'), o).size(), 10000u);
}

TEST(EscapeMarkup, EscapesEveryMetacharacter) {
  EXPECT_EQ(escape_markup("<a href='x'>&\"</a>]]>-->"),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;]]&gt;--&gt;");
}

TEST(EscapeMarkdown, NeutralisesLinksCellsAndHtml) {
  EXPECT_EQ(escape_markdown("[x](http://e) | <b> `c` ![i](j)"),
            "\\[x\\](http://e) \\| &lt;b&gt; \\`c\\` !\\[i\\](j)");
  EXPECT_EQ(escape_markdown("a\nb"), "a\\\\nb");
}

}  // namespace
}  // namespace sandgate::reports
