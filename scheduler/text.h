#pragma once
// Small pure helpers shared by the scheduler's codecs: field access on Kubernetes JSON objects and splitting.

#include <boost/json/object.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::scheduler::detail {

/// The object/array/string at `key`, or nullptr / "" when absent or of another type.
inline const boost::json::object* obj(const boost::json::object& o, std::string_view key) {
  const boost::json::value* v = o.if_contains(key);
  return (v != nullptr && v->is_object()) ? &v->get_object() : nullptr;
}
inline const boost::json::array* arr(const boost::json::object& o, std::string_view key) {
  const boost::json::value* v = o.if_contains(key);
  return (v != nullptr && v->is_array()) ? &v->get_array() : nullptr;
}
inline std::string str(const boost::json::object& o, std::string_view key) {
  const boost::json::value* v = o.if_contains(key);
  return (v != nullptr && v->is_string()) ? std::string(v->get_string()) : std::string();
}

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
