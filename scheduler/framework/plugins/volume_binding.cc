// VolumeBinding: every claim of the pod must exist and not be deleting; an unbound claim whose StorageClass binds
// Immediate (or that names no class) rejects the pod; a bound claim's PV must exist and its node affinity match
// the node; an unbound WaitForFirstConsumer claim needs a node inside the class's allowedTopologies, after which
// the caller writes volume.kubernetes.io/selected-node on it (Decision::claims_to_select) and waits for the
// provisioner to bind it. Followed: pkg/scheduler/framework/plugins/volumebinding/volume_binding.go (PreFilter,
// Filter, Reserve, PreBind) and binder.go (GetPodVolumeClaims, checkBoundClaims, checkVolumeProvisions).
//
// Differences, each leaving the pod Pending with a message rather than placing it wrongly: claims of a class
// without a dynamic provisioner (kubernetes.io/no-provisioner, i.e. pre-provisioned local PVs) are not bound to a
// PV by gpuslice; CSIStorageCapacity is not consulted. A dynamic class with a matching pre-provisioned PV gets a
// new volume (kube-scheduler would bind the existing PV).

#include "scheduler/framework/plugins.h"

#include <algorithm>

namespace gpuslice::scheduler::framework {
namespace {

constexpr std::string_view kNoProvisioner = "kubernetes.io/no-provisioner";
constexpr std::string_view kPvNotExist = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";

struct BindingState final : StateData {
  std::vector<const VolumeInfo*> bound;
  bool missing_pv = false;
  std::vector<std::pair<std::string, const StorageClassInfo*>> delayed;  ///< WFFC claim name -> class
};

bool topology_allows(const StorageClassInfo& sc, const NodeState& n) {
  if (sc.allowed_topologies.empty()) {
    return true;
  }
  return std::any_of(sc.allowed_topologies.begin(), sc.allowed_topologies.end(), [&](const auto& term) {
    return std::all_of(term.begin(), term.end(), [&](const TopologySelectorRequirement& r) {
      auto it = n.labels.find(r.key);
      return it != n.labels.end() && std::find(r.values.begin(), r.values.end(), it->second) != r.values.end();
    });
  });
}

class VolumeBinding final : public Plugin {
 public:
  std::string_view name() const override { return names::kVolumeBinding; }
  PluginStatus pre_filter(const CycleContext& ctx, CycleState& state) const override {
    if (ctx.facts.claims.empty()) {
      return PluginStatus::skipped();
    }
    const ClusterObjects& objs = ctx.snapshot.objects();
    auto st = std::make_unique<BindingState>();
    bool immediate_unbound = false;
    for (const std::string& name : ctx.facts.claims) {
      const ClaimInfo* c = objs.find_claim(ctx.pod.ns, name);
      if (c == nullptr) {
        return PluginStatus::fail("persistentvolumeclaim \"" + name + "\" not found", Code::unresolvable);
      }
      if (c->deleting) {
        return PluginStatus::fail("persistentvolumeclaim \"" + name + "\" is being deleted", Code::unresolvable);
      }
      if (!c->volume_name.empty()) {
        const VolumeInfo* pv = objs.find_volume(c->volume_name);
        if (pv == nullptr) {
          st->missing_pv = true;
        } else {
          st->bound.push_back(pv);
        }
        continue;
      }
      const StorageClassInfo* sc = c->storage_class.empty() ? nullptr : objs.find_storage_class(c->storage_class);
      if (sc == nullptr || !sc->wait_for_first_consumer) {
        immediate_unbound = true;
        continue;
      }
      if (sc->provisioner.empty() || sc->provisioner == kNoProvisioner) {
        return PluginStatus::fail("persistentvolumeclaim \"" + name + "\": StorageClass \"" + sc->name +
                                      "\" has no dynamic provisioner; gpuslice does not bind pre-provisioned "
                                      "PersistentVolumes to WaitForFirstConsumer claims",
                                  Code::unresolvable);
      }
      if (!ctx.options.select_volume_nodes) {
        return PluginStatus::fail("persistentvolumeclaim \"" + name +
                                      "\" waits for its first consumer; this gpuslice build does not provision "
                                      "WaitForFirstConsumer volumes",
                                  Code::unresolvable);
      }
      st->delayed.emplace_back(name, sc);
    }
    if (immediate_unbound) {
      return PluginStatus::fail(std::string(reason::kUnboundImmediateClaims), Code::unresolvable);
    }
    state.write(slot, std::move(st));
    return PluginStatus::success();
  }

  PluginStatus filter(const CycleContext&, const CycleState& state, const NodeState& node) const override {
    const BindingState* st = state.read<BindingState>(slot);
    if (st->missing_pv) {
      return PluginStatus::fail(std::string(kPvNotExist), Code::unresolvable);
    }
    for (const VolumeInfo* pv : st->bound) {
      if (!pv->node_affinity.empty() && !node_matches_terms(node, pv->node_affinity)) {
        return PluginStatus::fail(std::string(reason::kVolumeNodeConflict), Code::unresolvable);
      }
    }
    for (const auto& [claim, sc] : st->delayed) {
      if (!topology_allows(*sc, node)) {
        return PluginStatus::fail(std::string(reason::kVolumeBindConflict), Code::unresolvable);
      }
    }
    return PluginStatus::success();
  }

  void reserve(const CycleContext&, const CycleState& state, const NodeState&, Decision& d) const override {
    for (const auto& [claim, sc] : state.read<BindingState>(slot)->delayed) {
      d.claims_to_select.push_back(claim);
    }
  }
};

}  // namespace

std::unique_ptr<Plugin> make_volume_binding() {
  return std::make_unique<VolumeBinding>();
}

}  // namespace gpuslice::scheduler::framework
