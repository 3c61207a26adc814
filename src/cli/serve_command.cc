#include "cli/serve_command.h"

#include <fmt/format.h>
#include <pthread.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/tool_parser.h"
#include "core/error.h"
#include "core/logging.h"
#include "engine/engine.h"
#include "engine/memory_planner.h"
#include "engine/model_runner.h"
#include "parallel/world.h"
#include "server/cors.h"
#include "server/engine_loop.h"
#include "server/http_limits.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/serving_context.h"
#include "tokenizer/tokenizer.h"

namespace mls::cli {
namespace {

namespace fs = std::filesystem;

// Until the memory planner lands, the KV pool defaults to this much.
constexpr int64_t kDefaultKvBytes = int64_t{256} << 20;

struct ServeFlags {
  std::string model_positional;
  std::string model;
  std::string host = "0.0.0.0";
  int port = 8000;
  std::vector<std::string> served_model_name;
  int tensor_parallel_size = 1;
  bool sequence_parallel = false;
  double gpu_memory_utilization = 0.9;
  int64_t kv_cache_memory_bytes = 0;
  ServingLimits limits;
  int ranks_per_device = 1;
  bool enforce_eager = false;
  bool no_enable_prefix_caching = false;
  std::string load_format = "auto";
  std::string device = "auto";
  std::string chat_template;
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser;
  std::string reasoning_parser;
  std::string generation_config = "auto";
  std::string test_script;
  // The transport and its security surface (docs/server.md).
  std::vector<std::string> api_key;
  std::string uds;
  std::string ssl_keyfile;
  std::string ssl_certfile;
  std::string root_path;
  std::string allowed_origins = R"(["*"])";
  std::string allowed_methods = R"(["*"])";
  std::string allowed_headers = R"(["*"])";
  bool allow_credentials = false;
  double shutdown_timeout = 30;
  server::HttpLimits http_limits;
};

// Every vLLM reasoning parser name that means "<think>...</think>".
const std::vector<std::string> kThinkParsers = {"deepseek_r1", "deepseek_v3", "glm45", "qwen3"};

// The transport's flags: security (vLLM's names), limits (HttpLimits holds each default) and the
// drain deadline.
void add_transport_flags(CLI::App* cmd, ServeFlags& f) {
  cmd->add_option("--api-key", f.api_key,
                  "Bearer key(s) required on /v1/*, /tokenize, /detokenize (default: "
                  "$VLLM_API_KEY, else $MLASERVE_API_KEY)");
  cmd->add_option("--uds", f.uds, "Listen on this Unix socket instead of --host/--port");
  cmd->add_option("--ssl-keyfile", f.ssl_keyfile, "TLS private key (PEM)");
  cmd->add_option("--ssl-certfile", f.ssl_certfile, "TLS certificate chain (PEM)");
  cmd->add_option("--root-path", f.root_path, "Route prefix left by a proxy (stripped)");
  cmd->add_option("--allowed-origins", f.allowed_origins, "CORS origins (JSON list)")
      ->capture_default_str();
  cmd->add_option("--allowed-methods", f.allowed_methods, "CORS methods (JSON list)")
      ->capture_default_str();
  cmd->add_option("--allowed-headers", f.allowed_headers, "CORS request headers (JSON list)")
      ->capture_default_str();
  cmd->add_flag("--allow-credentials", f.allow_credentials, "CORS: allow credentials");
  cmd->add_option("--shutdown-timeout", f.shutdown_timeout,
                  "Seconds requests in flight may run on after SIGTERM/SIGINT before they are "
                  "aborted")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  server::HttpLimits& l = f.http_limits;
  const auto bytes = [&](const char* name, size_t& v, const char* what) {
    cmd->add_option(name, v, what)->transform(CLI::AsSizeValue(false))->capture_default_str();
  };
  const auto seconds = [&](const char* name, std::chrono::seconds& v, const char* what) {
    return cmd
        ->add_option_function<int64_t>(
            name, [&v](int64_t s) { v = std::chrono::seconds(s); }, what)
        ->check(CLI::PositiveNumber)
        ->default_str(std::to_string(v.count()));
  };
  bytes("--h11-max-incomplete-event-size", l.max_header_bytes,
        "Request line and headers, bytes (431 beyond)");
  cmd->add_option("--h11-max-header-count", l.max_header_count, "Header fields (431 beyond)")
      ->capture_default_str();
  bytes("--max-uri-length", l.max_uri_bytes, "Request target, bytes (414 beyond)");
  bytes("--max-request-body-bytes", l.max_body_bytes,
        "Request body under any framing, bytes (413 beyond)");
  seconds("--max-header-seconds", l.header_timeout,
          "From accept (or a kept-alive request's first byte) to the end of the headers");
  seconds("--max-body-seconds", l.body_timeout, "Reading a request body");
  seconds("--max-keep-alive-seconds", l.keep_alive_timeout, "Idle kept-alive connection")
      ->envname("VLLM_HTTP_TIMEOUT_KEEP_ALIVE");
  seconds("--max-send-stall-seconds", l.send_timeout,
          "A write that makes no progress ends the connection");
  cmd->add_option("--max-connections", l.max_connections, "Open connections (503 beyond)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-connections-per-peer", l.max_connections_per_peer,
                  "Open connections from one address (503 beyond)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

void add_flags(CLI::App* cmd, ServeFlags& f) {
  cmd->add_option("model_tag", f.model_positional, "Model directory (same as --model)");
  cmd->add_option("--model", f.model, "Model directory (config.json, safetensors, tokenizer)");
  cmd->add_option("--host", f.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", f.port, "Port to listen on")->capture_default_str();
  cmd->add_option("--served-model-name", f.served_model_name,
                  "Model name(s) clients use (default: the model path as given)");
  cmd->add_option("--tensor-parallel-size", f.tensor_parallel_size, "Ranks (one device each)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--sequence-parallel", f.sequence_parallel,
                "Shard tokens across ranks between layers");
  cmd->add_option("--ranks-per-device", f.ranks_per_device,
                  "1 (one GPU per rank), or --tensor-parallel-size: every rank on one GPU, each "
                  "planned with its share of the GPU's memory")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--gpu-memory-utilization", f.gpu_memory_utilization,
                  "Fraction of the GPU's memory to use (0.9); the memory planner applies it")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--kv-cache-memory-bytes", f.kv_cache_memory_bytes,
                  "KV cache size in bytes (suffixes K, M, G, KiB, MiB, GiB accepted)")
      ->transform(CLI::AsSizeValue(false));
  cmd->add_option("--max-model-len", f.limits.max_model_len,
                  "Longest sequence (default: max_position_embeddings, capped to the KV pool)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-batched-tokens", f.limits.max_num_batched_tokens,
                  "Token budget per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-num-seqs", f.limits.max_num_seqs, "Sequences per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--block-size", f.limits.block_size, "Tokens per KV block")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--enforce-eager", f.enforce_eager, "Accepted for vLLM compatibility (no graphs)");
  cmd->add_flag("--no-enable-prefix-caching", f.no_enable_prefix_caching, "Disable prefix caching");
  cmd->add_option("--load-format", f.load_format, "auto | dummy (random weights from config)");
  cmd->add_option("--device", f.device, "auto (default: cuda when a GPU exists), cpu, cuda[:N]");
  cmd->add_option("--chat-template", f.chat_template,
                  "Chat template file (or the template text) replacing the model's");
  cmd->add_flag("--enable-auto-tool-choice", f.enable_auto_tool_choice,
                "Let the model decide to call tools (tool_choice auto)");
  cmd->add_option("--tool-call-parser", f.tool_call_parser, "Tool-call output format")
      ->check(CLI::IsMember(chat::tool_parser_names()));
  cmd->add_option("--reasoning-parser", f.reasoning_parser,
                  "Split <think> reasoning out of the content")
      ->check(CLI::IsMember(kThinkParsers));
  cmd->add_option("--generation-config", f.generation_config,
                  "auto: sampling defaults from generation_config.json; vllm: none")
      ->check(CLI::IsMember({"auto", "vllm"}));
  // Test-only: the model "says" the tokenization of this file instead of sampling.
  cmd->add_option("--test-script", f.test_script)->group("");
  add_transport_flags(cmd, f);
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return fmt::format("{:.2f} {}", b, units[u]);
}

RunnerOptions runner_options(const ServeFlags& f, const std::string& model) {
  return {.model = model,
          .load_format = parse_load_format(f.load_format),
          .tensor_parallel_size = f.tensor_parallel_size,
          .sequence_parallel = f.sequence_parallel,
          .device = parse_device(f.device),
          .ranks_per_device = f.ranks_per_device};
}

std::unique_ptr<ModelRunner> load_model(const ServeFlags& f, const std::string& model) {
  int files = 0;
  uintmax_t bytes = 0;
  for (const auto& e : fs::directory_iterator(model))
    if (e.path().extension() == ".safetensors") {
      ++files;
      bytes += e.file_size();
    }
  MLS_LOG_INFO("Loading weights from {}: {} safetensors file(s), {}", model, files,
               human_bytes(static_cast<double>(bytes)));
  const auto t0 = std::chrono::steady_clock::now();
  auto runner = std::make_unique<ModelRunner>(runner_options(f, model));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MLS_LOG_INFO(
      "Loading weights took {:.2f} s ({}/s); weights use {} per rank", s,
      human_bytes(static_cast<double>(bytes) / std::max(s, 1e-9)),
      human_bytes(static_cast<double>(runner->allocator(0).stats().cur(MemTag::kWeights))));
  return runner;
}

// Plans memory (the profiling pass at max_num_batched_tokens, docs/memory-planning.md), logs
// the report and allocates the planned KV pool. On a GPU the pass runs for real and the KV
// cache gets --gpu-memory-utilization of the device less what the pass measured; on the CPU it
// is traced (meta) and the KV budget defaults to kDefaultKvBytes (host memory is shared with
// everything else). --kv-cache-memory-bytes overrides the budget on any device.
MemoryPlan allocate_kv(ModelRunner& runner, const ServeFlags& f) {
  const bool cpu = runner.device().is_cpu();
  PlanBudget budget{
      .device_bytes = device_memory_bytes(runner.device()) / runner.ranks_per_device(),
      .utilization = f.gpu_memory_utilization,
      .kv_cache_memory_bytes = {}};
  if (f.kv_cache_memory_bytes > 0)
    budget.kv_cache_memory_bytes = f.kv_cache_memory_bytes;
  else if (cpu)
    budget.kv_cache_memory_bytes = kDefaultKvBytes;
  const MemoryPlan plan =
      plan_memory(runner, f.limits, budget, cpu ? ProfileMode::kMeta : ProfileMode::kReal);
  std::istringstream lines(plan.report());
  for (std::string line; std::getline(lines, line);) MLS_LOG_INFO("{}", line);
  apply_plan(runner, plan);
  return plan;
}

std::optional<chat::ChatTemplate> load_chat_template(const ServeFlags& f,
                                                     const std::string& model) {
  try {
    if (f.chat_template.empty()) return chat::ChatTemplate::from_dir(model);
    if (fs::exists(f.chat_template)) return chat::ChatTemplate::from_dir(model, f.chat_template);
    // Not a file: the template text itself, as vLLM accepts.
    const tok::TokenizerConfig cfg = tok::TokenizerConfig::from_dir(model);
    return chat::ChatTemplate(f.chat_template, {{"bos_token", cfg.bos_token},
                                                {"eos_token", cfg.eos_token},
                                                {"pad_token", cfg.pad_token},
                                                {"unk_token", cfg.unk_token}});
  } catch (const ConfigError& e) {
    if (!f.chat_template.empty()) throw;
    MLS_LOG_WARN("no chat template ({}); /v1/chat/completions will answer 400", e.what());
    return std::nullopt;
  }
}

server::HttpOptions http_options(const ServeFlags& f) {
  server::HttpOptions o;
  o.transport = {.host = f.host,
                 .port = f.port,
                 .uds = f.uds,
                 .ssl_certfile = f.ssl_certfile,
                 .ssl_keyfile = f.ssl_keyfile,
                 .limits = f.http_limits};
  o.api_keys = f.api_key;
  for (const char* env : {"VLLM_API_KEY", "MLASERVE_API_KEY"})
    if (const char* v = std::getenv(env); o.api_keys.empty() && v && *v) o.api_keys.push_back(v);
  o.cors = {.allowed_origins = server::parse_cors_list("--allowed-origins", f.allowed_origins),
            .allowed_methods = server::parse_cors_list("--allowed-methods", f.allowed_methods),
            .allowed_headers = server::parse_cors_list("--allowed-headers", f.allowed_headers),
            .allow_credentials = f.allow_credentials};
  o.root_path = f.root_path;
  while (o.root_path.size() > 1 && o.root_path.back() == '/') o.root_path.pop_back();
  if (o.root_path == "/") o.root_path.clear();
  return o;
}

// SIGINT and SIGTERM are blocked in every thread and taken synchronously by sigwait, so no
// handler runs in signal context.
sigset_t shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

void run_serve(ServeFlags f) {
  std::string model = !f.model.empty() ? f.model : f.model_positional;
  if (model.empty()) {
    // No model named: the bundled demo model, found relative to build/mlaserve.
    const fs::path bundled =
        fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "models" / "demo-glm5";
    if (!fs::is_directory(bundled))
      raise<InvalidArgument>(
          "serve: give the model directory (--model DIR); the bundled demo "
          "model was not found at {}",
          bundled.string());
    model = bundled.string();
  }
  if (!f.model.empty() && !f.model_positional.empty() && f.model != f.model_positional)
    raise<InvalidArgument>("serve: the positional model '{}' and --model '{}' differ",
                           f.model_positional, f.model);
  if (!fs::is_directory(model)) raise<InvalidArgument>("--model {}: not a directory", model);
  if (f.enable_auto_tool_choice && f.tool_call_parser.empty())
    raise<InvalidArgument>("--enable-auto-tool-choice needs --tool-call-parser");
  if (f.served_model_name.empty()) f.served_model_name.push_back(model);

  const sigset_t signals = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  if (!World::get().leader()) {
    // A follower process under mpirun: no HTTP server; SIGTERM stays blocked, the leader's
    // drain ends the job (docs/multi-node.md).
    ModelRunner(runner_options(f, model)).follow();
    return;
  }

  server::HttpServer http(http_options(f));
  const int port = http.start();
  MLS_LOG_INFO("mlaserve {} listening on {} (loading the model; /health is 503 until ready)",
               server::version(), http.url(port));

  std::unique_ptr<ModelRunner> runner = load_model(f, model);
  const MemoryPlan plan = allocate_kv(*runner, f);
  Engine engine(*runner,
                {.limits = plan.limits, .enable_prefix_caching = !f.no_enable_prefix_caching});
  MLS_LOG_INFO("serving limits: {}", engine.config().limits.str());
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_dir(model);
  const std::optional<chat::ChatTemplate> tmpl = load_chat_template(f, model);

  server::ServingOptions opts{
      .served_model_names = f.served_model_name,
      .model_path = model,
      .tool_call_parser = f.tool_call_parser,
      .reasoning_parser = f.reasoning_parser,
      .enable_auto_tool_choice = f.enable_auto_tool_choice,
      .defaults = server::GenerationDefaults::load(model, f.generation_config),
      .test_script = nullptr};
  if (!f.test_script.empty()) {
    opts.test_script = std::make_shared<const std::vector<int32_t>>(
        tokenizer.encode(tok::read_text_file(f.test_script), false));
    MLS_LOG_WARN("--test-script {}: every request outputs its {} scripted tokens", f.test_script,
                 opts.test_script->size());
  }
  server::Metrics metrics(f.served_model_name.front());
  server::EngineLoop loop(engine);
  server::ServingContext ctx{.opts = std::move(opts),
                             .tokenizer = tokenizer,
                             .chat_template = tmpl ? &*tmpl : nullptr,
                             .loop = loop,
                             .metrics = metrics};
  http.log_routes();
  http.set_context(&ctx);
  MLS_LOG_INFO("Application startup complete: serving '{}' on {}", ctx.model_name(),
               http.url(port));

  int sig = 0;
  sigwait(&signals, &sig);
  MLS_LOG_INFO(
      "{} received: no new connections; requests in flight may finish within {} s "
      "(--shutdown-timeout), then are aborted",
      sig == SIGINT ? "SIGINT" : "SIGTERM", f.shutdown_timeout);
  http.stop(std::chrono::milliseconds(static_cast<int64_t>(f.shutdown_timeout * 1000)));
  loop.stop();
  MLS_LOG_INFO("Shutdown complete");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve the model over an OpenAI-compatible HTTP API (vllm serve flags)");
  add_flags(cmd, *flags);
  cmd->callback([flags] { run_serve(*flags); });
}

}  // namespace mls::cli
