#pragma once
// An in-memory API server for the loop's seam (LoopApi): pods, nodes and PersistentVolumes with resourceVersions, RFC
// 7386 merge patches with the metadata.resourceVersion precondition (409 on mismatch), pods/binding (409 when bound),
// pods/status conditions and Events recorded. Every write is delivered to the subscribers as a watch event
// through the executor (so, as with a real watch, the writer sees its own change a moment later). Faults can be
// injected per call. Test-only.

#include "common/json_access.h"
#include "common/json_patch.h"
#include "kube/reflector.h"
#include "scheduler/loop_api.h"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::scheduler::testing {

/// Runs `io` until `done` holds (checked between handlers), with a generous cap so a bug fails the test instead
/// of hanging it. No assertion depends on how long this takes.
inline bool run_until(boost::asio::io_context& io, const std::function<bool()>& done,
                      std::chrono::seconds cap = std::chrono::seconds(20)) {
  const auto end = std::chrono::steady_clock::now() + cap;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) {
      return false;
    }
    io.run_for(std::chrono::milliseconds(5));
    io.restart();
  }
  return true;
}

inline void merge_patch(boost::json::object& target, const boost::json::object& patch) {
  for (const auto& [k, v] : patch) {
    if (v.is_null()) {
      target.erase(k);
    } else if (v.is_object()) {
      auto* existing = target.if_contains(k);
      if (existing == nullptr || !existing->is_object()) {
        target[k] = boost::json::object{};
      }
      merge_patch(target[k].as_object(), v.get_object());
    } else {
      target[k] = v;
    }
  }
}

class FakeApi : public LoopApi {
 public:
  using Sink = std::function<void(const kube::ReflectorEvent&)>;

  explicit FakeApi(boost::asio::any_io_executor ex) : ex_(std::move(ex)) {}

  // ---- state ----
  std::map<std::string, boost::json::object> pods;   // "ns/name"
  std::map<std::string, boost::json::object> nodes;  // name
  std::vector<std::pair<std::string, kube::PodCondition>> conditions;
  std::vector<kube::EventRecord> events;
  int64_t rv = 100;
  int binds = 0;
  /// Returns an error to inject for a call ("patch_pod ns/name", "patch_node n", "bind ns/name", ...), or none.
  std::function<std::optional<kube::ApiError>(const std::string& call)> fault;
  std::vector<std::string> calls;

  void subscribe_pods(Sink s) { pod_sinks_.push_back(std::move(s)); }
  void subscribe_nodes(Sink s) { node_sinks_.push_back(std::move(s)); }
  /// PersistentVolumes: kept with resourceVersions like pods and nodes; patch_volume honours the
  /// metadata.resourceVersion precondition (409) as kube-apiserver does, and every write is a watch event.
  std::map<std::string, boost::json::object> volumes;  // name
  std::vector<std::string> volume_patches;             // as sent
  void subscribe_volumes(Sink s) { volume_sinks_.push_back(std::move(s)); }
  void put_volume(boost::json::object pv) {
    const std::string name = kube::name_of(pv);
    pv["metadata"].as_object()["resourceVersion"] = std::to_string(++rv);
    const bool existed = volumes.count(name) != 0;
    volumes[name] = pv;
    deliver(volume_sinks_, existed ? kube::ReflectorEventType::modified : kube::ReflectorEventType::added, pv);
  }

  // ---- direct mutations (the "user" and kubelet side), delivered as watch events ----
  void put_node(boost::json::object node) {
    const std::string name = kube::name_of(node);
    node["metadata"].as_object()["resourceVersion"] = std::to_string(++rv);
    const bool existed = nodes.count(name) != 0;
    nodes[name] = node;
    deliver(node_sinks_, existed ? kube::ReflectorEventType::modified : kube::ReflectorEventType::added, node);
  }
  void put_pod(boost::json::object pod) {
    const std::string key = kube::namespace_of(pod) + "/" + kube::name_of(pod);
    auto& meta = pod["metadata"].as_object();
    meta["resourceVersion"] = std::to_string(++rv);
    if (!meta.contains("uid")) {
      meta["uid"] = "uid-" + key;
    }
    const bool existed = pods.count(key) != 0;
    pods[key] = pod;
    deliver(pod_sinks_, existed ? kube::ReflectorEventType::modified : kube::ReflectorEventType::added, pod);
  }
  void delete_pod(const std::string& key) {
    auto it = pods.find(key);
    if (it == pods.end()) {
      return;
    }
    auto obj = it->second;
    pods.erase(it);
    deliver(pod_sinks_, kube::ReflectorEventType::deleted, obj);
  }
  /// The first list of every informer, in pages of `relist_page_size` items as the reflector delivers a paged
  /// list (kube-apiserver pages at the reflector's limit; small pages here so every loop test crosses pages).
  std::size_t relist_page_size = 2;
  void relist() {
    std::vector<boost::json::object> p;
    for (auto& [k, v] : pods) {
      p.push_back(v);
    }
    std::vector<boost::json::object> n;
    for (auto& [k, v] : nodes) {
      n.push_back(v);
    }
    deliver_pages(pod_sinks_, p);
    deliver_pages(node_sinks_, n);
  }
  template <class Sinks>
  void deliver_pages(Sinks& sinks, const std::vector<boost::json::object>& all) {
    const std::size_t size = std::max<std::size_t>(relist_page_size, 1);
    std::size_t at = 0;
    do {
      std::vector<boost::json::object> page(all.begin() + static_cast<std::ptrdiff_t>(at),
                                            all.begin() + static_cast<std::ptrdiff_t>(std::min(all.size(), at + size)));
      kube::ReflectorEvent e;
      e.type = kube::ReflectorEventType::relisted;
      e.items = &page;
      e.relist_begins = at == 0;
      at += size;
      e.relist_complete = at >= all.size();
      for (auto& s : sinks) {
        s(e);
      }
    } while (at < all.size());
  }

  // ---- LoopApi ----
  Task<kube::ApiResult<Object>> patch_pod(std::string ns, std::string name, std::string patch) override {
    const std::string key = ns + "/" + name;
    if (auto e = injected("patch_pod " + key)) {
      co_return *e;
    }
    auto it = pods.find(key);
    if (it == pods.end()) {
      co_return not_found("pods", name);
    }
    auto r = apply(it->second, patch);
    if (!r) {
      co_return r.error();
    }
    deliver(pod_sinks_, kube::ReflectorEventType::modified, it->second);
    co_return it->second;
  }
  /// PVC patches as sent (the fake keeps no claims: tests deliver claim events to the loop themselves).
  std::vector<std::pair<std::string, std::string>> claim_patches;  // "ns/name", merge patch
  Task<kube::ApiResult<Object>> patch_claim(std::string ns, std::string name, std::string patch) override {
    const std::string key = ns + "/" + name;
    if (auto e = injected("patch_claim " + key)) {
      co_return *e;
    }
    claim_patches.emplace_back(key, patch);
    co_return Object{};
  }
  Task<kube::ApiResult<Object>> patch_volume(std::string name, std::string patch) override {
    if (auto e = injected("patch_volume " + name)) {
      co_return *e;
    }
    volume_patches.push_back(patch);
    auto it = volumes.find(name);
    if (it == volumes.end()) {
      co_return not_found("persistentvolumes", name);
    }
    auto r = apply(it->second, patch);
    if (!r) {
      co_return r.error();
    }
    deliver(volume_sinks_, kube::ReflectorEventType::modified, it->second);
    co_return it->second;
  }
  Task<kube::ApiResult<Object>> patch_node(std::string name, std::string patch) override {
    if (auto e = injected("patch_node " + name)) {
      co_return *e;
    }
    auto it = nodes.find(name);
    if (it == nodes.end()) {
      co_return not_found("nodes", name);
    }
    auto r = apply(it->second, patch);
    if (!r) {
      co_return r.error();
    }
    deliver(node_sinks_, kube::ReflectorEventType::modified, it->second);
    co_return it->second;
  }
  /// As kube-apiserver's JSON Patch (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go with
  /// gopkg.in/evanphx/json-patch.v4): applied to the current object, all ops or none; a failed op (a `test` that
  /// does not hold, a missing parent) answers 422 and changes nothing; an absent member tests equal to null.
  /// metadata.resourceVersion is no precondition here unless a `test` op names it.
  Task<kube::ApiResult<Object>> json_patch_node(std::string name, std::string patch) override {
    if (auto e = injected("json_patch_node " + name)) {
      co_return *e;
    }
    auto it = nodes.find(name);
    if (it == nodes.end()) {
      co_return not_found("nodes", name);
    }
    auto r = apply_json(it->second, patch);
    if (!r) {
      co_return r.error();
    }
    deliver(node_sinks_, kube::ReflectorEventType::modified, it->second);
    co_return it->second;
  }
  Task<kube::ApiResult<Object>> get_pod(std::string ns, std::string name) override {
    calls.push_back("get_pod " + ns + "/" + name);
    auto it = pods.find(ns + "/" + name);
    if (it == pods.end()) {
      co_return not_found("pods", name);
    }
    co_return it->second;
  }
  Task<kube::ApiResult<Object>> get_node(std::string name) override {
    calls.push_back("get_node " + name);
    auto it = nodes.find(name);
    if (it == nodes.end()) {
      co_return not_found("nodes", name);
    }
    co_return it->second;
  }
  /// As kube-apiserver's BindingREST (v1.34.3 pkg/registry/core/pod/storage/storage.go setPodNodeAndMetadata):
  /// UID precondition, refused when bound or being deleted, then spec.nodeName, the Binding's annotations and
  /// labels, and PodScheduled=True in one write.
  std::vector<kube::BindingMetadata> binding_metadata;  // per accepted Binding
  /// false: an API server before Kubernetes 1.33, which copies a Binding's annotations but not its labels.
  bool copy_binding_labels = true;
  /// Calls for which the write is applied but its answer is lost (a 504 returned instead), as when the
  /// connection drops after the server committed.
  std::function<bool(const std::string& call)> lose_answer;
  Task<kube::ApiStatus> bind(std::string ns, std::string name, std::string node, std::string uid,
                             kube::BindingMetadata metadata) override {
    const std::string key = ns + "/" + name;
    if (auto e = injected("bind " + key)) {
      co_return *e;
    }
    auto it = pods.find(key);
    if (it == pods.end()) {
      co_return not_found("pods", name);
    }
    if (!uid.empty() && kube::uid_of(it->second) != uid) {
      co_return kube::ApiError{409, "Conflict", "uid precondition failed"};
    }
    if (string_at_pointer(it->second, "/metadata/deletionTimestamp") != "") {
      co_return kube::ApiError{409, "Conflict", "pod " + name + " is being deleted, cannot be assigned to a host"};
    }
    if (!string_at_pointer(it->second, "/spec/nodeName").empty()) {
      co_return kube::ApiError{409, "Conflict", "pod " + name + " is already assigned to a node"};
    }
    it->second["spec"].as_object()["nodeName"] = node;
    auto& meta = it->second["metadata"].as_object();
    for (const auto& [field, values] :
         {std::pair{"annotations", &metadata.annotations}, std::pair{"labels", &metadata.labels}}) {
      if (values->empty() || (std::string_view(field) == "labels" && !copy_binding_labels)) {
        continue;
      }
      if (!meta.contains(field) || !meta[field].is_object()) {
        meta[field] = boost::json::object{};
      }
      for (const auto& [k, v] : *values) {
        meta[field].as_object()[k] = v;
      }
    }
    if (auto* st = it->second.if_contains("status"); st == nullptr || !st->is_object()) {
      it->second["status"] = boost::json::object{};
    }
    auto& status = it->second["status"].as_object();
    boost::json::array conds;
    if (auto* c = status.if_contains("conditions"); c != nullptr && c->is_array()) {
      for (const auto& x : c->as_array()) {
        if (!x.is_object() || string_at_pointer(x.as_object(), "/type") != "PodScheduled") {
          conds.push_back(x);
        }
      }
    }
    conds.push_back(boost::json::object{{"type", "PodScheduled"}, {"status", "True"}});
    status["conditions"] = std::move(conds);
    meta["resourceVersion"] = std::to_string(++rv);
    ++binds;
    binding_metadata.push_back(std::move(metadata));
    deliver(pod_sinks_, kube::ReflectorEventType::modified, it->second);
    if (lose_answer && lose_answer("bind " + key)) {
      co_return kube::ApiError{504, "Timeout", "the answer was lost after the server applied the request"};
    }
    co_return kube::ApiStatus{};
  }
  Task<kube::ApiResult<Object>> patch_condition(std::string ns, std::string name,
                                                kube::PodCondition condition) override {
    const std::string key = ns + "/" + name;
    if (auto e = injected("patch_condition " + key)) {
      co_return *e;
    }
    auto it = pods.find(key);
    if (it == pods.end()) {
      co_return not_found("pods", name);
    }
    conditions.emplace_back(key, condition);
    auto& status = it->second["status"].as_object();
    status["conditions"] = boost::json::array{boost::json::object{{"type", condition.type},
                                                                  {"status", condition.status},
                                                                  {"reason", condition.reason},
                                                                  {"message", condition.message}}};
    it->second["metadata"].as_object()["resourceVersion"] = std::to_string(++rv);
    deliver(pod_sinks_, kube::ReflectorEventType::modified, it->second);
    co_return it->second;
  }
  Task<kube::ApiResult<Object>> create_event(kube::EventRecord event) override {
    if (auto e = injected("create_event " + event.reason)) {
      co_return *e;
    }
    events.push_back(event);
    co_return Object{};
  }
  /// Series updates per Event name: the last merge patch body.
  std::map<std::string, std::string> event_patches;
  Task<kube::ApiResult<Object>> patch_event(std::string ns, std::string name, std::string patch) override {
    if (auto e = injected("patch_event " + ns + "/" + name)) {
      co_return *e;
    }
    bool known = false;
    for (const auto& ev : events) {
      known = known || ev.name == name;
    }
    if (!known) {
      co_return not_found("events", name);
    }
    event_patches[ns + "/" + name] = std::move(patch);
    co_return Object{};
  }
  Task<kube::ApiResult<Object>> patch_pod_status(std::string ns, std::string name, std::string patch) override {
    const std::string key = ns + "/" + name;
    if (auto e = injected("patch_pod_status " + key)) {
      co_return *e;
    }
    auto it = pods.find(key);
    if (it == pods.end()) {
      co_return not_found("pods", name);
    }
    auto r = apply(it->second, patch);
    if (!r) {
      co_return r.error();
    }
    deliver(pod_sinks_, kube::ReflectorEventType::modified, it->second);
    co_return it->second;
  }
  /// Graceful deletion as the API server does it for a pod on a node: deletionTimestamp set, the pod stays until
  /// finish_deletion() (its kubelet) removes it; a pod on no node goes at once. UID precondition as the server's.
  std::vector<std::string> removed;  // "ns/name" per accepted graceful delete
  bool zero_grace = false;           // every pod has terminationGracePeriodSeconds 0: deleted at once
  Task<kube::ApiStatus> remove_pod(std::string ns, std::string name, std::string uid) override {
    // A real DELETE is a round trip: the loop's other work (watch events) runs meanwhile.
    co_await boost::asio::post(ex_, boost::asio::use_awaitable);
    const std::string key = ns + "/" + name;
    if (auto e = injected("remove_pod " + key)) {
      co_return *e;
    }
    auto it = pods.find(key);
    if (it == pods.end()) {
      co_return not_found("pods", name);
    }
    auto& meta = it->second["metadata"].as_object();
    if (!uid.empty() && meta["uid"] != boost::json::value(uid)) {
      co_return kube::ApiError{409, "Conflict", "Precondition failed: UID in precondition: " + uid};
    }
    removed.push_back(key);
    if (zero_grace || string_at_pointer(it->second, "/spec/nodeName").empty()) {
      delete_pod(key);
      co_return kube::ApiStatus::Ok();
    }
    if (!meta.contains("deletionTimestamp")) {
      meta["deletionTimestamp"] = "2026-12-01T10:00:00Z";
      meta["resourceVersion"] = std::to_string(++rv);
      deliver(pod_sinks_, kube::ReflectorEventType::modified, it->second);
    }
    co_return kube::ApiStatus::Ok();
  }

 private:
  std::optional<kube::ApiError> injected(const std::string& call) {
    calls.push_back(call);
    if (fault) {
      return fault(call);
    }
    return std::nullopt;
  }
  static kube::ApiError not_found(const std::string& kind, const std::string& name) {
    return kube::ApiError{404, "NotFound", kind + " \"" + name + "\" not found"};
  }
  kube::ApiResult<bool> apply(boost::json::object& target, const std::string& patch_text) {
    boost::json::error_code ec;
    auto pv = boost::json::parse(patch_text, ec);
    if (ec || !pv.is_object()) {
      return kube::ApiError{400, "BadRequest", "bad patch"};
    }
    auto patch = pv.get_object();
    auto& meta = target["metadata"].as_object();
    if (auto* pm = patch.if_contains("metadata"); pm != nullptr && pm->is_object()) {
      if (auto* prv = pm->get_object().if_contains("resourceVersion")) {
        if (*prv != meta["resourceVersion"]) {
          return kube::ApiError{409, "Conflict", "the object has been modified"};
        }
        pm->as_object().erase("resourceVersion");
      }
      // metadata.uid is immutable (ValidateObjectMetaUpdate): a patch naming another UID is refused, which is how
      // kubelet's PatchPodStatus makes the UID a precondition.
      if (auto* puid = pm->get_object().if_contains("uid"); puid != nullptr && *puid != meta["uid"]) {
        return kube::ApiError{422, "Invalid",
                              "metadata.uid: Invalid value: " + boost::json::serialize(*puid) + ": field is immutable"};
      }
    }
    merge_patch(target, patch);
    target["metadata"].as_object()["resourceVersion"] = std::to_string(++rv);
    return true;
  }
  kube::ApiResult<bool> apply_json(boost::json::object& target, const std::string& patch_text) {
    boost::json::error_code ec;
    auto pv = boost::json::parse(patch_text, ec);
    if (ec || !pv.is_array()) {
      return kube::ApiError{400, "BadRequest", "json patch is not an array"};
    }
    gpuslice::Patch ops;
    for (const auto& v : pv.get_array()) {
      const auto* o = v.if_object();
      const auto* op = o != nullptr ? o->if_contains("op") : nullptr;
      const auto* path = o != nullptr ? o->if_contains("path") : nullptr;
      if (op == nullptr || !op->is_string() || path == nullptr || !path->is_string()) {
        return kube::ApiError{400, "BadRequest", "json patch op without op or path"};
      }
      gpuslice::PatchOp p;
      const std::string_view kind = op->get_string();
      if (kind == "add") {
        p.kind = gpuslice::PatchOp::Kind::add;
      } else if (kind == "replace") {
        p.kind = gpuslice::PatchOp::Kind::replace;
      } else if (kind == "remove") {
        p.kind = gpuslice::PatchOp::Kind::remove;
      } else if (kind == "test") {
        p.kind = gpuslice::PatchOp::Kind::test;
      } else {
        return kube::ApiError{422, "Invalid", "unexpected kind: " + std::string(kind)};
      }
      p.path = std::string(path->get_string());
      if (const auto* val = o->if_contains("value")) {
        p.value = *val;
      }
      ops.push_back(std::move(p));
    }
    auto out = gpuslice::apply_patch(boost::json::value(target), ops);
    if (!out) {
      return kube::ApiError{422, "", out.message()};
    }
    if (!out->is_object()) {
      return kube::ApiError{422, "Invalid", "the patched object is not an object"};
    }
    target = std::move(out->get_object());
    target["metadata"].as_object()["resourceVersion"] = std::to_string(++rv);
    return true;
  }
  void deliver(std::vector<Sink>& sinks, kube::ReflectorEventType type, const boost::json::object& obj) {
    boost::asio::post(ex_, [&sinks, type, obj] {
      kube::ReflectorEvent e;
      e.type = type;
      e.object = &obj;
      e.resource_version = kube::resource_version_of(obj);
      for (auto& s : sinks) {
        s(e);
      }
    });
  }

  boost::asio::any_io_executor ex_;
  std::vector<Sink> pod_sinks_;
  std::vector<Sink> node_sinks_;
  std::vector<Sink> volume_sinks_;
};

}  // namespace gpuslice::scheduler::testing
