#include "model/model_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "ops/copy.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/moe_experts.h"

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
  if (c.indexer(layer) == io::IndexerKind::kFull) {
    f.index_k = f.width;
    f.index_w = f.index_k + c.index_head_dim;
    f.width = f.index_w + c.index_n_heads;
  }
  return f;
}

std::vector<WeightSpec> weight_table(const io::ModelConfig& c, const ParallelContext& p,
                                     ModelWeights& w, bool mtp) {
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
  auto gemm = [&] { t.back().gemm_only = true; };
  auto mlp = [&](const std::string& pre, int64_t inter, int64_t start, int64_t len, MlpWeights& m) {
    by_rows(pre + "gate_proj.weight", {inter, H}, start, len, &m.gate);
    gemm();
    by_rows(pre + "up_proj.weight", {inter, H}, start, len, &m.up);
    gemm();
    by_cols(pre + "down_proj.weight", {H, inter}, start, len, &m.down);
    gemm();
  };

  w.layers.resize(c.num_hidden_layers);
  // The vocab-parallel lm_head reads its rows; rows past the vocabulary stay zero-padded.
  const int64_t vocab_rows = std::min(s.vocab, c.vocab_size - s.vocab_start);
  whole("model.embed_tokens.weight", {c.vocab_size, H}, &w.embed);
  whole("model.norm.weight", {H}, &w.final_norm);
  by_rows("lm_head.weight", {c.vocab_size, H}, s.vocab_start, std::max<int64_t>(vocab_rows, 0),
          &w.lm_head);
  t.back().local_shape[0] = s.vocab;
  // Decoder layer L's tensors, main and MTP layers alike (the same names under model.layers.L).
  auto decoder_layer = [&](int64_t L, LayerWeights& l) {
    const std::string pre = fmt::format("model.layers.{}.", L);
    const std::string a = pre + "self_attn.";
    whole(pre + "input_layernorm.weight", {H}, &l.input_norm);
    whole(pre + "post_attention_layernorm.weight", {H}, &l.post_attention_norm);
    const FusedAColumns fa = FusedAColumns::of(c, L);
    if (c.q_lora_rank > 0) {
      fused(a + "q_a_proj.weight", {c.q_lora_rank, H}, &l.fused_a, fa.q, &l.q_a_proj);
      gemm();
      whole(a + "q_a_layernorm.weight", {c.q_lora_rank}, &l.q_a_norm);
      by_rows(a + "q_b_proj.weight", {nh * dq, c.q_lora_rank}, s.head_start * dq, s.heads * dq,
              &l.q_b_proj);
      gemm();
    } else {
      by_rows(a + "q_proj.weight", {nh * dq, H}, s.head_start * dq, s.heads * dq, &l.q_proj);
      gemm();
    }
    fused(a + "kv_a_proj_with_mqa.weight", {rkv + dr, H}, &l.fused_a, fa.kv, &l.kv_a_proj);
    gemm();
    whole(a + "kv_a_layernorm.weight", {rkv}, &l.kv_a_norm);
    by_rows(a + "kv_b_proj.weight", {nh * (dn + dv), rkv}, s.head_start * (dn + dv),
            s.heads * (dn + dv), &l.kv_b_proj);
    by_cols(a + "o_proj.weight", {H, nh * dv}, s.head_start * dv, s.heads * dv, &l.o_proj);
    gemm();
    if (c.indexer(L) == io::IndexerKind::kFull) {
      const std::string ix = a + "indexer.";
      const int64_t hi = c.index_n_heads, di = c.index_head_dim;
      whole(ix + "wq_b.weight", {hi * di, c.q_lora_rank}, &l.idx_wq_b);
      gemm();
      fused(ix + "wk.weight", {di, H}, &l.fused_a_index, 0, &l.idx_wk);
      gemm();
      whole(ix + "k_norm.weight", {di}, &l.idx_k_norm_w);
      whole(ix + "k_norm.bias", {di}, &l.idx_k_norm_b);
      fused(ix + "weights_proj.weight", {hi, H}, &l.fused_a_index, fa.index_w - fa.index_k,
            &l.idx_weights_proj);
      gemm();
    }
    if (!c.is_moe(L)) {
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
  };
  for (int64_t L = 0; L < c.num_hidden_layers; ++L) decoder_layer(L, w.layers[L]);
  if (mtp) {
    if (c.num_nextn_predict_layers == 0)
      raise<ConfigError>(
          "speculative decoding (MTP) needs the checkpoint's MTP layers, but config.json has "
          "num_nextn_predict_layers 0");
    w.mtp.resize(c.num_nextn_predict_layers);
    for (int64_t j = 0; j < c.num_nextn_predict_layers; ++j) {
      const int64_t L = c.num_hidden_layers + j;
      MtpWeights& m = w.mtp[j];
      const std::string pre = fmt::format("model.layers.{}.", L);
      whole(pre + "enorm.weight", {H}, &m.enorm);
      whole(pre + "hnorm.weight", {H}, &m.hnorm);
      // Replicated, as vLLM keeps it; read as its embedding and hidden halves (no concat).
      by_cols(pre + "eh_proj.weight", {H, 2 * H}, 0, H, &m.eh_proj_e);
      gemm();
      by_cols(pre + "eh_proj.weight", {H, 2 * H}, H, H, &m.eh_proj_h);
      gemm();
      whole(pre + "shared_head.norm.weight", {H}, &m.head_norm);
      decoder_layer(L, m.block);
    }
  }
  return t;
}

LoadFormat parse_load_format(const std::string& s) {
  if (s == "auto" || s == "safetensors") return LoadFormat::kAuto;
  if (s == "dummy") return LoadFormat::kDummy;
  raise<InvalidArgument>("unknown --load-format '{}': expected auto, safetensors or dummy", s);
}

DType weight_dtype(const io::ModelConfig& c, const WeightSpec& spec, Device device,
                   bool has_scales) {
  if (device.is_cpu() || spec.local_shape.size() == 1) return DType::kF32;
  if (!spec.gemm_only || !c.quant.fp8 || !has_scales || c.quant.block_n != 128 ||
      c.quant.block_k != 128)
    return DType::kBF16;
  auto aligned = [](const io::Slice& s, int64_t full) {
    const int64_t len = s.len < 0 ? full - s.start : s.len;
    return s.start % 128 == 0 && (len % 128 == 0 || s.start + len == full);
  };
  return aligned(spec.rows, spec.full_shape[0]) && aligned(spec.cols, spec.full_shape[1])
             ? DType::kFP8E4M3
             : DType::kBF16;
}

// The 128-wide scale blocks (weight_dtype's) covering n rows or columns.
static int64_t scale_blocks(int64_t n) {
  return (n + 127) / 128;
}

// Deterministic values in [-a, a] from the tensor's name and index (see ops::UniformFill), so a
// dummy model is the same on every rank and every run; norms are 1 ± 0.1.
static ops::UniformFill dummy_fill(const WeightSpec& spec) {
  ops::UniformFill f;
  f.seed = 0x9e3779b97f4a7c15ull;
  for (char ch : spec.name) f.seed = (f.seed ^ static_cast<uint8_t>(ch)) * 0x100000001b3ull;
  const bool is_norm = spec.name.find("norm") != std::string::npos;
  const bool is_bias = spec.name.ends_with("bias");
  const int64_t fan_in = spec.full_shape.size() > 1 ? spec.full_shape[1] : 1;
  f.bound = is_bias ? 0.05f : std::sqrt(3.0f / static_cast<float>(fan_in));
  if (is_norm && !is_bias) f.offset = 1.0f, f.bound = 0.1f;
  f.row0 = spec.rows.start;
  f.col0 = spec.cols.start;
  f.full_cols = spec.full_shape.size() > 1 ? spec.full_shape[1] : 1;
  return f;
}

namespace {

// Loads one rank's weights onto its allocator's device.
class WeightLoader {
 public:
  WeightLoader(const io::ModelConfig& c, const io::Checkpoint* ckpt, LoadFormat format,
               Allocator& alloc, const std::vector<WeightSpec>& table)
      : c_(c), ckpt_(ckpt), format_(format), alloc_(alloc) {
    // A fused group is block-FP8 where every member would be alone and starts on a 128-row
    // scale block (the group's scales are then its members' stacked); else its members are bf16.
    for (const WeightSpec& spec : table) {
      if (!spec.group) continue;
      const bool fp8 = own_dtype(spec) == DType::kFP8E4M3 && spec.group_row % 128 == 0;
      const auto it = group_fp8_.try_emplace(spec.group, fp8).first;
      it->second = it->second && fp8;
    }
  }

  DType dtype_of(const WeightSpec& spec) const {
    const DType own = own_dtype(spec);
    if (!spec.group) return own;
    if (group_fp8_.at(spec.group)) return DType::kFP8E4M3;
    return own == DType::kFP8E4M3 ? DType::kBF16 : own;
  }

  void fill(const WeightSpec& spec) const {
    Tensor& dest = *spec.dest;
    if (dest.dtype() == DType::kFP8E4M3) return fill_fp8(spec);
    if (!dest.raw()) return;  // meta allocator: sizes only
    const int64_t rows = spec.local_shape[0];
    const int64_t read_rows = spec.rows.len < 0 ? rows : spec.rows.len;
    // A padded vocabulary tail (rows past read_rows) stays zero.
    Tensor part = dest.narrow(0, 0, read_rows);
    if (format_ == LoadFormat::kDummy) return ops::fill_uniform(part, dummy_fill(spec));
    // Host f32 first (checkpoint conversion, FP8 dequantisation), then the device's dtype.
    Tensor host = Tensor::empty(part.shape(), DType::kF32, MemTag::kWorkspace, host_alloc());
    ckpt_->read_f32(spec.name, spec.full_shape, host.data<float>(), spec.rows, spec.cols);
    if (part.dtype() == DType::kF32) return ops::copy(host, part);
    Tensor staged = Tensor::empty(part.shape(), DType::kF32, MemTag::kWorkspace, alloc_);
    ops::copy(host, staged);
    ops::copy(staged, part);
  }

 private:
  static Allocator& host_alloc() {
    static CpuAllocator a;  // load-time staging, outside every rank's accounting
    return a;
  }

  DType own_dtype(const WeightSpec& spec) const {
    const bool has_scales =
        format_ == LoadFormat::kDummy || (ckpt_ && ckpt_->has(spec.name + "_scale_inv"));
    return weight_dtype(c_, spec, alloc_.device(), has_scales);
  }

  void fill_fp8(const WeightSpec& spec) const {
    Tensor& dest = *spec.dest;
    const int64_t rows = dest.dim(0), cols = dest.dim(1);
    const io::Slice srows{spec.rows.start / 128, scale_blocks(rows)};
    const io::Slice scols{spec.cols.start / 128, scale_blocks(cols)};
    // A group member's scales are its rows of the group's (the group pads them once, at the end).
    Tensor scale =
        spec.group ? spec.group->block_scale()->narrow(0, spec.group_row / 128, srows.len)
                   : Tensor::empty({srows.len, scols.len}, DType::kF32, MemTag::kWeights, alloc_);
    if (!dest.raw()) {  // meta allocator: sizes only, the scales' included
      dest.set_block_scale(std::move(scale));
      if (!spec.group) ops::attach_padded_block_scale(dest, alloc_);
      return;
    }
    if (format_ == LoadFormat::kDummy) {
      // Codes uniform in [-1, 1], one scale per block: values in [-a, a] as the bf16 dummy.
      ops::UniformFill codes = dummy_fill(spec);
      const float a = codes.bound;
      codes.bound = 1.0f;
      ops::fill_uniform(dest, codes);
      ops::fill_uniform(scale, {.seed = 0, .bound = 0.0f, .offset = a});
    } else {
      std::vector<uint8_t> q(static_cast<size_t>(rows * cols));
      ckpt_->read_raw(spec.name, DType::kFP8E4M3, spec.full_shape, q.data(), spec.rows, spec.cols);
      ops::copy(Tensor::wrap(q.data(), dest.shape(), DType::kFP8E4M3), dest);
      std::vector<float> s(static_cast<size_t>(srows.len * scols.len));
      const std::vector<int64_t> scale_shape{scale_blocks(spec.full_shape[0]),
                                             scale_blocks(spec.full_shape[1])};
      ckpt_->read_raw(spec.name + "_scale_inv", DType::kF32, scale_shape, s.data(), srows, scols);
      ops::copy(Tensor::wrap(s.data(), scale.shape(), DType::kF32), scale);
    }
    dest.set_block_scale(std::move(scale));
    // cuBLASLt's padded layout, once, here rather than in every GEMM.
    if (!spec.group) ops::attach_padded_block_scale(dest, alloc_);
  }

  const io::ModelConfig& c_;
  const io::Checkpoint* ckpt_;
  LoadFormat format_;
  Allocator& alloc_;
  std::map<const Tensor*, bool> group_fp8_;  // each fused group: block-FP8
};

// The grouped FP8 expert path's address table for a layer whose routed experts are all
// block-FP8 with widths the grouped kernels take (multiples of 16), on a GPU.
void build_expert_table(LayerWeights& l, Allocator& alloc) {
  if (l.experts.empty() || alloc.device().is_cpu()) return;
  const auto fp8 = [](const Tensor& t) {
    return t.dtype() == DType::kFP8E4M3 && t.block_scale() != nullptr;
  };
  for (const MlpWeights& m : l.experts)
    if (!fp8(m.gate) || !fp8(m.up) || !fp8(m.down)) return;
  if (l.experts[0].gate.dim(1) % 16 != 0 || l.experts[0].gate.dim(0) % 16 != 0) return;
  const auto E = static_cast<int64_t>(l.experts.size());
  l.expert_table = Tensor::empty({ops::kExpertTableRows, E}, DType::kI64, MemTag::kWeights, alloc);
  if (!l.expert_table.raw()) return;  // meta allocator: sizes only
  std::vector<int64_t> host(static_cast<size_t>(ops::kExpertTableRows * E));
  const auto put = [&](int64_t row, int64_t e, const void* p) {
    host[static_cast<size_t>(row * E + e)] = static_cast<int64_t>(reinterpret_cast<intptr_t>(p));
  };
  for (int64_t e = 0; e < E; ++e) {
    const MlpWeights& m = l.experts[static_cast<size_t>(e)];
    put(ops::kGate, e, m.gate.raw());
    put(ops::kGateScale, e, m.gate.block_scale()->raw());
    put(ops::kUp, e, m.up.raw());
    put(ops::kUpScale, e, m.up.block_scale()->raw());
    put(ops::kDown, e, m.down.raw());
    put(ops::kDownScale, e, m.down.block_scale()->raw());
  }
  ops::copy(Tensor::wrap(host.data(), l.expert_table.shape(), DType::kI64), l.expert_table);
}

// A tensor of MTP layer num_hidden_layers + j.
bool is_mtp_tensor(const io::ModelConfig& c, const std::string& name) {
  for (int64_t j = 0; j < c.num_nextn_predict_layers; ++j)
    if (name.starts_with(fmt::format("model.layers.{}.", c.num_hidden_layers + j))) return true;
  return false;
}

}  // namespace

ModelWeights load_weights(const io::ModelConfig& c, const ParallelContext& p,
                          const io::Checkpoint* ckpt, LoadFormat format, Allocator& alloc,
                          const WeightLoadProgress& progress, bool mtp) {
  ModelWeights w;
  std::vector<WeightSpec> table = weight_table(c, p, w, mtp);
  if (format == LoadFormat::kAuto) {
    MLS_CHECK(ckpt != nullptr, "loading weights needs a checkpoint");
    // Validate every name and shape before reading anything: a bad checkpoint fails fast.
    for (const WeightSpec& spec : table) {
      if (mtp && !ckpt->has(spec.name) && is_mtp_tensor(c, spec.name))
        raise<CheckpointError>(
            "MTP tensor {} not found in checkpoint {}: config.json has num_nextn_predict_layers "
            "{}, and speculative decoding (MTP) needs every MTP layer's tensors",
            spec.name, ckpt->dir().string(), c.num_nextn_predict_layers);
      const io::TensorInfo& info = ckpt->info(spec.name);
      if (info.shape != spec.full_shape)
        raise<CheckpointError>("{} in {}: expected shape {}, found {}", spec.name, info.file,
                               Shape(spec.full_shape).str(), Shape(info.shape).str());
    }
  }
  const WeightLoader loader(c, ckpt, format, alloc, table);
  // Fused groups first: one allocation each, sized by its members (a block-FP8 group's scales
  // too); members become row views.
  std::vector<Tensor*> groups;
  for (const WeightSpec& spec : table)
    if (spec.group && !spec.group->defined()) {
      int64_t rows = 0;
      for (const WeightSpec& m : table)
        if (m.group == spec.group) rows = std::max(rows, m.group_row + m.local_shape[0]);
      const int64_t cols = spec.local_shape[1];
      *spec.group = Tensor::empty({rows, cols}, loader.dtype_of(spec), MemTag::kWeights, alloc);
      if (spec.group->dtype() == DType::kFP8E4M3)
        spec.group->set_block_scale(Tensor::empty({scale_blocks(rows), scale_blocks(cols)},
                                                  DType::kF32, MemTag::kWeights, alloc));
      groups.push_back(spec.group);
    }
  // This rank's share of a tensor's stored bytes.
  const auto spec_bytes = [&](const WeightSpec& spec) {
    int64_t local = 1;
    for (int64_t d : spec.local_shape) local *= d;
    if (format != LoadFormat::kAuto)
      return local * static_cast<int64_t>(dtype_size(loader.dtype_of(spec)));
    const io::TensorInfo& info = ckpt->info(spec.name);
    return static_cast<int64_t>(static_cast<double>(info.nbytes) * static_cast<double>(local) /
                                static_cast<double>(std::max<int64_t>(info.numel(), 1)));
  };
  int64_t total = 0, done = 0;
  if (progress) {
    for (const WeightSpec& spec : table) total += spec_bytes(spec);
    progress(p.rank, 0, total);
  }
  for (const WeightSpec& spec : table) {
    const bool padded = spec.rows.len >= 0 && spec.rows.len < spec.local_shape[0];
    *spec.dest = spec.group ? spec.group->narrow(0, spec.group_row, spec.local_shape[0])
                 : padded   ? Tensor::zeros(Shape(spec.local_shape), loader.dtype_of(spec),
                                            MemTag::kWeights, alloc)
                            : Tensor::empty(Shape(spec.local_shape), loader.dtype_of(spec),
                                            MemTag::kWeights, alloc);
    loader.fill(spec);
    if (progress) {
      done += spec_bytes(spec);
      progress(p.rank, done, total);
    }
  }
  // cuBLASLt's padded scale layout of each block-FP8 group, once its members are in.
  for (Tensor* g : groups) ops::attach_padded_block_scale(*g, alloc);
  for (LayerWeights& l : w.layers) build_expert_table(l, alloc);
  for (MtpWeights& m : w.mtp) build_expert_table(m.block, alloc);
  return w;
}

}  // namespace mls
