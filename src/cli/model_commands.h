// `logits` and `generate`: run a checkpoint from the command line through the ModelRunner
// (paged KV cache, tensor-parallel ranks); `generate` runs its prompts as one batch through the
// serving engine.
#pragma once

#include <CLI/CLI.hpp>

namespace mls::cli {

void add_model_commands(CLI::App& app);

}  // namespace mls::cli
