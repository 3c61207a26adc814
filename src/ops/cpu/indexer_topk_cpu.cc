#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/paged_keys.h"
#include "ops/cpu/torch_topk.h"
#include "ops/indexer_topk.h"

namespace mls::ops::cpu {

void indexer_topk(const Tensor& q, const Tensor& k, const Tensor& w, const Tensor& q_pos,
                  const Tensor& row_len, float scale, const PagedKeys& pages, Tensor& chosen) {
  const int64_t T = q.dim(0), H = q.dim(1), D = q.dim(2);
  const int64_t topk = chosen.dim(1);
  if (q.ndim() != 3 || k.ndim() != 2 || k.dim(1) != D || w.dim(0) != T || w.dim(1) != H ||
      chosen.dim(0) != T || q_pos.numel() != T || row_len.numel() != T || q.stride(2) != 1 ||
      k.stride(1) != 1 || w.stride(1) != 1 || !chosen.is_contiguous())
    raise<ShapeError>("indexer_topk: q {} k {} w {} chosen {} do not fit", q.str(), k.str(),
                      w.str(), chosen.str());
  const int32_t* pos = q_pos.data<int32_t>();
  const int32_t* len = row_len.data<int32_t>();
  check_key_range("indexer_topk", q_pos, pages, k.dim(0));
  for (int64_t t = 0; t < T; ++t)
    if (len[t] <= pos[t])
      raise<ShapeError>("indexer_topk: row {} of length {} ends before position {}", t, len[t],
                        pos[t]);
  ThreadPool::global().parallel_for(T, 1, [&](int64_t b, int64_t e) {
    std::vector<std::pair<float, int32_t>> queue;
    std::vector<float> score;
    for (int64_t t = b; t < e; ++t) {
      const int64_t valid = pos[t] + 1;
      const int64_t row = len[t];
      score.assign(valid, 0.0f);
      const float* wr = w.data<float>() + t * w.stride(0);
      for (int64_t h = 0; h < H; ++h) {
        const float* qr = q.data<float>() + t * q.stride(0) + h * q.stride(1);
        for (int64_t j = 0; j < valid; ++j) {
          const float* kr =
              k.data<float>() + key_row(pages, t, static_cast<int32_t>(j)) * k.stride(0);
          float dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += qr[d] * kr[d];
          score[j] += wr[h] * std::max(dot * scale, 0.0f);
        }
      }
      queue.resize(row);
      for (int64_t j = 0; j < row; ++j)
        queue[j] = {j < valid ? score[j] : -std::numeric_limits<float>::infinity(),
                    static_cast<int32_t>(j)};
      const int64_t take = std::min(topk, row);
      torch_topk(queue, take);
      int32_t* out = chosen.data<int32_t>() + t * topk;
      for (int64_t i = 0; i < topk; ++i)
        out[i] = i < take && queue[i].second < valid ? queue[i].second : -1;
    }
  });
}

}  // namespace mls::ops::cpu
