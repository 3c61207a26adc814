#include "parallel/device_communicator.h"

#include <barrier>

#include "core/cuda_context.h"
#include "core/error.h"
#include "parallel/collective_scratch.h"
#include "parallel/device_reduce_kernels.h"

namespace mls {
namespace {

struct DeviceShared {
  explicit DeviceShared(int n)
      : size(n), sync(n), published(n, nullptr), bytes(n, 0), ready(n, nullptr), done(n, nullptr) {}
  ~DeviceShared() {
    for (cudaEvent_t e : ready)
      if (e) cudaEventDestroy(e);
    for (cudaEvent_t e : done)
      if (e) cudaEventDestroy(e);
  }
  int size;
  std::barrier<> sync;
  std::vector<const void*> published;
  std::vector<size_t> bytes;
  // Per rank, recorded on its stream: its input is ready; it has finished reading the others'.
  std::vector<cudaEvent_t> ready, done;
};

device_reduce::Elem elem(const char* op, DType t) {
  switch (t) {
    case DType::kF32:
      return device_reduce::Elem::kF32;
    case DType::kBF16:
      return device_reduce::Elem::kBF16;
    case DType::kF16:
      return device_reduce::Elem::kF16;
    default:
      raise<ShapeError>("{}: cannot reduce {}", op, dtype_name(t));
  }
}

class DeviceCommunicator final : public Communicator {
 public:
  DeviceCommunicator(std::shared_ptr<DeviceShared> s, int rank, int device, Allocator& alloc)
      : s_(std::move(s)), rank_(rank), device_(device), alloc_(alloc) {}

  int rank() const override { return rank_; }
  int size() const override { return s_->size; }

  void run_all_reduce(Tensor& x) override {
    const device_reduce::Elem t = elem("all_reduce", x.dtype());
    const int64_t n = x.numel();
    // fp32 sums, held for this call only: meta mode traces the same bytes.
    Tensor acc = take_collective_scratch(alloc_, CommKind::kDevice, Collective::kAllReduce,
                                         x.dtype(), n, size());
    if (size() == 1 || is_meta(x)) return;
    check_local("all_reduce", x);
    publish(x);
    sum(t, 0, n, acc.raw(), device_reduce::Elem::kF32);
    finish();  // every rank has read every input: ours may be overwritten
    if (t == device_reduce::Elem::kF32)
      copy(x.raw(), acc.raw(), x.nbytes());
    else
      sum_one(acc.raw(), n, x.raw(), t);
  }

  void run_all_gather(const Tensor& in, Tensor& out) override {
    if (is_meta(out)) return;
    check_local("all_gather", in);
    check_local("all_gather", out);
    if (size() == 1) return copy(out.raw(), in.raw(), in.nbytes());
    publish(in);
    for (int r = 0; r < size(); ++r)
      copy(static_cast<char*>(out.raw()) + r * in.nbytes(), s_->published[r], in.nbytes());
    finish();
  }

  void run_reduce_scatter(const Tensor& in, Tensor& out) override {
    const device_reduce::Elem t = elem("reduce_scatter", in.dtype());
    if (is_meta(out)) return;
    check_local("reduce_scatter", in);
    check_local("reduce_scatter", out);
    if (size() == 1) return copy(out.raw(), in.raw(), in.nbytes());
    const int64_t n = out.numel();
    publish(in);
    sum(t, rank_ * n, n, out.raw(), t);
    finish();
  }

  void run_broadcast(Tensor& x, int root) override {
    if (size() == 1 || is_meta(x)) return;
    check_local("broadcast", x);
    publish(x);
    if (rank_ != root) copy(x.raw(), s_->published[root], x.nbytes());
    finish();
  }

  void barrier() override {
    record(s_->ready);
    s_->sync.arrive_and_wait();
    wait_all(s_->ready);
  }

 private:
  void check_local(const char* op, const Tensor& t) const {
    if (t.device() != Device::cuda(device_) || cuda::bound_device() != device_)
      raise<ShapeError>("{}: {} on {} from a thread bound to cuda:{}, but the group is on cuda:{}",
                        op, t.str(), t.device().str(), cuda::bound_device(), device_);
  }

  // Makes x's buffer visible to every rank and orders this rank's stream after every rank's
  // work that produced its input.
  void publish(const Tensor& x) {
    s_->published[rank_] = x.raw();
    s_->bytes[rank_] = x.nbytes();
    record(s_->ready);
    s_->sync.arrive_and_wait();
    for (int r = 0; r < size(); ++r)
      if (s_->bytes[r] != x.nbytes())
        raise<ShapeError>("collective with {} bytes on rank {} but {} on rank {}", x.nbytes(),
                          rank_, s_->bytes[r], r);
    wait_all(s_->ready);
  }

  // After this rank's reads of the others' buffers: no rank goes on (and overwrites or frees its
  // input) before every rank has read it.
  void finish() {
    record(s_->done);
    s_->sync.arrive_and_wait();
    wait_all(s_->done);
  }

  void record(std::vector<cudaEvent_t>& events) {
    cudaEvent_t& e = events[rank_];
    if (!e) cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    cuda::check(cudaEventRecord(e, cuda::stream()), "cudaEventRecord");
  }

  void wait_all(const std::vector<cudaEvent_t>& events) {
    for (int r = 0; r < size(); ++r)
      if (r != rank_)
        cuda::check(cudaStreamWaitEvent(cuda::stream(), events[r], 0), "cudaStreamWaitEvent");
  }

  void sum(device_reduce::Elem in_type, int64_t offset, int64_t n, void* out,
           device_reduce::Elem out_type) {
    device_reduce::RankPtrs p{};
    for (int r = 0; r < size(); ++r) p.p[r] = s_->published[r];
    cuda::check(device_reduce::launch_sum_ranks(p, size(), in_type, offset, n, out, out_type,
                                                cuda::stream()),
                "device collective sum");
  }

  // out = in converted: a sum over the one rank `in`.
  void sum_one(const void* in, int64_t n, void* out, device_reduce::Elem out_type) {
    device_reduce::RankPtrs p{};
    p.p[0] = in;
    cuda::check(device_reduce::launch_sum_ranks(p, 1, device_reduce::Elem::kF32, 0, n, out,
                                                out_type, cuda::stream()),
                "device collective cast");
  }

  void copy(void* dst, const void* src, size_t bytes) {
    cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda::stream()),
                "device collective copy");
  }

  std::shared_ptr<DeviceShared> s_;
  int rank_;
  int device_;
  Allocator& alloc_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_device_group(
    int size, int device, const std::vector<Allocator*>& allocators) {
  if (size < 1 || size > device_reduce::kMaxRanks)
    raise<InvalidArgument>("a device communicator group takes 1 to {} ranks, not {}",
                           device_reduce::kMaxRanks, size);
  if (static_cast<int>(allocators.size()) != size)
    raise<InvalidArgument>("a device communicator group needs one allocator per rank");
  auto shared = std::make_shared<DeviceShared>(size);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r)
    out.push_back(std::make_unique<DeviceCommunicator>(shared, r, device, *allocators[r]));
  return out;
}

}  // namespace mls
