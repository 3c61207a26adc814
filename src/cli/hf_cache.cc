#include "cli/hf_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>

#include "core/error.h"

namespace mls::cli {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// "org/name" with no path-like parts: what huggingface_hub accepts as a repo id.
bool is_repo_id(const std::string& s) {
  const size_t slash = s.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == s.size()) return false;
  if (s.find('/', slash + 1) != std::string::npos) return false;
  if (s[0] == '.' || s[0] == '~') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
           c == '/';
  });
}

std::string trimmed_file(const fs::path& p) {
  std::ifstream in(p);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

std::vector<fs::path> hf_cache_dirs(const std::string& download_dir) {
  std::vector<fs::path> dirs;
  const auto add = [&](const fs::path& p) {
    if (!p.empty() && std::find(dirs.begin(), dirs.end(), p) == dirs.end()) dirs.push_back(p);
  };
  if (!download_dir.empty()) add(download_dir);
  add(env("HF_HUB_CACHE"));
  if (const std::string home = env("HF_HOME"); !home.empty()) add(fs::path(home) / "hub");
  if (const std::string user = env("HOME"); !user.empty())
    add(fs::path(user) / ".cache" / "huggingface" / "hub");
  return dirs;
}

fs::path resolve_model_dir(const std::string& model, const std::string& revision,
                           const std::string& download_dir) {
  if (fs::is_directory(model)) return model;
  if (!is_repo_id(model))
    raise<InvalidArgument>("model '{}': no such directory (and not a Hugging Face id ORG/NAME)",
                           model);
  const std::string rev = revision.empty() ? "main" : revision;
  const std::string repo =
      "models--" + model.substr(0, model.find('/')) + "--" + model.substr(model.find('/') + 1);
  std::vector<std::string> looked;
  for (const fs::path& cache : hf_cache_dirs(download_dir)) {
    const fs::path root = cache / repo;
    if (!fs::is_directory(root)) {
      looked.push_back(fmt::format("{} (absent)", root.string()));
      continue;
    }
    const fs::path ref = root / "refs" / rev;
    const std::string hash = fs::is_regular_file(ref) ? trimmed_file(ref) : rev;
    const fs::path snap = root / "snapshots" / hash;
    if (fs::is_directory(snap) && fs::exists(snap / "config.json")) return snap;
    looked.push_back(fmt::format(
        "{} ({})", root.string(),
        fs::is_regular_file(ref) ? "snapshot " + hash + " incomplete" : "no revision " + rev));
  }
  std::string where;
  for (const std::string& l : looked) where += "\n  " + l;
  raise<InvalidArgument>(
      "model '{}' (revision {}) is not a directory and not in the local Hugging Face cache; "
      "looked in:{}\nmlaserve never downloads: fetch it first (huggingface-cli download {}) or "
      "pass its directory",
      model, rev, where, model);
}

}  // namespace mls::cli
