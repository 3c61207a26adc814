// `plan-memory`: run the profiling pass and the analytic planner, print the KV cache plan.
#pragma once

#include <CLI/CLI.hpp>

namespace mls::cli {

void add_plan_memory_command(CLI::App& app);

}  // namespace mls::cli
