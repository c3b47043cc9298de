#include "kube/framer.h"

#include <fmt/format.h>

namespace gpuslice::kube {

LineFramer::LineFramer(std::size_t max_line_bytes) : max_line_bytes_(max_line_bytes) {}

Status LineFramer::fail(std::size_t length) {
  failed_ = true;
  partial_.clear();
  partial_.shrink_to_fit();
  failure_ = fmt::format("watch line of at least {} bytes exceeds the limit of {} bytes", length, max_line_bytes_);
  return make_error(failure_);
}

namespace {
void deliver(std::string_view line, const LineFramer::LineHandler& on_line) {
  if (!line.empty() && line.back() == '\r') {
    line.remove_suffix(1);
  }
  if (!line.empty()) {
    on_line(line);
  }
}
}  // namespace

Status LineFramer::feed(std::string_view bytes, const LineHandler& on_line) {
  if (failed_) {
    return make_error(failure_);
  }
  while (!bytes.empty()) {
    const auto nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      // No terminator yet: keep the piece, but never more than the cap (+1 for a possible trailing '\r').
      if (partial_.size() + bytes.size() > max_line_bytes_ + 1) {
        return fail(partial_.size() + bytes.size());
      }
      partial_.append(bytes);
      return Status::Ok();
    }
    const std::string_view piece = bytes.substr(0, nl);
    bytes.remove_prefix(nl + 1);
    std::size_t length = partial_.size() + piece.size();
    // A trailing '\r' belongs to the terminator, not to the line.
    const bool cr = !piece.empty() ? piece.back() == '\r' : (!partial_.empty() && partial_.back() == '\r');
    if (length - (cr ? 1 : 0) > max_line_bytes_) {
      return fail(length);
    }
    if (partial_.empty()) {
      deliver(piece, on_line);  // the common case: no copy
    } else {
      partial_.append(piece);
      std::string line;
      line.swap(partial_);
      deliver(line, on_line);
    }
  }
  return Status::Ok();
}

Status LineFramer::finish(const LineHandler& on_line) {
  if (failed_) {
    return make_error(failure_);
  }
  if (!partial_.empty()) {
    std::string line;
    line.swap(partial_);
    if (line.size() - (line.back() == '\r' ? 1 : 0) > max_line_bytes_) {
      return fail(line.size());
    }
    deliver(line, on_line);
  }
  return Status::Ok();
}

}  // namespace gpuslice::kube
