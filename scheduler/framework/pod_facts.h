#pragma once
// What kube-scheduler's default plugins read from a pod, beyond what the GPU fit needs (scheduler/pod_info.h):
// labels, pod (anti-)affinity terms, topology spread constraints, host ports, volumes, DRA claims. Parsed once
// per pod object (the incoming pod by parse_pod, every bound pod by Snapshot::upsert_pod) and shared read-only,
// so the snapshot keeps only these fields of the thousands of pods it counts. Pure.
//
// matchLabelKeys / mismatchLabelKeys are merged into the term's selector here (key In / NotIn the pod's own
// value, keys the pod does not carry ignored), exactly what kube-apiserver does on pod creation since 1.31; a
// selector already merged by the API server gets the same requirement twice, which changes nothing.

#include "common/result.h"
#include "scheduler/pod_info.h"

#include <boost/json/object.hpp>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuslice::scheduler {

/// A label set (a pod's metadata.labels, a namespace's, a selector map): key/value pairs sorted by key, keys unique,
/// in one vector. Reads as std::map did (find, count, at, in key order), lookups by binary search; 64 bytes a
/// label where a map node took ~112 with its links and allocation header (measured: -158 B for a pod of 3 labels),
/// which counts at tens of thousands of bound pods (scheduler/snapshot.h).
class Labels {
 public:
  using value_type = std::pair<std::string, std::string>;
  using const_iterator = std::vector<value_type>::const_iterator;

  Labels() = default;
  /// As std::map's: the first of equal keys wins.
  Labels(std::initializer_list<value_type> init);

  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }
  bool empty() const { return items_.empty(); }
  size_t size() const { return items_.size(); }

  /// The pair with `key`, or end().
  const_iterator find(std::string_view key) const;
  /// The value of `key`, or nullptr: the lookup helper.
  const std::string* get(std::string_view key) const;
  bool contains(std::string_view key) const { return get(key) != nullptr; }
  size_t count(std::string_view key) const { return contains(key) ? 1 : 0; }
  /// The value of `key`; throws std::out_of_range without it.
  const std::string& at(std::string_view key) const;

  /// Adds `key` = `value` unless `key` is present (std::map::emplace); true when added.
  bool emplace(std::string key, std::string value);
  /// Adds `key` = `value`, or replaces the value `key` has.
  void insert_or_assign(std::string key, std::string value);
  void reserve(size_t n) { items_.reserve(n); }
  /// Frees what growing left unused (after the last emplace of a parse).
  void shrink_to_fit() { items_.shrink_to_fit(); }

  bool operator==(const Labels&) const = default;

 private:
  std::vector<value_type>::iterator lower_bound(std::string_view key);
  std::vector<value_type> items_;  ///< sorted by key, keys unique
};

/// metav1.LabelSelector as a selector: requirements ANDed. `nothing`: a nil selector, which matches no object
/// (LabelSelectorAsSelector(nil)); an empty selector `{}` matches every object.
struct LabelSelector {
  enum class Op { in, not_in, exists, does_not_exist };
  struct Requirement {
    std::string key;
    Op op = Op::in;
    std::vector<std::string> values;
  };
  bool nothing = true;
  std::vector<Requirement> requirements;

  bool matches(const Labels& labels) const;
  static LabelSelector everything() { return LabelSelector{false, {}}; }
};

/// Parses a metav1.LabelSelector object (matchLabels, matchExpressions); `at` names the field in errors.
Result<LabelSelector> parse_label_selector(const boost::json::object& selector, const std::string& at);

/// One required PodAffinityTerm.
struct PodAffinityTerm {
  LabelSelector selector;
  std::vector<std::string> namespaces;              ///< empty and no namespace_selector: the pod's own namespace
  std::optional<LabelSelector> namespace_selector;  ///< set (even `{}`, all namespaces): ORed with `namespaces`
  std::string topology_key;
};

struct WeightedPodAffinityTerm {
  int32_t weight = 0;
  PodAffinityTerm term;
};

/// One topologySpreadConstraint.
struct SpreadConstraint {
  int32_t max_skew = 1;
  std::string topology_key;
  bool hard = true;  ///< whenUnsatisfiable: DoNotSchedule (false: ScheduleAnyway)
  LabelSelector selector;
  std::optional<int32_t> min_domains;
  bool honor_node_affinity = true;  ///< nodeAffinityPolicy: Honor (default) / Ignore
  bool honor_node_taints = false;   ///< nodeTaintsPolicy: Honor / Ignore (default)
};

struct HostPort {
  std::string ip = "0.0.0.0";  ///< hostIP, "" normalised to 0.0.0.0 (the wildcard)
  std::string protocol = "TCP";
  int32_t port = 0;
  bool operator==(const HostPort&) const = default;
};

/// An in-tree volume that VolumeRestrictions checks for conflicts on one node (GCE PD, AWS EBS, RBD, iSCSI).
struct DiskVolume {
  std::string kind;  ///< gce | aws | rbd | iscsi
  std::string id;    ///< pdName | volumeID | pool/image | iqn
  bool read_only = false;
  std::vector<std::string> monitors;  ///< rbd: the same image conflicts only when the monitor sets overlap
};

/// The kinds of a pod's controller (its ownerReference with controller: true) that kube-scheduler's default
/// spreading reads a selector from (helper.DefaultSelector): v1 ReplicationController, apps/v1 ReplicaSet and
/// StatefulSet; any other controller is `none`.
enum class ControllerKind : uint8_t { none, replication_controller, replica_set, stateful_set };

/// What few pods have: pod (anti-)affinity terms, spread constraints, host ports, volumes, a nominated node. PodFacts
/// keeps them behind one pointer, null when all are empty, so that a plain GPU pod (the snapshot holds tens of
/// thousands) pays 8 bytes for them instead of ~290. Immutable once parsed.
struct PodFactsExtras {
  std::string nominated_node;                  ///< status.nominatedNodeName
  std::vector<PodAffinityTerm> affinity;       ///< required, ANDed
  std::vector<PodAffinityTerm> anti_affinity;  ///< required
  std::vector<WeightedPodAffinityTerm> preferred_affinity;
  std::vector<WeightedPodAffinityTerm> preferred_anti_affinity;
  std::vector<SpreadConstraint> spread;
  std::vector<HostPort> host_ports;  ///< app containers' ports with hostPort > 0 (kube-scheduler's getContainerPorts)
  std::vector<std::string> claims;   ///< PVC names (persistentVolumeClaim and generic ephemeral volumes)
  std::vector<DiskVolume> disks;
  std::vector<std::string> inline_csi_drivers;  ///< csi inline ephemeral volumes: one attach each
  std::vector<std::string> unsupported;         ///< features a plugin would need that gpuslice does not evaluate

  bool empty() const {
    return nominated_node.empty() && affinity.empty() && anti_affinity.empty() && preferred_affinity.empty() &&
           preferred_anti_affinity.empty() && spread.empty() && host_ports.empty() && claims.empty() && disks.empty() &&
           inline_csi_drivers.empty() && unsupported.empty();
  }
};

/// The extras of a pod that has none (what PodFacts' accessors read when its pointer is null).
const PodFactsExtras& no_pod_facts_extras();

struct PodFacts {
  Labels labels;
  std::string controller_name;  ///< set with controller_kind (the owner is looked up by name in the pod's namespace)
  std::string node_name;        ///< spec.nodeName
  // Preemption (scheduler/preemption.h) reads these of the preemptor and of every counted pod (and
  // nominated_node()).
  std::string uid;  ///< metadata.uid (the victim's delete precondition)
  /// kube-scheduler's non-zero requests (the LeastAllocated score's): the effective cpu and memory request with
  /// 100m and 200 MiB for each container that requests none (schedutil.DefaultMilliCPURequest/DefaultMemoryRequest).
  int64_t nonzero_cpu_milli = 0;
  int64_t nonzero_memory_bytes = 0;
  int64_t start_unix = 0;  ///< status.startTime in Unix seconds; 0: not started (or unreadable)
  int32_t priority = 0;    ///< spec.priority (the API server resolves priorityClassName into it)
  ControllerKind controller_kind = ControllerKind::none;
  bool terminating = false;              ///< metadata.deletionTimestamp set
  bool preempt_never = false;            ///< spec.preemptionPolicy: Never
  bool preemption_target = false;        ///< condition DisruptionTarget=True with reason PreemptionByScheduler
  bool dynamic_resource_claims = false;  ///< spec.resourceClaims non-empty (DRA)
  /// The rest (terms, spread, ports, volumes, nominated node); null when all of it is empty. Read it through the
  /// accessors below, which see an empty set for null.
  std::unique_ptr<const PodFactsExtras> extras;

  const PodFactsExtras& more() const { return extras ? *extras : no_pod_facts_extras(); }
  const std::string& nominated_node() const { return more().nominated_node; }
  const std::vector<PodAffinityTerm>& affinity() const { return more().affinity; }
  const std::vector<PodAffinityTerm>& anti_affinity() const { return more().anti_affinity; }
  const std::vector<WeightedPodAffinityTerm>& preferred_affinity() const { return more().preferred_affinity; }
  const std::vector<WeightedPodAffinityTerm>& preferred_anti_affinity() const { return more().preferred_anti_affinity; }
  const std::vector<SpreadConstraint>& spread() const { return more().spread; }
  const std::vector<HostPort>& host_ports() const { return more().host_ports; }
  const std::vector<std::string>& claims() const { return more().claims; }
  const std::vector<DiskVolume>& disks() const { return more().disks; }
  const std::vector<std::string>& inline_csi_drivers() const { return more().inline_csi_drivers; }
  const std::vector<std::string>& unsupported() const { return more().unsupported; }

  /// Terms by which this pod, once placed, scores other pods (InterPodAffinity's PreScore of an incoming pod reads
  /// existing pods' preferred terms and their required affinity; required anti-affinity only filters).
  bool has_affinity_score_terms() const {
    return !affinity().empty() || !preferred_affinity().empty() || !preferred_anti_affinity().empty();
  }
  bool has_pod_affinity() const {
    return !affinity().empty() || !anti_affinity().empty() || !preferred_affinity().empty() ||
           !preferred_anti_affinity().empty();
  }
};

/// Parses the facts of a pod object. Errors name the field and value (a bad selector operator, a bad port).
Result<std::shared_ptr<const PodFacts>> parse_pod_facts(const boost::json::object& pod);

/// The shared facts of a pod that has none of the above (no labels, no terms, no ports, no volumes).
std::shared_ptr<const PodFacts> empty_pod_facts();

/// kube-scheduler's PodMatchesTermsNamespaceAndSelector: `pod_ns` is in the term's namespaces (the owner's
/// namespace when the term names none and has no namespaceSelector; `ns_labels` resolves namespaceSelector) and
/// `labels` match its selector.
bool term_matches(const PodAffinityTerm& term, std::string_view owner_ns, std::string_view pod_ns, const Labels& labels,
                  const Labels* ns_labels);

}  // namespace gpuslice::scheduler
