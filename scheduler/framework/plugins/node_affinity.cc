// NodeAffinity: Filter on nodeSelector and required node affinity (terms ORed, expressions ANDed, matchFields on
// metadata.name; an empty term matches nothing); Score sums the weights of the preferred terms a node matches,
// normalised to 0..100. Followed: pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go and
// k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go.

#include "scheduler/framework/plugins.h"

#include <algorithm>
#include <charconv>

namespace gpuslice::scheduler::framework {
namespace {

bool parse_i64(std::string_view s, int64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

bool requirement_holds(const NodeSelectorRequirement& r, const std::string* value) {
  switch (r.op) {
    case SelectorOp::in:
      return value != nullptr && std::find(r.values.begin(), r.values.end(), *value) != r.values.end();
    case SelectorOp::not_in:
      return value == nullptr || std::find(r.values.begin(), r.values.end(), *value) == r.values.end();
    case SelectorOp::exists:
      return value != nullptr;
    case SelectorOp::does_not_exist:
      return value == nullptr;
    case SelectorOp::gt:
    case SelectorOp::lt: {
      int64_t have = 0;
      int64_t want = 0;
      if (value == nullptr || r.values.size() != 1 || !parse_i64(*value, have) || !parse_i64(r.values[0], want)) {
        return false;
      }
      return r.op == SelectorOp::gt ? have > want : have < want;
    }
  }
  return false;
}

}  // namespace

bool node_matches_term(const NodeState& n, const NodeSelectorTerm& term) {
  if (term.match_expressions.empty() && term.match_fields.empty()) {
    return false;
  }
  for (const NodeSelectorRequirement& r : term.match_expressions) {
    auto it = n.labels.find(r.key);
    if (!requirement_holds(r, it == n.labels.end() ? nullptr : &it->second)) {
      return false;
    }
  }
  for (const NodeSelectorRequirement& r : term.match_fields) {
    if (r.key != "metadata.name" || !requirement_holds(r, &n.name)) {
      return false;
    }
  }
  return true;
}

bool node_matches_terms(const NodeState& n, const std::vector<NodeSelectorTerm>& terms) {
  return std::any_of(terms.begin(), terms.end(), [&](const NodeSelectorTerm& t) { return node_matches_term(n, t); });
}

bool pod_matches_node_affinity(const PodInfo& pod, const NodeState& n) {
  for (const auto& [k, v] : pod.node_selector) {
    auto it = n.labels.find(k);
    if (it == n.labels.end() || it->second != v) {
      return false;
    }
  }
  return pod.required_affinity.empty() || node_matches_terms(n, pod.required_affinity);
}

namespace {

class NodeAffinity final : public Plugin {
 public:
  explicit NodeAffinity(int64_t w) { weight = w; }
  std::string_view name() const override { return names::kNodeAffinity; }
  PluginStatus pre_filter(const CycleContext& ctx, CycleState&) const override {
    if (ctx.pod.node_selector.empty() && ctx.pod.required_affinity.empty()) {
      return PluginStatus::skipped();
    }
    return PluginStatus::success();
  }
  PluginStatus filter(const CycleContext& ctx, const CycleState&, const NodeState& node) const override {
    if (!pod_matches_node_affinity(ctx.pod, node)) {
      return PluginStatus::fail(std::string(scheduler::reason::kNodeAffinity), Code::unresolvable);
    }
    return PluginStatus::success();
  }
  bool triggers_scoring(const CycleContext& ctx, const CycleState&) const override {
    return !ctx.pod.preferred_affinity.empty();
  }
  bool pre_score(const CycleContext& ctx, CycleState&, const std::vector<const NodeState*>&) const override {
    return !ctx.pod.preferred_affinity.empty();
  }
  int64_t score(const CycleContext& ctx, const CycleState&, const NodeState& node) const override {
    int64_t s = 0;
    for (const auto& [w, term] : ctx.pod.preferred_affinity) {
      if (w != 0 && node_matches_term(node, term)) {
        s += w;
      }
    }
    return s;
  }
  void normalize(const CycleContext&, const CycleState&, std::vector<int64_t>& s) const override {
    int64_t mx = 0;
    for (int64_t v : s) {
      mx = std::max(mx, v);
    }
    for (int64_t& v : s) {
      v = mx == 0 ? 0 : v * 100 / mx;
    }
  }
};

}  // namespace

std::unique_ptr<Plugin> make_node_affinity(int64_t weight) {
  return std::make_unique<NodeAffinity>(weight);
}

}  // namespace gpuslice::scheduler::framework
