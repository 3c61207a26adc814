// Test support: renders templates with Debian's python3-jinja2 through render_reference.py, the
// oracle the C++ interpreter must match byte for byte.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mls::chat::testing {

struct ReferenceCase {
  std::string source;
  nlohmann::ordered_json variables;
};

struct ReferenceResult {
  bool ok = false;
  std::string output;  // when ok
  std::string error;   // Python's exception otherwise
};

// True when /usr/bin/python3 can import jinja2.
bool python_jinja_available();

// Renders every case in one Python process.
std::vector<ReferenceResult> render_with_python(const std::vector<ReferenceCase>& cases);

}  // namespace mls::chat::testing
