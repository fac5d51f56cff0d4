#include "core/units.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace sandgate {
namespace {

using std::chrono::hours;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::nanoseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

uint64_t bytes_of(std::string_view text) {
  auto r = parse_bytes(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.error().message();
  return r.ok() ? r->value : ~0ULL;
}

Duration duration_of(std::string_view text) {
  auto r = parse_duration(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.error().message();
  return r.ok() ? *r : Duration(-1);
}

// The error for `text`, which must be one; its message must quote the text.
std::string bytes_error(std::string_view text) {
  auto r = parse_bytes(text);
  EXPECT_FALSE(r.ok()) << "'" << text << "' parsed as " << (r.ok() ? r->value : 0);
  if (r.ok()) return "";
  EXPECT_EQ(r.error().err, 0);
  EXPECT_THAT(r.error().message(), HasSubstr("'" + std::string(text) + "'"));
  return r.error().message();
}

std::string duration_error(std::string_view text) {
  auto r = parse_duration(text);
  EXPECT_FALSE(r.ok()) << "'" << text << "' parsed as " << (r.ok() ? r->count() : 0) << "ns";
  if (r.ok()) return "";
  EXPECT_THAT(r.error().message(), HasSubstr("'" + std::string(text) + "'"));
  return r.error().message();
}

TEST(ParseBytes, PlainNumberIsBytes) {
  EXPECT_EQ(bytes_of("4096"), 4096u);
  EXPECT_EQ(bytes_of("0"), 0u);
  EXPECT_EQ(bytes_of("17B"), 17u);
}

TEST(ParseBytes, BinarySuffixes) {
  EXPECT_EQ(bytes_of("512KiB"), 512u << 10);
  EXPECT_EQ(bytes_of("512MiB"), 512ull << 20);
  EXPECT_EQ(bytes_of("1.5GiB"), 3ull << 29);
  EXPECT_EQ(bytes_of("2TiB"), 2ull << 40);
  EXPECT_EQ(bytes_of("1K"), 1024u);
  EXPECT_EQ(bytes_of("3M"), 3ull << 20);
  EXPECT_EQ(bytes_of("2G"), 2ull << 30);
  EXPECT_EQ(bytes_of("1T"), 1ull << 40);
}

TEST(ParseBytes, DecimalSuffixes) {
  EXPECT_EQ(bytes_of("100KB"), 100'000u);
  EXPECT_EQ(bytes_of("3MB"), 3'000'000u);
  EXPECT_EQ(bytes_of("2GB"), 2'000'000'000u);
  EXPECT_EQ(bytes_of("1TB"), 1'000'000'000'000u);
}

TEST(ParseBytes, SuffixIsCaseInsensitive) {
  EXPECT_EQ(bytes_of("512mib"), 512ull << 20);
  EXPECT_EQ(bytes_of("512MIB"), 512ull << 20);
  EXPECT_EQ(bytes_of("1k"), 1024u);
  EXPECT_EQ(bytes_of("100kb"), 100'000u);
  EXPECT_EQ(bytes_of("7b"), 7u);
}

TEST(ParseBytes, SurroundingAndInnerWhitespaceIsIgnored) {
  EXPECT_EQ(bytes_of("  4096  "), 4096u);
  EXPECT_EQ(bytes_of("512 MiB"), 512ull << 20);
  EXPECT_EQ(bytes_of("\t1.5GiB\n"), 3ull << 29);
}

TEST(ParseBytes, RejectsEmpty) {
  bytes_error("");
  bytes_error("   ");
}

TEST(ParseBytes, RejectsNonNumbers) {
  EXPECT_THAT(bytes_error("abc"), HasSubstr("number"));
  bytes_error("MiB");
  bytes_error(".");
}

TEST(ParseBytes, RejectsUnknownUnitAndNamesIt) {
  EXPECT_THAT(bytes_error("12XB"), HasSubstr("'xb'"));
  bytes_error("1.2.3");
  bytes_error("5 bytes");
}

TEST(ParseBytes, RejectsNegative) {
  bytes_error("-1");
  bytes_error("-1MiB");
}

TEST(ParseBytes, RejectsFractionOfAByte) {
  EXPECT_THAT(bytes_error("0.5B"), HasSubstr("fraction"));
  EXPECT_THAT(bytes_error("1.5"), HasSubstr("fraction"));
}

TEST(ParseBytes, RejectsOverflow) {
  EXPECT_THAT(bytes_error("99999999999TiB"), HasSubstr("too large"));
  // 2^64 bytes exactly: one past the largest value a Bytes holds.
  EXPECT_THAT(bytes_error("16777216TiB"), HasSubstr("too large"));
  EXPECT_THAT(bytes_error("18446744073709551616"), HasSubstr("too large"));
}

TEST(ParseBytes, LargeValuesBelowTwoToTheSixtyFourAreExactWhereDoublesAre) {
  // Above 2^63 a signed intermediate would wrap; these must come back as written.
  EXPECT_EQ(bytes_of("8388608TiB"), 1ull << 63);
  EXPECT_EQ(bytes_of("12582912TiB"), 3ull << 62);
}

TEST(ParseDuration, Units) {
  EXPECT_EQ(duration_of("250ms"), milliseconds(250));
  EXPECT_EQ(duration_of("2s"), seconds(2));
  EXPECT_EQ(duration_of("1.5s"), milliseconds(1500));
  EXPECT_EQ(duration_of("100us"), microseconds(100));
  EXPECT_EQ(duration_of("500ns"), nanoseconds(500));
  EXPECT_EQ(duration_of("5m"), minutes(5));
  EXPECT_EQ(duration_of("5min"), minutes(5));
  EXPECT_EQ(duration_of("1h"), hours(1));
  EXPECT_EQ(duration_of("0s"), Duration(0));
}

TEST(ParseDuration, CaseAndWhitespace) {
  EXPECT_EQ(duration_of("250MS"), milliseconds(250));
  EXPECT_EQ(duration_of(" 2 s "), seconds(2));
}

TEST(ParseDuration, BareNumberNeedsAUnit) {
  std::string m = duration_error("30");
  EXPECT_THAT(m, HasSubstr("no unit"));
  duration_error("1.5");
}

TEST(ParseDuration, RejectsUnknownUnit) {
  EXPECT_THAT(duration_error("3 fortnights"), HasSubstr("unknown unit 'fortnights'"));
  duration_error("10sec");
  duration_error("2d");
}

TEST(ParseDuration, RejectsNonNumbersNegativeAndHuge) {
  duration_error("");
  duration_error("ms");
  duration_error("-1s");
  EXPECT_THAT(duration_error("1000000000h"), HasSubstr("too long"));
}

TEST(FormatBytes, PicksTheLargestExactUnit) {
  EXPECT_EQ(format_bytes(Bytes{0}), "0B");
  EXPECT_EQ(format_bytes(Bytes{1000}), "1000B");
  EXPECT_EQ(format_bytes(KiB(4)), "4KiB");
  EXPECT_EQ(format_bytes(MiB(512)), "512MiB");
  EXPECT_EQ(format_bytes(Bytes{3ull << 29}), "1.50GiB");
  EXPECT_EQ(format_bytes(Bytes{2ull << 40}), "2TiB");
}

TEST(FormatBytes, RoundTripsThroughParse) {
  for (uint64_t v :
       {0ull, 1ull, 1000ull, 1023ull, 1024ull, 1025ull, 1536ull, 4096ull, (1ull << 20) - 1,
        512ull << 20, 3ull << 29, (1ull << 30) + 1, 5ull << 40, 1000ull << 40, 123456789ull}) {
    std::string text = format_bytes(Bytes{v});
    EXPECT_EQ(bytes_of(text), v) << "format_bytes(" << v << ") = " << text;
  }
}

TEST(FormatDuration, Examples) {
  EXPECT_EQ(format_duration(milliseconds(250)), "250ms");
  EXPECT_EQ(format_duration(seconds(2)), "2s");
  EXPECT_EQ(format_duration(milliseconds(1500)), "1.500s");
  EXPECT_EQ(format_duration(microseconds(15)), "15us");
  EXPECT_EQ(format_duration(nanoseconds(500)), "500ns");
  EXPECT_EQ(format_duration(Duration(0)), "0ns");
}

TEST(FormatDuration, RoundTripsThroughParse) {
  for (Duration d :
       {Duration(0), Duration(nanoseconds(1)), Duration(nanoseconds(999)),
        Duration(microseconds(1)), Duration(microseconds(100)), Duration(microseconds(999)),
        Duration(milliseconds(1)), Duration(milliseconds(250)), Duration(milliseconds(999)),
        Duration(milliseconds(1500)), Duration(seconds(2)), Duration(minutes(5)),
        Duration(hours(1))}) {
    std::string text = format_duration(d);
    EXPECT_EQ(duration_of(text), d) << "format_duration(" << d.count() << "ns) = " << text;
  }
}

TEST(FormatDuration, NeverUsesExponentNotation) {
  // Just below a unit boundary, "%g" would print "1e+03ms", which parse_duration rejects.
  for (Duration d : {Duration(nanoseconds(999'999)), Duration(nanoseconds(999'999'999)),
                     Duration(nanoseconds(999'500)), Duration(nanoseconds(123'456'789))}) {
    std::string text = format_duration(d);
    EXPECT_EQ(text.find('e'), std::string::npos) << d.count() << "ns -> " << text;
    EXPECT_TRUE(parse_duration(text).ok()) << d.count() << "ns -> " << text;
  }
}

TEST(Conversions, SecondsAndMillis) {
  EXPECT_DOUBLE_EQ(to_seconds(milliseconds(1500)), 1.5);
  EXPECT_DOUBLE_EQ(to_millis(microseconds(2500)), 2.5);
}

TEST(HumanBytesTest, ThreeSignificantDigits) {
  EXPECT_EQ(human_bytes({512}), "512B");
  EXPECT_EQ(human_bytes({59324 * 1024ULL}), "57.9MiB");
  EXPECT_EQ(human_bytes({GiB(1).value + MiB(512).value}), "1.50GiB");
  EXPECT_EQ(human_bytes(MiB(64)), "64.0MiB");
  EXPECT_EQ(human_bytes(MiB(640)), "640MiB");
}

}  // namespace
}  // namespace sandgate
