// TaintToleration: Filter rejects nodes with a NoSchedule/NoExecute taint the pod does not tolerate; Score
// prefers nodes with fewer intolerable PreferNoSchedule taints (reverse-normalised, as upstream). Followed:
// pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go and
// k8s.io/component-helpers/scheduling/corev1/helpers.go (ToleratesTaint).

#include "scheduler/framework/plugins.h"

#include <algorithm>

namespace gpuslice::scheduler::framework {

bool tolerates(const Toleration& t, const Taint& taint) {
  if (!t.effect.empty() && t.effect != taint.effect) {
    return false;
  }
  if (t.key.empty()) {
    return t.op_exists;  // an empty key with Exists tolerates everything
  }
  if (t.key != taint.key) {
    return false;
  }
  return t.op_exists || t.value == taint.value;
}

bool tolerated(const std::vector<Toleration>& tolerations, const Taint& taint) {
  return std::any_of(tolerations.begin(), tolerations.end(), [&](const Toleration& t) { return tolerates(t, taint); });
}

const Taint* untolerated_hard_taint(const std::vector<Toleration>& tolerations, const NodeState& node) {
  for (const Taint& t : node.taints) {
    if ((t.effect == "NoSchedule" || t.effect == "NoExecute") && !tolerated(tolerations, t)) {
      return &t;
    }
  }
  return nullptr;
}

namespace {

class TaintToleration final : public Plugin {
 public:
  explicit TaintToleration(int64_t w) { weight = w; }
  std::string_view name() const override { return names::kTaintToleration; }
  PluginStatus pre_filter(const CycleContext&, CycleState&) const override { return PluginStatus::success(); }
  PluginStatus filter(const CycleContext& ctx, const CycleState&, const NodeState& node) const override {
    const Taint* t = untolerated_hard_taint(ctx.pod.tolerations, node);
    if (t == nullptr) {
      return PluginStatus::success();
    }
    if (!ctx.explain) {
      return PluginStatus{Code::unresolvable, {}, {}};
    }
    return PluginStatus::fail(
        std::string(scheduler::reason::kUntoleratedTaintPrefix) + "{" + t->key + ": " + t->value + "}",
        Code::unresolvable);
  }
  bool triggers_scoring(const CycleContext& ctx, const CycleState&) const override {
    return ctx.snapshot.any_prefer_no_schedule_taint();
  }
  bool pre_score(const CycleContext&, CycleState&, const std::vector<const NodeState*>& feasible) const override {
    for (const NodeState* n : feasible) {
      for (const Taint& t : n->taints) {
        if (t.effect == "PreferNoSchedule") {
          return true;
        }
      }
    }
    return false;
  }
  int64_t score(const CycleContext& ctx, const CycleState&, const NodeState& node) const override {
    int64_t intolerable = 0;
    // Tolerations considered are those with an empty effect or PreferNoSchedule (getAllTolerationPreferNoSchedule).
    for (const Taint& t : node.taints) {
      if (t.effect != "PreferNoSchedule") {
        continue;
      }
      bool ok = std::any_of(ctx.pod.tolerations.begin(), ctx.pod.tolerations.end(), [&](const Toleration& tol) {
        return (tol.effect.empty() || tol.effect == "PreferNoSchedule") && tolerates(tol, t);
      });
      intolerable += ok ? 0 : 1;
    }
    return intolerable;
  }
  void normalize(const CycleContext&, const CycleState&, std::vector<int64_t>& s) const override {
    // DefaultNormalizeScore(MaxNodeScore, reverse=true)
    int64_t mx = 0;
    for (int64_t v : s) {
      mx = std::max(mx, v);
    }
    for (int64_t& v : s) {
      v = mx == 0 ? 100 : 100 - v * 100 / mx;
    }
  }
};

}  // namespace

std::unique_ptr<Plugin> make_taint_toleration(int64_t weight) {
  return std::make_unique<TaintToleration>(weight);
}

}  // namespace gpuslice::scheduler::framework
