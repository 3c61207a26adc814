// Test helper: the chi-square goodness-of-fit p-value, for the statistical tests of sampled
// speculative decoding.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace mls::testing {

// Q(a, x), the regularised upper incomplete gamma function (series below a + 1, continued
// fraction above), for the chi-square survival function Q(df / 2, chi2 / 2).
inline double upper_gamma_q(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_front = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 1000 && std::abs(term) > std::abs(sum) * 1e-15; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return 1.0 - sum * std::exp(log_front);
  }
  double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    c = b + an / c;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1) < 1e-15) break;
  }
  return std::exp(log_front) * h;
}

// The p-value of `counts` against `expected` probabilities; a count where the probability is
// 0 is a failure outright (p-value 0).
inline double chi_square_p_value(const std::vector<int64_t>& counts,
                                 const std::vector<double>& expected) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  double chi2 = 0;
  int bins = 0;
  for (size_t t = 0; t < counts.size(); ++t) {
    if (expected[t] == 0) {
      if (counts[t] > 0) return 0.0;
      continue;
    }
    const double e = expected[t] * static_cast<double>(n);
    chi2 += (static_cast<double>(counts[t]) - e) * (static_cast<double>(counts[t]) - e) / e;
    ++bins;
  }
  return upper_gamma_q((bins - 1) / 2.0, chi2 / 2);
}

}  // namespace mls::testing
