// The gpu-request annotation codec (common/gpu_request.h) and the extraction the webhook writes it from.
// Oracles:
//  - decode: a decoded request is within the annotation's ranges (gpus 0..1024; for gpus > 0 exactly one of
//    memMiB 1..INT32_MAX and memPercent 1..100, cores 0..100; nothing else for gpus 0); encode -> decode is the
//    identity and encoding is canonical; an error names the annotation (and, past the top level, the field);
//  - extract (the same bytes as a pod, under both count rules): whatever the webhook computes, the scheduler
//    must decode back to the same request (encode -> decode identity), and an error names the container.
#include "common/config.h"
#include "common/gpu_request.h"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>

using namespace gpuslice;

namespace {
void require(bool ok) {
  if (!ok) {
    std::abort();
  }
}

void check_request(const PodGpuRequest& r) {
  for (const ContainerGpuRequest& c : r.containers) {
    require(c.gpus >= 0 && c.gpus <= 1024);
    if (c.gpus == 0) {
      require(!c.mem_mib && !c.mem_percent);
      continue;
    }
    require(c.mem_mib.has_value() != c.mem_percent.has_value());
    require(!c.mem_mib || (*c.mem_mib >= 1 && *c.mem_mib <= std::numeric_limits<int32_t>::max()));
    require(!c.mem_percent || (*c.mem_percent >= 1 && *c.mem_percent <= 100));
    require(c.cores >= 0 && c.cores <= 100);
  }
}

void round_trip(const PodGpuRequest& r) {
  const std::string enc = encode_gpu_request(r);
  auto back = decode_gpu_request(enc);
  require(back.ok());
  // gpus 0 containers carry nothing but their name and init flag.
  require(back.value() == r);
  require(encode_gpu_request(back.value()) == enc);
}

DeviceConfig device_config(uint8_t selector) {
  DeviceConfig d;
  if ((selector & 1) != 0) {
    d.default_memory_mib = 20000;
  }
  if ((selector & 2) != 0) {
    d.default_cores = 30;
  }
  if ((selector & 4) != 0) {
    d.memory_factor = 1024;
  }
  if ((selector & 8) != 0) {
    d.default_gpu_num = 2;
  }
  return d;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  auto decoded = decode_gpu_request(text);
  if (decoded) {
    check_request(decoded.value());
    round_trip(decoded.value());
  } else {
    require(decoded.message().rfind(std::string(kGpuRequestAnnotation) + ": ", 0) == 0);
  }

  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(text, ec);
  if (ec || !v.is_object()) {
    return 0;
  }
  const DeviceConfig d = device_config(size == 0 ? 0 : data[size - 1]);
  for (CountRule rule : {CountRule::admission, CountRule::kubelet}) {
    auto r = extract_gpu_request(v.get_object(), d, rule);
    if (r) {
      check_request(r.value());
      round_trip(r.value());
    } else {
      require(r.message().find("container") != std::string::npos || r.message().rfind("spec.", 0) == 0);
    }
  }
  return 0;
}
