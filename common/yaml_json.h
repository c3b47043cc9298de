#pragma once
// YAML text -> Boost.JSON, built directly from yaml-cpp's parse events (YAML::Parser + YAML::EventHandler): no
// YAML::Node graph, so hostile input cannot make the conversion hang or exhaust memory. Bounded:
//  - aliases: an alias copies its anchor's value, and every node and scalar byte an alias (or the copy kept of an
//    anchored node) adds counts against one budget per input: kYamlMaxAliasNodes nodes and kYamlMaxAliasBytes bytes
//    ("billion laughs"). The figure is go-yaml v3's (decode.go, alias_ratio_range_low = 400000), used by
//    Kubernetes' YAML decoding; literal nodes are not capped here (callers bound the text's size);
//  - an alias inside the node its anchor names (`&a [*a]`) is an alias cycle, an alias with no anchor before it an
//    error; both name the anchor;
//  - nesting: a value deeper than kYamlMaxDepth levels (the root is level 0; an alias counts the depth of what it
//    copies) is an error naming the depth and line; yaml-cpp's own recursion stops at 500 (DepthGuard).
// Mapping keys must be scalars (their text is the key; a later duplicate replaces the earlier value).

#include "common/result.h"

#include <boost/json/value.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice {

inline constexpr int kYamlMaxDepth = 128;
inline constexpr size_t kYamlMaxAliasNodes = 400000;
inline constexpr size_t kYamlMaxAliasBytes = size_t{64} << 20;

enum class YamlScalars {
  /// YAML 1.2 core schema for plain (unquoted, untagged) scalars: `3` -> 3, `"3"` -> "3", `true` -> true,
  /// `1.5` -> 1.5, `0x1F` -> 31, `~`/`null`/empty -> null; integers too large for 64 bits, .inf and .nan stay text;
  /// quoted scalars and any tag but !!int/!!float/!!bool/!!null are strings.
  kTyped,
  /// Every scalar is its text as a string (nulls stay null): for readers that type each field themselves.
  kText,
};

struct YamlReadOptions {
  YamlScalars scalars = YamlScalars::kTyped;
  bool first_document_only = false;  ///< as YAML::Load: the rest of the text is not parsed
  int max_depth = kYamlMaxDepth;
  size_t max_alias_nodes = kYamlMaxAliasNodes;
  size_t max_alias_bytes = kYamlMaxAliasBytes;
};

/// Every document of `text` in order (an empty document is null). Syntax errors read
/// `invalid YAML at line L, column C: ...`; the others `document N: line L, column C: ...`, e.g.
/// `document 0: line 2, column 8: alias *a is inside the node anchored &a (an alias cycle)`.
Result<std::vector<boost::json::value>> yaml_to_json_documents(std::string_view text,
                                                               const YamlReadOptions& options = {});

/// The first document only (null for empty text), as YAML::Load reads.
Result<boost::json::value> yaml_to_json_first(std::string_view text, YamlReadOptions options = {});

/// The YAML 1.2 core schema's resolution of a plain scalar's text (kTyped above).
boost::json::value yaml_resolve_plain(const std::string& text);

}  // namespace gpuslice
