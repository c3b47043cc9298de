#pragma once
// Priority preemption, GPU-aware: when a pod fits nowhere, which lower-priority pods on which node to evict so
// that it fits there. kube-scheduler's DefaultPreemption contract (followed: kubernetes/kubernetes
// pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go - SelectVictimsOnNode,
// PodEligibleToPreemptOthers, filterPodsWithPDBViolation - and pkg/scheduler/framework/preemption/preemption.go -
// findCandidates, pickOneNodeForPreemption; pkg/scheduler/util MoreImportantPod), over our Snapshot:
//
//   eligibility  a pod with preemptionPolicy Never never preempts; a pod nominated to a node where a pod of
//                lower priority is terminating because of a preemption waits for it (no second round of
//                evictions while the first is in flight), unless the nominated node can no longer take it at all;
//   per node     every pod of strictly lower priority (never a nomination) is taken out of the snapshot; if the
//                preemptor then passes every filter of the profile on that node (GpuSlice's card fit included:
//                memory, cores and slots per card, every container), the potential victims are put back one by
//                one, most important first (PDB-violating ones before the others), and each one whose return
//                still lets the preemptor fit is reprieved. What is left are victims whose release the card fit
//                needs: a pod on a card the preemptor does not need is always reprieved;
//   pick a node  fewest PDB violations, then the lowest highest-priority victim, the lowest sum of priorities,
//                the fewest victims, the latest start among the highest-priority victims, then name order
//                (upstream breaks the last tie by its random candidate offset; we are deterministic).
//
// The dry run mutates the snapshot (detach_pod/restore_pod) and restores it exactly before returning; it is pure
// otherwise (no clock, no I/O). The loop (scheduler/loop_preemption.cc) carries a decision out: nominate, mark
// the victims DisruptionTarget, delete them gracefully, and reserve the nominated cards in the snapshot.

#include "scheduler/framework/framework.h"
#include "scheduler/schedule.h"
#include "scheduler/snapshot.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::scheduler {

// kube-scheduler's strings (default_preemption.go, preemption.go).
namespace preemption_msg {
inline constexpr std::string_view kPolicyNever = "not eligible due to preemptionPolicy=Never.";
inline constexpr std::string_view kTerminatingOnNominated =
    "not eligible due to a terminating pod on the nominated node.";
inline constexpr std::string_view kNoVictims = "No preemption victims found for incoming pod";
inline constexpr std::string_view kNotHelpful = "Preemption is not helpful for scheduling";
}  // namespace preemption_msg

struct PreemptionVictim {
  std::string ns;
  std::string name;
  std::string uid;
  int32_t priority = 0;
  int64_t start_unix = 0;  ///< 0: unknown (counts as the latest)
  bool violates_budget = false;
  bool terminating = false;  ///< already being deleted (nothing to delete; counted as a victim all the same)
  std::string key() const { return ns + "/" + name; }
};

struct PreemptionCandidate {
  std::string node;
  std::vector<PreemptionVictim> victims;  ///< most important first
  size_t budget_violations = 0;
  /// Where the preemptor goes once the victims are gone (node, devices per container), from the profile's
  /// Reserve on the snapshot without them.
  Decision placement;
};

struct PreemptionOptions {
  /// kube-scheduler's DefaultPreemptionArgs: the dry run stops after max(minCandidateNodesAbsolute,
  /// nodes x minCandidateNodesPercentage / 100) candidates (capped at the node count).
  int32_t min_candidate_nodes_percentage = 10;
  int32_t min_candidate_nodes_absolute = 100;
};

struct PreemptionResult {
  /// False: the pod may not preempt (message says why, kube-scheduler's "not eligible ..." text).
  bool eligible = true;
  /// A node was found: `chosen` is its candidate.
  bool found = false;
  PreemptionCandidate chosen;
  /// Every candidate the dry run produced, node name order (`gpuslice simulate` prints them).
  std::vector<PreemptionCandidate> candidates;
  /// Without a candidate: "0/N nodes are available: 2 No preemption victims found for incoming pod, 1
  /// CardInsufficientMemory." (per-node reasons of the dry run, kube-scheduler's format); or the eligibility text.
  std::string message;
};

/// Whether `pod` may preempt now (PodEligibleToPreemptOthers): not with preemptionPolicy Never; not while a pod of
/// lower priority on its nominated node (`nominated_node`, "" when none) terminates by preemption - unless that
/// node can no longer take the pod whatever leaves it (a filter answers UnschedulableAndUnresolvable there, or
/// the node is gone). `why` gets kube-scheduler's message when not.
bool eligible_to_preempt(const Snapshot& snapshot, const PodInfo& pod, std::string_view nominated_node,
                         const ScheduleOptions& options, std::string* why);

/// The victims on one node (SelectVictimsOnNode); nullopt-like `found=false` result with the node's reasons in
/// `failure` when preemption there does not help. The snapshot is restored before returning.
struct NodeVictims {
  bool found = false;
  PreemptionCandidate candidate;
  framework::PluginStatus failure;
};
NodeVictims select_victims_on_node(Snapshot& snapshot, const PodInfo& pod, const ScheduleOptions& options,
                                   const NodeState& node);

/// The dry run over the cluster: eligibility with `nominated_node`, candidates, and the node to preempt on.
/// The snapshot is restored before returning.
PreemptionResult find_preemption(Snapshot& snapshot, const PodInfo& pod, std::string_view nominated_node,
                                 const ScheduleOptions& options, const PreemptionOptions& preemption = {});

/// pickOneNodeForPreemption over `candidates` (non-empty): the index of the chosen one.
size_t pick_candidate(const std::vector<PreemptionCandidate>& candidates);

/// "preempting 2 pods on node gpu-a (team/batch-1, team/batch-2)": the preemptor's side of the story.
std::string preemption_summary(const PreemptionCandidate& c);

/// The profile `options` runs (options.profile or the default one).
const framework::Framework& profile_of(const ScheduleOptions& options);

}  // namespace gpuslice::scheduler
