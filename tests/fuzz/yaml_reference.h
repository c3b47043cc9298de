#pragma once
// The YAML -> JSON conversion gpuslice used before common/yaml_json.h: yaml-cpp's node graph (YAML::LoadAll) walked
// recursively. Kept only as a test oracle (tests/simulate/manifest_test.cc, tests/fuzz/manifest_fuzz.cc): on input
// without aliases (it expands them without limit) the event-based reader must give the same documents. Scalars
// are typed by the same function (gpuslice::yaml_resolve_plain); what is compared is the walk.
#include "common/yaml_json.h"

#include <yaml-cpp/yaml.h>

#include <boost/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::testing {

inline bool reference_convert(const YAML::Node& n, int depth, boost::json::value& out) {
  if (depth > kYamlMaxDepth) {
    return false;
  }
  switch (n.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      out = nullptr;
      return true;
    case YAML::NodeType::Scalar: {
      const std::string& tag = n.Tag();
      if (tag == "?" || tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
          tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:null") {
        out = yaml_resolve_plain(n.Scalar());
      } else {
        out = boost::json::string(n.Scalar());
      }
      return true;
    }
    case YAML::NodeType::Sequence: {
      boost::json::array a;
      for (const YAML::Node& e : n) {
        boost::json::value v;
        if (!reference_convert(e, depth + 1, v)) {
          return false;
        }
        a.push_back(std::move(v));
      }
      out = std::move(a);
      return true;
    }
    case YAML::NodeType::Map: {
      boost::json::object o;
      for (const auto& kv : n) {
        if (!kv.first.IsScalar()) {
          return false;
        }
        boost::json::value v;
        if (!reference_convert(kv.second, depth + 1, v)) {
          return false;
        }
        o[kv.first.Scalar()] = std::move(v);
      }
      out = std::move(o);
      return true;
    }
  }
  return false;
}

/// Every document as the old reader converted it, or nullopt where it failed (syntax, depth, keys).
inline std::optional<std::vector<boost::json::value>> reference_documents(std::string_view text) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(std::string(text));
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
  std::vector<boost::json::value> out;
  for (const YAML::Node& d : docs) {
    boost::json::value v;
    try {
      if (!reference_convert(d, 0, v)) {
        return std::nullopt;
      }
    } catch (const YAML::Exception&) {
      return std::nullopt;
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace gpuslice::testing
