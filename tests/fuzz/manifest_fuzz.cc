// YAML manifests: common/yaml_json.h (YAML -> Boost.JSON from parse events) and simulate's parse_manifests.
// Oracles:
//  - no throw, and every error names where: `invalid YAML at line L, column C: ...` or `document N: ...`, and
//    parse_manifests' errors start with the source name;
//  - bounded output: with small alias budgets the documents hold at most (literal nodes) + budget nodes and at
//    most (input bytes) + budget bytes of keys and strings, and nest no deeper than max_depth;
//  - on input without anchors or aliases, the documents equal the old yaml-cpp node-graph reader's
//    (tests/fuzz/yaml_reference.h) whenever both succeed;
//  - no hang: a stray `,` (yaml-cpp's endless empty documents) is a syntax error, not an endless loop;
//  - every manifest has a non-empty string kind, List items share their List's document index, and indices
//    never decrease.
#include "common/yaml_json.h"
#include "simulate/manifest.h"
#include "tests/fuzz/yaml_reference.h"

#include <boost/json/value.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

using namespace gpuslice;
namespace json = boost::json;

namespace {
void require(bool ok) {
  if (!ok) {
    std::abort();
  }
}

struct Size {
  size_t nodes = 0;
  size_t bytes = 0;
  int depth = 0;
};

void measure(const json::value& v, int depth, Size& s) {
  ++s.nodes;
  s.depth = std::max(s.depth, depth);
  if (v.is_string()) {
    s.bytes += v.get_string().size();
  } else if (v.is_array()) {
    for (const auto& e : v.get_array()) {
      measure(e, depth + 1, s);
    }
  } else if (v.is_object()) {
    for (const auto& kv : v.get_object()) {
      s.bytes += kv.key().size();
      measure(kv.value(), depth + 1, s);
    }
  }
}

bool names_where(const std::string& m) {
  return m.rfind("invalid YAML at line ", 0) == 0 || m.rfind("document ", 0) == 0;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  YamlReadOptions small;
  small.max_depth = 32;
  small.max_alias_nodes = 2000;
  small.max_alias_bytes = 64 * 1024;
  auto docs = yaml_to_json_documents(text, small);
  if (!docs) {
    require(names_where(docs.message()));
  } else {
    Size s;
    for (const auto& d : *docs) {
      measure(d, 0, s);
    }
    // A literal node takes at least one byte of text, except an empty document or an empty value (one null
    // per separator or indicator), hence the factor 2.
    require(s.nodes <= 2 * size + 2 + small.max_alias_nodes);
    require(s.bytes <= size + small.max_alias_bytes);
    require(s.depth <= small.max_depth);
  }

  // The reference (YAML::LoadAll) loops forever where yaml-cpp makes no progress (jbeder/yaml-cpp#1040), which
  // the reader reports as an error: consult it only where the reader succeeded.
  const bool has_alias = text.find_first_of("&*") != std::string_view::npos;
  if (!has_alias) {
    auto all = yaml_to_json_documents(text);
    if (all) {
      auto ref = testing::reference_documents(text);
      require(!ref || *all == *ref);
    }
  }

  auto text_docs = yaml_to_json_first(text, YamlReadOptions{YamlScalars::kText, true});
  if (!text_docs) {
    require(names_where(text_docs.message()));
  }

  auto manifests = simulate::parse_manifests(text, "fuzz.yaml");
  if (!manifests) {
    require(manifests.message().rfind("fuzz.yaml: ", 0) == 0);
    return 0;
  }
  size_t last = 0;
  for (const auto& m : *manifests) {
    const json::value* kind = m.object.if_contains("kind");
    require(kind != nullptr && kind->is_string() && !kind->get_string().empty());
    require(m.document >= last);
    last = m.document;
  }
  return 0;
}
