#pragma once
// The scheduling framework in kube-scheduler's shape (pkg/scheduler/framework/interface.go, runtime/framework.go,
// schedule_one.go), reduced to what gpuslice runs: a profile is an ordered list of plugins; for one pod
//
//   PreFilter  once per pod, in profile order: computes the plugin's typed state into the CycleState, or Skip
//              (the plugin has nothing to check for this pod), or rejects the pod outright (the message then
//              reads "0/N nodes are available: <reason>.", as kube-scheduler's FitError with a PreFilterMsg);
//   Filter     per candidate node, in profile order, stopping at the first rejection (its reasons are that
//              node's reasons in the "0/N nodes are available: ..." summary);
//   Score      only when a plugin's PreScore says the pod has something to prefer: each scoring plugin scores
//              the feasible nodes, NormalizeScore maps them to 0..100, the weighted sum decides, and the node
//              order of the GPU policy (HAMi's binpack/spread) breaks ties;
//   Reserve    on the chosen node: plugins add their part of the decision (the GPU slice's cards, the
//              WaitForFirstConsumer claims to annotate); Unreserve is the snapshot's forget().
//
// Candidates come from the snapshot's free-capacity index (Snapshot::visit_candidates), so nodes that cannot
// hold the GPU request are never examined; without scores the first feasible node in GPU-policy order wins
// (HAMi's node score depends only on existing usage, so that equals scoring every feasible node).
//
// Everything here is pure: plugins read the Snapshot and the pod, never the clock or the network.

#include "scheduler/framework/pod_facts.h"
#include "scheduler/pod_info.h"
#include "scheduler/schedule.h"
#include "scheduler/snapshot.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::scheduler::framework {

enum class Code {
  success,
  unschedulable,  ///< this node, now (another pod leaving may help)
  unresolvable,   ///< UnschedulableAndUnresolvable: this node cannot take the pod whatever happens to other pods
  error,
  skip,  ///< PreFilter: nothing to check for this pod (Filter is not called)
};

struct PluginStatus {
  Code code = Code::success;
  std::vector<std::string> reasons;   ///< kube-scheduler's reason strings (summary entries)
  std::string detail;                 ///< a longer per-node string (GpuSlice: HAMi's GenReason); else empty
  std::vector<Shortfall> shortfalls;  ///< the numbers behind GPU reasons (asked, best offered), for the summary

  bool ok() const { return code == Code::success || code == Code::skip; }
  static PluginStatus success() { return {}; }
  static PluginStatus skipped() { return PluginStatus{Code::skip, {}, {}, {}}; }
  static PluginStatus fail(std::string reason, Code code = Code::unschedulable) {
    return PluginStatus{code, {std::move(reason)}, {}, {}};
  }
};

/// A plugin's PreFilter/PreScore state, typed by the plugin (read back with CycleState::read<T>).
struct StateData {
  virtual ~StateData() = default;
};

class CycleState {
 public:
  explicit CycleState(size_t slots) : data_(slots), skip_filter_(slots, false), skip_score_(slots, true) {}
  void write(size_t slot, std::unique_ptr<StateData> d) { data_[slot] = std::move(d); }
  template <class T>
  const T* read(size_t slot) const {
    return dynamic_cast<const T*>(data_[slot].get());
  }
  template <class T>
  T* mutable_read(size_t slot) {
    return dynamic_cast<T*>(data_[slot].get());
  }
  bool skip_filter(size_t slot) const { return skip_filter_[slot]; }
  void set_skip_filter(size_t slot, bool v) { skip_filter_[slot] = v; }
  bool skip_score(size_t slot) const { return skip_score_[slot]; }
  void set_skip_score(size_t slot, bool v) { skip_score_[slot] = v; }

 private:
  std::vector<std::unique_ptr<StateData>> data_;
  std::vector<bool> skip_filter_;
  std::vector<bool> skip_score_;
};

/// What every extension point sees: the snapshot, the pod and its facts, the options; `explain` asks Filter for
/// reason strings (false on the hot path, where only yes/no matters).
struct CycleContext {
  const Snapshot& snapshot;
  const PodInfo& pod;
  const PodFacts& facts;
  const ScheduleOptions& options;
  bool explain = false;
};

class Plugin {
 public:
  virtual ~Plugin() = default;
  virtual std::string_view name() const = 0;
  /// Default: Skip (nothing to check).
  virtual PluginStatus pre_filter(const CycleContext& ctx, CycleState& state) const;
  virtual PluginStatus filter(const CycleContext& ctx, const CycleState& state, const NodeState& node) const;
  /// Whether the pod has something this plugin prefers, so that the feasible nodes must be scored at all (cheap:
  /// called before the search, which otherwise stops at the first feasible node).
  virtual bool triggers_scoring(const CycleContext& ctx, const CycleState& state) const;
  /// PreScore over the feasible nodes; false leaves this plugin's score out (kube-scheduler's PreScore Skip).
  virtual bool pre_score(const CycleContext& ctx, CycleState& state,
                         const std::vector<const NodeState*>& feasible) const;
  /// Whether, for a pod with a GPU request, this plugin's score for this pod ranks after the GPU node policy, with the
  /// resource scores, rather than before it with the preferences (PodTopologySpread's system default constraints:
  /// a spreading the pod did not ask for does not undo HAMi's binpack). Default: false.
  virtual bool scores_after_gpu_policy(const CycleContext& ctx, const CycleState& state) const;
  /// A raw score for a feasible node (any range; normalize() maps the feasible nodes' scores to 0..100).
  virtual int64_t score(const CycleContext& ctx, const CycleState& state, const NodeState& node) const;
  /// Default: scores already in 0..100.
  virtual void normalize(const CycleContext& ctx, const CycleState& state, std::vector<int64_t>& scores) const;
  /// Adds this plugin's part of the decision for the chosen node.
  virtual void reserve(const CycleContext& ctx, const CycleState& state, const NodeState& node,
                       Decision& decision) const;

  size_t slot = 0;     ///< index in the profile (its CycleState slot), set by Framework
  int64_t weight = 0;  ///< score weight; 0: not a score plugin (or its score turned off)
  /// A resource-usage score (NodeResourcesFit's LeastAllocated, NodeResourcesBalancedAllocation). For a pod with a
  /// GPU request it ranks nodes only after the GPU node policy (HAMi's binpack/spread stays dominant over cpu and
  /// memory usage); for a pod without one it adds to the other scores, as in kube-scheduler.
  bool resource_score = false;
};

/// Score weights of the default profile (common/config.h: kube-scheduler's defaults, `scheduler.scoreWeights`).
using ScoreWeights = gpuslice::ScoreWeights;

class Framework {
 public:
  explicit Framework(std::vector<std::unique_ptr<Plugin>> plugins);
  /// kube-scheduler's default profile order (filters: NodeUnschedulable, NodeName, TaintToleration,
  /// NodeAffinity, NodePorts, NodeResourcesFit, VolumeRestrictions, NodeVolumeLimits, VolumeBinding, VolumeZone,
  /// PodTopologySpread, InterPodAffinity), DynamicResources, then GpuSlice.
  /// `default_spreading`: PodTopologySpread's system default constraints (scheduler.defaultSpreading).
  static std::unique_ptr<Framework> default_profile(const ScoreWeights& weights = {}, bool default_spreading = true);

  Decision run(const Snapshot& snapshot, const PodInfo& pod, const ScheduleOptions& options) const;

  /// One node alone: PreFilter, every Filter on `node`, then Reserve when it passes (decision.devices are the
  /// cards it would take). kube-scheduler's RunFilterPluginsWithNominatedPods as preemption's dry run calls it
  /// (scheduler/preemption.h); `status` is the first rejection, a PreFilter one included.
  struct NodeCheck {
    PluginStatus status;
    Decision decision;
  };
  NodeCheck check_node(const Snapshot& snapshot, const PodInfo& pod, const ScheduleOptions& options,
                       const NodeState& node) const;

  const std::vector<std::unique_ptr<Plugin>>& plugins() const { return plugins_; }
  const Plugin* find(std::string_view name) const;

 private:
  /// Every plugin's PreFilter in order (a skip marks the plugin's Filter skipped); the first failure, or success.
  PluginStatus pre_filter_all(const CycleContext& ctx, CycleState& state) const;
  /// Every Filter not skipped, in order, on `node`; the first failure, or success.
  PluginStatus filter_all(const CycleContext& ctx, CycleState& state, const NodeState& node) const;

  std::vector<std::unique_ptr<Plugin>> plugins_;
};

/// kube-scheduler's numFeasibleNodesToFind with the adaptive percentageOfNodesToScore (schedule_one.go): all
/// nodes below 100, else max(100, N x max(5, 50 - N/125) / 100). Scoring stops collecting there.
size_t feasible_nodes_to_find(size_t total_nodes);

}  // namespace gpuslice::scheduler::framework
