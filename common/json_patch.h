#pragma once
// RFC 6902 JSON Patch operations as plain data, and RFC 6901 pointer escaping. The mutation policy emits
// these, the node lock sends test-and-set patches; apply_patch is simulate's (and the tests' fake API's) applier.

#include "common/result.h"

#include <boost/json/value.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace gpuslice {

struct PatchOp {
  /// test: the value at `path` equals `value`; as kube-apiserver's applier (gopkg.in/evanphx/json-patch.v4
  /// Patch.test), a null value also matches a member that is absent (its parent must exist).
  enum class Kind { add, replace, remove, test };
  Kind kind = Kind::add;
  std::string path;          ///< RFC 6901 pointer, already escaped
  boost::json::value value;  ///< unused for remove
};

using Patch = std::vector<PatchOp>;

/// Escapes one reference token: "~" -> "~0", "/" -> "~1" (so "nvidia.com/gpu" -> "nvidia.com~1gpu").
std::string json_pointer_escape(std::string_view token);

/// Reverses json_pointer_escape; nullopt-like empty optional is not needed: invalid escapes ("~2", trailing
/// "~") return false.
bool json_pointer_unescape(std::string_view token, std::string& out);

/// Serializes a patch as a JSON array text.
std::string serialize_patch(const Patch& patch);
/// Appends the same text to `out` (no intermediate JSON tree).
void append_patch(std::string& out, const Patch& patch);

boost::json::array patch_to_json(const Patch& patch);

/// Applies add/replace/remove/test ops to a copy of `doc` (used by `gpuslice simulate` to see the mutated pod).
/// Errors name the op index and path. Tests check the policy's patches with an independent applier.
Result<boost::json::value> apply_patch(const boost::json::value& doc, const Patch& patch);

}  // namespace gpuslice
