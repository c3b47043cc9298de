#pragma once
// The clocks the loop and its I/O parts read, injected so queue backoff, lock waits and lock expiry test
// deterministically: steady for queue/backoff/deadlines, wall for annotations, locks, leases and events.

#include <chrono>
#include <functional>

namespace gpuslice::scheduler {

struct LoopClock {
  std::function<std::chrono::steady_clock::time_point()> steady = [] { return std::chrono::steady_clock::now(); };
  std::function<std::chrono::system_clock::time_point()> wall = [] { return std::chrono::system_clock::now(); };
};

}  // namespace gpuslice::scheduler
