// VolumeZone: a bound PV's zone/region labels (values may be "a__b" sets) must match the node's, when the node
// carries any zone/region label at all. Followed: pkg/scheduler/framework/plugins/volumezone/volume_zone.go.

#include "scheduler/framework/plugins.h"

#include "scheduler/text.h"

#include <algorithm>

namespace gpuslice::scheduler::framework {
namespace {

constexpr std::string_view kTopologyLabels[] = {"topology.kubernetes.io/zone", "topology.kubernetes.io/region",
                                                "failure-domain.beta.kubernetes.io/zone",
                                                "failure-domain.beta.kubernetes.io/region"};

std::string_view ga_label(std::string_view beta) {
  if (beta == "failure-domain.beta.kubernetes.io/zone") {
    return "topology.kubernetes.io/zone";
  }
  if (beta == "failure-domain.beta.kubernetes.io/region") {
    return "topology.kubernetes.io/region";
  }
  return beta;
}

struct ZoneState final : StateData {
  std::vector<std::pair<std::string, std::vector<std::string>>> topologies;  ///< key -> allowed values
};

class VolumeZone final : public Plugin {
 public:
  std::string_view name() const override { return names::kVolumeZone; }
  PluginStatus pre_filter(const CycleContext& ctx, CycleState& state) const override {
    auto st = std::make_unique<ZoneState>();
    const ClusterObjects& objs = ctx.snapshot.objects();
    for (const std::string& c : ctx.facts.claims()) {
      const ClaimInfo* claim = objs.find_claim(ctx.pod.ns, c);
      const VolumeInfo* pv = claim && !claim->volume_name.empty() ? objs.find_volume(claim->volume_name) : nullptr;
      if (pv == nullptr) {
        continue;  // unbound or missing: VolumeBinding's concern
      }
      for (const auto& [k, v] : pv->zone_labels) {
        std::vector<std::string> values;
        for (std::string_view part : detail::split(v, '_')) {
          if (!part.empty()) {
            values.emplace_back(part);  // "a__b": the empty field between the two underscores is dropped
          }
        }
        st->topologies.emplace_back(k, std::move(values));
      }
    }
    if (st->topologies.empty()) {
      return PluginStatus::skipped();
    }
    state.write(slot, std::move(st));
    return PluginStatus::success();
  }
  PluginStatus filter(const CycleContext&, const CycleState& state, const NodeState& node) const override {
    const bool constrained = std::any_of(std::begin(kTopologyLabels), std::end(kTopologyLabels),
                                         [&](std::string_view k) { return node.labels.count(k) != 0; });
    if (!constrained) {
      return PluginStatus::success();
    }
    for (const auto& [key, values] : state.read<ZoneState>(slot)->topologies) {
      auto it = node.labels.find(key);
      if (it == node.labels.end()) {
        it = node.labels.find(ga_label(key));
      }
      if (it == node.labels.end() || std::find(values.begin(), values.end(), it->second) == values.end()) {
        return PluginStatus::fail(std::string(reason::kVolumeZoneConflict), Code::unresolvable);
      }
    }
    return PluginStatus::success();
  }
};

}  // namespace

std::unique_ptr<Plugin> make_volume_zone() {
  return std::make_unique<VolumeZone>();
}

}  // namespace gpuslice::scheduler::framework
