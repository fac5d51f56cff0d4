#include "core/stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace sandgate::stats {
namespace {

std::vector<int64_t> one_to(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{1});
  return v;
}

TEST(Percentile, NearestRankOfKnownSeries) {
  Distribution<int64_t> d(one_to(100));
  EXPECT_EQ(d.percentile(50), 50);
  EXPECT_EQ(d.percentile(90), 90);
  EXPECT_EQ(d.percentile(99), 99);
  EXPECT_EQ(d.percentile(100), 100);
  EXPECT_EQ(d.percentile(0), 1);  // the minimum
  // Ten values: p50 is the 5th, p90 the 9th, p95 and p99 the 10th (ceil(9.5), ceil(9.9)).
  Distribution<int64_t> ten({10, 20, 30, 40, 50, 60, 70, 80, 90, 1000});
  EXPECT_EQ(ten.percentile(50), 50);
  EXPECT_EQ(ten.percentile(90), 90);
  EXPECT_EQ(ten.percentile(95), 1000);
  EXPECT_EQ(ten.percentile(99), 1000);
  EXPECT_EQ(Distribution<int64_t>({7}).percentile(50), 7);
}

TEST(Percentile, IsAlwaysOneOfTheValuesNeverInterpolated) {
  Distribution<double> d({1.0, 2.0, 4.0, 8.0});
  EXPECT_DOUBLE_EQ(d.percentile(50), 2.0);  // rank 2; interpolated it would be 3.0
  EXPECT_DOUBLE_EQ(d.percentile(51), 4.0);  // rank ceil(2.04) = 3
  EXPECT_DOUBLE_EQ(d.percentile(75), 4.0);  // rank 3
  EXPECT_DOUBLE_EQ(d.percentile(76), 8.0);
}

TEST(Percentile, AWholeRankIsNotPushedUpByRounding) {
  // 0.07 * 100 is 7.000000000000001 in doubles: computed that way the rank would be 8.
  EXPECT_EQ(Distribution<int64_t>(one_to(100)).percentile(7), 7);
  // 1..n: the value of rank r is r, so pN must be ceil(N * n / 100), computed here in integers.
  for (int64_t n : {20, 100, 200, 1000, 4000, 4999})
    for (int64_t p : {7, 50, 90, 95, 99})
      EXPECT_EQ(Distribution<int64_t>(one_to(n)).percentile(static_cast<double>(p)),
                (p * n + 99) / 100)
          << "p" << p << " of " << n;
}

TEST(Percentile, OrderOfTheInputDoesNotMatter) {
  EXPECT_EQ(percentile(std::vector<int64_t>{5, 1, 4, 2, 3}, 60), 3);
  EXPECT_DOUBLE_EQ(percentile(std::vector<double>{0.5, -1.0, 0.25}, 100), 0.5);
}

TEST(Median, MiddleValueOrMeanOfTheTwoMiddleValues) {
  EXPECT_DOUBLE_EQ(median(std::vector<double>{3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median(std::vector<double>{40, 100}), 70);
  EXPECT_DOUBLE_EQ(median(std::vector<int64_t>{1033, 1036, 1035, 1040}), 1035.5);
  EXPECT_DOUBLE_EQ(median(std::vector<double>{5}), 5);
}

TEST(Median, OfAnEvenCountLiesAboveP50) {
  // p50 (nearest rank) is the lower middle value; the median is between the two.
  Distribution<double> d({1, 2, 3, 10});
  EXPECT_DOUBLE_EQ(d.percentile(50), 2);
  EXPECT_DOUBLE_EQ(d.median(), 2.5);
  // For an odd count they are the same value.
  Distribution<double> odd({1, 2, 3, 10, 11});
  EXPECT_DOUBLE_EQ(odd.percentile(50), odd.median());
}

TEST(Mean, WholeNumbersAreSummedExactly) {
  EXPECT_DOUBLE_EQ(Distribution<int64_t>({1, 2, 3, 4}).mean(), 2.5);
  // Two values whose sum overflows int64.
  constexpr int64_t big = std::numeric_limits<int64_t>::max() - 1;
  EXPECT_DOUBLE_EQ(Distribution<int64_t>({big, big}).mean(), static_cast<double>(big));
  EXPECT_DOUBLE_EQ(Distribution<double>({0.5, 1.5}).mean(), 1.0);
}

TEST(Distribution, MinMaxAndCounts) {
  Distribution<int64_t> d({30, 10, 20, 20, 40});
  EXPECT_EQ(d.size(), 5u);
  EXPECT_EQ(d.min(), 10);
  EXPECT_EQ(d.max(), 40);
  EXPECT_EQ(d.count_above(20), 2u);  // strictly above
  EXPECT_EQ(d.count_at_most(20), 3u);
  EXPECT_EQ(d.count_above(40), 0u);
  EXPECT_EQ(d.count_at_most(9), 0u);
  EXPECT_EQ(d.sorted(), (std::vector<int64_t>{10, 20, 20, 30, 40}));
}

TEST(Distribution, EveryFigureOfAnEmptySetIsZero) {
  Distribution<double> d;
  EXPECT_TRUE(d.empty());
  EXPECT_EQ(d.percentile(50), 0);
  EXPECT_EQ(d.median(), 0);
  EXPECT_EQ(d.mean(), 0);
  EXPECT_EQ(d.min(), 0);
  EXPECT_EQ(d.max(), 0);
  EXPECT_EQ(d.count_above(0), 0u);
  EXPECT_EQ(percentile(std::vector<int64_t>{}, 99), 0);
}

// The interval's ranks and coverage against the binomial table: n = 5 reaches only 93.75%
// (min, max); n = 6 covers 96.9% with (min, max); n = 9 covers 96.1% with the 2nd and 8th
// values; n = 20 covers 95.9% with the 6th and 15th.
TEST(MedianInterval, RanksAndCoverageMatchTheBinomialTable) {
  auto ramp = [](size_t n) {
    std::vector<double> v;
    for (size_t i = 1; i <= n; ++i) v.push_back(static_cast<double>(i));
    return v;
  };
  auto five = stats::median_interval(ramp(5));
  EXPECT_EQ(five.low, 1);
  EXPECT_EQ(five.high, 5);
  EXPECT_NEAR(five.coverage, 1 - 2.0 / 32, 1e-12);
  auto six = stats::median_interval(ramp(6));
  EXPECT_EQ(six.low, 1);
  EXPECT_EQ(six.high, 6);
  EXPECT_NEAR(six.coverage, 1 - 2.0 / 64, 1e-12);
  auto nine = stats::median_interval(ramp(9));
  EXPECT_EQ(nine.low, 2);
  EXPECT_EQ(nine.high, 8);
  EXPECT_NEAR(nine.coverage, 1 - 2.0 * 10 / 512, 1e-12);
  auto twenty = stats::median_interval(ramp(20));
  EXPECT_EQ(twenty.low, 6);
  EXPECT_EQ(twenty.high, 15);
  EXPECT_GE(twenty.coverage, 0.95);
  EXPECT_EQ(twenty.n, 20u);
}

TEST(MedianInterval, IgnoresOrderAndNarrowsWithLowerConfidence) {
  auto wide = stats::median_interval({9, 1, 5, 3, 7, 2, 8, 4, 6}, 0.95);
  EXPECT_EQ(wide.low, 2);
  EXPECT_EQ(wide.high, 8);
  auto narrow = stats::median_interval({9, 1, 5, 3, 7, 2, 8, 4, 6}, 0.5);
  EXPECT_GT(narrow.low, wide.low);
  EXPECT_LT(narrow.high, wide.high);
  EXPECT_GE(narrow.coverage, 0.5);
  EXPECT_LE(narrow.low, 5);
  EXPECT_GE(narrow.high, 5);
}

TEST(MedianInterval, EmptyAndSingleValue) {
  EXPECT_EQ(stats::median_interval({}).n, 0u);
  auto one = stats::median_interval({4.5});
  EXPECT_EQ(one.low, 4.5);
  EXPECT_EQ(one.high, 4.5);
  EXPECT_EQ(one.coverage, 0);
}
// Known distributions, drawn from a fixed seed so the test sees the same values every time.
std::vector<double> uniform01(std::mt19937_64& rng, size_t n) {
  std::vector<double> v;
  for (size_t i = 0; i < n; ++i) v.push_back(static_cast<double>(rng() >> 11) * 0x1.0p-53);
  return v;
}
std::vector<double> standard_normal(std::mt19937_64& rng, size_t n) {
  std::vector<double> v;
  while (v.size() < n) {  // Box-Muller
    auto u = uniform01(rng, 2);
    double r = std::sqrt(-2 * std::log(1 - u[0])), a = 2 * M_PI * u[1];
    v.push_back(r * std::cos(a));
    v.push_back(r * std::sin(a));
  }
  v.resize(n);
  return v;
}

TEST(BootstrapMedian, SameValuesAndSeedGiveTheSameInterval) {
  std::mt19937_64 rng(1);
  auto v = standard_normal(rng, 31);
  auto a = stats::bootstrap_median(v);
  auto b = stats::bootstrap_median(v);
  EXPECT_EQ(a.low, b.low);
  EXPECT_EQ(a.high, b.high);
  EXPECT_EQ(a.estimate, stats::median(v));
  EXPECT_EQ(a.n, 31u);
  EXPECT_EQ(a.resamples, 2000u);
  EXPECT_LE(a.low, a.estimate);
  EXPECT_GE(a.high, a.estimate);
  // The order of the values does not matter (they are sorted before any draw).
  std::reverse(v.begin(), v.end());
  auto c = stats::bootstrap_median(v);
  EXPECT_EQ(a.low, c.low);
  EXPECT_EQ(a.high, c.high);
}

// N(0, 1), n = 400: the median's standard error is sqrt(pi / 2) / sqrt(n) = 0.0627, so a 95%
// interval is about 2 * 1.96 * 0.0627 = 0.25 wide around a median near 0.
TEST(BootstrapMedian, WidthMatchesTheMediansStandardErrorOnANormal) {
  std::mt19937_64 rng(7);
  auto ci = stats::bootstrap_median(standard_normal(rng, 400));
  EXPECT_NEAR(ci.estimate, 0, 0.2);
  EXPECT_GT(ci.high - ci.low, 0.25 / 2);
  EXPECT_LT(ci.high - ci.low, 0.25 * 2);
  // A lower confidence gives a narrower interval inside the wider one.
  auto narrow = stats::bootstrap_median(standard_normal(rng, 400), 0.5);
  EXPECT_LT(narrow.high - narrow.low, ci.high - ci.low);
}

// Coverage on Uniform(0, 1), whose median is 0.5: over 300 samples of 25 values, the 95%
// interval holds 0.5 in about 95% of them (the percentile bootstrap of a median is slightly
// conservative or liberal by a few points at this n; 88%..99% keeps a wide margin).
TEST(BootstrapMedian, CoversTheTrueMedianAboutAsOftenAsItSays) {
  std::mt19937_64 rng(42);
  int covered = 0;
  const int samples = 300;
  for (int i = 0; i < samples; ++i) {
    auto ci = stats::bootstrap_median(uniform01(rng, 25), 0.95, 500, static_cast<uint64_t>(i) + 1);
    if (ci.low <= 0.5 && 0.5 <= ci.high) ++covered;
  }
  double coverage = static_cast<double>(covered) / samples;
  EXPECT_GT(coverage, 0.88) << coverage;
  EXPECT_LT(coverage, 0.995) << coverage;
}

TEST(BootstrapMedian, ConstantEmptyAndSingleValue) {
  auto constant = stats::bootstrap_median({3, 3, 3, 3, 3});
  EXPECT_EQ(constant.low, 3);
  EXPECT_EQ(constant.high, 3);
  auto empty = stats::bootstrap_median({});
  EXPECT_EQ(empty.n, 0u);
  EXPECT_EQ(empty.low, 0);
  EXPECT_EQ(empty.high, 0);
  auto one = stats::bootstrap_median({4.5});
  EXPECT_EQ(one.low, 4.5);
  EXPECT_EQ(one.high, 4.5);
}

TEST(CompareIntervals, OrderOnlyWhereIntervalsDoNotOverlap) {
  auto ci = [](double low, double high) {
    stats::BootstrapInterval b;
    b.low = low;
    b.high = high;
    b.estimate = (low + high) / 2;
    b.n = 5;
    return b;
  };
  EXPECT_EQ(stats::compare_intervals(ci(1, 2), ci(3, 4)), stats::IntervalOrder::kLower);
  EXPECT_EQ(stats::compare_intervals(ci(3, 4), ci(1, 2)), stats::IntervalOrder::kHigher);
  EXPECT_EQ(stats::compare_intervals(ci(1, 3), ci(2, 4)), stats::IntervalOrder::kNoDifference);
  // Touching intervals overlap in one point: no claim.
  EXPECT_EQ(stats::compare_intervals(ci(1, 2), ci(2, 4)), stats::IntervalOrder::kNoDifference);
  // One inside the other, though the estimates differ.
  EXPECT_EQ(stats::compare_intervals(ci(1, 10), ci(4, 5)), stats::IntervalOrder::kNoDifference);
  stats::BootstrapInterval none;
  EXPECT_EQ(stats::compare_intervals(none, ci(3, 4)), stats::IntervalOrder::kNoDifference);
}

// From values: two well-separated samples are ordered; the same sample shifted by much less
// than its spread is not.
TEST(CompareIntervals, FromBootstrapIntervalsOfSamples) {
  std::mt19937_64 rng(3);
  auto a = standard_normal(rng, 9), b = a, c = a;
  for (auto& x : b) x += 10;
  for (auto& x : c) x += 0.05;
  auto ia = stats::bootstrap_median(a), ib = stats::bootstrap_median(b),
       ic = stats::bootstrap_median(c);
  EXPECT_EQ(stats::compare_intervals(ia, ib), stats::IntervalOrder::kLower);
  EXPECT_EQ(stats::compare_intervals(ib, ia), stats::IntervalOrder::kHigher);
  EXPECT_EQ(stats::compare_intervals(ia, ic), stats::IntervalOrder::kNoDifference);
}
}  // namespace
}  // namespace sandgate::stats
