#include <algorithm>

#include "core/cuda_context.h"
#include "ops/cuda/indexer_topk_kernels.h"
#include "ops/cuda/paged_keys_cuda.h"
#include "ops/indexer_topk.h"

namespace mls::ops::cuda {
namespace {

// The kernels' parameters for T = q.dim(0) query rows selecting `topk` keys into `chosen`.
kernels::IndexerParams indexer_params(const Tensor& q, const Tensor& k, const Tensor& w,
                                      const Tensor& q_pos, const Tensor& row_len, float scale,
                                      const PagedKeys& pages, int64_t topk, int32_t* chosen) {
  const int64_t Hi = q.dim(1);
  if (Hi > 64) raise<Unsupported>("indexer_topk: {} heads (the CUDA kernel takes up to 64)", Hi);
  kernels::IndexerParams p;
  p.q = q.raw();
  p.q_st = q.stride(0);
  p.q_sh = q.stride(1);
  p.k = k.raw();
  p.k_sr = k.stride(0);
  p.w = w.raw();
  p.w_st = w.stride(0);
  p.w_f32 = w.dtype() == DType::kF32;
  p.q_pos = q_pos.data<int32_t>();
  p.row_len = row_len.data<int32_t>();
  p.num_rows = k.dim(0);
  p.T = static_cast<int>(q.dim(0));
  p.Hi = static_cast<int>(Hi);
  p.Di = static_cast<int>(q.dim(2));
  p.topk = static_cast<int>(topk);
  p.scale = scale;
  p.chosen = chosen;
  set_pages(pages, k.dim(0), p);
  return p;
}

}  // namespace

void indexer_topk(const Tensor& q, const Tensor& k, const Tensor& w, const Tensor& q_pos,
                  const Tensor& row_len, float scale, const PagedKeys& pages, TopkTieOrder order,
                  Tensor& chosen) {
  // The kernel's rule is kServing's (radix select, ties to lower indices, each row over its own
  // valid keys); torch's CPU algorithm exists only on the CPU.
  if (order != TopkTieOrder::kServing)
    raise<Unsupported>("indexer_topk: the torch reference tie order runs on the CPU only");
  const int64_t T = q.dim(0), topk = chosen.dim(1);
  const kernels::IndexerParams p =
      indexer_params(q, k, w, q_pos, row_len, scale, pages, topk, chosen.data<int32_t>());
  if (T == 0 || topk == 0) return;

  // The scratch of ops::indexer_topk_scratch: query rows in groups whose scores fit
  // scratch::kIndexerScoreBytes, so an 8192-token prompt with a long context needs no gigabytes.
  const int64_t ld = scratch::indexer_scores_ld(p.key_bound);
  const int64_t rows = scratch::indexer_rows_per_launch(p.key_bound, T);
  Tensor scores = Tensor::empty({rows, std::max<int64_t>(ld, 1)}, DType::kF32, MemTag::kActivation,
                                mls::cuda::allocator());
  for (int64_t t0 = 0; t0 < T; t0 += rows)
    mls::cuda::check(kernels::launch_indexer_topk(p, static_cast<int>(t0),
                                                  static_cast<int>(std::min(rows, T - t0)),
                                                  scores.data<float>(), mls::cuda::stream()),
                     "indexer_topk");
}

void indexer_scores(const Tensor& q, const Tensor& k, const Tensor& w, const Tensor& q_pos,
                    const Tensor& row_len, float scale, const PagedKeys& pages,
                    IndexerScoreKernel kernel, Tensor& scores) {
  const int64_t T = q.dim(0);
  const Contract c("indexer_scores", scores);
  indexer_inputs_contract(c, q, k, w, q_pos, scale, pages, T);
  c.index("row_len", row_len, T);
  c.need(c.gpu(), "scores", scores, "on a GPU");
  c.dtype("scores", scores, {DType::kF32});
  c.rows("scores", scores, 2);
  c.need(scores.dim(0) == T && scores.dim(1) >= key_bound(pages, k.dim(0)), "scores", scores,
         "[{}, >= {}]", T, key_bound(pages, k.dim(0)));
  const kernels::IndexerParams p =
      indexer_params(q, k, w, q_pos, row_len, scale, pages, 0, nullptr);
  mls::cuda::check(kernels::launch_indexer_scores(
                       p, 0, static_cast<int>(T), scores.data<float>(), scores.stride(0),
                       kernel == IndexerScoreKernel::kTokenGroups, mls::cuda::stream()),
                   "indexer_scores");
}

}  // namespace mls::ops::cuda
