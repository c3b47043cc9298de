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
  int32_t code = 200;    ///< AdmissionResponse result.code when denied (403 policy denial, 400 bad value)
  std::string reason;    ///< "Forbidden", "BadRequest" when denied
  std::string message;   ///< why denied, or why skipped
  Patch patch;           ///< empty when nothing to change
  bool gpu_pod = false;  ///< the pod asks for GPU resources and was taken by this policy
  bool skipped = false;  ///< allowed untouched by a skip rule (other scheduler, ignore label or namespace)
};

/// Decides on one Pod. `ns` is the request namespace (the object's may be empty on CREATE).
///
/// Order (HAMi's, with its selectors folded in): (1) skip when `ns` (else metadata.namespace) is in
/// webhook.ignored_namespaces or a label `gpuslice.io/webhook` / `hami.io/webhook` is `ignore`; (2) deny 403
/// when spec.containers is missing or empty; (3) skip when spec.schedulerName is set and is neither ours nor in
/// webhook.takeover_scheduler_names; (4) deny 400 on a bad value (extract_gpu_request's errors, a non-string
/// schedulerName/nodeName, a nvidia.com/priority that is not a whole number); (5) allow when no container asks
/// for a GPU (with webhook.overwrite_env, NVIDIA_VISIBLE_DEVICES=none on every container); (6) deny 403 for a
/// privileged GPU container, then for spec.nodeName set; (7) patch: schedulerName, runtimeClassName, per
/// container the nvidia.com/gpu limit and exclusive gpucores defaults (in limits, as strings), the
/// CUDA_TASK_PRIORITY / GPU_CORE_UTILIZATION_POLICY env, NVIDIA_VISIBLE_DEVICES=none on GPU-less containers
/// with overwrite_env, and the `gpuslice.io/gpu-request` annotation recomputed from the spec.
/// On every allowed path (skips included) the patch removes what a pod author cannot be trusted to write:
/// HAMi's scheduler-owned annotations (kSchedulerOwnedAnnotations) and, unless step (7) rewrites it,
/// `gpuslice.io/gpu-request`. Skips set `skipped` and a message; denials never carry a patch.
/// Applying the patch and calling again yields an empty patch.
///
/// Reads only these members of the pod (review() builds no others: webhook/admission.cc, kPodKept and the lists
/// after it; a rule that reads another member must be added there, or review() will not see it):
/// metadata.{namespace, labels, annotations}; spec.{containers, initContainers, schedulerName, nodeName,
/// runtimeClassName}; and of each entry of spec.containers / spec.initContainers: name, resources, env,
/// securityContext. (tests/webhook/admission_test.cc and the admission_review fuzz target compare review() with the
/// policy over the whole pod.)
MutationResult mutate_pod(const boost::json::object& pod, std::string_view ns, const Configuration& config);

}  // namespace gpuslice::webhook
