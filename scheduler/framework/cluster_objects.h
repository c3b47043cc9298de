#pragma once
// The cluster objects kube-scheduler's default plugins read besides Nodes and Pods: Namespaces (labels, for
// namespaceSelector), PersistentVolumeClaims, PersistentVolumes, StorageClasses and CSINodes. Only the fields a
// plugin reads are kept (a PV is a few strings and its node affinity, not the object), so a tenant with tens of
// thousands of claims costs a few MiB. Pure: the loop feeds it from watches, `gpuslice simulate` from manifests.

#include "common/result.h"
#include "scheduler/framework/pod_facts.h"
#include "scheduler/framework/spread_sources.h"
#include "scheduler/pod_info.h"

#include <boost/json/object.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::scheduler {

enum AccessMode : uint8_t {
  kReadWriteOnce = 1,
  kReadOnlyMany = 2,
  kReadWriteMany = 4,
  kReadWriteOncePod = 8,
};

struct ClaimInfo {
  std::string ns;
  std::string name;
  std::string uid;
  std::string resource_version;
  std::string volume_name;  ///< spec.volumeName: non-empty means bound (as kube-scheduler's VolumeBinding reads it)
  /// GetPersistentVolumeClaimClass: annotation volume.beta.kubernetes.io/storage-class, else
  /// spec.storageClassName ("" when neither is set).
  std::string storage_class;
  uint8_t access_modes = 0;
  int64_t request_bytes = 0;  ///< spec.resources.requests.storage
  bool block = false;         ///< volumeMode: Block
  bool deleting = false;
  std::string selected_node;    ///< annotation volume.kubernetes.io/selected-node
  bool bind_completed = false;  ///< annotation pv.kubernetes.io/bind-completed (the PV controller finished)
  /// spec.selector; unset: any PV (FindMatchingVolume filters only when the claim has a selector).
  std::optional<LabelSelector> selector;
};

struct VolumeInfo {
  std::string name;
  std::string resource_version;
  /// GetPersistentVolumeClass: annotation volume.beta.kubernetes.io/storage-class, else spec.storageClassName.
  std::string storage_class;
  Labels labels;                                ///< metadata.labels (a claim's spec.selector matches them)
  std::vector<NodeSelectorTerm> node_affinity;  ///< spec.nodeAffinity.required.nodeSelectorTerms (ORed)
  Labels zone_labels;  ///< the PV's zone/region labels (VolumeZone), values possibly "a__b" sets
  std::string csi_driver;
  std::string csi_handle;
  std::string claim_ns;  ///< spec.claimRef
  std::string claim_name;
  std::string claim_uid;
  uint8_t access_modes = 0;
  int64_t capacity_bytes = 0;
  bool block = false;
  bool deleting = false;  ///< metadata.deletionTimestamp set
  std::string phase;
};

/// component-helpers storage/volume/pv_helpers.go IsVolumeBoundToClaim: the claimRef names the claim (namespace
/// and name) and, when the claimRef carries a UID, the claim's UID.
bool volume_bound_to_claim(std::string_view ref_ns, std::string_view ref_name, std::string_view ref_uid,
                           const ClaimInfo& claim);

/// A pre-provisioned PV chosen for an unbound WaitForFirstConsumer claim (binder.go's BindingInfo): the caller
/// writes the claimRef on the PV (with `volume_resource_version` as precondition) and waits for the PV controller
/// to bind the claim. What was read at decision time travels with it, so the write uses exactly that.
struct StaticBinding {
  std::string claim;  ///< in the pod's namespace
  std::string claim_uid;
  std::string claim_resource_version;
  std::string volume;
  std::string volume_resource_version;
  /// The PV's claimRef already names this claim (IsVolumeBoundToClaim: pre-bound by a user or an earlier
  /// attempt): the write sets no pv.kubernetes.io/bound-by-controller.
  bool pre_bound = false;
  /// false when the claimRef already carries the claim's UID too (GetBindVolumeToClaim: not dirty): only the wait.
  bool needs_write = true;
};

/// A PV chosen for a claim by a decision the API has not shown yet (kube-scheduler's assume cache): other pods see
/// the PV as claimed by that claim until a PV event carrying a claimRef arrives or the pod's assumption is dropped.
struct AssumedClaimRef {
  std::string claim_ns;
  std::string claim_name;
  std::string claim_uid;
  std::string pod;  ///< "ns/name" of the pod whose decision chose it
};

struct TopologySelectorRequirement {
  std::string key;
  std::vector<std::string> values;
};

struct StorageClassInfo {
  std::string name;
  std::string provisioner;
  bool wait_for_first_consumer = false;  ///< volumeBindingMode: WaitForFirstConsumer
  std::vector<std::vector<TopologySelectorRequirement>> allowed_topologies;  ///< terms ORed, requirements ANDed
};

/// A policy/v1 PodDisruptionBudget as preemption reads it (kube-scheduler's filterPodsWithPDBViolation):
/// the selector, status.disruptionsAllowed and the pods the API server already counts as disrupted.
struct DisruptionBudgetInfo {
  std::string ns;
  std::string name;
  LabelSelector selector;  ///< nil or empty (`{}`): matches no pod, as upstream
  int32_t disruptions_allowed = 0;
  std::vector<std::string> disrupted_pods;  ///< status.disruptedPods keys (pod names), sorted

  /// Whether the budget counts `labels` of a pod in `ns`.
  bool covers(std::string_view ns, const Labels& labels) const;
};

/// The annotation VolumeBinding writes on a WaitForFirstConsumer claim for the provisioner.
inline constexpr std::string_view kSelectedNodeAnnotation = "volume.kubernetes.io/selected-node";
/// Set on a PV by whoever binds it for the PV controller (GetBindVolumeToClaim), on a claim by the PV controller
/// once bound (isPVCFullyBound).
inline constexpr std::string_view kBoundByControllerAnnotation = "pv.kubernetes.io/bound-by-controller";
inline constexpr std::string_view kBindCompletedAnnotation = "pv.kubernetes.io/bind-completed";

class ClusterObjects {
 public:
  // Each upsert replaces the object of that name; a malformed field is an error naming the object, field and
  // value, and the object is then not stored (a previous version of it is dropped) - a plugin never reads a
  // half-parsed object.
  Status upsert_namespace(const boost::json::object& ns);
  bool remove_namespace(std::string_view name);
  Status upsert_claim(const boost::json::object& pvc);
  bool remove_claim(std::string_view ns, std::string_view name);
  Status upsert_volume(const boost::json::object& pv);
  bool remove_volume(std::string_view name);
  Status upsert_storage_class(const boost::json::object& sc);
  bool remove_storage_class(std::string_view name);
  Status upsert_csi_node(const boost::json::object& csinode);
  bool remove_csi_node(std::string_view name);

  Status upsert_disruption_budget(const boost::json::object& pdb);
  bool remove_disruption_budget(std::string_view ns, std::string_view name);

  const Labels* namespace_labels(std::string_view name) const;
  const ClaimInfo* find_claim(std::string_view ns, std::string_view name) const;
  const VolumeInfo* find_volume(std::string_view name) const;
  const StorageClassInfo* find_storage_class(std::string_view name) const;
  /// CSINode attach limits: driver -> allocatable.count (drivers without a count are absent). nullptr: no CSINode.
  const std::map<std::string, int64_t, std::less<>>* csi_limits(std::string_view node) const;
  const std::map<std::string, Labels, std::less<>>& namespaces() const { return namespaces_; }
  const std::map<std::string, VolumeInfo, std::less<>>& volumes() const { return volumes_; }

  /// "ns/name" -> budget.
  const std::map<std::string, DisruptionBudgetInfo, std::less<>>& disruption_budgets() const { return budgets_; }

  /// Services, ReplicationControllers, ReplicaSets and StatefulSets: the selectors default spreading reads.
  SpreadSources& spread_sources() { return spread_sources_; }
  const SpreadSources& spread_sources() const { return spread_sources_; }

  // ---- PVs chosen by decisions not yet confirmed (kube-scheduler's pvCache.Assume / Restore) ----
  /// Marks PV `volume` as claimed by `ref` (no-op for an unknown PV). Dropped by forget_claim_refs(ref.pod), by
  /// remove_volume, and by an upsert_volume whose object carries a claimRef (the API has the answer now).
  void assume_claim_ref(const std::string& volume, AssumedClaimRef ref);
  /// Drops every assumption made for pod "ns/name"; how many.
  size_t forget_claim_refs(std::string_view pod);
  /// The assumption on PV `volume`, or nullptr.
  const AssumedClaimRef* assumed_claim_ref(std::string_view volume) const;

  size_t claim_count() const { return claims_.size(); }
  size_t volume_count() const { return volumes_.size(); }

 private:
  std::map<std::string, Labels, std::less<>> namespaces_;
  std::map<std::string, ClaimInfo, std::less<>> claims_;  ///< "ns/name"
  std::map<std::string, VolumeInfo, std::less<>> volumes_;
  std::map<std::string, AssumedClaimRef, std::less<>> assumed_refs_;  ///< PV name -> assumption
  std::map<std::string, StorageClassInfo, std::less<>> classes_;
  std::map<std::string, std::map<std::string, int64_t, std::less<>>, std::less<>> csi_nodes_;
  std::map<std::string, DisruptionBudgetInfo, std::less<>> budgets_;  ///< "ns/name"
  SpreadSources spread_sources_;
};

}  // namespace gpuslice::scheduler
