#include "kube/backoff.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

namespace gpuslice::kube {

UniformRandom make_uniform_random(uint64_t seed) {
  auto engine = std::make_shared<std::mt19937_64>(seed);
  return [engine] { return std::uniform_real_distribution<double>(0.0, 1.0)(*engine); };
}

UniformRandom make_uniform_random() {
  std::random_device rd;
  return make_uniform_random((static_cast<uint64_t>(rd()) << 32) ^ rd());
}

Backoff::Backoff(BackoffPolicy policy, UniformRandom random) : policy_(policy), random_(std::move(random)) {
  if (!random_) {
    random_ = make_uniform_random();
  }
}

std::chrono::milliseconds Backoff::next() {
  const double initial = static_cast<double>(std::max<int64_t>(0, policy_.initial.count()));
  const double cap = static_cast<double>(std::max<int64_t>(0, policy_.max.count()));
  const double factor = std::max(1.0, policy_.factor);
  // pow() of a bounded exponent: the attempt counter stops mattering once the cap is reached.
  double base = initial * std::pow(factor, std::min(attempts_, 64));
  base = std::min(base, cap);
  double u = random_();
  if (!(u >= 0.0 && u < 1.0)) {
    u = 0.0;  // a broken source must not produce a negative or unbounded delay
  }
  const double jitter = std::max(0.0, policy_.jitter);
  const double delay = base * (1.0 + jitter * u);
  if (attempts_ < 1000) {
    ++attempts_;
  }
  return std::chrono::milliseconds(static_cast<int64_t>(delay));
}

}  // namespace gpuslice::kube
