#include "parallel/mpi_communicator.h"

#include <barrier>
#include <climits>
#include <cstring>
#include <functional>
#include <string>

#include "parallel/mpi_wait.h"
#include "parallel/rank_order_sum.h"
#include "parallel/world.h"

namespace mls {
namespace {

// What the ranks of one process share.
struct MpiShared {
  explicit MpiShared(int local)
      : local(local),
        procs(World::get().num_processes()),
        process(World::get().process()),
        sync(local),
        published(local, nullptr),
        bytes(local, 0),
        comm(mpi::dup_world()) {}
  ~MpiShared() { MPI_Comm_free(&comm); }

  int local, procs, process;
  std::barrier<> sync;
  std::vector<const void*> published;  // this process's ranks' buffers
  std::vector<size_t> bytes;
  MPI_Comm comm;
  // The exchange buffers: host memory outside the tracked allocators, like MPI's own buffers
  // (each rank's fp32 reduction scratch stays tracked, as with the in-process communicator).
  std::vector<char> send, recv;
  std::string failure;  // set by the first rank when its exchange failed
};

char* grow(std::vector<char>& buf, size_t bytes) {
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(std::shared_ptr<MpiShared> s, int local_rank, Allocator& alloc)
      : s_(std::move(s)), local_(local_rank), alloc_(alloc) {}

  int rank() const override { return s_->process * s_->local + local_; }
  int size() const override { return s_->procs * s_->local; }

  void run_all_reduce(Tensor& x) override {
    if (size() == 1 || is_meta(x)) return;
    const int64_t n = x.numel();
    publish(x);
    exchange_all("all_reduce", x.nbytes());
    Tensor& acc = scratch(n);
    sum_ranks(
        x.dtype(), [&](int r) { return recv_block(r, x.nbytes()); }, n, acc.data<float>());
    convert_from_f32(acc.data<float>(), x.raw(), x.dtype(), n);
  }

  void run_all_gather(const Tensor& in, Tensor& out) override {
    if (is_meta(out)) return;
    if (size() == 1) {
      std::memcpy(out.raw(), in.raw(), in.nbytes());
      return;
    }
    publish(in);
    exchange_all("all_gather", in.nbytes());
    // Ranks are process-major in the exchange buffer, as in `out`.
    std::memcpy(out.raw(), s_->recv.data(), out.nbytes());
  }

  void run_reduce_scatter(const Tensor& in, Tensor& out) override {
    if (is_meta(out)) return;
    if (size() == 1) {
      std::memcpy(out.raw(), in.raw(), in.nbytes());
      return;
    }
    const int64_t n = out.numel();
    const size_t slice = out.nbytes();
    publish(in);
    exchange_slices(slice);
    // From process p's rank l, the block for this process holds one slice per local rank.
    const int L = s_->local;
    Tensor& acc = scratch(n);
    sum_ranks(
        in.dtype(), [&](int r) { return s_->recv.data() + (r * L + local_) * slice; }, n,
        acc.data<float>());
    convert_from_f32(acc.data<float>(), out.raw(), out.dtype(), n);
  }

  void run_broadcast(Tensor& x, int root) override {
    if (size() == 1 || is_meta(x)) return;
    publish(x);
    const int root_process = root / s_->local;
    exchange("broadcast", x.nbytes(), [&] {
      char* buf = grow(s_->recv, x.nbytes());
      if (s_->process == root_process)
        std::memcpy(buf, s_->published[root % s_->local], x.nbytes());
      MPI_Request req;
      mpi::check(MPI_Ibcast(buf, count(x.nbytes()), MPI_BYTE, root_process, s_->comm, &req),
                 "MPI_Ibcast");
      return req;
    });
    if (rank() != root) std::memcpy(x.raw(), s_->recv.data(), x.nbytes());
  }

  void barrier() override {
    s_->sync.arrive_and_wait();
    exchange("barrier", 0, [&] {
      MPI_Request req;
      mpi::check(MPI_Ibarrier(s_->comm, &req), "MPI_Ibarrier");
      return req;
    });
  }

 private:
  static int count(size_t bytes) {
    if (bytes > static_cast<size_t>(INT_MAX))
      raise<ShapeError>("a collective of {} bytes exceeds one MPI message", bytes);
    return static_cast<int>(bytes);
  }

  // Makes x's buffer visible to this process's ranks; returns once all have published.
  void publish(const Tensor& x) {
    s_->published[local_] = x.raw();
    s_->bytes[local_] = x.nbytes();
    s_->sync.arrive_and_wait();
    for (int l = 0; l < s_->local; ++l)
      if (s_->bytes[l] != x.nbytes())
        raise<ShapeError>("collective with {} bytes on rank {} but {} on rank {}", x.nbytes(),
                          rank(), s_->bytes[l], s_->process * s_->local + l);
  }

  // The process's first rank starts the exchange `start` and waits for it; then every rank of
  // the process continues (or throws the first rank's failure). Inputs were published before.
  void exchange(const char* op, size_t bytes, const std::function<MPI_Request()>& start) {
    if (local_ == 0) {
      try {
        MPI_Request req = start();
        mpi::wait(req, [&] {
          return fmt::format("{} of {} bytes per rank by ranks {}..{} of {}", op, bytes, rank(),
                             rank() + s_->local - 1, size());
        });
        s_->failure.clear();
      } catch (const std::exception& e) {
        s_->failure = e.what();
      }
    }
    s_->sync.arrive_and_wait();
    if (!s_->failure.empty()) throw DistributedError(s_->failure);
  }

  // Every rank's `bytes`, process-major, into s_->recv.
  void exchange_all(const char* op, size_t bytes) {
    exchange(op, bytes, [&] {
      const int L = s_->local;
      char* send = grow(s_->send, L * bytes);
      for (int l = 0; l < L; ++l) std::memcpy(send + l * bytes, s_->published[l], bytes);
      char* recv = grow(s_->recv, size() * bytes);
      MPI_Request req;
      mpi::check(MPI_Iallgather(send, count(L * bytes), MPI_BYTE, recv, count(L * bytes), MPI_BYTE,
                                s_->comm, &req),
                 "MPI_Iallgather");
      return req;
    });
  }

  // Rank r's input is [size × slice]; process q receives, from every rank, the slices of q's
  // ranks: s_->recv holds [rank r][local rank l][slice], r over all ranks.
  void exchange_slices(size_t slice) {
    exchange("reduce_scatter", slice * size(), [&] {
      const int L = s_->local;
      const size_t block = L * slice;  // one sender rank's slices for one process
      char* send = grow(s_->send, s_->procs * L * block);
      for (int q = 0; q < s_->procs; ++q)
        for (int l = 0; l < L; ++l)
          std::memcpy(send + (q * L + l) * block,
                      static_cast<const char*>(s_->published[l]) + q * block, block);
      char* recv = grow(s_->recv, size() * block);
      MPI_Request req;
      mpi::check(MPI_Ialltoall(send, count(L * block), MPI_BYTE, recv, count(L * block), MPI_BYTE,
                               s_->comm, &req),
                 "MPI_Ialltoall");
      return req;
    });
  }

  const char* recv_block(int r, size_t bytes) const { return s_->recv.data() + r * bytes; }

  void sum_ranks(DType t, const std::function<const char*(int)>& input, int64_t n, float* acc) {
    sum_in_rank_order(size(), t, input, n, acc);
  }

  Tensor& scratch(int64_t n) {
    if (!scratch_.defined() || scratch_.numel() < n)
      scratch_ = Tensor::empty({n}, DType::kF32, MemTag::kComm, alloc_);
    return scratch_;
  }

  std::shared_ptr<MpiShared> s_;
  int local_;
  Allocator& alloc_;
  Tensor scratch_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_mpi_group(
    int local_size, const std::vector<Allocator*>& allocators) {
  if (local_size < 1) raise<InvalidArgument>("a process needs at least one rank");
  std::vector<Allocator*> a(local_size, &default_allocator());
  for (int l = 0; l < local_size && l < static_cast<int>(allocators.size()); ++l)
    if (allocators[l]) a[l] = allocators[l];
  auto shared = std::make_shared<MpiShared>(local_size);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int l = 0; l < local_size; ++l)
    out.push_back(std::make_unique<MpiCommunicator>(shared, l, *a[l]));
  return out;
}

}  // namespace mls
