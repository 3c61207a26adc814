// The text-layer subcommands of the mlaserve CLI: tokenize, detokenize and chat-template.
#pragma once

#include <CLI/CLI.hpp>

namespace mls::cli {

// Registers the subcommands on `app`; their callbacks throw mls::Error subclasses on failure.
void add_text_commands(CLI::App& app);

}  // namespace mls::cli
