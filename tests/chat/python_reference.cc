#include "chat/python_reference.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace mls::chat::testing {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

std::filesystem::path scratch(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("mls_chat_ref_" + std::to_string(::getpid()) + "_" + name);
}

}  // namespace

bool python_jinja_available() {
  const std::string cmd = std::string(kPython) + " -c 'import jinja2' > /dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

std::vector<ReferenceResult> render_with_python(const std::vector<ReferenceCase>& cases) {
  nlohmann::ordered_json in = nlohmann::ordered_json::array();
  for (const auto& c : cases) in.push_back({{"template", c.source}, {"variables", c.variables}});
  const auto in_path = scratch("in.json"), out_path = scratch("out.json");
  std::ofstream(in_path) << in.dump();
  const std::string script = std::string(MLASERVE_SOURCE_DIR) + "/tests/chat/render_reference.py";
  const std::string cmd = std::string(kPython) + " '" + script + "' '" + in_path.string() + "' '" +
                          out_path.string() + "'";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("reference renderer failed: " + cmd);
  std::ifstream out_file(out_path);
  std::stringstream ss;
  ss << out_file.rdbuf();
  const auto out = nlohmann::json::parse(ss.str());
  std::filesystem::remove(in_path);
  std::filesystem::remove(out_path);
  std::vector<ReferenceResult> results;
  for (const auto& r : out) {
    ReferenceResult res;
    res.ok = r.contains("output");
    (res.ok ? res.output : res.error) = r.value(res.ok ? "output" : "error", "");
    results.push_back(std::move(res));
  }
  return results;
}

}  // namespace mls::chat::testing
