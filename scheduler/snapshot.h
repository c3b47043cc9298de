#pragma once
// The cluster snapshot the scheduling core decides on: nodes with their registered cards and usage, bound pods'
// contributions, namespace GPU quotas, and an index of nodes by free capacity and node score. Pure: no clock
// (time enters as a parameter), no I/O, no locking.
//
// Life cycle (the live loop, scheduler/loop, keeps ONE snapshot current from watch events; `gpuslice simulate`
// and the tests build one from manifests):
//
//   Snapshot snap(config.devices);
//   snap.upsert_node(node_json);            // ADDED/MODIFIED Node; a bad register annotation -> error, node kept
//                                           //   but unregistered (no cards), so the loop logs and carries on
//   snap.upsert_pod(pod_json);              // ADDED/MODIFIED Pod: replaces that pod's previous contribution
//   snap.upsert_quota(resource_quota_json); // ADDED/MODIFIED ResourceQuota
//   snap.remove_node(name) / remove_pod(ns, name) / remove_quota(ns, name);   // DELETED
//   Decision d = schedule(snap, pod_info, options);                            // scheduler/schedule.h
//   snap.assume(pod_info, d.node, d.devices, now_unix);   // count the decision before the API confirms it
//   ... patch annotations, bind ...
//   snap.forget(ns, name);                  // bind failed: drop the assumption
//   snap.expire_assumed(now_unix, ttl);     // assumptions never confirmed by a watch event time out
//
// Every mutator keeps the free-capacity index current, so the loop never rebuilds: upsert_pod/remove_pod/assume/
// forget cost O(log pods + cards of the node), upsert_node O(pods on that node), expire_assumed O(pods). Events may
// arrive in any order: a pod may reference a node (or card) that is not known yet; its contribution is kept and applied
// when the node (or card) appears. Re-applying the same object is idempotent.
//
// What counts (hami-protocol.md §4): a pod holds GPU usage while it carries `hami.io/vgpu-node` and
// `hami.io/vgpu-devices-allocated` and is not Succeeded/Failed (Pending included). A pod counts for cpu, memory,
// ephemeral-storage and pod count on `spec.nodeName` (or, before binding, on `hami.io/vgpu-node`). Per card, a
// pod uses max(largest init container, sum of app containers) of memory and cores and one slot per app container
// entry; once every init container has terminated with exit code 0, only the app containers count.
//
// Not thread-safe: one owner (the loop's strand) mutates and schedules; copy-free by design (move-only).

#include "common/config.h"
#include "common/result.h"
#include "scheduler/allocation.h"
#include "scheduler/framework/cluster_objects.h"
#include "scheduler/framework/pod_facts.h"
#include "scheduler/inventory.h"
#include "scheduler/pod_info.h"

#include <boost/json/object.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace gpuslice::scheduler {

struct Taint {
  std::string key;
  std::string value;
  std::string effect;  ///< NoSchedule | PreferNoSchedule | NoExecute
  bool operator==(const Taint&) const = default;
};

/// A registered card with the usage of the pods that hold it.
struct CardState {
  DeviceInfo info;
  bool nvidia = false;    ///< is_nvidia_type(info.type), computed once at upsert_node
  bool cordoned = false;  ///< UUID listed in hami.io/device-cordon
  int64_t used_mem_mib = 0;
  int64_t used_cores = 0;
  int64_t used_slots = 0;  ///< HAMi's Used

  bool visible() const { return nvidia; }  ///< HAMi's Fit ignores cards whose type lacks "nvidia" entirely
  /// Visible, healthy, not cordoned and with a free slot: may take a new container.
  bool usable() const;
  int64_t free_mem_mib() const { return info.devmem - used_mem_mib; }
  int64_t free_cores() const { return info.devcore - used_cores; }
};

/// GPU usage of a namespace, or a limit on it (per-card value x cards, summed over the namespace's pods).
struct QuotaAmounts {
  int64_t mem_mib = 0;
  int64_t cores = 0;
  int64_t gpus = 0;
  bool operator==(const QuotaAmounts&) const = default;
};

/// Effective limits of a namespace: the minimum over its ResourceQuota objects of spec.hard
/// `limits.<gpumem resource>` (x memoryFactor, so in the same MiB as requests), `limits.<gpucores resource>`,
/// `limits.<gpu resource>`. nullopt: no object limits that resource.
struct QuotaLimits {
  std::optional<int64_t> mem_mib;
  std::optional<int64_t> cores;
  std::optional<int64_t> gpus;
  bool any() const { return mem_mib || cores || gpus; }
};

struct NodeState {
  std::string name;
  std::map<std::string, std::string, std::less<>> labels;
  std::vector<Taint> taints;
  bool unschedulable = false;
  ResourceRequests allocatable;  ///< cpu (milli), memory and ephemeral-storage (bytes)
  int64_t allocatable_pods = 0;
  int64_t allocatable_gpus = 0;  ///< allocatable nvidia.com/gpu (cards x split count)
  ResourceRequests requested;    ///< sum over pods counted on this node
  /// Sum of the pods' non-zero cpu and memory requests (PodFacts::nonzero_*; kube-scheduler's NonZeroRequested,
  /// which NodeResourcesFit's LeastAllocated score reads); ephemeral_bytes unused.
  ResourceRequests nonzero_requested;
  int64_t pod_count = 0;
  bool has_register_annotation = false;
  std::string register_error;    ///< non-empty: the register annotation was rejected (then cards is empty)
  std::vector<CardState> cards;  ///< in registration order
  double score = 0;              ///< HAMi node score over existing usage (hami-protocol.md §8)

  /// HAMi's "registered": a valid register annotation and allocatable nvidia.com/gpu above 0.
  bool registered() const { return has_register_annotation && register_error.empty() && allocatable_gpus > 0; }
  const CardState* find_card(std::string_view uuid) const;
};

/// One pod's recorded contribution (what upsert_pod or assume counted).
struct PodRecord {
  std::string ns;
  std::string name;
  std::string node;      ///< where cpu/memory/pods count ("" if none)
  std::string gpu_node;  ///< where the cards are (hami.io/vgpu-node), "" without a GPU allocation
  ResourceRequests requests;
  PodDevices devices;                   ///< as allocated, slots init first
  std::vector<std::string> containers;  ///< container names per slot (init first), when the spec was seen
  size_t init_slots = 0;
  bool init_done = false;  ///< all init containers exited 0: init usage no longer counts
  bool assumed = false;    ///< recorded by assume() or nominate(), not yet confirmed by a watch event
  /// Recorded by nominate(): capacity held for a preemptor while its victims terminate (also `assumed`, so a
  /// watch event of the still-pending pod keeps it; never expired by expire_assumed, never a victim).
  bool nominated = false;
  int64_t assumed_at_unix = 0;
  QuotaAmounts quota;  ///< this pod's charge against its namespace quota
  /// What the default plugins read (labels, terms, ports, volumes); shared, never null.
  std::shared_ptr<const PodFacts> facts = empty_pod_facts();
};

/// The pruning condition of the free-capacity index: a node can only fit a request if it has at least `cards`
/// usable cards, one with `min_card_mem_mib` free and one with `min_card_cores` free (necessary, not sufficient:
/// the card fit decides).
struct CapacityQuery {
  int64_t cards = 0;  ///< 0: no GPU needed, every node is a candidate
  int64_t min_card_mem_mib = 0;
  int64_t min_card_cores = 0;
};

enum class NodeOrder {
  binpack,  ///< highest node score first
  spread,   ///< lowest node score first
};

class Snapshot {
 public:
  explicit Snapshot(DeviceConfig devices = {});
  ~Snapshot();
  Snapshot(Snapshot&&) noexcept;
  Snapshot& operator=(Snapshot&&) noexcept;
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;

  // ---- Nodes ----
  /// Adds or replaces a Node (labels, taints, spec.unschedulable, status.allocatable, register and cordon
  /// annotations); card usage is recomputed from the pods recorded on it. A bad register annotation returns
  /// the error (naming node, field and value) and leaves the node in the snapshot unregistered, without cards.
  /// A Node without metadata.name is an error and changes nothing.
  Status upsert_node(const boost::json::object& node);
  /// Removes a node; the pods recorded on it are kept (they come back if the node does). False if unknown.
  bool remove_node(std::string_view name);

  // ---- Pods ----
  /// Adds or replaces a pod's contribution (see the header comment for what counts). A Succeeded/Failed pod, or
  /// one on no node, is dropped - except that a pod recorded by assume() stays assumed until an event shows it
  /// on a node (the watch may deliver the pre-decision object after assume). An undecodable
  /// `-allocated` annotation or a bad quantity returns an error naming the pod, field and value; the pod then
  /// counts without GPUs (resp. without the bad resource).
  Status upsert_pod(const boost::json::object& pod);
  /// Drops a pod's contribution (assumed or not). False if unknown.
  bool remove_pod(std::string_view ns, std::string_view name);

  // ---- ResourceQuotas ----
  /// Adds or replaces a ResourceQuota's GPU limits (other keys ignored; `requests.*` ignored as in HAMi).
  /// A non-integer quantity is an error naming quota, key and value; the object then limits nothing.
  Status upsert_quota(const boost::json::object& quota);
  bool remove_quota(std::string_view ns, std::string_view name);

  // ---- Decisions not yet confirmed ----
  /// Counts `pod` on `node` with `devices` (a Decision's node and devices) as if the API had confirmed it,
  /// replacing any previous record of the pod. Unknown node: an error, nothing recorded.
  Status assume(const PodInfo& pod, std::string_view node, const PodDevices& devices, int64_t now_unix);
  /// Drops an assumption (bind failed), and the PVs its decision assumed claimed (ClusterObjects::
  /// assume_claim_ref, also dropped by remove_pod and expire_assumed). False when the pod is not assumed
  /// (confirmed records stay).
  bool forget(std::string_view ns, std::string_view name);
  /// Drops assumptions older than ttl_seconds; returns their "ns/name" keys, sorted. Nominations stay (their
  /// owner, the loop, drops them when the pod binds, goes away or loses its nomination).
  std::vector<std::string> expire_assumed(int64_t now_unix, int64_t ttl_seconds);
  /// Holds `devices` on `node` for a preemptor (kube-scheduler's nominator): counted like assume(), marked
  /// `nominated`. Unknown node: an error, nothing recorded. forget()/remove_pod() drop it.
  Status nominate(const PodInfo& pod, std::string_view node, const PodDevices& devices, int64_t now_unix);

  // ---- What-if (preemption's dry run; scheduler/preemption.h) ----
  /// Takes a pod's record out (its usage no longer counts) and returns it; nullopt when unknown.
  std::optional<PodRecord> detach_pod(std::string_view ns, std::string_view name);
  /// Puts a record taken by detach_pod() back, exactly as it was (replacing any record of that pod).
  void restore_pod(PodRecord rec);

  // ---- Reading ----
  const DeviceConfig& devices() const { return devices_; }
  size_t node_count() const { return nodes_.size(); }
  size_t pod_count() const { return pods_.size(); }
  const NodeState* find_node(std::string_view name) const;
  const PodRecord* find_pod(std::string_view ns, std::string_view name) const;
  /// Every node in name order.
  void for_each_node(const std::function<void(const NodeState&)>& f) const;
  /// Every recorded pod in "ns/name" order.
  void for_each_pod(const std::function<void(const PodRecord&)>& f) const;
  /// Every recorded pod counted on `node` (spec.nodeName, or hami.io/vgpu-node before binding), key order.
  void for_each_pod_on(std::string_view node, const std::function<void(const PodRecord&)>& f) const;
  /// Recorded pods with required pod anti-affinity (InterPodAffinity's symmetry), key order.
  void for_each_pod_with_anti_affinity(const std::function<void(const PodRecord&)>& f) const;
  /// Recorded pods with terms that score other pods (PodFacts::has_affinity_score_terms: preferred affinity or
  /// anti-affinity, required affinity; InterPodAffinity's score symmetry), key order.
  void for_each_pod_with_affinity_terms(const std::function<void(const PodRecord&)>& f) const;
  /// Whether any recorded pod has such terms (else InterPodAffinity's symmetry scoring has nothing to count).
  bool any_pod_with_affinity_score_terms() const { return !affinity_term_pods_.empty(); }

  /// One label query: pods whose labels `selector` matches, in one of `namespaces` (nullptr: any namespace).
  struct PodQuery {
    const LabelSelector* selector = nullptr;
    const std::vector<std::string>* namespaces = nullptr;
  };
  /// Visits, each once and in no particular order, a SUPERSET of the recorded pods that match every query;
  /// callers still test each pod they are given. With `use_index` the pods come from the narrowest of the pod
  /// index's lists that the queries allow: the pods carrying one of the values of an `In` requirement (matchLabels
  /// included), the pods carrying the key of an `Exists` requirement, or the pods of the namespaces. A query the
  /// index cannot narrow (only NotIn / DoesNotExist, or `{}`, in any namespace) costs the walk over every pod,
  /// which is also what `use_index = false` does. A `nothing` (nil) selector matches no pod: nothing is visited.
  /// Cost: O(pods visited), the lists kept current by every mutator at O(labels of the pod) each.
  void for_each_pod_maybe_matching(const std::vector<PodQuery>& queries, bool use_index,
                                   const std::function<void(const PodRecord&)>& f) const;
  /// Whether any node carries a PreferNoSchedule taint (TaintToleration then scores).
  bool any_prefer_no_schedule_taint() const { return !soft_tainted_nodes_.empty(); }
  /// Namespaces, PVCs, PVs, StorageClasses, CSINodes (the loop's watches and simulate feed them).
  ClusterObjects& objects() { return objects_; }
  const ClusterObjects& objects() const { return objects_; }
  QuotaLimits quota_limits(std::string_view ns) const;
  QuotaAmounts quota_used(std::string_view ns) const;

  /// Visits the nodes that may satisfy `q`, in node-score order for `order` (ties: name ascending), until `visit`
  /// returns true. Nodes that certainly cannot fit are skipped through the free-capacity index, so the cost
  /// grows with the nodes visited, not with the cluster.
  void visit_candidates(const CapacityQuery& q, NodeOrder order,
                        const std::function<bool(const NodeState&)>& visit) const;

 private:
  struct Index;
  void reindex(NodeState& node);
  void unindex(const NodeState& node);
  void apply(const PodRecord& rec, int sign);
  void apply_cards(NodeState& node, const PodRecord& rec, int sign);
  void refresh_cards(NodeState& node);
  void recompute_quota_limits(const std::string& ns);
  void store(std::string key, PodRecord rec);
  bool erase(const std::string& key);
  void link(const PodRecord& rec);
  void unlink(const PodRecord& rec);

  DeviceConfig devices_;
  std::map<std::string, NodeState, std::less<>> nodes_;
  std::map<std::string, PodRecord, std::less<>> pods_;  ///< key "ns/name"
  /// A pod of pods_ (its key and record), by pointer: std::map nodes are stable until erased (erase() drops the
  /// pointer first). Ordered by key, as pods_ is.
  using PodEntry = std::pair<const std::string, PodRecord>;
  struct EntryByKey {
    bool operator()(const PodEntry* a, const PodEntry* b) const { return a->first < b->first; }
  };
  /// node (cpu or gpu) -> its pods (a pointer each: no copy of the key, 40,000 pods: ~2.5 MB less)
  std::unordered_map<std::string, std::set<const PodEntry*, EntryByKey>> pods_by_node_;
  std::map<std::string, std::map<std::string, QuotaLimits>, std::less<>> quota_objects_;  ///< ns -> name -> limits
  std::map<std::string, QuotaLimits, std::less<>> quota_limits_;
  std::map<std::string, QuotaAmounts, std::less<>> quota_used_;
  std::unique_ptr<Index> index_;
  std::set<std::string, std::less<>> anti_affinity_pods_;  ///< keys of pods with required anti-affinity
  std::set<std::string, std::less<>> affinity_term_pods_;  ///< keys of pods with has_affinity_score_terms()
  std::set<std::string, std::less<>> soft_tainted_nodes_;  ///< nodes with a PreferNoSchedule taint
  /// The pod index (for_each_pod_maybe_matching): records by label "key\0value", by label key, by namespace.
  /// Pointers into pods_ (std::map nodes are stable until erased; erase() unlinks them first).
  using PodList = std::unordered_set<const PodRecord*>;
  std::unordered_map<std::string, PodList> pods_by_label_;
  std::unordered_map<std::string, PodList> pods_by_label_key_;
  std::unordered_map<std::string, PodList> pods_by_namespace_;
  ClusterObjects objects_;
};

/// HAMi's node score over existing usage: 10 x (sum Used/sum Count + sum Usedcores/sum Totalcore +
/// sum Usedmem/sum Totalmem) over the node's visible cards (a zero denominator contributes 0).
double node_score(const NodeState& node);

}  // namespace gpuslice::scheduler
