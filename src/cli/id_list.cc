#include "cli/id_list.h"

#include <algorithm>
#include <climits>
#include <stdexcept>

#include "core/error.h"

namespace mls::cli {

std::vector<int32_t> parse_id_list(const std::string& list, std::string_view flag) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      raise<InvalidArgument>("{}: '{}' is not a token id (expected e.g. 3,17,42)", flag, item);
    }
    start = comma + 1;
  }
  return ids;
}

}  // namespace mls::cli
