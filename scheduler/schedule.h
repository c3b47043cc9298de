#pragma once
// Filter and score: one pod against a Snapshot, HAMi's rules (hami-protocol.md §6-10) with gpuslice's fixes
// (quota across all cards, every container slot kept, intended card score, deterministic ties). Pure: the same
// snapshot and pod always give the same decision.
//
// Node level, in order: unschedulable, nodeSelector + required node affinity, taints (NoSchedule/NoExecute)
// against tolerations, cpu/memory/ephemeral-storage/pod count, "node unregistered" (GPU pods only). Card level,
// per container, in HAMi's order: NodeInsufficientDevice (more cards asked than the node has), then per card
// CardNotHealth, CardCordoned, CardTypeMismatch, NumaNotFit, CardUuidMismatch, CardTimeSlicingExhausted,
// ExclusiveDeviceAllocateConflict (mutex), ResourceQuotaNotFit, CardInsufficientMemory, CardInsufficientCore,
// ExclusiveDeviceAllocateConflict (exclusive request on a used card), CardComputeUnitsExhausted.
// Init containers each fit on the node's usage as is; app containers accumulate.
//
// The winner is the first node, in node-policy order (binpack: highest node score, spread: lowest; ties by name),
// that passes every filter: HAMi's node score depends only on existing usage, so this equals scoring every
// fitting node, while the snapshot's free-capacity index lets us skip nodes that cannot fit.

#include "common/config.h"
#include "scheduler/allocation.h"
#include "scheduler/pod_info.h"
#include "scheduler/snapshot.h"

#include <boost/json/object.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::scheduler {
namespace framework {
class Framework;
}

// HAMi's reason strings (pkg/device/common/common.go) and kube-scheduler's node-level ones.
namespace reason {
inline constexpr std::string_view kCardTypeMismatch = "CardTypeMismatch";
inline constexpr std::string_view kCardUuidMismatch = "CardUuidMismatch";
inline constexpr std::string_view kCardTimeSlicingExhausted = "CardTimeSlicingExhausted";
inline constexpr std::string_view kCardComputeUnitsExhausted = "CardComputeUnitsExhausted";
inline constexpr std::string_view kCardInsufficientMemory = "CardInsufficientMemory";
inline constexpr std::string_view kCardInsufficientCore = "CardInsufficientCore";
inline constexpr std::string_view kCardNotHealth = "CardNotHealth";
inline constexpr std::string_view kCardCordoned = "CardCordoned";
/// gpuslice's own: the card registers `mode: mig`. HAMi's MIG protocol (templates, hami.io/vgpu-mig-allocations)
/// is not implemented, and the v2.10 plugin in MIG mode refuses an entry without its MIG reservation, so such
/// a card is never chosen (hami-protocol.md §16).
inline constexpr std::string_view kCardMigModeUnsupported = "CardMigModeUnsupported";
inline constexpr std::string_view kNumaNotFit = "NumaNotFit";
inline constexpr std::string_view kExclusiveDeviceAllocateConflict = "ExclusiveDeviceAllocateConflict";
inline constexpr std::string_view kNodeInsufficientDevice = "NodeInsufficientDevice";
inline constexpr std::string_view kAllocatedCardsInsufficientRequest = "AllocatedCardsInsufficientRequest";
inline constexpr std::string_view kResourceQuotaNotFit = "ResourceQuotaNotFit";
inline constexpr std::string_view kNodeUnregistered = "node unregistered";
inline constexpr std::string_view kNodeUnschedulable = "node(s) were unschedulable";
inline constexpr std::string_view kNodeAffinity = "node(s) didn't match Pod's node affinity/selector";
inline constexpr std::string_view kInsufficientCpu = "Insufficient cpu";
inline constexpr std::string_view kInsufficientMemory = "Insufficient memory";
inline constexpr std::string_view kInsufficientEphemeral = "Insufficient ephemeral-storage";
inline constexpr std::string_view kTooManyPods = "Too many pods";
/// Prefix of `node(s) had untolerated taint {key: value}`.
inline constexpr std::string_view kUntoleratedTaintPrefix = "node(s) had untolerated taint ";
}  // namespace reason

struct ScheduleOptions {
  std::string node_policy = "binpack";  ///< binpack | spread; a pod's hami.io/node-scheduler-policy overrides
  std::string gpu_policy = "spread";    ///< spread | binpack; a pod's hami.io/gpu-scheduler-policy overrides
  /// Collect the per-node failures (and the message) when nothing fits. The message needs every node once.
  bool explain_failures = true;
  /// Prune candidates through the snapshot's free-capacity index. Off only to measure or cross-check: the
  /// decision is the same either way, only the number of nodes examined differs.
  bool use_index = true;
  /// Let InterPodAffinity and PodTopologySpread take the pods a selector may match from the snapshot's pod index
  /// (Snapshot::for_each_pod_maybe_matching) instead of walking every pod. Off only to measure or cross-check:
  /// the decision is the same either way.
  bool use_pod_index = true;
  /// The plugin profile to run (scheduler/framework/framework.h); nullptr: the default profile.
  const framework::Framework* profile = nullptr;
  /// The caller writes volume.kubernetes.io/selected-node on Decision::claims_to_select and the claimRef of
  /// Decision::volumes_to_bind's PVs, and waits for the claims to bind before binding the pod (kube-scheduler's
  /// VolumeBinding PreBind). false: pods with an unbound WaitForFirstConsumer claim stay Pending with a message
  /// saying so.
  bool select_volume_nodes = false;
  /// Lock-aware choice (issue 12; HAMi's node lock admits one GPU pod per node at a time): when set, it answers
  /// how many allocations are in progress on a node (binds holding or waiting for its lock; 0: free). For a pod
  /// with a GPU request, the policy's first choice is kept unless it is busy; then the first feasible node in
  /// policy order that is not busy is taken instead, among the first `busy_lookahead` feasible nodes (without
  /// scoring) or among the nodes whose total score equals the best (with scoring). When all of those are busy
  /// the least loaded of them is taken (the first in order on ties), so a burst queues evenly over their locks
  /// rather than all on the first choice's. Null: plain policy order.
  const std::function<size_t(std::string_view node)>* busy = nullptr;
  size_t busy_lookahead = 64;  ///< scheduler.nodeLockLookahead

  static ScheduleOptions from(const SchedulerConfig& config);
};

/// Why one node was rejected.
struct NodeFailure {
  std::string node;
  /// Distinct reasons, sorted, each counted once for this node in the kube-style message.
  std::vector<std::string> reasons;
  /// HAMi's per-node string (`GenReason`): "1/2 CardInsufficientMemory, 1/2 CardTypeMismatch", or a bare literal
  /// (`NodeInsufficientDevice`, `node unregistered`) or the node-level reason.
  std::string detail;
};

struct Decision {
  bool scheduled = false;
  std::string node;
  /// One slot per container of the pod's GPU request (init first), empty for containers without GPU.
  PodDevices devices;
  double node_score = 0;
  /// Unbound WaitForFirstConsumer claims (names, in the pod's namespace) to annotate with the chosen node.
  std::vector<std::string> claims_to_select;
  /// Unbound WaitForFirstConsumer claims bound to an existing PV on the chosen node (VolumeBinding's static
  /// bindings): the caller writes the PV's claimRef and waits for the PV controller to bind the claim.
  std::vector<StaticBinding> volumes_to_bind;
  /// When not scheduled: `0/N nodes are available: 1 CardInsufficientCore.` (kube-scheduler style, usable as the
  /// PodScheduled=False message); also an error about the pod itself (e.g. no nodes at all).
  std::string message;
  std::vector<NodeFailure> failures;  ///< when not scheduled and explain_failures: every node, name order
  size_t nodes_total = 0;
  size_t nodes_visited = 0;  ///< nodes the index handed out before the decision (a measure of its pruning)
};

/// Decides where `pod` goes. The pod's own record in the snapshot, if any, is NOT discounted: forget() or
/// remove_pod() it first when re-deciding (HAMi drops the old reservation the same way).
Decision schedule(const Snapshot& snapshot, const PodInfo& pod, const ScheduleOptions& options);

/// The numbers behind a GPU reason on one node: what the pod asks and the best this node offers, so a refusal
/// says by how much (CardInsufficientMemory: MiB per card and the largest free on a usable card;
/// CardInsufficientCore: % per card and the largest free; NodeInsufficientDevice: cards asked and the node's
/// cards; AllocatedCardsInsufficientRequest: cards asked and how many fitted).
struct Shortfall {
  std::string reason;
  int64_t asked = 0;
  int64_t best = 0;
};
/// "asks 90000 MiB per card, largest free 81920 MiB" (the text after a reason; empty for other reasons).
std::string shortfall_text(const Shortfall& s);

/// The GpuSlice plugin's node check (scheduler/framework/plugins/gpu_slice.cc): registration, then HAMi's card fit
/// per container; `devices` are the cards picked when it fits.
struct GpuFit {
  bool fits = false;
  std::vector<std::string> reasons;
  std::string detail;
  PodDevices devices;
  std::vector<Shortfall> shortfalls;  ///< with `explain`, for the reasons that carry numbers
};
GpuFit gpu_fit(const Snapshot& snapshot, const NodeState& node, const PodInfo& pod, const ScheduleOptions& options,
               bool explain);
/// The free-capacity index query that prunes nodes unable to hold the pod's GPU request (empty: no GPU).
CapacityQuery capacity_query(const PodInfo& pod);
/// The node order of the pod's node policy (binpack / spread, per-pod annotation first).
NodeOrder node_order_for(const PodInfo& pod, const ScheduleOptions& options);

/// kube-scheduler's FitError text: "0/N nodes are available: " + "<count> <reason>" entries sorted as strings,
/// joined by ", ", then "." (N = total). With no reasons: "0/N nodes are available."
/// `figures`, when given, adds each reason's numbers after it over all nodes (the largest free amount seen):
/// "0/2 nodes are available: 2 CardInsufficientMemory (asks 90000 MiB per card, largest free 81920 MiB)." - the
/// short reason stays first, so tools matching on it still work.
std::string format_failure_message(size_t total_nodes, const std::map<std::string, size_t, std::less<>>& counts,
                                   const std::map<std::string, Shortfall, std::less<>>* figures = nullptr);

/// HAMi's FilteringFailed event note for a decision that placed nothing: "no available node, 3 nodes do not meet:
/// 2 nodes CardInsufficientCore(a, b); 1 nodes node unregistered(c)" (reasons sorted; at most 10 node names each,
/// then ", ...").
std::string filtering_failed_note(const Decision& decision);

/// The memory a container asks per card on `card` (gpumem, or the percentage of the card's memory).
int64_t request_mem_on_card(const ContainerGpuRequest& request, const DeviceInfo& card);

}  // namespace gpuslice::scheduler
