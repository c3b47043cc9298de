// NodeResourcesFit: cpu, memory, ephemeral-storage and the pod count against the node's allocatable, with the
// pod's effective request (scheduler/pod_info.h). Every insufficient resource is a reason of its own. GPU
// resources are the GpuSlice plugin's. Followed: pkg/scheduler/framework/plugins/noderesources/fit.go
// (fitsRequest). Scoring (LeastAllocated) is left out on purpose: it would fight HAMi's binpack node policy,
// which stays the GPU pods' node preference (docs/scheduling.md).

#include "scheduler/framework/plugins.h"

#include <algorithm>

namespace gpuslice::scheduler::framework {
namespace {

class NodeResourcesFit final : public Plugin {
 public:
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
};

}  // namespace

std::unique_ptr<Plugin> make_node_resources_fit() {
  return std::make_unique<NodeResourcesFit>();
}

}  // namespace gpuslice::scheduler::framework
