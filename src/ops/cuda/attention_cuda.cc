#include <algorithm>

#include "core/cuda_context.h"
#include "ops/attention.h"
#include "ops/cuda/attention_kernels.h"

namespace mls::ops::cuda {
namespace {

void check_index(const char* what, const Tensor* t, int64_t rows, const Tensor& out) {
  if (t->dtype() != DType::kI32 || t->device() != out.device())
    raise<ShapeError>("attention: {} {} must be i32 on {}", what, t->str(), out.device().str());
  if (rows >= 0 && (t->numel() != rows || !t->is_contiguous()))
    raise<ShapeError>("attention: {} {} must be contiguous [{}]", what, t->str(), rows);
}

}  // namespace

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos,
               const AttentionArgs& args, Tensor& out) {
  if (q.ndim() != 3 || k.ndim() != 3 || v.ndim() != 3 || out.ndim() != 3)
    raise<ShapeError>("attention: q {} k {} v {} out {} must be 3-d", q.str(), k.str(), v.str(),
                      out.str());
  const int64_t T = q.dim(0), H = q.dim(1), Dk = q.dim(2), Hk = k.dim(1), Dv = v.dim(2);
  if (k.dim(2) != Dk || v.dim(0) != k.dim(0) || v.dim(1) != Hk || (Hk != 1 && Hk != H) ||
      out.dim(0) != T || out.dim(1) != H || out.dim(2) != Dv || q.stride(2) != 1 ||
      k.stride(2) != 1 || v.stride(2) != 1 || out.stride(2) != 1)
    raise<ShapeError>("attention: q {} k {} v {} out {} do not fit", q.str(), k.str(), v.str(),
                      out.str());
  for (const Tensor* t : {&q, &k, &v, static_cast<const Tensor*>(&out)})
    if (t->dtype() != DType::kBF16 || t->device().is_cpu() || t->device() != out.device())
      raise<ShapeError>("attention: q {} k {} v {} out {} must be bf16 on one GPU", q.str(),
                        k.str(), v.str(), out.str());
  check_index("q_pos", &q_pos, T, out);

  kernels::AttentionParams p;
  p.q = q.raw();
  p.q_st = q.stride(0);
  p.q_sh = q.stride(1);
  p.k = k.raw();
  p.k_sr = k.stride(0);
  p.k_sh = k.stride(1);
  p.v = v.raw();
  p.v_sr = v.stride(0);
  p.v_sh = v.stride(1);
  p.out = out.raw();
  p.o_st = out.stride(0);
  p.o_sh = out.stride(1);
  p.q_pos = q_pos.data<int32_t>();
  p.num_rows = k.dim(0);
  p.T = static_cast<int>(T);
  p.H = static_cast<int>(H);
  p.Hk = static_cast<int>(Hk);
  p.Dk = static_cast<int>(Dk);
  p.Dv = static_cast<int>(Dv);
  p.scale = args.scale;
  if (const Tensor* a = args.allowed) {
    check_index("allowed", a, -1, out);
    if (a->ndim() != 2 || a->dim(0) != T || !a->is_contiguous())
      raise<ShapeError>("attention: allowed {} must be contiguous [{}, K]", a->str(), T);
    p.allowed = a->data<int32_t>();
    p.allowed_k = a->dim(1);
  }
  const PagedKeys& pg = args.pages;
  if (pg.block_tables) {
    const Tensor& bt = *pg.block_tables;
    check_index("block_tables", &bt, -1, out);
    if (bt.ndim() != 2 || bt.stride(1) != 1)
      raise<ShapeError>(
          "attention: block_tables {} must be [num_seqs, max_blocks] with unit "
          "inner stride",
          bt.str());
    if (!pg.token_seq) raise<ShapeError>("attention: paged keys need token_seq");
    check_index("token_seq", pg.token_seq, T, out);
    if (pg.block_size < 1 || pg.max_keys < 1)
      raise<ShapeError>("attention: paged keys need block_size ({}) and max_keys ({}) >= 1",
                        pg.block_size, pg.max_keys);
    p.block_tables = bt.data<int32_t>();
    p.bt_ld = bt.stride(0);
    p.num_seqs = bt.dim(0);
    p.max_blocks = bt.dim(1);
    p.token_seq = pg.token_seq->data<int32_t>();
    p.block_size = pg.block_size;
    p.key_bound = std::min(pg.max_keys, bt.dim(1) * pg.block_size);
  } else {
    p.key_bound = k.dim(0);
  }
  if (T == 0) return;

  size_t floats = 0;
  mls::cuda::check(kernels::attention_scratch(p, &floats), "attention plan");
  Tensor scratch;
  if (floats > 0)
    scratch = Tensor::empty({static_cast<int64_t>(floats)}, DType::kF32, MemTag::kActivation,
                            mls::cuda::allocator());
  mls::cuda::check(kernels::launch_attention(p, floats > 0 ? scratch.data<float>() : nullptr,
                                             mls::cuda::stream()),
                   "attention");
}

int64_t attention_scratch_bytes(int64_t T, int64_t H, int64_t Dk, int64_t Dv, int64_t max_keys) {
  kernels::AttentionParams p;
  p.T = static_cast<int>(T);
  p.H = static_cast<int>(H);
  p.Dk = static_cast<int>(Dk);
  p.Dv = static_cast<int>(Dv);
  p.key_bound = max_keys;
  size_t floats = 0;
  mls::cuda::check(kernels::attention_scratch(p, &floats), "attention plan");
  return static_cast<int64_t>(floats * sizeof(float));
}

}  // namespace mls::ops::cuda
