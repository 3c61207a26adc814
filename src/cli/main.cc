// mlaserve command line: one binary, one subcommand per task (DESIGN.md "cli/").
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/bench_command.h"
#include "cli/model_commands.h"
#include "cli/plan_memory_command.h"
#include "cli/serve_command.h"
#include "cli/text_commands.h"
#include "core/error.h"
#include "server/http_server.h"

int main(int argc, char** argv) {
  CLI::App app{"mlaserve: an inference server for MLA + MoE models (DeepSeek-V3/V3.2, GLM-5)"};
  app.set_version_flag("--version", std::string("mlaserve ") + mls::server::version());
  app.require_subcommand(1);
  mls::cli::add_model_commands(app);
  mls::cli::add_text_commands(app);
  mls::cli::add_plan_memory_command(app);
  mls::cli::add_serve_command(app);
  mls::cli::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const mls::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
