// VolumeBinding: every claim of the pod must exist and not be deleting; an unbound claim whose StorageClass binds
// Immediate (or that names no class) rejects the pod; a bound claim's PV must exist and its node affinity match
// the node. An unbound WaitForFirstConsumer claim is, per node, either bound to an existing PV there (a static
// binding: Decision::volumes_to_bind, the caller writes the PV's claimRef and waits for the PV controller) or
// provisioned there (Decision::claims_to_select, the caller writes volume.kubernetes.io/selected-node and waits
// for the provisioner). Followed: pkg/scheduler/framework/plugins/volumebinding/volume_binding.go (PreFilter,
// Filter, Reserve, PreBind) and binder.go (GetPodVolumeClaims, checkBoundClaims, FindPodVolumes,
// findMatchingVolumes, checkVolumeProvisions), component-helpers storage/volume/pv_helpers.go
// (FindMatchingVolume, IsVolumeBoundToClaim, CheckAccessModes, GetBindVolumeToClaim), kubernetes v1.36.3.
//
// FindPodVolumes per node: a claim already carrying selected-node for another node fails the node at once; the
// claims without it, in increasing request order, each take the smallest matching PV not taken by an earlier
// claim of the pod (a PV pre-bound to the claim wins outright, and when its node affinity excludes the node the
// claim has no match there); the rest must be provisionable: a class without a dynamic provisioner
// (kubernetes.io/no-provisioner) or whose allowedTopologies exclude the node fails it, "node(s) didn't find
// available persistent volumes to bind". PVs a decision not yet visible in the API has chosen count as claimed
// (ClusterObjects::assumed_claim_ref, kube-scheduler's assume cache).
//
// Differences, each leaving the pod Pending with a message rather than placing it wrongly: CSIStorageCapacity is
// not consulted; among PVs of equal capacity the first by name is taken (upstream: informer order).

#include "scheduler/framework/plugins.h"

#include <algorithm>

namespace gpuslice::scheduler::framework {
namespace {

constexpr std::string_view kNoProvisioner = "kubernetes.io/no-provisioner";
constexpr std::string_view kPvNotExist = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";

/// One unbound WaitForFirstConsumer claim and the PVs that may take it, narrowed by everything in
/// FindMatchingVolume that does not depend on the node.
struct DelayedClaim {
  const ClaimInfo* claim = nullptr;
  const StorageClassInfo* sc = nullptr;
  std::vector<const VolumeInfo*> pre_bound;   ///< claimRef names this claim; name order
  std::vector<const VolumeInfo*> candidates;  ///< Available, unclaimed, fitting; capacity then name order
};

struct BindingState final : StateData {
  std::vector<const VolumeInfo*> bound;
  bool missing_pv = false;
  std::vector<DelayedClaim> to_match;  ///< no selected-node yet; by increasing request (byPVCSize)
  std::vector<DelayedClaim> selected;  ///< selected-node already set: provisioning only
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

bool dynamic(const StorageClassInfo& sc) {
  return !sc.provisioner.empty() && sc.provisioner != kNoProvisioner;
}

/// CheckNodeAffinity: a PV without required node affinity fits every node.
bool affinity_fits(const VolumeInfo& pv, const NodeState& node) {
  return pv.node_affinity.empty() || node_matches_terms(node, pv.node_affinity);
}

/// FindMatchingVolume's node-independent part for `claim` over the PVs of its class. The claimRef seen is the
/// assumed one when a decision chose the PV, else the API's.
DelayedClaim narrow(const ClusterObjects& objs, const ClaimInfo& claim, const StorageClassInfo& sc) {
  DelayedClaim d;
  d.claim = &claim;
  d.sc = &sc;
  for (const auto& [name, pv] : objs.volumes()) {
    if (pv.storage_class != claim.storage_class) {
      continue;  // pvCache.ListPVs(storageClassName)
    }
    const AssumedClaimRef* a = objs.assumed_claim_ref(name);
    const std::string& ref_ns = a ? a->claim_ns : pv.claim_ns;
    const std::string& ref_name = a ? a->claim_name : pv.claim_name;
    const std::string& ref_uid = a ? a->claim_uid : pv.claim_uid;
    const bool claimed = !ref_name.empty();
    const bool ours = volume_bound_to_claim(ref_ns, ref_name, ref_uid, claim);
    if (claimed && !ours) {
      continue;
    }
    if (pv.capacity_bytes < claim.request_bytes || pv.block != claim.block || pv.deleting) {
      continue;  // capacity, CheckVolumeModeMismatches, DeletionTimestamp
    }
    if (ours) {
      d.pre_bound.push_back(&pv);
      continue;
    }
    if (pv.phase != "Available" || (claim.selector && !claim.selector->matches(pv.labels))) {
      continue;
    }
    if ((claim.access_modes & pv.access_modes) != claim.access_modes) {
      continue;  // CheckAccessModes: every mode the claim asks, the PV offers
    }
    d.candidates.push_back(&pv);
  }
  std::stable_sort(d.candidates.begin(), d.candidates.end(),
                   [](const VolumeInfo* a, const VolumeInfo* b) { return a->capacity_bytes < b->capacity_bytes; });
  return d;
}

/// FindPodVolumes' outcome for the unbound WaitForFirstConsumer claims on one node.
struct NodeVolumes {
  bool ok = true;
  std::vector<std::pair<const DelayedClaim*, const VolumeInfo*>> bindings;
  std::vector<const DelayedClaim*> provisions;
};

NodeVolumes find_pod_volumes(const BindingState& st, const NodeState& node) {
  NodeVolumes out;
  for (const DelayedClaim& d : st.selected) {
    if (d.claim->selected_node != node.name) {
      out.ok = false;  // the fast path: provisioning was already asked on another node
      return out;
    }
    out.provisions.push_back(&d);
  }
  auto taken = [&](const VolumeInfo* pv) {
    return std::any_of(out.bindings.begin(), out.bindings.end(), [&](const auto& b) { return b.second == pv; });
  };
  for (const DelayedClaim& d : st.to_match) {
    const VolumeInfo* match = nullptr;
    auto pre = std::find_if(d.pre_bound.begin(), d.pre_bound.end(), [&](const VolumeInfo* pv) { return !taken(pv); });
    if (pre != d.pre_bound.end()) {
      match = affinity_fits(**pre, node) ? *pre : nullptr;  // pre-bound elsewhere: no match on this node
    } else {
      auto it = std::find_if(d.candidates.begin(), d.candidates.end(),
                             [&](const VolumeInfo* pv) { return !taken(pv) && affinity_fits(*pv, node); });
      match = it == d.candidates.end() ? nullptr : *it;
    }
    if (match != nullptr) {
      out.bindings.emplace_back(&d, match);
    } else {
      out.provisions.push_back(&d);
    }
  }
  for (const DelayedClaim* d : out.provisions) {
    if (!dynamic(*d->sc) || !topology_allows(*d->sc, node)) {
      out.ok = false;  // checkVolumeProvisions
      return out;
    }
  }
  return out;
}

class VolumeBinding final : public Plugin {
 public:
  std::string_view name() const override { return names::kVolumeBinding; }
  PluginStatus pre_filter(const CycleContext& ctx, CycleState& state) const override {
    if (ctx.facts.claims().empty()) {
      return PluginStatus::skipped();
    }
    const ClusterObjects& objs = ctx.snapshot.objects();
    auto st = std::make_unique<BindingState>();
    bool immediate_unbound = false;
    for (const std::string& name : ctx.facts.claims()) {
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
      if (!ctx.options.select_volume_nodes) {
        return PluginStatus::fail("persistentvolumeclaim \"" + name +
                                      "\" waits for its first consumer; this gpuslice build does not bind or "
                                      "provision WaitForFirstConsumer volumes",
                                  Code::unresolvable);
      }
      if (!c->selected_node.empty()) {
        DelayedClaim d;
        d.claim = c;
        d.sc = sc;
        st->selected.push_back(std::move(d));
      } else {
        st->to_match.push_back(narrow(objs, *c, *sc));
      }
    }
    if (immediate_unbound) {
      return PluginStatus::fail(std::string(reason::kUnboundImmediateClaims), Code::unresolvable);
    }
    // byPVCSize: smallest request first, so the smallest claims get the smallest fits (pod order on ties).
    std::stable_sort(st->to_match.begin(), st->to_match.end(), [](const DelayedClaim& a, const DelayedClaim& b) {
      return a.claim->request_bytes < b.claim->request_bytes;
    });
    state.write(slot, std::move(st));
    return PluginStatus::success();
  }

  PluginStatus filter(const CycleContext&, const CycleState& state, const NodeState& node) const override {
    const BindingState* st = state.read<BindingState>(slot);
    if (st->missing_pv) {
      return PluginStatus::fail(std::string(kPvNotExist), Code::unresolvable);
    }
    for (const VolumeInfo* pv : st->bound) {
      if (!affinity_fits(*pv, node)) {
        return PluginStatus::fail(std::string(reason::kVolumeNodeConflict), Code::unresolvable);
      }
    }
    if (!find_pod_volumes(*st, node).ok) {
      return PluginStatus::fail(std::string(reason::kVolumeBindConflict), Code::unresolvable);
    }
    return PluginStatus::success();
  }

  void reserve(const CycleContext&, const CycleState& state, const NodeState& node, Decision& d) const override {
    const NodeVolumes v = find_pod_volumes(*state.read<BindingState>(slot), node);
    for (const auto& [dc, pv] : v.bindings) {
      const ClaimInfo& c = *dc->claim;
      StaticBinding b;
      b.claim = c.name;
      b.claim_uid = c.uid;
      b.claim_resource_version = c.resource_version;
      b.volume = pv->name;
      b.volume_resource_version = pv->resource_version;
      // GetBindVolumeToClaim on the API's PV: nothing to write when its claimRef already names the claim and UID.
      b.pre_bound = volume_bound_to_claim(pv->claim_ns, pv->claim_name, pv->claim_uid, c);
      b.needs_write = !(b.pre_bound && pv->claim_uid == c.uid);
      d.volumes_to_bind.push_back(std::move(b));
    }
    for (const DelayedClaim* dc : v.provisions) {
      d.claims_to_select.push_back(dc->claim->name);
    }
  }
};

}  // namespace

std::unique_ptr<Plugin> make_volume_binding() {
  return std::make_unique<VolumeBinding>();
}

}  // namespace gpuslice::scheduler::framework
