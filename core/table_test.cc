#include "core/table.h"

#include <gtest/gtest.h>

namespace sandgate {
namespace {

using Align = TextTable::Align;

TEST(TextTable, WidthsComeFromTheContentAndNumbersAlignRight) {
  TextTable t({{"intent"}, {"calls", Align::kRight}, {"seconds", Align::kRight}});
  t.row({"compile", "3", "120.5"}).row({"edit", "12", "4.0"});
  EXPECT_EQ(t.render(),
            "intent   calls  seconds\n"
            "compile      3    120.5\n"
            "edit        12      4.0\n");
}

TEST(TextTable, NoLineEndsInSpacesAndMissingCellsAreEmpty) {
  TextTable t({{"a"}, {"b"}, {"c"}});
  t.row({"long value", "x"}).row({"y"});
  EXPECT_EQ(t.render(),
            "a           b  c\n"
            "long value  x\n"
            "y\n");
}

TEST(TextTable, CharactersNotBytesDecideTheWidth) {
  // "✓" is 3 bytes, "×" 2, "—" 3: each is one column.
  TextTable t({{""}, {"provider"}, {"ratio", Align::kRight}}, {.indent = "", .gap = 1});
  t.row({"✓", "namespaces", "1.37×"}).row({"✗", "x", "12.00×"});
  EXPECT_EQ(t.render(),
            "  provider    ratio\n"
            "✓ namespaces  1.37×\n"
            "✗ x          12.00×\n");
  EXPECT_EQ(display_width("✓ a — b×"), 8u);
  EXPECT_EQ(display_width("\xff\xfe"), 2u);  // invalid bytes: one each
}

TEST(TextTable, ALongCellIsCutAtACharacterBoundary) {
  EXPECT_EQ(cut_to_width("abcdefghij", 10), "abcdefghij");
  EXPECT_EQ(cut_to_width("abcdefghijk", 10), "abcdefg...");
  // Cut in bytes, the 7th character ("—", bytes 7-9) would be split.
  EXPECT_EQ(cut_to_width("EPERM —— from the filter", 10), "EPERM —...");
  TextTable t({{"id"}, {"why", Align::kLeft, 8}}, {.header = false});
  t.row({"p1", "short"}).row({"p2", "much longer than that"});
  EXPECT_EQ(t.render(),
            "p1  short\n"
            "p2  much ...\n");
}

TEST(TextTable, ControlCharactersCannotBreakTheLayout) {
  TextTable t({{"id"}, {"why"}}, {.header = false});
  // A newline, an escape sequence, a C1 control (U+009B, CSI) and a byte that is not UTF-8.
  std::string hostile = "a\x1b[2Jb\xc2\x9b";
  hostile += "c\xff";
  t.row({"p\n1", hostile});
  EXPECT_EQ(t.render(), "p?1  a?[2Jb?c?\n");
}

TEST(TextTable, SectionsAndSeparatorsSitOutsideTheColumns) {
  TextTable t({{"probe"}, {"verdict"}}, {.indent = "    ", .header = true});
  t.separator().section("").section("  net").row({"net.metadata_v4_get", "blocked"});
  t.section("  fs").row({"fs.host_file", "exposed"});
  EXPECT_EQ(t.render(),
            "    probe                verdict\n"
            "    ----------------------------\n"
            "\n"
            "  net\n"
            "    net.metadata_v4_get  blocked\n"
            "  fs\n"
            "    fs.host_file         exposed\n");
}

}  // namespace
}  // namespace sandgate
