#pragma once
// Jittered exponential backoff for watch reconnects and retries. Pure: the randomness is injected as a
// function returning uniform values in [0, 1), so tests are deterministic.

#include <chrono>
#include <cstdint>
#include <functional>

namespace gpuslice::kube {

struct BackoffPolicy {
  std::chrono::milliseconds initial{200};  ///< base delay of the first retry
  std::chrono::milliseconds max{30000};    ///< cap of the base delay (before jitter)
  double factor = 2.0;                     ///< base delay multiplier per attempt
  double jitter = 0.5;  ///< the delay is base * (1 + jitter * u), u uniform in [0, 1) (client-go's wait.Jitter)
};

/// Uniform random values in [0, 1).
using UniformRandom = std::function<double()>;

/// A UniformRandom over a std::mt19937_64 with this seed (the production default seeds from random_device).
UniformRandom make_uniform_random(uint64_t seed);
UniformRandom make_uniform_random();

class Backoff {
 public:
  Backoff(BackoffPolicy policy, UniformRandom random);

  /// The delay before the next attempt: initial * factor^attempts capped at max, then jittered up. Advances
  /// the attempt counter.
  std::chrono::milliseconds next();
  /// Back to the initial delay (after a success, e.g. a watch that delivered events).
  void reset() { attempts_ = 0; }
  int attempts() const { return attempts_; }
  const BackoffPolicy& policy() const { return policy_; }

 private:
  BackoffPolicy policy_;
  UniformRandom random_;
  int attempts_ = 0;
};

}  // namespace gpuslice::kube
