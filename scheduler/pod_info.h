#pragma once
// What the scheduler needs to know about a pod, parsed once from the Pod object (boost::json) so filtering and
// scoring never touch JSON. Pure.

#include "common/config.h"
#include "common/gpu_request.h"
#include "common/result.h"

#include <memory>

#include <boost/json/object.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::scheduler {

// Pod annotations read by the scheduler (hami-protocol.md §1, §8).
inline constexpr std::string_view kUseGpuTypeAnnotation = "nvidia.com/use-gputype";
inline constexpr std::string_view kNoUseGpuTypeAnnotation = "nvidia.com/nouse-gputype";
inline constexpr std::string_view kUseGpuUuidAnnotation = "nvidia.com/use-gpuuuid";
inline constexpr std::string_view kNoUseGpuUuidAnnotation = "nvidia.com/nouse-gpuuuid";
inline constexpr std::string_view kNumaBindAnnotation = "nvidia.com/numa-bind";
inline constexpr std::string_view kVgpuModeAnnotation = "nvidia.com/vgpu-mode";
inline constexpr std::string_view kNodePolicyAnnotation = "hami.io/node-scheduler-policy";
inline constexpr std::string_view kGpuPolicyAnnotation = "hami.io/gpu-scheduler-policy";
inline constexpr std::string_view kScoringWeightsAnnotation = "hami.io/device-scoring-weights";

/// Requests that count against a node's allocatable (kube-scheduler's effective pod request: max of each init
/// container and the sum of app containers, plus spec.overhead). Milli-units for cpu, bytes for the others.
struct ResourceRequests {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int64_t ephemeral_bytes = 0;

  bool operator==(const ResourceRequests&) const = default;
};

enum class SelectorOp { in, not_in, exists, does_not_exist, gt, lt };

struct NodeSelectorRequirement {
  std::string key;
  SelectorOp op = SelectorOp::in;
  std::vector<std::string> values;
};

/// One nodeSelectorTerm: all expressions must hold (matchFields supports metadata.name only).
struct NodeSelectorTerm {
  std::vector<NodeSelectorRequirement> match_expressions;
  std::vector<NodeSelectorRequirement> match_fields;
};

struct Toleration {
  std::string key;  ///< empty with op exists: tolerates every taint
  bool op_exists = false;
  std::string value;
  std::string effect;  ///< empty: every effect
};

/// Card-card weights of the card score (hami.io/device-scoring-weights), default 1,1,1.
struct ScoringWeights {
  int64_t slot = 1;
  int64_t core = 1;
  int64_t memory = 1;
  bool operator==(const ScoringWeights&) const = default;
};

/// Card selection annotations. Lists are trimmed, empty entries dropped.
struct GpuSelectors {
  std::vector<std::string> use_types;    ///< case-insensitive substring of the card type; any must match
  std::vector<std::string> nouse_types;  ///< none may match
  std::vector<std::string> use_uuids;    ///< exact
  std::vector<std::string> nouse_uuids;  ///< exact
  bool numa_bind = false;                ///< nvidia.com/numa-bind: "true"
  std::optional<std::string> vgpu_mode;  ///< hami-core | mig | mps
};

struct PodFacts;  // scheduler/framework/pod_facts.h

struct PodInfo {
  std::string ns;
  std::string name;
  std::string uid;
  std::map<std::string, std::string, std::less<>> node_selector;
  std::vector<NodeSelectorTerm> required_affinity;  ///< ORed; empty means no constraint
  std::vector<Toleration> tolerations;
  ResourceRequests requests;
  PodGpuRequest gpu;  ///< init containers first; every container present
  GpuSelectors selectors;
  std::optional<std::string> node_policy;  ///< per-pod override: binpack | spread (unknown names: binpack)
  std::optional<std::string> gpu_policy;   ///< per-pod override: spread | binpack (unknown names: spread)
  ScoringWeights weights;
  /// Annotations parse_pod did not trust, one human-readable line each (the loop logs them and records an
  /// Event): a `gpuslice.io/gpu-request` that does not parse or disagrees with the spec.
  std::vector<std::string> ignored_annotations;
  /// Scheduler-owned `hami.io/*` annotations (kSchedulerOwnedAnnotations) present on a pod that is not bound
  /// yet, in that list's order. Never read as allocation; the loop reports them unless it wrote them itself
  /// (an attempt of its own that did not bind) and overwrites or removes them when it binds the pod.
  std::vector<std::string> unbound_owned_annotations;
  /// Preferred node affinity (NodeAffinity's score), ORed terms with weights.
  std::vector<std::pair<int32_t, NodeSelectorTerm>> preferred_affinity;
  /// Labels, pod (anti-)affinity, spread, ports, volumes, DRA claims (scheduler/framework/pod_facts.h); never null
  /// after parse_pod.
  std::shared_ptr<const PodFacts> facts;

  std::string key() const { return ns + "/" + name; }
};

/// Parses a Pod object. The GPU request is derived from the containers' resources as kubelet will act on them
/// (CountRule::kubelet, common/gpu_request.h): a container's card count is its `nvidia.com/gpu` limit, and
/// memory, cores or percentage without one is an error naming the container and the fix. Nothing a pod author
/// can write overrides that: `gpuslice.io/gpu-request` is only compared (a disagreeing or unreadable value is
/// listed in ignored_annotations), never trusted. Errors name the field and value, e.g. a bad
/// `hami.io/device-scoring-weights` (which HAMi treats as failing the whole Filter), a bad quantity, or an
/// unknown node affinity operator.
Result<PodInfo> parse_pod(const boost::json::object& pod, const DeviceConfig& devices);

/// Parses `slot=1,core=1,memory=3`: exactly the three names, non-negative integers, at least one positive.
Result<ScoringWeights> parse_scoring_weights(std::string_view text);

/// Parses nodeSelectorTerms (a PV's spec.nodeAffinity.required, a pod's required node affinity); `at` names the
/// array in errors.
Result<std::vector<NodeSelectorTerm>> parse_node_selector_terms(const boost::json::array& terms, const std::string& at);

/// Effective requests of a pod object (also used by the snapshot for bound pods). Bad quantities are errors.
Result<ResourceRequests> pod_requests(const boost::json::object& pod);

}  // namespace gpuslice::scheduler
