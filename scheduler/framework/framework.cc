#include "scheduler/framework/framework.h"

#include "scheduler/framework/plugins.h"

#include <algorithm>
#include <limits>

// Followed: kubernetes/kubernetes pkg/scheduler/schedule_one.go (findNodesThatFitPod, numFeasibleNodesToFind,
// prioritizeNodes, selectHost), pkg/scheduler/framework/runtime/framework.go (RunPreFilterPlugins,
// RunFilterPlugins, RunScorePlugins with NormalizeScore and weights), pkg/scheduler/framework/types.go (FitError).

namespace gpuslice::scheduler::framework {

PluginStatus Plugin::pre_filter(const CycleContext&, CycleState&) const {
  return PluginStatus::skipped();
}
PluginStatus Plugin::filter(const CycleContext&, const CycleState&, const NodeState&) const {
  return PluginStatus::success();
}
bool Plugin::triggers_scoring(const CycleContext&, const CycleState&) const {
  return false;
}
bool Plugin::scores_after_gpu_policy(const CycleContext&, const CycleState&) const {
  return false;
}
bool Plugin::pre_score(const CycleContext&, CycleState&, const std::vector<const NodeState*>&) const {
  return false;
}
int64_t Plugin::score(const CycleContext&, const CycleState&, const NodeState&) const {
  return 0;
}
void Plugin::normalize(const CycleContext&, const CycleState&, std::vector<int64_t>&) const {}
void Plugin::reserve(const CycleContext&, const CycleState&, const NodeState&, Decision&) const {}

Framework::Framework(std::vector<std::unique_ptr<Plugin>> plugins) : plugins_(std::move(plugins)) {
  for (size_t i = 0; i < plugins_.size(); ++i) {
    plugins_[i]->slot = i;
  }
}

std::unique_ptr<Framework> Framework::default_profile(const ScoreWeights& w, bool default_spreading) {
  std::vector<std::unique_ptr<Plugin>> p;
  p.push_back(make_node_unschedulable());
  p.push_back(make_node_name());
  p.push_back(make_taint_toleration(w.taint_toleration));
  p.push_back(make_node_affinity(w.node_affinity));
  p.push_back(make_node_ports());
  p.push_back(make_node_resources_fit(w.node_resources_fit));
  p.push_back(make_volume_restrictions());
  p.push_back(make_node_volume_limits());
  p.push_back(make_volume_binding());
  p.push_back(make_volume_zone());
  p.push_back(make_pod_topology_spread(w.pod_topology_spread, default_spreading));
  p.push_back(make_inter_pod_affinity(w.inter_pod_affinity));
  p.push_back(make_dynamic_resources());
  p.push_back(make_node_resources_balanced_allocation(w.node_resources_balanced_allocation));
  p.push_back(make_gpu_slice());
  return std::make_unique<Framework>(std::move(p));
}

const Plugin* Framework::find(std::string_view name) const {
  for (const auto& p : plugins_) {
    if (p->name() == name) {
      return p.get();
    }
  }
  return nullptr;
}

size_t feasible_nodes_to_find(size_t n) {
  if (n < 100) {
    return n;
  }
  int64_t pct = 50 - static_cast<int64_t>(n) / 125;
  pct = std::max<int64_t>(pct, 5);
  size_t k = n * static_cast<size_t>(pct) / 100;
  return std::max<size_t>(k, 100);
}

namespace {

std::string join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    out += (i ? std::string(sep) : std::string()) + v[i];
  }
  return out;
}

}  // namespace

PluginStatus Framework::pre_filter_all(const CycleContext& ctx, CycleState& state) const {
  for (const auto& p : plugins_) {
    PluginStatus st = p->pre_filter(ctx, state);
    if (st.code == Code::skip) {
      state.set_skip_filter(p->slot, true);
      continue;
    }
    if (!st.ok()) {
      return st;
    }
  }
  return PluginStatus::success();
}

PluginStatus Framework::filter_all(const CycleContext& ctx, CycleState& state, const NodeState& node) const {
  for (const auto& p : plugins_) {
    if (state.skip_filter(p->slot)) {
      continue;
    }
    PluginStatus st = p->filter(ctx, state, node);
    if (!st.ok()) {
      return st;
    }
  }
  return PluginStatus::success();
}

Decision Framework::run(const Snapshot& snap, const PodInfo& pod, const ScheduleOptions& options) const {
  Decision d;
  d.nodes_total = snap.node_count();
  const PodFacts& facts = pod.facts ? *pod.facts : *empty_pod_facts();
  CycleContext ctx{snap, pod, facts, options, false};
  CycleState state(plugins_.size());

  // ---- PreFilter ----
  {
    PluginStatus st = pre_filter_all(ctx, state);
    if (!st.ok()) {
      // FitError with a PreFilterMsg: the same status for every node, the message names it once.
      const std::string msg = join(st.reasons, ", ");
      d.message = "0/" + std::to_string(d.nodes_total) + " nodes are available: " + msg + ".";
      if (options.explain_failures) {
        snap.for_each_node([&](const NodeState& n) { d.failures.push_back(NodeFailure{n.name, st.reasons, msg}); });
      }
      return d;
    }
  }

  auto run_filters = [&](const NodeState& n, const CycleContext& c) -> PluginStatus { return filter_all(c, state, n); };

  // ---- Filter over the candidates the free-capacity index hands out, in GPU node-policy order ----
  // Which scores apply: the preference scores (TaintToleration, NodeAffinity, PodTopologySpread, InterPodAffinity)
  // only when a plugin has something to prefer for this pod; the resource scores (Plugin::resource_score) always
  // when weighted. For a pod with a GPU request the ranking is lexicographic: preference scores, then the GPU node
  // policy (HAMi's binpack/spread: the candidate order), then the resource scores, then the candidate order; so
  // without preferences only the first group of equal GPU node score needs scoring (`tiered`). For a pod without
  // one, all weighted scores add up as in kube-scheduler, over numFeasibleNodesToFind nodes (`full`).
  bool scoring = false;
  bool resources = false;
  for (const auto& p : plugins_) {
    if (p->weight <= 0) {
      continue;
    }
    if (p->resource_score) {
      resources = true;
    } else if (p->triggers_scoring(ctx, state)) {
      // A score that ranks after the GPU policy for a GPU pod joins the resource level (tiered scoring).
      (pod.gpu.any() && p->scores_after_gpu_policy(ctx, state) ? resources : scoring) = true;
    }
  }
  const bool gpu_pod = pod.gpu.any();
  const bool full = scoring || (resources && !gpu_pod);
  const bool tiered = !full && resources;
  const size_t want = full || tiered ? std::max<size_t>(1, feasible_nodes_to_find(d.nodes_total)) : 1;
  // Lock-aware (ScheduleOptions::busy): a GPU pod looks past a busy first choice, a bounded number of nodes.
  const bool lock_aware = options.busy != nullptr && *options.busy && gpu_pod;
  // How many allocations are in progress on the node (0: free); busy when above 0.
  auto load = [&](const NodeState& n) -> size_t { return lock_aware ? (*options.busy)(n.name) : 0; };
  auto busy = [&](const NodeState& n) { return load(n) != 0; };
  const size_t lookahead = std::max<size_t>(1, options.busy_lookahead);
  size_t busy_seen = 0;
  bool free_seen = false;
  std::vector<const NodeState*> feasible;
  std::vector<size_t> group;  // per feasible node: its group of equal GPU node score, 0 the policy's first
  CapacityQuery q = options.use_index ? capacity_query(pod) : CapacityQuery{};
  snap.visit_candidates(q, node_order_for(pod, options), [&](const NodeState& n) {
    // Tiered: the next group cannot outrank the ones collected, unless all of them are busy (lock-aware).
    if (tiered && !feasible.empty() && n.score != feasible.back()->score &&
        (!lock_aware || free_seen || busy_seen >= lookahead)) {
      return true;
    }
    ++d.nodes_visited;
    if (!run_filters(n, ctx).ok()) {
      return false;
    }
    group.push_back(feasible.empty() ? 0 : group.back() + (n.score != feasible.back()->score ? 1 : 0));
    feasible.push_back(&n);
    if (full) {
      return feasible.size() >= want;
    }
    if (tiered) {
      if (busy(n)) {
        ++busy_seen;
      } else {
        free_seen = true;
      }
      return feasible.size() >= want;
    }
    // Without scoring the first feasible node wins, unless busy: then the first one that is not, looking at most
    // busy_lookahead busy ones ahead.
    return !busy(n) || ++busy_seen >= lookahead;
  });

  if (!feasible.empty()) {
    size_t best = 0;
    if (!full && !tiered) {
      // The policy's first choice unless busy; then the first feasible node that is not; when every node looked
      // at is busy, the least loaded of them (the first in policy order on ties), so that a burst queues evenly
      // over the lookahead's locks instead of all on the policy's first choice.
      size_t least = std::numeric_limits<size_t>::max();
      for (size_t i = 0; i < feasible.size(); ++i) {
        const size_t l = load(*feasible[i]);
        if (l < least) {
          least = l;
          best = i;
        }
        if (l == 0) {
          break;
        }
      }
    } else if (feasible.size() > 1) {
      // ---- Score: weighted sums of normalised scores, ranked as above ----
      std::vector<int64_t> pref(feasible.size(), 0);
      std::vector<int64_t> res(feasible.size(), 0);
      for (const auto& p : plugins_) {
        const bool after_policy = p->resource_score || p->scores_after_gpu_policy(ctx, state);
        if (p->weight <= 0 || (!after_policy && !scoring) || !p->pre_score(ctx, state, feasible)) {
          continue;
        }
        std::vector<int64_t> s(feasible.size());
        for (size_t i = 0; i < feasible.size(); ++i) {
          s[i] = p->score(ctx, state, *feasible[i]);
        }
        p->normalize(ctx, state, s);
        std::vector<int64_t>& into = after_policy && gpu_pod ? res : pref;
        for (size_t i = 0; i < feasible.size(); ++i) {
          into[i] += p->weight * s[i];
        }
      }
      std::vector<size_t> rank(feasible.size());
      for (size_t i = 0; i < rank.size(); ++i) {
        rank[i] = i;
      }
      std::stable_sort(rank.begin(), rank.end(), [&](size_t a, size_t b) {
        if (pref[a] != pref[b]) {
          return pref[a] > pref[b];
        }
        if (group[a] != group[b]) {
          return group[a] < group[b];
        }
        return res[a] > res[b];
      });
      best = rank[0];
      if (busy(*feasible[best])) {
        // With preferences: a node of the same preference score that is not busy; without: the first one that is
        // not busy among the first busy_lookahead + 1 in rank order (the plain policy order's rule). When all of
        // those are busy, the least loaded of them (the first in rank order on ties).
        const size_t first = best;
        size_t least = load(*feasible[best]);
        for (size_t k = 1; k < rank.size(); ++k) {
          const size_t i = rank[k];
          if (scoring ? pref[i] != pref[first] : k > lookahead) {
            break;
          }
          const size_t l = load(*feasible[i]);
          if (l < least) {
            least = l;
            best = i;
          }
          if (l == 0) {
            break;
          }
        }
      }
    }
    const NodeState& n = *feasible[best];
    d.scheduled = true;
    d.node = n.name;
    d.node_score = n.score;
    // ---- Reserve ----
    for (const auto& p : plugins_) {
      if (!state.skip_filter(p->slot)) {
        p->reserve(ctx, state, n, d);
      }
    }
    return d;
  }

  if (!options.explain_failures) {
    d.message = format_failure_message(d.nodes_total, {});
    return d;
  }
  // Every node, the ones the index skipped included, so the message counts all N like kube-scheduler's.
  CycleContext explain_ctx{snap, pod, facts, options, true};
  std::map<std::string, size_t, std::less<>> counts;
  std::map<std::string, Shortfall, std::less<>> figures;  // per reason: the largest amount any node offered
  snap.for_each_node([&](const NodeState& n) {
    PluginStatus st = run_filters(n, explain_ctx);
    for (Shortfall& sf : st.shortfalls) {
      auto [it, fresh] = figures.try_emplace(sf.reason, sf);
      if (!fresh && sf.best > it->second.best) {
        it->second = std::move(sf);
      }
    }
    if (st.ok()) {
      // Only possible if the index pruned a node it should not have; report it rather than hide it.
      st = PluginStatus::fail("internal: node fits but was not a candidate");
    }
    std::sort(st.reasons.begin(), st.reasons.end());
    st.reasons.erase(std::unique(st.reasons.begin(), st.reasons.end()), st.reasons.end());
    for (const std::string& r : st.reasons) {
      ++counts[r];
    }
    std::string detail = st.detail.empty() ? join(st.reasons, ", ") : st.detail;
    d.failures.push_back(NodeFailure{n.name, std::move(st.reasons), std::move(detail)});
  });
  d.message = format_failure_message(d.nodes_total, counts, &figures);
  return d;
}

Framework::NodeCheck Framework::check_node(const Snapshot& snap, const PodInfo& pod, const ScheduleOptions& options,
                                           const NodeState& node) const {
  NodeCheck out;
  out.decision.nodes_total = snap.node_count();
  const PodFacts& facts = pod.facts ? *pod.facts : *empty_pod_facts();
  CycleContext ctx{snap, pod, facts, options, options.explain_failures};
  CycleState state(plugins_.size());
  if (PluginStatus st = pre_filter_all(ctx, state); !st.ok()) {
    out.status = std::move(st);
    return out;
  }
  if (PluginStatus st = filter_all(ctx, state, node); !st.ok()) {
    out.status = std::move(st);
    return out;
  }
  out.decision.scheduled = true;
  out.decision.node = node.name;
  out.decision.node_score = node.score;
  out.decision.nodes_visited = 1;
  for (const auto& p : plugins_) {
    if (!state.skip_filter(p->slot)) {
      p->reserve(ctx, state, node, out.decision);
    }
  }
  return out;
}

}  // namespace gpuslice::scheduler::framework
