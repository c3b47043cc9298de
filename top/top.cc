// `gpuslice top`'s pure half (top/top.h): the status view from listed Nodes and Pods, and its terminal tables.
#include "top/top.h"

#include "common/json_access.h"
#include "common/rfc3339.h"
#include "scheduler/allocation.h"
#include "scheduler/pod_info.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <tuple>

namespace gpuslice::top {
namespace json = boost::json;
using namespace scheduler::status;
using scheduler::kVgpuNodeAnnotation;
using scheduler::parse_pod;
using scheduler::Snapshot;

namespace {

const json::object* obj(const json::object& o, std::string_view key) {
  return object_at(o, key);
}
std::string str(const json::object& o, std::string_view key) {
  return string_at(o, key);
}

/// metadata.creationTimestamp as unix seconds; 0 when absent or not RFC 3339.
int64_t created_unix(const json::object& meta) {
  auto t = parse_rfc3339(string_view_at(meta, "creationTimestamp"));
  return t ? std::chrono::duration_cast<std::chrono::seconds>(t->time_since_epoch()).count() : 0;
}

std::string scheduled_false_message(const json::object& pod) {
  const json::object* status = obj(pod, "status");
  const json::array* conds = status ? array_at(*status, "conditions") : nullptr;
  for (const json::value& c : conds ? *conds : json::array{}) {
    if (!c.is_object()) continue;
    const json::object& o = c.get_object();
    if (str(o, "type") == "PodScheduled" && str(o, "status") == "False") {
      return str(o, "message");
    }
  }
  return {};
}

bool has_annotation(const json::object& meta, std::string_view key) {
  const json::object* ann = obj(meta, "annotations");
  return ann != nullptr && ann->contains(key);
}

/// A fixed-width text table: columns padded to their widest cell; the last column is not padded.
class Table {
 public:
  explicit Table(std::vector<std::string> head) { rows_.push_back(std::move(head)); }
  void row(std::vector<std::string> r) { rows_.push_back(std::move(r)); }
  std::string str() const {
    std::vector<size_t> w;
    for (const auto& r : rows_) {
      if (w.size() < r.size()) w.resize(r.size(), 0);
      for (size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
    }
    std::string out;
    for (const auto& r : rows_) {
      std::string line;
      for (size_t i = 0; i < r.size(); ++i) {
        line += r[i];
        if (i + 1 < r.size()) line += std::string(w[i] - r[i].size() + 2, ' ');
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
    return out;
  }
  size_t rows() const { return rows_.size() - 1; }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string frac(int64_t a, int64_t b) {
  return std::to_string(a) + "/" + std::to_string(b);
}

std::string percent(int64_t a, int64_t b) {
  return b > 0 ? std::to_string(a * 100 / b) + "%" : "-";
}

/// "[######....]": 10 cells of used over total.
std::string bar(int64_t used, int64_t total) {
  int cells = total > 0 ? static_cast<int>(std::clamp<int64_t>((used * 10 + total / 2) / total, 0, 10)) : 0;
  return "[" + std::string(static_cast<size_t>(cells), '#') + std::string(static_cast<size_t>(10 - cells), '.') + "]";
}

std::string stranded_text(int64_t mem, int64_t cores) {
  if (mem == 0 && cores == 0) return "-";
  return std::to_string(mem) + " MiB, " + std::to_string(cores) + "%";
}

std::string age_text(int64_t s) {
  if (s < 0) return "?";
  if (s < 120) return std::to_string(s) + "s";
  if (s < 7200) return std::to_string(s / 60) + "m";
  if (s < 172800) return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d";
}

std::string ask_text(const std::vector<Ask>& asks) {
  std::string out;
  for (const Ask& a : asks) {
    if (!out.empty()) out += "; ";
    out += std::to_string(a.gpus) + " GPU x ";
    out += a.mem_mib       ? std::to_string(*a.mem_mib) + " MiB"
           : a.mem_percent ? std::to_string(*a.mem_percent) + "% mem"
                           : "all mem";
    out += ", " + std::to_string(a.cores) + "% cores";
  }
  return out.empty() ? "-" : out;
}

}  // namespace

StatusView build_view_from_objects(const std::vector<json::object>& nodes, const std::vector<json::object>& pods,
                                   const DeviceConfig& devices, std::string_view scheduler_name, int64_t now_unix,
                                   std::vector<std::string>* warnings) {
  Snapshot snap(devices);
  for (const json::object& n : nodes) {
    if (auto st = snap.upsert_node(n); !st.ok() && warnings) warnings->push_back(st.message());
  }
  std::vector<PendingInput> pending;
  for (const json::object& p : pods) {
    if (auto st = snap.upsert_pod(p); !st.ok() && warnings) warnings->push_back(st.message());
    const json::object* meta = obj(p, "metadata");
    const json::object* spec = obj(p, "spec");
    const json::object* status = obj(p, "status");
    if (meta == nullptr || spec == nullptr) continue;
    std::string phase = status ? str(*status, "phase") : std::string();
    if (str(*spec, "schedulerName") != scheduler_name || !str(*spec, "nodeName").empty() ||
        meta->contains("deletionTimestamp") || has_annotation(*meta, kVgpuNodeAnnotation) || phase == "Succeeded" ||
        phase == "Failed") {
      continue;
    }
    PendingInput in;
    in.ns = str(*meta, "namespace");
    in.name = str(*meta, "name");
    auto info = parse_pod(p, devices);
    if (info.ok()) {
      if (!info.value().gpu.any()) continue;
      in.gpu = info.value().gpu;
    }
    in.message = scheduled_false_message(p);
    if (!info.ok() && in.message.empty()) in.message = info.message();
    in.since_unix = created_unix(*meta);
    pending.push_back(std::move(in));
  }
  SchedulerState st;
  st.source = "api";
  st.synced = true;
  st.now_unix = now_unix;
  return build_view(snap, pending, st);
}

Result<TopView> parse_top_view(std::string_view t) {
  if (t == "all" || t.empty()) return TopView::all;
  if (t == "nodes" || t == "node" || t == "no") return TopView::nodes;
  if (t == "cards" || t == "card" || t == "gpus" || t == "gpu") return TopView::cards;
  if (t == "pods" || t == "pod" || t == "po") return TopView::pods;
  if (t == "pending") return TopView::pending;
  return make_error("view \"" + std::string(t) + "\": not one of all, nodes, cards, pods, pending");
}

Result<NodeSort> parse_sort(std::string_view t) {
  if (t == "name") return NodeSort::name;
  if (t == "used") return NodeSort::used;
  if (t == "free") return NodeSort::free;
  if (t == "stranded") return NodeSort::stranded;
  return make_error("--sort: \"" + std::string(t) + "\": not one of name, used, free, stranded");
}

std::string render_top(const StatusView& v, TopView what, bool wide, NodeSort sort) {
  PageQuery q;
  q.sort = sort;
  q.limit = v.nodes.size();
  std::vector<size_t> order = select_nodes(v, q);
  std::string out;
  auto section = [&](const std::string& title, const Table& t) {
    if (!out.empty()) out += "\n";
    out += title + "\n";
    out += t.rows() > 0 ? t.str() : "(none)\n";
  };
  const bool all = what == TopView::all;
  if (all || what == TopView::nodes) {
    std::vector<std::string> head{"NODE", "CARDS", "MEMORY(MiB)", "MEM%", "CORES", "CORES%", "PODS", "STRANDED"};
    if (wide) head.insert(head.end(), {"REGISTERED", "SCHEDULABLE"});
    Table t(head);
    for (size_t i : order) {
      const NodeView& n = v.nodes[i];
      std::set<std::pair<std::string, std::string>> pods;
      for (const CardView& c : n.cards)
        for (const Holder& h : c.holders) pods.emplace(h.ns, h.pod);
      std::vector<std::string> r{n.name,
                                 std::to_string(n.cards.size()),
                                 frac(n.mem_used_mib, n.mem_total_mib),
                                 percent(n.mem_used_mib, n.mem_total_mib),
                                 frac(n.cores_used, n.cores_total),
                                 percent(n.cores_used, n.cores_total),
                                 std::to_string(pods.size()),
                                 stranded_text(n.stranded_mem_mib, n.stranded_cores)};
      if (wide) {
        r.push_back(n.registered ? "yes" : n.register_error.empty() ? "no" : "no: " + n.register_error);
        r.push_back(n.unschedulable ? "no" : "yes");
      }
      t.row(std::move(r));
    }
    const Summary& s = v.summary;
    section("NODES (" + std::to_string(s.nodes) + ", " + std::to_string(s.cards) + " cards, memory " +
                frac(s.mem_used_mib, s.mem_total_mib) + " MiB, cores " + frac(s.cores_used, s.cores_total) +
                ", stranded " + stranded_text(s.stranded_mem_mib, s.stranded_cores) + ")",
            t);
  }
  if (all || what == TopView::cards) {
    std::vector<std::string> head{"NODE", "CARD", "TYPE", "MEMORY(MiB)", "", "CORES", "PODS", "STRANDED"};
    if (wide) head.insert(head.end(), {"SLOTS", "MODE", "HEALTH", "UUID"});
    Table t(head);
    for (size_t i : order) {
      const NodeView& n = v.nodes[i];
      for (const CardView& c : n.cards) {
        std::set<std::pair<std::string, std::string>> pods;
        for (const Holder& h : c.holders) pods.emplace(h.ns, h.pod);
        std::vector<std::string> r{n.name,
                                   std::to_string(c.index),
                                   c.type,
                                   frac(c.mem_used_mib, c.mem_total_mib),
                                   bar(c.mem_used_mib, c.mem_total_mib),
                                   frac(c.cores_used, c.cores_total),
                                   std::to_string(pods.size()),
                                   stranded_text(c.stranded_mem_mib, c.stranded_cores)};
        if (wide) {
          r.push_back(frac(c.slots_used, c.slots_total));
          r.push_back(c.mode);
          r.push_back(!c.health ? "unhealthy" : c.cordoned ? "cordoned" : "ok");
          r.push_back(c.uuid);
        }
        t.row(std::move(r));
      }
    }
    section("CARDS", t);
  }
  if (all || what == TopView::pods) {
    std::vector<std::string> head{"NAMESPACE", "POD", "CONTAINER", "NODE", "CARD", "MiB", "CORES%"};
    if (wide) head.insert(head.end(), {"STATE", "UUID"});
    struct Row {
      const Holder* h;
      const NodeView* n;
      const CardView* c;
    };
    std::vector<Row> rows;
    for (const NodeView& n : v.nodes)
      for (const CardView& c : n.cards)
        for (const Holder& h : c.holders) rows.push_back({&h, &n, &c});
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
      return std::tie(a.h->ns, a.h->pod, a.h->container_index, a.c->uuid) <
             std::tie(b.h->ns, b.h->pod, b.h->container_index, b.c->uuid);
    });
    Table t(head);
    for (const Row& r : rows) {
      std::vector<std::string> cells{r.h->ns,
                                     r.h->pod,
                                     r.h->container,
                                     r.n->name,
                                     std::to_string(r.c->index),
                                     std::to_string(r.h->mem_mib),
                                     std::to_string(r.h->cores)};
      if (wide) {
        cells.push_back(r.h->assumed ? "binding" : "allocated");
        cells.push_back(r.c->uuid);
      }
      t.row(std::move(cells));
    }
    section("PODS", t);
  }
  if (all || what == TopView::pending) {
    std::vector<std::string> head{"NAMESPACE", "POD", "REASON", "ASKS", "AGE"};
    if (wide) head.push_back("MESSAGE");
    Table t(head);
    for (const PendingView& p : v.pending) {
      std::vector<std::string> r{p.ns, p.name, p.reason, ask_text(p.asks), age_text(p.age_seconds)};
      if (wide) r.push_back(p.message.empty() ? "-" : p.message);
      t.row(std::move(r));
    }
    section("PENDING (" + std::to_string(v.pending.size()) + "; largest free card " +
                std::to_string(v.summary.best_free_mem_mib) + " MiB, " + std::to_string(v.summary.best_free_cores) +
                "% cores)",
            t);
  }
  return out;
}

}  // namespace gpuslice::top
