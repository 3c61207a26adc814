// A RopeTable's frequencies as the CUDA rope kernels take them (apply_rope, rope_into, the fused
// cache writes), with the kernels' limit on the rotary dim checked once here.
#pragma once

#include "ops/cuda/rope_kernels.h"
#include "ops/rope.h"

namespace mls::ops::cuda {

// Unsupported, naming `op`, when the table has more than kernels::kMaxRopeHalf pairs.
kernels::RopeFreqs rope_freqs(const RopeTable& table, const char* op);

}  // namespace mls::ops::cuda
