// The `serve` command line: one table of every flag `serve` accepts (vllm serve's names and
// value forms), each implemented, accepted without effect (with the reason printed at start-up)
// or rejected (with what to use instead). The parser, the start-up lines, `serve --help` and
// docs/flags.md are all derived from that table (`serve_flag_table`).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model_runner.h"
#include "engine/speculative_config.h"
#include "server/http_limits.h"

namespace mls::cli {

struct ServeFlags {
  // Model, tokenizer and checkpoint.
  std::string model;  // the positional model_tag or --model: a directory or a Hugging Face id
  std::string tokenizer;
  // No tokenizer is loaded: prompts are token ids, outputs token ids (vLLM's flag).
  bool skip_tokenizer_init = false;
  std::string revision;      // of a Hugging Face id: a ref (main) or a commit hash
  std::string download_dir;  // a Hugging Face cache directory searched first
  std::vector<std::string> served_model_name;
  std::string load_format = "auto";
  std::string dtype = "auto";
  std::string quantization;  // "": the checkpoint's own
  std::string device = "auto";
  // Parallelism.
  int tensor_parallel_size = 1;
  bool sequence_parallel = false;
  int ranks_per_device = 1;
  double distributed_timeout_seconds = 0;  // 0: the job's default (mpirun only)
  // Memory and scheduling.
  double gpu_memory_utilization = 0.9;
  int64_t kv_cache_memory_bytes = 0;
  std::string kv_cache_dtype = "auto";
  int64_t max_model_len = 0;  // 0: max_position_embeddings, capped to the KV pool
  int64_t max_num_batched_tokens = 8192;
  int64_t max_num_seqs = 256;
  int64_t block_size = 64;
  bool enable_prefix_caching = true;
  bool enforce_eager = RunnerOptions{}.enforce_eager;  // no CUDA graphs for decode
  // --batch-invariant; vLLM's VLLM_BATCH_INVARIANT also turns it on (env_batch_invariant).
  bool batch_invariant = RunnerOptions{}.batch_invariant;
  std::optional<uint64_t> seed;
  // --speculative-config: MTP drafting with the checkpoint's own layers; unset: off.
  std::optional<SpeculativeConfig> speculative;
  // Chat and generation.
  std::string chat_template;
  std::string response_role = "assistant";
  nlohmann::ordered_json default_chat_template_kwargs = nlohmann::ordered_json::object();
  bool enable_auto_tool_choice = false;
  bool exclude_tools_when_tool_choice_none = false;
  std::string tool_call_parser;
  std::string reasoning_parser;
  std::string generation_config = "auto";  // auto, vllm or a directory
  nlohmann::ordered_json override_generation_config = nlohmann::ordered_json::object();
  // Logging and observability.
  std::string log_level = "info";
  std::string uvicorn_log_level = "info";
  bool log_requests = false;
  int64_t max_log_len = -1;  // -1: whole prompts in request logs
  bool log_stats = true;
  bool enable_timings = false;
  bool disable_ui = false;
  std::string test_script;  // test-only, hidden

  // Transport: address, port, authentication, TLS, CORS, limits and the drain deadline.
  std::string host = "0.0.0.0";
  int port = 8000;
  std::vector<std::string> api_key;  // any of them; else $VLLM_API_KEY, else $MLASERVE_API_KEY
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

  // Filled by the parser: one start-up line per flag given that has no effect here.
  std::vector<std::string> no_effect_notes;
  bool help = false;
  bool flags_markdown = false;  // print docs/flags.md and exit
};

enum class FlagClass { kImplemented, kNoEffect, kRejected };
enum class FlagArg {
  kSwitch,  // no value; --no-NAME negates it
  kValue,   // one value
  kValues,  // one or more values (until the next flag)
  kJson,    // a JSON value, or NAME.key value pairs that build an object
};

struct FlagSpec {
  std::string_view name;   // "--max-model-len"
  std::string_view alias;  // "-tp", or ""
  FlagArg arg;
  FlagClass cls;
  std::string_view meta;  // value placeholder for --help ("N", "DIR", "JSON")
  std::string_view help;  // what the flag does here
  // kNoEffect: why it changes nothing here. kRejected: why, and what to use instead.
  std::string_view reason;
  // Checks the value and stores it; returns "" or what is wrong with it. Switches receive
  // "true" or "false" (--no-NAME). Every class has one: no-effect and rejected flags still
  // validate their values, so that a typo is reported as such.
  std::string (*apply)(ServeFlags&, const std::string& value);
};

// Every flag `serve` knows, in --help order.
const std::vector<FlagSpec>& serve_flag_table();

struct ParsedServe {
  ServeFlags flags;
  std::vector<std::string> errors;  // every problem of the command line, in argument order
};
// Parses `serve`'s arguments (without the program and subcommand names).
ParsedServe parse_serve_args(const std::vector<std::string>& args);

// vLLM's integer forms: "4096", "128k" (×1000), "32K" (×1024), "1m", "1M", "1.5k",
// plus KiB/MiB/GiB/TiB; nullopt when `s` is none of them or not a whole number.
std::optional<int64_t> parse_human_int(std::string_view s);

// VLLM_BATCH_INVARIANT's value (null: unset) read as vLLM reads it, an integer that turns batch
// invariance on when nonzero; InvalidArgument for anything else.
bool env_batch_invariant(const char* value);
// Batch invariance for a command that builds a runner (serve, plan-memory, bench): its
// --batch-invariant, or this process's VLLM_BATCH_INVARIANT.
bool batch_invariant(bool flag);

std::string serve_help();      // `serve --help`
std::string flags_markdown();  // docs/flags.md

}  // namespace mls::cli
