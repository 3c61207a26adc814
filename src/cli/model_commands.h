// `logits` and `generate`: run a checkpoint from the command line.
#pragma once

#include <CLI/CLI.hpp>

namespace mls::cli {

void add_model_commands(CLI::App& app);

}  // namespace mls::cli
