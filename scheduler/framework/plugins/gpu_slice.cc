// GpuSlice: HAMi's device fit (scheduler/schedule.cc: registration, then NvidiaGPUDevices.Fit per container,
// hami-protocol.md §6-10) as the last filter; Reserve records the cards picked on the chosen node. Its node
// preference is the candidate order itself (binpack: highest HAMi node score first, spread: lowest), which the
// framework uses to break score ties, so HAMi's policy decides among otherwise equal nodes.

#include "scheduler/framework/plugins.h"

namespace gpuslice::scheduler::framework {
namespace {

class GpuSlice final : public Plugin {
 public:
  std::string_view name() const override { return names::kGpuSlice; }
  PluginStatus pre_filter(const CycleContext&, CycleState&) const override { return PluginStatus::success(); }
  PluginStatus filter(const CycleContext& ctx, const CycleState&, const NodeState& node) const override {
    GpuFit f = gpu_fit(ctx.snapshot, node, ctx.pod, ctx.options, ctx.explain);
    if (f.fits) {
      return PluginStatus::success();
    }
    return PluginStatus{Code::unschedulable, std::move(f.reasons), std::move(f.detail), std::move(f.shortfalls)};
  }
  void reserve(const CycleContext& ctx, const CycleState&, const NodeState& node, Decision& d) const override {
    GpuFit f = gpu_fit(ctx.snapshot, node, ctx.pod, ctx.options, false);
    d.devices = std::move(f.devices);
    if (d.devices.empty()) {
      d.devices.resize(ctx.pod.gpu.containers.size());
    }
  }
};

}  // namespace

std::unique_ptr<Plugin> make_gpu_slice() {
  return std::make_unique<GpuSlice>();
}

}  // namespace gpuslice::scheduler::framework
