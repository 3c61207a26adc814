// The step broadcast under mpirun (docs/multi-node.md): the leader encodes and broadcasts a
// decode step of S sequences, each at C cached tokens (block size 64), the followers receive
// and decode it, R times; the leader prints the encoded size and the mean time per step
// (encode + broadcast + decode, with a barrier per step so no step overlaps the next).
//   mpirun --bind-to none -np 2 build/bench/step_broadcast_benchmark [S [C [R]]]
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "engine/step_broadcast.h"
#include "parallel/world.h"

int main(int argc, char** argv) {
  using namespace mls;
  World::init(&argc, &argv);
  World& w = World::get();
  const int seqs = argc > 1 ? std::atoi(argv[1]) : 256;
  const int context = argc > 2 ? std::atoi(argv[2]) : 2047;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 1000;
  RunnerCommand cmd{.op = RunnerOp::kForward, .batch = {}, .observe = false, .args = {}};
  for (int s = 0; s < seqs; ++s) {
    SequenceChunk c{.num_cached = context, .num_new = 1, .block_table = {}, .prompt_len = 1000};
    for (int b = 0; b <= context / 64; ++b) c.block_table.push_back(s * (context / 64 + 1) + b);
    cmd.batch.seqs.push_back(std::move(c));
    cmd.batch.token_ids.push_back(150000 - s);
  }
  std::vector<uint8_t> wire, ack;
  RunnerCommand got;
  double total = 0;
  for (int i = 0; i < reps; ++i) {
    w.gather(ack, "the benchmark's step barrier");  // every process is ready for the next step
    const auto t0 = std::chrono::steady_clock::now();
    if (w.leader()) encode(cmd, wire);
    w.broadcast(wire, false, "the benchmark's step broadcast");
    if (!w.leader()) decode(wire, got);
    w.gather(ack, "the benchmark's step acknowledgement");  // the followers have decoded it
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (w.leader())
    std::printf(
        "%d processes, %d sequences at %d cached tokens: %zu bytes per step, %.1f us per "
        "step (encode, broadcast, decode)\n",
        w.num_processes(), seqs, context, wire.size(), total / reps * 1e6);
  World::finalize();
  return 0;
}
