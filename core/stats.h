// The one definition of each summary statistic sandgate reports (docs/STYLE.md, "Knowledge in one
// place"): the victim's latency percentiles, the replay's error summaries and burst-to-action
// times, the planner's baselines and per-intent use, the median peak-to-average of `trace
// stats`, qualify's cycle time, the importer's nominal sample interval, the benchmarks' figures.
// README.md, "Percentiles and medians", says the same for users.
//
// - percentile p (0..100), nearest rank: the smallest value with at least p% of the values at
//   or below it, i.e. the value of rank ceil(p/100 * n) in ascending order (ranks from 1; p = 0
//   is the minimum, p = 100 the maximum). Always one of the values, never interpolated: a p99
//   latency is one that a unit really had.
// - median: the middle value of an odd count; the mean of the two middle values of an even
//   count. So for an even count the median can lie above p50, which is the lower of the two.
// - mean: the arithmetic mean.
// Every figure of an empty set is 0: callers that must tell "none" from 0 check empty() first.
//
// Free of logging and of everything but libstdc++, so the static binaries (sandgate-load)
// compile it themselves (workloads/CMakeLists.txt).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sandgate::stats {

// A set of values, sorted once, asked for as many figures as needed. T is int64_t or double
// (the instantiations in stats.cc).
template <class T>
class Distribution {
 public:
  Distribution() = default;
  explicit Distribution(std::vector<T> values);  // any order

  size_t size() const { return sorted_.size(); }
  bool empty() const { return sorted_.empty(); }
  // Nearest rank (above). Precondition: 0 <= p <= 100.
  T percentile(double p) const;
  double median() const;
  double mean() const;
  T min() const { return sorted_.empty() ? T{} : sorted_.front(); }
  T max() const { return sorted_.empty() ? T{} : sorted_.back(); }
  // How many values are strictly above `x`, and how many are at or below it.
  size_t count_above(T x) const;
  size_t count_at_most(T x) const { return size() - count_above(x); }
  const std::vector<T>& sorted() const { return sorted_; }

 private:
  std::vector<T> sorted_;
};

extern template class Distribution<int64_t>;
extern template class Distribution<double>;

// One figure of a set in any order (each sorts a copy; for several, build a Distribution).
template <class T>
T percentile(std::vector<T> values, double p) {
  return Distribution<T>(std::move(values)).percentile(p);
}
template <class T>
double median(std::vector<T> values) {
  return Distribution<T>(std::move(values)).median();
}

// A distribution-free confidence interval for the median of the population a sample came from:
// [x_(k), x_(n+1-k)] of the sorted values, with k the largest rank whose interval still covers
// the median with at least the asked confidence (each value lies below the median with
// probability 1/2, so the coverage is 1 - 2 * P(Binomial(n, 1/2) < k)). Exact for any
// continuous distribution, no resampling and no seed: the same values give the same interval.
// With too few values for the asked confidence (fewer than 6 for 95%) the widest interval,
// [min, max], is returned with the coverage it really has, which the caller must look at.
struct MedianInterval {
  double low = 0, high = 0;
  double coverage = 0;  // the interval's real confidence, >= the asked one when n allows it
  size_t n = 0;
};
MedianInterval median_interval(std::vector<double> values, double confidence = 0.95);

// A percentile-bootstrap confidence interval for the median (Efron & Tibshirani, "An
// Introduction to the Bootstrap", ch. 13): `resamples` samples of n values drawn with
// replacement from the n values, the median (above) of each, and the interval from the
// percentiles (nearest rank, above) (1 - confidence)/2 and (1 + confidence)/2 of those medians.
// The draws come from a generator seeded with `seed` (splitmix64, with a bias-free draw of an
// index), so the same values, confidence, resamples and seed always give the same interval, on
// any platform. The estimate is the median of the values themselves. Empty values give n = 0
// and zeros; one value gives [v, v]. Used where trials are few and their figures are not
// continuous enough for median_interval's ranks (the neighbour score's medians over trials).
struct BootstrapInterval {
  double estimate = 0;  // the median of the values
  double low = 0, high = 0;
  double confidence = 0;
  size_t n = 0;
  size_t resamples = 0;
};
inline constexpr uint64_t kBootstrapSeed = 0x5a6d'6761'7465'0001ull;
BootstrapInterval bootstrap_median(std::vector<double> values, double confidence = 0.95,
                                   size_t resamples = 2000, uint64_t seed = kBootstrapSeed);

// Which of two figures' intervals lies lower: an order is claimed only when the intervals do
// not overlap (one's high below the other's low); intervals that touch or overlap, or an
// empty one (n = 0), are kNoDifference ("no significant difference").
enum class IntervalOrder { kLower, kHigher, kNoDifference };
IntervalOrder compare_intervals(const BootstrapInterval& a, const BootstrapInterval& b);

}  // namespace sandgate::stats
