// The weights of one rank's shard of a model, in compute layout: f32 [out, in] on the CPU; on
// the GPU bf16 matrices (block-FP8 e4m3 with their scales for the GEMM-only projections of an
// FP8 checkpoint) and f32 vectors (norms, biases).
// weight_table() lists every tensor once — checkpoint name, full shape, this rank's slice and
// destination — and is shared by the loader, the validator and the dummy initialiser, so the
// three can never disagree.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "parallel/communicator.h"

namespace mls {

struct MlpWeights {  // dense MLP, shared experts and each routed expert
  Tensor gate, up, down;
};

struct LayerWeights {
  Tensor input_norm, post_attention_norm;
  // The replicated projections of the layer input, fused so that a sequence-parallel rank runs
  // them on its token shard into one narrow output (FusedAColumns) and gathers it once: rows
  // [q_a_proj | kv_a_proj_with_mqa] in fused_a and [indexer wk | indexer weights_proj] in
  // fused_a_index (layers that own an indexer). Two groups, so that a block-FP8 checkpoint's
  // fused_a stays FP8: a group is FP8 only where each member starts on a 128-row scale block,
  // and the indexer's rows would start mid-block after kv_a's 576. The named tensors below are
  // row views into them.
  Tensor fused_a, fused_a_index;
  // MLA
  Tensor q_proj;  // only without q_lora
  Tensor q_a_proj, q_a_norm, q_b_proj;
  Tensor kv_a_proj, kv_a_norm, kv_b_proj, o_proj;
  // Absorbed decode: per local head, W_UKᵀ [rkv, dn] (a transposed copy of kv_b_proj's k rows).
  Tensor w_uk_t;  // [heads, rkv, dn]
  // DSA indexer (layers that own one)
  Tensor idx_wq_b, idx_wk, idx_k_norm_w, idx_k_norm_b, idx_weights_proj;
  // MLP
  MlpWeights dense;
  Tensor router, router_bias;
  std::vector<MlpWeights> experts;
  // Block-FP8 experts on a GPU: every expert's weight and scale addresses (ops/moe_experts.h),
  // built once at load, for the grouped expert path; undefined otherwise.
  Tensor expert_table;
  MlpWeights shared;
};

// Column offsets of each projection in the layer input's fused output: fused_a's rows, then
// fused_a_index's (same for every rank).
struct FusedAColumns {
  int64_t q = 0, kv = 0, index_k = 0, index_w = 0, width = 0;
  static FusedAColumns of(const io::ModelConfig& c, int64_t layer);
};

// One multi-token-prediction layer (docs/reference.md): the embedding and lm_head it uses are
// the model's; head_norm is its own final norm (shared_head.norm).
struct MtpWeights {
  Tensor enorm, hnorm, head_norm;
  // eh_proj [H, 2H] as its two column halves: eh_proj · [e ; g] = eh_proj_e · e + eh_proj_h · g.
  Tensor eh_proj_e, eh_proj_h;
  LayerWeights block;  // decoder layer num_hidden_layers + j
};

struct ModelWeights {
  Tensor embed, final_norm, lm_head;
  std::vector<LayerWeights> layers;
  std::vector<MtpWeights> mtp;  // empty unless loaded for speculative decoding
};

// One row of the table: where a tensor comes from and where this rank's part of it goes.
struct WeightSpec {
  std::string name;                 // checkpoint name
  std::vector<int64_t> full_shape;  // as stored
  io::Slice rows, cols;             // this rank's part
  std::vector<int64_t> local_shape;
  Tensor* dest;
  // Set for members of a fused tensor: dest becomes rows [group_row, +rows) of *group.
  Tensor* group = nullptr;
  int64_t group_row = 0;
  // Read only by ops::linear as a whole matrix: may stay block-FP8 on the GPU.
  bool gemm_only = false;
};

// Sizes one rank holds (heads, MLP columns, vocab rows) for a tensor-parallel layout.
struct ShardSizes {
  int64_t heads, dense_inter, expert_inter, shared_inter, vocab;
  int64_t head_start, dense_start, expert_start, shared_start, vocab_start;
};
ShardSizes shard_sizes(const io::ModelConfig& c, const ParallelContext& p);

// With `mtp`, the config's num_nextn_predict_layers MTP layers too (a ConfigError when it has
// none); without, they are skipped.
std::vector<WeightSpec> weight_table(const io::ModelConfig& c, const ParallelContext& p,
                                     ModelWeights& w, bool mtp = false);

// The dtype a weight is kept in on `device`: f32 on the CPU; on the GPU f32 vectors, and bf16
// matrices except GEMM-only projections with FP8 block scales (`has_scales`) whose slice is
// whole 128 × 128 blocks, which stay FP8 (e4m3) with an f32 block_scale.
DType weight_dtype(const io::ModelConfig& c, const WeightSpec& spec, Device device,
                   bool has_scales);

enum class LoadFormat { kAuto, kDummy };
LoadFormat parse_load_format(const std::string& s);

// Called after each tensor a rank fills, with that rank's bytes done and in all (checkpoint
// bytes read; for kDummy the bytes written). Runs on the rank's thread.
using WeightLoadProgress = std::function<void(int rank, int64_t done, int64_t total)>;

// Allocates (tag weights) and fills every tensor of the table: from the checkpoint, or with
// deterministic pseudo-random values for kDummy. Checks every name and shape before reading.
ModelWeights load_weights(const io::ModelConfig& c, const ParallelContext& p,
                          const io::Checkpoint* ckpt, LoadFormat format, Allocator& alloc,
                          const WeightLoadProgress& progress = {}, bool mtp = false);

}  // namespace mls
