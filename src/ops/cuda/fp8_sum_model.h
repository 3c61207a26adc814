// A model of how Hopper's FP8 tensor-core MMAs add, fitted to the prefill experts' measured
// errors (bench/RESULTS.md, session 26): a sum kept to `bits` bits after its leading one,
// truncated toward zero. Shared by the kernel emulator (emu::set_fp8_sum_bits) and
// bench/fp8_promotion_model.cc (`rz`), and the experts kernels' unbiased promotions. The device
// truncates relative to the largest addend rather than the sum (bench/fp8_accumulator_probe,
// bench/RESULTS.md "Session 27"), but no model of that fitted the errors better. Plain C++.
#pragma once

#include <cmath>

namespace mls::ops::cuda {

// The bits Hopper keeps: fitted to the experts' errors (between 13 and 14), then measured by
// bench/fp8_accumulator_probe (13; bench/RESULTS.md "Session 27").
inline constexpr int kHopperFp8SumBits = 13;

inline double truncated_fp8_sum(double exact, int bits) {
  if (exact == 0.0) return exact;
  int e = 0;
  std::frexp(exact, &e);  // exact = m · 2^e, 0.5 <= |m| < 1: the leading one is 2^(e - 1)
  const double unit = std::ldexp(1.0, e - 1 - bits);
  return std::trunc(exact / unit) * unit;
}

// The mean relative shortfall of such a sum: the truncation takes 2^-(bits + 2) / ln 2 of it on
// average (mantissas spread log-uniformly).
constexpr double truncated_fp8_sum_shortfall(int bits) {
  double s = 1.0 / 0.6931471805599453;  // 1 / ln 2
  for (int b = 0; b < bits + 2; ++b) s /= 2;
  return s;
}

}  // namespace mls::ops::cuda
