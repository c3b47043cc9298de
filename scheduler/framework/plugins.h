#pragma once
// The plugins of gpuslice's profile, one per file under scheduler/framework/plugins/, named as kube-scheduler's
// (pkg/scheduler/framework/plugins/<name>/), with their reason strings, and the small pure helpers they share.

#include "scheduler/framework/framework.h"

#include <memory>
#include <string_view>

namespace gpuslice::scheduler::framework {

namespace names {
inline constexpr std::string_view kNodeUnschedulable = "NodeUnschedulable";
inline constexpr std::string_view kNodeName = "NodeName";
inline constexpr std::string_view kTaintToleration = "TaintToleration";
inline constexpr std::string_view kNodeAffinity = "NodeAffinity";
inline constexpr std::string_view kNodePorts = "NodePorts";
inline constexpr std::string_view kNodeResourcesFit = "NodeResourcesFit";
inline constexpr std::string_view kVolumeRestrictions = "VolumeRestrictions";
inline constexpr std::string_view kNodeVolumeLimits = "NodeVolumeLimits";
inline constexpr std::string_view kVolumeBinding = "VolumeBinding";
inline constexpr std::string_view kVolumeZone = "VolumeZone";
inline constexpr std::string_view kPodTopologySpread = "PodTopologySpread";
inline constexpr std::string_view kInterPodAffinity = "InterPodAffinity";
inline constexpr std::string_view kDynamicResources = "DynamicResources";
inline constexpr std::string_view kNodeResourcesBalancedAllocation = "NodeResourcesBalancedAllocation";
inline constexpr std::string_view kGpuSlice = "GpuSlice";
}  // namespace names

namespace reason {
inline constexpr std::string_view kNodeNameMismatch = "node(s) didn't match the requested node name";
inline constexpr std::string_view kNodePorts = "node(s) didn't have free ports for the requested pod ports";
inline constexpr std::string_view kDiskConflict = "node(s) had no available disk";
inline constexpr std::string_view kReadWriteOncePodConflict =
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode";
inline constexpr std::string_view kMaxVolumeCount = "node(s) exceed max volume count";
inline constexpr std::string_view kVolumeNodeConflict = "node(s) had volume node affinity conflict";
inline constexpr std::string_view kVolumeBindConflict = "node(s) didn't find available persistent volumes to bind";
inline constexpr std::string_view kUnboundImmediateClaims = "pod has unbound immediate PersistentVolumeClaims";
inline constexpr std::string_view kVolumeZoneConflict = "node(s) had no available volume zone";
inline constexpr std::string_view kSpreadConstraintsNotMatch = "node(s) didn't match pod topology spread constraints";
inline constexpr std::string_view kSpreadMissingLabel =
    "node(s) didn't match pod topology spread constraints (missing required label)";
inline constexpr std::string_view kAffinityRulesNotMatch = "node(s) didn't match pod affinity rules";
inline constexpr std::string_view kAntiAffinityRulesNotMatch = "node(s) didn't match pod anti-affinity rules";
inline constexpr std::string_view kExistingAntiAffinityRulesNotMatch =
    "node(s) didn't satisfy existing pods anti-affinity rules";
inline constexpr std::string_view kDynamicResources =
    "pod uses spec.resourceClaims (dynamic resource allocation): gpuslice does not allocate DRA claims; use "
    "nvidia.com/gpu, gpumem and gpucores resources, or the default scheduler";
}  // namespace reason

std::unique_ptr<Plugin> make_node_unschedulable();
std::unique_ptr<Plugin> make_node_name();
std::unique_ptr<Plugin> make_taint_toleration(int64_t weight);
std::unique_ptr<Plugin> make_node_affinity(int64_t weight);
std::unique_ptr<Plugin> make_node_ports();
/// Filter: cpu, memory, ephemeral-storage, pods. Score (`weight`, 0: off): LeastAllocated over cpu and memory.
std::unique_ptr<Plugin> make_node_resources_fit(int64_t weight = 0);
std::unique_ptr<Plugin> make_volume_restrictions();
std::unique_ptr<Plugin> make_node_volume_limits();
std::unique_ptr<Plugin> make_volume_binding();
std::unique_ptr<Plugin> make_volume_zone();
/// `system_defaults`: score a pod without constraints of its own with kube-scheduler's system default constraints
/// (false: kube-scheduler's `defaultingType: List` with no defaultConstraints).
std::unique_ptr<Plugin> make_pod_topology_spread(int64_t weight, bool system_defaults = true);
std::unique_ptr<Plugin> make_inter_pod_affinity(int64_t weight);
std::unique_ptr<Plugin> make_dynamic_resources();
/// Score only: how evenly cpu and memory would be used (kube-scheduler's NodeResourcesBalancedAllocation).
std::unique_ptr<Plugin> make_node_resources_balanced_allocation(int64_t weight);
std::unique_ptr<Plugin> make_gpu_slice();

// ---- helpers shared by several plugins (pure) ----

/// One nodeSelectorTerm: expressions and fields ANDed; an empty term matches nothing.
bool node_matches_term(const NodeState& node, const NodeSelectorTerm& term);
/// Terms ORed (an empty list matches nothing).
bool node_matches_terms(const NodeState& node, const std::vector<NodeSelectorTerm>& terms);
/// The pod's nodeSelector and required node affinity (NodeAffinity's Filter; PodTopologySpread's Honor policy).
bool pod_matches_node_affinity(const PodInfo& pod, const NodeState& node);
bool tolerates(const Toleration& t, const Taint& taint);
bool tolerated(const std::vector<Toleration>& tolerations, const Taint& taint);
/// The first NoSchedule/NoExecute taint the pod does not tolerate, or nullptr.
const Taint* untolerated_hard_taint(const std::vector<Toleration>& tolerations, const NodeState& node);
/// HostPortInfo.CheckConflict: same protocol and port, and the same hostIP or either being 0.0.0.0.
bool host_ports_conflict(const HostPort& a, const HostPort& b);

}  // namespace gpuslice::scheduler::framework
