// Followed: kubernetes/kubernetes pkg/scheduler/framework/plugins/helper/spread.go (DefaultSelector,
// GetPodServices): Services of the pod's namespace with a non-nil selector that matches the pod's labels merge their
// selectors (labels.Merge); the controller ownerReference (metav1.GetControllerOf) of kind v1 ReplicationController
// merges its selector too, apps/v1 ReplicaSet or StatefulSet adds its selector's requirements; the controller is
// looked up by name in the pod's namespace.
#include "scheduler/framework/spread_sources.h"

#include "common/json_access.h"

#include <boost/json/serialize.hpp>

#include <algorithm>

namespace gpuslice::scheduler {
namespace json = boost::json;

namespace {

struct Key {
  std::string ns;
  std::string name;
  std::string key() const { return ns + "/" + name; }
};

Result<Key> key_of(const json::object& o, std::string_view kind) {
  const json::object* m = object_at(o, "metadata");
  Key k{m ? string_at(*m, "namespace") : std::string(), m ? string_at(*m, "name") : std::string()};
  if (k.name.empty()) {
    return make_error(std::string(kind) + ": metadata.name: missing");
  }
  if (k.ns.empty()) {
    k.ns = "default";
  }
  return k;
}

/// A map selector (Service, ReplicationController spec.selector): string values only.
Result<Labels> map_selector(const json::object& o, const std::string& at) {
  Labels out;
  const json::object* spec = object_at(o, "spec");
  const json::object* sel = spec ? object_at(*spec, "selector") : nullptr;
  if (sel == nullptr) {
    return out;
  }
  for (const auto& kv : *sel) {
    if (!kv.value().is_string()) {
      return make_error(at + ": spec.selector." + std::string(kv.key()) + ": " + json::serialize(kv.value()) +
                        " is not a string");
    }
    out.emplace(std::string(kv.key()), std::string(kv.value().get_string()));
  }
  return out;
}

template <class Map>
bool erase_key(Map& map, std::string_view ns, std::string_view name) {
  auto it = map.find(std::string(ns) + "/" + std::string(name));
  if (it == map.end()) {
    return false;
  }
  map.erase(it);
  return true;
}

Status upsert_map(std::map<std::string, Labels, std::less<>>& into, const json::object& o, std::string_view kind) {
  auto k = key_of(o, kind);
  if (!k) {
    return k.error();
  }
  const std::string key = k->key();
  into.erase(key);
  auto sel = map_selector(o, std::string(kind) + " " + key);
  if (!sel) {
    return sel.error();
  }
  if (!sel->empty()) {
    into.emplace(key, std::move(*sel));
  }
  return Status::Ok();
}

Status upsert_label_selector(std::map<std::string, LabelSelector, std::less<>>& into, const json::object& o,
                             std::string_view kind) {
  auto k = key_of(o, kind);
  if (!k) {
    return k.error();
  }
  const std::string key = k->key();
  into.erase(key);
  const json::object* spec = object_at(o, "spec");
  const json::object* sel = spec ? object_at(*spec, "selector") : nullptr;
  if (sel == nullptr) {
    return Status::Ok();  // nil: LabelSelectorAsSelector gives Nothing, whose Requirements() add nothing
  }
  auto parsed = parse_label_selector(*sel, "spec.selector");
  if (!parsed) {
    return make_error(std::string(kind) + " " + key + ": " + parsed.message());
  }
  if (!parsed->nothing && !parsed->requirements.empty()) {
    into.emplace(key, std::move(*parsed));
  }
  return Status::Ok();
}

}  // namespace

Status SpreadSources::upsert_service(const json::object& svc) {
  return upsert_map(services_, svc, "service");
}
bool SpreadSources::remove_service(std::string_view ns, std::string_view name) {
  return erase_key(services_, ns, name);
}
Status SpreadSources::upsert_replication_controller(const json::object& rc) {
  return upsert_map(replication_controllers_, rc, "replicationcontroller");
}
bool SpreadSources::remove_replication_controller(std::string_view ns, std::string_view name) {
  return erase_key(replication_controllers_, ns, name);
}
Status SpreadSources::upsert_replica_set(const json::object& rs) {
  return upsert_label_selector(replica_sets_, rs, "replicaset");
}
bool SpreadSources::remove_replica_set(std::string_view ns, std::string_view name) {
  return erase_key(replica_sets_, ns, name);
}
Status SpreadSources::upsert_stateful_set(const json::object& ss) {
  return upsert_label_selector(stateful_sets_, ss, "statefulset");
}
bool SpreadSources::remove_stateful_set(std::string_view ns, std::string_view name) {
  return erase_key(stateful_sets_, ns, name);
}

LabelSelector SpreadSources::default_selector(std::string_view ns, const PodFacts& pod) const {
  Labels merged;
  const std::string prefix = std::string(ns) + "/";
  for (auto it = services_.lower_bound(prefix); it != services_.end() && it->first.starts_with(prefix); ++it) {
    const Labels& sel = it->second;
    const bool match = std::all_of(sel.begin(), sel.end(), [&](const auto& kv) {
      auto l = pod.labels.find(kv.first);
      return l != pod.labels.end() && l->second == kv.second;
    });
    if (match) {
      for (const auto& [k, v] : sel) {
        merged.insert_or_assign(k, v);
      }
    }
  }
  const LabelSelector* owner = nullptr;
  if (pod.controller_kind != ControllerKind::none) {
    const std::string key = prefix + pod.controller_name;
    if (pod.controller_kind == ControllerKind::replication_controller) {
      if (auto it = replication_controllers_.find(key); it != replication_controllers_.end()) {
        for (const auto& [k, v] : it->second) {
          merged.insert_or_assign(k, v);
        }
      }
    } else {
      const auto& sets = pod.controller_kind == ControllerKind::replica_set ? replica_sets_ : stateful_sets_;
      if (auto it = sets.find(key); it != sets.end()) {
        owner = &it->second;
      }
    }
  }
  LabelSelector out = LabelSelector::everything();
  for (const auto& [k, v] : merged) {
    out.requirements.push_back(LabelSelector::Requirement{k, LabelSelector::Op::in, {v}});
  }
  if (owner != nullptr) {
    out.requirements.insert(out.requirements.end(), owner->requirements.begin(), owner->requirements.end());
  }
  return out;
}

}  // namespace gpuslice::scheduler
