#include "model/step_context.h"

#include <algorithm>

#include "core/error.h"
#include "ops/copy.h"
#include "ops/rope.h"

namespace mls {

ModelConstants ModelConstants::make(const io::ModelConfig& c, const ParallelContext& p,
                                    Device device, ops::TopkTieOrder topk_tie_order,
                                    bool batch_invariant) {
  if (batch_invariant && c.quant.fp8 && !device.is_cpu())
    raise<Unsupported>(
        "batch invariance on {}: block-FP8 GEMMs and experts choose their kernels by the step's "
        "token count, so a token's bits would depend on its step; serve a bf16 checkpoint, or "
        "run without --batch-invariant",
        device.str());
  ModelConstants k;
  k.topk_tie_order = topk_tie_order;
  k.batch_invariant = batch_invariant;
  ops::RopeParamsF rp;
  rp.theta = c.rope.theta;
  rp.yarn = c.rope.type == "yarn";
  rp.factor = c.rope.factor;
  rp.original_max_position_embeddings =
      static_cast<double>(c.rope.original_max_position_embeddings);
  rp.beta_fast = c.rope.beta_fast;
  rp.beta_slow = c.rope.beta_slow;
  // transformers treats an mscale of 0 as absent.
  rp.has_mscale = c.rope.mscale.has_value() && *c.rope.mscale != 0;
  rp.has_mscale_all_dim = c.rope.mscale_all_dim.has_value() && *c.rope.mscale_all_dim != 0;
  rp.mscale = c.rope.mscale.value_or(0);
  rp.mscale_all_dim = c.rope.mscale_all_dim.value_or(0);
  if (rp.yarn && rp.original_max_position_embeddings <= 0)
    rp.original_max_position_embeddings = static_cast<double>(c.max_position_embeddings);
  k.rope = ops::RopeTable(rp, static_cast<int>(c.qk_rope_head_dim));
  k.mla_rope_style =
      c.mla_rope_interleaved ? ops::RopeStyle::kInterleaved : ops::RopeStyle::kHalfSplit;
  k.indexer_rope_style =
      c.indexer_rope_interleaved ? ops::RopeStyle::kInterleaved : ops::RopeStyle::kHalfSplit;
  double scale = 1.0 / std::sqrt(static_cast<double>(c.qk_head_dim()));
  if (rp.yarn && rp.has_mscale_all_dim) {
    const double m = ops::yarn_mscale(rp.factor, rp.mscale_all_dim);
    scale *= m * m;
  }
  k.softmax_scale = static_cast<float>(scale);
  k.local_heads = c.num_attention_heads / p.tp_size;
  k.local_vocab = (c.vocab_size + p.tp_size - 1) / p.tp_size;
  k.vocab_start = p.rank * k.local_vocab;
  k.act = activation_dtype(device);
  return k;
}

DType activation_dtype(Device device) {
  return device.is_cpu() ? DType::kF32 : DType::kBF16;
}

static int64_t max_blocks_of(const ForwardBatch& b, int64_t bs) {
  int64_t m = 1;
  for (const SequenceChunk& sc : b.seqs)
    m = std::max(m, (sc.num_cached + sc.num_new + bs - 1) / bs);
  return m;
}

namespace {

thread_local StepStaging* t_bound = nullptr;

// Columns of the block tables a step uploads: all of the fixed tables' in a graph step, else its
// own.
int64_t upload_cols(const StepStaging& st, const StepContext::TableShape& table,
                    int64_t max_blocks) {
  return st.full_reach_keys > 0 && table.rows > 0 ? table.cols : max_blocks;
}

}  // namespace

void StepStaging::reserve(int64_t tokens, int64_t table_rows, int64_t table_cols, bool pinned) {
  index.wait_writable();
  tables.wait_writable();
  pinned_ = pinned;
  index = HostBuffer(4 * index_elems_for(tokens), pinned);
  tables = HostBuffer(4 * table_rows * table_cols, pinned);
}

void StepStaging::make_room(int64_t index_n, int64_t table_n) {
  index.wait_writable();
  tables.wait_writable();
  if (index.bytes() < 4 * index_n) index = HostBuffer(4 * index_n, pinned_);
  if (tables.bytes() < 4 * table_n) tables = HostBuffer(4 * table_n, pinned_);
}

void StepStaging::mark_uploaded() {
  index.mark_read_by_stream();
  tables.mark_read_by_stream();
}

void StepStaging::bind(StepStaging* staging) {
  t_bound = staging;
}

StepStaging& StepStaging::current() {
  if (t_bound) return *t_bound;
  thread_local StepStaging own;
  return own;
}

int64_t StepContext::index_elems(const ForwardBatch& b, int64_t local_rows) {
  return 4 * b.num_tokens() + local_rows + b.num_logit_rows();
}

int64_t StepContext::stage(const ForwardBatch& b, int64_t bs, const TableShape& table,
                           int64_t first_row, int64_t local_rows, StepStaging& st) {
  const int64_t N = b.num_tokens(), S = static_cast<int64_t>(b.seqs.size());
  const int64_t max_blocks = max_blocks_of(b, bs);
  if (table.rows > 0 && (S > table.rows || max_blocks > table.cols))
    raise<InternalError>("a step of {} sequences of up to {} blocks outgrows the block tables {}",
                         S, max_blocks, Shape{table.rows, table.cols}.str());
  const int64_t cols = upload_cols(st, table, max_blocks);
  st.make_room(index_elems(b, local_rows), S * cols);
  // The index tables in the device buffer's layout: positions, slots, token_seq, index_row_len,
  // local ids, logit rows; the block tables apart (they grow with the context, not the batch).
  int32_t* pos = st.index.data<int32_t>();
  int32_t* slot = pos + N;
  int32_t* seq_of = slot + N;
  int32_t* row_len = seq_of + N;
  int32_t* ids = row_len + N;
  int32_t* logit = ids + local_rows;
  int32_t* tables = st.tables.data<int32_t>();
  int64_t max_keys = 0, row = 0, r = 0;
  for (int64_t s = 0; s < S; ++s) {
    const SequenceChunk& sc = b.seqs[s];
    const int64_t seq_start = row;
    const int64_t total = sc.num_cached + sc.num_new;
    const int64_t need_blocks = (total + bs - 1) / bs;
    if (static_cast<int64_t>(sc.block_table.size()) < need_blocks)
      raise<InternalError>("sequence {} covers {} tokens with {} blocks of {}", s, total,
                           sc.block_table.size(), bs);
    std::copy_n(sc.block_table.begin(), need_blocks, tables + s * cols);
    std::fill(tables + s * cols + need_blocks, tables + (s + 1) * cols, 0);
    const int64_t prompt = sc.prompt_len > 0 ? sc.prompt_len : total;
    max_keys = std::max({max_keys, total, prompt});
    for (int64_t i = 0; i < sc.num_new; ++i, ++row) {
      const int64_t p = sc.num_cached + i;
      pos[row] = static_cast<int32_t>(p);
      slot[row] = static_cast<int32_t>(static_cast<int64_t>(sc.block_table[p / bs]) * bs + p % bs);
      seq_of[row] = static_cast<int32_t>(s);
      row_len[row] = static_cast<int32_t>(p < prompt ? prompt : p + 1);
    }
    int64_t first = sc.num_new, count = 0;
    if (sc.logits == SequenceChunk::Logits::kAll) first = 0, count = sc.num_new;
    if (sc.logits == SequenceChunk::Logits::kLast) first = sc.num_new - 1, count = 1;
    for (int64_t i = 0; i < count; ++i) logit[r++] = static_cast<int32_t>(seq_start + first + i);
  }
  if (row != N) raise<InternalError>("batch lists {} tokens but its sequences cover {}", N, row);
  for (int64_t i = 0; i < local_rows; ++i)
    ids[i] = first_row + i < N ? b.token_ids[first_row + i] : -1;
  // A graph step's launches are planned for the longest context served, whatever its own.
  if (st.full_reach_keys > 0 && table.rows > 0) max_keys = std::max(max_keys, st.full_reach_keys);
  return max_keys;
}

StepContext::StepContext(const ForwardBatch& b, int64_t bs, const TableShape& table,
                         int64_t first_row, int64_t local_rows, Allocator& a)
    : block_size(bs), alloc(&a) {
  const int64_t N = b.num_tokens(), S = static_cast<int64_t>(b.seqs.size());
  const int64_t max_blocks = max_blocks_of(b, bs), R = b.num_logit_rows();
  // Fixed tables first: the step's first allocation sits at the workspace's start every step.
  block_tables = table.rows > 0
                     ? Tensor::empty({table.rows, table.cols}, DType::kI32, MemTag::kWorkspace, a)
                     : Tensor::empty({S, max_blocks}, DType::kI32, MemTag::kWorkspace, a);
  StepStaging& st = StepStaging::current();
  max_keys = stage(b, bs, table, first_row, local_rows, st);
  const int64_t cols = upload_cols(st, table, max_blocks);

  Tensor buf = Tensor::empty({index_elems(b, local_rows)}, DType::kI32, MemTag::kActivation, a);
  ops::copy(Tensor::wrap(st.index.data<int32_t>(), buf.shape(), DType::kI32), buf);
  // Only the rows and columns in use are written (and read: each query row's sequence and its
  // keys' blocks).
  Tensor in_use = block_tables.narrow(0, 0, S).narrow(1, 0, cols);
  ops::copy(Tensor::wrap(st.tables.data<int32_t>(), {S, cols}, DType::kI32), in_use);
  st.mark_uploaded();
  int64_t off = 0;
  auto take = [&](int64_t n) {
    Tensor t = buf.narrow(0, off, n);
    off += n;
    return t;
  };
  positions = take(N);
  slots = take(N);
  token_seq = take(N);
  index_row_len = take(N);
  local_ids = take(local_rows);
  logit_rows = take(R);
}

}  // namespace mls
