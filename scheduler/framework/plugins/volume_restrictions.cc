// VolumeRestrictions: a ReadWriteOncePod claim already used by another pod rejects the pod at PreFilter; on a
// node, the same GCE PD / iSCSI IQN (unless every mount is read-only), AWS EBS volume or RBD image (overlapping
// monitors) as a pod already there is a conflict. Followed:
// pkg/scheduler/framework/plugins/volumerestrictions/volume_restrictions.go (isVolumeConflict, PreFilter RWOP).

#include "scheduler/framework/plugins.h"

#include <algorithm>

namespace gpuslice::scheduler::framework {
namespace {

bool conflict(const DiskVolume& a, const DiskVolume& b) {
  if (a.kind != b.kind || a.id != b.id) {
    return false;
  }
  if (a.kind == "aws") {
    return true;
  }
  if (a.kind == "rbd") {
    const bool overlap = std::any_of(a.monitors.begin(), a.monitors.end(), [&](const std::string& m) {
      return std::find(b.monitors.begin(), b.monitors.end(), m) != b.monitors.end();
    });
    return overlap && !(a.read_only && b.read_only);
  }
  return !(a.read_only && b.read_only);  // gce, iscsi
}

class VolumeRestrictions final : public Plugin {
 public:
  std::string_view name() const override { return names::kVolumeRestrictions; }
  PluginStatus pre_filter(const CycleContext& ctx, CycleState&) const override {
    const PodFacts& f = ctx.facts;
    if (f.disks().empty() && f.claims().empty()) {
      return PluginStatus::skipped();
    }
    std::vector<const std::string*> rwop;
    for (const std::string& c : f.claims()) {
      const ClaimInfo* claim = ctx.snapshot.objects().find_claim(ctx.pod.ns, c);
      if (claim != nullptr && (claim->access_modes & kReadWriteOncePod) != 0) {
        rwop.push_back(&c);
      }
    }
    if (!rwop.empty()) {
      bool used = false;
      ctx.snapshot.for_each_pod([&](const PodRecord& rec) {
        if (used || rec.ns != ctx.pod.ns || (rec.ns == ctx.pod.ns && rec.name == ctx.pod.name)) {
          return;
        }
        for (const std::string* c : rwop) {
          if (std::find(rec.facts->claims().begin(), rec.facts->claims().end(), *c) != rec.facts->claims().end()) {
            used = true;
          }
        }
      });
      if (used) {
        return PluginStatus::fail(std::string(reason::kReadWriteOncePodConflict), Code::unresolvable);
      }
    }
    return f.disks().empty() ? PluginStatus::skipped() : PluginStatus::success();
  }
  PluginStatus filter(const CycleContext& ctx, const CycleState&, const NodeState& node) const override {
    bool clash = false;
    ctx.snapshot.for_each_pod_on(node.name, [&](const PodRecord& rec) {
      for (const DiskVolume& have : rec.facts->disks()) {
        for (const DiskVolume& want : ctx.facts.disks()) {
          clash = clash || conflict(want, have);
        }
      }
    });
    return clash ? PluginStatus::fail(std::string(reason::kDiskConflict)) : PluginStatus::success();
  }
};

}  // namespace

std::unique_ptr<Plugin> make_volume_restrictions() {
  return std::make_unique<VolumeRestrictions>();
}

}  // namespace gpuslice::scheduler::framework
