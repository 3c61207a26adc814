#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/paged_keys.h"
#include "ops/cpu/torch_topk.h"
#include "ops/indexer_topk.h"

namespace mls::ops::cpu {
namespace {

// Scores of query row t against its valid keys 0..q_pos[t].
void score_row(const Tensor& q, const Tensor& k, const Tensor& w, const Tensor& q_pos, float scale,
               const PagedKeys& pages, int64_t t, std::vector<float>& score) {
  const int64_t H = q.dim(1), D = q.dim(2);
  const int64_t valid = q_pos.data<int32_t>()[t] + 1;
  score.assign(valid, 0.0f);
  const float* wr = w.data<float>() + t * w.stride(0);
  for (int64_t h = 0; h < H; ++h) {
    const float* qr = q.data<float>() + t * q.stride(0) + h * q.stride(1);
    for (int64_t j = 0; j < valid; ++j) {
      const float* kr = k.data<float>() + key_row(pages, t, static_cast<int32_t>(j)) * k.stride(0);
      float dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += qr[d] * kr[d];
      score[j] += wr[h] * std::max(dot * scale, 0.0f);
    }
  }
}

// Larger score first, then lower index: a strict total order, so the chosen set is unique.
bool serving_before(const std::pair<float, int32_t>& x, const std::pair<float, int32_t>& y) {
  return x.first != y.first ? x.first > y.first : x.second < y.second;
}

}  // namespace

void indexer_topk(const Tensor& q, const Tensor& k, const Tensor& w, const Tensor& q_pos,
                  const Tensor& row_len, float scale, const PagedKeys& pages, TopkTieOrder order,
                  Tensor& chosen) {
  const int64_t T = q.dim(0), topk = chosen.dim(1);
  check_key_range("indexer_topk", q_pos, pages, k.dim(0));
  const int32_t* pos = q_pos.data<int32_t>();
  const int32_t* len = row_len.data<int32_t>();
  for (int64_t t = 0; t < T; ++t)
    if (len[t] <= pos[t])
      raise<ShapeError>("indexer_topk: row {} of length {} ends before position {}", t, len[t],
                        pos[t]);
  ThreadPool::global().parallel_for(T, 1, [&](int64_t b, int64_t e) {
    std::vector<std::pair<float, int32_t>> queue;
    std::vector<float> score;
    for (int64_t t = b; t < e; ++t) {
      score_row(q, k, w, q_pos, scale, pages, t, score);
      const auto valid = static_cast<int64_t>(score.size());
      int32_t* out = chosen.data<int32_t>() + t * topk;
      if (order == TopkTieOrder::kServing) {
        queue.resize(valid);
        for (int64_t j = 0; j < valid; ++j) queue[j] = {score[j], static_cast<int32_t>(j)};
        const int64_t take = std::min(topk, valid);
        if (take > 0 && take < valid)
          std::nth_element(queue.begin(), queue.begin() + (take - 1), queue.end(), serving_before);
        std::sort(queue.begin(), queue.begin() + take,
                  [](const auto& x, const auto& y) { return x.second < y.second; });
        for (int64_t i = 0; i < topk; ++i) out[i] = i < take ? queue[i].second : -1;
        continue;
      }
      // The reference's row: masked positions up to the row's length rank as −inf.
      const int64_t row = len[t];
      queue.resize(row);
      for (int64_t j = 0; j < row; ++j)
        queue[j] = {j < valid ? score[j] : -std::numeric_limits<float>::infinity(),
                    static_cast<int32_t>(j)};
      const int64_t take = std::min(topk, row);
      torch_topk(queue, take);
      for (int64_t i = 0; i < topk; ++i)
        out[i] = i < take && queue[i].second < valid ? queue[i].second : -1;
    }
  });
}

std::vector<bool> indexer_ties_at_cut(const Tensor& q, const Tensor& k, const Tensor& w,
                                      const Tensor& q_pos, float scale, const PagedKeys& pages,
                                      int64_t topk) {
  const int64_t T = q.dim(0);
  indexer_inputs_contract(Contract("indexer_ties_at_cut", q), q, k, w, q_pos, scale, pages, T);
  check_key_range("indexer_ties_at_cut", q_pos, pages, k.dim(0));
  std::vector<char> tie(T, 0);  // not vector<bool>: rows are written concurrently
  ThreadPool::global().parallel_for(T, 1, [&](int64_t b, int64_t e) {
    std::vector<float> score;
    for (int64_t t = b; t < e; ++t) {
      score_row(q, k, w, q_pos, scale, pages, t, score);
      if (static_cast<int64_t>(score.size()) <= topk || topk <= 0) continue;
      // The k-th and (k+1)-th largest scores.
      std::nth_element(score.begin(), score.begin() + topk, score.end(), std::greater<>());
      const float next = score[topk];
      const float kth = *std::min_element(score.begin(), score.begin() + topk);
      tie[t] = kth == next;
    }
  });
  return {tie.begin(), tie.end()};
}

}  // namespace mls::ops::cpu
