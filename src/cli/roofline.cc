#include "cli/roofline.h"

#include <algorithm>
#include <cmath>

namespace mls::cli {
namespace {

constexpr double kBf16Bytes = 2;
constexpr double kScaleBytes = 4;  // weight_scale_inv and e_score_correction_bias are f32
constexpr double kKvBytes = 2;     // the cache's values are bf16 on the GPU

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Σ_{j = first}^{first + count − 1} min(j, cap): the keys attended by `count` consecutive new
// tokens whose causal contexts are first, first + 1, ... keys, with at most `cap` keys each.
double capped_sum(int64_t first, int64_t count, int64_t cap) {
  const int64_t last = first + count - 1;
  double sum = 0;
  if (first <= std::min(last, cap)) {
    const int64_t hi = std::min(last, cap);
    sum += static_cast<double>(first + hi) * static_cast<double>(hi - first + 1) / 2;
  }
  const int64_t over_first = std::max(first, cap + 1);
  if (over_first <= last) sum += static_cast<double>(last - over_first + 1) * cap;
  return sum;
}

}  // namespace

double default_peak_flops(const io::ModelConfig& c) {
  return c.quant.fp8 ? kH200Fp8FlopsPerSecond : kH200Bf16FlopsPerSecond;
}

double expected_distinct_experts(int64_t experts, int64_t top_k, int64_t tokens) {
  const auto e = static_cast<double>(experts);
  return e * (1 - std::pow(1 - static_cast<double>(top_k) / e, static_cast<double>(tokens)));
}

StepCost& StepCost::operator+=(const StepCost& o) {
  weight_bytes += o.weight_bytes;
  kv_read_bytes += o.kv_read_bytes;
  kv_write_bytes += o.kv_write_bytes;
  gemm_flops += o.gemm_flops;
  attention_flops += o.attention_flops;
  indexer_flops += o.indexer_flops;
  return *this;
}

StepCost step_cost(const io::ModelConfig& c, const ForwardBatch& batch, int tp,
                   bool sequence_parallel) {
  const int64_t H = c.hidden_size, V = c.vocab_size, rq = c.q_lora_rank, rkv = c.kv_lora_rank;
  const int64_t dr = c.qk_rope_head_dim, dn = c.qk_nope_head_dim, dv = c.v_head_dim;
  const int64_t dq = c.qk_head_dim(), Hi = c.index_n_heads, Di = c.index_head_dim;
  const int64_t E = c.n_routed_experts, k = c.num_experts_per_tok;
  // This rank's share of the sharded dimensions (the vocabulary is padded up to tp rows).
  const int64_t heads = c.num_attention_heads / tp, inter = c.intermediate_size / tp;
  const int64_t expert_inter = c.moe_intermediate_size / tp;
  const int64_t shared_inter = c.moe_intermediate_size * c.n_shared_experts / tp;
  const int64_t vocab = ceil_div(V, tp);

  const auto N = static_cast<double>(batch.num_tokens());
  const auto logit_rows = static_cast<double>(batch.num_logit_rows());
  // Under sequence parallelism the replicated fused projection runs on this rank's token shard.
  const double fused_rows =
      sequence_parallel && tp > 1 ? static_cast<double>(ceil_div(batch.num_tokens(), tp)) : N;

  // A projection [rows, cols] as stored: block-FP8 with its scales, or bf16.
  auto proj_bytes = [&](int64_t rows, int64_t cols) {
    const auto values = static_cast<double>(rows) * static_cast<double>(cols);
    if (!c.quant.fp8) return values * kBf16Bytes;
    return values +
           static_cast<double>(ceil_div(rows, c.quant.block_n) * ceil_div(cols, c.quant.block_k)) *
               kScaleBytes;
  };
  auto params = [](int64_t rows, int64_t cols) {
    return static_cast<double>(rows) * static_cast<double>(cols);
  };

  StepCost s;
  s.weight_bytes += std::min(N, static_cast<double>(V)) * H * kBf16Bytes;  // embedding rows
  s.weight_bytes += H * kBf16Bytes;                                        // final norm
  if (logit_rows > 0) {
    s.weight_bytes += static_cast<double>(vocab) * H * kBf16Bytes;
    s.gemm_flops += 2 * params(vocab, H) * logit_rows;
  }

  for (int64_t L = 0; L < c.num_hidden_layers; ++L) {
    const io::IndexerKind ix = c.layer_indexer[L];
    // Replicated: norms, the fused projection of the layer input, the indexer's query.
    s.weight_bytes += (2 * H + rkv + (rq > 0 ? rq : 0)) * kBf16Bytes;
    double fused_params = params(rkv + dr, H);
    s.weight_bytes += proj_bytes(rkv + dr, H);
    if (rq > 0) {
      fused_params += params(rq, H);
      s.weight_bytes += proj_bytes(rq, H) + proj_bytes(heads * dq, rq);
      s.gemm_flops += 2 * params(heads * dq, rq) * N;
    } else {
      s.weight_bytes += proj_bytes(heads * dq, H);
      s.gemm_flops += 2 * params(heads * dq, H) * N;
    }
    if (ix == io::IndexerKind::kFull) {
      fused_params += params(Di, H) + params(Hi, H);
      s.weight_bytes += proj_bytes(Di, H) + params(Hi, H) * kBf16Bytes + 2 * Di * kBf16Bytes;
      s.weight_bytes += proj_bytes(Hi * Di, rq);
      s.gemm_flops += 2 * params(Hi * Di, rq) * N;
    }
    s.gemm_flops += 2 * fused_params * fused_rows;
    // Sharded attention projections; kv_b_proj is applied as W_UK to q and W_UV to the output.
    s.weight_bytes += proj_bytes(heads * (dn + dv), rkv) + proj_bytes(H, heads * dv);
    s.gemm_flops += 2 * (params(heads * (dn + dv), rkv) + params(H, heads * dv)) * N;

    if (!c.layer_is_moe[L]) {
      s.weight_bytes += 3 * proj_bytes(inter, H);
      s.gemm_flops += 2 * 3 * params(inter, H) * N;
    } else {
      s.weight_bytes += params(E, H) * kBf16Bytes + static_cast<double>(E) * kScaleBytes;
      s.gemm_flops += 2 * params(E, H) * N;
      s.weight_bytes +=
          expected_distinct_experts(E, k, batch.num_tokens()) * 3 * proj_bytes(expert_inter, H);
      s.gemm_flops += 2 * 3 * params(expert_inter, H) * static_cast<double>(k) * N;
      if (shared_inter > 0) {
        s.weight_bytes += 3 * proj_bytes(shared_inter, H);
        s.gemm_flops += 2 * 3 * params(shared_inter, H) * N;
      }
    }

    for (const SequenceChunk& sc : batch.seqs) {
      const int64_t ctx = sc.num_cached + sc.num_new;
      const int64_t first = sc.num_cached + 1;  // keys in the first new token's causal context
      const bool sparse = ix != io::IndexerKind::kNone;
      const double latent_keys =
          sparse ? std::min<double>(ctx, static_cast<double>(c.index_topk) * sc.num_new) : ctx;
      s.kv_read_bytes += latent_keys * (rkv + dr) * kKvBytes;
      s.kv_write_bytes += static_cast<double>(sc.num_new) * (rkv + dr) * kKvBytes;
      const double keys = capped_sum(first, sc.num_new, sparse ? c.index_topk : ctx);
      s.attention_flops += 2.0 * heads * keys * static_cast<double>((rkv + dr) + rkv);
      if (ix == io::IndexerKind::kFull) {
        s.kv_read_bytes += static_cast<double>(ctx) * Di * kKvBytes;
        s.kv_write_bytes += static_cast<double>(sc.num_new) * Di * kKvBytes;
        s.indexer_flops += 2.0 * Hi * Di * capped_sum(first, sc.num_new, ctx);
      }
    }
  }
  return s;
}

double floor_seconds(const StepCost& cost, const Peaks& peaks) {
  return std::max(cost.bytes() / peaks.bytes_per_s, cost.flops() / peaks.flops_per_s);
}

bool compute_bound(const StepCost& cost, const Peaks& peaks) {
  return cost.flops() / peaks.flops_per_s > cost.bytes() / peaks.bytes_per_s;
}

}  // namespace mls::cli
