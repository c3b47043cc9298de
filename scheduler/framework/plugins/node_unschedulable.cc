// NodeUnschedulable: a node with spec.unschedulable takes only pods tolerating node.kubernetes.io/unschedulable
// (NoSchedule). Followed: pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go.

#include "scheduler/framework/plugins.h"

namespace gpuslice::scheduler::framework {
namespace {

class NodeUnschedulable final : public Plugin {
 public:
  std::string_view name() const override { return names::kNodeUnschedulable; }
  PluginStatus pre_filter(const CycleContext&, CycleState&) const override { return PluginStatus::success(); }
  PluginStatus filter(const CycleContext& ctx, const CycleState&, const NodeState& node) const override {
    if (node.unschedulable &&
        !tolerated(ctx.pod.tolerations, Taint{"node.kubernetes.io/unschedulable", "", "NoSchedule"})) {
      return PluginStatus::fail(std::string(scheduler::reason::kNodeUnschedulable), Code::unresolvable);
    }
    return PluginStatus::success();
  }
};

}  // namespace

std::unique_ptr<Plugin> make_node_unschedulable() {
  return std::make_unique<NodeUnschedulable>();
}

}  // namespace gpuslice::scheduler::framework
