#include "common/json_patch.h"

#include <boost/json/serialize.hpp>

namespace gpuslice {

std::string json_pointer_escape(std::string_view token) {
  std::string out;
  out.reserve(token.size() + 4);
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

bool json_pointer_unescape(std::string_view token, std::string& out) {
  out.clear();
  out.reserve(token.size());
  for (size_t i = 0; i < token.size(); ++i) {
    char c = token[i];
    if (c != '~') {
      out.push_back(c);
      continue;
    }
    if (i + 1 >= token.size()) return false;
    char n = token[++i];
    if (n == '0') {
      out.push_back('~');
    } else if (n == '1') {
      out.push_back('/');
    } else {
      return false;
    }
  }
  return true;
}

boost::json::array patch_to_json(const Patch& patch) {
  boost::json::array arr;
  arr.reserve(patch.size());
  for (const auto& op : patch) {
    boost::json::object o;
    switch (op.kind) {
      case PatchOp::Kind::add:
        o["op"] = "add";
        break;
      case PatchOp::Kind::replace:
        o["op"] = "replace";
        break;
      case PatchOp::Kind::remove:
        o["op"] = "remove";
        break;
    }
    o["path"] = op.path;
    if (op.kind != PatchOp::Kind::remove) o["value"] = op.value;
    arr.emplace_back(std::move(o));
  }
  return arr;
}

std::string serialize_patch(const Patch& patch) { return boost::json::serialize(patch_to_json(patch)); }

}  // namespace gpuslice
