// The client token bucket with injected time (kube/rate_limiter.h).
#include "kube/rate_limiter.h"

#include <catch2/catch.hpp>

using namespace gpuslice::kube;
using namespace std::chrono_literals;

TEST_CASE("token bucket: burst, then qps, with injected time") {
  const auto t0 = std::chrono::steady_clock::time_point{} + 1000s;
  TokenBucket tb(10.0, 3, t0);
  REQUIRE(tb.reserve(t0) == 0ms);
  REQUIRE(tb.reserve(t0) == 0ms);
  REQUIRE(tb.reserve(t0) == 0ms);
  // Fourth request: 1/10 s until a token refills; fifth borrows one more.
  REQUIRE(std::chrono::duration_cast<std::chrono::milliseconds>(tb.reserve(t0)) == 100ms);
  REQUIRE(std::chrono::duration_cast<std::chrono::milliseconds>(tb.reserve(t0)) == 200ms);
  REQUIRE_FALSE(tb.try_take(t0));
  // After a second, 10 tokens refilled minus the 2 borrowed, capped at the burst.
  REQUIRE(tb.tokens(t0 + 1s) == Approx(3.0));
  REQUIRE(tb.try_take(t0 + 1s));
  REQUIRE(tb.tokens(t0 + 1s) == Approx(2.0));
  // Time running backwards does not mint tokens.
  REQUIRE(tb.tokens(t0) == Approx(2.0));
}

TEST_CASE("token bucket with qps <= 0 is unlimited") {
  const auto t0 = std::chrono::steady_clock::time_point{};
  TokenBucket tb(0, 1, t0);
  for (int i = 0; i < 100; ++i) {
    REQUIRE(tb.reserve(t0) == 0ms);
  }
  REQUIRE(tb.unlimited());
}
