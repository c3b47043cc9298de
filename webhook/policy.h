#pragma once
// The mutation policy: a pure function from a Pod object and the configuration to a decision and a minimal,
// idempotent RFC 6902 patch (hami-protocol.md §2). No I/O, no clock.

#include "common/config.h"
#include "common/json_patch.h"

#include <boost/json/object.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace gpuslice::webhook {

struct MutationResult {
  bool allowed = true;
  int32_t code = 200;       ///< AdmissionResponse result.code when denied (403 policy denial, 400 bad value)
  std::string reason;       ///< "Forbidden", "BadRequest" when denied
  std::string message;      ///< why denied, or why skipped
  Patch patch;              ///< empty when nothing to change
  bool gpu_pod = false;     ///< the pod asks for GPU resources and was taken by this policy
  bool skipped = false;     ///< allowed untouched by a skip rule (other scheduler, ignore label or namespace)
};

/// Decides on one Pod. `ns` is the request namespace (the object's may be empty on CREATE).
MutationResult mutate_pod(const boost::json::object& pod, std::string_view ns, const Configuration& config);

}  // namespace gpuslice::webhook
