// NodeResourcesFit: cpu, memory, ephemeral-storage and the pod count against the node's allocatable, with the
// pod's effective request (scheduler/pod_info.h). Every insufficient resource is a reason of its own. GPU
// resources are the GpuSlice plugin's. Score: kube-scheduler's default strategy LeastAllocated over cpu and memory,
// weight 1 each: per resource (allocatable - requested) x 100 / allocatable with the node's and the pod's non-zero
// requests (a container naming no request counts 100m / 200 MiB), 0 when over allocatable, resources with no
// allocatable left out; the weighted mean. For a GPU pod the framework ranks it after HAMi's node policy
// (Plugin::resource_score, docs/scheduling.md), so binpack still packs.
// Followed: pkg/scheduler/framework/plugins/noderesources/fit.go (fitsRequest, Score), least_allocated.go
// (leastResourceScorer, leastRequestedScore), resource_allocation.go (score, calculateResourceAllocatableRequest).

#include "scheduler/framework/plugins.h"

#include <algorithm>

namespace gpuslice::scheduler::framework {
namespace {

/// leastRequestedScore: the unused share of `capacity` on 0..100.
int64_t least_requested(int64_t requested, int64_t capacity) {
  if (capacity <= 0 || requested > capacity) {
    return 0;
  }
  return (capacity - requested) * 100 / capacity;
}

class NodeResourcesFit final : public Plugin {
 public:
  explicit NodeResourcesFit(int64_t w) {
    weight = w;
    resource_score = true;
  }
  std::string_view name() const override { return names::kNodeResourcesFit; }
  PluginStatus pre_filter(const CycleContext&, CycleState&) const override { return PluginStatus::success(); }
  PluginStatus filter(const CycleContext& ctx, const CycleState&, const NodeState& n) const override {
    PluginStatus st;
    const ResourceRequests& r = ctx.pod.requests;
    auto add = [&](std::string_view reason) {
      st.code = Code::unschedulable;
      if (ctx.explain) {
        st.reasons.emplace_back(reason);
      }
    };
    if (n.pod_count + 1 > n.allocatable_pods) {
      add(scheduler::reason::kTooManyPods);
    }
    if (r.cpu_milli > 0 && n.requested.cpu_milli + r.cpu_milli > n.allocatable.cpu_milli) {
      add(scheduler::reason::kInsufficientCpu);
    }
    if (r.memory_bytes > 0 && n.requested.memory_bytes + r.memory_bytes > n.allocatable.memory_bytes) {
      add(scheduler::reason::kInsufficientMemory);
    }
    if (r.ephemeral_bytes > 0 && n.requested.ephemeral_bytes + r.ephemeral_bytes > n.allocatable.ephemeral_bytes) {
      add(scheduler::reason::kInsufficientEphemeral);
    }
    std::sort(st.reasons.begin(), st.reasons.end());
    return st;
  }
  bool pre_score(const CycleContext&, CycleState&, const std::vector<const NodeState*>&) const override { return true; }
  int64_t score(const CycleContext& ctx, const CycleState&, const NodeState& n) const override {
    int64_t sum = 0;
    int64_t weights = 0;
    auto add = [&](int64_t node_requested, int64_t pod_request, int64_t allocatable) {
      if (allocatable <= 0) {
        return;  // resource_allocation.go: a resource the node does not offer is left out
      }
      sum += least_requested(node_requested + pod_request, allocatable);  // weight 1 (cpu and memory)
      weights += 1;
    };
    add(n.nonzero_requested.cpu_milli, ctx.facts.nonzero_cpu_milli, n.allocatable.cpu_milli);
    add(n.nonzero_requested.memory_bytes, ctx.facts.nonzero_memory_bytes, n.allocatable.memory_bytes);
    return weights == 0 ? 0 : sum / weights;
  }
};

}  // namespace

std::unique_ptr<Plugin> make_node_resources_fit(int64_t weight) {
  return std::make_unique<NodeResourcesFit>(weight);
}

}  // namespace gpuslice::scheduler::framework
