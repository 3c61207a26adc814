// The reduction every CPU communicator uses: acc[i] = Σ_r input(r)[i] converted to f32, summed in
// rank order, so every rank (and every communicator kind) gets bitwise the same result.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"

namespace mls {

template <class Input>  // const char* (int rank): that rank's n values of type t
void sum_in_rank_order(int size, DType t, const Input& input, int64_t n, float* acc) {
  std::memset(acc, 0, n * sizeof(float));
  std::vector<float> tmp(t == DType::kF32 ? 0 : n);
  for (int r = 0; r < size; ++r) {
    const char* base = input(r);
    const float* v = reinterpret_cast<const float*>(base);
    if (t != DType::kF32) {
      convert_to_f32(base, t, tmp.data(), n);
      v = tmp.data();
    }
    for (int64_t i = 0; i < n; ++i) acc[i] += v[i];
  }
}

}  // namespace mls
