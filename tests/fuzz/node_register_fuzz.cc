// hami.io/node-nvidia-register decoder (JSON and legacy forms). Oracle: whatever decodes re-encodes in both forms
// and decodes back to the same devices; decoded devices satisfy the validation invariants.
#include "scheduler/inventory.h"

#include <boost/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <set>
#include <string_view>

using namespace gpuslice::scheduler;

namespace {
bool legacy_safe(const std::string& s) {
  if (s.find_first_of(",:") != std::string::npos) {
    return false;
  }
  // The legacy decoder trims spaces around fields.
  return s.empty() || (s.front() != ' ' && s.back() != ' ' && s.front() != '\t' && s.back() != '\t' &&
                       s.front() != '\n' && s.back() != '\n' && s.front() != '\r' && s.back() != '\r');
}
// Annotations are UTF-8 in Kubernetes; the legacy decoder does not check, and JSON cannot carry other bytes. The
// test for "JSON can carry it" is Boost.JSON itself.
bool json_safe(const std::string& s) {
  boost::system::error_code ec;
  boost::json::parse(boost::json::serialize(boost::json::string(s)), ec);
  return !ec;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = decode_node_devices("fuzz-node", text);
  if (!r.ok()) {
    if (r.message().rfind("node \"fuzz-node\": hami.io/node-nvidia-register: ", 0) != 0) {
      std::abort();  // every error names the node and the annotation
    }
    return 0;
  }
  std::set<std::string> ids;
  for (const DeviceInfo& d : r.value()) {
    if (d.id.empty() || !ids.insert(d.id).second || d.count < 0 || d.devmem < 0 || d.devcore < 0) {
      std::abort();
    }
  }
  bool utf8 = true;
  for (const DeviceInfo& d : r.value()) {
    utf8 = utf8 && json_safe(d.id) && json_safe(d.type) && json_safe(d.mode);
  }
  if (utf8) {
    auto again = decode_node_devices("fuzz-node", encode_node_devices_json(r.value()));
    if (!again.ok() || again.value() != r.value()) {
      std::abort();
    }
  }
  bool safe = true;
  for (const DeviceInfo& d : r.value()) {
    safe = safe && legacy_safe(d.id) && legacy_safe(d.type) && legacy_safe(d.mode);
  }
  // A legacy string starting with '[' or '{' is read as JSON (HAMi v2.8+ writes JSON), so such ids cannot round-trip.
  if (safe && !r->empty() && !r->front().id.empty() && (r->front().id[0] == '[' || r->front().id[0] == '{')) {
    safe = false;
  }
  if (safe) {
    auto legacy = decode_node_devices("fuzz-node", encode_node_devices_legacy(r.value()));
    if (!legacy.ok() || legacy.value() != r.value()) {
      std::abort();
    }
  }
  return 0;
}
