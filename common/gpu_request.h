#pragma once
// The normalized GPU request of a pod: what each container asks for, resolved with HAMi's rules
// (hami-protocol.md §1, §2, §6). The webhook computes it and stores it in the pod annotation
// `gpuslice.io/gpu-request`; the scheduler reads that annotation, or computes the same from the pod's
// resources when it is absent. Pure: plain data and Boost.JSON values, no I/O.
//
// Annotation value (JSON), containers in init-then-app order, every container present:
//   {"containers":[{"name":"init","init":true,"gpus":0},
//                  {"name":"main","init":false,"gpus":1,"memMiB":20000,"cores":30},
//                  {"name":"pct","init":false,"gpus":2,"memPercent":50,"cores":0}]}
// For a container with gpus > 0 exactly one of memMiB (already multiplied by memoryFactor) and memPercent
// (1..100, of the chosen card's memory) is present, and cores (0..100, per card) is always present.

#include "common/config.h"
#include "common/quantity.h"  // parse_whole_quantity
#include "common/result.h"

#include <boost/json/object.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice {

inline constexpr std::string_view kGpuRequestAnnotation = "gpuslice.io/gpu-request";

/// HAMi's scheduler-owned pod annotations (hami-protocol.md §4): the scheduler writes them when it places a
/// pod, the device plugin consumes them. A pod author never legitimately writes them: the webhook removes them
/// on CREATE and the scheduler ignores them on a pod that is not bound yet.
inline constexpr std::string_view kSchedulerOwnedAnnotations[] = {"hami.io/vgpu-node",
                                                                  "hami.io/vgpu-time",
                                                                  "hami.io/vgpu-devices-to-allocate",
                                                                  "hami.io/vgpu-devices-allocated",
                                                                  "hami.io/vgpu-mig-allocations",
                                                                  "hami.io/bind-phase",
                                                                  "hami.io/bind-time"};

struct ContainerGpuRequest {
  std::string name;
  bool init = false;
  int64_t gpus = 0;                    ///< distinct physical cards
  std::optional<int64_t> mem_mib;      ///< per card, memoryFactor applied
  std::optional<int64_t> mem_percent;  ///< per card, of the card's total memory
  int64_t cores = 0;                   ///< percent of one card's compute, per card

  bool operator==(const ContainerGpuRequest&) const = default;
};

struct PodGpuRequest {
  std::vector<ContainerGpuRequest> containers;  ///< init containers first, then app containers

  bool any() const;
  bool operator==(const PodGpuRequest&) const = default;
};

/// Reads one container resource as HAMi does: from limits, else from requests. Returns nullopt when absent
/// in both, an error naming the resource and value when present but not a whole non-negative number.
Result<std::optional<int64_t>> container_resource(const boost::json::object& container, std::string_view resource);

/// True when a container names any of the configured GPU resources in its limits or requests.
bool container_asks_gpu(const boost::json::object& container, const DeviceConfig& devices);

/// Computes the normalized request from a pod object (its spec.initContainers and spec.containers), applying
/// HAMi's defaults: gpus defaults to defaultGPUNum when memory, cores or percentage come without a count;
/// memory is gpumem x memoryFactor, else the percentage, else defaultMemory, else 100 % of the card;
/// cores default to 100 when only a count (or 100 %) is asked (exclusive card), else defaultCores.
/// Errors name the container, the resource and the value (not a whole number, percentage outside 0..100,
/// cores above 100, memory above what fits in int32 after the factor).
Result<PodGpuRequest> extract_gpu_request(const boost::json::object& pod, const DeviceConfig& devices);

/// Which rules decide a container's card count.
enum class CountRule {
  /// The webhook's (HAMi's MutateAdmission): memory, cores or percentage without `nvidia.com/gpu` default the
  /// count to defaultGPUNum; the webhook then writes that count into the container's limits.
  admission,
  /// What kubelet acts on: the count is the container's `nvidia.com/gpu` limit and nothing else. Kubelet calls
  /// the device plugin's Allocate only for containers with that limit, with exactly that many devices
  /// (HAMi v2.10 plugin/server.go Allocate: "device number not matched" otherwise), so a container without it
  /// must never receive a device entry. Memory, cores or percentage without a count limit is an error
  /// naming the container and the fix (the pod bypassed the webhook: opt-out label or namespace, webhook down);
  /// with an explicit count of 0 they ask for nothing, as under the admission rule (which keeps the 0).
  kubelet,
};

/// extract_gpu_request with an explicit count rule (the two-argument form is CountRule::admission).
Result<PodGpuRequest> extract_gpu_request(const boost::json::object& pod, const DeviceConfig& devices, CountRule rule);

std::string encode_gpu_request(const PodGpuRequest& request);
/// Decodes the annotation value; errors name the field and value. Unknown fields are ignored (forward
/// compatibility), missing required ones are errors.
Result<PodGpuRequest> decode_gpu_request(std::string_view json_text);

}  // namespace gpuslice
