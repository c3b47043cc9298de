#include "scheduler/framework/pod_facts.h"

#include "common/json_access.h"
#include "common/quantity.h"
#include "common/rfc3339.h"

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <chrono>
#include <climits>
#include <stdexcept>

// Field semantics follow k8s.io/api core/v1 (PodAffinityTerm, TopologySpreadConstraint, ContainerPort, Volume)
// and kube-scheduler's readers of them: pkg/scheduler/framework/types.go (AffinityTerm, getPodAffinityTerms),
// plugins/podtopologyspread/common.go (filterTopologySpreadConstraints, mergeLabelSetWithSelector),
// plugins/nodeports/node_ports.go (getContainerPorts), plugins/volumerestrictions/volume_restrictions.go.

namespace gpuslice::scheduler {
namespace json = boost::json;

namespace {

std::string text(const json::value& v) {
  return v.is_string() ? std::string(v.get_string()) : json::serialize(v);
}

// One container's cpu (milli) or memory (bytes) request as the API server leaves it (requests, else limits, which
// it copies into requests); nullopt when the container names none (or an unreadable one: pod_requests reports it).
std::optional<int64_t> container_request(const json::object& c, std::string_view resource, bool milli) {
  const json::object* res = object_at(c, "resources");
  if (res == nullptr) {
    return std::nullopt;
  }
  for (const char* section : {"requests", "limits"}) {
    const json::object* o = object_at(*res, section);
    const json::value* v = o != nullptr ? o->if_contains(resource) : nullptr;
    if (v == nullptr) {
      continue;
    }
    const std::string t = text(*v);
    auto q = parse_quantity_milli(t);
    if (!q.ok()) {
      return std::nullopt;
    }
    return milli ? q.value() : (q.value() + 999) / 1000;
  }
  return std::nullopt;
}

// kube-scheduler's non-zero request (resource_allocation.go calculatePodResourceRequest with
// NonMissingContainerRequests, component-helpers resource.PodRequests): per container the request, or
// 100m cpu / 200 MiB memory when it names none; max(sum of app containers, largest init container) + overhead.
void nonzero_requests(const json::object& spec, PodFacts& f) {
  constexpr int64_t kDefaultMilliCpu = 100;
  constexpr int64_t kDefaultMemory = 200LL * 1024 * 1024;
  int64_t cpu = 0;
  int64_t mem = 0;
  int64_t init_cpu = 0;
  int64_t init_mem = 0;
  for (const char* key : {"containers", "initContainers"}) {
    const json::array* cs = array_at(spec, key);
    const bool init = std::string_view(key) == "initContainers";
    for (size_t i = 0; cs != nullptr && i < cs->size(); ++i) {
      if (!(*cs)[i].is_object()) {
        continue;
      }
      const json::object& c = (*cs)[i].get_object();
      const int64_t c_cpu = container_request(c, "cpu", true).value_or(kDefaultMilliCpu);
      const int64_t c_mem = container_request(c, "memory", false).value_or(kDefaultMemory);
      if (init) {
        init_cpu = std::max(init_cpu, c_cpu);
        init_mem = std::max(init_mem, c_mem);
      } else {
        cpu += c_cpu;
        mem += c_mem;
      }
    }
  }
  f.nonzero_cpu_milli = std::max(cpu, init_cpu);
  f.nonzero_memory_bytes = std::max(mem, init_mem);
  if (const json::object* oh = object_at(spec, "overhead")) {
    json::object wrapper{{"resources", json::object{{"requests", *oh}}}};
    f.nonzero_cpu_milli += container_request(wrapper, "cpu", true).value_or(0);
    f.nonzero_memory_bytes += container_request(wrapper, "memory", false).value_or(0);
  }
}

std::optional<int64_t> integer(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) {
    return std::nullopt;
  }
  if (v->is_int64()) {
    return v->get_int64();
  }
  if (v->is_uint64()) {
    return static_cast<int64_t>(v->get_uint64());
  }
  if (v->is_double() && v->get_double() == static_cast<double>(static_cast<int64_t>(v->get_double()))) {
    return static_cast<int64_t>(v->get_double());
  }
  return std::nullopt;
}

void add_label_keys(LabelSelector& sel, const json::array* keys, const Labels& labels, LabelSelector::Op op) {
  if (keys == nullptr || sel.nothing) {
    return;  // upstream: a nil selector stays nil (matches nothing) whatever the keys
  }
  for (const json::value& k : *keys) {
    if (!k.is_string()) {
      continue;
    }
    auto it = labels.find(std::string_view(k.get_string()));
    if (it != labels.end()) {
      sel.requirements.push_back(LabelSelector::Requirement{it->first, op, {it->second}});
    }
  }
}

Result<PodAffinityTerm> parse_term(const json::object& t, const Labels& own, const std::string& at) {
  PodAffinityTerm term;
  term.topology_key = string_at(t, "topologyKey");
  if (term.topology_key.empty()) {
    return make_error(at + ".topologyKey: must be set");
  }
  if (const json::object* s = object_at(t, "labelSelector")) {
    auto sel = parse_label_selector(*s, at + ".labelSelector");
    if (!sel.ok()) {
      return sel.error();
    }
    term.selector = std::move(sel.value());
  }
  add_label_keys(term.selector, array_at(t, "matchLabelKeys"), own, LabelSelector::Op::in);
  add_label_keys(term.selector, array_at(t, "mismatchLabelKeys"), own, LabelSelector::Op::not_in);
  if (const json::array* nss = array_at(t, "namespaces")) {
    for (const json::value& n : *nss) {
      if (n.is_string()) {
        term.namespaces.emplace_back(n.get_string());
      }
    }
  }
  if (const json::object* s = object_at(t, "namespaceSelector")) {
    auto sel = parse_label_selector(*s, at + ".namespaceSelector");
    if (!sel.ok()) {
      return sel.error();
    }
    term.namespace_selector = std::move(sel.value());
  }
  return term;
}

Status parse_terms(const json::object* holder, const char* field, const Labels& own, const std::string& at,
                   std::vector<PodAffinityTerm>* required, std::vector<WeightedPodAffinityTerm>* preferred) {
  if (holder == nullptr) {
    return Status::Ok();
  }
  if (const json::array* req = array_at(*holder, "requiredDuringSchedulingIgnoredDuringExecution")) {
    for (size_t i = 0; i < req->size(); ++i) {
      std::string where =
          at + "." + field + ".requiredDuringSchedulingIgnoredDuringExecution[" + std::to_string(i) + "]";
      if (!(*req)[i].is_object()) {
        return make_error(where + ": must be an object");
      }
      auto t = parse_term((*req)[i].get_object(), own, where);
      if (!t.ok()) {
        return t.error();
      }
      required->push_back(std::move(t.value()));
    }
  }
  if (const json::array* pref = array_at(*holder, "preferredDuringSchedulingIgnoredDuringExecution")) {
    for (size_t i = 0; i < pref->size(); ++i) {
      std::string where =
          at + "." + field + ".preferredDuringSchedulingIgnoredDuringExecution[" + std::to_string(i) + "]";
      if (!(*pref)[i].is_object()) {
        return make_error(where + ": must be an object");
      }
      const json::object& w = (*pref)[i].get_object();
      const json::object* pt = object_at(w, "podAffinityTerm");
      if (pt == nullptr) {
        return make_error(where + ".podAffinityTerm: missing");
      }
      auto t = parse_term(*pt, own, where + ".podAffinityTerm");
      if (!t.ok()) {
        return t.error();
      }
      WeightedPodAffinityTerm wt;
      wt.weight = static_cast<int32_t>(integer(w, "weight").value_or(0));
      wt.term = std::move(t.value());
      preferred->push_back(std::move(wt));
    }
  }
  return Status::Ok();
}

}  // namespace

Labels::Labels(std::initializer_list<value_type> init) {
  items_.reserve(init.size());
  for (const value_type& kv : init) {
    emplace(kv.first, kv.second);
  }
}

std::vector<Labels::value_type>::iterator Labels::lower_bound(std::string_view key) {
  return std::lower_bound(items_.begin(), items_.end(), key,
                          [](const value_type& kv, std::string_view k) { return std::string_view(kv.first) < k; });
}

Labels::const_iterator Labels::find(std::string_view key) const {
  auto it = std::lower_bound(items_.begin(), items_.end(), key,
                             [](const value_type& kv, std::string_view k) { return std::string_view(kv.first) < k; });
  return it != items_.end() && it->first == key ? it : items_.end();
}

const std::string* Labels::get(std::string_view key) const {
  auto it = find(key);
  return it != items_.end() ? &it->second : nullptr;
}

const std::string& Labels::at(std::string_view key) const {
  const std::string* v = get(key);
  if (v == nullptr) {
    throw std::out_of_range("label " + std::string(key) + ": not set");
  }
  return *v;
}

bool Labels::emplace(std::string key, std::string value) {
  auto it = lower_bound(key);
  if (it != items_.end() && it->first == key) {
    return false;
  }
  items_.emplace(it, std::move(key), std::move(value));
  return true;
}

void Labels::insert_or_assign(std::string key, std::string value) {
  auto it = lower_bound(key);
  if (it != items_.end() && it->first == key) {
    it->second = std::move(value);
  } else {
    items_.emplace(it, std::move(key), std::move(value));
  }
}

bool LabelSelector::matches(const Labels& labels) const {
  if (nothing) {
    return false;
  }
  for (const Requirement& r : requirements) {
    auto it = labels.find(r.key);
    const bool has = it != labels.end();
    switch (r.op) {
      case Op::in:
        if (!has || std::find(r.values.begin(), r.values.end(), it->second) == r.values.end()) {
          return false;
        }
        break;
      case Op::not_in:
        if (has && std::find(r.values.begin(), r.values.end(), it->second) != r.values.end()) {
          return false;
        }
        break;
      case Op::exists:
        if (!has) {
          return false;
        }
        break;
      case Op::does_not_exist:
        if (has) {
          return false;
        }
        break;
    }
  }
  return true;
}

Result<LabelSelector> parse_label_selector(const json::object& selector, const std::string& at) {
  LabelSelector sel = LabelSelector::everything();
  if (const json::object* ml = object_at(selector, "matchLabels")) {
    for (const auto& kv : *ml) {
      sel.requirements.push_back(
          LabelSelector::Requirement{std::string(kv.key()), LabelSelector::Op::in, {text(kv.value())}});
    }
  }
  if (const json::array* me = array_at(selector, "matchExpressions")) {
    for (size_t i = 0; i < me->size(); ++i) {
      std::string where = at + ".matchExpressions[" + std::to_string(i) + "]";
      if (!(*me)[i].is_object()) {
        return make_error(where + ": must be an object");
      }
      const json::object& e = (*me)[i].get_object();
      LabelSelector::Requirement r;
      r.key = string_at(e, "key");
      if (r.key.empty()) {
        return make_error(where + ".key: must be set");
      }
      const std::string op = string_at(e, "operator");
      if (op == "In") {
        r.op = LabelSelector::Op::in;
      } else if (op == "NotIn") {
        r.op = LabelSelector::Op::not_in;
      } else if (op == "Exists") {
        r.op = LabelSelector::Op::exists;
      } else if (op == "DoesNotExist") {
        r.op = LabelSelector::Op::does_not_exist;
      } else {
        return make_error(where + ".operator: \"" + op + "\" is not one of In, NotIn, Exists, DoesNotExist");
      }
      if (const json::array* vals = array_at(e, "values")) {
        for (const json::value& v : *vals) {
          r.values.push_back(text(v));
        }
      }
      if ((r.op == LabelSelector::Op::in || r.op == LabelSelector::Op::not_in) && r.values.empty()) {
        return make_error(where + ".values: In and NotIn need at least one value");
      }
      sel.requirements.push_back(std::move(r));
    }
  }
  return sel;
}

bool term_matches(const PodAffinityTerm& term, std::string_view owner_ns, std::string_view pod_ns, const Labels& labels,
                  const Labels* ns_labels) {
  bool ns_ok = false;
  if (term.namespaces.empty() && !term.namespace_selector) {
    ns_ok = pod_ns == owner_ns;
  } else {
    ns_ok = std::find(term.namespaces.begin(), term.namespaces.end(), pod_ns) != term.namespaces.end();
    if (!ns_ok && term.namespace_selector) {
      static const Labels kNone;
      ns_ok = term.namespace_selector->matches(ns_labels != nullptr ? *ns_labels : kNone);
    }
  }
  return ns_ok && term.selector.matches(labels);
}

const PodFactsExtras& no_pod_facts_extras() {
  static const PodFactsExtras kNone;
  return kNone;
}

std::shared_ptr<const PodFacts> empty_pod_facts() {
  static const std::shared_ptr<const PodFacts> kEmpty = std::make_shared<const PodFacts>();
  return kEmpty;
}

namespace {

// The facts with their extras, the pointer left null when the extras are all empty.
std::shared_ptr<const PodFacts> with_extras(PodFacts&& f, PodFactsExtras&& x) {
  if (!x.empty()) {
    f.extras = std::make_unique<const PodFactsExtras>(std::move(x));
  }
  return std::make_shared<const PodFacts>(std::move(f));
}

}  // namespace

Result<std::shared_ptr<const PodFacts>> parse_pod_facts(const json::object& pod) {
  PodFacts f;
  PodFactsExtras x;
  const json::object* meta = object_at(pod, "metadata");
  if (meta != nullptr) {
    if (const json::object* l = object_at(*meta, "labels")) {
      f.labels.reserve(l->size());
      for (const auto& kv : *l) {
        f.labels.emplace(std::string(kv.key()), text(kv.value()));
      }
      f.labels.shrink_to_fit();  // duplicate keys (a JSON object may repeat one) leave room unused
    }
    const json::value* del = meta->if_contains("deletionTimestamp");
    f.terminating = del != nullptr && !del->is_null();
    f.uid = string_at(*meta, "uid");
    // metav1.GetControllerOf: the first ownerReference with controller: true.
    if (const json::array* owners = array_at(*meta, "ownerReferences")) {
      for (const json::value& ov : *owners) {
        const json::object* o = ov.is_object() ? &ov.get_object() : nullptr;
        const json::value* ctl = o ? o->if_contains("controller") : nullptr;
        if (ctl == nullptr || !ctl->is_bool() || !ctl->get_bool()) {
          continue;
        }
        const std::string api = string_at(*o, "apiVersion");
        const std::string kind = string_at(*o, "kind");
        if (api == "v1" && kind == "ReplicationController") {
          f.controller_kind = ControllerKind::replication_controller;
        } else if (api == "apps/v1" && kind == "ReplicaSet") {
          f.controller_kind = ControllerKind::replica_set;
        } else if (api == "apps/v1" && kind == "StatefulSet") {
          f.controller_kind = ControllerKind::stateful_set;
        }
        if (f.controller_kind != ControllerKind::none) {
          f.controller_name = string_at(*o, "name");
        }
        break;
      }
    }
  }
  if (const json::object* status = object_at(pod, "status")) {
    if (std::string st = string_at(*status, "startTime"); !st.empty()) {
      if (auto t = parse_rfc3339(st); t.ok()) {
        f.start_unix = std::chrono::duration_cast<std::chrono::seconds>(t.value().time_since_epoch()).count();
      }
    }
    x.nominated_node = string_at(*status, "nominatedNodeName");
    if (const json::array* conds = array_at(*status, "conditions")) {
      for (const json::value& cv : *conds) {
        const json::object* c = cv.is_object() ? &cv.get_object() : nullptr;
        if (c != nullptr && string_at(*c, "type") == "DisruptionTarget") {
          f.preemption_target = string_at(*c, "status") == "True" && string_at(*c, "reason") == "PreemptionByScheduler";
        }
      }
    }
  }
  const json::object* spec = object_at(pod, "spec");
  if (spec != nullptr) {
    if (const json::value* pr = spec->if_contains("priority"); pr != nullptr && pr->is_int64()) {
      f.priority = static_cast<int32_t>(std::clamp<int64_t>(pr->get_int64(), INT32_MIN, INT32_MAX));
    } else if (pr != nullptr && pr->is_uint64()) {
      f.priority = static_cast<int32_t>(std::min<uint64_t>(pr->get_uint64(), INT32_MAX));
    }
    f.preempt_never = string_at(*spec, "preemptionPolicy") == "Never";
  }
  if (spec == nullptr) {
    if (f.labels.empty() && f.controller_kind == ControllerKind::none && !f.terminating && f.uid.empty() &&
        f.start_unix == 0 && x.empty() && !f.preemption_target) {
      return empty_pod_facts();
    }
    return with_extras(std::move(f), std::move(x));
  }
  f.node_name = string_at(*spec, "nodeName");
  nonzero_requests(*spec, f);
  if (const json::object* aff = object_at(*spec, "affinity")) {
    if (auto st = parse_terms(object_at(*aff, "podAffinity"), "podAffinity", f.labels, "spec.affinity", &x.affinity,
                              &x.preferred_affinity);
        !st) {
      return st.error();
    }
    if (auto st = parse_terms(object_at(*aff, "podAntiAffinity"), "podAntiAffinity", f.labels, "spec.affinity",
                              &x.anti_affinity, &x.preferred_anti_affinity);
        !st) {
      return st.error();
    }
  }
  if (const json::array* tsc = array_at(*spec, "topologySpreadConstraints")) {
    for (size_t i = 0; i < tsc->size(); ++i) {
      std::string at = "spec.topologySpreadConstraints[" + std::to_string(i) + "]";
      if (!(*tsc)[i].is_object()) {
        return make_error(at + ": must be an object");
      }
      const json::object& c = (*tsc)[i].get_object();
      SpreadConstraint sc;
      auto skew = integer(c, "maxSkew");
      if (!skew || *skew <= 0) {
        return make_error(at + ".maxSkew: must be a positive integer, got " +
                          (c.if_contains("maxSkew") ? json::serialize(c.at("maxSkew")) : std::string("nothing")));
      }
      sc.max_skew = static_cast<int32_t>(*skew);
      sc.topology_key = string_at(c, "topologyKey");
      if (sc.topology_key.empty()) {
        return make_error(at + ".topologyKey: must be set");
      }
      const std::string when = string_at(c, "whenUnsatisfiable");
      if (when == "DoNotSchedule" || when.empty()) {
        sc.hard = true;
      } else if (when == "ScheduleAnyway") {
        sc.hard = false;
      } else {
        return make_error(at + ".whenUnsatisfiable: \"" + when + "\" is not DoNotSchedule or ScheduleAnyway");
      }
      if (const json::object* s = object_at(c, "labelSelector")) {
        auto sel = parse_label_selector(*s, at + ".labelSelector");
        if (!sel.ok()) {
          return sel.error();
        }
        sc.selector = std::move(sel.value());
      }
      add_label_keys(sc.selector, array_at(c, "matchLabelKeys"), f.labels, LabelSelector::Op::in);
      if (c.if_contains("minDomains") != nullptr && !c.at("minDomains").is_null()) {
        auto md = integer(c, "minDomains");
        if (!md || *md <= 0) {
          return make_error(at + ".minDomains: must be a positive integer, got " + json::serialize(c.at("minDomains")));
        }
        sc.min_domains = static_cast<int32_t>(*md);
      }
      for (auto [field, dst, def] : {std::tuple{"nodeAffinityPolicy", &sc.honor_node_affinity, true},
                                     std::tuple{"nodeTaintsPolicy", &sc.honor_node_taints, false}}) {
        const std::string v = string_at(c, field);
        if (v.empty()) {
          *dst = def;
        } else if (v == "Honor" || v == "Ignore") {
          *dst = v == "Honor";
        } else {
          return make_error(at + "." + field + ": \"" + v + "\" is not Honor or Ignore");
        }
      }
      x.spread.push_back(std::move(sc));
    }
  }
  if (const json::array* cs = array_at(*spec, "containers")) {
    for (size_t ci = 0; ci < cs->size(); ++ci) {
      const json::object* c = (*cs)[ci].is_object() ? &(*cs)[ci].get_object() : nullptr;
      const json::array* ports = c ? array_at(*c, "ports") : nullptr;
      for (size_t pi = 0; ports != nullptr && pi < ports->size(); ++pi) {
        const json::object* p = (*ports)[pi].is_object() ? &(*ports)[pi].get_object() : nullptr;
        if (p == nullptr) {
          continue;
        }
        auto hp = integer(*p, "hostPort");
        if (!hp || *hp <= 0) {
          continue;
        }
        if (*hp > 65535) {
          return make_error("spec.containers[" + std::to_string(ci) + "].ports[" + std::to_string(pi) +
                            "].hostPort: " + std::to_string(*hp) + " is not a port number");
        }
        HostPort h;
        h.port = static_cast<int32_t>(*hp);
        if (std::string ip = string_at(*p, "hostIP"); !ip.empty()) {
          h.ip = ip;
        }
        if (std::string proto = string_at(*p, "protocol"); !proto.empty()) {
          h.protocol = proto;
        }
        x.host_ports.push_back(std::move(h));
      }
    }
  }
  const std::string pod_name = meta ? string_at(*meta, "name") : std::string();
  if (const json::array* vols = array_at(*spec, "volumes")) {
    for (const json::value& vv : *vols) {
      if (!vv.is_object()) {
        continue;
      }
      const json::object& v = vv.get_object();
      if (const json::object* pvc = object_at(v, "persistentVolumeClaim")) {
        x.claims.push_back(string_at(*pvc, "claimName"));
      } else if (object_at(v, "ephemeral") != nullptr) {
        x.claims.push_back(pod_name + "-" + string_at(v, "name"));  // generic ephemeral volume's PVC name
      } else if (const json::object* g = object_at(v, "gcePersistentDisk")) {
        x.disks.push_back(
            DiskVolume{"gce",
                       string_at(*g, "pdName"),
                       g->if_contains("readOnly") && g->at("readOnly").is_bool() && g->at("readOnly").get_bool(),
                       {}});
      } else if (const json::object* a = object_at(v, "awsElasticBlockStore")) {
        x.disks.push_back(DiskVolume{"aws", string_at(*a, "volumeID"), false, {}});
      } else if (const json::object* r = object_at(v, "rbd")) {
        std::string pool = string_at(*r, "pool");
        DiskVolume d{"rbd",
                     (pool.empty() ? std::string("rbd") : pool) + "/" + string_at(*r, "image"),
                     r->if_contains("readOnly") && r->at("readOnly").is_bool() && r->at("readOnly").get_bool(),
                     {}};
        if (const json::array* mons = array_at(*r, "monitors")) {
          for (const json::value& m : *mons) {
            d.monitors.push_back(text(m));
          }
        }
        x.disks.push_back(std::move(d));
      } else if (const json::object* i = object_at(v, "iscsi")) {
        x.disks.push_back(
            DiskVolume{"iscsi",
                       string_at(*i, "iqn"),
                       i->if_contains("readOnly") && i->at("readOnly").is_bool() && i->at("readOnly").get_bool(),
                       {}});
      } else if (const json::object* csi = object_at(v, "csi")) {
        x.inline_csi_drivers.push_back(string_at(*csi, "driver"));
      }
    }
  }
  if (const json::array* rc = array_at(*spec, "resourceClaims"); rc != nullptr && !rc->empty()) {
    f.dynamic_resource_claims = true;
  }
  return with_extras(std::move(f), std::move(x));
}

}  // namespace gpuslice::scheduler
