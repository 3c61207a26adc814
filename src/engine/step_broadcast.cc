#include "engine/step_broadcast.h"

#include "core/error.h"

namespace mls {
namespace {

void put(std::vector<uint8_t>& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<uint8_t>(v) | 0x80);
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}

void put_signed(std::vector<uint8_t>& out, int64_t v) {
  put(out, (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63));
}

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}

  uint64_t get() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= b_.size()) raise<InternalError>("step broadcast: command truncated");
      const uint8_t byte = b_[pos_++];
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return v;
    }
    raise<InternalError>("step broadcast: varint longer than 64 bits");
  }
  int64_t get_signed() {
    const uint64_t z = get();
    return static_cast<int64_t>(z >> 1) ^ -static_cast<int64_t>(z & 1);
  }
  // A count of items that each take at least one byte: bounded by what is left.
  size_t count() {
    const uint64_t n = get();
    if (n > b_.size() - pos_) raise<InternalError>("step broadcast: count {} past the end", n);
    return static_cast<size_t>(n);
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
};

bool carries_batch(RunnerOp op) {
  return op == RunnerOp::kForward || op == RunnerOp::kForwardMtp;
}

}  // namespace

void encode(const RunnerCommand& cmd, std::vector<uint8_t>& out) {
  out.clear();
  out.push_back(static_cast<uint8_t>(cmd.op));
  put(out, cmd.args.size());
  for (int64_t a : cmd.args) put_signed(out, a);
  if (!carries_batch(cmd.op)) return;
  int64_t total = 0;
  for (const SequenceChunk& s : cmd.batch.seqs) total += s.num_new;
  if (total != cmd.batch.num_tokens())
    raise<InternalError>("step broadcast: {} token ids for chunks of {} new tokens",
                         cmd.batch.num_tokens(), total);
  out.push_back(cmd.observe ? 1 : 0);
  put(out, cmd.batch.seqs.size());
  int64_t token = 0;
  for (const SequenceChunk& s : cmd.batch.seqs) {
    put_signed(out, s.num_cached);
    put_signed(out, s.num_new);
    put_signed(out, s.prompt_len);
    out.push_back(static_cast<uint8_t>(s.logits));
    put(out, s.block_table.size());
    int64_t prev = -1;
    for (int32_t b : s.block_table) {
      put_signed(out, b - prev);
      prev = b;
    }
    for (int64_t i = 0; i < s.num_new; ++i) put_signed(out, cmd.batch.token_ids[token++]);
  }
}

void decode(std::span<const uint8_t> bytes, RunnerCommand& cmd) {
  if (bytes.empty()) raise<InternalError>("step broadcast: empty command");
  Reader r(bytes.subspan(1));
  if (bytes[0] > static_cast<uint8_t>(RunnerOp::kStop))
    raise<InternalError>("step broadcast: unknown command {}", bytes[0]);
  cmd.op = static_cast<RunnerOp>(bytes[0]);
  cmd.args.resize(r.count());
  for (int64_t& a : cmd.args) a = r.get_signed();
  cmd.batch.token_ids.clear();
  cmd.batch.seqs.clear();
  cmd.observe = false;
  if (carries_batch(cmd.op)) {
    cmd.observe = r.get() != 0;
    cmd.batch.seqs.resize(r.count());
    for (SequenceChunk& s : cmd.batch.seqs) {
      s.num_cached = r.get_signed();
      s.num_new = r.get_signed();
      s.prompt_len = r.get_signed();
      const uint64_t logits = r.get();
      if (logits > static_cast<uint64_t>(SequenceChunk::Logits::kAll) || s.num_new < 0)
        raise<InternalError>("step broadcast: malformed sequence chunk");
      s.logits = static_cast<SequenceChunk::Logits>(logits);
      s.block_table.resize(r.count());
      int64_t prev = -1;
      for (int32_t& b : s.block_table) b = static_cast<int32_t>(prev += r.get_signed());
      if (s.num_new > static_cast<int64_t>(bytes.size()))
        raise<InternalError>("step broadcast: {} new tokens past the end", s.num_new);
      for (int64_t i = 0; i < s.num_new; ++i)
        cmd.batch.token_ids.push_back(static_cast<int32_t>(r.get_signed()));
    }
  }
  if (!r.done()) raise<InternalError>("step broadcast: trailing bytes after the command");
}

}  // namespace mls
