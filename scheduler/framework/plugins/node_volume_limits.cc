// NodeVolumeLimits (CSI): the pod's new CSI volumes plus the distinct ones already attached by pods on the node
// must stay within the CSINode's allocatable.count per driver. A claim counts by its bound PV's driver and
// volume handle, an unbound claim by its StorageClass's provisioner (a volume to be created), an inline CSI
// volume by its driver. Nodes without a CSINode, or drivers without a count, have no limit. Followed:
// pkg/scheduler/framework/plugins/nodevolumelimits/csi.go (filterAttachableVolumes, Filter).

#include "scheduler/framework/plugins.h"

#include <map>
#include <set>

namespace gpuslice::scheduler::framework {
namespace {

using Volumes = std::map<std::string, std::set<std::string>, std::less<>>;  ///< driver -> volume ids

void attachable(const ClusterObjects& objs, std::string_view ns, std::string_view pod, const PodFacts& f,
                Volumes& out) {
  for (const std::string& c : f.claims()) {
    const ClaimInfo* claim = objs.find_claim(ns, c);
    if (claim == nullptr) {
      continue;
    }
    if (!claim->volume_name.empty()) {
      const VolumeInfo* pv = objs.find_volume(claim->volume_name);
      if (pv != nullptr && !pv->csi_driver.empty()) {
        out[pv->csi_driver].insert(pv->csi_driver + "/" + pv->csi_handle);
      }
      continue;
    }
    const StorageClassInfo* sc = objs.find_storage_class(claim->storage_class);
    if (sc != nullptr && !sc->provisioner.empty()) {
      out[sc->provisioner].insert(std::string(ns) + "/" + c);
    }
  }
  for (size_t i = 0; i < f.inline_csi_drivers().size(); ++i) {
    out[f.inline_csi_drivers()[i]].insert(std::string(ns) + "/" + std::string(pod) + "/inline-" + std::to_string(i));
  }
}

struct LimitsState final : StateData {
  Volumes wanted;
};

class NodeVolumeLimits final : public Plugin {
 public:
  std::string_view name() const override { return names::kNodeVolumeLimits; }
  PluginStatus pre_filter(const CycleContext& ctx, CycleState& state) const override {
    auto st = std::make_unique<LimitsState>();
    attachable(ctx.snapshot.objects(), ctx.pod.ns, ctx.pod.name, ctx.facts, st->wanted);
    if (st->wanted.empty()) {
      return PluginStatus::skipped();
    }
    state.write(slot, std::move(st));
    return PluginStatus::success();
  }
  PluginStatus filter(const CycleContext& ctx, const CycleState& state, const NodeState& node) const override {
    const auto* limits = ctx.snapshot.objects().csi_limits(node.name);
    if (limits == nullptr) {
      return PluginStatus::success();
    }
    const LimitsState* st = state.read<LimitsState>(slot);
    Volumes attached;
    ctx.snapshot.for_each_pod_on(node.name, [&](const PodRecord& rec) {
      attachable(ctx.snapshot.objects(), rec.ns, rec.name, *rec.facts, attached);
    });
    for (const auto& [driver, want] : st->wanted) {
      auto lim = limits->find(driver);
      if (lim == limits->end()) {
        continue;
      }
      const std::set<std::string>& have = attached[driver];
      size_t fresh = 0;
      for (const std::string& v : want) {
        fresh += have.count(v) ? 0 : 1;
      }
      if (static_cast<int64_t>(have.size() + fresh) > lim->second) {
        return PluginStatus::fail(std::string(reason::kMaxVolumeCount));
      }
    }
    return PluginStatus::success();
  }
};

}  // namespace

std::unique_ptr<Plugin> make_node_volume_limits() {
  return std::make_unique<NodeVolumeLimits>();
}

}  // namespace gpuslice::scheduler::framework
