#include "scheduler/framework/cluster_objects.h"

#include "common/json_access.h"
#include "common/quantity.h"

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <climits>

// Fields as k8s.io/api core/v1 (PersistentVolumeClaim, PersistentVolume), storage/v1 (StorageClass, CSINode)
// define them; which ones matter follows kube-scheduler's volumebinding/binder.go, volumezone/volume_zone.go and
// nodevolumelimits/csi.go.

namespace gpuslice::scheduler {
namespace json = boost::json;

namespace {

std::string name_of(const json::object& o) {
  const json::object* m = object_at(o, "metadata");
  return m ? string_at(*m, "name") : std::string();
}
std::string ns_of(const json::object& o) {
  const json::object* m = object_at(o, "metadata");
  std::string ns = m ? string_at(*m, "namespace") : std::string();
  return ns.empty() ? "default" : ns;
}

uint8_t access_modes(const json::object& spec) {
  uint8_t m = 0;
  if (const json::array* a = array_at(spec, "accessModes")) {
    for (const json::value& v : *a) {
      if (!v.is_string()) {
        continue;
      }
      std::string_view s = v.get_string();
      m |= s == "ReadWriteOnce"      ? kReadWriteOnce
           : s == "ReadOnlyMany"     ? kReadOnlyMany
           : s == "ReadWriteMany"    ? kReadWriteMany
           : s == "ReadWriteOncePod" ? kReadWriteOncePod
                                     : 0;
    }
  }
  return m;
}

// Erases `key` from a map with a transparent comparator; true when it was there.
template <class Map>
bool erase_key(Map& map, std::string_view key) {
  auto it = map.find(key);
  if (it == map.end()) {
    return false;
  }
  map.erase(it);
  return true;
}

Result<int64_t> storage_bytes(const json::object* resources, const char* key, const std::string& at) {
  if (resources == nullptr) {
    return int64_t{0};
  }
  const json::value* v = resources->if_contains("storage");
  if (v == nullptr) {
    return int64_t{0};
  }
  std::string t = v->is_string() ? std::string(v->get_string()) : json::serialize(*v);
  auto q = parse_quantity_milli(t);
  if (!q.ok()) {
    return make_error(at + "." + key + ".storage: " + q.message());
  }
  return (q.value() + 999) / 1000;
}

constexpr std::string_view kBetaStorageClassAnnotation = "volume.beta.kubernetes.io/storage-class";

// GetPersistentVolumeClaimClass / GetPersistentVolumeClass (component-helpers storage/volume/helpers.go): the beta
// annotation wins over spec.storageClassName.
std::string class_of(const json::object* meta, const json::object* spec) {
  const json::object* ann = meta ? object_at(*meta, "annotations") : nullptr;
  if (ann != nullptr && ann->if_contains(kBetaStorageClassAnnotation) != nullptr) {
    return string_at(*ann, kBetaStorageClassAnnotation);
  }
  return spec ? string_at(*spec, "storageClassName") : std::string();
}

bool deleting(const json::object* meta) {
  const json::value* del = meta ? meta->if_contains("deletionTimestamp") : nullptr;
  return del != nullptr && !del->is_null();
}

}  // namespace

bool volume_bound_to_claim(std::string_view ref_ns, std::string_view ref_name, std::string_view ref_uid,
                           const ClaimInfo& claim) {
  if (ref_name.empty() || ref_name != claim.name || ref_ns != claim.ns) {
    return false;
  }
  return ref_uid.empty() || ref_uid == claim.uid;
}

Status ClusterObjects::upsert_namespace(const json::object& ns) {
  const std::string name = name_of(ns);
  if (name.empty()) {
    return make_error("namespace: metadata.name: missing");
  }
  Labels labels;
  if (const json::object* m = object_at(ns, "metadata")) {
    if (const json::object* l = object_at(*m, "labels")) {
      labels.reserve(l->size());
      for (const auto& kv : *l) {
        labels.emplace(std::string(kv.key()),
                       kv.value().is_string() ? std::string(kv.value().get_string()) : json::serialize(kv.value()));
      }
    }
  }
  namespaces_[name] = std::move(labels);
  return Status::Ok();
}

bool ClusterObjects::remove_namespace(std::string_view name) {
  return erase_key(namespaces_, name);
}

Status ClusterObjects::upsert_claim(const json::object& pvc) {
  ClaimInfo c;
  c.name = name_of(pvc);
  c.ns = ns_of(pvc);
  if (c.name.empty()) {
    return make_error("persistentvolumeclaim: metadata.name: missing");
  }
  const std::string key = c.ns + "/" + c.name;
  claims_.erase(key);
  const json::object* meta = object_at(pvc, "metadata");
  c.deleting = deleting(meta);
  if (meta != nullptr) {
    c.uid = string_at(*meta, "uid");
    c.resource_version = string_at(*meta, "resourceVersion");
  }
  if (const json::object* ann = meta ? object_at(*meta, "annotations") : nullptr) {
    c.selected_node = string_at(*ann, kSelectedNodeAnnotation);
    c.bind_completed = ann->if_contains(kBindCompletedAnnotation) != nullptr;
  }
  const json::object* spec = object_at(pvc, "spec");
  c.storage_class = class_of(meta, spec);
  if (spec != nullptr) {
    c.volume_name = string_at(*spec, "volumeName");
    if (const json::value* sel = spec->if_contains("selector"); sel != nullptr && !sel->is_null()) {
      if (!sel->is_object()) {
        return make_error("persistentvolumeclaim " + key + ": spec.selector: " + json::serialize(*sel) +
                          " is not an object");
      }
      auto parsed = parse_label_selector(sel->get_object(), "spec.selector");
      if (!parsed) {
        return make_error("persistentvolumeclaim " + key + ": " + parsed.message());
      }
      c.selector = std::move(parsed.value());
    }
    c.access_modes = access_modes(*spec);
    c.block = string_at(*spec, "volumeMode") == "Block";
    const json::object* res = object_at(*spec, "resources");
    auto b = storage_bytes(res ? object_at(*res, "requests") : nullptr, "requests",
                           "persistentvolumeclaim " + key + ": spec.resources");
    if (!b.ok()) {
      return b.error();
    }
    c.request_bytes = b.value();
  }
  claims_.emplace(key, std::move(c));
  return Status::Ok();
}

bool ClusterObjects::remove_claim(std::string_view ns, std::string_view name) {
  return claims_.erase(std::string(ns) + "/" + std::string(name)) != 0;
}

Status ClusterObjects::upsert_volume(const json::object& pv) {
  VolumeInfo v;
  v.name = name_of(pv);
  if (v.name.empty()) {
    return make_error("persistentvolume: metadata.name: missing");
  }
  volumes_.erase(v.name);
  const std::string at = "persistentvolume " + v.name + ": ";
  const json::object* meta = object_at(pv, "metadata");
  v.deleting = deleting(meta);
  v.storage_class = class_of(meta, object_at(pv, "spec"));
  if (meta != nullptr) {
    v.resource_version = string_at(*meta, "resourceVersion");
    if (const json::object* l = object_at(*meta, "labels")) {
      for (const auto& kv : *l) {
        v.labels.emplace(std::string(kv.key()),
                         kv.value().is_string() ? std::string(kv.value().get_string()) : json::serialize(kv.value()));
      }
      for (const char* k : {"topology.kubernetes.io/zone", "topology.kubernetes.io/region",
                            "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region"}) {
        std::string val = string_at(*l, k);
        if (!val.empty()) {
          v.zone_labels.emplace(k, val);
        }
      }
    }
  }
  if (const json::object* spec = object_at(pv, "spec")) {
    v.access_modes = access_modes(*spec);
    v.block = string_at(*spec, "volumeMode") == "Block";
    auto cap = storage_bytes(object_at(*spec, "capacity"), "capacity", at + "spec");
    if (!cap.ok()) {
      return cap.error();
    }
    v.capacity_bytes = cap.value();
    if (const json::object* csi = object_at(*spec, "csi")) {
      v.csi_driver = string_at(*csi, "driver");
      v.csi_handle = string_at(*csi, "volumeHandle");
    }
    if (const json::object* ref = object_at(*spec, "claimRef")) {
      v.claim_name = string_at(*ref, "name");
      v.claim_ns = string_at(*ref, "namespace");
      v.claim_uid = string_at(*ref, "uid");
    }
    const json::object* na = object_at(*spec, "nodeAffinity");
    const json::object* req = na ? object_at(*na, "required") : nullptr;
    if (const json::array* terms = req ? array_at(*req, "nodeSelectorTerms") : nullptr) {
      auto t = parse_node_selector_terms(*terms, at + "spec.nodeAffinity.required.nodeSelectorTerms");
      if (!t.ok()) {
        return t.error();
      }
      v.node_affinity = std::move(t.value());
      if (v.node_affinity.empty()) {
        return make_error(at + "spec.nodeAffinity.required.nodeSelectorTerms: must not be empty");
      }
    }
  }
  if (const json::object* st = object_at(pv, "status")) {
    v.phase = string_at(*st, "phase");
  }
  if (!v.claim_name.empty()) {
    // The API shows who claims it now (ours, written by the PreBind, or a rival's): the assumption has served.
    erase_key(assumed_refs_, v.name);
  }
  volumes_.emplace(v.name, std::move(v));
  return Status::Ok();
}

bool ClusterObjects::remove_volume(std::string_view name) {
  erase_key(assumed_refs_, name);
  return erase_key(volumes_, name);
}

void ClusterObjects::assume_claim_ref(const std::string& volume, AssumedClaimRef ref) {
  if (volumes_.find(volume) != volumes_.end()) {
    assumed_refs_[volume] = std::move(ref);
  }
}

size_t ClusterObjects::forget_claim_refs(std::string_view pod) {
  size_t n = 0;
  for (auto it = assumed_refs_.begin(); it != assumed_refs_.end();) {
    if (it->second.pod == pod) {
      it = assumed_refs_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

const AssumedClaimRef* ClusterObjects::assumed_claim_ref(std::string_view volume) const {
  auto it = assumed_refs_.find(volume);
  return it == assumed_refs_.end() ? nullptr : &it->second;
}

Status ClusterObjects::upsert_storage_class(const json::object& sc) {
  StorageClassInfo c;
  c.name = name_of(sc);
  if (c.name.empty()) {
    return make_error("storageclass: metadata.name: missing");
  }
  classes_.erase(c.name);
  c.provisioner = string_at(sc, "provisioner");
  const std::string mode = string_at(sc, "volumeBindingMode");
  if (mode == "WaitForFirstConsumer") {
    c.wait_for_first_consumer = true;
  } else if (!mode.empty() && mode != "Immediate") {
    return make_error("storageclass " + c.name + ": volumeBindingMode: \"" + mode +
                      "\" is not Immediate or WaitForFirstConsumer");
  }
  if (const json::array* terms = array_at(sc, "allowedTopologies")) {
    for (const json::value& tv : *terms) {
      std::vector<TopologySelectorRequirement> term;
      const json::array* exprs = tv.is_object() ? array_at(tv.get_object(), "matchLabelExpressions") : nullptr;
      for (const json::value& ev : exprs ? *exprs : json::array{}) {
        if (!ev.is_object()) {
          continue;
        }
        TopologySelectorRequirement r;
        r.key = string_at(ev.get_object(), "key");
        if (const json::array* vals = array_at(ev.get_object(), "values")) {
          for (const json::value& x : *vals) {
            if (x.is_string()) {
              r.values.emplace_back(x.get_string());
            }
          }
        }
        term.push_back(std::move(r));
      }
      c.allowed_topologies.push_back(std::move(term));
    }
  }
  classes_.emplace(c.name, std::move(c));
  return Status::Ok();
}

bool ClusterObjects::remove_storage_class(std::string_view name) {
  return erase_key(classes_, name);
}

Status ClusterObjects::upsert_csi_node(const json::object& csinode) {
  const std::string name = name_of(csinode);
  if (name.empty()) {
    return make_error("csinode: metadata.name: missing");
  }
  std::map<std::string, int64_t, std::less<>> limits;
  const json::object* spec = object_at(csinode, "spec");
  if (const json::array* drivers = spec ? array_at(*spec, "drivers") : nullptr) {
    for (const json::value& dv : *drivers) {
      if (!dv.is_object()) {
        continue;
      }
      const json::object& d = dv.get_object();
      const json::object* alloc = object_at(d, "allocatable");
      const json::value* count = alloc ? alloc->if_contains("count") : nullptr;
      if (count != nullptr && count->is_number()) {
        limits[string_at(d, "name")] = count->to_number<int64_t>();
      }
    }
  }
  csi_nodes_[name] = std::move(limits);
  return Status::Ok();
}

bool ClusterObjects::remove_csi_node(std::string_view name) {
  return erase_key(csi_nodes_, name);
}

const Labels* ClusterObjects::namespace_labels(std::string_view name) const {
  auto it = namespaces_.find(name);
  return it == namespaces_.end() ? nullptr : &it->second;
}

bool DisruptionBudgetInfo::covers(std::string_view pod_ns, const Labels& labels) const {
  // LabelSelectorAsSelector of nil is Nothing, of {} is Everything; upstream skips both ("selector.Empty()").
  if (pod_ns != ns || selector.nothing || selector.requirements.empty() || labels.empty()) {
    return false;
  }
  return selector.matches(labels);
}

Status ClusterObjects::upsert_disruption_budget(const json::object& pdb) {
  const std::string name = name_of(pdb);
  if (name.empty()) {
    return make_error("poddisruptionbudget: metadata.name: missing");
  }
  DisruptionBudgetInfo b;
  b.ns = ns_of(pdb);
  b.name = name;
  const std::string key = b.ns + "/" + name;
  budgets_.erase(key);
  const std::string at = "poddisruptionbudget " + key;
  if (const json::object* spec = object_at(pdb, "spec")) {
    if (const json::object* sel = object_at(*spec, "selector")) {
      auto parsed = parse_label_selector(*sel, "spec.selector");
      if (!parsed) {
        return make_error(at + ": " + parsed.message());
      }
      b.selector = std::move(parsed.value());
    }
  }
  if (const json::object* status = object_at(pdb, "status")) {
    if (const json::value* a = status->if_contains("disruptionsAllowed"); a != nullptr && !a->is_null()) {
      if (!a->is_int64() || a->get_int64() < INT32_MIN || a->get_int64() > INT32_MAX) {
        return make_error(at + ": status.disruptionsAllowed: " + json::serialize(*a) + " is not an int32");
      }
      b.disruptions_allowed = static_cast<int32_t>(a->get_int64());
    }
    if (const json::object* d = object_at(*status, "disruptedPods")) {
      for (const auto& kv : *d) {
        b.disrupted_pods.emplace_back(kv.key());
      }
      std::sort(b.disrupted_pods.begin(), b.disrupted_pods.end());
    }
  }
  budgets_.emplace(key, std::move(b));
  return Status::Ok();
}

bool ClusterObjects::remove_disruption_budget(std::string_view ns, std::string_view name) {
  return budgets_.erase(std::string(ns) + "/" + std::string(name)) != 0;
}

const ClaimInfo* ClusterObjects::find_claim(std::string_view ns, std::string_view name) const {
  auto it = claims_.find(std::string(ns) + "/" + std::string(name));
  return it == claims_.end() ? nullptr : &it->second;
}

const VolumeInfo* ClusterObjects::find_volume(std::string_view name) const {
  auto it = volumes_.find(name);
  return it == volumes_.end() ? nullptr : &it->second;
}

const StorageClassInfo* ClusterObjects::find_storage_class(std::string_view name) const {
  auto it = classes_.find(name);
  return it == classes_.end() ? nullptr : &it->second;
}

const std::map<std::string, int64_t, std::less<>>* ClusterObjects::csi_limits(std::string_view node) const {
  auto it = csi_nodes_.find(node);
  return it == csi_nodes_.end() ? nullptr : &it->second;
}

}  // namespace gpuslice::scheduler
