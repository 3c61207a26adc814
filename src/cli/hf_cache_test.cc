#include "cli/hf_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "core/error.h"

namespace mls::cli {
namespace {

namespace fs = std::filesystem;

// A huggingface_hub cache layout: refs/main names a snapshot that holds the files.
class HfCache : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("mls-hf-cache-" + std::to_string(getpid()));
    fs::remove_all(root_);
    repo_ = root_ / "hub" / "models--zai-org--GLM-5.1-FP8";
    fs::create_directories(repo_ / "refs");
    fs::create_directories(repo_ / "snapshots" / kMain);
    fs::create_directories(repo_ / "snapshots" / kOld);
    std::ofstream(repo_ / "refs" / "main") << kMain;  // no newline, as huggingface_hub writes
    std::ofstream(repo_ / "refs" / "v1") << kOld << "\n";
    std::ofstream(repo_ / "snapshots" / kMain / "config.json") << "{}";
    std::ofstream(repo_ / "snapshots" / kOld / "config.json") << "{}";
    for (const char* v : {"HF_HUB_CACHE", "HF_HOME", "HOME"}) {
      const char* old = std::getenv(v);
      saved_.emplace_back(v, old ? std::optional<std::string>(old) : std::nullopt);
      unsetenv(v);
    }
  }
  void TearDown() override {
    for (const auto& [k, v] : saved_)
      if (v)
        setenv(k.c_str(), v->c_str(), 1);
      else
        unsetenv(k.c_str());
    fs::remove_all(root_);
  }
  static constexpr const char* kMain = "0123456789abcdef0123456789abcdef01234567";
  static constexpr const char* kOld = "fedcba9876543210fedcba9876543210fedcba98";
  fs::path root_, repo_;
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST_F(HfCache, ResolvesThroughDownloadDir) {
  EXPECT_EQ(resolve_model_dir("zai-org/GLM-5.1-FP8", "", (root_ / "hub").string()),
            repo_ / "snapshots" / kMain);
}

TEST_F(HfCache, ResolvesThroughEnvironment) {
  setenv("HF_HUB_CACHE", (root_ / "hub").c_str(), 1);
  EXPECT_EQ(resolve_model_dir("zai-org/GLM-5.1-FP8", "", ""), repo_ / "snapshots" / kMain);
  unsetenv("HF_HUB_CACHE");
  setenv("HF_HOME", root_.c_str(), 1);
  EXPECT_EQ(resolve_model_dir("zai-org/GLM-5.1-FP8", "v1", ""), repo_ / "snapshots" / kOld);
  EXPECT_EQ(resolve_model_dir("zai-org/GLM-5.1-FP8", kOld, ""), repo_ / "snapshots" / kOld);
}

TEST_F(HfCache, DirectoriesPassThrough) {
  EXPECT_EQ(resolve_model_dir(root_.string(), "", ""), root_);
}

TEST_F(HfCache, MissingSaysWhereItLooked) {
  setenv("HF_HOME", root_.c_str(), 1);
  try {
    resolve_model_dir("deepseek-ai/DeepSeek-V3.2", "", "/nonexistent-cache");
    FAIL() << "resolved a model that is not cached";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("/nonexistent-cache/models--deepseek-ai--DeepSeek-V3.2 (absent)"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find((root_ / "hub" / "models--deepseek-ai--DeepSeek-V3.2").string()),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("never downloads"), std::string::npos) << msg;
  }
  try {
    resolve_model_dir("zai-org/GLM-5.1-FP8", "v2", "");
    FAIL() << "resolved a revision that is not cached";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("(no revision v2)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(resolve_model_dir("./not/a/dir", "", ""), InvalidArgument);
}

}  // namespace
}  // namespace mls::cli
