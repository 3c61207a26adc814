#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "ops/attention.h"
#include "ops/cpu/paged_keys.h"

namespace mls::ops::cpu {

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos,
               const AttentionArgs& args, Tensor& out) {
  const int64_t T = q.dim(0), H = q.dim(1), Dk = q.dim(2);
  const PagedKeys& pg = args.pages;
  const int64_t Hk = k.dim(1), Dv = v.dim(2);
  const Tensor* allowed = args.allowed;
  const int32_t* pos = q_pos.data<int32_t>();
  check_key_range("attention", q_pos, pg, k.dim(0));

  auto row = [&](int64_t t, int32_t j) { return key_row(pg, t, j); };
  ThreadPool::global().parallel_for(T * H, 4, [&](int64_t b, int64_t e) {
    std::vector<int32_t> keys;
    std::vector<float> p;
    std::vector<double> acc(Dv);
    for (int64_t th = b; th < e; ++th) {
      const int64_t t = th / H, h = th % H, hk = Hk == 1 ? 0 : h;
      const int32_t limit = pos[t];
      keys.clear();
      if (allowed) {
        const int32_t* row = allowed->data<int32_t>() + t * allowed->dim(1);
        for (int64_t i = 0; i < allowed->dim(1); ++i)
          if (row[i] >= 0 && row[i] <= limit) keys.push_back(row[i]);
        std::sort(keys.begin(), keys.end());
      } else {
        for (int32_t j = 0; j <= limit; ++j) keys.push_back(j);
      }
      const float* qr = q.data<float>() + t * q.stride(0) + h * q.stride(1);
      p.resize(keys.size());
      float m = -std::numeric_limits<float>::infinity();
      for (size_t i = 0; i < keys.size(); ++i) {
        const float* kr = k.data<float>() + row(t, keys[i]) * k.stride(0) + hk * k.stride(1);
        float s = 0;
        for (int64_t d = 0; d < Dk; ++d) s += qr[d] * kr[d];
        p[i] = s * args.scale;
        m = std::max(m, p[i]);
      }
      float sum = 0;
      for (auto& x : p) {
        x = std::exp(x - m);
        sum += x;
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t i = 0; i < keys.size(); ++i) {
        const float* vr = v.data<float>() + row(t, keys[i]) * v.stride(0) + hk * v.stride(1);
        const float w = p[i] / sum;
        for (int64_t d = 0; d < Dv; ++d) acc[d] += static_cast<double>(w) * vr[d];
      }
      float* o = out.data<float>() + t * out.stride(0) + h * out.stride(1);
      for (int64_t d = 0; d < Dv; ++d) o[d] = static_cast<float>(acc[d]);
    }
  });
}

}  // namespace mls::ops::cpu
