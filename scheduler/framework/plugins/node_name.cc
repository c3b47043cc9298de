// NodeName: a pod naming spec.nodeName fits only that node. Followed:
// pkg/scheduler/framework/plugins/nodename/node_name.go. (Pods already carrying spec.nodeName never reach the
// loop's queue; the plugin keeps `simulate` and direct callers honest.)

#include "scheduler/framework/plugins.h"

namespace gpuslice::scheduler::framework {
namespace {

class NodeName final : public Plugin {
 public:
  std::string_view name() const override { return names::kNodeName; }
  PluginStatus pre_filter(const CycleContext& ctx, CycleState&) const override {
    return ctx.facts.node_name.empty() ? PluginStatus::skipped() : PluginStatus::success();
  }
  PluginStatus filter(const CycleContext& ctx, const CycleState&, const NodeState& node) const override {
    if (ctx.facts.node_name != node.name) {
      return PluginStatus::fail(std::string(reason::kNodeNameMismatch), Code::unresolvable);
    }
    return PluginStatus::success();
  }
};

}  // namespace

std::unique_ptr<Plugin> make_node_name() {
  return std::make_unique<NodeName>();
}

}  // namespace gpuslice::scheduler::framework
