// Parsing of comma-separated token id lists given on the command line ("3,17,42").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mls::cli {

// Throws InvalidArgument naming `flag` for anything that is not a non-negative 32-bit id.
std::vector<int32_t> parse_id_list(const std::string& list, std::string_view flag);

}  // namespace mls::cli
