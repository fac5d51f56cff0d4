#include "core/stats.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace sandgate::stats {

template <class T>
Distribution<T>::Distribution(std::vector<T> values) : sorted_(std::move(values)) {
  std::sort(sorted_.begin(), sorted_.end());
}

template <class T>
T Distribution<T>::percentile(double p) const {
  if (sorted_.empty()) return T{};
  const size_t n = sorted_.size();
  // p * n / 100 rather than p / 100 * n: for a whole p the product is exact, so a rank that is
  // a whole number (p99 of 100 values: 99) is never pushed to the next one by rounding.
  double rank = std::ceil(p * static_cast<double>(n) / 100.0);
  size_t index = rank <= 1 ? 0 : static_cast<size_t>(rank) - 1;
  return sorted_[std::min(index, n - 1)];
}

template <class T>
double Distribution<T>::median() const {
  const size_t n = sorted_.size();
  if (n == 0) return 0;
  if (n % 2) return static_cast<double>(sorted_[n / 2]);
  return (static_cast<double>(sorted_[n / 2 - 1]) + static_cast<double>(sorted_[n / 2])) / 2;
}

template <class T>
double Distribution<T>::mean() const {
  if (sorted_.empty()) return 0;
  // Whole numbers are summed exactly (no overflow for any count of int64 values that fits in
  // memory), then divided once.
  using Sum = std::conditional_t<std::is_integral_v<T>, __int128, double>;
  Sum sum = 0;
  for (T v : sorted_) sum += v;
  return static_cast<double>(sum) / static_cast<double>(sorted_.size());
}

template <class T>
size_t Distribution<T>::count_above(T x) const {
  return static_cast<size_t>(sorted_.end() - std::upper_bound(sorted_.begin(), sorted_.end(), x));
}

template class Distribution<int64_t>;
template class Distribution<double>;

MedianInterval median_interval(std::vector<double> values, double confidence) {
  MedianInterval out;
  out.n = values.size();
  if (values.empty()) return out;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  // below[k] = P(Binomial(n, 1/2) < k), summed from the probabilities of 0..k-1 successes.
  // Coverage of [x_(k), x_(n+1-k)] is 1 - 2 * below[k]; k = 1 (min, max) covers 1 - 2^(1-n).
  auto coverage_of = [n](size_t k) {
    double below = 0, term = std::ldexp(1.0, -static_cast<int>(n));  // C(n,0) / 2^n
    for (size_t i = 0; i < k; ++i) {
      below += term;
      term = term * static_cast<double>(n - i) / static_cast<double>(i + 1);
    }
    return 1 - 2 * below;
  };
  size_t k = 1;
  while (k + 1 <= (n + 1) / 2 && coverage_of(k + 1) >= confidence) ++k;
  out.low = values[k - 1];
  out.high = values[n - k];
  out.coverage = coverage_of(k);
  return out;
}

namespace {

// splitmix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number generators", 2014):
// fixed arithmetic, so a seed gives the same stream everywhere (std::uniform_int_distribution's
// algorithm is the library's choice).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n > 0: draws above the largest multiple of n are rejected (no modulo bias).
  uint64_t below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
      uint64_t x = next();
      if (x < limit) return x % n;
    }
  }

 private:
  uint64_t state_;
};

}  // namespace

BootstrapInterval bootstrap_median(std::vector<double> values, double confidence, size_t resamples,
                                   uint64_t seed) {
  BootstrapInterval out;
  out.confidence = confidence;
  out.n = values.size();
  if (values.empty()) return out;
  Distribution<double> d(std::move(values));
  out.estimate = d.median();
  resamples = std::max<size_t>(resamples, 1);
  out.resamples = resamples;
  const auto& v = d.sorted();
  const size_t n = v.size();
  SplitMix64 rng(seed);
  std::vector<double> medians;
  medians.reserve(resamples);
  std::vector<double> sample(n);
  for (size_t r = 0; r < resamples; ++r) {
    for (size_t i = 0; i < n; ++i) sample[i] = v[rng.below(n)];
    medians.push_back(Distribution<double>(sample).median());
  }
  Distribution<double> m(std::move(medians));
  const double tail = (1 - confidence) / 2 * 100;
  out.low = m.percentile(tail);
  out.high = m.percentile(100 - tail);
  return out;
}

IntervalOrder compare_intervals(const BootstrapInterval& a, const BootstrapInterval& b) {
  if (a.n == 0 || b.n == 0) return IntervalOrder::kNoDifference;
  if (a.high < b.low) return IntervalOrder::kLower;
  if (b.high < a.low) return IntervalOrder::kHigher;
  return IntervalOrder::kNoDifference;
}

}  // namespace sandgate::stats
