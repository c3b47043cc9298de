#include "kube/rate_limiter.h"

#include <algorithm>
#include <cmath>

namespace gpuslice::kube {

TokenBucket::TokenBucket(double qps, int burst, time_point now)
    : qps_(qps), burst_(std::max(1, burst)), tokens_(static_cast<double>(std::max(1, burst))), last_(now) {}

void TokenBucket::advance(time_point now) {
  if (now <= last_) {
    return;  // time never runs backwards for the bucket (an injected clock may repeat a value)
  }
  const double elapsed = std::chrono::duration<double>(now - last_).count();
  tokens_ = std::min(static_cast<double>(burst_), tokens_ + elapsed * qps_);
  last_ = now;
}

TokenBucket::duration TokenBucket::reserve(time_point now) {
  if (unlimited()) {
    return duration::zero();
  }
  advance(now);
  tokens_ -= 1.0;
  if (tokens_ >= 0) {
    return duration::zero();
  }
  const double wait_seconds = -tokens_ / qps_;
  return std::chrono::duration_cast<duration>(std::chrono::duration<double>(wait_seconds));
}

bool TokenBucket::try_take(time_point now) {
  if (unlimited()) {
    return true;
  }
  advance(now);
  if (tokens_ >= 1.0) {
    tokens_ -= 1.0;
    return true;
  }
  return false;
}

double TokenBucket::tokens(time_point now) const {
  if (unlimited()) {
    return static_cast<double>(burst_);
  }
  if (now <= last_) {
    return tokens_;
  }
  const double elapsed = std::chrono::duration<double>(now - last_).count();
  return std::min(static_cast<double>(burst_), tokens_ + elapsed * qps_);
}

}  // namespace gpuslice::kube
