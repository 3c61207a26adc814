// What the leader process's model runner sends the follower processes (docs/multi-node.md):
// one command per runner call, a step (target or MTP layer) being its ForwardBatch. Sampling rows
// are not sent: the logits rows are drawn on rank 0's device, which is the leader's. The encoding
// is compact for the per-step case: LEB128 varints, block tables as zigzag deltas (consecutive
// blocks take one byte each), token ids as varints.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/forward_batch.h"

namespace mls {

enum class RunnerOp : uint8_t {
  kForward,               // batch, observe; args {keep_hidden} (ModelRunner::forward_keep_hidden)
  kAllocateKv,            // args {num_blocks, block_size, table_rows, table_cols, tokens}
  kReleaseKv,             //
  kSetMeta,               // args {on}
  kResetPeaks,            //
  kMemoryStats,           // followers answer with their ranks' MemStats (gathered)
  kSetLimits,             // args: one allocator limit per rank of the group
  kUntrackedBytes,        // followers answer with their ranks' untracked device bytes (gathered)
  kReserveStepWorkspace,  // args: one step workspace size per rank of the group
  kForwardMtp,            // batch; args: the carry row of each token (ModelRunner::forward_mtp)
  kStop,                  // the leader's runner is gone: followers return from follow()
};

struct RunnerCommand {
  RunnerOp op = RunnerOp::kStop;
  ForwardBatch batch;
  // Rank 0 observes the forward's intermediates: under sequence parallelism each observation
  // gathers from every rank, so every rank must run the observer's collectives.
  bool observe = false;
  std::vector<int64_t> args;
};

// Replaces `out` with the encoding (its capacity is reused from step to step).
void encode(const RunnerCommand& cmd, std::vector<uint8_t>& out);
// Throws InternalError on bytes that are not one whole command.
void decode(std::span<const uint8_t> bytes, RunnerCommand& cmd);

}  // namespace mls
