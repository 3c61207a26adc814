// The absorbed-MLA wgmma attention kernel built for the CPU emulator (prelude.h).
#include "ops/cuda/emu/prelude.h"
//
#include "ops/cuda/attention_wgmma_kernels.cu"
