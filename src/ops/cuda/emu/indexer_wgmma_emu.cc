// The DSA indexer's token-group score kernel built for the CPU emulator (prelude.h).
#include "ops/cuda/emu/prelude.h"
//
#include "ops/cuda/indexer_wgmma_kernels.cu"
