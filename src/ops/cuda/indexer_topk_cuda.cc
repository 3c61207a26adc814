#include <algorithm>

#include "core/cuda_context.h"
#include "ops/cuda/indexer_topk_kernels.h"
#include "ops/cuda/paged_keys_cuda.h"
#include "ops/indexer_topk.h"

namespace mls::ops::cuda {
void indexer_topk(const Tensor& q, const Tensor& k, const Tensor& w, const Tensor& q_pos,
                  const Tensor& row_len, float scale, const PagedKeys& pages, TopkTieOrder order,
                  Tensor& chosen) {
  // The kernel's rule is kServing's (radix select, ties to lower indices, each row over its own
  // valid keys); torch's CPU algorithm exists only on the CPU.
  if (order != TopkTieOrder::kServing)
    raise<Unsupported>("indexer_topk: the torch reference tie order runs on the CPU only");
  const int64_t T = q.dim(0), Hi = q.dim(1), Di = q.dim(2), topk = chosen.dim(1);
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
  p.T = static_cast<int>(T);
  p.Hi = static_cast<int>(Hi);
  p.Di = static_cast<int>(Di);
  p.topk = static_cast<int>(topk);
  p.scale = scale;
  p.chosen = chosen.data<int32_t>();
  set_pages(pages, k.dim(0), p);
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

}  // namespace mls::ops::cuda
