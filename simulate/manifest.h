#pragma once
// Kubernetes manifests from YAML or JSON text: multi-document YAML and `kind: List` (or any *List with items)
// flattened into objects, converted to Boost.JSON by common/yaml_json.h (from parse events, bounded: alias
// expansion, alias cycles, nesting). Conversion keeps quoted scalars as strings; plain scalars become
// null/bool/integer/float by YAML 1.2 core rules (`3` -> 3, `"3"` -> "3", `true` -> true, `1.5` -> 1.5).

#include "common/result.h"

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::simulate {

struct Manifest {
  size_t document = 0;  ///< 0-based document index in the file (List items share their List's index)
  boost::json::object object;
};

/// Converts the first YAML document of the text to JSON. Errors carry line and column.
Result<boost::json::value> yaml_to_json(std::string_view yaml_text);

/// Parses every document of `text` (empty documents skipped), expanding Lists. Every object must be a mapping
/// with a string `kind`. Errors name `source`, the document index and the field, e.g.
/// `nodes.yaml: document 2: kind: missing`.
Result<std::vector<Manifest>> parse_manifests(std::string_view text, std::string_view source);

}  // namespace gpuslice::simulate
