// InterPodAffinity: required pod affinity and anti-affinity of the incoming pod, and the symmetry rule (an existing
// pod's required anti-affinity that matches the incoming pod keeps it out of that pod's topology domain), over
// every pod counted in the snapshot, GPU or not. Score: preferred (anti-)affinity of the incoming pod, plus the
// existing pods' preferred terms and required affinity (hardPodAffinityWeight 1) that match it - these also when
// the incoming pod has no preference of its own, as upstream - normalised min..max to 0..100.
// Followed: pkg/scheduler/framework/plugins/interpodaffinity/filtering.go (PreFilter, satisfyPodAffinity,
// satisfyPodAntiAffinity, satisfyExistingPodsAntiAffinity) and scoring.go; pkg/scheduler/framework/types.go
// (AffinityTerm.Matches with namespaces and namespaceSelector).

#include "scheduler/framework/plugins.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

namespace gpuslice::scheduler::framework {
namespace {

using TopologyCounts = std::map<std::pair<std::string, std::string>, int64_t>;

/// InterPodAffinityArgs.hardPodAffinityWeight's default: an existing pod's required affinity term that matches the
/// incoming pod counts this much in the incoming pod's score.
constexpr int64_t kHardPodAffinityWeight = 1;

void add_count(TopologyCounts& m, const NodeState& node, const std::string& key, int64_t v) {
  auto it = node.labels.find(key);
  if (it == node.labels.end()) {
    return;
  }
  auto& c = m[{key, it->second}];
  c += v;
  if (c == 0) {
    m.erase({key, it->second});
  }
}

struct AffinityState final : StateData {
  TopologyCounts existing_anti;  ///< existing pods' anti-affinity terms matching the incoming pod
  TopologyCounts affinity;       ///< existing pods matching ALL the incoming pod's affinity terms
  TopologyCounts anti;           ///< existing pods matching the incoming pod's anti-affinity terms
  TopologyCounts score;          ///< preferred terms (PreScore)
  bool existing_score = false;   ///< some existing pod's terms scored the incoming pod (PreFilter, see below)
};

// The namespaces a term of a pod in `owner_ns` can match, as a pod-index query: the owner's namespace when the
// term names none and has no namespaceSelector, the named ones without a namespaceSelector, any namespace with one.
struct TermScope {
  TermScope(const PodAffinityTerm& t, std::string_view owner_ns) : term(&t) {
    if (!t.namespace_selector) {
      if (t.namespaces.empty()) {
        own.emplace_back(owner_ns);
      }
      limited = true;
    }
  }
  Snapshot::PodQuery query() const {
    return Snapshot::PodQuery{&term->selector, limited ? (own.empty() ? &term->namespaces : &own) : nullptr};
  }
  const PodAffinityTerm* term;
  std::vector<std::string> own;
  bool limited = false;
};

bool matches_all(const std::vector<PodAffinityTerm>& terms, std::string_view owner_ns, std::string_view pod_ns,
                 const Labels& labels, const Labels* ns_labels) {
  if (terms.empty()) {
    return false;
  }
  return std::all_of(terms.begin(), terms.end(),
                     [&](const PodAffinityTerm& t) { return term_matches(t, owner_ns, pod_ns, labels, ns_labels); });
}

class InterPodAffinity final : public Plugin {
 public:
  explicit InterPodAffinity(int64_t w) { weight = w; }
  std::string_view name() const override { return names::kInterPodAffinity; }

  PluginStatus pre_filter(const CycleContext& ctx, CycleState& state) const override {
    const PodFacts& f = ctx.facts;
    const Snapshot& snap = ctx.snapshot;
    const ClusterObjects& objs = snap.objects();
    auto st = std::make_unique<AffinityState>();
    bool any_existing = false;
    const Labels* own_ns_labels = objs.namespace_labels(ctx.pod.ns);
    snap.for_each_pod_with_anti_affinity([&](const PodRecord& rec) {
      any_existing = true;
      const NodeState* node = snap.find_node(rec.node);
      if (node == nullptr) {
        return;
      }
      for (const PodAffinityTerm& t : rec.facts->anti_affinity()) {
        if (term_matches(t, rec.ns, ctx.pod.ns, f.labels, own_ns_labels)) {
          add_count(st->existing_anti, *node, t.topology_key, 1);
        }
      }
    });
    // Score symmetry (PreScore's processExistingPod, counted here so that triggers_scoring knows whether there is
    // anything to score): the existing pods' preferred terms and their required affinity (hardPodAffinityWeight
    // 1) that match the incoming pod. Only pods with such terms are visited (Snapshot::affinity_term_pods_), so
    // a cluster without any costs nothing.
    if (snap.any_pod_with_affinity_score_terms()) {
      snap.for_each_pod_with_affinity_terms([&](const PodRecord& rec) {
        const NodeState* node = snap.find_node(rec.node);
        if (node == nullptr) {
          return;
        }
        auto count = [&](const PodAffinityTerm& t, int64_t w) {
          if (term_matches(t, rec.ns, ctx.pod.ns, f.labels, own_ns_labels)) {
            add_count(st->score, *node, t.topology_key, w);
            st->existing_score = true;
          }
        };
        for (const PodAffinityTerm& t : rec.facts->affinity()) {
          count(t, kHardPodAffinityWeight);
        }
        for (const WeightedPodAffinityTerm& w : rec.facts->preferred_affinity()) {
          count(w.term, w.weight);
        }
        for (const WeightedPodAffinityTerm& w : rec.facts->preferred_anti_affinity()) {
          count(w.term, -w.weight);
        }
      });
    }
    if (f.affinity().empty() && f.anti_affinity().empty() && !any_existing) {
      state.write(slot, std::move(st));  // the score counts, for PreScore
      return PluginStatus::skipped();
    }
    // Existing pods that may match the incoming pod's terms come from the snapshot's pod index (only pods with
    // the terms' labels or in their namespaces), each still tested in full: the counts equal the walk over every
    // pod (ScheduleOptions::use_pod_index = false), which upstream does.
    const bool use_index = ctx.options.use_pod_index;
    if (!f.affinity().empty()) {
      std::vector<TermScope> scopes;
      scopes.reserve(f.affinity().size());
      for (const PodAffinityTerm& t : f.affinity()) {
        scopes.emplace_back(t, ctx.pod.ns);
      }
      std::vector<Snapshot::PodQuery> all;
      for (const TermScope& sc : scopes) {
        all.push_back(sc.query());
      }
      snap.for_each_pod_maybe_matching(all, use_index, [&](const PodRecord& rec) {
        const NodeState* node = snap.find_node(rec.node);
        if (node == nullptr) {
          return;
        }
        if (matches_all(f.affinity(), ctx.pod.ns, rec.ns, rec.facts->labels, objs.namespace_labels(rec.ns))) {
          for (const PodAffinityTerm& t : f.affinity()) {
            add_count(st->affinity, *node, t.topology_key, 1);
          }
        }
      });
    }
    for (const PodAffinityTerm& t : f.anti_affinity()) {
      const TermScope sc(t, ctx.pod.ns);
      snap.for_each_pod_maybe_matching({sc.query()}, use_index, [&](const PodRecord& rec) {
        const NodeState* node = snap.find_node(rec.node);
        if (node != nullptr && term_matches(t, ctx.pod.ns, rec.ns, rec.facts->labels, objs.namespace_labels(rec.ns))) {
          add_count(st->anti, *node, t.topology_key, 1);
        }
      });
    }
    state.write(slot, std::move(st));
    return PluginStatus::success();
  }

  PluginStatus filter(const CycleContext& ctx, const CycleState& state, const NodeState& node) const override {
    const AffinityState* st = state.read<AffinityState>(slot);
    const PodFacts& f = ctx.facts;
    // Required affinity: every term's topology key on the node, and a matching pod in each term's domain - unless
    // no pod anywhere matches and the pod matches its own terms (the first of a group with affinity to itself).
    bool pods_exist = true;
    for (const PodAffinityTerm& t : f.affinity()) {
      auto it = node.labels.find(t.topology_key);
      if (it == node.labels.end()) {
        return PluginStatus::fail(std::string(reason::kAffinityRulesNotMatch), Code::unresolvable);
      }
      auto c = st->affinity.find({t.topology_key, it->second});
      if (c == st->affinity.end() || c->second <= 0) {
        pods_exist = false;
      }
    }
    if (!pods_exist) {
      const bool self = st->affinity.empty() && matches_all(f.affinity(), ctx.pod.ns, ctx.pod.ns, f.labels,
                                                            ctx.snapshot.objects().namespace_labels(ctx.pod.ns));
      if (!self) {
        return PluginStatus::fail(std::string(reason::kAffinityRulesNotMatch), Code::unresolvable);
      }
    }
    if (!st->anti.empty()) {
      for (const PodAffinityTerm& t : f.anti_affinity()) {
        auto it = node.labels.find(t.topology_key);
        if (it != node.labels.end() && st->anti.count({t.topology_key, it->second}) != 0) {
          return PluginStatus::fail(std::string(reason::kAntiAffinityRulesNotMatch));
        }
      }
    }
    if (!st->existing_anti.empty()) {
      for (const auto& [k, v] : node.labels) {
        if (st->existing_anti.count({k, v}) != 0) {
          return PluginStatus::fail(std::string(reason::kExistingAntiAffinityRulesNotMatch));
        }
      }
    }
    return PluginStatus::success();
  }

  bool triggers_scoring(const CycleContext& ctx, const CycleState& state) const override {
    if (!ctx.facts.preferred_affinity().empty() || !ctx.facts.preferred_anti_affinity().empty()) {
      return true;
    }
    const AffinityState* st = state.read<AffinityState>(slot);
    return st != nullptr && st->existing_score;
  }

  bool pre_score(const CycleContext& ctx, CycleState& state, const std::vector<const NodeState*>&) const override {
    const PodFacts& f = ctx.facts;
    const Snapshot& snap = ctx.snapshot;
    const ClusterObjects& objs = snap.objects();
    AffinityState* st = state.mutable_read<AffinityState>(slot);
    std::unique_ptr<AffinityState> fresh;
    if (st == nullptr) {
      fresh = std::make_unique<AffinityState>();
      st = fresh.get();
    }
    bool any = false;
    const bool use_index = ctx.options.use_pod_index;
    // The incoming pod's preferences: the pods each term may match, from the pod index.
    auto prefer = [&](const std::vector<WeightedPodAffinityTerm>& terms, int64_t sign) {
      for (const WeightedPodAffinityTerm& w : terms) {
        const TermScope sc(w.term, ctx.pod.ns);
        snap.for_each_pod_maybe_matching({sc.query()}, use_index, [&](const PodRecord& rec) {
          const NodeState* node = snap.find_node(rec.node);
          if (node != nullptr &&
              term_matches(w.term, ctx.pod.ns, rec.ns, rec.facts->labels, objs.namespace_labels(rec.ns))) {
            add_count(st->score, *node, w.term.topology_key, sign * w.weight);
            any = true;
          }
        });
      }
    };
    prefer(f.preferred_affinity(), 1);
    prefer(f.preferred_anti_affinity(), -1);
    any = any || st->existing_score;  // the existing pods' terms, counted by PreFilter
    if (fresh) {
      state.write(slot, std::move(fresh));
    }
    return any;
  }

  int64_t score(const CycleContext&, const CycleState& state, const NodeState& node) const override {
    const AffinityState* st = state.read<AffinityState>(slot);
    int64_t s = 0;
    for (const auto& [k, v] : node.labels) {
      auto it = st->score.find({k, v});
      if (it != st->score.end()) {
        s += it->second;
      }
    }
    return s;
  }

  void normalize(const CycleContext&, const CycleState&, std::vector<int64_t>& s) const override {
    if (s.empty()) {
      return;
    }
    const auto [mn, mx] = std::minmax_element(s.begin(), s.end());
    const int64_t lo = *mn;
    const int64_t hi = *mx;
    for (int64_t& v : s) {
      v = hi == lo ? 0 : (v - lo) * 100 / (hi - lo);
    }
  }
};

}  // namespace

std::unique_ptr<Plugin> make_inter_pod_affinity(int64_t weight) {
  return std::make_unique<InterPodAffinity>(weight);
}

}  // namespace gpuslice::scheduler::framework
