#pragma once
// The text of a pending pod, kept compact while it waits (SchedulingLoop::PendingPod): its JSON as
// boost::json::serialize wrote it, deflated (zlib, raw deflate) against a preset dictionary of the JSON a
// kube-apiserver writes for a pod (the field names, defaults and common values every pod repeats). A pod of
// 1.5-2.5 KB of text keeps about a tenth of it; unpack() gives the text back byte for byte. Pure (no I/O, no
// clock); the streams are reused between calls, so one codec is used by one thread at a time.

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace gpuslice::scheduler {

class PodTextCodec {
 public:
  PodTextCodec();
  ~PodTextCodec();
  PodTextCodec(const PodTextCodec&) = delete;
  PodTextCodec& operator=(const PodTextCodec&) = delete;

  /// The packed form of `text` (any bytes; not only JSON).
  std::string pack(std::string_view text);
  /// The text `packed` was made from; nullopt when `packed` is not something pack() wrote.
  std::optional<std::string> unpack(std::string_view packed);

  /// The preset dictionary (exposed for tests).
  static std::string_view dictionary();

 private:
  struct Streams;
  std::unique_ptr<Streams> streams_;
};

}  // namespace gpuslice::scheduler
