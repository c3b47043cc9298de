#include "scheduler/schedule.h"

#include "scheduler/framework/framework.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <optional>

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
  // The numbers behind CardInsufficientMemory / CardInsufficientCore / AllocatedCardsInsufficientRequest: what
  // was asked and the best a card (or the node) offered; best -1 = not seen.
  int64_t mem_asked = 0, mem_free = -1, core_asked = 0, core_free = -1, cards_asked = 0, cards_fit = -1;
  void saw_memory(int64_t asked, int64_t free) {
    if (free > mem_free) {
      mem_free = free;
      mem_asked = asked;
    }
  }
  void saw_cores(int64_t asked, int64_t free) {
    if (free > core_free) {
      core_free = free;
      core_asked = asked;
    }
  }
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
  std::vector<Shortfall> shortfalls;
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
    std::string entry = std::to_string(rc.counts[i]) + "/" + std::to_string(total) + " " + std::string(r);
    std::optional<Shortfall> sf;
    if (r == reason::kCardInsufficientMemory && rc.mem_free >= 0) {
      sf = Shortfall{std::string(r), rc.mem_asked, rc.mem_free};
    } else if (r == reason::kCardInsufficientCore && rc.core_free >= 0) {
      sf = Shortfall{std::string(r), rc.core_asked, rc.core_free};
    } else if (r == reason::kAllocatedCardsInsufficientRequest && rc.cards_fit >= 0) {
      sf = Shortfall{std::string(r), rc.cards_asked, rc.cards_fit};
    }
    if (sf) {
      entry += " (" + shortfall_text(*sf) + ")";
      v.shortfalls.push_back(std::move(*sf));
    }
    entries.push_back(std::move(entry));
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
      rc.saw_memory(c.mem, d.devmem - w.used_mem);
      continue;
    }
    if (d.devcore - w.used_cores < cores_req) {
      rc.add(reason::kCardInsufficientCore);
      rc.saw_cores(cores_req, d.devcore - w.used_cores);
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
    if (static_cast<int64_t>(tmp.size()) > rc.cards_fit) {
      rc.cards_fit = static_cast<int64_t>(tmp.size());
      rc.cards_asked = req.gpus;
    }
  }
  return false;
}

// The GpuSlice part of a node's fit: registration, then HAMi's per-container card fit. `explain` false: a failing
// node returns without building reason strings (the search only needs "no").
NodeVerdict evaluate(const Snapshot& snap, const NodeState& n, const PodInfo& pod, const Policy& policy, bool wants_gpu,
                     bool explain) {
  auto fail_with = [explain](std::string_view r) { return explain ? scheduler::fail_with(r) : NodeVerdict{}; };
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
      if (!explain) {
        return NodeVerdict{};
      }
      NodeVerdict v = scheduler::fail_with(reason::kNodeInsufficientDevice);  // HAMi's bare string, then numbers
      Shortfall sf{std::string(reason::kNodeInsufficientDevice), req.gpus, static_cast<int64_t>(base.size())};
      v.detail += " (" + shortfall_text(sf) + ")";
      v.shortfalls.push_back(std::move(sf));
      return v;
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

std::string shortfall_text(const Shortfall& s) {
  const std::string a = std::to_string(s.asked);
  const std::string b = std::to_string(s.best);
  if (s.reason == reason::kCardInsufficientMemory) {
    return "asks " + a + " MiB per card, largest free " + b + " MiB";
  }
  if (s.reason == reason::kCardInsufficientCore) {
    return "asks " + a + "% of a card's cores, largest free " + b + "%";
  }
  if (s.reason == reason::kNodeInsufficientDevice) {
    return "asks " + a + " cards, node has " + b;
  }
  if (s.reason == reason::kAllocatedCardsInsufficientRequest) {
    return "asks " + a + " cards, " + b + " fit";
  }
  return {};
}

std::string format_failure_message(size_t total_nodes, const std::map<std::string, size_t, std::less<>>& counts,
                                   const std::map<std::string, Shortfall, std::less<>>* figures) {
  std::vector<std::string> entries;
  entries.reserve(counts.size());
  for (const auto& [r, n] : counts) {
    std::string e = std::to_string(n) + " " + r;
    if (figures != nullptr) {
      if (auto it = figures->find(r); it != figures->end()) {
        Shortfall s = it->second;
        std::string text;
        if (s.reason == reason::kNodeInsufficientDevice) {
          text = "asks " + std::to_string(s.asked) + " cards, largest node has " + std::to_string(s.best);
        } else if (s.reason == reason::kAllocatedCardsInsufficientRequest) {
          text = "asks " + std::to_string(s.asked) + " cards, at most " + std::to_string(s.best) + " fit";
        } else {
          text = shortfall_text(s);
        }
        if (!text.empty()) {
          e += " (" + text + ")";
        }
      }
    }
    entries.push_back(std::move(e));
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

std::string filtering_failed_note(const Decision& decision) {
  std::map<std::string, std::vector<std::string>> by_reason;
  for (const auto& f : decision.failures) {
    for (const auto& r : f.reasons) {
      by_reason[r].push_back(f.node);
    }
  }
  std::string out = "no available node, " + std::to_string(decision.failures.size()) + " nodes do not meet";
  bool first = true;
  for (const auto& [reason, nodes] : by_reason) {
    out += first ? ": " : "; ";
    first = false;
    out += std::to_string(nodes.size()) + " nodes " + reason + "(";
    for (size_t i = 0; i < nodes.size() && i < 10; ++i) {
      out += (i ? ", " : "") + nodes[i];
    }
    if (nodes.size() > 10) {
      out += ", ...";
    }
    out += ")";
  }
  return out;
}

CapacityQuery capacity_query(const PodInfo& pod) {
  CapacityQuery q;
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
  return q;
}

NodeOrder node_order_for(const PodInfo& pod, const ScheduleOptions& options) {
  return resolve_policy(pod, options).node_order;
}

GpuFit gpu_fit(const Snapshot& snap, const NodeState& node, const PodInfo& pod, const ScheduleOptions& options,
               bool explain) {
  GpuFit out;
  const bool wants_gpu = pod.gpu.any();
  if (wants_gpu && !explain && !may_fit_cards(node, pod)) {
    return out;
  }
  NodeVerdict v = evaluate(snap, node, pod, resolve_policy(pod, options), wants_gpu, explain);
  out.fits = v.fits;
  out.reasons = std::move(v.reasons);
  out.detail = std::move(v.detail);
  out.devices = std::move(v.devices);
  out.shortfalls = std::move(v.shortfalls);
  return out;
}

Decision schedule(const Snapshot& snap, const PodInfo& pod, const ScheduleOptions& options) {
  static const std::unique_ptr<framework::Framework> kProfile = framework::Framework::default_profile();
  return (options.profile != nullptr ? *options.profile : *kProfile).run(snap, pod, options);
}

}  // namespace gpuslice::scheduler
