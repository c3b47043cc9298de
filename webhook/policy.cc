#include "webhook/policy.h"

#include "common/gpu_request.h"
#include "common/json_access.h"

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

namespace gpuslice::webhook {
namespace json = boost::json;

namespace {

// Labels that opt a pod out, as HAMi's objectSelector does (`hami.io/webhook NotIn [ignore]`).
constexpr std::string_view kIgnoreLabels[] = {"gpuslice.io/webhook", "hami.io/webhook"};
constexpr std::string_view kIgnoreValue = "ignore";
constexpr std::string_view kTaskPriorityEnv = "CUDA_TASK_PRIORITY";
constexpr std::string_view kCorePolicyEnv = "GPU_CORE_UTILIZATION_POLICY";
constexpr std::string_view kVisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES";

// Quotes a value for a message: strings in double quotes, anything else as its JSON text.
std::string show(const json::value& v) {
  if (v.is_string()) return "\"" + std::string(v.get_string()) + "\"";
  return json::serialize(v);
}

// Reads an optional string field; a present value of another type (null aside) is a bad value.
Result<std::optional<std::string_view>> string_field(const json::object& o, std::string_view key,
                                                     std::string_view path) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return std::optional<std::string_view>{};
  if (!v->is_string()) return make_error(std::string(path) + ": " + show(*v) + " is not a string");
  return std::optional<std::string_view>{std::string_view(v->get_string())};
}

MutationResult deny(int32_t code, std::string message) {
  MutationResult r;
  r.allowed = false;
  r.code = code;
  r.reason = code == 403 ? "Forbidden" : "BadRequest";
  r.message = std::move(message);
  return r;
}

MutationResult skip(std::string message) {
  MutationResult r;
  r.skipped = true;
  r.message = std::move(message);
  return r;
}

std::string container_label(const ContainerGpuRequest& c) {
  return std::string(c.init ? "init container \"" : "container \"") + c.name + "\"";
}

// One container of the pod as the patch addresses it.
struct ContainerRef {
  const json::object* obj;
  std::string path;  // e.g. /spec/initContainers/0
};

// Containers in init-then-app order, the order extract_gpu_request uses.
std::vector<ContainerRef> list_containers(const json::object& spec) {
  std::vector<ContainerRef> out;
  for (std::string_view key : {std::string_view("initContainers"), std::string_view("containers")}) {
    const json::array* arr = array_at(spec, key);
    if (arr == nullptr) continue;
    for (size_t i = 0; i < arr->size(); ++i) {
      const json::object* c = (*arr)[i].if_object();
      out.push_back({c, "/spec/" + std::string(key) + "/" + std::to_string(i)});
    }
  }
  return out;
}

bool has_resource_in(const json::object& container, std::string_view section, std::string_view name) {
  const json::object* res = object_at(container, "resources");
  if (res == nullptr) return false;
  const json::object* m = object_at(*res, section);
  return m != nullptr && m->contains(name);
}

bool has_resource(const json::object& container, std::string_view name) {
  return has_resource_in(container, "limits", name) || has_resource_in(container, "requests", name);
}

// nvidia.com/priority is read from limits only, as HAMi does.
Result<std::optional<int64_t>> priority_limit(const json::object& container, const std::string& resource) {
  const json::object* res = object_at(container, "resources");
  const json::object* limits = res != nullptr ? object_at(*res, "limits") : nullptr;
  if (limits == nullptr || !limits->contains(resource)) return std::optional<int64_t>{};
  // container_resource reads limits first, so with the key present in limits it parses exactly that value.
  return container_resource(container, resource);
}

// Adds entries to resources.limits, creating `resources` and `limits` when absent.
void add_limits(Patch& patch, const ContainerRef& c, const std::vector<std::pair<std::string, std::string>>& add) {
  if (add.empty()) return;
  const json::object* res = object_at(*c.obj, "resources");
  const json::object* limits = res != nullptr ? object_at(*res, "limits") : nullptr;
  if (limits == nullptr) {
    json::object fresh;
    for (const auto& [k, v] : add) fresh[k] = v;
    if (res == nullptr) {
      json::object r;
      r["limits"] = std::move(fresh);
      patch.push_back({PatchOp::Kind::add, c.path + "/resources", json::value(std::move(r))});
    } else {
      patch.push_back({PatchOp::Kind::add, c.path + "/resources/limits", json::value(std::move(fresh))});
    }
    return;
  }
  for (const auto& [k, v] : add) {
    patch.push_back({PatchOp::Kind::add, c.path + "/resources/limits/" + json_pointer_escape(k), json::value(v)});
  }
}

json::object env_var(std::string_view name, std::string_view value) {
  json::object e;
  e["name"] = name;
  e["value"] = value;
  return e;
}

// Makes the container's env hold name=value: nothing when it already does, replace the entry that sets
// it otherwise (the last one, which wins in the runtime), append when absent, create the array when missing.
void ensure_env(Patch& patch, const ContainerRef& c,
                const std::vector<std::pair<std::string_view, std::string>>& want) {
  if (want.empty()) return;
  const json::array* env = array_at(*c.obj, "env");
  if (env == nullptr) {
    json::array fresh;
    for (const auto& [n, v] : want) fresh.emplace_back(env_var(n, v));
    patch.push_back({PatchOp::Kind::add, c.path + "/env", json::value(std::move(fresh))});
    return;
  }
  for (const auto& [n, v] : want) {
    std::optional<size_t> found;
    for (size_t i = 0; i < env->size(); ++i) {
      const json::object* e = (*env)[i].if_object();
      if (e == nullptr) continue;
      const json::value* name = e->if_contains("name");
      if (name != nullptr && name->is_string() && name->get_string() == n) found = i;
    }
    if (!found) {
      patch.push_back({PatchOp::Kind::add, c.path + "/env/-", json::value(env_var(n, v))});
      continue;
    }
    const json::object& e = (*env)[*found].get_object();
    const json::value* value = e.if_contains("value");
    bool same = value != nullptr && value->is_string() && value->get_string() == v && !e.contains("valueFrom");
    if (!same) {
      patch.push_back({PatchOp::Kind::replace, c.path + "/env/" + std::to_string(*found), json::value(env_var(n, v))});
    }
  }
}

// Annotation ops that make the pod carry exactly `request` as gpuslice.io/gpu-request (nullopt: not at all)
// and none of HAMi's scheduler-owned annotations: nothing a pod author writes there survives admission.
void fix_annotations(Patch& patch, const json::object* metadata_p, const std::optional<std::string>& request) {
  const json::object* annotations = metadata_p != nullptr ? object_at(*metadata_p, "annotations") : nullptr;
  static const std::string req_key = "/metadata/annotations/" + json_pointer_escape(kGpuRequestAnnotation);
  if (annotations != nullptr) {
    for (std::string_view k : kSchedulerOwnedAnnotations) {
      if (annotations->contains(k)) {
        patch.push_back({PatchOp::Kind::remove, "/metadata/annotations/" + json_pointer_escape(k), {}});
      }
    }
  }
  const json::value* cur = annotations != nullptr ? annotations->if_contains(kGpuRequestAnnotation) : nullptr;
  if (!request) {
    if (cur != nullptr) patch.push_back({PatchOp::Kind::remove, req_key, {}});
    return;
  }
  if (metadata_p == nullptr) {
    json::object a;
    a[kGpuRequestAnnotation] = *request;
    json::object m;
    m["annotations"] = std::move(a);
    patch.push_back({PatchOp::Kind::add, "/metadata", json::value(std::move(m))});
  } else if (annotations == nullptr) {
    json::object a;
    a[kGpuRequestAnnotation] = *request;
    patch.push_back({PatchOp::Kind::add, "/metadata/annotations", json::value(std::move(a))});
  } else if (cur == nullptr) {
    patch.push_back({PatchOp::Kind::add, req_key, json::value(*request)});
  } else if (!cur->is_string() || cur->get_string() != *request) {
    // A stale or forged value: the scheduler must read what the pod really asks for.
    patch.push_back({PatchOp::Kind::replace, req_key, json::value(*request)});
  }
}

bool has_env_var(const json::object& container, std::string_view name) {
  const json::array* env = array_at(container, "env");
  if (env == nullptr) return false;
  for (const json::value& e : *env) {
    const json::object* o = e.if_object();
    const json::value* n = o != nullptr ? o->if_contains("name") : nullptr;
    if (n != nullptr && n->is_string() && n->get_string() == name) return true;
  }
  return false;
}

}  // namespace

MutationResult mutate_pod(const json::object& pod, std::string_view ns, const Configuration& config) {
  const DeviceConfig& dev = config.devices;
  const WebhookConfig& wh = config.webhook;
  static const json::object kEmpty;
  const json::object* metadata_p = object_at(pod, "metadata");
  const json::object& metadata = metadata_p != nullptr ? *metadata_p : kEmpty;
  const json::object* spec_p = object_at(pod, "spec");
  const json::object& spec = spec_p != nullptr ? *spec_p : kEmpty;

  // Skip rules that stand in for HAMi's namespaceSelector and objectSelector: they come before everything.
  std::string_view pod_ns = ns;
  if (pod_ns.empty()) {
    if (const json::value* v = metadata.if_contains("namespace"); v != nullptr && v->is_string()) {
      pod_ns = v->get_string();
    }
  }
  // A skipped pod is left as its author wrote it, except for annotations only gpuslice (or HAMi's scheduler)
  // may write: those are removed on every pod the webhook sees, so none is ever trusted.
  auto skip_clean = [&](std::string message) {
    MutationResult r = skip(std::move(message));
    fix_annotations(r.patch, metadata_p, std::nullopt);
    return r;
  };
  if (std::find(wh.ignored_namespaces.begin(), wh.ignored_namespaces.end(), pod_ns) != wh.ignored_namespaces.end()) {
    return skip_clean("namespace \"" + std::string(pod_ns) + "\" is ignored by the webhook configuration");
  }
  if (const json::object* labels = object_at(metadata, "labels")) {
    for (std::string_view key : kIgnoreLabels) {
      const json::value* v = labels->if_contains(key);
      if (v != nullptr && v->is_string() && v->get_string() == kIgnoreValue) {
        return skip_clean("pod is labelled " + std::string(key) + ": ignore");
      }
    }
  }

  const json::array* containers = array_at(spec, "containers");
  if (containers == nullptr || containers->empty())
    return deny(403, "pod has no containers (spec.containers is empty)");

  auto scheduler = string_field(spec, "schedulerName", "spec.schedulerName");
  if (!scheduler.ok()) return deny(400, scheduler.message());
  std::string_view scheduler_name = scheduler.value().value_or("");
  bool ours = scheduler_name.empty() || scheduler_name == config.scheduler_name ||
              std::find(wh.takeover_scheduler_names.begin(), wh.takeover_scheduler_names.end(), scheduler_name) !=
                  wh.takeover_scheduler_names.end();
  if (!ours) {
    return skip_clean("pod already has different scheduler assigned: spec.schedulerName \"" +
                      std::string(scheduler_name) + "\"");
  }

  auto request = extract_gpu_request(pod, dev);
  if (!request.ok()) return deny(400, request.message());
  if (!request->any()) {
    MutationResult r;
    r.message = "no GPU resources requested";
    // HAMi's MutateAdmission runs on every container of every pod it is sent: with overwriteEnv a container
    // without a GPU is told to see none (pkg/device/nvidia/device.go, pkg/scheduler/webhook.go).
    if (wh.overwrite_env) {
      for (const ContainerRef& ref : list_containers(spec)) {
        if (ref.obj != nullptr && !has_env_var(*ref.obj, kVisibleDevicesEnv)) {
          ensure_env(r.patch, ref, {{kVisibleDevicesEnv, "none"}});
        }
      }
    }
    fix_annotations(r.patch, metadata_p, std::nullopt);
    return r;
  }

  std::vector<ContainerRef> refs = list_containers(spec);
  // extract_gpu_request succeeded, so every entry is an object and the two lists line up.
  if (refs.size() != request->containers.size()) return deny(400, "spec: containers could not be read");
  // Bad values (400) come before policy denials (403); all checks come before any patch op is emitted.
  std::vector<std::optional<int64_t>> priorities(refs.size());
  for (size_t i = 0; i < refs.size(); ++i) {
    auto p = priority_limit(*refs[i].obj, dev.priority_resource);
    if (!p.ok()) return deny(400, container_label(request->containers[i]) + ": " + p.message());
    priorities[i] = p.value();
  }
  auto node_name = string_field(spec, "nodeName", "spec.nodeName");
  if (!node_name.ok()) return deny(400, node_name.message());

  for (size_t i = 0; i < refs.size(); ++i) {
    const ContainerGpuRequest& c = request->containers[i];
    if (c.gpus == 0) continue;
    const json::object* sc = object_at(*refs[i].obj, "securityContext");
    const json::value* priv = sc != nullptr ? sc->if_contains("privileged") : nullptr;
    if (priv != nullptr && priv->is_bool() && priv->get_bool()) {
      return deny(403, container_label(c) + " is privileged (securityContext.privileged: true) and asks for " +
                           dev.gpu_resource + ": privileged containers see every GPU, so they cannot be sliced");
    }
  }

  if (node_name.value() && !node_name.value()->empty()) {
    return deny(403, "pod has node assigned: spec.nodeName \"" + std::string(*node_name.value()) +
                         "\"; a GPU pod must be placed by " + config.scheduler_name);
  }

  MutationResult out;
  out.gpu_pod = true;
  Patch& patch = out.patch;
  patch.reserve(2 + 2 * refs.size() + 2);  // scheduler and runtime class, limits and env per container, annotations

  if (scheduler_name != config.scheduler_name) {
    bool present = spec.contains("schedulerName");
    patch.push_back({present ? PatchOp::Kind::replace : PatchOp::Kind::add, "/spec/schedulerName",
                     json::value(config.scheduler_name)});
  }
  if (!wh.runtime_class_name.empty()) {
    const json::value* rc = spec.if_contains("runtimeClassName");
    bool absent = rc == nullptr || rc->is_null() || (rc->is_string() && rc->get_string().empty());
    // `add` replaces a member that exists (null or ""), so one op covers both cases.
    if (absent) patch.push_back({PatchOp::Kind::add, "/spec/runtimeClassName", json::value(wh.runtime_class_name)});
  }

  for (size_t i = 0; i < refs.size(); ++i) {
    const ContainerGpuRequest& c = request->containers[i];
    const ContainerRef& ref = refs[i];
    if (c.gpus > 0) {
      std::vector<std::pair<std::string, std::string>> add;
      // Kubelet allocates devices by the limit alone (HAMi's webhook adds it where it is missing from limits).
      if (!has_resource_in(*ref.obj, "limits", dev.gpu_resource)) {
        add.emplace_back(dev.gpu_resource, std::to_string(c.gpus));
      }
      // HAMi's defaultExclusiveCoreIfNeeded: no gpucores, and 100 % or no memory asked -> a whole card.
      if (!has_resource(*ref.obj, dev.cores_resource)) {
        bool mem = has_resource(*ref.obj, dev.memory_resource);
        auto pct = container_resource(*ref.obj, dev.memory_percentage_resource);  // validated by extract
        bool pct_100 = pct.ok() && pct.value() == int64_t{100};
        bool pct_present = pct.ok() && pct.value().has_value();
        if (pct_100 || (!mem && !pct_present)) add.emplace_back(dev.cores_resource, "100");
      }
      add_limits(patch, ref, add);
    }
    std::vector<std::pair<std::string_view, std::string>> env;
    if (priorities[i]) env.emplace_back(kTaskPriorityEnv, std::to_string(*priorities[i]));
    if (wh.gpu_core_policy != "default" && !wh.gpu_core_policy.empty())
      env.emplace_back(kCorePolicyEnv, wh.gpu_core_policy);
    // overwriteEnv: a container without a GPU must not see the node's cards. An author's own
    // NVIDIA_VISIBLE_DEVICES is left alone (HAMi appends a second entry; the first would win in most runtimes).
    if (c.gpus == 0 && wh.overwrite_env && !has_env_var(*ref.obj, kVisibleDevicesEnv)) {
      env.emplace_back(kVisibleDevicesEnv, "none");
    }
    ensure_env(patch, ref, env);
  }

  fix_annotations(patch, metadata_p, encode_gpu_request(request.value()));
  return out;
}

}  // namespace gpuslice::webhook
