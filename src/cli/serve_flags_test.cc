#include "cli/serve_flags.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"

namespace mls::cli {
namespace {

ParsedServe parse(std::initializer_list<std::string> args) {
  return parse_serve_args(std::vector<std::string>(args));
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += x + "\n";
  return s;
}

TEST(ServeFlags, HumanIntegersFollowVllm) {
  EXPECT_EQ(parse_human_int("4096"), 4096);
  EXPECT_EQ(parse_human_int("128k"), 128000);
  EXPECT_EQ(parse_human_int("32K"), 32768);
  EXPECT_EQ(parse_human_int("1m"), 1000000);
  EXPECT_EQ(parse_human_int("1M"), 1048576);
  EXPECT_EQ(parse_human_int("1.5k"), 1500);
  EXPECT_EQ(parse_human_int("1.5K"), 1536);
  EXPECT_EQ(parse_human_int("64MiB"), int64_t{64} << 20);
  EXPECT_EQ(parse_human_int("4G"), int64_t{4} << 30);
  EXPECT_EQ(parse_human_int("1.2345k"), std::nullopt);  // not a whole number
  EXPECT_EQ(parse_human_int("-5"), std::nullopt);
  EXPECT_EQ(parse_human_int("12x"), std::nullopt);
  EXPECT_EQ(parse_human_int(""), std::nullopt);
}

// The recipes' command lines (vLLM recipes for DeepSeek-V3/R1, V3.2, GLM-5/5.1), model names
// as published: every flag is known and the lines that can run here parse without a problem.
TEST(ServeFlags, RecipeLinesParse) {
  const ParsedServe r1 =
      parse({"deepseek-ai/DeepSeek-R1-0528", "--trust-remote-code", "--tensor-parallel-size", "8",
             "--enable_expert_parallel", "--max-model-len=65536", "--max-num-batched-tokens=32768",
             "--gpu-memory-utilization=0.95", "--no-enable-prefix-caching"});
  EXPECT_TRUE(r1.errors.empty()) << joined(r1.errors);
  EXPECT_EQ(r1.flags.model, "deepseek-ai/DeepSeek-R1-0528");
  EXPECT_EQ(r1.flags.tensor_parallel_size, 8);
  EXPECT_EQ(r1.flags.max_model_len, 65536);
  EXPECT_EQ(r1.flags.max_num_batched_tokens, 32768);
  EXPECT_DOUBLE_EQ(r1.flags.gpu_memory_utilization, 0.95);
  EXPECT_FALSE(r1.flags.enable_prefix_caching);
  EXPECT_EQ(r1.flags.no_effect_notes.size(), 2u) << joined(r1.flags.no_effect_notes);

  const ParsedServe v32 = parse({"deepseek-ai/DeepSeek-V3.2",
                                 "--tensor-parallel-size",
                                 "8",
                                 "--tokenizer-mode",
                                 "deepseek_v32",
                                 "--tool-call-parser",
                                 "deepseek_v32",
                                 "--enable-auto-tool-choice",
                                 "--reasoning-parser",
                                 "deepseek_v3",
                                 "--kv-cache-dtype",
                                 "bfloat16",
                                 "-tp",
                                 "8",
                                 "--max-num-seqs",
                                 "256",
                                 "--max-model-len",
                                 "128k",
                                 "--dtype",
                                 "auto",
                                 "--seed",
                                 "0",
                                 "--enable-prefix-caching"});
  EXPECT_TRUE(v32.errors.empty()) << joined(v32.errors);
  EXPECT_EQ(v32.flags.max_model_len, 128000);
  EXPECT_EQ(v32.flags.seed, 0u);
  EXPECT_EQ(v32.flags.tool_call_parser, "deepseek_v32");
  EXPECT_EQ(v32.flags.kv_cache_dtype, "bfloat16");

  const ParsedServe glm =
      parse({"zai-org/GLM-5.1-FP8", "--tensor-parallel-size", "8", "--tool-call-parser", "glm47",
             "--reasoning-parser", "glm45", "--enable-auto-tool-choice",
             "--chat-template-content-format=string", "--served-model-name", "glm-5.1-fp8",
             "--max-num-seqs", "1024", "--max-model-len", "auto", "--trust-remote-code"});
  EXPECT_TRUE(glm.errors.empty()) << joined(glm.errors);
  EXPECT_EQ(glm.flags.served_model_name, std::vector<std::string>{"glm-5.1-fp8"});
  EXPECT_EQ(glm.flags.max_model_len, 0);
}

TEST(ServeFlags, MtpIsValidatedAndKept) {
  const ParsedServe mtp = parse({"zai-org/GLM-5-FP8", "--speculative-config.method", "mtp",
                                 "--speculative-config.num_speculative_tokens", "3"});
  EXPECT_TRUE(mtp.errors.empty()) << joined(mtp.errors);
  ASSERT_TRUE(mtp.flags.speculative.has_value());
  EXPECT_EQ(mtp.flags.speculative->method, "mtp");
  EXPECT_EQ(mtp.flags.speculative->num_speculative_tokens, 3);
  EXPECT_FALSE(parse({"m"}).flags.speculative.has_value());
  const ParsedServe bad =
      parse({"m", "--speculative-config", "{\"method\": \"mtp\", \"num_speculative_tokens\": 0}"});
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_NE(bad.errors[0].find("'num_speculative_tokens' must be an integer in [1, 4], found 0"),
            std::string::npos)
      << bad.errors[0];
  // Each problem names its key; other drafting methods are not built.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"method": "mtp", "num_speculative_tokens": 5})", "in [1, 4], found 5"},
      {R"({"method": "deepseek_mtp"})", "'num_speculative_tokens' is required"},
      {R"({"num_speculative_tokens": 2})", "'method' is required"},
      {R"({"method": "eagle3", "num_speculative_tokens": 2})", "method 'eagle3' is not built"},
      {R"({"method": "mtpx", "num_speculative_tokens": 2})", "unknown method 'mtpx'"},
      {R"({"method": "mtp", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1})",
       "key 'draft_tensor_parallel_size' is not supported"},
  };
  for (const auto& [json, message] : cases) {
    const ParsedServe p = parse({"m", "--speculative-config", json});
    ASSERT_EQ(p.errors.size(), 1u) << json;
    EXPECT_NE(p.errors[0].find(message), std::string::npos) << p.errors[0];
  }
}

TEST(ServeFlags, GoldenLinePerClass) {
  const ParsedServe p = parse({"m", "--trust-remote-code", "--swap-space", "4", "--seed", "7",
                               "--kv-cache-dtype", "fp8", "-dp", "8"});
  // Implemented: stored, no line of its own (the effective-configuration line shows it).
  EXPECT_EQ(p.flags.seed, 7u);
  EXPECT_EQ(joined(p.flags.no_effect_notes),
            "--trust-remote-code: accepted, no effect here: no Python code runs here: "
            "deepseek_v3, deepseek_v32 and glm_moe_dsa are built in\n"
            "--swap-space 4: accepted, no effect here: KV blocks are never swapped to the CPU; a "
            "preempted request is recomputed\n");
  EXPECT_EQ(joined(p.errors),
            "--kv-cache-dtype fp8: there is no FP8 KV cache yet; use --kv-cache-dtype auto (bf16 "
            "on the GPU)\n"
            "--data-parallel-size 8: one server is one replica: run one mlaserve per replica "
            "behind a load balancer, or use --tensor-parallel-size for one model over N GPUs\n");
}

TEST(ServeFlags, EveryProblemReportedAtOnce) {
  const ParsedServe p =
      parse({"m", "--max-model-len", "12x", "--bogus-flag", "3", "--dtype", "float16",
             "--hf-overrides", "{not json", "--enable-auto-tool-choice", "--tool-call-parser"});
  EXPECT_EQ(p.errors.size(), 6u) << joined(p.errors);
  const std::string all = joined(p.errors);
  for (const char* want :
       {"--max-model-len 12x: expected a whole number", "unknown flag --bogus-flag",
        "--dtype float16: only bf16 activations", "--hf-overrides {not json: not valid JSON",
        "--tool-call-parser needs a value", "--enable-auto-tool-choice needs --tool-call-parser"})
    EXPECT_NE(all.find(want), std::string::npos) << want << "\n" << all;
}

TEST(ServeFlags, NegationsAliasesAndForms) {
  EXPECT_TRUE(parse({"--enable-prefix-caching"}).flags.enable_prefix_caching);
  EXPECT_FALSE(parse({"--no-enable-prefix-caching"}).flags.enable_prefix_caching);
  EXPECT_EQ(parse({"-tp", "4"}).flags.tensor_parallel_size, 4);
  EXPECT_EQ(parse({"--tensor_parallel_size=2"}).flags.tensor_parallel_size, 2);
  EXPECT_EQ(parse({"--max-model-len", "32K"}).flags.max_model_len, 32768);
  EXPECT_EQ(parse({"--max-model-len", "1m"}).flags.max_model_len, 1000000);
  EXPECT_EQ(parse({"--kv-cache-memory-bytes", "64MiB"}).flags.kv_cache_memory_bytes, 64 << 20);
  const ParsedServe neg = parse({"--no-enable-chunked-prefill"});
  ASSERT_EQ(neg.errors.size(), 1u);
  EXPECT_NE(neg.errors[0].find("set --max-num-batched-tokens to --max-model-len"),
            std::string::npos);
  const ParsedServe unknown = parse({"--max-model-lenght", "5"});
  ASSERT_EQ(unknown.errors.size(), 1u);
  EXPECT_EQ(unknown.errors[0], "unknown flag --max-model-lenght (did you mean --max-model-len?)");
  EXPECT_TRUE(unknown.flags.model.empty());  // "5" was the unknown flag's value
  EXPECT_EQ(parse({"--enable-prefix-caching=1"}).errors.size(), 1u);
}

// --enforce-eager is implemented (no CUDA graphs for decode), parsed once into the flags.
TEST(ServeFlags, EnforceEagerIsImplemented) {
  EXPECT_FALSE(parse({"m"}).flags.enforce_eager);  // graphs by default, as in vLLM
  const ParsedServe on = parse({"m", "--enforce-eager"});
  EXPECT_TRUE(on.errors.empty()) << joined(on.errors);
  EXPECT_TRUE(on.flags.enforce_eager);
  EXPECT_TRUE(on.flags.no_effect_notes.empty()) << joined(on.flags.no_effect_notes);
  EXPECT_FALSE(parse({"m", "--enforce-eager", "--no-enforce-eager"}).flags.enforce_eager);
}

// --batch-invariant is ours; vLLM's VLLM_BATCH_INVARIANT is read as vLLM reads it (an integer,
// nonzero on) and anything else is an error, not a silent off.
TEST(ServeFlags, BatchInvarianceFromTheFlagOrVllmsVariable) {
  EXPECT_FALSE(parse({"m"}).flags.batch_invariant);
  const ParsedServe on = parse({"m", "--batch-invariant"});
  EXPECT_TRUE(on.errors.empty()) << joined(on.errors);
  EXPECT_TRUE(on.flags.batch_invariant);
  EXPECT_FALSE(env_batch_invariant(nullptr));
  EXPECT_FALSE(env_batch_invariant("0"));
  EXPECT_TRUE(env_batch_invariant("1"));
  EXPECT_TRUE(env_batch_invariant("2"));
  for (const char* bad : {"", "true", "1x", " 1"})
    EXPECT_THROW(env_batch_invariant(bad), InvalidArgument) << "'" << bad << "'";
}

// --skip-tokenizer-init: token ids only; the flags that turn text into ids (or back) are
// command-line errors beside it, every one reported, naming the flag.
TEST(ServeFlags, SkipTokenizerInitRefusesTextFlags) {
  EXPECT_FALSE(parse({"m"}).flags.skip_tokenizer_init);
  const ParsedServe on = parse({"m", "--skip-tokenizer-init", "--load-format", "dummy"});
  EXPECT_TRUE(on.errors.empty()) << joined(on.errors);
  EXPECT_TRUE(on.flags.skip_tokenizer_init);
  EXPECT_TRUE(on.flags.no_effect_notes.empty()) << joined(on.flags.no_effect_notes);
  EXPECT_FALSE(
      parse({"m", "--skip-tokenizer-init", "--no-skip-tokenizer-init"}).flags.skip_tokenizer_init);
  EXPECT_TRUE(parse({"m", "--skip_tokenizer_init"}).flags.skip_tokenizer_init);
  EXPECT_EQ(parse({"m", "--skip-tokenizer-init=true"}).errors.size(), 1u);  // a switch
  const ParsedServe bad = parse({"m", "--skip-tokenizer-init", "--chat-template", "t.jinja",
                                 "--tool-call-parser", "glm47", "--enable-auto-tool-choice",
                                 "--reasoning-parser", "glm45", "--test-script", "s.txt"});
  ASSERT_EQ(bad.errors.size(), 5u) << joined(bad.errors);
  for (const char* flag : {"--chat-template", "--tool-call-parser", "--reasoning-parser",
                           "--enable-auto-tool-choice", "--test-script"}) {
    const std::string want =
        std::string(flag) +
        " needs the tokenizer: drop it or drop --skip-tokenizer-init (token ids only)";
    EXPECT_NE(joined(bad.errors).find(want), std::string::npos) << want;
  }
  // The same flags without it are fine.
  EXPECT_TRUE(
      parse({"m", "--chat-template", "t.jinja", "--reasoning-parser", "glm45"}).errors.empty());
}

TEST(ServeFlags, JsonFlags) {
  const ParsedServe p =
      parse({"--default-chat-template-kwargs", "{\"enable_thinking\": false}",
             "--override-generation-config", "{\"temperature\": 0.5, \"max_new_tokens\": 64}",
             "--compilation-config", "{\"cudagraph_mode\": \"FULL\"}", "-O3"});
  EXPECT_TRUE(p.errors.empty()) << joined(p.errors);
  EXPECT_EQ(p.flags.default_chat_template_kwargs.dump(), "{\"enable_thinking\":false}");
  EXPECT_EQ(p.flags.override_generation_config["max_new_tokens"], 64);
  ASSERT_EQ(p.flags.no_effect_notes.size(), 1u);
  EXPECT_EQ(p.flags.no_effect_notes[0].rfind(
                "--compilation-config {\"cudagraph_mode\":\"FULL\",\"level\":3}: accepted", 0),
            0u)
      << p.flags.no_effect_notes[0];
  const ParsedServe bad = parse({"--override-generation-config", "{\"temprature\": 1}"});
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_NE(bad.errors[0].find("unknown key 'temprature'"), std::string::npos);
}

TEST(ServeFlags, TableIsWellFormed) {
  std::set<std::string_view> names;
  for (const FlagSpec& s : serve_flag_table()) {
    EXPECT_EQ(s.name.rfind("--", 0), 0u) << s.name;
    EXPECT_TRUE(names.insert(s.name).second) << "duplicate " << s.name;
    if (!s.alias.empty()) {
      EXPECT_TRUE(names.insert(s.alias).second) << s.alias;
    }
    EXPECT_NE(s.apply, nullptr) << s.name;
    if (s.cls != FlagClass::kImplemented) {
      EXPECT_FALSE(s.reason.empty()) << s.name;
    }
    if (s.arg != FlagArg::kSwitch && !s.help.empty()) {
      EXPECT_FALSE(s.meta.empty()) << s.name;
    }
  }
  // --help lists every visible flag.
  const std::string help = serve_help();
  for (const FlagSpec& s : serve_flag_table()) {
    if (!s.help.empty()) {
      EXPECT_NE(help.find(std::string(s.name)), std::string::npos) << s.name;
    }
  }
}

TEST(ServeFlags, DocsMatchTable) {
  std::ifstream in(std::string(MLASERVE_SOURCE_DIR) + "/docs/flags.md");
  ASSERT_TRUE(in) << "docs/flags.md is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), flags_markdown())
      << "docs/flags.md differs from the flag table: regenerate it with "
         "`build/mlaserve serve --flags-markdown > docs/flags.md`";
}

}  // namespace
}  // namespace mls::cli
