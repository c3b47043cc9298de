#pragma once
// Incremental line framer for watch streams (one JSON object per line, cpp-notes.md §3.5). Pure state
// machine over byte spans: HTTP chunk boundaries are not event boundaries, so bytes are fed as they arrive
// and complete lines come out. The output never depends on how the input was split.

#include "common/result.h"

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace gpuslice::kube {

class LineFramer {
 public:
  using LineHandler = std::function<void(std::string_view line)>;

  /// `max_line_bytes` caps one line (excluding the '\n'); a longer line fails the framer.
  explicit LineFramer(std::size_t max_line_bytes);

  /// Feeds bytes. Calls `on_line` for every completed line, without the '\n' and without one trailing
  /// '\r' (so "\r\n" framing works too); empty lines (keep-alive newlines) are skipped. Returns an error
  /// naming the cap and the length once a line exceeds `max_line_bytes`; the framer then stays failed
  /// and every later call returns the same error.
  Status feed(std::string_view bytes, const LineHandler& on_line);

  /// End of stream: an unterminated non-empty tail is delivered as a final line (a server that closes after
  /// the last object without '\n' loses nothing). Returns the failure if the framer had failed.
  Status finish(const LineHandler& on_line);

  std::size_t buffered_bytes() const { return partial_.size(); }
  bool failed() const { return failed_; }
  std::size_t max_line_bytes() const { return max_line_bytes_; }

 private:
  Status fail(std::size_t length);

  std::size_t max_line_bytes_;
  std::string partial_;
  bool failed_ = false;
  std::string failure_;
};

}  // namespace gpuslice::kube
