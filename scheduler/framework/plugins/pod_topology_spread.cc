// PodTopologySpread: DoNotSchedule constraints filter (maxSkew, minDomains, nodeAffinityPolicy, nodeTaintsPolicy,
// matchLabelKeys merged into the selector by pod_facts); ScheduleAnyway constraints score. Counting: pods of the
// pod's namespace, not terminating, matching the selector, on nodes that carry every constraint's topology key
// and pass the constraint's inclusion policies.
// Followed: pkg/scheduler/framework/plugins/podtopologyspread/filtering.go (calPreFilterState, Filter,
// minMatchNum), scoring.go (PreScore, Score with scoreForCount and topology weights, NormalizeScore), common.go.
// Default spreading (plugin.go, common.go buildDefaultConstraints; apis/config/v1 systemDefaultConstraints): a pod
// with no topologySpreadConstraints of its own scores with {maxSkew 3, kubernetes.io/hostname} and {maxSkew 5,
// topology.kubernetes.io/zone}, both ScheduleAnyway, over the selector DefaultSelector builds from the Services,
// ReplicationControllers, ReplicaSets and StatefulSets of the pod (spread_sources.h); none when that selector is
// empty. With these system defaults a node need not carry both keys (scoring.go requireAllTopologies): a node
// without a zone label is still scored for its hostname. For a pod with a GPU request the default score ranks
// after the GPU node policy, with the resource scores (Plugin::scores_after_gpu_policy, docs/scheduling.md).

#include "scheduler/framework/plugins.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string_view>

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
  // The system default constraints, when the pod has none of its own and DefaultSelector is not empty.
  std::vector<SpreadConstraint> defaults;
  bool defaulted = false;
};

inline constexpr std::string_view kHostnameLabel = "kubernetes.io/hostname";
inline constexpr std::string_view kZoneLabel = "topology.kubernetes.io/zone";

bool has_all_keys(const NodeState& n, const std::vector<const SpreadConstraint*>& cs) {
  return std::all_of(cs.begin(), cs.end(), [&](const SpreadConstraint* c) { return n.labels.count(c->topology_key); });
}

/// Whether `n` counts for constraint `i`: with the pod's own constraints the node must carry every key; with the
/// system defaults only the constraint's own.
bool has_keys(const NodeState& n, const std::vector<const SpreadConstraint*>& cs, size_t i, bool require_all) {
  return require_all ? has_all_keys(n, cs) : n.labels.count(cs[i]->topology_key) != 0;
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
                   std::vector<std::map<std::string, int64_t, std::less<>>>& counts, bool require_all = true) {
  counts.assign(cs.size(), {});
  const Snapshot& snap = ctx.snapshot;
  if (ctx.options.use_pod_index) {
    // The eligible domains (each eligible node's value, even with no matching pod), then the matching pods taken
    // from the pod index (the selector's labels in the pod's namespace), counted where they run: the same counts
    // as walking every node's pods below, at O(nodes + pods that may match).
    snap.for_each_node([&](const NodeState& n) {
      if (require_all && !has_all_keys(n, cs)) {
        return;
      }
      for (size_t i = 0; i < cs.size(); ++i) {
        if (n.labels.count(cs[i]->topology_key) != 0 && included(*cs[i], ctx.pod, n)) {
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
        if (n == nullptr || !has_keys(*n, cs, i, require_all) || !included(c, ctx.pod, *n)) {
          return;
        }
        ++counts[i][n->labels.find(c.topology_key)->second];
      });
    }
    return;
  }
  snap.for_each_node([&](const NodeState& n) {
    if (require_all && !has_all_keys(n, cs)) {
      return;
    }
    for (size_t i = 0; i < cs.size(); ++i) {
      if (n.labels.count(cs[i]->topology_key) == 0 || !included(*cs[i], ctx.pod, n)) {
        continue;
      }
      counts[i][n.labels.find(cs[i]->topology_key)->second] += count_on(ctx.snapshot, n, *cs[i], ctx.pod.ns);
    }
  });
}

class PodTopologySpread final : public Plugin {
 public:
  PodTopologySpread(int64_t w, bool system_defaults) : system_defaults_(system_defaults) { weight = w; }
  std::string_view name() const override { return names::kPodTopologySpread; }

  PluginStatus pre_filter(const CycleContext& ctx, CycleState& state) const override {
    auto st = std::make_unique<SpreadState>();
    for (const SpreadConstraint& c : ctx.facts.spread()) {
      (c.hard ? st->hard : st->soft).push_back(&c);
    }
    if (ctx.facts.spread().empty() && system_defaults_) {
      LabelSelector sel = ctx.snapshot.objects().spread_sources().default_selector(ctx.pod.ns, ctx.facts);
      if (!sel.requirements.empty()) {
        // Both ScheduleAnyway: scoring only (the defaults have no DoNotSchedule constraint to filter with).
        st->defaults.push_back(SpreadConstraint{3, std::string(kHostnameLabel), false, sel, {}, true, false});
        st->defaults.push_back(SpreadConstraint{5, std::string(kZoneLabel), false, std::move(sel), {}, true, false});
        for (const SpreadConstraint& c : st->defaults) {
          st->soft.push_back(&c);
        }
        st->defaulted = true;
      }
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

  bool triggers_scoring(const CycleContext&, const CycleState& state) const override {
    const SpreadState* st = state.read<SpreadState>(slot);
    return st != nullptr && !st->soft.empty();
  }

  bool scores_after_gpu_policy(const CycleContext&, const CycleState& state) const override {
    const SpreadState* st = state.read<SpreadState>(slot);
    return st != nullptr && st->defaulted;
  }

  bool pre_score(const CycleContext& ctx, CycleState& state,
                 const std::vector<const NodeState*>& feasible) const override {
    SpreadState* st = state.mutable_read<SpreadState>(slot);
    if (st == nullptr || st->soft.empty()) {
      return false;
    }
    const bool require_all = !st->defaulted;
    count_domains(ctx, st->soft, st->soft_counts, require_all);
    // Upstream (scoring.go initPreScoreState) weighs each constraint by log(size + 2), its size taken over the
    // nodes that passed the filters and are not ignored: for a hostname key their number, for any other key the
    // distinct values among them (with the system defaults a node lacking the key is the value "").
    st->soft_weight.assign(st->soft.size(), 0);
    std::vector<std::set<std::string_view>> values(st->soft.size());
    size_t scored = 0;
    for (const NodeState* n : feasible) {
      if (require_all && !has_all_keys(*n, st->soft)) {
        continue;
      }
      ++scored;
      for (size_t i = 0; i < st->soft.size(); ++i) {
        if (st->soft[i]->topology_key != kHostnameLabel) {
          auto lv = n->labels.find(st->soft[i]->topology_key);
          values[i].insert(lv == n->labels.end() ? std::string_view() : std::string_view(lv->second));
        }
      }
    }
    for (size_t i = 0; i < st->soft.size(); ++i) {
      const size_t size = st->soft[i]->topology_key == kHostnameLabel ? scored : values[i].size();
      st->soft_weight[i] = std::log(static_cast<double>(size) + 2);
    }
    return true;
  }

  int64_t score(const CycleContext&, const CycleState& state, const NodeState& node) const override {
    const SpreadState* st = state.read<SpreadState>(slot);
    if (!st->defaulted && !has_all_keys(node, st->soft)) {
      return -1;  // ignored node: normalised to 0
    }
    double s = 0;
    for (size_t i = 0; i < st->soft.size(); ++i) {
      auto lv = node.labels.find(st->soft[i]->topology_key);
      if (lv == node.labels.end()) {
        continue;  // system defaults: a constraint whose key the node lacks adds nothing
      }
      auto it = st->soft_counts[i].find(lv->second);
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

 private:
  bool system_defaults_;
};

}  // namespace

std::unique_ptr<Plugin> make_pod_topology_spread(int64_t weight, bool system_defaults) {
  return std::make_unique<PodTopologySpread>(weight, system_defaults);
}

}  // namespace gpuslice::scheduler::framework
