#include "model/model_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"

namespace mls {

ShardSizes shard_sizes(const io::ModelConfig& c, const ParallelContext& p) {
  const int64_t tp = p.tp_size, r = p.rank;
  auto split = [&](int64_t n, const char* what) {
    if (n % tp != 0)
      raise<ConfigError>("{} = {} is not divisible by --tensor-parallel-size {}", what, n, tp);
    return n / tp;
  };
  ShardSizes s{};
  s.heads = split(c.num_attention_heads, "num_attention_heads");
  s.dense_inter = split(c.intermediate_size, "intermediate_size");
  s.expert_inter = split(c.moe_intermediate_size, "moe_intermediate_size");
  s.shared_inter = split(c.moe_intermediate_size * c.n_shared_experts,
                         "moe_intermediate_size × n_shared_experts");
  // The vocabulary is padded up to a multiple of tp; the last rank's tail rows are zeros.
  s.vocab = (c.vocab_size + tp - 1) / tp;
  s.head_start = r * s.heads;
  s.dense_start = r * s.dense_inter;
  s.expert_start = r * s.expert_inter;
  s.shared_start = r * s.shared_inter;
  s.vocab_start = r * s.vocab;
  return s;
}

FusedAColumns FusedAColumns::of(const io::ModelConfig& c, int64_t layer) {
  FusedAColumns f;
  f.q = 0;
  f.kv = c.q_lora_rank;
  f.width = f.kv + c.kv_lora_rank + c.qk_rope_head_dim;
  if (c.layer_indexer[layer] == io::IndexerKind::kFull) {
    f.index_k = f.width;
    f.index_w = f.index_k + c.index_head_dim;
    f.width = f.index_w + c.index_n_heads;
  }
  return f;
}

std::vector<WeightSpec> weight_table(const io::ModelConfig& c, const ParallelContext& p,
                                     ModelWeights& w) {
  const ShardSizes s = shard_sizes(c, p);
  const int64_t H = c.hidden_size, nh = c.num_attention_heads, dq = c.qk_head_dim();
  const int64_t rkv = c.kv_lora_rank, dr = c.qk_rope_head_dim, dn = c.qk_nope_head_dim;
  const int64_t dv = c.v_head_dim;
  std::vector<WeightSpec> t;
  auto whole = [&](std::string name, std::vector<int64_t> shape, Tensor* dest) {
    t.push_back({std::move(name), shape, {}, {}, shape, dest});
  };
  // Rows [start, start+len) of dim 0 (column-parallel: output features).
  auto by_rows = [&](std::string name, std::vector<int64_t> shape, int64_t start, int64_t len,
                     Tensor* dest) {
    std::vector<int64_t> local = shape;
    local[0] = len;
    t.push_back({std::move(name), shape, {start, len}, {}, local, dest});
  };
  // Columns of dim 1 (row-parallel: input features).
  auto by_cols = [&](std::string name, std::vector<int64_t> shape, int64_t start, int64_t len,
                     Tensor* dest) {
    std::vector<int64_t> local = shape;
    local[1] = len;
    t.push_back({std::move(name), shape, {}, {start, len}, local, dest});
  };
  auto fused = [&](std::string name, std::vector<int64_t> shape, Tensor* group, int64_t row,
                   Tensor* dest) {
    t.push_back({std::move(name), shape, {}, {}, shape, dest, group, row});
  };
  auto mlp = [&](const std::string& pre, int64_t inter, int64_t start, int64_t len, MlpWeights& m) {
    by_rows(pre + "gate_proj.weight", {inter, H}, start, len, &m.gate);
    by_rows(pre + "up_proj.weight", {inter, H}, start, len, &m.up);
    by_cols(pre + "down_proj.weight", {H, inter}, start, len, &m.down);
  };

  w.layers.resize(c.num_hidden_layers);
  // The vocab-parallel lm_head reads its rows; rows past the vocabulary stay zero-padded.
  const int64_t vocab_rows = std::min(s.vocab, c.vocab_size - s.vocab_start);
  whole("model.embed_tokens.weight", {c.vocab_size, H}, &w.embed);
  whole("model.norm.weight", {H}, &w.final_norm);
  by_rows("lm_head.weight", {c.vocab_size, H}, s.vocab_start, std::max<int64_t>(vocab_rows, 0),
          &w.lm_head);
  t.back().local_shape[0] = s.vocab;
  for (int64_t L = 0; L < c.num_hidden_layers; ++L) {
    LayerWeights& l = w.layers[L];
    const std::string pre = fmt::format("model.layers.{}.", L);
    const std::string a = pre + "self_attn.";
    whole(pre + "input_layernorm.weight", {H}, &l.input_norm);
    whole(pre + "post_attention_layernorm.weight", {H}, &l.post_attention_norm);
    const FusedAColumns fa = FusedAColumns::of(c, L);
    if (c.q_lora_rank > 0) {
      fused(a + "q_a_proj.weight", {c.q_lora_rank, H}, &l.fused_a, fa.q, &l.q_a_proj);
      whole(a + "q_a_layernorm.weight", {c.q_lora_rank}, &l.q_a_norm);
      by_rows(a + "q_b_proj.weight", {nh * dq, c.q_lora_rank}, s.head_start * dq, s.heads * dq,
              &l.q_b_proj);
    } else {
      by_rows(a + "q_proj.weight", {nh * dq, H}, s.head_start * dq, s.heads * dq, &l.q_proj);
    }
    fused(a + "kv_a_proj_with_mqa.weight", {rkv + dr, H}, &l.fused_a, fa.kv, &l.kv_a_proj);
    whole(a + "kv_a_layernorm.weight", {rkv}, &l.kv_a_norm);
    by_rows(a + "kv_b_proj.weight", {nh * (dn + dv), rkv}, s.head_start * (dn + dv),
            s.heads * (dn + dv), &l.kv_b_proj);
    by_cols(a + "o_proj.weight", {H, nh * dv}, s.head_start * dv, s.heads * dv, &l.o_proj);
    if (c.layer_indexer[L] == io::IndexerKind::kFull) {
      const std::string ix = a + "indexer.";
      const int64_t hi = c.index_n_heads, di = c.index_head_dim;
      whole(ix + "wq_b.weight", {hi * di, c.q_lora_rank}, &l.idx_wq_b);
      fused(ix + "wk.weight", {di, H}, &l.fused_a, fa.index_k, &l.idx_wk);
      whole(ix + "k_norm.weight", {di}, &l.idx_k_norm_w);
      whole(ix + "k_norm.bias", {di}, &l.idx_k_norm_b);
      fused(ix + "weights_proj.weight", {hi, H}, &l.fused_a, fa.index_w, &l.idx_weights_proj);
    }
    if (!c.layer_is_moe[L]) {
      mlp(pre + "mlp.", c.intermediate_size, s.dense_start, s.dense_inter, l.dense);
    } else {
      whole(pre + "mlp.gate.weight", {c.n_routed_experts, H}, &l.router);
      whole(pre + "mlp.gate.e_score_correction_bias", {c.n_routed_experts}, &l.router_bias);
      l.experts.resize(c.n_routed_experts);
      for (int64_t e = 0; e < c.n_routed_experts; ++e)
        mlp(fmt::format("{}mlp.experts.{}.", pre, e), c.moe_intermediate_size, s.expert_start,
            s.expert_inter, l.experts[e]);
      if (c.n_shared_experts > 0)
        mlp(pre + "mlp.shared_experts.", c.moe_intermediate_size * c.n_shared_experts,
            s.shared_start, s.shared_inter, l.shared);
    }
  }
  return t;
}

LoadFormat parse_load_format(const std::string& s) {
  if (s == "auto" || s == "safetensors") return LoadFormat::kAuto;
  if (s == "dummy") return LoadFormat::kDummy;
  raise<InvalidArgument>("unknown --load-format '{}': expected auto, safetensors or dummy", s);
}

// Deterministic values in [-a, a] from the tensor's name and index (splitmix64), so a dummy
// model is the same on every rank and every run.
static void fill_dummy(const WeightSpec& spec, float* out, int64_t n) {
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (char ch : spec.name) seed = (seed ^ static_cast<uint8_t>(ch)) * 0x100000001b3ull;
  const bool is_norm = spec.name.find("norm") != std::string::npos;
  const bool is_bias = spec.name.ends_with("bias");
  const int64_t fan_in = spec.full_shape.size() > 1 ? spec.full_shape[1] : 1;
  const float a = is_bias ? 0.05f : std::sqrt(3.0f / static_cast<float>(fan_in));
  const int64_t row_len = spec.local_shape.size() > 1 ? spec.local_shape[1] : 1;
  const int64_t full_cols = spec.full_shape.size() > 1 ? spec.full_shape[1] : 1;
  ThreadPool::global().parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      // Index in the full tensor, so that every rank sees the same values for the same element.
      const int64_t r = i / row_len + spec.rows.start, col = i % row_len + spec.cols.start;
      uint64_t z = seed + static_cast<uint64_t>(r * full_cols + col) * 0x9e3779b97f4a7c15ull;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      const float u = static_cast<float>(z >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
      out[i] = is_norm && !is_bias ? 1.0f + 0.1f * u : a * u;
    }
  });
}

ModelWeights load_weights(const io::ModelConfig& c, const ParallelContext& p,
                          const io::Checkpoint* ckpt, LoadFormat format, Allocator& alloc) {
  ModelWeights w;
  std::vector<WeightSpec> table = weight_table(c, p, w);
  if (format == LoadFormat::kAuto) {
    MLS_CHECK(ckpt != nullptr, "loading weights needs a checkpoint");
    // Validate every name and shape before reading anything: a bad checkpoint fails fast.
    for (const WeightSpec& spec : table) {
      const io::TensorInfo& info = ckpt->info(spec.name);
      if (info.shape != spec.full_shape)
        raise<CheckpointError>("{} in {}: expected shape {}, found {}", spec.name, info.file,
                               Shape(spec.full_shape).str(), Shape(info.shape).str());
    }
  }
  // Fused groups first: one allocation each, sized by its members; members become row views.
  for (const WeightSpec& spec : table)
    if (spec.group && !spec.group->defined()) {
      int64_t rows = 0;
      for (const WeightSpec& m : table)
        if (m.group == spec.group) rows = std::max(rows, m.group_row + m.local_shape[0]);
      *spec.group =
          Tensor::empty({rows, spec.local_shape[1]}, DType::kF32, MemTag::kWeights, alloc);
    }
  for (const WeightSpec& spec : table) {
    *spec.dest = spec.group
                     ? spec.group->narrow(0, spec.group_row, spec.local_shape[0])
                     : Tensor::empty(Shape(spec.local_shape), DType::kF32, MemTag::kWeights, alloc);
    float* out = spec.dest->data<float>();
    if (!out) continue;  // meta allocator: sizes only
    const int64_t n = spec.dest->numel();
    const int64_t read_rows = spec.rows.len < 0 ? spec.local_shape[0] : spec.rows.len;
    const int64_t row_len = n / std::max<int64_t>(spec.local_shape[0], 1);
    if (read_rows < spec.local_shape[0])  // padded vocabulary tail
      std::memset(out + read_rows * row_len, 0, (n - read_rows * row_len) * sizeof(float));
    if (format == LoadFormat::kDummy)
      fill_dummy(spec, out, read_rows * row_len);
    else
      ckpt->read_f32(spec.name, spec.full_shape, out, spec.rows, spec.cols);
  }
  return w;
}

}  // namespace mls
