// Watch framer + event decoder. Input: byte 0 picks the line cap, bytes 1..2 seed the split points, the rest
// is the stream. Oracle: the lines and the failure flag are the same whether the stream is fed whole, byte by
// byte, or split at pseudo-random points; every line is non-empty, has no '\n', fits the cap; decoding a line
// never crashes and a decoded event of a non-ERROR type carries the object's metadata.resourceVersion.
#include "kube/framer.h"
#include "kube/objects.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {
struct Outcome {
  std::vector<std::string> lines;
  bool failed = false;
  bool operator==(const Outcome&) const = default;
};

Outcome run(std::string_view stream, std::size_t cap, const std::vector<std::size_t>& cuts) {
  gpuslice::kube::LineFramer framer(cap);
  Outcome out;
  auto on_line = [&](std::string_view l) { out.lines.emplace_back(l); };
  std::size_t prev = 0;
  for (std::size_t cut : cuts) {
    if (!framer.feed(stream.substr(prev, cut - prev), on_line)) {
      out.failed = true;
      return out;
    }
    prev = cut;
  }
  if (!framer.feed(stream.substr(prev), on_line) || !framer.finish(on_line)) {
    out.failed = true;
  }
  return out;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) {
    return 0;
  }
  static constexpr std::size_t kCaps[] = {1, 8, 64, 256, 4096, 1 << 20};
  const std::size_t cap = kCaps[data[0] % (sizeof kCaps / sizeof kCaps[0])];
  uint32_t seed = static_cast<uint32_t>(data[1]) << 8 | data[2];
  const std::string_view stream(reinterpret_cast<const char*>(data) + 3, size - 3);

  const Outcome whole = run(stream, cap, {});
  std::vector<std::size_t> every;
  for (std::size_t i = 1; i < stream.size(); ++i) {
    every.push_back(i);
  }
  std::vector<std::size_t> random_cuts;
  for (std::size_t pos = 0;;) {
    seed = seed * 1103515245u + 12345u;  // a tiny LCG: deterministic from the input
    pos += 1 + (seed >> 16) % 17;
    if (pos >= stream.size()) {
      break;
    }
    random_cuts.push_back(pos);
  }
  if (!(run(stream, cap, every) == whole) || !(run(stream, cap, random_cuts) == whole)) {
    std::abort();  // output depends on the split points
  }
  for (const auto& line : whole.lines) {
    if (line.empty() || line.find('\n') != std::string::npos || line.size() > cap + 1) {
      std::abort();
    }
    auto ev = gpuslice::kube::decode_watch_event(line);
    if (ev && ev->type != gpuslice::kube::WatchEventType::error &&
        ev->resource_version != gpuslice::kube::resource_version_of(ev->object)) {
      std::abort();
    }
  }
  return 0;
}
