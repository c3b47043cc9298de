#include "scheduler/schedule.h"

#include <algorithm>
#include <charconv>
#include <limits>

namespace gpuslice::scheduler {
namespace json = boost::json;

namespace {

enum class GpuPolicy { spread, binpack, mutex };

struct Policy {
  NodeOrder node_order = NodeOrder::binpack;
  GpuPolicy gpu = GpuPolicy::spread;
};

// "binpack,numa" style chains: the first word decides; unknown names fall back as HAMi's do.
std::string_view first_word(std::string_view s) {
  size_t p = s.find(',');
  return p == std::string_view::npos ? s : s.substr(0, p);
}

Policy resolve_policy(const PodInfo& pod, const ScheduleOptions& opt) {
  Policy p;
  std::string_view node = first_word(pod.node_policy ? std::string_view(*pod.node_policy) : opt.node_policy);
  p.node_order = node == "spread" ? NodeOrder::spread : NodeOrder::binpack;
  std::string_view gpu = first_word(pod.gpu_policy ? std::string_view(*pod.gpu_policy) : opt.gpu_policy);
  p.gpu = gpu == "binpack" ? GpuPolicy::binpack : gpu == "mutex" ? GpuPolicy::mutex : GpuPolicy::spread;
  return p;
}

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool icontains(std::string_view hay, std::string_view needle) {
  if (needle.size() > hay.size()) {
    return false;
  }
  for (size_t i = 0; i + needle.size() <= hay.size(); ++i) {
    size_t k = 0;
    while (k < needle.size() && lower(hay[i + k]) == lower(needle[k])) {
      ++k;
    }
    if (k == needle.size()) {
      return true;
    }
  }
  return false;
}

bool parse_i64(std::string_view s, int64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

// ---- node level -----------------------------------------------------------------------------------------------

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

bool affinity_matches(const NodeState& n, const PodInfo& pod) {
  for (const auto& [k, v] : pod.node_selector) {
    auto it = n.labels.find(k);
    if (it == n.labels.end() || it->second != v) {
      return false;
    }
  }
  if (pod.required_affinity.empty()) {
    return true;
  }
  for (const NodeSelectorTerm& term : pod.required_affinity) {
    // An empty term matches nothing (kube-scheduler's nodeaffinity semantics).
    if (term.match_expressions.empty() && term.match_fields.empty()) {
      continue;
    }
    bool ok = true;
    for (const NodeSelectorRequirement& r : term.match_expressions) {
      auto it = n.labels.find(r.key);
      if (!requirement_holds(r, it == n.labels.end() ? nullptr : &it->second)) {
        ok = false;
        break;
      }
    }
    for (const NodeSelectorRequirement& r : term.match_fields) {
      if (!ok) {
        break;
      }
      ok = r.key == "metadata.name" && requirement_holds(r, &n.name);
    }
    if (ok) {
      return true;
    }
  }
  return false;
}

bool tolerates(const Toleration& t, const Taint& taint) {
  if (!t.effect.empty() && t.effect != taint.effect) {
    return false;
  }
  if (t.key.empty()) {
    return t.op_exists;  // empty key with Exists tolerates everything
  }
  if (t.key != taint.key) {
    return false;
  }
  return t.op_exists || t.value == taint.value;
}

bool tolerated(const PodInfo& pod, const Taint& taint) {
  return std::any_of(pod.tolerations.begin(), pod.tolerations.end(),
                     [&](const Toleration& t) { return tolerates(t, taint); });
}

// ---- card level -----------------------------------------------------------------------------------------------

struct Work {
  const CardState* card;
  int64_t used_mem;
  int64_t used_cores;
  int64_t used_slots;
};

// Counts per card reason in a fixed array: the hot path (a candidate node that does not fit) allocates nothing.
struct ReasonCounts {
  static constexpr std::string_view kNames[] = {reason::kAllocatedCardsInsufficientRequest,
                                                reason::kCardComputeUnitsExhausted,
                                                reason::kCardCordoned,
                                                reason::kCardInsufficientCore,
                                                reason::kCardInsufficientMemory,
                                                reason::kCardMigModeUnsupported,
                                                reason::kCardNotHealth,
                                                reason::kCardTimeSlicingExhausted,
                                                reason::kCardTypeMismatch,
                                                reason::kCardUuidMismatch,
                                                reason::kExclusiveDeviceAllocateConflict,
                                                reason::kNumaNotFit,
                                                reason::kResourceQuotaNotFit};
  static constexpr size_t kCount = sizeof(kNames) / sizeof(kNames[0]);
  int64_t counts[kCount] = {};
  void add(std::string_view r, int64_t n = 1) {
    for (size_t i = 0; i < kCount; ++i) {
      if (kNames[i] == r) {
        counts[i] += n;
        return;
      }
    }
  }
};

struct NodeVerdict {
  bool fits = false;
  std::vector<std::string> reasons;
  std::string detail;
  PodDevices devices;
};

// A necessary condition checked before the full evaluation during the search: every GPU container needs `gpus`
// usable cards each with its memory and cores free. Integer compares over a node's cards, nothing allocated.
bool may_fit_cards(const NodeState& n, const PodInfo& pod) {
  for (const ContainerGpuRequest& req : pod.gpu.containers) {
    if (req.gpus <= 0) {
      continue;
    }
    const int64_t cores = std::min<int64_t>(req.cores, 100);
    int64_t ok = 0;
    for (const CardState& c : n.cards) {
      if (c.usable() && c.free_cores() >= cores && c.free_mem_mib() >= request_mem_on_card(req, c.info)) {
        ++ok;
      }
    }
    if (ok < req.gpus) {
      return false;
    }
  }
  return true;
}

NodeVerdict fail_with(std::string_view reason) {
  NodeVerdict v;
  v.reasons.emplace_back(reason);
  v.detail = std::string(reason);
  return v;
}

NodeVerdict fail_with_cards(const ReasonCounts& rc, size_t total) {
  NodeVerdict v;
  std::vector<std::string> entries;
  for (size_t i = 0; i < ReasonCounts::kCount; ++i) {
    if (rc.counts[i] == 0) {
      continue;
    }
    std::string_view r = ReasonCounts::kNames[i];
    v.reasons.emplace_back(r);
    entries.push_back(std::to_string(rc.counts[i]) + "/" + std::to_string(total) + " " + std::string(r));
  }
  std::sort(entries.begin(), entries.end());
  for (size_t i = 0; i < entries.size(); ++i) {
    v.detail += (i ? ", " : "") + entries[i];
  }
  return v;
}

double card_score(const Work& w, int64_t mem, int64_t cores, const ScoringWeights& wt) {
  const DeviceInfo& d = w.card->info;
  double s = 0;
  if (d.count > 0) {
    s += static_cast<double>(wt.slot) * static_cast<double>(1 + w.used_slots) / static_cast<double>(d.count);
  }
  if (d.devcore > 0) {
    s += static_cast<double>(wt.core) * static_cast<double>(cores + w.used_cores) / static_cast<double>(d.devcore);
  }
  if (d.devmem > 0) {
    s += static_cast<double>(wt.memory) * static_cast<double>(mem + w.used_mem) / static_cast<double>(d.devmem);
  }
  return 10 * s;
}

struct QuotaState {
  QuotaLimits limits;
  QuotaAmounts used;      // the namespace's other pods
  QuotaAmounts app;       // this pod's app containers placed so far
  QuotaAmounts init_max;  // this pod's largest init container so far

  bool fits(const QuotaAmounts& slot, bool init) const {
    QuotaAmounts a = app;
    QuotaAmounts i = init_max;
    if (init) {
      i = QuotaAmounts{std::max(i.mem_mib, slot.mem_mib), std::max(i.cores, slot.cores), std::max(i.gpus, slot.gpus)};
    } else {
      a = QuotaAmounts{a.mem_mib + slot.mem_mib, a.cores + slot.cores, a.gpus + slot.gpus};
    }
    QuotaAmounts pod{std::max(a.mem_mib, i.mem_mib), std::max(a.cores, i.cores), std::max(a.gpus, i.gpus)};
    if (limits.mem_mib && used.mem_mib + pod.mem_mib > *limits.mem_mib) {
      return false;
    }
    if (limits.cores && used.cores + pod.cores > *limits.cores) {
      return false;
    }
    if (limits.gpus && used.gpus + pod.gpus > *limits.gpus) {
      return false;
    }
    return true;
  }
};

// HAMi's NvidiaGPUDevices.Fit for one container on one node (hami-protocol.md §7), on the working usage `work`.
bool fit_container(std::vector<Work>& work, const ContainerGpuRequest& req, const PodInfo& pod, const Policy& policy,
                   QuotaState& quota, ContainerDevices& picked, ReasonCounts& rc) {
  const int64_t cores_req = std::min<int64_t>(req.cores, 100);
  // Try order: HAMi sorts and walks backwards; here the list is sorted directly in try order.
  struct Cand {
    Work* w;
    double score;
    int64_t mem;
  };
  std::vector<Cand> order;
  order.reserve(work.size());
  for (Work& w : work) {
    int64_t mem = request_mem_on_card(req, w.card->info);
    order.push_back(Cand{&w, card_score(w, mem, cores_req, pod.weights), mem});
  }
  const bool numa_first = pod.selectors.numa_bind;
  std::sort(order.begin(), order.end(), [&](const Cand& a, const Cand& b) {
    const DeviceInfo& da = a.w->card->info;
    const DeviceInfo& db = b.w->card->info;
    if (numa_first && da.numa != db.numa) {
      return da.numa < db.numa;
    }
    if (policy.gpu == GpuPolicy::mutex) {
      if (a.w->used_slots != b.w->used_slots) {
        return a.w->used_slots < b.w->used_slots;
      }
    } else if (a.score != b.score) {
      // spread: least used first; binpack: most used first
      return policy.gpu == GpuPolicy::binpack ? a.score > b.score : a.score < b.score;
    }
    if (da.numa != db.numa) {
      return da.numa < db.numa;
    }
    if (da.index != db.index) {
      return da.index < db.index;
    }
    return da.id < db.id;
  });

  const GpuSelectors& sel = pod.selectors;
  std::vector<Cand*> tmp;
  int32_t prev_numa = std::numeric_limits<int32_t>::min();
  QuotaAmounts slot;
  for (Cand& c : order) {
    const CardState& card = *c.w->card;
    const DeviceInfo& d = card.info;
    if (!d.health) {
      rc.add(reason::kCardNotHealth);
      continue;
    }
    if (card.cordoned) {
      rc.add(reason::kCardCordoned);
      continue;
    }
    if (d.mode == "mig") {
      rc.add(reason::kCardMigModeUnsupported);
      continue;
    }
    bool type_ok = true;
    if (!sel.use_types.empty()) {
      type_ok = std::any_of(sel.use_types.begin(), sel.use_types.end(),
                            [&](const std::string& t) { return icontains(d.type, t); });
    }
    if (type_ok && std::any_of(sel.nouse_types.begin(), sel.nouse_types.end(),
                               [&](const std::string& t) { return icontains(d.type, t); })) {
      type_ok = false;
    }
    if (type_ok && sel.vgpu_mode) {
      std::string_view mode = d.mode.empty() ? std::string_view("hami-core") : std::string_view(d.mode);
      type_ok = sel.vgpu_mode->find(mode) != std::string::npos;
    }
    if (!type_ok) {
      rc.add(reason::kCardTypeMismatch);
      continue;
    }
    if (sel.numa_bind && prev_numa != d.numa) {
      // HAMi discards the cards picked on the previous NUMA node and goes on with this card.
      if (!tmp.empty()) {
        rc.add(reason::kNumaNotFit, static_cast<int64_t>(tmp.size()));
      }
      tmp.clear();
      slot = QuotaAmounts{};
      prev_numa = d.numa;
    }
    if (!sel.use_uuids.empty() && std::find(sel.use_uuids.begin(), sel.use_uuids.end(), d.id) == sel.use_uuids.end()) {
      rc.add(reason::kCardUuidMismatch);
      continue;
    }
    if (std::find(sel.nouse_uuids.begin(), sel.nouse_uuids.end(), d.id) != sel.nouse_uuids.end()) {
      rc.add(reason::kCardUuidMismatch);
      continue;
    }
    const Work& w = *c.w;
    if (d.count <= w.used_slots) {
      rc.add(reason::kCardTimeSlicingExhausted);
      continue;
    }
    if (policy.gpu == GpuPolicy::mutex && w.used_slots > 0) {
      rc.add(reason::kExclusiveDeviceAllocateConflict);
      continue;
    }
    QuotaAmounts with = slot;
    with.mem_mib += c.mem;
    with.cores += cores_req;
    with.gpus += 1;
    if (!quota.fits(with, req.init)) {
      rc.add(reason::kResourceQuotaNotFit);
      continue;
    }
    if (d.devmem - w.used_mem < c.mem) {
      rc.add(reason::kCardInsufficientMemory);
      continue;
    }
    if (d.devcore - w.used_cores < cores_req) {
      rc.add(reason::kCardInsufficientCore);
      continue;
    }
    if (d.devcore == 100 && cores_req == 100 && w.used_slots > 0) {
      rc.add(reason::kExclusiveDeviceAllocateConflict);
      continue;
    }
    if (d.devcore != 0 && w.used_cores == d.devcore && cores_req == 0) {
      rc.add(reason::kCardComputeUnitsExhausted);
      continue;
    }
    tmp.push_back(&c);
    slot = with;
    if (static_cast<int64_t>(tmp.size()) == req.gpus) {
      picked.clear();
      for (Cand* p : tmp) {
        picked.push_back(ContainerDevice{p->w->card->info.id, std::string(kNvidiaVendorWord), p->mem, cores_req});
      }
      if (req.init) {
        quota.init_max =
            QuotaAmounts{std::max(quota.init_max.mem_mib, slot.mem_mib), std::max(quota.init_max.cores, slot.cores),
                         std::max(quota.init_max.gpus, slot.gpus)};
      } else {
        quota.app =
            QuotaAmounts{quota.app.mem_mib + slot.mem_mib, quota.app.cores + slot.cores, quota.app.gpus + slot.gpus};
        // App containers accumulate: the next one sees these cards as used.
        for (Cand* p : tmp) {
          p->w->used_mem += p->mem;
          p->w->used_cores += cores_req;
          p->w->used_slots += 1;
        }
      }
      return true;
    }
  }
  if (!tmp.empty()) {
    rc.add(reason::kAllocatedCardsInsufficientRequest, static_cast<int64_t>(tmp.size()));
  }
  return false;
}

// `explain` false: a failing node returns without building reason strings (the search only needs "no").
NodeVerdict evaluate(const Snapshot& snap, const NodeState& n, const PodInfo& pod, const Policy& policy, bool wants_gpu,
                     bool explain) {
  auto fail_with = [explain](std::string_view r) { return explain ? scheduler::fail_with(r) : NodeVerdict{}; };
  if (n.unschedulable && !tolerated(pod, Taint{"node.kubernetes.io/unschedulable", "", "NoSchedule"})) {
    return fail_with(reason::kNodeUnschedulable);
  }
  if (!affinity_matches(n, pod)) {
    return fail_with(reason::kNodeAffinity);
  }
  for (const Taint& t : n.taints) {
    if ((t.effect == "NoSchedule" || t.effect == "NoExecute") && !tolerated(pod, t)) {
      if (!explain) {
        return NodeVerdict{};
      }
      return scheduler::fail_with(std::string(reason::kUntoleratedTaintPrefix) + "{" + t.key + ": " + t.value + "}");
    }
  }
  {
    NodeVerdict v;
    const ResourceRequests& r = pod.requests;
    if (r.cpu_milli > 0 && n.requested.cpu_milli + r.cpu_milli > n.allocatable.cpu_milli) {
      v.reasons.emplace_back(reason::kInsufficientCpu);
    }
    if (r.memory_bytes > 0 && n.requested.memory_bytes + r.memory_bytes > n.allocatable.memory_bytes) {
      v.reasons.emplace_back(reason::kInsufficientMemory);
    }
    if (r.ephemeral_bytes > 0 && n.requested.ephemeral_bytes + r.ephemeral_bytes > n.allocatable.ephemeral_bytes) {
      v.reasons.emplace_back(reason::kInsufficientEphemeral);
    }
    if (n.pod_count + 1 > n.allocatable_pods) {
      v.reasons.emplace_back(reason::kTooManyPods);
    }
    if (!v.reasons.empty() && !explain) {
      return NodeVerdict{};
    }
    if (!v.reasons.empty()) {
      std::sort(v.reasons.begin(), v.reasons.end());
      for (size_t i = 0; i < v.reasons.size(); ++i) {
        v.detail += (i ? ", " : "") + v.reasons[i];
      }
      return v;
    }
  }
  NodeVerdict ok;
  ok.fits = true;
  ok.devices.resize(pod.gpu.containers.size());
  if (!wants_gpu) {
    return ok;
  }
  if (!n.registered()) {
    return fail_with(reason::kNodeUnregistered);
  }
  std::vector<Work> base;
  base.reserve(n.cards.size());
  for (const CardState& c : n.cards) {
    if (c.visible()) {
      base.push_back(Work{&c, c.used_mem_mib, c.used_cores, c.used_slots});
    }
  }
  std::vector<Work> app = base;  // app containers accumulate here; init containers start from base each time
  QuotaState quota{snap.quota_limits(pod.ns), snap.quota_used(pod.ns), {}, {}};
  for (size_t i = 0; i < pod.gpu.containers.size(); ++i) {
    const ContainerGpuRequest& req = pod.gpu.containers[i];
    if (req.gpus <= 0) {
      continue;
    }
    if (req.gpus > static_cast<int64_t>(base.size())) {
      return fail_with(reason::kNodeInsufficientDevice);  // HAMi's bare string
    }
    ReasonCounts rc;
    bool fitted = false;
    if (req.init) {
      std::vector<Work> fresh = base;
      fitted = fit_container(fresh, req, pod, policy, quota, ok.devices[i], rc);
    } else {
      fitted = fit_container(app, req, pod, policy, quota, ok.devices[i], rc);
    }
    if (!fitted) {
      return explain ? fail_with_cards(rc, base.size()) : NodeVerdict{};
    }
  }
  return ok;
}

}  // namespace

ScheduleOptions ScheduleOptions::from(const SchedulerConfig& config) {
  ScheduleOptions o;
  o.node_policy = config.node_scheduler_policy;
  o.gpu_policy = config.gpu_scheduler_policy;
  return o;
}

int64_t request_mem_on_card(const ContainerGpuRequest& request, const DeviceInfo& card) {
  if (request.mem_mib && *request.mem_mib > 0) {
    return *request.mem_mib;
  }
  if (request.mem_percent) {
    return card.devmem * *request.mem_percent / 100;
  }
  return card.devmem;  // neither: the whole card
}

std::string format_failure_message(size_t total_nodes, const std::map<std::string, size_t, std::less<>>& counts) {
  std::vector<std::string> entries;
  entries.reserve(counts.size());
  for (const auto& [r, n] : counts) {
    entries.push_back(std::to_string(n) + " " + r);
  }
  std::sort(entries.begin(), entries.end());  // as kube-scheduler's sortReasonsHistogram: plain string order
  std::string out = "0/" + std::to_string(total_nodes) + " nodes are available";
  if (entries.empty()) {
    return out + ".";
  }
  out += ": ";
  for (size_t i = 0; i < entries.size(); ++i) {
    out += (i ? ", " : "") + entries[i];
  }
  return out + ".";
}

Decision schedule(const Snapshot& snap, const PodInfo& pod, const ScheduleOptions& options) {
  Decision d;
  d.nodes_total = snap.node_count();
  const Policy policy = resolve_policy(pod, options);
  const bool wants_gpu = pod.gpu.any();

  CapacityQuery q;
  if (wants_gpu) {
    for (const ContainerGpuRequest& c : pod.gpu.containers) {
      if (c.gpus <= 0) {
        continue;
      }
      q.cards = std::max(q.cards, c.gpus);
      if (c.mem_mib) {
        q.min_card_mem_mib = std::max(q.min_card_mem_mib, *c.mem_mib);
      }
      q.min_card_cores = std::max(q.min_card_cores, std::min<int64_t>(c.cores, 100));
    }
  }
  if (!options.use_index) {
    q = CapacityQuery{};
  }
  snap.visit_candidates(q, policy.node_order, [&](const NodeState& n) {
    ++d.nodes_visited;
    if (wants_gpu && !may_fit_cards(n, pod)) {
      return false;
    }
    NodeVerdict v = evaluate(snap, n, pod, policy, wants_gpu, /*explain=*/false);
    if (!v.fits) {
      return false;
    }
    d.scheduled = true;
    d.node = n.name;
    d.node_score = n.score;
    d.devices = std::move(v.devices);
    return true;
  });
  if (d.scheduled) {
    return d;
  }
  if (!options.explain_failures) {
    d.message = format_failure_message(d.nodes_total, {});
    return d;
  }
  // Every node, the ones the index skipped included, so the message counts all N like kube-scheduler's.
  std::map<std::string, size_t, std::less<>> counts;
  snap.for_each_node([&](const NodeState& n) {
    NodeVerdict v = evaluate(snap, n, pod, policy, wants_gpu, /*explain=*/true);
    if (v.fits) {
      // Only possible if the index pruned a node it should not have; report it rather than hide it.
      v = fail_with("internal: node fits but was not a candidate");
    }
    for (const std::string& r : v.reasons) {
      ++counts[r];
    }
    d.failures.push_back(NodeFailure{n.name, std::move(v.reasons), std::move(v.detail)});
  });
  d.message = format_failure_message(d.nodes_total, counts);
  return d;
}

json::object allocation_annotations(const Decision& decision, int64_t now_unix) {
  json::object a;
  std::string devices = encode_pod_devices(decision.devices);
  a[kVgpuNodeAnnotation] = decision.node;
  a[kVgpuTimeAnnotation] = std::to_string(now_unix);
  a[kDevicesToAllocateAnnotation] = devices;
  a[kDevicesAllocatedAnnotation] = devices;
  return a;
}

}  // namespace gpuslice::scheduler
