#include "cli/serve_flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <map>

#include "chat/tool_parser.h"
#include "core/error.h"
#include "engine/speculative_config.h"
#include "server/cors.h"

namespace mls::cli {
namespace {

using ojson = nlohmann::ordered_json;
using Apply = std::string (*)(ServeFlags&, const std::string&);

std::string one_of(const std::string& v, std::initializer_list<std::string_view> allowed) {
  for (std::string_view a : allowed)
    if (v == a) return "";
  std::string list;
  for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
  return fmt::format("expected one of {}", list);
}

std::string set_str(std::string& dst, const std::string& v) {
  if (v.empty()) return "expected a non-empty value";
  dst = v;
  return "";
}

std::string set_bool(bool& dst, const std::string& v) {
  dst = v == "true";
  return "";
}

std::string check_number(const std::string& v);

std::string set_nonnegative(double& dst, const std::string& v) {
  if (std::string e = check_number(v); !e.empty()) return e;
  const double d = std::stod(v);
  if (!(d >= 0)) return "must not be negative";
  dst = d;
  return "";
}

std::string set_int(int64_t& dst, const std::string& v, int64_t min) {
  const std::optional<int64_t> n = parse_human_int(v);
  if (!n) return "expected a whole number (forms such as 4096, 128k, 32K or 1m are accepted)";
  if (*n < min) return fmt::format("must be at least {}", min);
  dst = *n;
  return "";
}

std::string set_int32(int& dst, const std::string& v, int64_t min) {
  int64_t n = 0;
  if (std::string e = set_int(n, v, min); !e.empty()) return e;
  if (n > (int64_t{1} << 30)) return "is too large";
  dst = static_cast<int>(n);
  return "";
}

std::string set_size(size_t& dst, const std::string& v) {
  int64_t n = 0;
  if (std::string e = set_int(n, v, 1); !e.empty()) return e;
  dst = static_cast<size_t>(n);
  return "";
}

std::string set_seconds(std::chrono::seconds& dst, const std::string& v) {
  int64_t n = 0;
  if (std::string e = set_int(n, v, 1); !e.empty()) return e;
  dst = std::chrono::seconds(n);
  return "";
}

std::string set_cors_list(std::string& dst, const char* flag, const std::string& v) {
  try {
    server::parse_cors_list(flag, v);
  } catch (const std::exception& e) {
    return e.what();
  }
  dst = v;
  return "";
}

std::string check_number(const std::string& v) {
  double d = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
  return ec == std::errc() && p == v.data() + v.size() ? "" : "expected a number";
}

std::string set_json_object(ojson& dst, const std::string& v) {
  const ojson j = ojson::parse(v, nullptr, false);
  if (j.is_discarded()) return "not valid JSON";
  if (!j.is_object()) return "expected a JSON object";
  dst = j;
  return "";
}

std::string check_json(const std::string& v) {
  ServeFlags scratch;
  return set_json_object(scratch.default_chat_template_kwargs, v);
}

std::string no_value_check(ServeFlags&, const std::string&) {
  return "";
}

// Only a single rank group: the value must be 1.
std::string only_one(const std::string& v, std::string_view instead) {
  int64_t n = 0;
  if (std::string e = set_int(n, v, 1); !e.empty()) return e;
  return n == 1 ? "" : std::string(instead);
}

constexpr std::string_view kGenerationKeys[] = {
    "temperature", "top_p", "top_k", "min_p", "max_new_tokens", "repetition_penalty"};

std::string set_generation_overrides(ServeFlags& f, const std::string& v) {
  ojson j;
  if (std::string e = set_json_object(j, v); !e.empty()) return e;
  for (const auto& [k, val] : j.items()) {
    if (std::find(std::begin(kGenerationKeys), std::end(kGenerationKeys), k) ==
        std::end(kGenerationKeys))
      return fmt::format(
          "unknown key '{}' (known: temperature, top_p, top_k, min_p, max_new_tokens, "
          "repetition_penalty)",
          k);
    if (!val.is_number()) return fmt::format("'{}' must be a number", k);
  }
  f.override_generation_config = j;
  return "";
}

std::string set_speculative(ServeFlags& f, const std::string& v) {
  ojson j;
  if (std::string e = set_json_object(j, v); !e.empty()) return e;
  try {
    f.speculative = SpeculativeConfig::parse(j);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

const std::vector<std::string> kThinkParsers = {"deepseek_r1", "deepseek_v3", "glm45", "qwen3"};

std::vector<FlagSpec> build_table() {
  using enum FlagArg;
  using enum FlagClass;
  std::vector<FlagSpec> t = {
      // Model, tokenizer and checkpoint.
      {"--model", "", kValue, kImplemented, "DIR|ID",
       "Model directory, or a Hugging Face id found in the local cache (same as the positional "
       "model_tag)",
       "", [](ServeFlags& f, const std::string& v) { return set_str(f.model, v); }},
      {"--tokenizer", "", kValue, kImplemented, "DIR|ID",
       "Directory (or cached Hugging Face id) holding tokenizer.json, tokenizer_config.json and "
       "the chat template; default: the model's",
       "", [](ServeFlags& f, const std::string& v) { return set_str(f.tokenizer, v); }},
      {"--skip-tokenizer-init", "", kSwitch, kImplemented, "",
       "Load no tokenizer (none is needed on disk): /v1/completions takes prompts as token ids "
       "and answers token ids (choices' token_ids, text empty); anything that needs text "
       "(chat, /v1/responses, /tokenize, text prompts, stop strings, logprobs, structured "
       "outputs) answers 400",
       "",
       [](ServeFlags& f, const std::string& v) { return set_bool(f.skip_tokenizer_init, v); }},
      {"--revision", "", kValue, kImplemented, "REV",
       "Revision of a Hugging Face id: a ref under refs/ (default main) or a snapshot hash", "",
       [](ServeFlags& f, const std::string& v) { return set_str(f.revision, v); }},
      {"--download-dir", "", kValue, kImplemented, "DIR",
       "Hugging Face cache searched before $HF_HUB_CACHE and $HF_HOME/hub (nothing is "
       "downloaded)",
       "", [](ServeFlags& f, const std::string& v) { return set_str(f.download_dir, v); }},
      {"--served-model-name", "", kValues, kImplemented, "NAME...",
       "Model name(s) clients use; the first is reported in responses (default: the model as "
       "given)",
       "",
       [](ServeFlags& f, const std::string& v) {
         f.served_model_name.push_back(v);
         return std::string();
       }},
      {"--load-format", "", kValue, kImplemented, "FMT",
       "auto or safetensors: the checkpoint; dummy: random weights from config.json", "",
       [](ServeFlags& f, const std::string& v) {
         if (std::string e = one_of(v, {"auto", "safetensors", "dummy"}); !e.empty()) return e;
         f.load_format = v == "dummy" ? "dummy" : "auto";
         return std::string();
       }},
      {"--dtype", "", kValue, kImplemented, "auto|bfloat16",
       "Activation dtype: bf16 on the GPU; the CPU backend computes in f32 either way", "",
       [](ServeFlags& f, const std::string& v) {
         if (one_of(v, {"auto", "bfloat16", "bf16"}).empty()) {
           f.dtype = v == "auto" ? "auto" : "bfloat16";
           return std::string();
         }
         return std::string(
             "only bf16 activations are built (f32 on the CPU); use --dtype auto or bfloat16");
       }},
      {"--quantization", "-q", kValue, kImplemented, "METHOD",
       "Must name the checkpoint's own format (fp8 for block-FP8 checkpoints): checkpoints are "
       "served as they ship, never quantised on the fly",
       "", [](ServeFlags& f, const std::string& v) { return set_str(f.quantization, v); }},
      {"--tokenizer-mode", "", kValue, kNoEffect, "MODE", "vLLM's tokenizer implementation choice",
       "the tokenizer is always tokenizer.json's byte-level BPE and the prompt format always "
       "comes from the chat template (the model's or --chat-template)",
       [](ServeFlags&, const std::string& v) {
         return one_of(v, {"auto", "hf", "slow", "deepseek_v32"});
       }},
      {"--trust-remote-code", "", kSwitch, kNoEffect, "", "Let transformers run the repo's code",
       "no Python code runs here: deepseek_v3, deepseek_v32 and glm_moe_dsa are built in",
       no_value_check},
      {"--hf-token", "", kValue, kNoEffect, "TOKEN", "Token for Hugging Face downloads",
       "nothing is downloaded: models come from disk or the local Hugging Face cache",
       no_value_check},
      {"--hf-overrides", "", kJson, kRejected, "JSON", "Overrides of config.json fields",
       "the model is built from config.json as it is; edit config.json in a copy of the model "
       "directory instead",
       [](ServeFlags&, const std::string& v) { return check_json(v); }},
      {"--device", "", kValue, kImplemented, "DEV",
       "auto (cuda when a GPU exists, else cpu), cpu, cuda or cuda:N", "",
       [](ServeFlags& f, const std::string& v) { return set_str(f.device, v); }},

      // Parallelism.
      {"--tensor-parallel-size", "-tp", kValue, kImplemented, "N",
       "Tensor-parallel ranks, one device each (GPUs N..N+tp-1)", "",
       [](ServeFlags& f, const std::string& v) { return set_int32(f.tensor_parallel_size, v, 1); }},
      {"--sequence-parallel", "", kSwitch, kImplemented, "",
       "Shard tokens across ranks between layers (mlaserve's own flag)", "",
       [](ServeFlags& f, const std::string& v) { return set_bool(f.sequence_parallel, v); }},
      {"--ranks-per-device", "", kValue, kImplemented, "N",
       "1 (one GPU per rank), or --tensor-parallel-size: every rank on one GPU, each planned "
       "with its share of the GPU's memory (mlaserve's own flag)",
       "",
       [](ServeFlags& f, const std::string& v) { return set_int32(f.ranks_per_device, v, 1); }},
      {"--distributed-timeout-seconds", "", kValue, kImplemented, "S",
       "Under mpirun: the longest wait of any collective before the job is taken down (600; "
       "also $MLASERVE_DISTRIBUTED_TIMEOUT_SECONDS)",
       "",
       [](ServeFlags& f, const std::string& v) {
         if (std::string e = set_nonnegative(f.distributed_timeout_seconds, v); !e.empty())
           return e;
         return f.distributed_timeout_seconds > 0 ? std::string() : std::string("must be > 0");
       }},
      {"--pipeline-parallel-size", "-pp", kValue, kImplemented, "1",
       "Only 1: there is no pipeline parallelism", "",
       [](ServeFlags&, const std::string& v) {
         return only_one(v, "there is no pipeline parallelism; use --tensor-parallel-size");
       }},
      {"--data-parallel-size", "-dp", kValue, kImplemented, "1",
       "Only 1: one server is one model replica", "",
       [](ServeFlags&, const std::string& v) {
         return only_one(v,
                         "one server is one replica: run one mlaserve per replica behind a load "
                         "balancer, or use --tensor-parallel-size for one model over N GPUs");
       }},
      {"--enable-expert-parallel", "", kSwitch, kNoEffect, "", "vLLM's expert-parallel MoE layout",
       "experts are split by tensor parallelism over the same ranks (every rank holds a slice of "
       "every expert); the outputs are the same",
       no_value_check},
      {"--enable-eplb", "", kSwitch, kNoEffect, "", "vLLM's expert load balancer",
       "without expert parallelism there is no expert placement to balance", no_value_check},
      {"--distributed-executor-backend", "", kValue, kNoEffect, "BACKEND",
       "vLLM's worker launcher (mp, ray, uni, external_launcher)",
       "ranks are threads of this process, one GPU each, talking through NCCL, or of several "
       "processes started by mpirun (docs/multi-node.md)",
       [](ServeFlags&, const std::string& v) {
         return one_of(v, {"mp", "ray", "uni", "external_launcher"});
       }},
      {"--disable-custom-all-reduce", "", kSwitch, kNoEffect, "", "vLLM's own all-reduce kernel",
       "all-reduce is NCCL's (in-process sums on the CPU); there is no custom kernel to turn off",
       no_value_check},

      // Memory and scheduling.
      {"--gpu-memory-utilization", "", kValue, kImplemented, "F",
       "Fraction of the GPU's memory to use (0.9); the memory planner applies it", "",
       [](ServeFlags& f, const std::string& v) {
         if (std::string e = check_number(v); !e.empty()) return e;
         const double d = std::stod(v);
         if (!(d > 0.0 && d <= 1.0)) return std::string("must be in (0, 1]");
         f.gpu_memory_utilization = d;
         return std::string();
       }},
      {"--kv-cache-memory-bytes", "", kValue, kImplemented, "BYTES",
       "KV cache size (4G, 64MiB, ...); default: planned from --gpu-memory-utilization on the "
       "GPU, 256 MiB on the CPU",
       "",
       [](ServeFlags& f, const std::string& v) { return set_int(f.kv_cache_memory_bytes, v, 1); }},
      {"--kv-cache-dtype", "", kValue, kImplemented, "auto|bfloat16",
       "KV cache dtype: bf16 on the GPU (f32 on the CPU); fp8 is rejected (no FP8 cache yet)", "",
       [](ServeFlags& f, const std::string& v) {
         if (v.rfind("fp8", 0) == 0)
           return std::string(
               "there is no FP8 KV cache yet; use --kv-cache-dtype auto (bf16 on the GPU)");
         if (std::string e = one_of(v, {"auto", "bfloat16", "bf16"}); !e.empty()) return e;
         f.kv_cache_dtype = v == "auto" ? "auto" : "bfloat16";
         return std::string();
       }},
      {"--swap-space", "", kValue, kNoEffect, "GIB", "CPU swap space for KV blocks",
       "KV blocks are never swapped to the CPU; a preempted request is recomputed",
       [](ServeFlags&, const std::string& v) { return check_number(v); }},
      {"--cpu-offload-gb", "", kValue, kRejected, "GIB", "Offload weights to CPU memory",
       "weights stay in device memory; spread them over more GPUs with --tensor-parallel-size",
       [](ServeFlags&, const std::string& v) { return check_number(v); }},
      {"--max-model-len", "", kValue, kImplemented, "N",
       "Longest sequence (128k, 32K, 1m, auto); default and auto: max_position_embeddings, "
       "capped to the KV pool",
       "",
       [](ServeFlags& f, const std::string& v) {
         if (v == "auto" || v == "-1") {
           f.max_model_len = 0;
           return std::string();
         }
         return set_int(f.max_model_len, v, 1);
       }},
      {"--max-num-batched-tokens", "", kValue, kImplemented, "N",
       "Token budget of one step (default 8192)", "",
       [](ServeFlags& f, const std::string& v) {
         return set_int(f.max_num_batched_tokens, v, 1);
       }},
      {"--max-num-seqs", "", kValue, kImplemented, "N", "Sequences in one step (default 256)", "",
       [](ServeFlags& f, const std::string& v) { return set_int(f.max_num_seqs, v, 1); }},
      {"--block-size", "", kValue, kImplemented, "N", "Tokens per KV block (default 64)", "",
       [](ServeFlags& f, const std::string& v) { return set_int(f.block_size, v, 1); }},
      {"--enable-prefix-caching", "", kSwitch, kImplemented, "",
       "Reuse the KV blocks of a shared prompt prefix (on by default; --no-enable-prefix-caching "
       "turns it off)",
       "",
       [](ServeFlags& f, const std::string& v) { return set_bool(f.enable_prefix_caching, v); }},
      {"--enable-chunked-prefill", "", kSwitch, kImplemented, "",
       "Split long prompts over steps within --max-num-batched-tokens (always on)", "",
       [](ServeFlags&, const std::string& v) {
         return v == "true" ? std::string()
                            : std::string(
                                  "prefill is always chunked to the step's token budget; to "
                                  "prefill a prompt in one step set --max-num-batched-tokens to "
                                  "--max-model-len");
       }},
      {"--scheduling-policy", "", kValue, kImplemented, "fcfs",
       "First come, first served (the only policy)", "",
       [](ServeFlags&, const std::string& v) {
         return v == "fcfs" ? std::string()
                            : std::string("only fcfs is built (requests carry no priority)");
       }},
      {"--async-scheduling", "", kSwitch, kNoEffect, "", "Overlap scheduling with execution",
       "the engine thread schedules each step right before running it; there is no separate "
       "scheduler to overlap",
       no_value_check},
      {"--enforce-eager", "", kSwitch, kImplemented, "",
       "Never capture CUDA graphs for decode. Without it a GPU at tensor-parallel size 1 "
       "captures one graph per batch-size bucket; replays give the eager steps' bits",
       "", [](ServeFlags& f, const std::string& v) { return set_bool(f.enforce_eager, v); }},
      {"--batch-invariant", "", kSwitch, kImplemented, "",
       "Every token's output independent of the batch it runs in (mlaserve; vLLM's "
       "VLLM_BATCH_INVARIANT=1, which mlaserve also reads): one attention cut for every step, "
       "so a prompt's cached prefix gives the bits recomputing it would. Costs small and large "
       "steps' attention time on a GPU; refused there for block-FP8 checkpoints",
       "", [](ServeFlags& f, const std::string& v) { return set_bool(f.batch_invariant, v); }},
      {"--compilation-config", "-O", kJson, kNoEffect, "JSON", "torch.compile and CUDA-graph "
       "settings",
       "there is no torch.compile: the kernels are compiled ahead of time; whether decode "
       "captures CUDA graphs is --enforce-eager's choice",
       [](ServeFlags&, const std::string& v) {
         // -O3 style levels are plain numbers.
         return parse_human_int(v) ? std::string() : check_json(v);
       }},
      {"--speculative-config", "", kJson, kImplemented, "JSON",
       "Speculative decoding with the checkpoint's MTP layer: method mtp (or deepseek_mtp, "
       "glm4_moe_mtp), num_speculative_tokens 1-4 drafts per step, verified in one target "
       "forward (greedy output unchanged, sampled output the target's distribution; drafts go "
       "through the request's grammar). On a GPU the verify steps replay the decode graphs and "
       "the draft steps the MTP layer's own (none with --enforce-eager)",
       "", set_speculative},
      {"--seed", "", kValue, kImplemented, "N",
       "Seed of the server's generator: requests without a seed draw theirs from it, so a run "
       "repeats when requests arrive in the same order",
       "",
       [](ServeFlags& f, const std::string& v) {
         int64_t n = 0;
         if (std::string e = set_int(n, v, 0); !e.empty()) return e;
         f.seed = static_cast<uint64_t>(n);
         return std::string();
       }},
      {"--enable-lora", "", kSwitch, kRejected, "", "Serve LoRA adapters",
       "there are no LoRA adapters here; merge the adapter into the weights and serve that "
       "checkpoint",
       no_value_check},
      {"--kv-transfer-config", "", kJson, kRejected, "JSON", "Disaggregated prefill connector",
       "there is no KV transfer between instances; serve prefill and decode in one server",
       [](ServeFlags&, const std::string& v) { return check_json(v); }},

      // Chat and generation.
      {"--chat-template", "", kValue, kImplemented, "FILE|TEXT",
       "Chat template file (or the template text) replacing the model's", "",
       [](ServeFlags& f, const std::string& v) { return set_str(f.chat_template, v); }},
      {"--chat-template-content-format", "", kValue, kImplemented, "auto|string",
       "Message content reaches the template as a string (text parts joined)", "",
       [](ServeFlags&, const std::string& v) {
         return v == "auto" || v == "string"
                    ? std::string()
                    : std::string(
                          "message content always reaches the template as a string; use auto "
                          "or string");
       }},
      {"--default-chat-template-kwargs", "", kJson, kImplemented, "JSON",
       "Template variables every chat request gets unless it sets them (e.g. "
       "{\"enable_thinking\": false})",
       "",
       [](ServeFlags& f, const std::string& v) {
         return set_json_object(f.default_chat_template_kwargs, v);
       }},
      {"--response-role", "", kValue, kImplemented, "ROLE",
       "Role of the generated message (default assistant)", "",
       [](ServeFlags& f, const std::string& v) { return set_str(f.response_role, v); }},
      {"--enable-auto-tool-choice", "", kSwitch, kImplemented, "",
       "Let the model decide to call tools (tool_choice auto); needs --tool-call-parser", "",
       [](ServeFlags& f, const std::string& v) { return set_bool(f.enable_auto_tool_choice, v); }},
      {"--tool-call-parser", "", kValue, kImplemented, "NAME",
       "Tool-call output format: glm47, deepseek_v31 or deepseek_v32", "",
       [](ServeFlags& f, const std::string& v) {
         const std::vector<std::string> names = chat::tool_parser_names();
         if (std::find(names.begin(), names.end(), v) == names.end())
           return std::string("expected one of glm47, deepseek_v31, deepseek_v32");
         f.tool_call_parser = v;
         return std::string();
       }},
      {"--exclude-tools-when-tool-choice-none", "", kSwitch, kImplemented, "",
       "Leave the tools out of the prompt when a request sets tool_choice none", "",
       [](ServeFlags& f, const std::string& v) {
         return set_bool(f.exclude_tools_when_tool_choice_none, v);
       }},
      {"--reasoning-parser", "", kValue, kImplemented, "NAME",
       "Split <think> reasoning out of the content: deepseek_r1, deepseek_v3, glm45 or qwen3", "",
       [](ServeFlags& f, const std::string& v) {
         if (std::find(kThinkParsers.begin(), kThinkParsers.end(), v) == kThinkParsers.end())
           return std::string("expected one of deepseek_r1, deepseek_v3, glm45, qwen3");
         f.reasoning_parser = v;
         return std::string();
       }},
      {"--generation-config", "", kValue, kImplemented, "auto|vllm|DIR",
       "Sampling defaults: auto from the model's generation_config.json, DIR from "
       "DIR/generation_config.json, vllm none",
       "", [](ServeFlags& f, const std::string& v) { return set_str(f.generation_config, v); }},
      {"--override-generation-config", "", kJson, kImplemented, "JSON",
       "Sampling defaults set over --generation-config's (temperature, top_p, top_k, min_p, "
       "max_new_tokens, repetition_penalty)",
       "", set_generation_overrides},

      // Logging and observability.
      {"--log-level", "", kValue, kImplemented, "LEVEL",
       "Log level: trace, debug, info, warning, error, critical", "",
       [](ServeFlags& f, const std::string& v) {
         if (std::string e = one_of(v, {"trace", "debug", "info", "warning", "error", "critical"});
             !e.empty())
           return e;
         f.log_level = v;
         return std::string();
       }},
      {"--uvicorn-log-level", "", kValue, kImplemented, "LEVEL",
       "vLLM's HTTP-server log level; one logger serves both here, so it sets the level unless "
       "--log-level does",
       "",
       [](ServeFlags& f, const std::string& v) {
         if (std::string e = one_of(v, {"trace", "debug", "info", "warning", "error", "critical"});
             !e.empty())
           return e;
         f.uvicorn_log_level = v;
         return std::string();
       }},
      {"--enable-log-requests", "", kSwitch, kImplemented, "",
       "Log each request's prompt (up to --max-log-len characters) and sampling parameters", "",
       [](ServeFlags& f, const std::string& v) { return set_bool(f.log_requests, v); }},
      {"--disable-log-requests", "", kSwitch, kImplemented, "",
       "Do not log requests (the default; vLLM's older spelling)", "",
       [](ServeFlags& f, const std::string& v) {
         f.log_requests = v != "true";
         return std::string();
       }},
      {"--max-log-len", "", kValue, kImplemented, "N",
       "Characters of a prompt a request log shows (default: all)", "",
       [](ServeFlags& f, const std::string& v) { return set_int(f.max_log_len, v, 0); }},
      {"--disable-log-stats", "", kSwitch, kImplemented, "",
       "No periodic throughput / KV-usage log lines", "",
       [](ServeFlags& f, const std::string& v) {
         f.log_stats = v != "true";
         return std::string();
       }},
      {"--enable-response-timings", "", kSwitch, kImplemented, "",
       "Add llama-server's `timings` object (prompt and generation ms, tokens and tokens/s) to "
       "non-streaming responses and to a stream's usage chunk",
       "",
       [](ServeFlags& f, const std::string& v) { return set_bool(f.enable_timings, v); }},
      {"--disable-fastapi-docs", "", kSwitch, kNoEffect, "", "Hide FastAPI's /docs pages",
       "there are no /docs, /redoc or /openapi.json pages to turn off", no_value_check},
      {"--disable-frontend-multiprocessing", "", kSwitch, kNoEffect, "",
       "Run vLLM's API server and engine in one process",
       "the HTTP front and the engine are already threads of one process", no_value_check},
      {"--disable-ui", "", kSwitch, kImplemented, "", "Do not serve the chat page at GET /", "",
       [](ServeFlags& f, const std::string& v) { return set_bool(f.disable_ui, v); }},
      // Hidden: test-only scripted output, and docs/flags.md from this table.
      {"--test-script", "", kValue, kImplemented, "FILE", "", "",
       [](ServeFlags& f, const std::string& v) { return set_str(f.test_script, v); }},
      {"--flags-markdown", "", kSwitch, kImplemented, "", "", "",
       [](ServeFlags& f, const std::string& v) { return set_bool(f.flags_markdown, v); }},

      // Transport: address, port and authentication.
      {"--host", "", kValue, kImplemented, "ADDR", "Address to listen on (default 0.0.0.0)", "",
       [](ServeFlags& f, const std::string& v) { return set_str(f.host, v); }},
      {"--port", "", kValue, kImplemented, "PORT", "Port to listen on (default 8000)", "",
       [](ServeFlags& f, const std::string& v) { return set_int32(f.port, v, 0); }},
      {"--api-key", "", kValues, kImplemented, "KEY...",
       "Require one of these keys as Bearer token on /v1, /tokenize and /detokenize (else "
       "$VLLM_API_KEY, else $MLASERVE_API_KEY)",
       "",
       [](ServeFlags& f, const std::string& v) {
         if (v.empty()) return std::string("expected a non-empty key");
         f.api_key.push_back(v);
         return std::string();
       }},
      {"--uds", "", kValue, kImplemented, "PATH", "Listen on this Unix socket instead of TCP", "",
       [](ServeFlags& f, const std::string& v) { return set_str(f.uds, v); }},
      {"--ssl-keyfile", "", kValue, kImplemented, "FILE", "TLS private key (PEM)", "",
       [](ServeFlags& f, const std::string& v) { return set_str(f.ssl_keyfile, v); }},
      {"--ssl-certfile", "", kValue, kImplemented, "FILE", "TLS certificate chain (PEM)", "",
       [](ServeFlags& f, const std::string& v) { return set_str(f.ssl_certfile, v); }},
      {"--root-path", "", kValue, kImplemented, "PATH",
       "Prefix a proxy adds to every route (stripped before routing)", "",
       [](ServeFlags& f, const std::string& v) { return set_str(f.root_path, v); }},
      {"--allowed-origins", "", kValue, kImplemented, "JSON",
       "CORS: allowed origins, a JSON list ([\"*\"])", "",
       [](ServeFlags& f, const std::string& v) {
         return set_cors_list(f.allowed_origins, "--allowed-origins", v);
       }},
      {"--allowed-methods", "", kValue, kImplemented, "JSON", "CORS: allowed methods", "",
       [](ServeFlags& f, const std::string& v) {
         return set_cors_list(f.allowed_methods, "--allowed-methods", v);
       }},
      {"--allowed-headers", "", kValue, kImplemented, "JSON", "CORS: allowed headers", "",
       [](ServeFlags& f, const std::string& v) {
         return set_cors_list(f.allowed_headers, "--allowed-headers", v);
       }},
      {"--allow-credentials", "", kSwitch, kImplemented, "", "CORS: allow credentials", "",
       [](ServeFlags& f, const std::string& v) { return set_bool(f.allow_credentials, v); }},
      {"--shutdown-timeout", "", kValue, kImplemented, "S",
       "Seconds requests in flight may run on after SIGTERM/SIGINT before they are aborted (30)",
       "",
       [](ServeFlags& f, const std::string& v) { return set_nonnegative(f.shutdown_timeout, v); }},
      {"--h11-max-incomplete-event-size", "", kValue, kImplemented, "BYTES",
       "Request line and headers, bytes (431 beyond; 64KiB)", "",
       [](ServeFlags& f, const std::string& v) {
         return set_size(f.http_limits.max_header_bytes, v);
       }},
      {"--h11-max-header-count", "", kValue, kImplemented, "N", "Header fields (431 beyond; 256)",
       "",
       [](ServeFlags& f, const std::string& v) {
         return set_size(f.http_limits.max_header_count, v);
       }},
      {"--max-uri-length", "", kValue, kImplemented, "BYTES", "Request target (414 beyond; 8KiB)",
       "",
       [](ServeFlags& f, const std::string& v) { return set_size(f.http_limits.max_uri_bytes, v); }},
      {"--max-request-body-bytes", "", kValue, kImplemented, "BYTES",
       "Request body under any framing (413 beyond; 32MiB)", "",
       [](ServeFlags& f, const std::string& v) {
         return set_size(f.http_limits.max_body_bytes, v);
       }},
      {"--max-header-seconds", "", kValue, kImplemented, "S",
       "From accept (or a kept-alive request's first byte) to the end of the headers (10)", "",
       [](ServeFlags& f, const std::string& v) {
         return set_seconds(f.http_limits.header_timeout, v);
       }},
      {"--max-body-seconds", "", kValue, kImplemented, "S", "Reading a request body (60)", "",
       [](ServeFlags& f, const std::string& v) {
         return set_seconds(f.http_limits.body_timeout, v);
       }},
      {"--max-keep-alive-seconds", "", kValue, kImplemented, "S",
       "Idle kept-alive connection (5)", "",
       [](ServeFlags& f, const std::string& v) {
         return set_seconds(f.http_limits.keep_alive_timeout, v);
       }},
      {"--max-send-stall-seconds", "", kValue, kImplemented, "S",
       "A write that makes no progress ends the connection (60)", "",
       [](ServeFlags& f, const std::string& v) {
         return set_seconds(f.http_limits.send_timeout, v);
       }},
      {"--max-connections", "", kValue, kImplemented, "N", "Open connections (503 beyond; 4096)",
       "",
       [](ServeFlags& f, const std::string& v) {
         return set_size(f.http_limits.max_connections, v);
       }},
      {"--max-connections-per-peer", "", kValue, kImplemented, "N",
       "Open connections from one address (503 beyond; 1024)", "",
       [](ServeFlags& f, const std::string& v) {
         return set_size(f.http_limits.max_connections_per_peer, v);
       }},
  };
  return t;
}

const FlagSpec* find_flag(std::string_view name) {
  for (const FlagSpec& s : serve_flag_table())
    if (s.name == name || (!s.alias.empty() && s.alias == name)) return &s;
  return nullptr;
}

// vLLM accepts --enable_expert_parallel for --enable-expert-parallel; the part after a dot
// (--speculative-config.num_speculative_tokens) is a JSON key and keeps its spelling.
std::string normalise_name(std::string_view flag) {
  std::string s(flag);
  if (s.rfind("--", 0) != 0) return s;
  const size_t dot = s.find('.');
  std::replace(s.begin() + 2, dot == std::string::npos ? s.end() : s.begin() + dot, '_', '-');
  return s;
}

bool looks_like_flag(const std::string& tok) {
  if (tok.size() < 2 || tok[0] != '-') return false;
  return !(std::isdigit(static_cast<unsigned char>(tok[1])) || tok[1] == '.');
}

// Sets `path` (dotted) in `obj`; the value is JSON when it parses as JSON, else a string.
void set_dotted(ojson& obj, std::string_view path, const std::string& value) {
  ojson* cur = &obj;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    const std::string key(path.substr(start, dot - start));
    if (dot == std::string_view::npos) {
      const ojson parsed = ojson::parse(value, nullptr, false);
      (*cur)[key] = parsed.is_discarded() ? ojson(value) : parsed;
      return;
    }
    if (!(*cur)[key].is_object()) (*cur)[key] = ojson::object();
    cur = &(*cur)[key];
    start = dot + 1;
  }
}

std::string suggestion(std::string_view name) {
  // The table name sharing the longest prefix, when it shares a fair part of it.
  const FlagSpec* best = nullptr;
  size_t best_len = 0;
  for (const FlagSpec& s : serve_flag_table()) {
    size_t n = 0;
    while (n < s.name.size() && n < name.size() && s.name[n] == name[n]) ++n;
    if (n > best_len) {
      best_len = n;
      best = &s;
    }
  }
  return best && best_len >= 6 ? fmt::format(" (did you mean {}?)", best->name) : "";
}

const char* class_name(FlagClass c) {
  switch (c) {
    case FlagClass::kImplemented:
      return "implemented";
    case FlagClass::kNoEffect:
      return "accepted, no effect";
    case FlagClass::kRejected:
      return "rejected";
  }
  return "";
}

std::string flag_usage(const FlagSpec& s) {
  std::string u(s.name);
  if (!s.alias.empty()) u += ", " + std::string(s.alias);
  if (s.arg == FlagArg::kSwitch) {
    u += ", --no-" + std::string(s.name.substr(2));
  } else {
    u += " " + std::string(s.meta);
  }
  return u;
}

}  // namespace

const std::vector<FlagSpec>& serve_flag_table() {
  static const std::vector<FlagSpec> table = build_table();
  return table;
}

bool env_batch_invariant(const char* value) {
  if (!value) return false;
  const std::string_view v(value);
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size())
    raise<InvalidArgument>("VLLM_BATCH_INVARIANT={}: expected an integer (0 off, 1 on)", v);
  return n != 0;
}

bool batch_invariant(bool flag) {
  return flag || env_batch_invariant(std::getenv("VLLM_BATCH_INVARIANT"));
}

std::optional<int64_t> parse_human_int(std::string_view s) {
  if (s.empty()) return std::nullopt;
  struct Suffix {
    std::string_view text;
    double factor;
  };
  static constexpr Suffix kSuffixes[] = {{"KiB", 1024.0},
                                         {"MiB", 1048576.0},
                                         {"GiB", 1073741824.0},
                                         {"TiB", 1099511627776.0},
                                         {"k", 1e3},
                                         {"m", 1e6},
                                         {"g", 1e9},
                                         {"t", 1e12},
                                         {"K", 1024.0},
                                         {"M", 1048576.0},
                                         {"G", 1073741824.0},
                                         {"T", 1099511627776.0}};
  double factor = 1.0;
  std::string_view digits = s;
  for (const Suffix& x : kSuffixes)
    if (s.size() > x.text.size() && s.substr(s.size() - x.text.size()) == x.text) {
      factor = x.factor;
      digits = s.substr(0, s.size() - x.text.size());
      break;
    }
  if (digits.empty() || digits.front() == '+' || digits.front() == '-' ||
      digits.find_first_not_of("0123456789.") != std::string_view::npos)
    return std::nullopt;
  if (factor == 1.0) {
    int64_t n = 0;
    const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (ec != std::errc() || p != digits.data() + digits.size()) return std::nullopt;
    return n;
  }
  double d = 0;
  const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), d);
  if (ec != std::errc() || p != digits.data() + digits.size()) return std::nullopt;
  const double v = d * factor;
  if (v > 9.0e18 || std::abs(v - std::round(v)) > 1e-6) return std::nullopt;
  return static_cast<int64_t>(std::llround(v));
}

ParsedServe parse_serve_args(const std::vector<std::string>& args) {
  ParsedServe out;
  ServeFlags& f = out.flags;
  std::vector<std::string>& errors = out.errors;
  // JSON flags collect every --NAME JSON and --NAME.key value first, then apply once.
  std::vector<std::pair<const FlagSpec*, ojson>> json_flags;
  const auto json_slot = [&](const FlagSpec* s) -> ojson& {
    for (auto& [spec, j] : json_flags)
      if (spec == s) return j;
    json_flags.emplace_back(s, ojson::object());
    return json_flags.back().second;
  };
  const auto apply = [&](const FlagSpec& s, const std::string& shown, const std::string& value) {
    const std::string problem = s.apply(f, value);
    if (!problem.empty()) {
      errors.push_back(fmt::format("{}: {}", shown, problem));
    } else if (s.cls == FlagClass::kNoEffect) {
      f.no_effect_notes.push_back(fmt::format("{}: accepted, no effect here: {}", shown, s.reason));
    } else if (s.cls == FlagClass::kRejected) {
      errors.push_back(fmt::format("{}: not supported: {}", shown, s.reason));
    }
  };

  bool model_set_by_flag = false;
  std::string positional;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& tok = args[i];
    if (!looks_like_flag(tok)) {
      if (positional.empty())
        positional = tok;
      else
        errors.push_back(
            fmt::format("unexpected argument '{}' (the model is '{}')", tok, positional));
      continue;
    }
    if (tok == "--help" || tok == "-h") {
      f.help = true;
      continue;
    }
    const size_t eq = tok.find('=');
    std::string name = normalise_name(tok.substr(0, eq));
    std::optional<std::string> inline_value;
    if (eq != std::string::npos) inline_value = tok.substr(eq + 1);
    // -O3 is --compilation-config 3.
    if (name.size() > 2 && name.rfind("-O", 0) == 0 && !inline_value) {
      inline_value = name.substr(2);
      name = "-O";
    }
    std::string key;  // NAME.key of a JSON flag
    if (const size_t dot = name.find('.'); dot != std::string::npos) {
      key = name.substr(dot + 1);
      name = name.substr(0, dot);
    }
    const FlagSpec* spec = find_flag(name);
    bool negated = false;
    if (!spec && name.rfind("--no-", 0) == 0) {
      spec = find_flag("--" + name.substr(5));
      negated = spec && spec->arg == FlagArg::kSwitch;
      if (!negated) spec = nullptr;
    }
    const auto next_value = [&]() -> std::optional<std::string> {
      if (inline_value) return inline_value;
      if (i + 1 < args.size() && !looks_like_flag(args[i + 1])) return args[++i];
      return std::nullopt;
    };
    if (!spec) {
      errors.push_back(fmt::format("unknown flag {}{}", tok.substr(0, eq), suggestion(name)));
      // Its values, if any, are not the model.
      while (!inline_value && i + 1 < args.size() && !looks_like_flag(args[i + 1])) ++i;
      continue;
    }
    if (!key.empty() && spec->arg != FlagArg::kJson) {
      errors.push_back(fmt::format("{}: only JSON-valued flags take .key suffixes", tok));
      continue;
    }
    switch (spec->arg) {
      case FlagArg::kSwitch:
        if (inline_value) {
          errors.push_back(fmt::format("{} takes no value (use {} or --no-{})", tok, spec->name,
                                       spec->name.substr(2)));
          break;
        }
        apply(*spec,
              negated ? "--no-" + std::string(spec->name.substr(2)) : std::string(spec->name),
              negated ? "false" : "true");
        break;
      case FlagArg::kValue: {
        const std::optional<std::string> v = next_value();
        if (!v) {
          errors.push_back(fmt::format("{} needs a value ({})", spec->name, spec->meta));
          break;
        }
        if (spec->name == "--model") model_set_by_flag = true;
        apply(*spec, fmt::format("{} {}", spec->name, *v), *v);
        break;
      }
      case FlagArg::kValues: {
        int n = 0;
        if (inline_value) {
          apply(*spec, fmt::format("{} {}", spec->name, *inline_value), *inline_value);
          ++n;
        } else {
          while (i + 1 < args.size() && !looks_like_flag(args[i + 1])) {
            ++i;
            apply(*spec, fmt::format("{} {}", spec->name, args[i]), args[i]);
            ++n;
          }
        }
        if (n == 0) errors.push_back(fmt::format("{} needs a value ({})", spec->name, spec->meta));
        break;
      }
      case FlagArg::kJson: {
        const std::optional<std::string> v = next_value();
        if (!v) {
          errors.push_back(fmt::format("{} needs a value ({})", tok.substr(0, eq), spec->meta));
          break;
        }
        if (!key.empty()) {
          set_dotted(json_slot(spec), key, *v);
          break;
        }
        const ojson j = ojson::parse(*v, nullptr, false);
        if (j.is_object()) {
          json_slot(spec).update(j, true);
        } else if (!j.is_discarded() && spec->name == "--compilation-config") {
          json_slot(spec)["level"] = j;  // -O3
        } else {
          errors.push_back(
              fmt::format("{} {}: {}", spec->name, *v,
                          j.is_discarded() ? "not valid JSON" : "expected a JSON object"));
        }
        break;
      }
    }
  }
  for (const auto& [spec, j] : json_flags) {
    const std::string text = j.dump();
    apply(*spec, fmt::format("{} {}", spec->name, text), text);
  }
  if (!positional.empty()) {
    if (model_set_by_flag && f.model != positional)
      errors.push_back(
          fmt::format("the positional model '{}' and --model '{}' differ", positional, f.model));
    f.model = positional;
  }
  if (f.enable_auto_tool_choice && f.tool_call_parser.empty())
    errors.push_back("--enable-auto-tool-choice needs --tool-call-parser");
  if (f.skip_tokenizer_init) {
    // Each of these turns text into tokens or tokens into text: nothing to do without one.
    const std::pair<bool, const char*> text_flags[] = {
        {!f.chat_template.empty(), "--chat-template"},
        {!f.tool_call_parser.empty(), "--tool-call-parser"},
        {!f.reasoning_parser.empty(), "--reasoning-parser"},
        {f.enable_auto_tool_choice, "--enable-auto-tool-choice"},
        {!f.test_script.empty(), "--test-script"}};
    for (const auto& [given, flag] : text_flags)
      if (given)
        errors.push_back(fmt::format(
            "{} needs the tokenizer: drop it or drop --skip-tokenizer-init (token ids only)",
            flag));
  }
  return out;
}

std::string serve_help() {
  std::string out =
      "Usage: mlaserve serve [MODEL] [FLAGS]\n\n"
      "Serve MODEL (a directory, or a Hugging Face id in the local cache; default: the bundled\n"
      "demo model) over an OpenAI-compatible HTTP API. vllm serve's flags, each implemented,\n"
      "accepted without effect, or rejected with what to use instead (docs/flags.md).\n\n";
  for (FlagClass c : {FlagClass::kImplemented, FlagClass::kNoEffect, FlagClass::kRejected}) {
    out += fmt::format("{}:\n", c == FlagClass::kImplemented ? "Flags"
                                : c == FlagClass::kNoEffect  ? "Accepted for vLLM compatibility, "
                                                               "no effect here"
                                                             : "Rejected (what to use instead)");
    for (const FlagSpec& s : serve_flag_table()) {
      if (s.cls != c || s.help.empty()) continue;
      out += fmt::format("  {}\n      {}\n", flag_usage(s),
                         c == FlagClass::kImplemented ? s.help : s.reason);
    }
    out += "\n";
  }
  return out;
}

std::string flags_markdown() {
  std::string out =
      "# `mlaserve serve` flags\n\n"
      "Generated from the flag table in `src/cli/serve_flags.cc` (`serve_flag_table`); the test\n"
      "`ServeFlags.DocsMatchTable` fails when this page and the table differ. Each flag of\n"
      "vLLM's recipes for DeepSeek-V3/R1, DeepSeek-V3.2 and GLM-5/5.1 is one of:\n\n"
      "- **implemented**: it does what it says here;\n"
      "- **accepted, no effect**: the server starts and prints one line saying why the flag\n"
      "  changes nothing here;\n"
      "- **rejected**: the server does not start and says what to use instead.\n\n"
      "Value forms follow vLLM: lengths as `4096`, `128k` (×1000), `32K` (×1024), `1m`;\n"
      "`--no-NAME` negates a switch; `--NAME=VALUE` and `--NAME VALUE` are the same;\n"
      "underscores in names are dashes (`--enable_expert_parallel`); JSON flags take a JSON\n"
      "object or `--NAME.key value` pairs (`--speculative-config.method mtp`). Every problem of\n"
      "a command line is reported at once, before any weight is read.\n\n"
      "| Flag | Class | Here |\n|---|---|---|\n";
  for (const FlagSpec& s : serve_flag_table()) {
    if (s.help.empty()) continue;
    std::string usage = flag_usage(s);
    std::string text = std::string(s.cls == FlagClass::kImplemented ? s.help : s.reason);
    for (std::string* cell : {&usage, &text}) {
      std::string escaped;
      for (char c : *cell) escaped += c == '|' ? std::string("\\|") : std::string(1, c);
      *cell = escaped;
    }
    out += fmt::format("| `{}` | {} | {} |\n", usage, class_name(s.cls), text);
  }
  return out;
}

}  // namespace mls::cli
