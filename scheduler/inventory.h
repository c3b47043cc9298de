#pragma once
// Inventory codec: the GPUs a node registers through HAMi's node annotations (hami-protocol.md §3). Pure.
//
//   hami.io/node-nvidia-register  JSON array (HAMi v2.8+, every field omitempty), or the legacy delimited form
//                                 `uuid,count,devmem,devcore,type,numa,health[,index,mode]:` per device.
//   hami.io/device-cordon         comma-separated UUIDs excluded from scheduling.
// A node is registered only while its allocatable nvidia.com/gpu is above 0 (see Snapshot::upsert_node).

#include "common/result.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::scheduler {

inline constexpr std::string_view kNodeRegisterAnnotation = "hami.io/node-nvidia-register";
inline constexpr std::string_view kDeviceCordonAnnotation = "hami.io/device-cordon";
inline constexpr std::string_view kNodeHandshakeAnnotation = "hami.io/node-handshake";

/// One registered card, as HAMi's DeviceInfo. Missing JSON fields take their zero value (health false).
struct DeviceInfo {
  std::string id;       ///< UUID, e.g. "GPU-4f02..."
  int32_t index = 0;    ///< NVML index
  int64_t count = 0;    ///< time-slicing slots (deviceSplitCount)
  int64_t devmem = 0;   ///< MiB, scaling already applied by the plugin
  int64_t devcore = 0;  ///< 100 x deviceCoreScaling
  std::string type;     ///< e.g. "NVIDIA A100-SXM4-80GB"; cards whose type lacks "nvidia" are ignored by Fit
  int32_t numa = 0;
  std::string mode;  ///< hami-core | mig | mps; empty means hami-core
  bool health = false;

  bool operator==(const DeviceInfo&) const = default;
};

/// Decodes `hami.io/node-nvidia-register`: JSON when the text starts with '[' (after spaces), else the legacy
/// form. Errors name the node, the annotation, the device position, the field and the value, e.g.
/// `node "gpu-1": hami.io/node-nvidia-register: devices[0].devmem: "abc" is not an integer`.
/// Duplicate UUIDs, an empty id and negative count/devmem/devcore are errors.
Result<std::vector<DeviceInfo>> decode_node_devices(std::string_view node_name, std::string_view text);

/// HAMi's JSON form with omitempty semantics (zero index/numa, false health, empty mode are left out).
std::string encode_node_devices_json(const std::vector<DeviceInfo>& devices);
/// The legacy 9-field form `uuid,count,devmem,devcore,type,numa,health,index,mode:`.
std::string encode_node_devices_legacy(const std::vector<DeviceInfo>& devices);

/// Splits `hami.io/device-cordon` into UUIDs (spaces trimmed, empties dropped).
std::vector<std::string> decode_cordon(std::string_view text);

/// True when HAMi's Fit would see this card at all: its type contains "nvidia", case-insensitive.
bool is_nvidia_type(std::string_view type);

}  // namespace gpuslice::scheduler
