#include "scheduler/preemption.h"

#include <algorithm>
#include <climits>
#include <map>
#include <optional>

// Followed: kubernetes/kubernetes pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go
// (SelectVictimsOnNode, PodEligibleToPreemptOthers, isPreemptionAllowed, podTerminatingByPreemption,
// filterPodsWithPDBViolation), pkg/scheduler/framework/preemption/preemption.go (findCandidates,
// dryRunPreemption, pickOneNodeForPreemption, calculateNumCandidates), pkg/scheduler/util/utils.go
// (MoreImportantPod, GetEarliestPodStartTime). Our own code over our Snapshot.

namespace gpuslice::scheduler {
namespace {

const PodFacts& facts_of(const PodInfo& pod) {
  return pod.facts ? *pod.facts : *empty_pod_facts();
}
const PodFacts& facts_of(const PodRecord& rec) {
  return rec.facts ? *rec.facts : *empty_pod_facts();
}

int32_t priority_of(const PodInfo& pod) {
  return facts_of(pod).priority;
}

// isPreemptionAllowed: strictly lower priority; a nomination (another preemptor's held capacity) never is.
bool may_evict(const PodRecord& rec, const PodInfo& preemptor) {
  return !rec.nominated && facts_of(rec).priority < priority_of(preemptor) &&
         !(rec.ns == preemptor.ns && rec.name == preemptor.name);
}

// An unknown start time reads as "now" upstream (GetPodStartTime), the latest possible.
int64_t start_or_latest(int64_t start_unix) {
  return start_unix == 0 ? INT64_MAX : start_unix;
}

// MoreImportantPod: higher priority first; then the one that started earlier; then name order (deterministic).
bool more_important(const PodRecord& a, const PodRecord& b) {
  const PodFacts& fa = facts_of(a);
  const PodFacts& fb = facts_of(b);
  if (fa.priority != fb.priority) {
    return fa.priority > fb.priority;
  }
  const int64_t sa = start_or_latest(fa.start_unix);
  const int64_t sb = start_or_latest(fb.start_unix);
  if (sa != sb) {
    return sa < sb;
  }
  return std::tie(a.ns, a.name) < std::tie(b.ns, b.name);
}

PreemptionVictim victim_of(const PodRecord& rec, bool violates) {
  const PodFacts& f = facts_of(rec);
  return PreemptionVictim{rec.ns, rec.name, f.uid, f.priority, f.start_unix, violates, f.terminating};
}

size_t num_candidates(size_t nodes, const PreemptionOptions& o) {
  size_t n = nodes * static_cast<size_t>(std::max(o.min_candidate_nodes_percentage, 0)) / 100;
  n = std::max(n, static_cast<size_t>(std::max(o.min_candidate_nodes_absolute, 1)));
  return std::min(n, nodes);
}

}  // namespace

const framework::Framework& profile_of(const ScheduleOptions& options) {
  static const std::unique_ptr<framework::Framework> kProfile = framework::Framework::default_profile();
  return options.profile != nullptr ? *options.profile : *kProfile;
}

bool eligible_to_preempt(const Snapshot& snapshot, const PodInfo& pod, std::string_view nominated_node,
                         const ScheduleOptions& options, std::string* why) {
  if (facts_of(pod).preempt_never) {
    if (why != nullptr) {
      *why = preemption_msg::kPolicyNever;
    }
    return false;
  }
  if (nominated_node.empty()) {
    return true;
  }
  const NodeState* node = snapshot.find_node(nominated_node);
  if (node == nullptr) {
    return true;  // the nominated node is gone: the nomination is invalid
  }
  ScheduleOptions quiet = options;
  quiet.explain_failures = false;
  if (profile_of(options).check_node(snapshot, pod, quiet, *node).status.code == framework::Code::unresolvable) {
    return true;  // whoever leaves, that node cannot take the pod any more
  }
  bool waiting = false;
  snapshot.for_each_pod_on(nominated_node, [&](const PodRecord& rec) {
    const PodFacts& f = facts_of(rec);
    if (may_evict(rec, pod) && f.terminating && f.preemption_target) {
      waiting = true;
    }
  });
  if (waiting && why != nullptr) {
    *why = preemption_msg::kTerminatingOnNominated;
  }
  return !waiting;
}

NodeVictims select_victims_on_node(Snapshot& snapshot, const PodInfo& pod, const ScheduleOptions& options,
                                   const NodeState& node) {
  NodeVictims out;
  const framework::Framework& profile = profile_of(options);
  ScheduleOptions quiet = options;
  quiet.explain_failures = false;
  ScheduleOptions loud = options;
  loud.explain_failures = true;

  std::vector<std::pair<std::string, std::string>> keys;
  snapshot.for_each_pod_on(node.name, [&](const PodRecord& rec) {
    if (may_evict(rec, pod)) {
      keys.emplace_back(rec.ns, rec.name);
    }
  });
  if (keys.empty()) {
    out.failure = framework::PluginStatus::fail(std::string(preemption_msg::kNoVictims), framework::Code::unresolvable);
    return out;
  }
  // First: every potential victim out. Does the pod fit at all then?
  std::vector<PodRecord> potential;
  potential.reserve(keys.size());
  for (const auto& [ns, name] : keys) {
    if (auto rec = snapshot.detach_pod(ns, name)) {
      potential.push_back(std::move(*rec));
    }
  }
  framework::Framework::NodeCheck all_out = profile.check_node(snapshot, pod, loud, node);
  if (!all_out.status.ok()) {
    for (PodRecord& rec : potential) {
      snapshot.restore_pod(std::move(rec));
    }
    out.failure = std::move(all_out.status);
    return out;
  }
  // Then reprieve as many as possible, most important first, the budget-violating ones before the others.
  std::sort(potential.begin(), potential.end(), more_important);
  std::map<std::string, int32_t, std::less<>> allowed;
  for (const auto& [key, b] : snapshot.objects().disruption_budgets()) {
    allowed[key] = b.disruptions_allowed;
  }
  std::vector<const PodRecord*> violating;
  std::vector<const PodRecord*> others;
  for (const PodRecord& rec : potential) {
    bool violated = false;
    const Labels& labels = facts_of(rec).labels;
    for (const auto& [key, b] : snapshot.objects().disruption_budgets()) {
      if (!b.covers(rec.ns, labels) || std::binary_search(b.disrupted_pods.begin(), b.disrupted_pods.end(), rec.name)) {
        continue;  // already counted as disrupted by the API server: not decremented twice
      }
      if (--allowed[key] < 0) {
        violated = true;
      }
    }
    (violated ? violating : others).push_back(&rec);
  }
  std::vector<const PodRecord*> victims;
  auto reprieve = [&](const PodRecord* rec, bool violates) {
    snapshot.restore_pod(*rec);
    if (profile.check_node(snapshot, pod, quiet, node).status.ok()) {
      return;  // fits with it: spared
    }
    (void)snapshot.detach_pod(rec->ns, rec->name);
    victims.push_back(rec);
    if (violates) {
      ++out.candidate.budget_violations;
    }
  };
  for (const PodRecord* rec : violating) {
    reprieve(rec, true);
  }
  for (const PodRecord* rec : others) {
    reprieve(rec, false);
  }
  std::stable_sort(victims.begin(), victims.end(),
                   [](const PodRecord* a, const PodRecord* b) { return more_important(*a, *b); });
  // Where the pod goes once they are gone: the profile's Reserve on the snapshot without the victims.
  framework::Framework::NodeCheck placed = profile.check_node(snapshot, pod, quiet, node);
  for (const PodRecord* rec : victims) {
    const bool violates = std::find(violating.begin(), violating.end(), rec) != violating.end();
    out.candidate.victims.push_back(victim_of(*rec, violates));
    snapshot.restore_pod(*rec);
  }
  if (!placed.status.ok()) {
    // Cannot happen (the last reprieve check passed with exactly these victims out); say so rather than guess.
    out.failure = framework::PluginStatus::fail("internal: preemptor does not fit after its victims' release");
    out.candidate.victims.clear();
    return out;
  }
  out.found = true;
  out.candidate.node = node.name;
  out.candidate.placement = std::move(placed.decision);
  return out;
}

size_t pick_candidate(const std::vector<PreemptionCandidate>& candidates) {
  std::vector<size_t> left(candidates.size());
  for (size_t i = 0; i < left.size(); ++i) {
    left[i] = i;
    if (candidates[i].victims.empty()) {
      return i;  // nothing to evict there (upstream takes such a node at once)
    }
  }
  // Keeps the candidates with the minimum of `key` (stable: name order survives among equals).
  auto keep_min = [&](auto key) {
    auto best = key(candidates[left.front()]);
    for (size_t i : left) {
      best = std::min(best, key(candidates[i]));
    }
    std::vector<size_t> next;
    for (size_t i : left) {
      if (key(candidates[i]) == best) {
        next.push_back(i);
      }
    }
    left = std::move(next);
  };
  keep_min([](const PreemptionCandidate& c) { return c.budget_violations; });
  keep_min([](const PreemptionCandidate& c) { return c.victims.front().priority; });
  keep_min([](const PreemptionCandidate& c) {
    int64_t sum = 0;  // each priority shifted to be positive, as upstream, so negative priorities add up right
    for (const auto& v : c.victims) {
      sum += static_cast<int64_t>(v.priority) + static_cast<int64_t>(INT32_MAX) + 1;
    }
    return sum;
  });
  keep_min([](const PreemptionCandidate& c) { return c.victims.size(); });
  // The latest "earliest start among the highest-priority victims": the node whose work started last.
  keep_min([](const PreemptionCandidate& c) {
    const int32_t top = c.victims.front().priority;
    int64_t earliest = INT64_MAX;
    for (const auto& v : c.victims) {
      if (v.priority == top) {
        earliest = std::min(earliest, start_or_latest(v.start_unix));
      }
    }
    return -earliest;  // minimum of the negation: the latest
  });
  return left.front();
}

PreemptionResult find_preemption(Snapshot& snapshot, const PodInfo& pod, std::string_view nominated_node,
                                 const ScheduleOptions& options, const PreemptionOptions& preemption) {
  PreemptionResult r;
  std::string why;
  if (!eligible_to_preempt(snapshot, pod, nominated_node, options, &why)) {
    r.eligible = false;
    r.message = why;
    return r;
  }
  const size_t want = num_candidates(snapshot.node_count(), preemption);
  std::vector<std::string> names;
  snapshot.for_each_node([&](const NodeState& n) { names.push_back(n.name); });
  std::map<std::string, size_t, std::less<>> counts;
  for (const std::string& name : names) {
    if (r.candidates.size() >= want) {
      break;
    }
    const NodeState* node = snapshot.find_node(name);
    NodeVictims v = select_victims_on_node(snapshot, pod, options, *node);
    if (v.found) {
      r.candidates.push_back(std::move(v.candidate));
      continue;
    }
    std::vector<std::string> reasons = v.failure.reasons;
    if (v.failure.code == framework::Code::unresolvable &&
        !(reasons.size() == 1 && reasons[0] == preemption_msg::kNoVictims)) {
      reasons = {std::string(preemption_msg::kNotHelpful)};
    }
    std::sort(reasons.begin(), reasons.end());
    reasons.erase(std::unique(reasons.begin(), reasons.end()), reasons.end());
    for (const std::string& reason : reasons) {
      ++counts[reason];
    }
  }
  if (r.candidates.empty()) {
    r.message = format_failure_message(snapshot.node_count(), counts);
    return r;
  }
  r.found = true;
  r.chosen = r.candidates[pick_candidate(r.candidates)];
  return r;
}

std::string preemption_summary(const PreemptionCandidate& c) {
  std::string s = "preempting " + std::to_string(c.victims.size()) + (c.victims.size() == 1 ? " pod" : " pods") +
                  " on node " + c.node;
  if (!c.victims.empty()) {
    s += " (";
    for (size_t i = 0; i < c.victims.size(); ++i) {
      s += (i ? ", " : "") + c.victims[i].key();
    }
    s += ")";
  }
  return s;
}

}  // namespace gpuslice::scheduler
