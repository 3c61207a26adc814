// The MPI communicator against the in-process one, run under `mpirun -np 2`: for one and two
// ranks per process (groups of 2 and 4 ranks), every collective's result on every rank is
// bitwise the in-process group's for the same inputs (the reference runs the whole group as
// threads of this process). Inputs are random with large and small magnitudes, so a sum in any
// other order would differ.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "parallel/in_process_communicator.h"
#include "parallel/mpi_communicator.h"
#include "parallel/world.h"

namespace mls {
namespace {

using Group = std::vector<std::unique_ptr<Communicator>>;

// fn(handle index, communicator) on one thread per handle.
void run(Group& group, const std::function<void(int, Communicator&)>& fn) {
  std::vector<std::thread> threads;
  for (int i = 0; i < static_cast<int>(group.size()); ++i)
    threads.emplace_back([&, i] { fn(i, *group[i]); });
  for (auto& t : threads) t.join();
}

Tensor input(int rank, int64_t n, DType dtype, int salt) {
  std::mt19937 gen(rank * 7919 + salt);
  std::uniform_real_distribution<float> mag(-12, 12), u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen) * std::exp2(mag(gen));
  Tensor t = Tensor::empty({n}, dtype, MemTag::kActivation);
  convert_from_f32(v.data(), t.raw(), dtype, n);
  return t;
}

std::vector<uint8_t> bytes(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.raw());
  return {p, p + t.nbytes()};
}

// Every collective once on rank r (handle c), its results as bytes in a fixed order.
std::vector<std::vector<uint8_t>> exercise(int r, Communicator& c, DType dtype) {
  const int n = c.size();
  const int64_t len = 13;
  std::vector<std::vector<uint8_t>> out;
  Tensor x = input(r, len, dtype, 1);
  c.all_reduce(x);
  out.push_back(bytes(x));
  Tensor in = input(r, len, dtype, 2);
  Tensor gathered = Tensor::empty({n * len}, dtype, MemTag::kActivation);
  c.all_gather(in, gathered);
  out.push_back(bytes(gathered));
  Tensor big = input(r, n * len, dtype, 3);
  Tensor part = Tensor::empty({len}, dtype, MemTag::kActivation);
  c.reduce_scatter(big, part);
  out.push_back(bytes(part));
  for (int root = 0; root < n; ++root) {
    Tensor b = input(r, len, dtype, 4 + root);
    c.broadcast(b, root);
    out.push_back(bytes(b));
  }
  c.barrier();
  return out;
}

class MpiCollectives : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(MpiCollectives, BitwiseEqualToInProcess) {
  const auto [local, dtype] = GetParam();
  const World& w = World::get();
  ASSERT_EQ(w.num_processes(), 2) << "run under mpirun -np 2";
  const int size = local * w.num_processes();
  Group ref = make_in_process_group(size);
  std::vector<std::vector<std::vector<uint8_t>>> want(size);
  run(ref, [&, dtype = dtype](int r, Communicator& c) { want[r] = exercise(r, c, dtype); });
  Group mpi = make_mpi_group(local, {});
  std::vector<std::vector<std::vector<uint8_t>>> got(local);
  run(mpi, [&, dtype = dtype, local = local](int l, Communicator& c) {
    EXPECT_EQ(c.rank(), w.process() * local + l);
    EXPECT_EQ(c.size(), size);
    got[l] = exercise(c.rank(), c, dtype);
  });
  for (int l = 0; l < local; ++l) EXPECT_EQ(got[l], want[w.process() * local + l]) << "local " << l;
}

INSTANTIATE_TEST_SUITE_P(RanksPerProcess, MpiCollectives,
                         ::testing::Combine(::testing::Values(1, 2),
                                            ::testing::Values(DType::kF32, DType::kBF16)),
                         [](const auto& info) {
                           return "local" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) == DType::kF32 ? "_f32" : "_bf16");
                         });

TEST(MpiCollectives, MismatchedShapesInsideAProcessAreRejected) {
  Group mpi = make_mpi_group(2, {});
  run(mpi, [](int l, Communicator& c) {
    Tensor x = Tensor::empty({l + 1}, DType::kF32, MemTag::kActivation);
    EXPECT_THROW(c.all_reduce(x), ShapeError);
  });
}

}  // namespace
}  // namespace mls

int main(int argc, char** argv) {
  mls::World::init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  mls::World::finalize();
  return rc;
}
