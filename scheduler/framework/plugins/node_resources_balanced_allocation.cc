// NodeResourcesBalancedAllocation (score only): prefers the node where cpu and memory would be used most evenly,
// (1 - std) x 100 over the fractions requested/allocatable (each capped at 1, resources with no allocatable left
// out; for two resources std = |f1 - f2| / 2), with the node's and the pod's actual requests (not the non-zero
// ones). A pod requesting neither cpu nor memory (best effort) is not scored (PreScore Skip, kubernetes #129138).
// For a GPU pod the framework ranks it after HAMi's node policy (Plugin::resource_score, docs/scheduling.md).
// Followed: pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go (PreScore, balancedResourceScorer)
// and resource_allocation.go (useRequested, isBestEffortPod).

#include "scheduler/framework/plugins.h"

#include <algorithm>
#include <cmath>

namespace gpuslice::scheduler::framework {
namespace {

class NodeResourcesBalancedAllocation final : public Plugin {
 public:
  explicit NodeResourcesBalancedAllocation(int64_t w) {
    weight = w;
    resource_score = true;
  }
  std::string_view name() const override { return names::kNodeResourcesBalancedAllocation; }
  bool pre_score(const CycleContext& ctx, CycleState&, const std::vector<const NodeState*>&) const override {
    return ctx.pod.requests.cpu_milli != 0 || ctx.pod.requests.memory_bytes != 0;
  }
  int64_t score(const CycleContext& ctx, const CycleState&, const NodeState& n) const override {
    double fractions[2];
    size_t count = 0;
    auto add = [&](int64_t requested, int64_t allocatable) {
      if (allocatable <= 0) {
        return;
      }
      fractions[count++] = std::min(1.0, static_cast<double>(requested) / static_cast<double>(allocatable));
    };
    add(n.requested.cpu_milli + ctx.pod.requests.cpu_milli, n.allocatable.cpu_milli);
    add(n.requested.memory_bytes + ctx.pod.requests.memory_bytes, n.allocatable.memory_bytes);
    const double std_dev = count == 2 ? std::abs(fractions[0] - fractions[1]) / 2 : 0.0;
    return static_cast<int64_t>((1 - std_dev) * 100);
  }
};

}  // namespace

std::unique_ptr<Plugin> make_node_resources_balanced_allocation(int64_t weight) {
  return std::make_unique<NodeResourcesBalancedAllocation>(weight);
}

}  // namespace gpuslice::scheduler::framework
