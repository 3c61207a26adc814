// `mlaserve serve`: the OpenAI-compatible HTTP server over the engine, with `vllm serve` flag
// names and defaults (docs/server.md).
#pragma once

#include <CLI/CLI.hpp>

namespace mls::cli {

void add_serve_command(CLI::App& app);

}  // namespace mls::cli
