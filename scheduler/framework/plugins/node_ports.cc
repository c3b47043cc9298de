// NodePorts: a node fits when none of the pod's host ports (hostPort > 0 of its app containers) is in use there
// by any pod counted on it, GPU or not. Conflict as HostPortInfo.CheckConflict: same protocol (default TCP) and
// port, and the same hostIP or either side 0.0.0.0 (the default, meaning every address). Followed:
// pkg/scheduler/framework/plugins/nodeports/node_ports.go, pkg/scheduler/framework/types.go (HostPortInfo).

#include "scheduler/framework/plugins.h"

namespace gpuslice::scheduler::framework {

bool host_ports_conflict(const HostPort& a, const HostPort& b) {
  if (a.port != b.port || a.protocol != b.protocol) {
    return false;
  }
  return a.ip == b.ip || a.ip == "0.0.0.0" || b.ip == "0.0.0.0";
}

namespace {

class NodePorts final : public Plugin {
 public:
  std::string_view name() const override { return names::kNodePorts; }
  PluginStatus pre_filter(const CycleContext& ctx, CycleState&) const override {
    return ctx.facts.host_ports().empty() ? PluginStatus::skipped() : PluginStatus::success();
  }
  PluginStatus filter(const CycleContext& ctx, const CycleState&, const NodeState& node) const override {
    bool clash = false;
    ctx.snapshot.for_each_pod_on(node.name, [&](const PodRecord& rec) {
      if (clash) {
        return;
      }
      for (const HostPort& used : rec.facts->host_ports()) {
        for (const HostPort& want : ctx.facts.host_ports()) {
          if (host_ports_conflict(want, used)) {
            clash = true;
            return;
          }
        }
      }
    });
    if (clash) {
      return PluginStatus::fail(std::string(reason::kNodePorts));
    }
    return PluginStatus::success();
  }
};

}  // namespace

std::unique_ptr<Plugin> make_node_ports() {
  return std::make_unique<NodePorts>();
}

}  // namespace gpuslice::scheduler::framework
