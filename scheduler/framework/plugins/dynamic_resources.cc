// DynamicResources: gpuslice does not allocate DRA ResourceClaims, so a pod with spec.resourceClaims is refused
// at PreFilter (left Pending with a message saying so) instead of being placed with its claims unallocated.
// Upstream counterpart: pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go.

#include "scheduler/framework/plugins.h"

namespace gpuslice::scheduler::framework {
namespace {

class DynamicResources final : public Plugin {
 public:
  std::string_view name() const override { return names::kDynamicResources; }
  PluginStatus pre_filter(const CycleContext& ctx, CycleState&) const override {
    if (!ctx.facts.dynamic_resource_claims) {
      return PluginStatus::skipped();
    }
    return PluginStatus::fail(std::string(reason::kDynamicResources), Code::unresolvable);
  }
};

}  // namespace

std::unique_ptr<Plugin> make_dynamic_resources() {
  return std::make_unique<DynamicResources>();
}

}  // namespace gpuslice::scheduler::framework
