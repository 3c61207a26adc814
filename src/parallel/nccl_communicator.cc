#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>

#include "core/cuda_context.h"
#include "core/error.h"
#include "parallel/collective_scratch.h"
#include "parallel/nccl_communicator.h"
#include "parallel/precision_cast_gpu.h"

namespace mls {
namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) raise<Error>("{}: {}", what, cudaGetErrorString(e));
}

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) raise<Error>("{}: {}", what, ncclGetErrorString(r));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kFP8E4M3:
      return ncclUint8;  // moved, never reduced
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
  }
  return ncclUint8;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, int device, Allocator& alloc)
      : comm_(comm), rank_(rank), size_(size), device_(device), alloc_(alloc) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~NcclCommunicator() override {
    cudaStreamDestroy(stream_);
    ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void run_all_reduce(Tensor& x) override {
    const int64_t n = x.numel();
    // fp32 sums of a bf16/f16 reduction, held for this call only: meta mode traces the same bytes.
    Tensor scratch = take_collective_scratch(alloc_, CommKind::kNccl, Collective::kAllReduce,
                                             x.dtype(), n, size_);
    if (size_ == 1 || is_meta(x)) return;
    if (x.dtype() == DType::kF32) {
      check_nccl(ncclAllReduce(x.raw(), x.raw(), n, ncclFloat32, ncclSum, comm_, stream()),
                 "ncclAllReduce");
    } else {
      float* acc = scratch.data<float>();
      widen(x, acc, n);
      check_nccl(ncclAllReduce(acc, acc, n, ncclFloat32, ncclSum, comm_, stream()),
                 "ncclAllReduce");
      narrow(acc, x, n);
    }
    sync();
  }

  void run_all_gather(const Tensor& in, Tensor& out) override {
    if (is_meta(out)) return;
    check_nccl(
        ncclAllGather(in.raw(), out.raw(), in.numel(), nccl_type(in.dtype()), comm_, stream()),
        "ncclAllGather");
    sync();
  }

  void run_reduce_scatter(const Tensor& in, Tensor& out) override {
    const int64_t n = out.numel();
    Tensor scratch = take_collective_scratch(alloc_, CommKind::kNccl, Collective::kReduceScatter,
                                             in.dtype(), n, size_);
    if (is_meta(out)) return;
    if (in.dtype() == DType::kF32) {
      check_nccl(ncclReduceScatter(in.raw(), out.raw(), n, ncclFloat32, ncclSum, comm_, stream()),
                 "ncclReduceScatter");
    } else {
      float* acc = scratch.data<float>();
      widen(in, acc, n * size_);
      check_nccl(ncclReduceScatter(acc, acc + n * size_, n, ncclFloat32, ncclSum, comm_, stream()),
                 "ncclReduceScatter");
      narrow(acc + n * size_, out, n);
    }
    sync();
  }

  void run_broadcast(Tensor& x, int root) override {
    if (size_ == 1 || is_meta(x)) return;
    check_nccl(ncclBroadcast(x.raw(), x.raw(), x.nbytes(), ncclUint8, root, comm_, stream()),
               "ncclBroadcast");
    sync();
  }

  void barrier() override {
    Tensor one = Tensor::empty({1}, DType::kF32, MemTag::kComm, alloc_);
    check_nccl(ncclAllReduce(one.raw(), one.raw(), 1, ncclFloat32, ncclSum, comm_, stream()),
               "barrier");
    check_cuda(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
  }

 private:
  void widen(const Tensor& x, float* out, int64_t n) {
    if (x.dtype() != DType::kBF16 && x.dtype() != DType::kF16)
      raise<ShapeError>("NCCL reductions take float tensors, got {}", x.str());
    widen_to_f32(x.raw(), x.dtype() == DType::kBF16, out, n, stream());
  }

  void narrow(const float* in, Tensor& x, int64_t n) {
    narrow_from_f32(in, x.raw(), x.dtype() == DType::kBF16, n, stream());
  }

  // A rank thread bound to this device (the model runner's) enqueues collectives on its compute
  // stream: ordered with the kernels around them, no host wait. Other callers (tools, tests)
  // get the communicator's own stream.
  cudaStream_t stream() const { return cuda::bound_device() == device_ ? cuda::stream() : stream_; }
  // Results are ready for the caller: nothing to do on the compute stream (later work is
  // ordered after the collective); on the own stream, wait for it.
  void sync() {
    if (cuda::bound_device() != device_)
      check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  ncclComm_t comm_;
  int rank_, size_, device_;
  Allocator& alloc_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_nccl_group(
    const std::vector<int>& devices, const std::vector<Allocator*>& allocators) {
  const int n = static_cast<int>(devices.size());
  if (static_cast<int>(allocators.size()) != n)
    raise<InvalidArgument>("NCCL group of {} devices with {} allocators", n, allocators.size());
  std::vector<ncclComm_t> comms(n);
  check_nccl(ncclCommInitAll(comms.data(), n, devices.data()), "ncclCommInitAll");
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r)
    out.push_back(std::make_unique<NcclCommunicator>(comms[r], r, n, devices[r], *allocators[r]));
  return out;
}

std::vector<uint8_t> make_nccl_unique_id() {
  ncclUniqueId id;
  check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  const auto* p = reinterpret_cast<const uint8_t*>(id.internal);
  return {p, p + sizeof id.internal};
}

std::vector<std::unique_ptr<Communicator>> make_nccl_group(
    const std::vector<uint8_t>& unique_id, int size, int first_rank,
    const std::vector<int>& devices, const std::vector<Allocator*>& allocators) {
  const int n = static_cast<int>(devices.size());
  ncclUniqueId id;
  if (unique_id.size() != sizeof id.internal || static_cast<int>(allocators.size()) != n ||
      first_rank < 0 || first_rank + n > size)
    raise<InvalidArgument>("NCCL ranks {}..{} of {} with a {}-byte id and {} allocators",
                           first_rank, first_rank + n - 1, size, unique_id.size(),
                           allocators.size());
  std::copy(unique_id.begin(), unique_id.end(), reinterpret_cast<uint8_t*>(id.internal));
  std::vector<ncclComm_t> comms(n);
  // One process initialising several ranks must group the calls (NCCL waits for all ranks).
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  for (int i = 0; i < n; ++i) {
    check_cuda(cudaSetDevice(devices[i]), "cudaSetDevice");
    check_nccl(ncclCommInitRank(&comms[i], size, id, first_rank + i), "ncclCommInitRank");
  }
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  std::vector<std::unique_ptr<Communicator>> out;
  for (int i = 0; i < n; ++i)
    out.push_back(std::make_unique<NcclCommunicator>(comms[i], first_rank + i, size, devices[i],
                                                     *allocators[i]));
  return out;
}

}  // namespace mls
