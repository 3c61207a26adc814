// Launchers for the DSA indexer's scores and top-k selection (indexer_topk_kernels.cu). Plain
// types only: this header is included by nvcc-compiled code, which cannot see fmt.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mls::ops::cuda::kernels {

// One step's indexer selection (see ops/indexer_topk.h). Device pointers; strides in elements,
// innermost strides 1. Query t scores the key positions j < min(q_pos[t] + 1, row_len[t],
// key_bound); the other positions of its row are masked. Ties at the cut go to lower positions
// (TopkTieOrder::kServing), so a row's selection does not depend on the keys after it.
struct IndexerParams {
  const void* q = nullptr;  // bf16 [T, Hi, Di]
  int64_t q_st = 0, q_sh = 0;
  const void* k = nullptr;  // bf16 [rows, Di]
  int64_t k_sr = 0;
  const void* w = nullptr;  // [T, Hi], f32 or bf16
  int64_t w_st = 0;
  bool w_f32 = false;
  const int32_t* q_pos = nullptr;         // [T]
  const int32_t* row_len = nullptr;       // [T]
  const int32_t* block_tables = nullptr;  // [num_seqs, bt_ld]-strided, or null (unpaged)
  int64_t bt_ld = 0, num_seqs = 0, max_blocks = 0;
  const int32_t* token_seq = nullptr;  // [T]
  int64_t block_size = 1;
  int64_t num_rows = 0;   // rows of k: block-table entries past them mask the key
  int64_t key_bound = 0;  // host-known bound on any row's length
  int T = 0, Hi = 0, Di = 0, topk = 0;
  float scale = 1.0f;
  int32_t* chosen = nullptr;  // [T, topk] contiguous
};

// Row stride (floats) of the score scratch: key_bound rounded up for 16-byte rows.
int64_t indexer_scores_ld(const IndexerParams& p);
// Scores of query rows [t0, t0 + nt) into rows of `ld` (>= key_bound) floats: row t − t0 holds
// query t's valid positions; the rest are not written. token_groups: CTAs of a few consecutive
// rows sharing each staged key tile (prompts), else one row a CTA (decode); both write the same
// floats. launch_indexer_topk picks by the step.
cudaError_t launch_indexer_scores(const IndexerParams& p, int t0, int nt, float* scores, int64_t ld,
                                  bool token_groups, cudaStream_t stream);
// Scores then selects for query rows [t0, t0 + nt); `scores` holds nt × indexer_scores_ld(p)
// floats. The selection of a row lists its chosen positions in ascending order, then −1s.
cudaError_t launch_indexer_topk(const IndexerParams& p, int t0, int nt, float* scores,
                                cudaStream_t stream);

}  // namespace mls::ops::cuda::kernels
