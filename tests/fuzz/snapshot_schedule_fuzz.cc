// Snapshot + schedule on hostile annotations. Input lines: 1) a node's register annotation, 2) its device-cordon,
// 3..n) pods' -allocated annotations (bound to the node), last line) the pod's gpuslice.io/gpu-request.
// Oracle: no crash; a placement only uses registered cards, keeps one slot per container and respects every
// card's free memory and cores; removing every pod returns the cards to zero usage.
#include "scheduler/schedule.h"

#include <boost/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

using namespace gpuslice::scheduler;
namespace json = boost::json;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 8192) {
    return 0;
  }
  std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t p = text.find('\n', start);
    lines.push_back(text.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) {
      break;
    }
    start = p + 1;
  }
  while (lines.size() < 3) {
    lines.emplace_back();
  }
  Snapshot snap;
  json::object node{
      {"kind", "Node"},
      {"metadata",
       {{"name", "n"},
        {"annotations", {{"hami.io/node-nvidia-register", lines[0]}, {"hami.io/device-cordon", lines[1]}}}}},
      {"status", {{"allocatable", {{"cpu", "64"}, {"memory", "1Ti"}, {"pods", "500"}, {"nvidia.com/gpu", "80"}}}}}};
  (void)snap.upsert_node(node);
  for (size_t i = 2; i + 1 < lines.size(); ++i) {
    json::object pod{{"kind", "Pod"},
                     {"metadata",
                      {{"name", "p" + std::to_string(i)},
                       {"namespace", "default"},
                       {"annotations", {{"hami.io/vgpu-node", "n"}, {"hami.io/vgpu-devices-allocated", lines[i]}}}}},
                     {"spec", {{"nodeName", "n"}, {"containers", json::array{json::object{{"name", "c"}}}}}}};
    (void)snap.upsert_pod(pod);
  }
  json::object pod{
      {"kind", "Pod"},
      {"metadata",
       {{"name", "new"}, {"namespace", "default"}, {"annotations", {{"gpuslice.io/gpu-request", lines.back()}}}}},
      {"spec", {{"containers", json::array{json::object{{"name", "c"}}}}}}};
  auto info = parse_pod(pod, snap.devices());
  if (info.ok()) {
    Decision d = schedule(snap, info.value(), ScheduleOptions{});
    if (d.scheduled) {
      if (d.devices.size() != info->gpu.containers.size()) {
        std::abort();
      }
      const NodeState* n = snap.find_node(d.node);
      for (size_t i = 0; i < d.devices.size(); ++i) {
        if (static_cast<int64_t>(d.devices[i].size()) != info->gpu.containers[i].gpus) {
          std::abort();
        }
        for (const ContainerDevice& dev : d.devices[i]) {
          const CardState* c = n ? n->find_card(dev.uuid) : nullptr;
          if (c == nullptr || !c->visible() || dev.mem_mib > c->free_mem_mib() || dev.cores > 100) {
            std::abort();
          }
        }
      }
      if (!snap.assume(info.value(), d.node, d.devices, 0).ok()) {
        std::abort();
      }
    } else if (d.message.rfind("0/1 nodes are available", 0) != 0) {
      std::abort();
    }
  }
  std::vector<std::pair<std::string, std::string>> keys;
  snap.for_each_pod([&](const PodRecord& r) { keys.emplace_back(r.ns, r.name); });
  for (const auto& [ns, name] : keys) {
    snap.remove_pod(ns, name);
  }
  if (const NodeState* n = snap.find_node("n")) {
    for (const CardState& c : n->cards) {
      if (c.used_mem_mib != 0 || c.used_cores != 0 || c.used_slots != 0) {
        std::abort();
      }
    }
  }
  return 0;
}
