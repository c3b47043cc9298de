#pragma once
// Splitting, for the scheduler's codecs of HAMi's delimited annotation values (field access on JSON objects is in
// common/json_access.h).

#include <string_view>
#include <vector>

namespace gpuslice::scheduler::detail {

/// Splits on `sep`, keeping empty fields (so "a;;b" has three).
inline std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t p = s.find(sep, start);
    if (p == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, p - start));
    start = p + 1;
  }
}

}  // namespace gpuslice::scheduler::detail
