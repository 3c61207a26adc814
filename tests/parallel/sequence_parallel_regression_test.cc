// The failure this project exists to prevent: at tp=8 with sequence parallelism, a profiling
// forward of max_num_batched_tokens = 8192 over a GLM-5-shaped model once all-gathered hidden
// states that were never token-sharded (8× tokens, rotary shape errors, OOM). Here the same
// forward runs through the real code path with the allocator in meta mode (sizes traced, no
// compute), so every layout check inside the decoder layer runs at full token count.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "engine/model_runner.h"

namespace mls {
namespace {

// GLM-5's structure (MLA + DSA indexer + MoE, interleaved RoPE, shared indexer layers) at a
// width a 2-core CI machine can hold: 16 heads so that tp=8 leaves two per rank.
std::filesystem::path write_glm5_like_config() {
  const auto dir = std::filesystem::temp_directory_path() / "mlaserve-glm5-narrow";
  std::filesystem::create_directories(dir);
  nlohmann::json c = {{"model_type", "glm_moe_dsa"},
                      {"vocab_size", 4096},
                      {"hidden_size", 512},
                      {"intermediate_size", 1024},
                      {"moe_intermediate_size", 128},
                      {"num_hidden_layers", 3},
                      {"num_attention_heads", 16},
                      {"num_key_value_heads", 16},
                      {"q_lora_rank", 192},
                      {"kv_lora_rank", 64},
                      {"qk_rope_head_dim", 16},
                      {"qk_nope_head_dim", 48},
                      {"v_head_dim", 64},
                      {"n_routed_experts", 16},
                      {"n_shared_experts", 1},
                      {"num_experts_per_tok", 4},
                      {"n_group", 1},
                      {"topk_group", 1},
                      {"norm_topk_prob", true},
                      {"routed_scaling_factor", 2.5},
                      {"rms_norm_eps", 1e-5},
                      {"max_position_embeddings", 16384},
                      {"mlp_layer_types", {"dense", "sparse", "sparse"}},
                      {"indexer_types", {"full", "shared", "full"}},
                      {"index_n_heads", 8},
                      {"index_head_dim", 32},
                      {"index_topk", 256},
                      {"tie_word_embeddings", false},
                      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}},
                      {"bos_token_id", 0},
                      {"eos_token_id", 1}};
  std::ofstream(dir / "config.json") << c.dump(2);
  return dir;
}

// Peak activation bytes per rank of one 8192-token step, traced in meta mode.
std::vector<int64_t> profile(bool sequence_parallel, int64_t tokens) {
  ModelRunner runner({.model = write_glm5_like_config(),
                      .load_format = LoadFormat::kDummy,
                      .tensor_parallel_size = 8,
                      .sequence_parallel = sequence_parallel});
  for (int r = 0; r < runner.tp_size(); ++r) runner.allocator(r).set_meta(true);
  const int64_t block = 64;
  runner.allocate_kv_cache(tokens / block, block);
  ForwardBatch b;
  b.token_ids.assign(tokens, 7);
  std::vector<int32_t> blocks(tokens / block);
  std::iota(blocks.begin(), blocks.end(), 0);
  SequenceChunk sc{.num_new = tokens, .block_table = blocks, .prompt_len = tokens};
  b.seqs.push_back(sc);
  for (int r = 0; r < runner.tp_size(); ++r) runner.allocator(r).reset_peaks();
  runner.forward(b);  // throws on any token dimension the layout contract does not allow
  std::vector<int64_t> peaks;
  for (int r = 0; r < runner.tp_size(); ++r)
    peaks.push_back(runner.allocator(r).stats().pk(MemTag::kActivation));
  return peaks;
}

TEST(SequenceParallelRegression, Tp8ProfilingForwardOf8192TokensKeepsTheLayoutContract) {
  const std::vector<int64_t> off = profile(false, 8192);
  const std::vector<int64_t> on = profile(true, 8192);
  for (size_t r = 0; r < on.size(); ++r) {
    std::printf("rank %zu peak activation: SP off %.1f MiB, SP on %.1f MiB\n", r,
                off[r] / 1048576.0, on[r] / 1048576.0);
    EXPECT_GT(on[r], 0);
    EXPECT_LT(on[r], off[r]) << "rank " << r;
  }
}

}  // namespace
}  // namespace mls
