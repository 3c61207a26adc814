// Models by Hugging Face id, read from the local Hugging Face cache the way huggingface_hub
// lays it out (CACHE/models--ORG--NAME/refs/REV holds a commit hash; snapshots/HASH is the
// checkout). Nothing is ever downloaded.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace mls::cli {

// The caches searched, in order: `download_dir` when given, $HF_HUB_CACHE, $HF_HOME/hub, then
// ~/.cache/huggingface/hub (duplicates removed).
std::vector<std::filesystem::path> hf_cache_dirs(const std::string& download_dir);

// `model` itself when it is a directory; else, for an id "ORG/NAME", its snapshot at
// `revision` (a ref such as main, or a commit hash; "" means main). Throws InvalidArgument
// saying where it looked when neither is found.
std::filesystem::path resolve_model_dir(const std::string& model, const std::string& revision,
                                        const std::string& download_dir);

}  // namespace mls::cli
