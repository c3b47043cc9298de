// PodTopologySpread: DoNotSchedule constraints filter (maxSkew, minDomains, nodeAffinityPolicy, nodeTaintsPolicy,
// matchLabelKeys merged into the selector by pod_facts); ScheduleAnyway constraints score. Counting: pods of the
// pod's namespace, not terminating, matching the selector, on nodes that carry every constraint's topology key
// and pass the constraint's inclusion policies.
// Followed: pkg/scheduler/framework/plugins/podtopologyspread/filtering.go (calPreFilterState, Filter,
// minMatchNum), scoring.go (PreScore, Score with scoreForCount and topology weights, NormalizeScore), common.go.
// Not applied: the cluster-level default constraints (kube-scheduler derives their selector from the Services,
// ReplicaSets and StatefulSets owning the pod, which gpuslice does not watch).

#include "scheduler/framework/plugins.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace gpuslice::scheduler::framework {
namespace {

struct SpreadState final : StateData {
  std::vector<const SpreadConstraint*> hard;
  std::vector<std::map<std::string, int64_t, std::less<>>> counts;  ///< per hard constraint: domain -> pods
  std::vector<int64_t> min_match;                                   ///< per hard constraint
  // Score
  std::vector<const SpreadConstraint*> soft;
  std::vector<std::map<std::string, int64_t, std::less<>>> soft_counts;
  std::vector<double> soft_weight;
};

bool has_all_keys(const NodeState& n, const std::vector<const SpreadConstraint*>& cs) {
  return std::all_of(cs.begin(), cs.end(), [&](const SpreadConstraint* c) { return n.labels.count(c->topology_key); });
}

bool included(const SpreadConstraint& c, const PodInfo& pod, const NodeState& n) {
  if (c.honor_node_affinity && !pod_matches_node_affinity(pod, n)) {
    return false;
  }
  if (c.honor_node_taints && untolerated_hard_taint(pod.tolerations, n) != nullptr) {
    return false;
  }
  return true;
}

int64_t count_on(const Snapshot& snap, const NodeState& n, const SpreadConstraint& c, std::string_view ns) {
  int64_t k = 0;
  snap.for_each_pod_on(n.name, [&](const PodRecord& rec) {
    if (rec.ns == ns && !rec.facts->terminating && c.selector.matches(rec.facts->labels)) {
      ++k;
    }
  });
  return k;
}

void count_domains(const CycleContext& ctx, const std::vector<const SpreadConstraint*>& cs,
                   std::vector<std::map<std::string, int64_t, std::less<>>>& counts) {
  counts.assign(cs.size(), {});
  const Snapshot& snap = ctx.snapshot;
  if (ctx.options.use_pod_index) {
    // The eligible domains (each eligible node's value, even with no matching pod), then the matching pods taken
    // from the pod index (the selector's labels in the pod's namespace), counted where they run: the same counts
    // as walking every node's pods below, at O(nodes + pods that may match).
    snap.for_each_node([&](const NodeState& n) {
      if (!has_all_keys(n, cs)) {
        return;
      }
      for (size_t i = 0; i < cs.size(); ++i) {
        if (included(*cs[i], ctx.pod, n)) {
          counts[i].try_emplace(n.labels.find(cs[i]->topology_key)->second, 0);
        }
      }
    });
    const std::vector<std::string> ns{ctx.pod.ns};
    for (size_t i = 0; i < cs.size(); ++i) {
      const SpreadConstraint& c = *cs[i];
      snap.for_each_pod_maybe_matching({Snapshot::PodQuery{&c.selector, &ns}}, true, [&](const PodRecord& rec) {
        if (rec.ns != ctx.pod.ns || rec.facts->terminating || !c.selector.matches(rec.facts->labels)) {
          return;
        }
        const NodeState* n = snap.find_node(rec.node);
        if (n == nullptr || !has_all_keys(*n, cs) || !included(c, ctx.pod, *n)) {
          return;
        }
        ++counts[i][n->labels.find(c.topology_key)->second];
      });
    }
    return;
  }
  snap.for_each_node([&](const NodeState& n) {
    if (!has_all_keys(n, cs)) {
      return;
    }
    for (size_t i = 0; i < cs.size(); ++i) {
      if (!included(*cs[i], ctx.pod, n)) {
        continue;
      }
      counts[i][n.labels.find(cs[i]->topology_key)->second] += count_on(ctx.snapshot, n, *cs[i], ctx.pod.ns);
    }
  });
}

class PodTopologySpread final : public Plugin {
 public:
  explicit PodTopologySpread(int64_t w) { weight = w; }
  std::string_view name() const override { return names::kPodTopologySpread; }

  PluginStatus pre_filter(const CycleContext& ctx, CycleState& state) const override {
    auto st = std::make_unique<SpreadState>();
    for (const SpreadConstraint& c : ctx.facts.spread) {
      (c.hard ? st->hard : st->soft).push_back(&c);
    }
    if (st->hard.empty()) {
      state.write(slot, std::move(st));
      return PluginStatus::skipped();
    }
    count_domains(ctx, st->hard, st->counts);
    for (size_t i = 0; i < st->hard.size(); ++i) {
      int64_t mn = std::numeric_limits<int32_t>::max();
      for (const auto& [v, k] : st->counts[i]) {
        mn = std::min(mn, k);
      }
      if (st->hard[i]->min_domains && static_cast<int64_t>(st->counts[i].size()) < *st->hard[i]->min_domains) {
        mn = 0;  // fewer eligible domains than minDomains: the global minimum is taken as 0
      }
      st->min_match.push_back(mn);
    }
    state.write(slot, std::move(st));
    return PluginStatus::success();
  }

  PluginStatus filter(const CycleContext& ctx, const CycleState& state, const NodeState& node) const override {
    const SpreadState* st = state.read<SpreadState>(slot);
    for (size_t i = 0; i < st->hard.size(); ++i) {
      const SpreadConstraint& c = *st->hard[i];
      auto lv = node.labels.find(c.topology_key);
      if (lv == node.labels.end()) {
        return PluginStatus::fail(std::string(reason::kSpreadMissingLabel), Code::unresolvable);
      }
      const int64_t self = c.selector.matches(ctx.facts.labels) ? 1 : 0;
      auto it = st->counts[i].find(lv->second);
      const int64_t match = it == st->counts[i].end() ? 0 : it->second;
      if (match + self - st->min_match[i] > c.max_skew) {
        return PluginStatus::fail(std::string(reason::kSpreadConstraintsNotMatch));
      }
    }
    return PluginStatus::success();
  }

  bool triggers_scoring(const CycleContext& ctx, const CycleState&) const override {
    return std::any_of(ctx.facts.spread.begin(), ctx.facts.spread.end(),
                       [](const SpreadConstraint& c) { return !c.hard; });
  }

  bool pre_score(const CycleContext& ctx, CycleState& state, const std::vector<const NodeState*>&) const override {
    SpreadState* st = state.mutable_read<SpreadState>(slot);
    if (st == nullptr || st->soft.empty()) {
      return false;
    }
    count_domains(ctx, st->soft, st->soft_counts);
    for (size_t i = 0; i < st->soft.size(); ++i) {
      // Hostname domains are as many as the nodes; upstream weighs each constraint by log(domains + 2).
      st->soft_weight.push_back(std::log(static_cast<double>(st->soft_counts[i].size()) + 2));
    }
    return true;
  }

  int64_t score(const CycleContext&, const CycleState& state, const NodeState& node) const override {
    const SpreadState* st = state.read<SpreadState>(slot);
    if (!has_all_keys(node, st->soft)) {
      return -1;  // ignored node: normalised to 0
    }
    double s = 0;
    for (size_t i = 0; i < st->soft.size(); ++i) {
      auto it = st->soft_counts[i].find(node.labels.find(st->soft[i]->topology_key)->second);
      const int64_t cnt = it == st->soft_counts[i].end() ? 0 : it->second;
      s += static_cast<double>(cnt) * st->soft_weight[i] + static_cast<double>(st->soft[i]->max_skew - 1);
    }
    return static_cast<int64_t>(std::llround(s));
  }

  void normalize(const CycleContext&, const CycleState&, std::vector<int64_t>& s) const override {
    int64_t mn = std::numeric_limits<int64_t>::max();
    int64_t mx = 0;
    for (int64_t v : s) {
      if (v < 0) {
        continue;
      }
      mn = std::min(mn, v);
      mx = std::max(mx, v);
    }
    for (int64_t& v : s) {
      if (v < 0) {
        v = 0;
      } else if (mx == 0) {
        v = 100;
      } else {
        v = 100 * (mx + mn - v) / mx;
      }
    }
  }
};

}  // namespace

std::unique_ptr<Plugin> make_pod_topology_spread(int64_t weight) {
  return std::make_unique<PodTopologySpread>(weight);
}

}  // namespace gpuslice::scheduler::framework
