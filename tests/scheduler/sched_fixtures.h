#pragma once
// Builders of Kubernetes objects (boost::json) for the scheduling-core tests.

#include "scheduler/inventory.h"

#include <boost/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace gpuslice::scheduler::testing {

inline DeviceInfo card(std::string id, int64_t mem = 81920, int64_t cores = 100, std::string type = "NVIDIA A100",
                       int32_t numa = 0, int64_t count = 10) {
  DeviceInfo d;
  d.id = std::move(id);
  d.devmem = mem;
  d.devcore = cores;
  d.type = std::move(type);
  d.numa = numa;
  d.count = count;
  d.health = true;
  d.mode = "hami-core";
  return d;
}

struct NodeSpec {
  std::string name;
  std::vector<DeviceInfo> cards;
  std::vector<std::pair<std::string, std::string>> labels;
  boost::json::array taints;
  bool unschedulable = false;
  std::string cpu = "32";
  std::string memory = "256Gi";
  std::string pods = "110";
  std::string gpus = "";  ///< empty: cards x 10
  std::string cordon;
  std::string register_text;  ///< overrides the JSON encoding of `cards` when non-empty
  bool no_register = false;
};

inline boost::json::object node(const NodeSpec& s) {
  boost::json::object labels{{"kubernetes.io/hostname", s.name}};
  for (const auto& [k, v] : s.labels) {
    labels[k] = v;
  }
  boost::json::object ann;
  if (!s.no_register) {
    ann[kNodeRegisterAnnotation] = s.register_text.empty() ? encode_node_devices_json(s.cards) : s.register_text;
  }
  if (!s.cordon.empty()) {
    ann[kDeviceCordonAnnotation] = s.cordon;
  }
  std::string gpus = s.gpus.empty() ? std::to_string(s.cards.size() * 10) : s.gpus;
  boost::json::object spec;
  if (s.unschedulable) {
    spec["unschedulable"] = true;
  }
  if (!s.taints.empty()) {
    spec["taints"] = s.taints;
  }
  return boost::json::object{{"apiVersion", "v1"},
                             {"kind", "Node"},
                             {"metadata", {{"name", s.name}, {"labels", labels}, {"annotations", ann}}},
                             {"spec", spec},
                             {"status",
                              {{"allocatable",
                                {{"cpu", s.cpu},
                                 {"memory", s.memory},
                                 {"pods", s.pods},
                                 {"ephemeral-storage", "100Gi"},
                                 {"nvidia.com/gpu", gpus}}}}}};
}

/// A container with GPU limits; empty strings leave a resource out.
inline boost::json::object container(std::string name, std::string gpus, std::string mem = "", std::string cores = "",
                                     std::string pct = "") {
  boost::json::object limits;
  if (!gpus.empty()) limits["nvidia.com/gpu"] = gpus;
  if (!mem.empty()) limits["nvidia.com/gpumem"] = mem;
  if (!cores.empty()) limits["nvidia.com/gpucores"] = cores;
  if (!pct.empty()) limits["nvidia.com/gpumem-percentage"] = pct;
  return boost::json::object{{"name", name}, {"image", "pause"}, {"resources", {{"limits", limits}}}};
}

inline boost::json::object pod(std::string name, boost::json::array containers, std::string ns = "default") {
  return boost::json::object{{"apiVersion", "v1"},
                             {"kind", "Pod"},
                             {"metadata", {{"name", name}, {"namespace", ns}, {"annotations", boost::json::object{}}}},
                             {"spec", {{"containers", std::move(containers)}}}};
}

inline boost::json::object gpu_pod(std::string name, std::string gpus, std::string mem = "", std::string cores = "",
                                   std::string ns = "default") {
  return pod(std::move(name), boost::json::array{container("main", std::move(gpus), std::move(mem), std::move(cores))},
             std::move(ns));
}

inline void annotate(boost::json::object& obj, std::string_view key, std::string_view value) {
  obj["metadata"].as_object()["annotations"].as_object()[key] = value;
}

inline boost::json::object& spec(boost::json::object& obj) {
  return obj["spec"].as_object();
}

/// A pod already placed by the scheduler: vgpu-node + -allocated (+ spec.nodeName when bound).
inline boost::json::object placed_pod(std::string name, std::string node, std::string allocated, bool bind = true,
                                      std::string ns = "default") {
  boost::json::object p = pod(std::move(name), boost::json::array{container("main", "1")}, std::move(ns));
  annotate(p, "hami.io/vgpu-node", node);
  annotate(p, "hami.io/vgpu-devices-allocated", allocated);
  if (bind) {
    spec(p)["nodeName"] = node;
  }
  return p;
}

inline boost::json::object quota(std::string name, std::string ns, boost::json::object hard) {
  return boost::json::object{{"apiVersion", "v1"},
                             {"kind", "ResourceQuota"},
                             {"metadata", {{"name", name}, {"namespace", ns}}},
                             {"spec", {{"hard", std::move(hard)}}}};
}

}  // namespace gpuslice::scheduler::testing
