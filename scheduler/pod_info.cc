#include "scheduler/pod_info.h"

#include "scheduler/framework/pod_facts.h"

#include "common/json_access.h"
#include "common/quantity.h"

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <charconv>
#include <iterator>
#include <utility>

namespace gpuslice::scheduler {
namespace json = boost::json;

namespace {

std::vector<std::string> comma_list(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t p = s.find(',', start);
    std::string_view part = trim(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (!part.empty()) {
      out.emplace_back(part);
    }
    if (p == std::string_view::npos) {
      break;
    }
    start = p + 1;
  }
  return out;
}

std::string value_text(const json::value& v) {
  if (v.is_string()) {
    return std::string(v.get_string());
  }
  return json::serialize(v);
}

Result<int64_t> quantity(const json::value& v, const std::string& field) {
  if (!v.is_string() && !v.is_number()) {
    return make_error(field + ": " + json::serialize(v) + " is not a quantity");
  }
  auto q = parse_quantity_milli(value_text(v));
  if (!q.ok()) {
    return make_error(field + ": " + q.message());
  }
  return q.value();
}

// One container's requests (requests, else limits: the API server defaults requests from limits).
Result<ResourceRequests> container_requests(const json::object& c, const std::string& where) {
  ResourceRequests r;
  const json::object* res = object_at(c, "resources");
  if (res == nullptr) {
    return r;
  }
  const json::object* req = object_at(*res, "requests");
  const json::object* lim = object_at(*res, "limits");
  struct Item {
    const char* name;
    int64_t* dst;
    bool milli;
  };
  for (Item it : {Item{"cpu", &r.cpu_milli, true}, Item{"memory", &r.memory_bytes, false},
                  Item{"ephemeral-storage", &r.ephemeral_bytes, false}}) {
    const json::value* v = nullptr;
    const char* section = "requests";
    if (req != nullptr) {
      v = req->if_contains(it.name);
    }
    if (v == nullptr && lim != nullptr) {
      v = lim->if_contains(it.name);
      section = "limits";
    }
    if (v == nullptr) {
      continue;
    }
    auto q = quantity(*v, where + ".resources." + section + "." + it.name);
    if (!q.ok()) {
      return q.error();
    }
    // Bytes: round the milli value up to whole bytes.
    *it.dst = it.milli ? q.value() : (q.value() + 999) / 1000;
  }
  return r;
}

Result<NodeSelectorRequirement> requirement(const json::value& v, const std::string& at) {
  if (!v.is_object()) {
    return make_error(at + ": must be an object");
  }
  const json::object& o = v.get_object();
  NodeSelectorRequirement r;
  r.key = string_at(o, "key");
  const std::string op = string_at(o, "operator");
  static constexpr std::pair<std::string_view, SelectorOp> kOps[] = {
      {"In", SelectorOp::in},         {"NotIn", SelectorOp::not_in},
      {"Exists", SelectorOp::exists}, {"DoesNotExist", SelectorOp::does_not_exist},
      {"Gt", SelectorOp::gt},         {"Lt", SelectorOp::lt}};
  const auto* known = std::find_if(std::begin(kOps), std::end(kOps), [&](const auto& e) { return e.first == op; });
  if (known == std::end(kOps)) {
    return make_error(at + ".operator: \"" + op + "\" is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt");
  }
  r.op = known->second;
  if (const json::array* vals = array_at(o, "values")) {
    for (const json::value& x : *vals) {
      r.values.push_back(value_text(x));
    }
  }
  if ((r.op == SelectorOp::gt || r.op == SelectorOp::lt)) {
    int64_t n = 0;
    const std::string& s = r.values.empty() ? std::string() : r.values[0];
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (r.values.size() != 1 || ec != std::errc() || p != s.data() + s.size()) {
      return make_error(at + ".values: Gt/Lt need exactly one integer value");
    }
  }
  return r;
}

}  // namespace

Result<ScoringWeights> parse_scoring_weights(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return make_error(std::string(kScoringWeightsAnnotation) + ": \"" + std::string(text) + "\" " + why);
  };
  ScoringWeights w;
  bool seen_slot = false, seen_core = false, seen_mem = false;
  size_t start = 0;
  while (true) {
    size_t p = text.find(',', start);
    std::string_view part = trim(text.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    size_t eq = part.find('=');
    if (eq == std::string_view::npos) {
      return bad("entry \"" + std::string(part) + "\" is not name=value");
    }
    std::string_view name = trim(part.substr(0, eq));
    std::string_view val = trim(part.substr(eq + 1));
    int64_t n = 0;
    auto [q, ec] = std::from_chars(val.data(), val.data() + val.size(), n);
    if (val.empty() || ec != std::errc() || q != val.data() + val.size() || n < 0 || n > 1000000) {
      return bad("weight \"" + std::string(val) + "\" is not a non-negative integer");
    }
    bool* seen = nullptr;
    if (name == "slot") {
      seen = &seen_slot;
      w.slot = n;
    } else if (name == "core") {
      seen = &seen_core;
      w.core = n;
    } else if (name == "memory") {
      seen = &seen_mem;
      w.memory = n;
    } else {
      return bad("names \"" + std::string(name) + "\", want slot, core and memory");
    }
    if (*seen) {
      return bad("names \"" + std::string(name) + "\" twice");
    }
    *seen = true;
    if (p == std::string_view::npos) {
      break;
    }
    start = p + 1;
  }
  if (!seen_slot || !seen_core || !seen_mem) {
    return bad("must name slot, core and memory");
  }
  if (w.slot + w.core + w.memory == 0) {
    return bad("needs at least one positive weight");
  }
  return w;
}

Result<ResourceRequests> pod_requests(const json::object& pod) {
  ResourceRequests total;
  const json::object* spec = object_at(pod, "spec");
  if (spec == nullptr) {
    return total;
  }
  ResourceRequests init_max;
  for (const char* key : {"containers", "initContainers"}) {
    const json::array* cs = array_at(*spec, key);
    if (cs == nullptr) {
      continue;
    }
    bool init = std::string_view(key) == "initContainers";
    size_t i = 0;
    for (const json::value& cv : *cs) {
      if (!cv.is_object()) {
        continue;
      }
      std::string where = std::string("spec.") + key + "[" + std::to_string(i++) + "]";
      auto r = container_requests(cv.get_object(), where);
      if (!r.ok()) {
        return r.error();
      }
      if (init) {
        init_max.cpu_milli = std::max(init_max.cpu_milli, r->cpu_milli);
        init_max.memory_bytes = std::max(init_max.memory_bytes, r->memory_bytes);
        init_max.ephemeral_bytes = std::max(init_max.ephemeral_bytes, r->ephemeral_bytes);
      } else {
        total.cpu_milli += r->cpu_milli;
        total.memory_bytes += r->memory_bytes;
        total.ephemeral_bytes += r->ephemeral_bytes;
      }
    }
  }
  total.cpu_milli = std::max(total.cpu_milli, init_max.cpu_milli);
  total.memory_bytes = std::max(total.memory_bytes, init_max.memory_bytes);
  total.ephemeral_bytes = std::max(total.ephemeral_bytes, init_max.ephemeral_bytes);
  if (const json::object* oh = object_at(*spec, "overhead")) {
    json::object wrapper;
    wrapper["resources"] = json::object{{"requests", *oh}};
    auto r = container_requests(wrapper, "spec.overhead");
    if (!r.ok()) {
      return r.error();
    }
    total.cpu_milli += r->cpu_milli;
    total.memory_bytes += r->memory_bytes;
    total.ephemeral_bytes += r->ephemeral_bytes;
  }
  return total;
}

Result<std::vector<NodeSelectorTerm>> parse_node_selector_terms(const json::array& terms, const std::string& at) {
  std::vector<NodeSelectorTerm> out;
  for (size_t ti = 0; ti < terms.size(); ++ti) {
    std::string where = at + "[" + std::to_string(ti) + "]";
    if (!terms[ti].is_object()) {
      return make_error(where + ": must be an object");
    }
    NodeSelectorTerm term;
    for (const char* key : {"matchExpressions", "matchFields"}) {
      const json::array* exprs = array_at(terms[ti].get_object(), key);
      size_t ei = 0;
      for (const json::value& ev : exprs ? *exprs : json::array{}) {
        auto r = requirement(ev, where + "." + key + "[" + std::to_string(ei++) + "]");
        if (!r.ok()) {
          return r.error();
        }
        (std::string_view(key) == "matchFields" ? term.match_fields : term.match_expressions)
            .push_back(std::move(r.value()));
      }
    }
    out.push_back(std::move(term));
  }
  return out;
}

Result<PodInfo> parse_pod(const json::object& pod, const DeviceConfig& devices) {
  PodInfo p;
  const json::object* meta = object_at(pod, "metadata");
  if (meta == nullptr) {
    return make_error("metadata: missing");
  }
  p.name = string_at(*meta, "name");
  if (p.name.empty()) {
    return make_error("metadata.name: missing");
  }
  p.ns = string_at(*meta, "namespace");
  if (p.ns.empty()) {
    p.ns = "default";
  }
  p.uid = string_at(*meta, "uid");
  auto fail = [&](const std::string& m) { return make_error("pod " + p.ns + "/" + p.name + ": " + m); };

  static const json::object kEmpty;
  const json::object* annotations = object_at(*meta, "annotations");
  if (annotations == nullptr) {
    annotations = &kEmpty;
  }
  auto ann = [&](std::string_view key) -> std::optional<std::string> {
    const json::value* v = annotations->if_contains(key);
    if (v == nullptr || !v->is_string()) {
      return std::nullopt;
    }
    return std::string(v->get_string());
  };

  const json::object* spec = object_at(pod, "spec");
  if (spec != nullptr) {
    if (const json::object* ns = object_at(*spec, "nodeSelector")) {
      for (const auto& kv : *ns) {
        p.node_selector.emplace(std::string(kv.key()), value_text(kv.value()));
      }
    }
    const json::object* aff = object_at(*spec, "affinity");
    const json::object* na = aff ? object_at(*aff, "nodeAffinity") : nullptr;
    const json::object* req = na ? object_at(*na, "requiredDuringSchedulingIgnoredDuringExecution") : nullptr;
    if (req != nullptr) {
      const json::array* terms = array_at(*req, "nodeSelectorTerms");
      size_t ti = 0;
      for (const json::value& tv : terms ? *terms : json::array{}) {
        std::string at =
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[" +
            std::to_string(ti) + "]";
        if (!tv.is_object()) {
          return fail(at + ": must be an object");
        }
        NodeSelectorTerm term;
        for (const char* key : {"matchExpressions", "matchFields"}) {
          const json::array* exprs = array_at(tv.get_object(), key);
          size_t ei = 0;
          for (const json::value& ev : exprs ? *exprs : json::array{}) {
            auto r = requirement(ev, at + "." + key + "[" + std::to_string(ei++) + "]");
            if (!r.ok()) {
              return fail(r.message());
            }
            (std::string_view(key) == "matchFields" ? term.match_fields : term.match_expressions)
                .push_back(std::move(r.value()));
          }
        }
        p.required_affinity.push_back(std::move(term));
        ++ti;
      }
    }
    if (const json::array* pref = na ? array_at(*na, "preferredDuringSchedulingIgnoredDuringExecution") : nullptr) {
      for (size_t i = 0; i < pref->size(); ++i) {
        std::string at =
            "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[" + std::to_string(i) + "]";
        const json::object* w = (*pref)[i].is_object() ? &(*pref)[i].get_object() : nullptr;
        const json::object* pt = w ? object_at(*w, "preference") : nullptr;
        if (pt == nullptr) {
          return fail(at + ".preference: missing");
        }
        auto terms = parse_node_selector_terms(json::array{*pt}, at + ".preference");
        if (!terms.ok()) {
          return fail(terms.message());
        }
        const json::value* wv = w->if_contains("weight");
        if (wv == nullptr || !wv->is_int64() || wv->get_int64() < 1 || wv->get_int64() > 100) {
          return fail(at + ".weight: must be an integer 1-100, got " +
                      (wv ? json::serialize(*wv) : std::string("nothing")));
        }
        const auto weight = static_cast<int32_t>(wv->get_int64());
        p.preferred_affinity.emplace_back(weight, std::move(terms.value()[0]));
      }
    }
    if (const json::array* tols = array_at(*spec, "tolerations")) {
      for (const json::value& tv : *tols) {
        if (!tv.is_object()) {
          continue;
        }
        const json::object& t = tv.get_object();
        Toleration tol;
        tol.key = string_at(t, "key");
        tol.op_exists = string_at(t, "operator") == "Exists";
        tol.value = string_at(t, "value");
        tol.effect = string_at(t, "effect");
        p.tolerations.push_back(std::move(tol));
      }
    }
  }

  auto reqs = pod_requests(pod);
  if (!reqs.ok()) {
    return fail(reqs.message());
  }
  p.requests = reqs.value();

  auto g = extract_gpu_request(pod, devices, CountRule::kubelet);
  if (!g.ok()) {
    return fail(g.message());
  }
  p.gpu = std::move(g.value());
  if (const json::value* v = annotations->if_contains(kGpuRequestAnnotation)) {
    // Written by the webhook from the same spec; anything else was written by someone else and is ignored.
    std::string why;
    if (!v->is_string()) {
      why = "is not a string";
    } else if (auto written = decode_gpu_request(v->get_string()); !written.ok()) {
      why = "does not parse (" + written.message() + ")";
    } else if (!(written.value() == p.gpu)) {
      why = "disagrees with the containers' resources (it says " + std::string(v->get_string()) + ", the spec gives " +
            encode_gpu_request(p.gpu) + ")";
    }
    if (!why.empty()) {
      p.ignored_annotations.push_back(std::string(kGpuRequestAnnotation) + " " + why + "; scheduling from the spec");
    }
  }
  const bool bound = spec != nullptr && !string_at(*spec, "nodeName").empty();
  if (!bound) {
    for (std::string_view k : kSchedulerOwnedAnnotations) {
      if (annotations->contains(k)) {
        p.unbound_owned_annotations.emplace_back(k);
      }
    }
  }

  if (auto v = ann(kUseGpuTypeAnnotation)) p.selectors.use_types = comma_list(*v);
  if (auto v = ann(kNoUseGpuTypeAnnotation)) p.selectors.nouse_types = comma_list(*v);
  if (auto v = ann(kUseGpuUuidAnnotation)) p.selectors.use_uuids = comma_list(*v);
  if (auto v = ann(kNoUseGpuUuidAnnotation)) p.selectors.nouse_uuids = comma_list(*v);
  if (auto v = ann(kNumaBindAnnotation)) p.selectors.numa_bind = (*v == "true" || *v == "True" || *v == "1");
  if (auto v = ann(kVgpuModeAnnotation); v && !v->empty()) p.selectors.vgpu_mode = *v;
  if (auto v = ann(kNodePolicyAnnotation); v && !v->empty()) p.node_policy = *v;
  if (auto v = ann(kGpuPolicyAnnotation); v && !v->empty()) p.gpu_policy = *v;
  if (auto v = ann(kScoringWeightsAnnotation)) {
    auto w = parse_scoring_weights(*v);
    if (!w.ok()) {
      return fail(w.message());
    }
    p.weights = w.value();
  }
  auto facts = parse_pod_facts(pod);
  if (!facts.ok()) {
    return fail(facts.message());
  }
  p.facts = std::move(facts.value());
  return p;
}

}  // namespace gpuslice::scheduler
