// Tiled softmax attention for every query row of a step: scores are produced one query row (or
// tile) at a time, so no [heads × T × S] tensor ever exists. Covers both MLA formulations:
//   expanded:  q [T, H, Dk], k [S, H, Dk], v [S, H, Dv]
//   absorbed:  q [T, H, Dk], k [rows, 1, Dk], v [rows, 1, Dv]   (one latent "head")
// Query t attends to key positions j <= q_pos[t] of its own sequence (and, with `allowed`
// [T, K] i32 (−1 = unused slot), only to the positions listed in row t). Key position j of
// query t lives in row j of k and v, or with paged keys in row
// block_tables[token_seq[t], j / block_size] · block_size + j % block_size, so attention reads
// the cache in place and needs no memory proportional to the context. All tensors, including
// the paging tables, live on the output's device.
#pragma once

#include <algorithm>
#include <utility>

#include "ops/dispatch.h"

namespace mls::ops {

// Paged addressing for a whole step. Unset (block_tables null): key j is row j.
struct PagedKeys {
  const Tensor* block_tables = nullptr;  // i32 [num_seqs, max_blocks]
  const Tensor* token_seq = nullptr;     // i32 [T]: each query row's sequence
  int64_t block_size = 0;
  // Host-known bound on any query's key count (and indexer row length), for sizing launches and
  // scratch without reading the device; 0 with unpaged keys (k.dim(0) then).
  int64_t max_keys = 0;
};

struct AttentionArgs {
  float scale = 1.0f;
  const Tensor* allowed = nullptr;  // optional sparse index lists [T, K]
  PagedKeys pages;
  // One cut for every step, whatever its size (ops/scratch_sizes.h, attention_splits), so a
  // query's bits depend on nothing else in its step. The CPU computes each query alone anyway;
  // the GPU otherwise cuts small steps finer.
  bool batch_invariant = false;
};

namespace cpu {
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos,
               const AttentionArgs& args, Tensor& out);
}
namespace cuda {
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos,
               const AttentionArgs& args, Tensor& out);
}

// The host bound on any query's key count: the paged tables' reach, capped by max_keys, or
// the key rows themselves.
inline int64_t key_bound(const PagedKeys& pages, int64_t rows) {
  if (!pages.block_tables) return rows;
  return std::min(pages.max_keys, pages.block_tables->dim(1) * pages.block_size);
}

// Device scratch of one call: fp32 partials of split queries (ops/scratch_sizes.h).
inline ScratchPlan attention_scratch(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const AttentionArgs& args) {
  const int64_t n_list = args.allowed ? args.allowed->dim(1) : key_bound(args.pages, k.dim(0));
  return {{{scratch::attention_splits(q.dim(0), q.dim(1), k.dim(1), v.dim(2), n_list,
                                      args.allowed != nullptr, args.batch_invariant)
                .floats,
            DType::kF32, MemTag::kActivation},
           {}}};
}

// Paged keys for T query rows: block_tables i32 [num_seqs, max_blocks] with unit inner stride
// (rows may be apart), token_seq contiguous i32 [T], block_size and max_keys >= 1, all on the
// output's device.
inline void paged_keys_contract(const Contract& c, const PagedKeys& pages, int64_t T) {
  if (!pages.block_tables) return;
  const Tensor& bt = *pages.block_tables;
  c.rows("block_tables", bt, 2);
  c.dtype("block_tables", bt, {DType::kI32});
  c.on_device("block_tables", bt);
  if (!pages.token_seq) c.fail("token_seq", Tensor(), "given with block_tables");
  c.index("token_seq", *pages.token_seq, T);
  c.need(pages.block_size >= 1 && pages.max_keys >= 1, "block_tables", bt,
         "paged with block_size ({}) and max_keys ({}) >= 1", pages.block_size, pages.max_keys);
}

// q [T, H, Dk], k [rows, Hk, Dk], v [rows, Hk, Dv] (Hk 1 or H), out [T, H, Dv], all with unit
// inner stride; q_pos contiguous i32 [T]; allowed contiguous i32 [T, K]; one device, out apart
// from the inputs. CPU: f32; GPU: bf16.
inline void attention_contract(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& q_pos, const AttentionArgs& args, const Tensor& out) {
  const Contract c("attention", out);
  c.rows("q", q, 3);
  c.rows("k", k, 3);
  c.rows("v", v, 3);
  c.rows("out", out, 3);
  const int64_t T = q.dim(0), H = q.dim(1);
  c.need(k.dim(2) == q.dim(2) && (k.dim(1) == 1 || k.dim(1) == H), "k", k, "[rows, 1 or {}, {}]", H,
         q.dim(2));
  c.need(v.dim(0) == k.dim(0) && v.dim(1) == k.dim(1), "v", v, "[{}, {}, Dv]", k.dim(0), k.dim(1));
  c.need(out.dim(0) == T && out.dim(1) == H && out.dim(2) == v.dim(2), "out", out, "[{}, {}, {}]",
         T, H, v.dim(2));
  c.index("q_pos", q_pos, T);
  if (const Tensor* a = args.allowed) {
    c.index("allowed", *a, -1);
    c.need(a->ndim() == 2 && a->dim(0) == T, "allowed", *a, "[{}, K]", T);
  }
  paged_keys_contract(c, args.pages, T);
  for (const auto& [name, t] :
       {std::pair<const char*, const Tensor*>{"q", &q}, {"k", &k}, {"v", &v}}) {
    c.activation(name, *t, false);
    c.on_device(name, *t);
    c.disjoint("out", out, name, *t);
  }
  c.activation("out", out, false);
}

inline void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos,
                      const AttentionArgs& args, Tensor& out) {
  MLS_DISPATCH_SCRATCH(out, attention_scratch(q, k, v, args), attention, q, k, v, q_pos, args, out);
}

}  // namespace mls::ops
