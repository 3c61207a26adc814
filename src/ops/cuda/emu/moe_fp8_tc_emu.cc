// The grouped block-FP8 experts on the tensor cores built for the CPU emulator (prelude.h).
#include "ops/cuda/emu/prelude.h"
//
#include "ops/cuda/moe_fp8_tc_kernels.cu"
