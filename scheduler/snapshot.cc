#include "scheduler/snapshot.h"

#include "common/json_access.h"
#include "common/quantity.h"

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <bit>
#include <limits>

namespace gpuslice::scheduler {
namespace json = boost::json;

// ---------------------------------------------------------------------------------------------------------------
// Free-capacity index. Every node sits in one bucket keyed by (max free memory of a usable card, log2 buckets;
// max free cores of a usable card, steps of 10; usable card count, capped at 8). Inside a bucket nodes are ordered
// by (node score, name). A query walks only the buckets whose upper bounds can satisfy it and merges them in
// node-policy order, so nodes that cannot fit are never looked at.
// ---------------------------------------------------------------------------------------------------------------
namespace {

constexpr int kMemBuckets = 20;   // 0: <1 MiB; b in 1..18: [2^(b-1), 2^b - 1]; 19: >= 2^18 MiB
constexpr int kCoreBuckets = 12;  // 0: <=0; b in 1..10: [10(b-1)+1, 10b]; 11: > 100
constexpr int kCardBuckets = 9;   // usable cards, 8 means 8 or more

int mem_bucket(int64_t v) {
  if (v < 1) {
    return 0;
  }
  int b = std::bit_width(static_cast<uint64_t>(v));
  return std::min(b, kMemBuckets - 1);
}
int64_t mem_bucket_hi(int b) {
  if (b == 0) {
    return 0;
  }
  if (b == kMemBuckets - 1) {
    return std::numeric_limits<int64_t>::max();
  }
  return (int64_t(1) << b) - 1;
}
int core_bucket(int64_t v) {
  if (v <= 0) {
    return 0;
  }
  return static_cast<int>(std::min<int64_t>(1 + (v - 1) / 10, kCoreBuckets - 1));
}
int64_t core_bucket_hi(int b) {
  if (b == kCoreBuckets - 1) {
    return std::numeric_limits<int64_t>::max();
  }
  return int64_t(b) * 10;
}

// The node's capacity summary rides in the key, so the walk needs no lookup per node.
struct Key {
  double score;
  const std::string* name;
  const NodeState* node;
  int64_t max_free_mem = 0;
  int64_t max_free_cores = 0;
  int64_t usable = 0;
};
struct ScoreOnly {
  double score;
};
struct KeyLess {
  using is_transparent = void;
  bool operator()(const Key& a, const Key& b) const {
    if (a.score != b.score) {
      return a.score < b.score;
    }
    return *a.name < *b.name;
  }
  bool operator()(const Key& a, ScoreOnly b) const { return a.score < b.score; }
  bool operator()(ScoreOnly a, const Key& b) const { return a.score < b.score; }
};
using Bucket = std::set<Key, KeyLess>;

}  // namespace

struct Snapshot::Index {
  struct Entry {
    int bucket = 0;
    double score = 0;
    int64_t max_free_mem = 0;
    int64_t max_free_cores = 0;
    int64_t usable = 0;
  };
  std::map<int, Bucket> buckets;  // non-empty only
  std::unordered_map<const NodeState*, Entry> entries;

  static int bucket_id(int mb, int cb, int nb) { return (mb * kCoreBuckets + cb) * kCardBuckets + nb; }
};

// One bucket walked in node-policy order. Descending order keeps names ascending within equal scores, so both
// policies break ties the same way.
class BucketCursor {
 public:
  BucketCursor(const Bucket* b, bool desc) : b_(b), desc_(desc) {
    if (!desc_) {
      it_ = b_->begin();
      done_ = it_ == b_->end();
    } else {
      start_group_before(b_->end());
    }
  }
  bool done() const { return done_; }
  const Key& head() const { return *it_; }
  void advance() {
    ++it_;
    if (!desc_) {
      done_ = it_ == b_->end();
    } else if (it_ == group_end_) {
      start_group_before(group_begin_);
    }
  }

 private:
  void start_group_before(Bucket::const_iterator pos) {
    if (pos == b_->begin()) {
      done_ = true;
      return;
    }
    double s = std::prev(pos)->score;
    group_begin_ = b_->lower_bound(ScoreOnly{s});
    group_end_ = pos;
    it_ = group_begin_;
    done_ = false;
  }

  const Bucket* b_;
  bool desc_;
  bool done_ = true;
  Bucket::const_iterator it_, group_begin_, group_end_;
};

// ---------------------------------------------------------------------------------------------------------------

bool CardState::usable() const {
  return visible() && info.health && !cordoned && used_slots < info.count;
}

const CardState* NodeState::find_card(std::string_view uuid) const {
  for (const CardState& c : cards) {
    if (c.info.id == uuid) {
      return &c;
    }
  }
  return nullptr;
}

double node_score(const NodeState& node) {
  int64_t used = 0, count = 0, used_cores = 0, total_cores = 0, used_mem = 0, total_mem = 0;
  for (const CardState& c : node.cards) {
    if (!c.visible()) {
      continue;
    }
    used += c.used_slots;
    count += c.info.count;
    used_cores += c.used_cores;
    total_cores += c.info.devcore;
    used_mem += c.used_mem_mib;
    total_mem += c.info.devmem;
  }
  double s = 0;
  if (count > 0) {
    s += static_cast<double>(used) / static_cast<double>(count);
  }
  if (total_cores > 0) {
    s += static_cast<double>(used_cores) / static_cast<double>(total_cores);
  }
  if (total_mem > 0) {
    s += static_cast<double>(used_mem) / static_cast<double>(total_mem);
  }
  return 10 * s;
}

namespace {

std::string value_text(const json::value& v) {
  return v.is_string() ? std::string(v.get_string()) : json::serialize(v);
}

struct CardUsage {
  std::string_view uuid;
  int64_t mem = 0;
  int64_t cores = 0;
  int64_t slots = 0;
};

// Per card: max(largest init container, sum of app containers) of memory and cores; one slot per app entry,
// and one for a card only init containers use, until they are done (hami-protocol.md §4, init containers).
std::vector<CardUsage> card_usage(const PodRecord& rec) {
  std::vector<CardUsage> out;
  auto find = [&](std::string_view uuid) -> CardUsage& {
    for (CardUsage& u : out) {
      if (u.uuid == uuid) {
        return u;
      }
    }
    out.push_back(CardUsage{uuid});
    return out.back();
  };
  // App containers first (sums), then raise by each init container.
  for (size_t s = rec.init_slots; s < rec.devices.size(); ++s) {
    for (const ContainerDevice& d : rec.devices[s]) {
      CardUsage& u = find(d.uuid);
      u.mem += d.mem_mib;
      u.cores += d.cores;
      u.slots += 1;
    }
  }
  if (!rec.init_done) {
    for (size_t s = 0; s < rec.init_slots && s < rec.devices.size(); ++s) {
      for (const ContainerDevice& d : rec.devices[s]) {
        CardUsage& u = find(d.uuid);
        u.mem = std::max(u.mem, d.mem_mib);
        u.cores = std::max(u.cores, d.cores);
        // A card used only by init containers still holds one time-slicing slot while they run: HAMi v2.10
        // folds a pod's usage per card with slots = max(init ? 1 : 0, app entries, 1) and getNodesUsage adds
        // max(Slots, 1) to Used (pkg/scheduler/pods.go, pkg/scheduler/scheduler.go).
        u.slots = std::max<int64_t>(u.slots, 1);
      }
    }
  }
  return out;
}

QuotaAmounts quota_charge(const PodDevices& devices, size_t init_slots, bool init_done) {
  QuotaAmounts app, init;
  for (size_t s = 0; s < devices.size(); ++s) {
    QuotaAmounts slot;
    for (const ContainerDevice& d : devices[s]) {
      slot.mem_mib += d.mem_mib;
      slot.cores += d.cores;
      slot.gpus += 1;
    }
    if (s < init_slots) {
      init.mem_mib = std::max(init.mem_mib, slot.mem_mib);
      init.cores = std::max(init.cores, slot.cores);
      init.gpus = std::max(init.gpus, slot.gpus);
    } else {
      app.mem_mib += slot.mem_mib;
      app.cores += slot.cores;
      app.gpus += slot.gpus;
    }
  }
  if (init_done) {
    return app;
  }
  return QuotaAmounts{std::max(app.mem_mib, init.mem_mib), std::max(app.cores, init.cores),
                      std::max(app.gpus, init.gpus)};
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------

Snapshot::Snapshot(DeviceConfig devices) : devices_(std::move(devices)), index_(std::make_unique<Index>()) {}
Snapshot::~Snapshot() = default;
Snapshot::Snapshot(Snapshot&&) noexcept = default;
Snapshot& Snapshot::operator=(Snapshot&&) noexcept = default;

void Snapshot::unindex(const NodeState& node) {
  auto it = index_->entries.find(&node);
  if (it == index_->entries.end()) {
    return;
  }
  auto b = index_->buckets.find(it->second.bucket);
  if (b != index_->buckets.end()) {
    b->second.erase(Key{it->second.score, &node.name, &node});
    if (b->second.empty()) {
      index_->buckets.erase(b);
    }
  }
  index_->entries.erase(it);
}

void Snapshot::reindex(NodeState& node) {
  unindex(node);
  node.score = node_score(node);
  Index::Entry e;
  e.score = node.score;
  for (const CardState& c : node.cards) {
    if (!c.usable()) {
      continue;
    }
    if (e.usable == 0) {
      e.max_free_mem = c.free_mem_mib();
      e.max_free_cores = c.free_cores();
    } else {
      e.max_free_mem = std::max(e.max_free_mem, c.free_mem_mib());
      e.max_free_cores = std::max(e.max_free_cores, c.free_cores());
    }
    ++e.usable;
  }
  e.bucket = Index::bucket_id(mem_bucket(e.max_free_mem), core_bucket(e.max_free_cores),
                              static_cast<int>(std::min<int64_t>(e.usable, kCardBuckets - 1)));
  index_->buckets[e.bucket].insert(Key{e.score, &node.name, &node, e.max_free_mem, e.max_free_cores, e.usable});
  index_->entries.emplace(&node, e);
}

void Snapshot::apply_cards(NodeState& node, const PodRecord& rec, int sign) {
  for (const CardUsage& u : card_usage(rec)) {
    for (CardState& c : node.cards) {
      if (c.info.id == u.uuid) {
        c.used_mem_mib += sign * u.mem;
        c.used_cores += sign * u.cores;
        c.used_slots += sign * u.slots;
        break;
      }
    }
  }
}

void Snapshot::apply(const PodRecord& rec, int sign) {
  if (!rec.node.empty()) {
    if (auto it = nodes_.find(rec.node); it != nodes_.end()) {
      NodeState& n = it->second;
      n.requested.cpu_milli += sign * rec.requests.cpu_milli;
      n.requested.memory_bytes += sign * rec.requests.memory_bytes;
      n.requested.ephemeral_bytes += sign * rec.requests.ephemeral_bytes;
      if (rec.facts) {
        n.nonzero_requested.cpu_milli += sign * rec.facts->nonzero_cpu_milli;
        n.nonzero_requested.memory_bytes += sign * rec.facts->nonzero_memory_bytes;
      }
      n.pod_count += sign;  // cpu/memory/pods are not in the index: no reindex needed
    }
  }
  if (!rec.gpu_node.empty()) {
    if (auto it = nodes_.find(rec.gpu_node); it != nodes_.end()) {
      apply_cards(it->second, rec, sign);
      reindex(it->second);
    }
    QuotaAmounts& q = quota_used_[rec.ns];
    q.mem_mib += sign * rec.quota.mem_mib;
    q.cores += sign * rec.quota.cores;
    q.gpus += sign * rec.quota.gpus;
  }
}

void Snapshot::store(std::string key, PodRecord rec) {
  erase(key);
  apply(rec, +1);
  if (rec.facts && !rec.facts->anti_affinity().empty()) {
    anti_affinity_pods_.insert(key);
  }
  if (rec.facts && rec.facts->has_affinity_score_terms()) {
    affinity_term_pods_.insert(key);
  }
  auto it = pods_.emplace(std::move(key), std::move(rec)).first;
  const PodEntry* entry = &*it;
  if (!it->second.node.empty()) {
    pods_by_node_[it->second.node].insert(entry);
  }
  if (!it->second.gpu_node.empty()) {
    pods_by_node_[it->second.gpu_node].insert(entry);
  }
  link(it->second);
}

namespace {
std::string label_index_key(std::string_view key, std::string_view value) {
  std::string k;
  k.reserve(key.size() + 1 + value.size());
  k.append(key).push_back('\0');
  k.append(value);
  return k;
}

void unlink_from(std::unordered_map<std::string, std::unordered_set<const PodRecord*>>& lists, const std::string& k,
                 const PodRecord* rec) {
  auto it = lists.find(k);
  if (it == lists.end()) {
    return;
  }
  it->second.erase(rec);
  if (it->second.empty()) {
    lists.erase(it);
  }
}
}  // namespace

void Snapshot::link(const PodRecord& rec) {
  pods_by_namespace_[rec.ns].insert(&rec);
  if (!rec.facts) {
    return;
  }
  for (const auto& [k, v] : rec.facts->labels) {
    pods_by_label_[label_index_key(k, v)].insert(&rec);
    pods_by_label_key_[k].insert(&rec);
  }
}

void Snapshot::unlink(const PodRecord& rec) {
  unlink_from(pods_by_namespace_, rec.ns, &rec);
  if (!rec.facts) {
    return;
  }
  for (const auto& [k, v] : rec.facts->labels) {
    unlink_from(pods_by_label_, label_index_key(k, v), &rec);
    unlink_from(pods_by_label_key_, k, &rec);
  }
}

bool Snapshot::erase(const std::string& key) {
  auto it = pods_.find(key);
  if (it == pods_.end()) {
    return false;
  }
  const PodRecord& rec = it->second;
  apply(rec, -1);
  for (const std::string* n : {&rec.node, &rec.gpu_node}) {
    if (n->empty()) {
      continue;
    }
    if (auto p = pods_by_node_.find(*n); p != pods_by_node_.end()) {
      p->second.erase(&*it);
      if (p->second.empty()) {
        pods_by_node_.erase(p);
      }
    }
  }
  anti_affinity_pods_.erase(key);
  affinity_term_pods_.erase(key);
  unlink(rec);
  pods_.erase(it);
  return true;
}

void Snapshot::for_each_pod_on(std::string_view node, const std::function<void(const PodRecord&)>& f) const {
  auto p = pods_by_node_.find(std::string(node));
  if (p == pods_by_node_.end()) {
    return;
  }
  for (const PodEntry* entry : p->second) {
    if (entry->second.node == node) {
      f(entry->second);
    }
  }
}

void Snapshot::for_each_pod_with_anti_affinity(const std::function<void(const PodRecord&)>& f) const {
  for (const std::string& key : anti_affinity_pods_) {
    auto it = pods_.find(key);
    if (it != pods_.end()) {
      f(it->second);
    }
  }
}

void Snapshot::for_each_pod_with_affinity_terms(const std::function<void(const PodRecord&)>& f) const {
  for (const std::string& key : affinity_term_pods_) {
    auto it = pods_.find(key);
    if (it != pods_.end()) {
      f(it->second);
    }
  }
}

void Snapshot::for_each_pod_maybe_matching(const std::vector<PodQuery>& queries, bool use_index,
                                           const std::function<void(const PodRecord&)>& f) const {
  for (const PodQuery& q : queries) {
    if (q.selector != nullptr && q.selector->nothing) {
      return;  // a nil selector matches no pod, so no pod matches every query
    }
  }
  // The narrowest source: a union of disjoint lists (one value per label key, one namespace per pod), so every
  // pod is visited at most once.
  std::vector<const PodList*> best;
  size_t best_size = pods_.size();
  bool narrowed = false;
  auto consider = [&](std::vector<const PodList*> lists) {
    size_t n = 0;
    for (const PodList* l : lists) {
      n += l->size();
    }
    if (!narrowed || n < best_size) {
      best = std::move(lists);
      best_size = n;
      narrowed = true;
    }
  };
  auto union_of = [](const std::unordered_map<std::string, PodList>& index, std::vector<std::string> keys) {
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    std::vector<const PodList*> lists;
    for (const std::string& k : keys) {
      if (auto it = index.find(k); it != index.end()) {
        lists.push_back(&it->second);
      }
    }
    return lists;
  };
  if (use_index) {
    for (const PodQuery& q : queries) {
      if (q.namespaces != nullptr) {
        consider(union_of(pods_by_namespace_, *q.namespaces));
      }
      if (q.selector == nullptr) {
        continue;
      }
      for (const LabelSelector::Requirement& r : q.selector->requirements) {
        if (r.op == LabelSelector::Op::in) {
          std::vector<std::string> keys;
          keys.reserve(r.values.size());
          for (const std::string& v : r.values) {
            keys.push_back(label_index_key(r.key, v));
          }
          consider(union_of(pods_by_label_, std::move(keys)));
        } else if (r.op == LabelSelector::Op::exists) {
          consider(union_of(pods_by_label_key_, {r.key}));
        }
      }
    }
  }
  if (!narrowed) {
    for (const auto& [key, rec] : pods_) {
      f(rec);
    }
    return;
  }
  for (const PodList* l : best) {
    for (const PodRecord* rec : *l) {
      f(*rec);
    }
  }
}

// Usage of a (re)registered node: recomputed from the pods recorded on it, so events may come in any order.
void Snapshot::refresh_cards(NodeState& node) {
  node.requested = ResourceRequests{};
  node.nonzero_requested = ResourceRequests{};
  node.pod_count = 0;
  for (CardState& c : node.cards) {
    c.used_mem_mib = 0;
    c.used_cores = 0;
    c.used_slots = 0;
  }
  if (auto p = pods_by_node_.find(node.name); p != pods_by_node_.end()) {
    for (const PodEntry* entry : p->second) {
      const PodRecord& rec = entry->second;
      if (rec.node == node.name) {
        node.requested.cpu_milli += rec.requests.cpu_milli;
        node.requested.memory_bytes += rec.requests.memory_bytes;
        node.requested.ephemeral_bytes += rec.requests.ephemeral_bytes;
        if (rec.facts) {
          node.nonzero_requested.cpu_milli += rec.facts->nonzero_cpu_milli;
          node.nonzero_requested.memory_bytes += rec.facts->nonzero_memory_bytes;
        }
        node.pod_count += 1;
      }
      if (rec.gpu_node == node.name) {
        apply_cards(node, rec, +1);
      }
    }
  }
  reindex(node);
}

Status Snapshot::upsert_node(const json::object& node) {
  const json::object* meta = object_at(node, "metadata");
  std::string name = meta ? string_at(*meta, "name") : std::string();
  if (name.empty()) {
    return make_error("node: metadata.name: missing");
  }
  std::string first_error;
  auto note = [&](const std::string& m) {
    if (first_error.empty()) {
      first_error = m;
    }
  };

  auto [it, inserted] = nodes_.try_emplace(name);
  NodeState& n = it->second;
  if (!inserted) {
    unindex(n);
  }
  n = NodeState{};
  n.name = name;
  if (const json::object* labels = object_at(*meta, "labels")) {
    for (const auto& kv : *labels) {
      n.labels.emplace(std::string(kv.key()), value_text(kv.value()));
    }
  }
  if (const json::object* spec = object_at(node, "spec")) {
    if (const json::value* u = spec->if_contains("unschedulable"); u != nullptr && u->is_bool()) {
      n.unschedulable = u->get_bool();
    }
    if (const json::array* taints = array_at(*spec, "taints")) {
      for (const json::value& tv : *taints) {
        if (tv.is_object()) {
          const json::object& t = tv.get_object();
          n.taints.push_back(Taint{string_at(t, "key"), string_at(t, "value"), string_at(t, "effect")});
        }
      }
    }
  }
  if (std::any_of(n.taints.begin(), n.taints.end(), [](const Taint& t) { return t.effect == "PreferNoSchedule"; })) {
    soft_tainted_nodes_.insert(name);
  } else {
    soft_tainted_nodes_.erase(name);
  }
  if (const json::object* status = object_at(node, "status")) {
    if (const json::object* alloc = object_at(*status, "allocatable")) {
      struct Item {
        std::string_view key;
        int64_t* dst;
        bool milli;
      };
      int64_t gpus_milli = 0;
      int64_t pods_milli = 0;
      for (Item item : {Item{"cpu", &n.allocatable.cpu_milli, true}, Item{"memory", &n.allocatable.memory_bytes, false},
                        Item{"ephemeral-storage", &n.allocatable.ephemeral_bytes, false},
                        Item{"pods", &pods_milli, true}, Item{devices_.gpu_resource, &gpus_milli, true}}) {
        const json::value* v = alloc->if_contains(item.key);
        if (v == nullptr) {
          continue;
        }
        auto q = parse_quantity_milli(value_text(*v));
        if (!q.ok()) {
          note("node \"" + name + "\": status.allocatable." + std::string(item.key) + ": " + q.message());
          continue;
        }
        *item.dst = item.milli ? q.value() : q.value() / 1000;
      }
      n.allocatable_pods = pods_milli / 1000;
      n.allocatable_gpus = gpus_milli / 1000;
    }
  }
  std::vector<std::string> cordon;
  if (auto c = annotation(node, kDeviceCordonAnnotation)) {
    cordon = decode_cordon(*c);
  }
  if (auto reg = annotation(node, kNodeRegisterAnnotation)) {
    n.has_register_annotation = true;
    auto devs = decode_node_devices(name, *reg);
    if (!devs.ok()) {
      n.register_error = devs.message();
      note(devs.message());
    } else if (n.allocatable_gpus > 0) {
      // Cards count only while the node advertises nvidia.com/gpu (HAMi's health gate, hami-protocol.md §3).
      n.cards.reserve(devs.value().size());  // exactly: a node's cards live as long as the node
      for (DeviceInfo& d : devs.value()) {
        CardState c;
        c.cordoned = std::find(cordon.begin(), cordon.end(), d.id) != cordon.end();
        c.nvidia = is_nvidia_type(d.type);
        c.info = std::move(d);
        n.cards.push_back(std::move(c));
      }
    }
  }
  refresh_cards(n);
  if (!first_error.empty()) {
    return make_error(first_error);
  }
  return Status::Ok();
}

bool Snapshot::remove_node(std::string_view name) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) {
    return false;
  }
  unindex(it->second);
  soft_tainted_nodes_.erase(it->first);
  nodes_.erase(it);
  return true;
}

Status Snapshot::upsert_pod(const json::object& pod) {
  const json::object* meta = object_at(pod, "metadata");
  std::string name = meta ? string_at(*meta, "name") : std::string();
  if (name.empty()) {
    return make_error("pod: metadata.name: missing");
  }
  std::string ns = string_at(*meta, "namespace");
  if (ns.empty()) {
    ns = "default";
  }
  std::string key = ns + "/" + name;
  const json::object* spec = object_at(pod, "spec");
  const json::object* status = object_at(pod, "status");
  std::string phase = status ? string_at(*status, "phase") : std::string();
  if (phase == "Succeeded" || phase == "Failed") {
    erase(key);
    return Status::Ok();
  }
  std::string node_name = spec ? string_at(*spec, "nodeName") : std::string();
  std::string vgpu_node = annotation(pod, kVgpuNodeAnnotation).value_or("");
  if (node_name.empty() && vgpu_node.empty()) {
    auto it = pods_.find(key);
    if (it != pods_.end() && it->second.assumed) {
      return Status::Ok();  // an event older than our decision: keep the assumption
    }
    erase(key);
    return Status::Ok();
  }
  std::string first_error;
  PodRecord rec;
  rec.ns = ns;
  rec.name = name;
  rec.node = node_name.empty() ? vgpu_node : node_name;
  auto reqs = pod_requests(pod);
  if (reqs.ok()) {
    rec.requests = reqs.value();
  } else {
    first_error = "pod " + key + ": " + reqs.message();
  }
  const json::array* inits = spec ? array_at(*spec, "initContainers") : nullptr;
  rec.init_slots = inits ? inits->size() : 0;
  for (const json::array* list : {inits, spec ? array_at(*spec, "containers") : nullptr}) {
    for (const json::value& c : list ? *list : json::array{}) {
      rec.containers.push_back(c.is_object() ? string_at(c.get_object(), "name") : std::string());
    }
  }
  if (status != nullptr && rec.init_slots > 0) {
    const json::array* st = array_at(*status, "initContainerStatuses");
    size_t done = 0;
    for (const json::value& sv : st ? *st : json::array{}) {
      const json::object* s = sv.is_object() ? &sv.get_object() : nullptr;
      const json::object* state = s ? object_at(*s, "state") : nullptr;
      const json::object* term = state ? object_at(*state, "terminated") : nullptr;
      const json::value* code = term ? term->if_contains("exitCode") : nullptr;
      if (code != nullptr && code->is_number() && code->to_number<int64_t>() == 0) {
        ++done;
      }
    }
    rec.init_done = done == rec.init_slots;
  }
  if (!vgpu_node.empty()) {
    if (auto alloc = annotation(pod, kDevicesAllocatedAnnotation)) {
      auto devs = decode_pod_devices(*alloc);
      if (devs.ok()) {
        rec.devices = std::move(devs.value());
        rec.gpu_node = vgpu_node;
      } else if (first_error.empty()) {
        first_error = "pod " + key + ": " + std::string(kDevicesAllocatedAnnotation) + ": " + devs.message();
      }
    }
  }
  rec.quota = quota_charge(rec.devices, rec.init_slots, rec.init_done);
  if (auto facts = parse_pod_facts(pod); facts.ok()) {
    rec.facts = std::move(facts.value());
  } else if (first_error.empty()) {
    first_error = "pod " + key + ": " + facts.message();  // counted without labels, terms and ports
  }
  store(std::move(key), std::move(rec));
  if (!first_error.empty()) {
    return make_error(first_error);
  }
  return Status::Ok();
}

bool Snapshot::remove_pod(std::string_view ns, std::string_view name) {
  const std::string key = std::string(ns) + "/" + std::string(name);
  objects_.forget_claim_refs(key);  // the PVs its decision chose (re-decided or deleted)
  return erase(key);
}

void Snapshot::recompute_quota_limits(const std::string& ns) {
  QuotaLimits eff;
  auto lower = [](std::optional<int64_t>& dst, const std::optional<int64_t>& v) {
    if (v && (!dst || *v < *dst)) {
      dst = v;
    }
  };
  if (auto it = quota_objects_.find(ns); it != quota_objects_.end()) {
    for (const auto& [qname, lim] : it->second) {
      lower(eff.mem_mib, lim.mem_mib);
      lower(eff.cores, lim.cores);
      lower(eff.gpus, lim.gpus);
    }
  }
  if (eff.any()) {
    quota_limits_[ns] = eff;
  } else {
    quota_limits_.erase(ns);
  }
}

Status Snapshot::upsert_quota(const json::object& quota) {
  const json::object* meta = object_at(quota, "metadata");
  std::string name = meta ? string_at(*meta, "name") : std::string();
  if (name.empty()) {
    return make_error("resourcequota: metadata.name: missing");
  }
  std::string ns = string_at(*meta, "namespace");
  if (ns.empty()) {
    ns = "default";
  }
  QuotaLimits lim;
  std::string error;
  const json::object* spec = object_at(quota, "spec");
  const json::object* hard = spec ? object_at(*spec, "hard") : nullptr;
  if (hard != nullptr) {
    struct Item {
      std::string key;
      std::optional<int64_t>* dst;
      int64_t factor;
    };
    for (const Item& item : {Item{"limits." + devices_.memory_resource, &lim.mem_mib, devices_.memory_factor},
                             Item{"limits." + devices_.cores_resource, &lim.cores, 1},
                             Item{"limits." + devices_.gpu_resource, &lim.gpus, 1}}) {
      const json::value* v = hard->if_contains(item.key);
      if (v == nullptr) {
        continue;
      }
      auto q = parse_quantity_milli(value_text(*v));
      if (!q.ok() || q.value() % 1000 != 0) {
        error = "resourcequota " + ns + "/" + name + ": spec.hard." + item.key + ": \"" + value_text(*v) +
                "\" is not a whole number";
        lim = QuotaLimits{};
        break;
      }
      *item.dst = q.value() / 1000 * item.factor;
    }
  }
  quota_objects_[ns][name] = lim;
  recompute_quota_limits(ns);
  if (!error.empty()) {
    return make_error(error);
  }
  return Status::Ok();
}

bool Snapshot::remove_quota(std::string_view ns, std::string_view name) {
  auto it = quota_objects_.find(ns);
  if (it == quota_objects_.end()) {
    return false;
  }
  bool erased = it->second.erase(std::string(name)) > 0;
  if (it->second.empty()) {
    quota_objects_.erase(it);
  }
  recompute_quota_limits(std::string(ns));
  return erased;
}

Status Snapshot::assume(const PodInfo& pod, std::string_view node, const PodDevices& devices, int64_t now_unix) {
  if (nodes_.find(node) == nodes_.end()) {
    return make_error("assume " + pod.key() + ": node \"" + std::string(node) + "\" is not in the snapshot");
  }
  PodRecord rec;
  rec.ns = pod.ns;
  rec.name = pod.name;
  rec.node = std::string(node);
  rec.requests = pod.requests;
  rec.devices = devices;
  for (const ContainerGpuRequest& c : pod.gpu.containers) {
    rec.init_slots += c.init ? 1 : 0;
    rec.containers.push_back(c.name);
  }
  if (has_devices(devices)) {
    rec.gpu_node = rec.node;
  }
  rec.assumed = true;
  rec.assumed_at_unix = now_unix;
  rec.quota = quota_charge(rec.devices, rec.init_slots, false);
  if (pod.facts) {
    rec.facts = pod.facts;
  }
  store(pod.key(), std::move(rec));
  return Status::Ok();
}

Status Snapshot::nominate(const PodInfo& pod, std::string_view node, const PodDevices& devices, int64_t now_unix) {
  if (auto st = assume(pod, node, devices, now_unix); !st) {
    return st;
  }
  pods_.find(pod.key())->second.nominated = true;
  return Status::Ok();
}

std::optional<PodRecord> Snapshot::detach_pod(std::string_view ns, std::string_view name) {
  std::string key = std::string(ns) + "/" + std::string(name);
  auto it = pods_.find(key);
  if (it == pods_.end()) {
    return std::nullopt;
  }
  PodRecord rec = it->second;
  erase(key);
  return rec;
}

void Snapshot::restore_pod(PodRecord rec) {
  std::string key = rec.ns + "/" + rec.name;
  store(std::move(key), std::move(rec));
}

bool Snapshot::forget(std::string_view ns, std::string_view name) {
  std::string key = std::string(ns) + "/" + std::string(name);
  auto it = pods_.find(key);
  objects_.forget_claim_refs(key);  // kube-scheduler's RevertAssumedPodVolumes
  if (it == pods_.end() || !it->second.assumed) {
    return false;
  }
  return erase(key);
}

std::vector<std::string> Snapshot::expire_assumed(int64_t now_unix, int64_t ttl_seconds) {
  std::vector<std::string> expired;
  for (const auto& [key, rec] : pods_) {
    if (rec.assumed && !rec.nominated && now_unix - rec.assumed_at_unix > ttl_seconds) {
      expired.push_back(key);
    }
  }
  for (const std::string& key : expired) {
    objects_.forget_claim_refs(key);
    erase(key);
  }
  return expired;  // pods_ is ordered, so already sorted
}

const NodeState* Snapshot::find_node(std::string_view name) const {
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : &it->second;
}

const PodRecord* Snapshot::find_pod(std::string_view ns, std::string_view name) const {
  auto it = pods_.find(std::string(ns) + "/" + std::string(name));
  return it == pods_.end() ? nullptr : &it->second;
}

void Snapshot::for_each_node(const std::function<void(const NodeState&)>& f) const {
  for (const auto& [name, n] : nodes_) {
    f(n);
  }
}

void Snapshot::for_each_pod(const std::function<void(const PodRecord&)>& f) const {
  for (const auto& [key, rec] : pods_) {
    f(rec);
  }
}

QuotaLimits Snapshot::quota_limits(std::string_view ns) const {
  auto it = quota_limits_.find(ns);
  return it == quota_limits_.end() ? QuotaLimits{} : it->second;
}

QuotaAmounts Snapshot::quota_used(std::string_view ns) const {
  auto it = quota_used_.find(ns);
  return it == quota_used_.end() ? QuotaAmounts{} : it->second;
}

void Snapshot::visit_candidates(const CapacityQuery& q, NodeOrder order,
                                const std::function<bool(const NodeState&)>& visit) const {
  bool desc = order == NodeOrder::binpack;
  std::vector<BucketCursor> cursors;
  for (const auto& [id, bucket] : index_->buckets) {
    if (q.cards > 0) {
      int nb = id % kCardBuckets;
      int cb = (id / kCardBuckets) % kCoreBuckets;
      int mb = id / kCardBuckets / kCoreBuckets;
      if (nb < std::min<int64_t>(q.cards, kCardBuckets - 1) || mem_bucket_hi(mb) < q.min_card_mem_mib ||
          core_bucket_hi(cb) < q.min_card_cores) {
        continue;
      }
    }
    cursors.emplace_back(&bucket, desc);
  }
  auto better = [desc](const Key& a, const Key& b) {
    if (a.score != b.score) {
      return desc ? a.score > b.score : a.score < b.score;
    }
    return *a.name < *b.name;
  };
  while (true) {
    BucketCursor* best = nullptr;
    for (BucketCursor& c : cursors) {
      if (!c.done() && (best == nullptr || better(c.head(), best->head()))) {
        best = &c;
      }
    }
    if (best == nullptr) {
      return;
    }
    const Key& k = best->head();
    const NodeState* node = k.node;
    bool maybe = q.cards == 0 ||
                 (k.usable >= q.cards && k.max_free_mem >= q.min_card_mem_mib && k.max_free_cores >= q.min_card_cores);
    best->advance();
    if (!maybe) {
      continue;
    }
    if (visit(*node)) {
      return;
    }
  }
}

}  // namespace gpuslice::scheduler
