#include "common/gpu_request.h"

#include "common/json_access.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <charconv>
#include <limits>
#include <string_view>

namespace gpuslice {
namespace json = boost::json;

namespace {

std::string quantity_text(const json::value& v) {
  if (v.is_string()) return std::string(v.get_string());
  if (v.is_double()) {
    // Boost.JSON serializes 0.5 as "5E-1"; messages show the number as the user wrote it.
    char buf[64];
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v.get_double());
    if (ec == std::errc()) return std::string(buf, p);
  }
  return json::serialize(v);
}

}  // namespace

bool PodGpuRequest::any() const {
  for (const auto& c : containers) {
    if (c.gpus > 0) return true;
  }
  return false;
}

Result<std::optional<int64_t>> container_resource(const json::object& container, std::string_view resource) {
  const json::object* res = object_at(container, "resources");
  if (res == nullptr) return std::optional<int64_t>{};
  for (const char* section : {"limits", "requests"}) {
    const json::object* m = object_at(*res, section);
    if (m == nullptr) continue;
    auto it = m->find(resource);
    if (it == m->end()) continue;
    const json::value& v = it->value();
    Result<int64_t> q = make_error("");
    if (v.is_string()) {
      q = parse_whole_quantity(v.get_string());
    } else if (v.is_int64() && v.get_int64() >= 0) {
      q = v.get_int64();
    } else if (v.is_uint64() && v.get_uint64() <= uint64_t(std::numeric_limits<int64_t>::max())) {
      q = static_cast<int64_t>(v.get_uint64());
    } else {
      q = make_error("\"" + quantity_text(v) + "\" is not a whole number");
    }
    if (!q.ok()) return make_error(std::string(resource) + ": " + q.message());
    return std::optional<int64_t>{q.value()};
  }
  return std::optional<int64_t>{};
}

bool container_asks_gpu(const json::object& container, const DeviceConfig& d) {
  const json::object* res = object_at(container, "resources");
  if (res == nullptr) return false;
  for (const char* section : {"limits", "requests"}) {
    const json::object* m = object_at(*res, section);
    if (m == nullptr) continue;
    for (const std::string* name :
         {&d.gpu_resource, &d.memory_resource, &d.memory_percentage_resource, &d.cores_resource}) {
      if (m->contains(*name)) return true;
    }
  }
  return false;
}

namespace {

// The container's count as kubelet reads it: resources.limits only (the API server requires a limit for an
// extended resource and a request equal to it, so limits are what the device manager allocates).
Result<std::optional<int64_t>> count_limit(const json::object& c, const std::string& resource) {
  const json::object* res = object_at(c, "resources");
  const json::object* limits = res != nullptr ? object_at(*res, "limits") : nullptr;
  if (limits == nullptr || !limits->contains(resource)) return std::optional<int64_t>{};
  json::object only;
  only["resources"] = json::object{{"limits", json::object{{resource, limits->at(resource)}}}};
  return container_resource(only, resource);
}

Result<ContainerGpuRequest> extract_container(const json::object& c, bool init, const DeviceConfig& d, CountRule rule) {
  ContainerGpuRequest out;
  out.init = init;
  if (auto it = c.find("name"); it != c.end() && it->value().is_string())
    out.name = std::string(it->value().get_string());
  auto prefix = [&]() { return std::string(init ? "init container \"" : "container \"") + out.name + "\": "; };
  auto gpus = rule == CountRule::kubelet ? count_limit(c, d.gpu_resource) : container_resource(c, d.gpu_resource);
  if (!gpus.ok()) return make_error(prefix() + gpus.message());
  auto mem = container_resource(c, d.memory_resource);
  if (!mem.ok()) return make_error(prefix() + mem.message());
  auto pct = container_resource(c, d.memory_percentage_resource);
  if (!pct.ok()) return make_error(prefix() + pct.message());
  auto cores = container_resource(c, d.cores_resource);
  if (!cores.ok()) return make_error(prefix() + cores.message());

  if (pct.value() && *pct.value() > 100) {
    return make_error(prefix() + d.memory_percentage_resource + ": \"" + std::to_string(*pct.value()) +
                      "\" is outside 0..100");
  }
  if (cores.value() && *cores.value() > 100) {
    return make_error(prefix() + d.cores_resource + ": \"" + std::to_string(*cores.value()) + "\" is above 100");
  }
  bool has_other = mem.value().has_value() || pct.value().has_value() || cores.value().has_value();
  // An explicit count of 0 (in limits, or in requests as the admission rule reads it) is a container without GPUs
  // under both rules: kubelet allocates it none, the webhook admits it as such and records gpus 0. Only a missing
  // count is the error.
  auto declared_zero = [&] {
    auto any = container_resource(c, d.gpu_resource);
    return any.ok() && any.value() == int64_t{0};
  };
  if (rule == CountRule::kubelet && has_other && !gpus.value() && !declared_zero()) {
    std::string asked;
    for (const auto& [name, v] :
         {std::pair{&d.memory_resource, mem.value()}, std::pair{&d.memory_percentage_resource, pct.value()},
          std::pair{&d.cores_resource, cores.value()}}) {
      if (!v) continue;
      asked += (asked.empty() ? "" : ", ") + *name + "=" + std::to_string(*v);
    }
    return make_error(prefix() + "asks for " + asked + " without " + d.gpu_resource + " in resources.limits" +
                      ": kubelet allocates GPUs only to containers with a " + d.gpu_resource +
                      " limit; add resources.limits." + d.gpu_resource + ": \"" + std::to_string(d.default_gpu_num) +
                      "\" (or let the gpuslice webhook admit the pod, which adds it)");
  }
  if (gpus.value()) {
    out.gpus = *gpus.value();
  } else if (has_other) {
    out.gpus = d.default_gpu_num;
  }
  if (out.gpus == 0) return out;
  if (out.gpus > 1024) {
    return make_error(prefix() + d.gpu_resource + ": \"" + std::to_string(out.gpus) +
                      "\" is more cards than any node has");
  }
  int64_t mem_mib = mem.value().value_or(0);
  int64_t pct_v = pct.value().value_or(0);
  if (mem_mib > 0) {
    if (mem_mib > std::numeric_limits<int32_t>::max() / d.memory_factor) {
      return make_error(prefix() + d.memory_resource + ": \"" + std::to_string(mem_mib) + "\" is too large");
    }
    out.mem_mib = mem_mib * d.memory_factor;
  } else if (pct_v > 0) {
    out.mem_percent = pct_v;
  } else if (d.default_memory_mib > 0) {
    out.mem_mib = d.default_memory_mib;
  } else {
    out.mem_percent = 100;
  }
  if (cores.value()) {
    out.cores = *cores.value();
  } else if (pct_v == 100 || (mem_mib == 0 && pct_v == 0 && !mem.value() && !pct.value())) {
    out.cores = 100;  // exclusive card (HAMi defaultExclusiveCoreIfNeeded)
  } else {
    out.cores = d.default_cores;
  }
  return out;
}

}  // namespace

Result<PodGpuRequest> extract_gpu_request(const json::object& pod, const DeviceConfig& d) {
  return extract_gpu_request(pod, d, CountRule::admission);
}

Result<PodGpuRequest> extract_gpu_request(const json::object& pod, const DeviceConfig& d, CountRule rule) {
  PodGpuRequest out;
  const json::object* spec = object_at(pod, "spec");
  if (spec == nullptr) return out;
  for (const char* key : {"initContainers", "containers"}) {
    auto it = spec->find(key);
    if (it == spec->end() || !it->value().is_array()) continue;
    bool init = std::string_view(key) == "initContainers";
    for (const auto& cv : it->value().get_array()) {
      if (!cv.is_object()) return make_error(std::string("spec.") + key + ": every entry must be an object");
      auto r = extract_container(cv.get_object(), init, d, rule);
      if (!r.ok()) return r.error();
      out.containers.push_back(std::move(r.value()));
    }
  }
  return out;
}

std::string encode_gpu_request(const PodGpuRequest& request) {
  // Written directly: the bytes json::serialize gives for {"containers":[{"name","init","gpus"[,"memMiB"]
  // [,"memPercent"][,"cores"]}]} (members in that order), without building the tree.
  std::string out;
  out.reserve(16 + request.containers.size() * 80);
  auto number = [&out](std::string_view key, int64_t v) {
    char buf[24];
    out.append(key.data(), key.size());
    out.append(buf, static_cast<std::size_t>(std::to_chars(buf, buf + sizeof buf, v).ptr - buf));
  };
  constexpr std::string_view kHead = "{\"containers\":[", kName = "{\"name\":", kTrue = ",\"init\":true",
                             kFalse = ",\"init\":false";
  out.append(kHead.data(), kHead.size());
  for (std::size_t i = 0; i < request.containers.size(); ++i) {
    const ContainerGpuRequest& c = request.containers[i];
    if (i > 0) out.push_back(',');
    out.append(kName.data(), kName.size());
    append_json_string(out, c.name);
    const std::string_view init = c.init ? kTrue : kFalse;
    out.append(init.data(), init.size());
    number(",\"gpus\":", c.gpus);
    if (c.gpus > 0) {
      if (c.mem_mib) number(",\"memMiB\":", *c.mem_mib);
      if (c.mem_percent) number(",\"memPercent\":", *c.mem_percent);
      number(",\"cores\":", c.cores);
    }
    out.push_back('}');
  }
  out.push_back(']');
  out.push_back('}');
  return out;
}

Result<PodGpuRequest> decode_gpu_request(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  std::string where = std::string(kGpuRequestAnnotation);
  if (ec) return make_error(where + ": invalid JSON (" + ec.message() + ")");
  if (!v.is_object()) return make_error(where + ": must be a JSON object");
  auto* containers = v.get_object().if_contains("containers");
  if (containers == nullptr || !containers->is_array()) return make_error(where + ": containers: must be a list");
  PodGpuRequest out;
  size_t i = 0;
  auto int_field = [&](const json::object& o, std::string_view key, int64_t lo, int64_t hi,
                       std::optional<int64_t>& dst) -> Status {
    auto* f = o.if_contains(key);
    if (f == nullptr) return Status::Ok();
    std::string path = where + ": containers[" + std::to_string(i) + "]." + std::string(key);
    if (!f->is_int64() && !f->is_uint64()) return make_error(path + ": " + json::serialize(*f) + " is not an integer");
    int64_t x = f->is_int64() ? f->get_int64() : static_cast<int64_t>(std::min<uint64_t>(f->get_uint64(), INT64_MAX));
    if (x < lo || x > hi)
      return make_error(path + ": " + std::to_string(x) + " is outside " + std::to_string(lo) + ".." +
                        std::to_string(hi));
    dst = x;
    return Status::Ok();
  };
  for (const auto& cv : containers->get_array()) {
    std::string path = where + ": containers[" + std::to_string(i) + "]";
    if (!cv.is_object()) return make_error(path + ": must be an object");
    const auto& o = cv.get_object();
    ContainerGpuRequest c;
    if (auto* n = o.if_contains("name"); n != nullptr && n->is_string()) c.name = std::string(n->get_string());
    if (auto* n = o.if_contains("init"); n != nullptr) {
      if (!n->is_bool()) return make_error(path + ".init: " + json::serialize(*n) + " is not a boolean");
      c.init = n->get_bool();
    }
    std::optional<int64_t> gpus, cores;
    if (auto st = int_field(o, "gpus", 0, 1024, gpus); !st.ok()) return st.error();
    if (!gpus) return make_error(path + ".gpus: missing");
    c.gpus = *gpus;
    if (auto st = int_field(o, "memMiB", 1, std::numeric_limits<int32_t>::max(), c.mem_mib); !st.ok())
      return st.error();
    if (auto st = int_field(o, "memPercent", 1, 100, c.mem_percent); !st.ok()) return st.error();
    if (auto st = int_field(o, "cores", 0, 100, cores); !st.ok()) return st.error();
    if (c.gpus > 0) {
      if (c.mem_mib.has_value() == c.mem_percent.has_value()) {
        return make_error(path + ": exactly one of memMiB and memPercent must be set");
      }
      if (!cores) return make_error(path + ".cores: missing");
      c.cores = *cores;
    } else {
      c.mem_mib.reset();
      c.mem_percent.reset();
    }
    out.containers.push_back(std::move(c));
    ++i;
  }
  return out;
}

}  // namespace gpuslice
