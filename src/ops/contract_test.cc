// Each op's contract is checked once, by the dispatcher, before any backend: a violation raises
// the same typed error on the CPU (real tensors) and in meta mode for a CUDA device (meta tensors,
// no GPU needed), so a plan made in meta mode never passes a call that a real step would reject.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "ops/attention.h"
#include "ops/cache_write.h"
#include "ops/copy.h"
#include "ops/elementwise.h"
#include "ops/indexer_topk.h"
#include "ops/linear.h"
#include "ops/moe_experts.h"
#include "ops/moe_routing.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ops/sampling.h"

namespace mls::ops {
namespace {

// Tensors of one device: real zeros on the CPU (f32 activations), meta on a GPU (bf16).
struct Maker {
  Allocator& alloc;
  DType act;
  std::string label;

  Tensor make(const Shape& s, DType d) const {
    return Tensor::zeros(s, d, MemTag::kActivation, alloc);
  }
  Tensor a(const Shape& s) const { return make(s, act); }
  Tensor f32(const Shape& s) const { return make(s, DType::kF32); }
  // i32 filled with `v` where the tensor has memory (index values a real call reads).
  Tensor i32(const Shape& s, int32_t v = 0) const {
    Tensor t = make(s, DType::kI32);
    if (t.raw())
      for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = v;
    return t;
  }
};

struct Case {
  const char* op;
  // Calls the op validly (bad = false) or with one contract violation.
  std::function<void(const Maker&, bool bad)> call;
  // What the error must name: "op: operand".
  std::string names;
};

std::vector<Case> cases() {
  const RopeTable rope(RopeParamsF{}, 8);
  return {
      {"linear",
       [](const Maker& m, bool bad) {
         Tensor y = m.a({3, bad ? 5 : 4});
         linear(m.a({3, 6}), m.a({4, 6}), y);
       },
       "linear: y"},
      {"linear_batched",
       [](const Maker& m, bool bad) {
         Tensor y = m.a({3, 2, bad ? 5 : 4});
         linear_batched(m.a({3, 2, 6}), m.a({2, 4, 6}), y);
       },
       "linear_batched: y"},
      {"rms_norm",
       [](const Maker& m, bool bad) {
         Tensor y = m.a({2, 8});
         rms_norm(m.a({2, 8}), m.f32({bad ? 7 : 8}), 1e-6f, y);
       },
       "rms_norm: w"},
      {"layer_norm",
       [](const Maker& m, bool bad) {
         Tensor y = m.a({2, 8});
         layer_norm(m.a({2, 8}), m.f32({8}), m.f32({bad ? 7 : 8}), 1e-6f, y);
       },
       "layer_norm: b"},
      {"add_rms_norm",
       [](const Maker& m, bool bad) {
         Tensor x = m.a({2, 8}), y = m.a({2, 8});
         add_rms_norm(x, m.a({bad ? 3 : 2, 8}), m.f32({8}), 1e-6f, y);
       },
       "add_rms_norm: delta"},
      {"silu_mul",
       [](const Maker& m, bool bad) {
         Tensor out = m.a({2, 8});
         silu_mul(m.a({2, 8}), m.a({2, bad ? 4 : 8}), out);
       },
       "silu_mul: b"},
      {"add",
       [](const Maker& m, bool bad) {
         Tensor out = m.a({2, 8});
         add(m.a({2, 8}), bad ? m.make({2, 8}, DType::kI32) : m.a({2, 8}), out);
       },
       "add: b"},
      {"scale",
       [](const Maker& m, bool bad) {
         Tensor out = m.a({bad ? 3 : 2, 8});
         scale(m.a({2, 8}), 2.0f, out);
       },
       "scale: out"},
      {"embedding",
       [](const Maker& m, bool bad) {
         Tensor out = m.a({3, bad ? 5 : 4});
         embedding(m.a({10, 4}), m.i32({3}), 0, out);
       },
       "embedding: out"},
      {"fill_uniform",
       [](const Maker& m, bool bad) {
         Tensor out = bad ? m.f32({2, 2, 2}) : m.f32({2, 4});
         fill_uniform(out, UniformFill{});
       },
       "fill_uniform: out"},
      {"apply_rope",
       [rope](const Maker& m, bool bad) {
         Tensor x = m.a({2, 3, 16});
         apply_rope(x, 4, m.i32({bad ? 3 : 2}), rope, RopeStyle::kHalfSplit);
       },
       "apply_rope: positions"},
      {"latent_cache_write",
       [rope](const Maker& m, bool bad) {
         Tensor cache = m.a({6, bad ? 23 : 24});
         latent_cache_write(m.a({2, 24}), m.f32({16}), 1e-6f, m.i32({2}), m.i32({2}), rope,
                            RopeStyle::kInterleaved, cache);
       },
       "latent_cache_write: cache"},
      {"indexer_key_write",
       [rope](const Maker& m, bool bad) {
         Tensor cache = m.a({6, 16}), key = m.a({bad ? 3 : 2, 16});
         indexer_key_write(m.a({2, 16}), m.f32({16}), m.f32({16}), 1e-6f, m.i32({2}), m.i32({2}),
                           rope, RopeStyle::kHalfSplit, cache, &key);
       },
       "indexer_key_write: key"},
      {"attention",
       [](const Maker& m, bool bad) {
         Tensor out = m.a({2, bad ? 3 : 4, 8});
         attention(m.a({2, 4, 16}), m.a({5, 1, 16}), m.a({5, 1, 8}), m.i32({2}), {}, out);
       },
       "attention: out"},
      {"attention (paged)",
       [](const Maker& m, bool bad) {
         Tensor out = m.a({2, 4, 8});
         const Tensor tables = m.i32({3, 4}), seq = m.i32({bad ? 1 : 2});
         AttentionArgs args;
         args.pages = {&tables, &seq, 2, 8};
         attention(m.a({2, 4, 16}), m.a({8, 1, 16}), m.a({8, 1, 8}), m.i32({2}), args, out);
       },
       "attention: token_seq"},
      {"indexer_topk",
       [](const Maker& m, bool bad) {
         Tensor chosen = m.i32({2, 4});
         indexer_topk(m.a({2, 3, 16}), m.a({6, 16}), m.f32({2, bad ? 2 : 3}), m.i32({2}),
                      m.i32({2}, 1), 1.0f, {}, TopkTieOrder::kServing, chosen);
       },
       "indexer_topk: w"},
      {"moe_route",
       [](const Maker& m, bool bad) {
         Tensor ids = m.i32({3, bad ? 3 : 2}), w = m.f32({3, 2});
         moe_route(m.f32({3, 8}), Tensor(), {2, 1, 2, true, 1.0f}, ids, w);
       },
       "moe_route: ids"},
      {"moe_align",
       [](const Maker& m, bool bad) {
         Tensor src = m.i32({6}), dest = m.i32({3, 2}), off = m.i32({bad ? 8 : 9});
         moe_align(m.i32({3, 2}), 8, src, dest, off);
       },
       "moe_align: offsets"},
      {"moe_unpermute",
       [](const Maker& m, bool bad) {
         Tensor out = m.a({3, 8});
         moe_unpermute(m.a({6, 8}), m.i32({3, 2}), m.f32({3, bad ? 1 : 2}), out);
       },
       "moe_unpermute: weights"},
      {"copy",
       [](const Maker& m, bool bad) {
         Tensor dst = m.a({2, bad ? 3 : 4});
         copy(m.a({2, 4}), dst);
       },
       "copy: dst"},
      {"scatter_rows",
       [](const Maker& m, bool bad) {
         Tensor dst = m.a({5, 4});
         scatter_rows(m.a({2, 4}), m.i32({bad ? 3 : 2}), dst);
       },
       "scatter_rows: rows"},
      {"gather_rows",
       [](const Maker& m, bool bad) {
         Tensor dst = m.a({2, 4});
         gather_rows(m.a({5, bad ? 3 : 4}), m.i32({2}), dst);
       },
       "gather_rows: dst"},
      {"sample_rows",
       [](const Maker& m, bool bad) {
         Tensor ids = m.i32({bad ? 3 : 2}), lp = m.f32({2});
         sample_rows(m.f32({2, 10}), std::vector<RowSampling>(2), ids, lp);
       },
       "sample_rows: ids"},
      {"apply_token_mask",
       [](const Maker& m, bool bad) {
         Tensor logits = m.f32({2, 40});
         apply_token_mask(logits, m.i32({2, bad ? 1 : 2}, -1));
       },
       "apply_token_mask: mask"},
  };
}

class ContractTest : public ::testing::Test {
 protected:
  MetaAllocator gpu_meta_{Device::cuda(0)};
  std::vector<Maker> makers_{{default_allocator(), DType::kF32, "cpu"},
                             {gpu_meta_, DType::kBF16, "cuda meta"}};
};

TEST_F(ContractTest, EveryOpRejectsAViolationAlikeOnTheCpuAndInMetaModeForAGpu) {
  for (const Case& c : cases())
    for (const Maker& m : makers_) {
      SCOPED_TRACE(std::string(c.op) + " on " + m.label);
      EXPECT_NO_THROW(c.call(m, false));
      try {
        c.call(m, true);
        ADD_FAILURE() << "no error";
      } catch (const ShapeError& e) {
        EXPECT_NE(std::string(e.what()).find(c.names), std::string::npos) << e.what();
      }
    }
}

// Operands on two devices, or in a dtype the device's backend does not compute in, are rejected
// before any backend (and in meta mode) alike.
TEST_F(ContractTest, DevicesAndDtypesAreChecked) {
  Tensor host_w = Tensor::zeros({4, 6}, DType::kBF16, MemTag::kWeights);
  const Maker& gpu = makers_[1];
  Tensor y = gpu.a({3, 4});
  try {
    linear(gpu.a({3, 6}), host_w, y);
    ADD_FAILURE() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("linear: W must be on cuda:0"), std::string::npos)
        << e.what();
  }
  for (const Maker& m : makers_) {
    SCOPED_TRACE(m.label);
    // bf16 is not what the CPU computes in, f32 not what the GPU's attention reads.
    const DType wrong = m.act == DType::kF32 ? DType::kBF16 : DType::kF32;
    Tensor out = m.a({2, 4, 8});
    EXPECT_THROW(
        attention(m.make({2, 4, 16}, wrong), m.a({5, 1, 16}), m.a({5, 1, 8}), m.i32({2}), {}, out),
        ShapeError);
  }
}

// The indexer's scale is positive (the GPU kernels take it into the head weights through the
// ReLU), refused otherwise on every device alike.
TEST_F(ContractTest, IndexerScaleMustBePositive) {
  for (const Maker& m : makers_)
    for (float scale : {0.0f, -0.25f}) {
      SCOPED_TRACE(m.label + " at " + std::to_string(scale));
      Tensor chosen = m.i32({2, 4});
      try {
        indexer_topk(m.a({2, 3, 16}), m.a({6, 16}), m.f32({2, 3}), m.i32({2}), m.i32({2}, 1), scale,
                     {}, TopkTieOrder::kServing, chosen);
        ADD_FAILURE() << "no error";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("indexer_topk: scale must be positive"),
                  std::string::npos)
            << e.what();
      }
    }
}

// A block-FP8 weight needs its block scales (and, for a K whose block count is not a multiple
// of 4, their padded copy made at load): a meta plan for a GPU checks it as the GPU op would.
TEST_F(ContractTest, Fp8WeightsNeedTheirScalesInMetaModeToo) {
  const Maker& gpu = makers_[1];
  Tensor x = gpu.a({4, 384}), y = gpu.a({4, 256});
  Tensor w = gpu.make({256, 384}, DType::kFP8E4M3);
  EXPECT_THROW(linear(x, w, y), ShapeError);  // no block scales
  w.set_block_scale(gpu.f32({2, 3}));
  EXPECT_THROW(linear(x, w, y), ShapeError);  // 3 K blocks: the padded copy is missing
  attach_padded_block_scale(w, gpu_meta_);
  EXPECT_NO_THROW(linear(x, w, y));
  Tensor y32 = gpu.f32({4, 256});
  EXPECT_THROW(linear(x, w, y32), ShapeError);  // FP8 W writes bf16
}

// The FP8 experts run on a GPU only; their contract holds in meta mode there.
TEST_F(ContractTest, MoeExpertsFp8) {
  const ExpertShapes s{.hidden = 32, .inter = 16, .gate_up_scale_ld = 1, .down_scale_ld = 1};
  // y's width, then dest_row with x's 6 pairs but not one row per token.
  for (const int bad : {0, 1, 2}) {
    const Maker& gpu = makers_[1];
    Tensor h = gpu.a({6, 16}), y = gpu.a({6, bad == 1 ? 16 : 32});
    const auto call = [&] {
      moe_experts_fp8(gpu.a({3, 32}), bad == 2 ? gpu.i32({2, 3}) : gpu.i32({3, 2}), gpu.i32({5}),
                      gpu.make({kExpertTableRows, 4}, DType::kI64), s, h, y);
    };
    if (bad)
      EXPECT_THROW(call(), ShapeError) << bad;
    else
      EXPECT_NO_THROW(call());
  }
  const Maker& cpu = makers_[0];
  Tensor h = cpu.a({6, 16}), y = cpu.a({6, 32});
  EXPECT_THROW(moe_experts_fp8(cpu.a({3, 32}), cpu.i32({3, 2}), cpu.i32({5}),
                               cpu.make({kExpertTableRows, 4}, DType::kI64), s, h, y),
               Unsupported);
}

// The fused cache writes name the operand at fault, on the CPU and in meta mode for a GPU alike.
TEST_F(ContractTest, CacheWritesRejectEachMisfit) {
  const RopeTable rope(RopeParamsF{}, 8);
  for (const Maker& m : makers_) {
    SCOPED_TRACE(m.label);
    const auto latent = [&](const Tensor& kv, const Tensor& w, const Tensor& pos,
                            const Tensor& slots, const RopeTable& table, Tensor cache) {
      latent_cache_write(kv, w, 1e-6f, pos, slots, table, RopeStyle::kInterleaved, cache);
    };
    const auto expect = [](const std::function<void()>& call, const std::string& names) {
      try {
        call();
        ADD_FAILURE() << "no error for " << names;
      } catch (const ShapeError& e) {
        EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
      }
    };
    const Tensor kv = m.a({2, 24}), w = m.f32({16}), pos = m.i32({2}), slots = m.i32({2});
    const Tensor cache = m.a({6, 24});
    EXPECT_NO_THROW(latent(kv, w, pos, slots, rope, cache));
    expect([&] { latent(kv, m.f32({15}), pos, slots, rope, cache); }, "latent_cache_write: norm_w");
    expect([&] { latent(kv, m.make({16}, DType::kI32), pos, slots, rope, cache); },
           "latent_cache_write: norm_w");
    expect([&] { latent(kv, w, pos, slots, RopeTable(RopeParamsF{}, 7), cache); },
           "latent_cache_write: kv");
    expect([&] { latent(kv, w, pos, slots, RopeTable(RopeParamsF{}, 16), cache); },
           "latent_cache_write: norm_w");
    expect(
        [&] {
          latent(m.a({2, 4}), w, pos, slots, rope, m.a({6, 4}));
        },
        "latent_cache_write: kv");
    expect([&] { latent(kv, w, m.i32({3}), slots, rope, cache); }, "latent_cache_write: positions");
    expect([&] { latent(kv, w, pos, m.f32({2}), rope, cache); }, "latent_cache_write: slots");
    expect(
        [&] {
          latent(kv, w, pos, slots, rope, m.make({6, 24}, DType::kI32));
        },
        "latent_cache_write: cache");
    expect(
        [&] {
          latent(kv.view({2, 2, 12}), w, pos, slots, rope, cache);
        },
        "latent_cache_write: kv");

    const auto index = [&](const Tensor& x, const Tensor& b, const Tensor& pos_, Tensor cache_,
                           Tensor* key) {
      indexer_key_write(x, m.f32({16}), b, 1e-6f, pos_, slots, rope, RopeStyle::kHalfSplit, cache_,
                        key);
    };
    const Tensor x = m.a({2, 16}), b = m.f32({16});
    Tensor key = m.a({2, 16});
    EXPECT_NO_THROW(index(x, b, pos, m.a({6, 16}), &key));
    EXPECT_NO_THROW(index(x, b, pos, m.a({6, 16}), nullptr));
    expect([&] { index(x, m.f32({8}), pos, m.a({6, 16}), nullptr); }, "indexer_key_write: norm_b");
    expect([&] { index(m.a({2, 6}), b, pos, m.a({6, 6}), nullptr); }, "indexer_key_write: x");
    expect([&] { index(x, b, m.i32({1}), m.a({6, 16}), nullptr); }, "indexer_key_write: positions");
    expect([&] { index(x, b, pos, m.a({6, 12}), nullptr); }, "indexer_key_write: cache");
    Tensor wrong_key = m.make({2, 16}, m.act == DType::kF32 ? DType::kBF16 : DType::kF32);
    expect([&] { index(x, b, pos, m.a({6, 16}), &wrong_key); }, "indexer_key_write: key");
  }
  // Where tensors have memory: the cache may not be the input.
  Tensor buf = Tensor::zeros({2, 24}, DType::kF32, MemTag::kActivation);
  Tensor same = buf;
  EXPECT_THROW(latent_cache_write(buf, Tensor::zeros({16}, DType::kF32, MemTag::kWeights), 1e-6f,
                                  Tensor::zeros({2}, DType::kI32, MemTag::kActivation),
                                  Tensor::zeros({2}, DType::kI32, MemTag::kActivation), rope,
                                  RopeStyle::kInterleaved, same),
               ShapeError);
}

// Aliasing: a GEMM cannot write into its own input; interleaved column slices of one buffer
// are apart. (Checked where tensors have memory.)
TEST_F(ContractTest, LinearOutputMustNotAliasItsInput) {
  Tensor buf = Tensor::zeros({4, 8}, DType::kF32, MemTag::kActivation);
  Tensor w = Tensor::zeros({4, 4}, DType::kF32, MemTag::kWeights);
  Tensor left = buf.narrow(1, 0, 4), right = buf.narrow(1, 4, 4);
  EXPECT_NO_THROW(linear(left, w, right));
  Tensor x = buf.view({8, 4}).narrow(0, 0, 4), y = buf.view({8, 4}).narrow(0, 2, 4);
  EXPECT_THROW(linear(x, w, y), ShapeError);  // rows 2..3 are both
  EXPECT_THROW(linear(left, w, left), ShapeError);
}

}  // namespace
}  // namespace mls::ops
