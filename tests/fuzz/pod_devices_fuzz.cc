// hami.io/vgpu-devices-allocated decoder. Oracle: decode -> encode -> decode is the identity on what decoded
// (every slot kept), and encoding is canonical.
#include "scheduler/allocation.h"

#include <cstdint>
#include <cstdlib>
#include <string_view>

using namespace gpuslice::scheduler;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = decode_pod_devices(text);
  if (!r.ok()) {
    return 0;
  }
  for (const ContainerDevices& slot : r.value()) {
    for (const ContainerDevice& d : slot) {
      if (d.uuid.empty() || d.mem_mib < 0 || d.cores < 0) {
        std::abort();
      }
    }
  }
  // Fields holding separators cannot round-trip (HAMi's format has no escaping); skip those inputs.
  for (const ContainerDevices& slot : r.value()) {
    for (const ContainerDevice& d : slot) {
      if (d.uuid.find_first_of(",:;") != std::string::npos || d.type.find_first_of(",:;") != std::string::npos) {
        return 0;
      }
    }
  }
  std::string enc = encode_pod_devices(r.value());
  auto back = decode_pod_devices(enc);
  if (!back.ok() || back.value() != r.value() || encode_pod_devices(back.value()) != enc) {
    std::abort();
  }
  return 0;
}
