#include "parallel/in_process_communicator.h"

#include <barrier>
#include <cstring>

#include "core/error.h"
#include "parallel/collective_scratch.h"
#include "parallel/rank_order_sum.h"

namespace mls {
namespace {

struct InProcessShared {
  explicit InProcessShared(int n) : size(n), sync(n), published(n, nullptr), bytes(n, 0) {}
  int size;
  std::barrier<> sync;
  std::vector<const void*> published;
  std::vector<size_t> bytes;
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<InProcessShared> s, int rank, Allocator& alloc,
                        CommKind traced)
      : s_(std::move(s)), rank_(rank), alloc_(alloc), traced_(traced) {}

  int rank() const override { return rank_; }
  int size() const override { return s_->size; }

  void run_all_reduce(Tensor& x) override {
    const int64_t n = x.numel();
    Tensor acc = scratch(Collective::kAllReduce, x.dtype(), n);
    if (size() == 1 || is_meta(x)) return;
    publish(x);
    sum_ranks(x.dtype(), 0, n, acc.data<float>());
    s_->sync.arrive_and_wait();  // everyone has read every input: safe to overwrite ours
    convert_from_f32(acc.data<float>(), x.raw(), x.dtype(), n);
    s_->sync.arrive_and_wait();
  }

  void run_all_gather(const Tensor& in, Tensor& out) override {
    if (is_meta(out)) return;
    if (size() == 1) {
      std::memcpy(out.raw(), in.raw(), in.nbytes());
      return;
    }
    publish(in);
    for (int r = 0; r < size(); ++r)
      std::memcpy(static_cast<char*>(out.raw()) + r * in.nbytes(), s_->published[r], in.nbytes());
    s_->sync.arrive_and_wait();
  }

  void run_reduce_scatter(const Tensor& in, Tensor& out) override {
    const int64_t n = out.numel();
    Tensor acc = scratch(Collective::kReduceScatter, in.dtype(), n);
    if (is_meta(out)) return;
    if (size() == 1) {
      std::memcpy(out.raw(), in.raw(), in.nbytes());
      return;
    }
    publish(in);
    sum_ranks(in.dtype(), rank_ * n, n, acc.data<float>());
    convert_from_f32(acc.data<float>(), out.raw(), out.dtype(), n);
    s_->sync.arrive_and_wait();
  }

  void run_broadcast(Tensor& x, int root) override {
    if (size() == 1 || is_meta(x)) return;
    publish(x);
    if (rank_ != root) std::memcpy(x.raw(), s_->published[root], x.nbytes());
    s_->sync.arrive_and_wait();
  }

  void barrier() override { s_->sync.arrive_and_wait(); }

 private:
  // Makes x's buffer visible to every rank; returns once all ranks have published.
  void publish(const Tensor& x) {
    s_->published[rank_] = x.raw();
    s_->bytes[rank_] = x.nbytes();
    s_->sync.arrive_and_wait();
    for (int r = 0; r < size(); ++r)
      if (s_->bytes[r] != x.nbytes())
        raise<ShapeError>("collective with {} bytes on rank {} but {} on rank {}", x.nbytes(),
                          rank_, s_->bytes[r], r);
  }

  // acc[i] = Σ_r rank r's element (offset + i), converted to f32, in rank order.
  void sum_ranks(DType t, int64_t offset, int64_t n, float* acc) {
    sum_in_rank_order(
        size(), t,
        [&](int r) { return static_cast<const char*>(s_->published[r]) + offset * dtype_size(t); },
        n, acc);
  }

  // This call's fp32 sums (collective_scratch.h); a meta runner's group, which only traces,
  // takes what the communicator it stands in for would.
  Tensor scratch(Collective op, DType t, int64_t n) {
    return take_collective_scratch(alloc_, traced_, op, t, n, size());
  }

  std::shared_ptr<InProcessShared> s_;
  int rank_;
  Allocator& alloc_;
  CommKind traced_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_in_process_group(
    int size, const std::vector<Allocator*>& allocators, CommKind traced) {
  if (size < 1) raise<InvalidArgument>("a communicator group needs at least one rank");
  auto shared = std::make_shared<InProcessShared>(size);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r) {
    Allocator* a = r < static_cast<int>(allocators.size()) && allocators[r] ? allocators[r]
                                                                            : &default_allocator();
    out.push_back(std::make_unique<InProcessCommunicator>(shared, r, *a, traced));
  }
  return out;
}

}  // namespace mls
