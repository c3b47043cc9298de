#include "scheduler/mock_agent.h"

#include "common/gpu_request.h"
#include "common/json_access.h"
#include "common/log.h"
#include "common/rfc3339.h"
#include "scheduler/text.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <charconv>

namespace gpuslice::scheduler {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;

using detail::split;

// strconv.ParseInt(s, 10, 32) with the error ignored: 0 on anything that is not an int32.
int64_t go_parse_int32(std::string_view s) {
  int32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) {
    return 0;
  }
  return v;
}

std::string annotation_patch(std::string_view key, const json::value& value) {
  json::object a;
  a[key] = value;
  return json::serialize(json::object{{"metadata", json::object{{"annotations", std::move(a)}}}});
}

// The HAMi-core variables a container's own literal env can set (the runtime applies the spec's env after the
// device plugin's, so the spec's value is what the process sees).
bool hami_core_variable(std::string_view name) {
  return name == "NVIDIA_VISIBLE_DEVICES" || name.rfind("CUDA_", 0) == 0 || name == "GPU_CORE_UTILIZATION_POLICY" ||
         name == "LIBCUDA_LOG_LEVEL";
}

const json::object* find_container(const json::object& pod, std::string_view name, bool init) {
  const std::string key = init ? "initContainers" : "containers";
  const auto* spec = pod.if_contains("spec");
  const auto* arr = spec != nullptr && spec->is_object() ? spec->get_object().if_contains(key) : nullptr;
  if (arr == nullptr || !arr->is_array()) {
    return nullptr;
  }
  for (const auto& c : arr->get_array()) {
    if (c.is_object() && string_at_pointer(c.get_object(), "/name") == name) {
      return &c.get_object();
    }
  }
  return nullptr;
}

json::object container_env_record(const json::object* container, const std::map<std::string, std::string>& plugin) {
  json::object env;
  for (const auto& [k, v] : plugin) {
    env[k] = v;
  }
  const json::value* list = container != nullptr ? container->if_contains("env") : nullptr;
  if (list != nullptr && list->is_array()) {
    for (const auto& e : list->get_array()) {
      if (!e.is_object()) {
        continue;
      }
      const std::string name = string_at_pointer(e.get_object(), "/name");
      const json::value* value = e.get_object().if_contains("value");
      if (hami_core_variable(name) && value != nullptr && value->is_string()) {
        env[name] = value->get_string();
      }
    }
  }
  return env;
}

// The merge patch that deletes the lock, with the node's resourceVersion as precondition (ReleaseNodeLock).
// Built outside the coroutines: g++ 12 rejects initializer lists in a coroutine frame ("array used as initializer").
std::string lock_release_patch(const std::string& resource_version) {
  json::object annotations;
  annotations[kNodeLockAnnotation] = nullptr;
  json::object meta;
  meta["annotations"] = std::move(annotations);
  meta["resourceVersion"] = resource_version;
  json::object root;
  root["metadata"] = std::move(meta);
  return json::serialize(root);
}

}  // namespace

std::vector<KubeletAllocateCall> kubelet_allocate_calls(const json::object& pod, const std::string& gpu_resource) {
  std::vector<KubeletAllocateCall> out;
  const auto* spec = pod.if_contains("spec");
  if (spec == nullptr || !spec->is_object()) {
    return out;
  }
  for (const char* key : {"initContainers", "containers"}) {
    const auto* arr = spec->get_object().if_contains(key);
    if (arr == nullptr || !arr->is_array()) {
      continue;
    }
    for (const auto& c : arr->get_array()) {
      if (!c.is_object()) {
        continue;
      }
      const auto* res = c.get_object().if_contains("resources");
      const auto* limits = res != nullptr && res->is_object() ? res->get_object().if_contains("limits") : nullptr;
      const auto* v =
          limits != nullptr && limits->is_object() ? limits->get_object().if_contains(gpu_resource) : nullptr;
      if (v == nullptr) {
        continue;
      }
      Result<int64_t> n = make_error("");
      if (v->is_string()) {
        n = parse_whole_quantity(v->get_string());
      } else if (v->is_int64()) {
        n = v->get_int64();
      }
      if (!n.ok() || n.value() <= 0) {
        continue;
      }
      out.push_back({string_at_pointer(c.get_object(), "/name"), std::string_view(key) == "initContainers", n.value()});
    }
  }
  return out;
}

std::vector<ContainerDevices> plugin_decode_entries(std::string_view text) {
  std::vector<ContainerDevices> out;
  for (std::string_view segment : split(text, ';')) {
    ContainerDevices cd;
    if (!segment.empty()) {
      for (std::string_view dev : split(segment, ':')) {
        if (dev.find(',') == std::string_view::npos) {
          continue;
        }
        auto f = split(dev, ',');
        if (f.size() < 4) {
          return {};  // DecodeContainerDevices errors; DecodePodDevices returns an empty result and no error
        }
        cd.push_back(ContainerDevice{std::string(f[0]), std::string(f[1]), go_parse_int32(f[2]), go_parse_int32(f[3])});
      }
    }
    if (!cd.empty()) {
      out.push_back(std::move(cd));
    }
  }
  return out;
}

std::string plugin_encode_entries(const std::vector<ContainerDevices>& entries) {
  std::string out;
  for (const auto& cd : entries) {
    for (const auto& d : cd) {
      out += d.uuid + "," + d.type + "," + std::to_string(d.mem_mib) + "," + std::to_string(d.cores) + ":";
    }
    out += ";";
  }
  return out;
}

bool plugin_has_pending_entries(std::string_view to_allocate) {
  return to_allocate.find(kNvidiaVendorWord) != std::string_view::npos;
}

EmulatedAllocate emulate_allocate(const json::object& pending, int64_t devices, std::string_view shared_cache_id,
                                  std::string_view hook_path) {
  EmulatedAllocate r;
  const auto text = annotation(pending, kDevicesToAllocateAnnotation);
  std::vector<ContainerDevices> entries = text ? plugin_decode_entries(*text) : std::vector<ContainerDevices>{};
  // GetNextDeviceRequest: the first (non-empty) entry of the NVIDIA annotation.
  auto next = entries.begin();
  if (!text || next == entries.end()) {
    r.error = "device request not found";
    return r;
  }
  const ContainerDevices devreq = *next;
  if (static_cast<int64_t>(devreq.size()) != devices) {
    r.error = "device number not matched";
    return r;
  }
  // getAllocateResponse: NVIDIA_VISIBLE_DEVICES from the annotation's UUIDs (deduplicated, in order).
  std::vector<std::string> uuids;
  for (const auto& d : devreq) {
    if (std::find(uuids.begin(), uuids.end(), d.uuid) == uuids.end()) {
      uuids.push_back(d.uuid);
    }
  }
  std::string visible;
  for (const auto& u : uuids) {
    visible += (visible.empty() ? "" : ",") + u;
  }
  r.envs["NVIDIA_VISIBLE_DEVICES"] = visible;
  for (size_t i = 0; i < devreq.size(); ++i) {
    r.envs["CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(i)] = std::to_string(devreq[i].mem_mib) + "m";
  }
  r.envs["CUDA_DEVICE_SM_LIMIT"] = std::to_string(devreq[0].cores);
  r.envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] =
      std::string(hook_path) + "/vgpu/" + std::string(shared_cache_id) + ".cache";
  // EraseNextDeviceTypeFromAnnotation: that entry emptied, re-encoded from the decoded (empties dropped) list.
  *next = ContainerDevices{};
  r.erased_to_allocate = plugin_encode_entries(entries);
  r.ok = true;
  return r;
}

std::optional<json::object> plugin_fallback_pending_pod(const std::vector<const json::object*>& pods,
                                                        std::string_view node) {
  std::vector<const json::object*> sorted = pods;
  std::sort(sorted.begin(), sorted.end(), [](const json::object* a, const json::object* b) {
    return std::pair(kube::namespace_of(*a), kube::name_of(*a)) < std::pair(kube::namespace_of(*b), kube::name_of(*b));
  });
  for (const json::object* p : sorted) {
    if (string_at_pointer(*p, "/status/phase") != "Pending" || string_at_pointer(*p, "/spec/nodeName") != node) {
      continue;
    }
    const auto phase = annotation(*p, kBindPhaseAnnotation);
    if (!annotation(*p, kBindTimeAnnotation) || !phase ||
        (*phase != kBindPhaseAllocating && *phase != kBindPhaseSuccess)) {
      continue;
    }
    if (annotation(*p, kVgpuNodeAnnotation).value_or("") == node) {
      return *p;
    }
  }
  return std::nullopt;
}

MockDeviceAgent::MockDeviceAgent(asio::any_io_executor executor, std::shared_ptr<LoopApi> api, std::string gpu_resource,
                                 MockAgentRetry retry)
    : executor_(std::move(executor)), api_(std::move(api)), gpu_resource_(std::move(gpu_resource)), retry_(retry) {}

void MockDeviceAgent::set_plugin_rate(MockAgentPluginRate rate) {
  plugin_rate_ = std::move(rate);
  plugin_buckets_.clear();
}

asio::awaitable<void> MockDeviceAgent::plugin_request_slot(const std::string& node) {
  ++stats_.plugin_requests;
  const auto now = plugin_rate_.now();
  auto it = plugin_buckets_.find(node);
  if (it == plugin_buckets_.end()) {
    it = plugin_buckets_.emplace(node, kube::TokenBucket(plugin_rate_.qps, plugin_rate_.burst, now)).first;
  }
  const auto wait = it->second.reserve(now);
  if (wait <= std::chrono::steady_clock::duration::zero()) {
    co_return;
  }
  ++stats_.plugin_throttled;
  asio::steady_timer t(executor_);
  t.expires_after(wait);
  co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
}

std::size_t MockDeviceAgent::in_flight() const {
  std::size_t n = rejections_in_flight_;
  for (const auto& [node, q] : queues_) {
    n += q.pods.size() + (q.running ? 1 : 0);
  }
  return n;
}

void MockDeviceAgent::on_node_event(const kube::ReflectorEvent& e) {
  using T = kube::ReflectorEventType;
  switch (e.type) {
    case T::relisted:
      // Pages of one list are gathered apart and swapped in whole at its last page: pods arriving between two
      // pages are judged against the previous list, never against half of the new one.
      if (e.relist_begins) {
        listing_.clear();
      }
      for (const auto& n : *e.items) {
        listing_.insert(kube::name_of(n));
        managed_.insert(kube::name_of(n));
      }
      if (e.relist_complete) {
        managed_.swap(listing_);
        listing_.clear();
      }
      break;
    case T::added:
    case T::modified:
      managed_.insert(kube::name_of(*e.object));
      break;
    case T::deleted:
      managed_.erase(kube::name_of(*e.object));
      break;
    case T::bookmark:
      break;
  }
}

void MockDeviceAgent::on_pod_event(const kube::ReflectorEvent& e) {
  using T = kube::ReflectorEventType;
  switch (e.type) {
    case T::relisted:
      if (e.relist_begins) {
        pods_.clear();
      }
      for (const auto& p : *e.items) {
        consider_pod(p);
      }
      break;
    case T::added:
    case T::modified:
      consider_pod(*e.object);
      break;
    case T::deleted: {
      const std::string key = kube::namespace_of(*e.object) + "/" + kube::name_of(*e.object);
      pods_.erase(key);
      if (auto r = rejections_.find(key); r != rejections_.end() && !r->second.writing) {
        rejections_.erase(r);
      }
      break;
    }
    case T::bookmark:
      break;
  }
}

void MockDeviceAgent::consider_pod(const json::object& pod) {
  const std::string key = kube::namespace_of(pod) + "/" + kube::name_of(pod);
  const std::string node = string_at_pointer(pod, "/spec/nodeName");
  if (node.empty() || !managed_.count(node)) {
    pods_.erase(key);
    return;
  }
  pods_[key] = pod;
  const std::string uid = kube::uid_of(pod).empty() ? key : kube::uid_of(pod);
  if (auto r = rejections_.find(key); r != rejections_.end() && r->second.uid != uid && !r->second.writing) {
    rejections_.erase(r);  // another pod under the same name: the rejection was of the one before
  }
  const std::string phase = string_at_pointer(pod, "/status/phase");
  if (admitted_uids_.count(uid) || phase == "Succeeded" || phase == "Failed" ||
      !string_at_pointer(pod, "/metadata/deletionTimestamp").empty()) {
    return;
  }
  admitted_uids_.insert(uid);
  if (annotation(pod, kDevicePluginRecordAnnotation)) {
    return;  // admitted before this agent started (kubelet's checkpoint)
  }
  if (kubelet_allocate_calls(pod, gpu_resource_).empty() && !annotation(pod, kDevicesToAllocateAnnotation)) {
    return;  // kubelet never calls the plugin and there is nothing to report
  }
  queues_[node].pods.push_back(key);
  kick(node);
}

void MockDeviceAgent::kick(const std::string& node) {
  NodeQueue& q = queues_[node];
  if (q.running || q.pods.empty()) {
    return;
  }
  q.running = true;
  asio::co_spawn(executor_, drain(node), asio::detached);
}

asio::awaitable<void> MockDeviceAgent::drain(std::string node) {
  auto self = shared_from_this();
  // kubelet admits one pod at a time, and the plugin serves one Allocate at a time per resource.
  while (!queues_[node].pods.empty()) {
    std::string key = queues_[node].pods.front();
    queues_[node].pods.pop_front();
    co_await admit(node, key);
  }
  queues_[node].running = false;
}

asio::awaitable<Result<json::object>> MockDeviceAgent::pending_pod(const std::string& node) {
  co_await plugin_request_slot(node);
  auto n = co_await api_->get_node(node);
  if (!n) {
    co_return make_error("get node " + node + ": " + n.error().to_string());
  }
  if (const auto lock = annotation(*n, kNodeLockAnnotation)) {
    // nodelock.ParseNodeLock: a bare RFC 3339 time is the legacy form; otherwise exactly three parts.
    const auto parts = split(*lock, ',');
    if (parts.size() == 1) {
      if (auto t = parse_rfc3339(parts[0]); !t) {
        co_return make_error("parsing time \"" + *lock + "\": " + t.message());
      }
    } else if (parts.size() != 3) {
      co_return make_error("malformed lock annotation: expected 3 parts, got " + std::to_string(parts.size()) +
                           " from " + *lock);
    } else if (auto t = parse_rfc3339(parts[0]); !t) {
      co_return make_error("parsing time \"" + std::string(parts[0]) + "\": " + t.message());
    } else if (!parts[1].empty() && !parts[2].empty()) {
      co_await plugin_request_slot(node);
      auto p = co_await api_->get_pod(std::string(parts[1]), std::string(parts[2]));
      if (!p) {
        co_return make_error("get pod " + std::string(parts[1]) + "/" + std::string(parts[2]) + ": " +
                             p.error().to_string());
      }
      co_return std::move(*p);
    }
  }
  std::vector<const json::object*> candidates;
  for (const auto& [key, p] : pods_) {
    candidates.push_back(&p);
  }
  if (auto p = plugin_fallback_pending_pod(candidates, node)) {
    co_return std::move(*p);
  }
  co_return make_error("no binding pod found on node " + node);
}

asio::awaitable<void> MockDeviceAgent::admit(std::string node, std::string key) {
  auto it = pods_.find(key);
  if (it == pods_.end()) {
    co_return;
  }
  const json::object pod = it->second;
  const std::string ns = kube::namespace_of(pod);
  const std::string name = kube::name_of(pod);
  const auto calls = kubelet_allocate_calls(pod, gpu_resource_);

  json::array containers;
  for (const char* k : {"initContainers", "containers"}) {
    const auto* spec = pod.if_contains("spec");
    const auto* arr = spec != nullptr && spec->is_object() ? spec->get_object().if_contains(k) : nullptr;
    for (const auto& c : arr != nullptr && arr->is_array() ? arr->get_array() : json::array{}) {
      json::object rec;
      rec["name"] = c.is_object() ? string_at_pointer(c.get_object(), "/name") : std::string();
      rec["init"] = std::string_view(k) == "initContainers";
      rec["devices"] = 0;
      rec["allocated"] = false;
      rec["env"] = container_env_record(c.is_object() ? &c.get_object() : nullptr, {});
      containers.emplace_back(std::move(rec));
    }
  }
  auto record_for = [&](const KubeletAllocateCall& call) -> json::object* {
    for (auto& c : containers) {
      auto& o = c.as_object();
      if (o.at("name").as_string() == call.container && o.at("init").as_bool() == call.init) {
        return &o;
      }
    }
    return nullptr;
  };

  std::string error;
  std::string pending_key;
  for (const auto& call : calls) {
    ++stats_.allocate_calls;
    auto pending = co_await pending_pod(node);
    if (!pending) {
      error = pending.message();  // Allocate returns the error; nothing is written, the lock stays
      break;
    }
    const std::string pns = kube::namespace_of(*pending);
    const std::string pname = kube::name_of(*pending);
    pending_key = pns + "/" + pname;
    auto res = emulate_allocate(*pending, call.devices, kube::uid_of(pod) + "-" + call.container);
    if (!res.ok) {
      error = res.error;
      co_await finish_pod(node, *pending, kBindPhaseFailed);
      break;
    }
    co_await plugin_request_slot(node);
    auto erased = co_await api_->patch_pod(
        pns, pname, annotation_patch(kDevicesToAllocateAnnotation, json::value(res.erased_to_allocate)));
    if (!erased) {
      error = "erase device annotation: " + erased.error().to_string();
      co_await finish_pod(node, *pending, kBindPhaseFailed);
      break;
    }
    if (json::object* rec = record_for(call)) {
      (*rec)["devices"] = call.devices;
      (*rec)["allocated"] = true;
      (*rec)["env"] = container_env_record(find_container(pod, call.container, call.init), res.envs);
    }
    // PodAllocationTrySuccess: re-read the pod; nothing of the vendor left -> success and release the lock.
    co_await plugin_request_slot(node);
    auto fresh = co_await api_->get_pod(pns, pname);
    if (fresh && !plugin_has_pending_entries(annotation(*fresh, kDevicesToAllocateAnnotation).value_or(""))) {
      co_await finish_pod(node, *fresh, kBindPhaseSuccess);
    }
  }

  json::object record;
  record["result"] = error.empty() ? "admitted" : "rejected";
  if (!error.empty()) {
    record["error"] = error;
  }
  if (!pending_key.empty()) {
    record["pendingPod"] = pending_key;
  }
  if (calls.empty()) {
    // kubelet calls no plugin for this pod, yet it carries device entries: they are never consumed, the pod
    // never reaches bind-phase=success and a lock naming it stays until it expires.
    record["note"] = "no container has a " + gpu_resource_ + " limit: kubelet makes no Allocate call";
  }
  record["containers"] = std::move(containers);
  if (error.empty()) {
    ++stats_.admitted;
  } else {
    ++stats_.rejected;
  }
  if (error.empty()) {
    log::info("device plugin emulation", {{"pod", key}, {"node", node}, {"result", "admitted"}}, 1);
  } else {
    log::warning("device plugin emulation: Allocate failed, kubelet rejects the pod",
                 {{"pod", key}, {"node", node}, {"pendingPod", pending_key}, {"error", error}});
  }
  auto w = co_await api_->patch_pod(
      ns, name, annotation_patch(kDevicePluginRecordAnnotation, json::value(json::serialize(record))));
  if (!w && !w.error().is_not_found()) {
    log::warning("recording the device plugin result failed", {{"pod", key}, {"error", w.error().to_string()}});
  }
  if (!error.empty()) {
    kube::EventRecord ev;
    ev.namespace_ = ns;
    ev.event_time = std::chrono::system_clock::now();
    ev.reporting_controller = "gpuslice.io/mock-device-agent";
    ev.reporting_instance = node;
    ev.action = "Admit";
    ev.reason = "UnexpectedAdmissionError";
    ev.type = "Warning";
    ev.note = "Allocate failed due to " + error + ", which is unexpected";
    ev.regarding.namespace_ = ns;
    ev.regarding.name = name;
    ev.regarding.uid = kube::uid_of(pod);
    (void)co_await api_->create_event(std::move(ev));
    // kubelet's admission rejects the pod (pkg/kubelet/lifecycle: phase Failed, reason UnexpectedAdmissionError):
    // it holds nothing from then on, and a lock naming it is freed as its owner has finished.
    json::object status{{"phase", "Failed"},
                        {"reason", "UnexpectedAdmissionError"},
                        {"message", "Pod was rejected: Allocate failed due to " + error + ", which is unexpected"}};
    json::object meta{{"uid", kube::uid_of(pod)}};
    Rejection& r = rejections_[key];
    r.uid = kube::uid_of(pod).empty() ? key : kube::uid_of(pod);
    r.ns = ns;
    r.name = name;
    r.body = json::serialize(json::object{{"metadata", std::move(meta)}, {"status", std::move(status)}});
    start_rejection_write(key);
    if (!status_sync_running_) {
      status_sync_running_ = true;
      asio::co_spawn(executor_, status_sync(), asio::detached);
    }
  }
}

void MockDeviceAgent::start_rejection_write(const std::string& key) {
  Rejection& r = rejections_.at(key);
  r.writing = true;
  ++rejections_in_flight_;
  asio::co_spawn(executor_, write_rejection(key), asio::detached);
}

asio::awaitable<void> MockDeviceAgent::status_sync() {
  auto self = shared_from_this();
  while (!rejections_.empty()) {
    asio::steady_timer t(executor_);
    t.expires_after(retry_.status_sync);
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    std::vector<std::string> again;
    for (auto it = rejections_.begin(); it != rejections_.end();) {
      auto p = pods_.find(it->first);
      if (!it->second.writing && p == pods_.end()) {
        it = rejections_.erase(it);  // no longer seen on a managed node (deleted while a watch was down): forgotten
        continue;
      }
      if (!it->second.writing && string_at_pointer(p->second, "/status/phase") != "Failed") {
        again.push_back(it->first);
      }
      ++it;
    }
    for (const auto& key : again) {
      ++stats_.status_resyncs;
      log::warning("a rejected pod was turned back from Failed; writing its rejection again",
                   {{"pod", key}, {"phase", string_at_pointer(pods_.at(key), "/status/phase")}});
      start_rejection_write(key);
    }
  }
  status_sync_running_ = false;
}

asio::awaitable<void> MockDeviceAgent::write_rejection(std::string key) {
  auto self = shared_from_this();
  const std::string ns = rejections_.at(key).ns;
  const std::string name = rejections_.at(key).name;
  const std::string body = rejections_.at(key).body;
  std::chrono::milliseconds delay = retry_.first;
  std::chrono::milliseconds waited{0};
  bool written = false;
  bool gone = false;
  for (;;) {
    auto r = co_await api_->patch_pod_status(ns, name, body);
    if (r) {
      written = true;
      break;
    }
    if (r.error().is_not_found() || r.error().code == 422) {
      written = true;  // a pod already gone needs no status; 422: metadata.uid differs, the name is another pod's
      gone = true;
      break;
    }
    if (waited + delay > retry_.budget) {
      break;
    }
    ++stats_.status_retries;
    log::warning("rejecting the pod failed; retrying",
                 {{"pod", key}, {"error", r.error().to_string()}, {"retryInMs", std::to_string(delay.count())}});
    asio::steady_timer t(executor_);
    t.expires_after(delay);
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    waited += delay;
    delay = std::min(delay * 2, retry_.cap);
  }
  if (!written) {
    ++stats_.status_abandoned;
    log::error("rejecting the pod failed; giving up, the pod stays Pending on its node",
               {{"pod", key}, {"retriedForMs", std::to_string(waited.count())}});
  }
  --rejections_in_flight_;
  auto it = rejections_.find(key);
  if (it != rejections_.end()) {
    it->second.writing = false;
    const auto p = pods_.find(key);
    if (gone || p == pods_.end() ||
        (kube::uid_of(p->second).empty() ? key : kube::uid_of(p->second)) != it->second.uid) {
      rejections_.erase(it);  // deleted or replaced while the write was out
    }
  }
}

asio::awaitable<void> MockDeviceAgent::finish_pod(const std::string& node, const json::object& pending,
                                                  std::string_view phase) {
  const std::string ns = kube::namespace_of(pending);
  const std::string name = kube::name_of(pending);
  co_await plugin_request_slot(node);
  auto r = co_await api_->patch_pod(ns, name, annotation_patch(kBindPhaseAnnotation, json::value(phase)));
  if (!r) {
    log::warning("setting bind-phase failed", {{"pod", ns + "/" + name}, {"error", r.error().to_string()}});
  }
  co_await release_lock(node, ns, name);
}

asio::awaitable<void> MockDeviceAgent::release_lock(const std::string& node, const std::string& ns,
                                                    const std::string& name) {
  // nodelock.ReleaseNodeLock(skipOwnerCheck=false): only a lock ending in ",<ns>,<name>"; 5 tries.
  const std::string suffix = "," + ns + "," + name;
  for (int attempt = 0; attempt < 5; ++attempt) {
    co_await plugin_request_slot(node);
    auto n = co_await api_->get_node(node);
    if (!n) {
      co_return;
    }
    const auto lock = annotation(*n, kNodeLockAnnotation);
    if (!lock || lock->size() < suffix.size() ||
        lock->compare(lock->size() - suffix.size(), suffix.size(), suffix) != 0) {
      co_return;
    }
    co_await plugin_request_slot(node);
    auto r = co_await api_->patch_node(node, lock_release_patch(kube::resource_version_of(*n)));
    if (r) {
      ++stats_.locks_released;
      log::info("device plugin emulation released node lock", {{"node", node}, {"pod", ns + "/" + name}}, 1);
      co_return;
    }
    ++stats_.conflicts;
    asio::steady_timer t(executor_);
    t.expires_after(std::chrono::milliseconds(100 << attempt));
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

int run_mock_device_agent(const MockAgentConfig& config) {
  auto rest = kube::load_default_config(config.kubeconfig, kube::Environment::system());
  if (!rest) {
    log::error("kubeconfig", {{"error", rest.message()}});
    return 1;
  }
  asio::io_context io;
  kube::ClientOptions co;
  co.qps = config.qps;
  co.burst = config.burst;
  co.max_idle_connections = 32;  // nodes admit concurrently: keep their connections alive
  co.user_agent = "gpuslice-mock-device-agent";
  auto client = kube::Client::create(io.get_executor(), std::move(*rest), co);
  if (!client) {
    log::error("kube client", {{"error", client.message()}});
    return 1;
  }
  auto agent = std::make_shared<MockDeviceAgent>(io.get_executor(), make_client_api(*client));
  MockAgentPluginRate rate;
  rate.qps = config.plugin_qps;
  rate.burst = config.plugin_burst;
  agent->set_plugin_rate(std::move(rate));
  kube::ReflectorOptions nodes;
  nodes.resource = kube::resources::nodes();
  nodes.label_selector = config.node_selector;
  nodes.name = "nodes";
  kube::ReflectorOptions pods;
  pods.resource = kube::resources::pods();
  pods.field_selector = "spec.nodeName!=";
  pods.name = "pods";
  // Nodes first: pods are judged against the managed set, so the pod informer starts once nodes are listed.
  auto pod_reflector = std::make_shared<kube::Reflector>(
      *client, std::move(pods), [agent](const kube::ReflectorEvent& e) { agent->on_pod_event(e); });
  bool pods_started = false;
  auto node_reflector = std::make_shared<kube::Reflector>(
      *client, std::move(nodes), [agent, pod_reflector, &pods_started, &io](const kube::ReflectorEvent& e) {
        agent->on_node_event(e);
        if (e.type == kube::ReflectorEventType::relisted && e.relist_complete && !pods_started) {
          pods_started = true;
          asio::co_spawn(io, pod_reflector->run(), asio::detached);
        }
      });
  asio::co_spawn(io, node_reflector->run(), asio::detached);
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](boost::system::error_code, int) {
    log::info("mock device agent stopping");
    node_reflector->stop();
    pod_reflector->stop();
    io.stop();
  });
  log::info("mock device agent running (HAMi v2.10 device plugin emulation)",
            {{"nodeSelector", config.node_selector},
             {"pluginQPS", std::to_string(config.plugin_qps)},
             {"pluginBurst", std::to_string(config.plugin_burst)}});
  io.run();
  return 0;
}

}  // namespace gpuslice::scheduler
