#include "scheduler/allocation.h"
#include "common/gpu_request.h"
#include "scheduler/text.h"

#include <boost/json/serialize.hpp>

#include <charconv>
#include <limits>

namespace gpuslice::scheduler {

namespace {

using detail::split;

std::string quoted(std::string_view v) {
  constexpr size_t kMax = 64;
  if (v.size() > kMax) {
    return "\"" + std::string(v.substr(0, kMax)) + "...\"";
  }
  return "\"" + std::string(v) + "\"";
}

bool parse_non_negative(std::string_view s, int64_t& out) {
  if (s.empty()) {
    return false;
  }
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && out >= 0;
}

}  // namespace

std::string encode_pod_devices(const PodDevices& devices) {
  std::string out;
  for (const ContainerDevices& slot : devices) {
    for (const ContainerDevice& d : slot) {
      out += d.uuid;
      out += ',';
      out += d.type;
      out += ',';
      out += std::to_string(d.mem_mib);
      out += ',';
      out += std::to_string(d.cores);
      out += ':';
    }
    out += ';';
  }
  return out;
}

Result<PodDevices> decode_pod_devices(std::string_view text) {
  PodDevices out;
  if (text.empty()) {
    return out;
  }
  auto slots = split(text, ';');
  // "A:;" splits into ["A:", ""]: the part after the last ';' is not a slot unless something is written there.
  if (slots.back().empty()) {
    slots.pop_back();
  }
  for (size_t si = 0; si < slots.size(); ++si) {
    ContainerDevices slot;
    size_t di = 0;
    for (std::string_view dev : split(slots[si], ':')) {
      if (dev.find(',') == std::string_view::npos) {
        continue;  // as HAMi's DecodeContainerDevices
      }
      std::string at = "container[" + std::to_string(si) + "].device[" + std::to_string(di) + "]";
      auto f = split(dev, ',');
      if (f.size() < 4) {
        return make_error(at + ": " + quoted(dev) + " has " + std::to_string(f.size()) + " fields, want 4");
      }
      ContainerDevice d;
      d.uuid = std::string(f[0]);
      d.type = std::string(f[1]);
      if (d.uuid.empty()) {
        return make_error(at + ".uuid: \"\" must not be empty");
      }
      if (!parse_non_negative(f[2], d.mem_mib) || d.mem_mib > std::numeric_limits<int32_t>::max()) {
        return make_error(at + ".mem: " + quoted(f[2]) + " is not a non-negative 32-bit integer");
      }
      if (!parse_non_negative(f[3], d.cores) || d.cores > std::numeric_limits<int32_t>::max()) {
        return make_error(at + ".cores: " + quoted(f[3]) + " is not a non-negative 32-bit integer");
      }
      slot.push_back(std::move(d));
      ++di;
    }
    out.push_back(std::move(slot));
  }
  return out;
}

bool has_devices(const PodDevices& devices) {
  for (const auto& slot : devices) {
    for (const auto& d : slot) {
      if (d.type == kNvidiaVendorWord) {
        return true;
      }
    }
  }
  return false;
}

boost::json::object allocation_annotations(std::string_view node, const PodDevices& devices, int64_t now_unix) {
  boost::json::object a;
  std::string encoded = encode_pod_devices(devices);
  a[kVgpuNodeAnnotation] = node;
  a[kVgpuTimeAnnotation] = std::to_string(now_unix);
  a[kDevicesToAllocateAnnotation] = encoded;
  a[kDevicesAllocatedAnnotation] = encoded;
  return a;
}

kube::BindingMetadata allocation_binding_metadata(std::string_view node, const PodDevices& devices, int64_t now_unix) {
  kube::BindingMetadata m;
  const std::string now = std::to_string(now_unix);
  const std::string encoded = encode_pod_devices(devices);
  m.annotations[std::string(kVgpuNodeAnnotation)] = std::string(node);
  m.annotations[std::string(kVgpuTimeAnnotation)] = now;
  m.annotations[std::string(kDevicesToAllocateAnnotation)] = encoded;
  m.annotations[std::string(kDevicesAllocatedAnnotation)] = encoded;
  m.annotations[std::string(kBindPhaseAnnotation)] = std::string(kBindPhaseAllocating);
  m.annotations[std::string(kBindTimeAnnotation)] = now;
  // Label values are at most 63 characters; a longer node name keeps only the annotation (HAMi would fail).
  if (node.size() <= 63) {
    m.labels[std::string(kVgpuNodeAnnotation)] = std::string(node);
  }
  return m;
}

std::string vgpu_node_label_patch(std::string_view node) {
  if (node.size() > 63) {
    return {};
  }
  boost::json::object meta{{"labels", boost::json::object{{kVgpuNodeAnnotation, node}}}};
  return boost::json::serialize(boost::json::object{{"metadata", std::move(meta)}});
}

std::string owned_annotations_removal_patch(std::string_view resource_version) {
  boost::json::object annotations;
  for (std::string_view k : kSchedulerOwnedAnnotations) {
    annotations[k] = nullptr;
  }
  boost::json::object meta;
  if (!resource_version.empty()) {
    meta["resourceVersion"] = resource_version;
  }
  meta["annotations"] = std::move(annotations);
  return boost::json::serialize(boost::json::object{{"metadata", std::move(meta)}});
}

}  // namespace gpuslice::scheduler
