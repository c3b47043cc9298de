#pragma once
// Allocation codec: the device strings the scheduler writes on a pod and the device plugin consumes
// (hami-protocol.md §4), the names of the other scheduler-owned annotations, and the annotations and merge
// patch that carry a placement to the pod. Pure.
//
// Device string: per device `UUID,NVIDIA,<memMiB>,<cores>:`, each container slot ends with `;`, init containers
// first, then app containers, EVERY slot kept (an empty slot is just `;`), e.g. init i0 (1 GPU), app c0 (none),
// app c1 (2 GPUs):  `GPU-a,NVIDIA,2000,20:;;GPU-b,NVIDIA,3000,30:GPU-c,NVIDIA,3000,30:;`

#include "common/result.h"
#include "kube/objects.h"

#include <boost/json/object.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::scheduler {

inline constexpr std::string_view kVgpuNodeAnnotation = "hami.io/vgpu-node";  ///< also written as a label
inline constexpr std::string_view kVgpuTimeAnnotation = "hami.io/vgpu-time";  ///< unix seconds
inline constexpr std::string_view kDevicesToAllocateAnnotation = "hami.io/vgpu-devices-to-allocate";
inline constexpr std::string_view kDevicesAllocatedAnnotation = "hami.io/vgpu-devices-allocated";
inline constexpr std::string_view kBindPhaseAnnotation = "hami.io/bind-phase";  ///< allocating|success|failed
inline constexpr std::string_view kBindTimeAnnotation = "hami.io/bind-time";    ///< unix seconds
inline constexpr std::string_view kNodeLockAnnotation = "hami.io/mutex.lock";   ///< `<RFC3339>,<ns>,<pod>` on the node
inline constexpr std::string_view kBindPhaseAllocating = "allocating";
inline constexpr std::string_view kBindPhaseSuccess = "success";
inline constexpr std::string_view kBindPhaseFailed = "failed";
/// The vendor word in the device string's type field (never the card model).
inline constexpr std::string_view kNvidiaVendorWord = "NVIDIA";

/// One card given to one container.
struct ContainerDevice {
  std::string uuid;
  std::string type = std::string(kNvidiaVendorWord);
  int64_t mem_mib = 0;  ///< per card
  int64_t cores = 0;    ///< percent of the card

  bool operator==(const ContainerDevice&) const = default;
};

using ContainerDevices = std::vector<ContainerDevice>;
/// One entry per container slot of the pod, init containers first; an entry is empty when that container has no GPU.
using PodDevices = std::vector<ContainerDevices>;

/// Encodes every slot (empty ones as `;`). A pod with zero slots encodes as "".
std::string encode_pod_devices(const PodDevices& devices);

/// Decodes a device string, keeping empty slots: "A:;;B:;" -> [[A],[],[B]]. Like HAMi, segments of a container
/// without a comma are ignored and a device needs at least 4 fields; mem and cores must be non-negative integers.
/// A trailing part not ended by `;` counts as a last slot. Errors name the slot, device, field and value.
Result<PodDevices> decode_pod_devices(std::string_view text);

/// True when some slot holds a device of the vendor word (HAMi's "anything left to allocate" test).
bool has_devices(const PodDevices& devices);

/// The annotations the scheduler writes on a pod placed on `node` with `devices`: hami.io/vgpu-node,
/// hami.io/vgpu-time (unix seconds), hami.io/vgpu-devices-to-allocate and -allocated (identical).
boost::json::object allocation_annotations(std::string_view node, const PodDevices& devices, int64_t now_unix);

/// What the Binding of a placed pod carries onto it in the same write as spec.nodeName (kube::BindingMetadata):
/// the allocation annotations, bind-phase=allocating and bind-time, and the hami.io/vgpu-node label (HAMi's
/// vGPUmonitor lists a node's pods by it) when the node name fits a label value (at most 63 characters).
/// A Binding can only add keys: a pod carrying other scheduler-owned annotations has them removed first
/// (owned_annotations_removal_patch).
kube::BindingMetadata allocation_binding_metadata(std::string_view node, const PodDevices& devices, int64_t now_unix);

/// The merge patch that adds the hami.io/vgpu-node label alone (for an API server that did not copy it from the
/// Binding), or "" when the node name cannot be a label value.
std::string vgpu_node_label_patch(std::string_view node);

/// The merge patch that removes every scheduler-owned annotation (a pod without a GPU that carries them: written
/// by its author, since the webhook did not see it), with resourceVersion as precondition when non-empty.
std::string owned_annotations_removal_patch(std::string_view resource_version);

}  // namespace gpuslice::scheduler
