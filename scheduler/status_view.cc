#include "scheduler/status_view.h"

#include "scheduler/status_board.h"

#include "common/metrics.h"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <tuple>
#include <unordered_map>

namespace gpuslice::scheduler::status {
namespace json = boost::json;

namespace {

bool usable_for_new(const CardView& c) {
  return c.health && !c.cordoned && c.slots_used < c.slots_total;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) {
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  }
  return out;
}

bool contains_ci(std::string_view hay, const std::string& needle_lower) {
  return needle_lower.empty() || lower(hay).find(needle_lower) != std::string::npos;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '.')) s.remove_suffix(1);
  return s;
}

/// Percent-decoding of a query value ('+' is a space). Invalid escapes are kept as they are.
std::string url_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '+') {
      out += ' ';
    } else if (c == '%' && i + 2 < s.size()) {
      auto hex = [](char h) -> int {
        if (h >= '0' && h <= '9') return h - '0';
        if (h >= 'a' && h <= 'f') return h - 'a' + 10;
        if (h >= 'A' && h <= 'F') return h - 'A' + 10;
        return -1;
      };
      int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
      if (hi < 0 || lo < 0) {
        out += c;
      } else {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
      }
    } else {
      out += c;
    }
  }
  return out;
}

Result<size_t> parse_count(std::string_view name, std::string_view value, size_t min, size_t max) {
  size_t v = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || p != value.data() + value.size() || value.empty() || v < min || v > max) {
    return make_error("query parameter " + std::string(name) + ": \"" + std::string(value) +
                      "\" is not an integer in " + std::to_string(min) + ".." + std::to_string(max));
  }
  return v;
}

json::object ask_json(const Ask& a) {
  json::object o;
  o["container"] = a.container;
  o["gpus"] = a.gpus;
  if (a.mem_mib) o["memMiB"] = *a.mem_mib;
  if (a.mem_percent) o["memPercent"] = *a.mem_percent;
  o["cores"] = a.cores;
  return o;
}

json::object card_json(const CardView& c) {
  json::object o;
  o["uuid"] = c.uuid;
  o["index"] = c.index;
  o["type"] = c.type;
  o["mode"] = c.mode;
  o["health"] = c.health;
  o["cordoned"] = c.cordoned;
  o["memTotalMiB"] = c.mem_total_mib;
  o["memUsedMiB"] = c.mem_used_mib;
  o["coresTotal"] = c.cores_total;
  o["coresUsed"] = c.cores_used;
  o["slotsTotal"] = c.slots_total;
  o["slotsUsed"] = c.slots_used;
  o["strandedMemMiB"] = c.stranded_mem_mib;
  o["strandedCores"] = c.stranded_cores;
  json::array hs;
  for (const Holder& h : c.holders) {
    json::object ho;
    ho["namespace"] = h.ns;
    ho["pod"] = h.pod;
    ho["container"] = h.container;
    ho["containerIndex"] = h.container_index;
    ho["memMiB"] = h.mem_mib;
    ho["cores"] = h.cores;
    ho["assumed"] = h.assumed;
    hs.push_back(std::move(ho));
  }
  o["pods"] = std::move(hs);
  return o;
}

json::object node_json(const NodeView& n) {
  json::object o;
  o["name"] = n.name;
  o["registered"] = n.registered;
  o["unschedulable"] = n.unschedulable;
  if (!n.register_error.empty()) o["registerError"] = n.register_error;
  o["memTotalMiB"] = n.mem_total_mib;
  o["memUsedMiB"] = n.mem_used_mib;
  o["coresTotal"] = n.cores_total;
  o["coresUsed"] = n.cores_used;
  o["strandedMemMiB"] = n.stranded_mem_mib;
  o["strandedCores"] = n.stranded_cores;
  json::array cards;
  for (const CardView& c : n.cards) cards.push_back(card_json(c));
  o["cards"] = std::move(cards);
  return o;
}

json::array reasons_json(const std::vector<ReasonCount>& rs, const char* count_name) {
  json::array a;
  for (const ReasonCount& r : rs) {
    json::object o;
    o["reason"] = r.reason;
    o[count_name] = r.nodes;
    if (!r.detail.empty()) o["detail"] = r.detail;
    a.push_back(std::move(o));
  }
  return a;
}

double free_ratio(const NodeView& n) {
  double mem = n.mem_total_mib > 0 ? double(n.mem_total_mib - n.mem_used_mib) / double(n.mem_total_mib) : 0;
  double cores = n.cores_total > 0 ? double(n.cores_total - n.cores_used) / double(n.cores_total) : 0;
  return mem + cores;
}

}  // namespace

int64_t stranded_memory(const CardView& c) {
  if (!c.health || c.cordoned) return 0;
  int64_t free_mem = std::max<int64_t>(0, c.mem_total_mib - c.mem_used_mib);
  bool no_cores = c.cores_used >= c.cores_total;
  bool no_slots = c.slots_used >= c.slots_total;
  return (no_cores || no_slots) ? free_mem : 0;
}

int64_t stranded_cores(const CardView& c) {
  if (!c.health || c.cordoned) return 0;
  int64_t free_cores = std::max<int64_t>(0, c.cores_total - c.cores_used);
  bool no_mem = c.mem_used_mib >= c.mem_total_mib;
  bool no_slots = c.slots_used >= c.slots_total;
  return (no_mem || no_slots) ? free_cores : 0;
}

std::vector<ReasonCount> parse_fit_message(std::string_view message) {
  std::vector<ReasonCount> out;
  constexpr std::string_view kMarker = " nodes are available: ";
  size_t at = message.find(kMarker);
  if (at == std::string_view::npos) return out;
  std::string_view rest = message.substr(at + kMarker.size());
  // kube-scheduler's PostFilter tail (". preemption: ...", scheduler/preemption.h) is not a filter reason.
  if (size_t tail = rest.find(". preemption: "); tail != std::string_view::npos) rest = rest.substr(0, tail + 1);
  if (rest.ends_with('.')) rest.remove_suffix(1);
  // Entries are "<count> <reason>[ (<figures>)]" joined by ", " (scheduler/schedule.cc format_failure_message, after
  // kube-scheduler's FitError); a reason or its figures may contain ", " (a taint's text, "asks 4 cards, 2 fit"), so
  // an entry starts only at a ", " outside brackets that is followed by digits and a space.
  auto starts_entry = [&](size_t d) {
    size_t e = d;
    while (e < rest.size() && rest[e] >= '0' && rest[e] <= '9') ++e;
    return e > d && e < rest.size() && rest[e] == ' ';
  };
  std::vector<std::string_view> entries;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < rest.size(); ++i) {
    const char c = rest[i];
    if (c == '(' || c == '{' || c == '[') {
      ++depth;
    } else if ((c == ')' || c == '}' || c == ']') && depth > 0) {
      --depth;
    } else if (depth == 0 && c == ',' && i + 1 < rest.size() && rest[i + 1] == ' ' && starts_entry(i + 2)) {
      entries.push_back(rest.substr(start, i - start));
      start = i + 2;
    }
  }
  entries.push_back(rest.substr(start));
  for (std::string_view entry : entries) {
    entry = trim(entry);
    size_t sp = entry.find(' ');
    if (sp == std::string_view::npos) continue;
    size_t n = 0;
    auto [p, ec] = std::from_chars(entry.data(), entry.data() + sp, n);
    if (ec != std::errc() || p != entry.data() + sp) continue;
    std::string_view reason = trim(entry.substr(sp + 1));
    std::string_view detail;
    if (reason.ends_with(')')) {  // " (figures)": the last balanced group preceded by a space
      int d = 0;
      for (size_t i = reason.size(); i-- > 0;) {
        if (reason[i] == ')') ++d;
        if (reason[i] == '(' && --d == 0) {
          if (i > 0 && reason[i - 1] == ' ') {
            detail = reason.substr(i + 1, reason.size() - i - 2);
            reason = trim(reason.substr(0, i));
          }
          break;
        }
      }
    }
    if (!reason.empty()) out.push_back({std::string(reason), n, std::string(detail)});
  }
  return out;
}

StatusView build_view(const Snapshot& snapshot, const std::vector<PendingInput>& pending, const SchedulerState& state) {
  StatusView v;
  v.state = state;
  Summary& s = v.summary;
  v.nodes.reserve(snapshot.node_count());
  snapshot.for_each_node([&](const NodeState& n) {
    NodeView nv;
    nv.name = n.name;
    nv.registered = n.registered();
    nv.unschedulable = n.unschedulable;
    nv.register_error = n.register_error;
    nv.cards.reserve(n.cards.size());
    for (const CardState& c : n.cards) {
      if (!c.visible()) continue;
      CardView cv;
      cv.uuid = c.info.id;
      cv.index = c.info.index;
      cv.type = c.info.type;
      cv.mode = c.info.mode.empty() ? "hami-core" : c.info.mode;
      cv.health = c.info.health;
      cv.cordoned = c.cordoned;
      cv.mem_total_mib = c.info.devmem;
      cv.mem_used_mib = c.used_mem_mib;
      cv.cores_total = c.info.devcore;
      cv.cores_used = c.used_cores;
      cv.slots_total = c.info.count;
      cv.slots_used = c.used_slots;
      nv.cards.push_back(std::move(cv));
    }
    v.nodes.push_back(std::move(nv));
  });
  // Holders: every recorded pod's slots, on the card of its GPU node. The index points into v.nodes, which no
  // longer grows; a node's cards are few (8, 16), so a card is found by a scan.
  std::unordered_map<std::string_view, size_t> node_index;
  node_index.reserve(v.nodes.size());
  for (size_t ni = 0; ni < v.nodes.size(); ++ni) node_index.emplace(v.nodes[ni].name, ni);
  snapshot.for_each_pod([&](const PodRecord& p) {
    if (p.gpu_node.empty()) return;
    auto nit = node_index.find(p.gpu_node);
    if (nit == node_index.end()) return;
    const size_t ni = nit->second;
    std::vector<CardView>& node_cards = v.nodes[ni].cards;
    bool holds = false;
    for (size_t slot = 0; slot < p.devices.size(); ++slot) {
      if (slot < p.init_slots && p.init_done) continue;  // finished init containers hold nothing
      for (const ContainerDevice& d : p.devices[slot]) {
        auto cit =
            std::find_if(node_cards.begin(), node_cards.end(), [&](const CardView& c) { return c.uuid == d.uuid; });
        if (cit == node_cards.end()) continue;
        Holder h;
        h.ns = p.ns;
        h.pod = p.name;
        h.container =
            slot < p.containers.size() && !p.containers[slot].empty() ? p.containers[slot] : "#" + std::to_string(slot);
        h.container_index = slot;
        h.mem_mib = d.mem_mib;
        h.cores = d.cores;
        h.assumed = p.assumed;
        cit->holders.push_back(std::move(h));
        holds = true;
      }
    }
    s.pods_holding += holds ? 1 : 0;
  });
  std::map<std::string, TypeTotals> types;
  for (NodeView& n : v.nodes) {
    ++s.nodes;
    s.nodes_registered += n.registered ? 1 : 0;
    for (CardView& c : n.cards) {
      std::sort(c.holders.begin(), c.holders.end(), [](const Holder& a, const Holder& b) {
        return std::tie(a.ns, a.pod, a.container_index) < std::tie(b.ns, b.pod, b.container_index);
      });
      c.stranded_mem_mib = stranded_memory(c);
      c.stranded_cores = stranded_cores(c);
      n.mem_total_mib += c.mem_total_mib;
      n.mem_used_mib += c.mem_used_mib;
      n.cores_total += c.cores_total;
      n.cores_used += c.cores_used;
      n.stranded_mem_mib += c.stranded_mem_mib;
      n.stranded_cores += c.stranded_cores;
      ++s.cards;
      if (!c.health || c.cordoned) ++s.cards_unavailable;
      if (c.health && !c.cordoned && !usable_for_new(c)) ++s.cards_full;
      if (c.stranded_mem_mib > 0 || c.stranded_cores > 0) ++s.cards_stranded;
      s.slots_total += c.slots_total;
      s.slots_used += c.slots_used;
      if (n.registered && !n.unschedulable && usable_for_new(c)) {
        s.best_free_mem_mib = std::max(s.best_free_mem_mib, c.mem_total_mib - c.mem_used_mib);
        s.best_free_cores = std::max(s.best_free_cores, c.cores_total - c.cores_used);
      }
      TypeTotals& t = types[c.type];
      t.type = c.type;
      ++t.cards;
      t.mem_total_mib += c.mem_total_mib;
      t.mem_used_mib += c.mem_used_mib;
      t.cores_total += c.cores_total;
      t.cores_used += c.cores_used;
      t.stranded_mem_mib += c.stranded_mem_mib;
      t.stranded_cores += c.stranded_cores;
    }
    s.mem_total_mib += n.mem_total_mib;
    s.mem_used_mib += n.mem_used_mib;
    s.cores_total += n.cores_total;
    s.cores_used += n.cores_used;
    s.stranded_mem_mib += n.stranded_mem_mib;
    s.stranded_cores += n.stranded_cores;
  }
  for (auto& [_, t] : types) s.by_type.push_back(std::move(t));

  std::map<std::string, size_t> reasons;
  v.pending.reserve(pending.size());  // grown by doubling, up to half of it would stay unused (40,000 pods: ~7 MB)
  for (const PendingInput& in : pending) {
    PendingView p;
    p.ns = in.ns;
    p.name = in.name;
    for (const ContainerGpuRequest& c : in.gpu.containers) {
      if (c.gpus <= 0) continue;
      p.asks.push_back(Ask{c.name, c.gpus, c.mem_mib, c.mem_percent, c.cores});
    }
    p.message = in.message;
    p.reasons = parse_fit_message(in.message);
    if (!p.reasons.empty()) {
      // The reason that excluded the most nodes explains the pod best (ties: the message's order).
      p.reason = std::max_element(p.reasons.begin(), p.reasons.end(), [](const ReasonCount& a, const ReasonCount& b) {
                   return a.nodes < b.nodes;
                 })->reason;
    } else {
      p.reason = in.message.empty() ? "Waiting" : "Error";
    }
    p.age_seconds = in.since_unix > 0 && state.now_unix >= in.since_unix ? state.now_unix - in.since_unix : -1;
    ++reasons[p.reason];
    v.pending.push_back(std::move(p));
  }
  std::stable_sort(v.pending.begin(), v.pending.end(), [](const PendingView& a, const PendingView& b) {
    return std::tuple(-a.age_seconds, a.ns, a.name) < std::tuple(-b.age_seconds, b.ns, b.name);
  });
  s.pending = v.pending.size();
  for (auto& [r, n] : reasons) s.pending_reasons.push_back({r, n, {}});
  std::stable_sort(s.pending_reasons.begin(), s.pending_reasons.end(),
                   [](const ReasonCount& a, const ReasonCount& b) { return a.nodes > b.nodes; });
  return v;
}

Result<PageQuery> parse_page_query(std::string_view query) {
  PageQuery q;
  size_t pos = 0;
  while (pos <= query.size() && !query.empty()) {
    size_t amp = query.find('&', pos);
    std::string_view part = query.substr(pos, amp == std::string_view::npos ? std::string_view::npos : amp - pos);
    size_t eq = part.find('=');
    std::string_view key = part.substr(0, eq);
    std::string value = eq == std::string_view::npos ? std::string() : url_decode(part.substr(eq + 1));
    if (key == "offset") {
      auto v = parse_count(key, value, 0, std::numeric_limits<uint32_t>::max());
      if (!v) return v.error();
      q.offset = *v;
    } else if (key == "limit") {
      auto v = parse_count(key, value, 1, 1000);
      if (!v) return v.error();
      q.limit = *v;
    } else if (key == "pending_offset") {
      auto v = parse_count(key, value, 0, std::numeric_limits<uint32_t>::max());
      if (!v) return v.error();
      q.pending_offset = *v;
    } else if (key == "pending_limit") {
      auto v = parse_count(key, value, 0, 1000);
      if (!v) return v.error();
      q.pending_limit = *v;
    } else if (key == "sort") {
      if (value == "name")
        q.sort = NodeSort::name;
      else if (value == "used")
        q.sort = NodeSort::used;
      else if (value == "stranded")
        q.sort = NodeSort::stranded;
      else if (value == "free")
        q.sort = NodeSort::free;
      else
        return make_error("query parameter sort: \"" + value + "\" is not one of name, used, stranded, free");
    } else if (key == "q") {
      if (value.size() > 253) return make_error("query parameter q: longer than 253 characters");
      q.filter = value;
    }
    if (amp == std::string_view::npos) break;
    pos = amp + 1;
  }
  return q;
}

std::vector<size_t> select_nodes(const StatusView& view, const PageQuery& query) {
  std::vector<size_t> idx;
  std::string needle = lower(query.filter);
  for (size_t i = 0; i < view.nodes.size(); ++i) {
    const NodeView& n = view.nodes[i];
    bool match = contains_ci(n.name, needle);
    for (size_t c = 0; !match && c < n.cards.size(); ++c) {
      match = contains_ci(n.cards[c].type, needle) || contains_ci(n.cards[c].uuid, needle);
    }
    if (match) idx.push_back(i);
  }
  auto by = [&](auto key) {
    std::stable_sort(idx.begin(), idx.end(),
                     [&](size_t a, size_t b) { return key(view.nodes[a]) > key(view.nodes[b]); });
  };
  switch (query.sort) {
    case NodeSort::name:
      break;  // the view is in name order
    case NodeSort::used:
      by([](const NodeView& n) {
        double mem = n.mem_total_mib > 0 ? double(n.mem_used_mib) / double(n.mem_total_mib) : 0;
        double cores = n.cores_total > 0 ? double(n.cores_used) / double(n.cores_total) : 0;
        return mem + cores;
      });
      break;
    case NodeSort::stranded:
      by([](const NodeView& n) { return std::pair(n.stranded_mem_mib, n.stranded_cores); });
      break;
    case NodeSort::free:
      by([](const NodeView& n) { return free_ratio(n); });
      break;
  }
  return idx;
}

std::string render_json(const StatusView& view, const PageQuery& query) {
  json::object root;
  const SchedulerState& st = view.state;
  json::object state;
  state["source"] = st.source;
  state["schedulerEnabled"] = st.scheduler_enabled;
  state["synced"] = st.synced;
  state["leading"] = st.leading;
  state["leaderElection"] = st.leader_election;
  state["identity"] = st.identity;
  state["queueActive"] = st.queue_active;
  state["queueBackoff"] = st.queue_backoff;
  state["queueInFlight"] = st.queue_in_flight;
  state["bindsInFlight"] = st.binds_in_flight;
  state["generatedUnix"] = st.now_unix;
  root["state"] = std::move(state);

  const Summary& s = view.summary;
  json::object sum;
  sum["nodes"] = s.nodes;
  sum["nodesRegistered"] = s.nodes_registered;
  sum["cards"] = s.cards;
  sum["cardsUnavailable"] = s.cards_unavailable;
  sum["cardsFull"] = s.cards_full;
  sum["cardsStranded"] = s.cards_stranded;
  sum["memTotalMiB"] = s.mem_total_mib;
  sum["memUsedMiB"] = s.mem_used_mib;
  sum["coresTotal"] = s.cores_total;
  sum["coresUsed"] = s.cores_used;
  sum["slotsTotal"] = s.slots_total;
  sum["slotsUsed"] = s.slots_used;
  sum["strandedMemMiB"] = s.stranded_mem_mib;
  sum["strandedCores"] = s.stranded_cores;
  sum["podsHolding"] = s.pods_holding;
  sum["pending"] = s.pending;
  sum["bestFreeMemMiB"] = s.best_free_mem_mib;
  sum["bestFreeCores"] = s.best_free_cores;
  json::array types;
  for (const TypeTotals& t : s.by_type) {
    json::object o;
    o["type"] = t.type;
    o["cards"] = t.cards;
    o["memTotalMiB"] = t.mem_total_mib;
    o["memUsedMiB"] = t.mem_used_mib;
    o["coresTotal"] = t.cores_total;
    o["coresUsed"] = t.cores_used;
    o["strandedMemMiB"] = t.stranded_mem_mib;
    o["strandedCores"] = t.stranded_cores;
    types.push_back(std::move(o));
  }
  sum["byType"] = std::move(types);
  sum["pendingReasons"] = reasons_json(s.pending_reasons, "pods");
  root["summary"] = std::move(sum);

  std::vector<size_t> idx = select_nodes(view, query);
  json::object nodes;
  nodes["total"] = idx.size();
  nodes["offset"] = query.offset;
  nodes["limit"] = query.limit;
  nodes["sort"] = query.sort == NodeSort::name       ? "name"
                  : query.sort == NodeSort::used     ? "used"
                  : query.sort == NodeSort::stranded ? "stranded"
                                                     : "free";
  nodes["q"] = query.filter;
  json::array items;
  for (size_t i = query.offset; i < idx.size() && i < query.offset + query.limit; ++i) {
    items.push_back(node_json(view.nodes[idx[i]]));
  }
  nodes["items"] = std::move(items);
  root["nodes"] = std::move(nodes);

  json::object pend;
  pend["total"] = view.pending.size();
  pend["offset"] = query.pending_offset;
  pend["limit"] = query.pending_limit;
  json::array pitems;
  for (size_t i = query.pending_offset; i < view.pending.size() && i < query.pending_offset + query.pending_limit;
       ++i) {
    const PendingView& p = view.pending[i];
    json::object o;
    o["namespace"] = p.ns;
    o["name"] = p.name;
    o["reason"] = p.reason;
    o["message"] = p.message;
    o["reasons"] = reasons_json(p.reasons, "nodes");
    json::array asks;
    for (const Ask& a : p.asks) asks.push_back(ask_json(a));
    o["asks"] = std::move(asks);
    o["ageSeconds"] = p.age_seconds;
    pitems.push_back(std::move(o));
  }
  pend["items"] = std::move(pitems);
  root["pending"] = std::move(pend);
  return json::serialize(root);
}

namespace {

constexpr double kMiB = 1048576.0;

/// HAMi's normalizeCoreMetrics: ceil(allocated / total x 100), 0 when the card has no cores.
double core_ratio(int64_t total, int64_t allocated) {
  if (total <= 0) return 0;
  return std::ceil(double(allocated) / double(total) * 100.0);
}

/// A card's label values, escaped once for every series that carries them.
struct CardLabels {
  const NodeView* node;
  const CardView* card;
  std::string node_name, uuid, type, index, cores, mem_limit;
};

/// A container's slice of a card, escaped once.
struct HolderLabels {
  const CardLabels* card;
  const Holder* holder;
  std::string ns, pod, index;
};

/// Appends Prometheus text straight into one buffer: no per-family strings, no label vectors.
class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  void header(std::string_view name, std::string_view help, std::string_view type = "gauge") {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }
  /// name{ ... the caller appends labels with label() ... } value
  void begin(std::string_view name) {
    out_ += name;
    out_ += '{';
    first_ = true;
  }
  void label(std::string_view key, std::string_view escaped_value) {
    if (!first_) out_ += ',';
    first_ = false;
    out_ += key;
    out_ += "=\"";
    out_ += escaped_value;
    out_ += '"';
  }
  void end(double value) {
    out_ += "} ";
    out_ += metrics::format_value(value);
    out_ += '\n';
  }

 private:
  std::string& out_;
  bool first_ = true;
};

void histogram(std::string& out, const std::string& name, std::string_view help, const std::vector<double>& bounds,
               const std::vector<double>& values) {
  out += "# HELP " + name + " " + std::string(help) + "\n# TYPE " + name + " histogram\n";
  double sum = 0;
  for (double v : values) sum += v;
  for (double b : bounds) {
    size_t n = 0;
    for (double v : values) n += v <= b ? 1 : 0;
    out += name + "_bucket{le=\"" + metrics::format_value(b) + "\"} " + std::to_string(n) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(values.size()) + "\n";
  out += name + "_sum " + metrics::format_value(sum) + "\n";
  out += name + "_count " + std::to_string(values.size()) + "\n";
}

}  // namespace

void append_hami_metrics(std::string& out, const StatusView& view, bool legacy) {
  constexpr std::string_view zone = "vGPU";
  std::vector<CardLabels> cards;
  std::vector<HolderLabels> holders;
  for (const NodeView& n : view.nodes) {
    const std::string node_name = metrics::escape_label_value(n.name);
    for (const CardView& c : n.cards) {
      cards.push_back({&n, &c, node_name, metrics::escape_label_value(c.uuid), metrics::escape_label_value(c.type),
                       std::to_string(c.index), std::to_string(c.cores_total), std::to_string(c.mem_total_mib)});
    }
  }
  for (const CardLabels& cl : cards) {
    for (const Holder& h : cl.card->holders) {
      holders.push_back({&cl, &h, metrics::escape_label_value(h.ns), metrics::escape_label_value(h.pod),
                         std::to_string(h.container_index)});
    }
  }
  // About 190 bytes a sample: 7 card series (+7 legacy) and 2 stranded per card, 2 (+2) per container.
  out.reserve(out.size() + 4096 + cards.size() * 190 * (legacy ? 16 : 9) + holders.size() * 200 * (legacy ? 4 : 2));
  Writer w(out);
  // HAMi's card series: labels in the order client_golang writes them (sorted by name).
  auto card_series = [&](std::string_view name, std::string_view help, auto&& labels, auto&& value,
                         bool (*when)(const CardView&) = nullptr) {
    if (cards.empty()) return;
    w.header(name, help);
    for (const CardLabels& cl : cards) {
      if (when != nullptr && !when(*cl.card)) continue;
      w.begin(name);
      labels(cl);
      w.end(value(*cl.card));
    }
  };
  auto card5 = [&](const CardLabels& cl) {  // device_index, device_type, device_uuid, node, zone
    w.label("device_index", cl.index);
    w.label("device_type", cl.type);
    w.label("device_uuid", cl.uuid);
    w.label("node", cl.node_name);
    w.label("zone", zone);
  };
  auto with_cores = [&](const CardLabels& cl) {
    w.label("device_cores", cl.cores);
    card5(cl);
  };
  auto overview = [&](const CardLabels& cl) {
    w.label("device_cores", cl.cores);
    w.label("device_index", cl.index);
    w.label("device_memory_limit", cl.mem_limit);
    w.label("device_type", cl.type);
    w.label("device_uuid", cl.uuid);
    w.label("node", cl.node_name);
    w.label("zone", zone);
  };
  auto pct_labels = [&](const CardLabels& cl) {
    w.label("device_index", cl.index);
    w.label("device_uuid", cl.uuid);
    w.label("node", cl.node_name);
    w.label("zone", zone);
  };
  auto has_memory = [](const CardView& c) { return c.mem_total_mib > 0; };
  auto mem_used = [](const CardView& c) { return double(c.mem_used_mib) * kMiB; };
  card_series("hami_gpu_memory_limit_bytes", "Device memory limit for a certain GPU", card5,
              [](const CardView& c) { return double(c.mem_total_mib) * kMiB; });
  card_series("hami_gpu_core_limit_ratio", "Device core limit for a certain GPU", card5,
              [](const CardView& c) { return c.cores_total > 0 ? 100.0 : 0.0; });
  card_series("hami_gpu_memory_allocated_bytes", "Device memory allocated for a certain GPU", with_cores, mem_used);
  card_series("hami_gpu_shared_count", "Number of containers sharing this GPU", card5,
              [](const CardView& c) { return double(c.slots_used); });
  card_series("hami_gpu_core_allocated_ratio", "Device core allocated for a certain GPU", card5,
              [](const CardView& c) { return core_ratio(c.cores_total, c.cores_used); });
  card_series("hami_node_gpu_overview", "GPU overview on a certain node", overview, mem_used);
  card_series(
      "hami_node_gpu_memory_allocated_ratio", "GPU Memory Allocated Percentage on a certain GPU", pct_labels,
      [](const CardView& c) { return double(c.mem_used_mib) / double(c.mem_total_mib); }, has_memory);
  auto holder_series = [&](std::string_view name, std::string_view help, auto&& labels, auto&& value) {
    if (holders.empty()) return;
    w.header(name, help);
    for (const HolderLabels& hl : holders) {
      w.begin(name);
      labels(hl);
      w.end(value(hl));
    }
  };
  auto ctr_labels = [&](const HolderLabels& hl) {
    w.label("container_index", hl.index);
    w.label("device_uuid", hl.card->uuid);
    w.label("namespace", hl.ns);
    w.label("node", hl.card->node_name);
    w.label("pod", hl.pod);
    w.label("zone", zone);
  };
  auto ctr_mem = [](const HolderLabels& hl) { return double(hl.holder->mem_mib) * kMiB; };
  holder_series("hami_vgpu_memory_allocated_bytes", "vGPU memory allocated from a container", ctr_labels, ctr_mem);
  holder_series("hami_vgpu_core_allocated_ratio", "vGPU core allocated from a container", ctr_labels,
                [](const HolderLabels& hl) { return core_ratio(hl.card->card->cores_total, hl.holder->cores); });
  if (legacy) {
    // HAMi's pre-2.8 names (its LegacyMetrics setting): the same values, except the cores as raw counts.
    auto l_card5 = [&](const CardLabels& cl) {  // deviceidx, devicetype, deviceuuid, nodeid, zone
      w.label("deviceidx", cl.index);
      w.label("devicetype", cl.type);
      w.label("deviceuuid", cl.uuid);
      w.label("nodeid", cl.node_name);
      w.label("zone", zone);
    };
    auto l_with_cores = [&](const CardLabels& cl) {
      w.label("devicecores", cl.cores);
      l_card5(cl);
    };
    auto l_overview = [&](const CardLabels& cl) {
      w.label("devicecores", cl.cores);
      w.label("deviceidx", cl.index);
      w.label("devicememorylimit", cl.mem_limit);
      w.label("devicetype", cl.type);
      w.label("deviceuuid", cl.uuid);
      w.label("nodeid", cl.node_name);
      w.label("zone", zone);
    };
    auto l_pct = [&](const CardLabels& cl) {
      w.label("deviceidx", cl.index);
      w.label("deviceuuid", cl.uuid);
      w.label("nodeid", cl.node_name);
      w.label("zone", zone);
    };
    card_series("GPUDeviceMemoryLimit", "Device memory limit for a certain GPU", l_card5,
                [](const CardView& c) { return double(c.mem_total_mib) * kMiB; });
    card_series("GPUDeviceCoreLimit", "Device memory core limit for a certain GPU", l_card5,
                [](const CardView& c) { return double(c.cores_total); });
    card_series("GPUDeviceMemoryAllocated", "Device memory allocated for a certain GPU", l_with_cores, mem_used);
    card_series("GPUDeviceSharedNum", "Number of containers sharing this GPU", l_card5,
                [](const CardView& c) { return double(c.slots_used); });
    card_series("GPUDeviceCoreAllocated", "Device core allocated for a certain GPU", l_card5,
                [](const CardView& c) { return double(c.cores_used); });
    card_series("nodeGPUOverview", "GPU overview on a certain node", l_overview, mem_used);
    card_series(
        "nodeGPUMemoryPercentage", "GPU Memory Allocated Percentage on a certain GPU", l_pct,
        [](const CardView& c) { return double(c.mem_used_mib) / double(c.mem_total_mib); }, has_memory);
    auto l_ctr = [&](const HolderLabels& hl) {
      w.label("containeridx", hl.index);
      w.label("deviceuuid", hl.card->uuid);
      w.label("nodename", hl.card->node_name);
      w.label("podname", hl.pod);
      w.label("podnamespace", hl.ns);
      w.label("zone", zone);
    };
    holder_series("vGPUMemoryAllocated", "vGPU memory allocated from a container", l_ctr, ctr_mem);
    holder_series("vGPUCoreAllocated", "vGPU core allocated from a container", l_ctr,
                  [](const HolderLabels& hl) { return double(hl.holder->cores); });
  }
  auto stranded_labels = [&](const CardLabels& cl) {
    w.label("device_type", cl.type);
    w.label("device_uuid", cl.uuid);
    w.label("node", cl.node_name);
  };
  card_series("gpuslice_scheduler_card_stranded_memory_bytes",
              "Free memory on a card that can take no new container (its cores or slots are gone).", stranded_labels,
              [](const CardView& c) { return double(c.stranded_mem_mib) * kMiB; });
  card_series("gpuslice_scheduler_card_stranded_cores",
              "Free cores (percent) on a card that can take no new container (its memory or slots are gone).",
              stranded_labels, [](const CardView& c) { return double(c.stranded_cores); });
  if (!view.summary.pending_reasons.empty()) {
    w.header("gpuslice_scheduler_pending_gpu_pods", "Pending GPU pods by their main unschedulable reason.");
    for (const ReasonCount& r : view.summary.pending_reasons) {
      w.begin("gpuslice_scheduler_pending_gpu_pods");
      w.label("reason", metrics::escape_label_value(r.reason));
      w.end(double(r.nodes));
    }
  }
  // Histograms over the cards at scrape time: how stranded capacity is distributed across the fleet.
  std::vector<double> stranded_values, stranded_core_values;
  stranded_values.reserve(cards.size());
  stranded_core_values.reserve(cards.size());
  for (const CardLabels& cl : cards) {
    stranded_values.push_back(double(cl.card->stranded_mem_mib) * kMiB);
    stranded_core_values.push_back(double(cl.card->stranded_cores));
  }
  histogram(out, "gpuslice_scheduler_stranded_memory_per_card_bytes",
            "Distribution over cards of stranded free memory (see gpuslice_scheduler_card_stranded_memory_bytes).",
            {0, 1024 * kMiB, 4096 * kMiB, 8192 * kMiB, 16384 * kMiB, 32768 * kMiB, 65536 * kMiB}, stranded_values);
  histogram(out, "gpuslice_scheduler_stranded_cores_per_card",
            "Distribution over cards of stranded free cores (percent of a card).", {0, 5, 10, 25, 50, 75, 100},
            stranded_core_values);
}

std::string render_hami_metrics(const StatusView& view, bool legacy) {
  std::string out;
  append_hami_metrics(out, view, legacy);
  return out;
}

std::string render_page(std::string_view initial_json) {
  constexpr std::string_view kPlaceholder = "/*GPUSLICE_INITIAL_JSON*/";
  std::string_view page = page_asset();
  size_t at = page.find(kPlaceholder);
  if (at == std::string_view::npos) return std::string(page);
  std::string out;
  out.reserve(page.size() + initial_json.size() + initial_json.size() / 16);
  out.append(page.substr(0, at));
  for (char c : initial_json) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  out.append(page.substr(at + kPlaceholder.size()));
  return out;
}

Page status_response(bool json, std::string_view query, const StatusView* view, std::string_view why) {
  auto q = parse_page_query(query);
  if (!q) {
    return {400, "text/plain; charset=utf-8", "400 bad request: " + q.message() + "\n"};
  }
  if (view == nullptr) {
    return {503, "text/plain; charset=utf-8", "503 service unavailable: " + std::string(why) + "\n"};
  }
  std::string body = render_json(*view, *q);
  if (json) {
    return {200, "application/json", std::move(body)};
  }
  return {200, "text/html; charset=utf-8", render_page(body)};
}

}  // namespace gpuslice::scheduler::status
