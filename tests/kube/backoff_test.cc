// Jittered exponential backoff with an injected random source (kube/backoff.h).
#include "kube/backoff.h"

#include <catch2/catch.hpp>

using namespace gpuslice::kube;
using namespace std::chrono_literals;

TEST_CASE("backoff grows exponentially to the cap, with jitter from the injected source") {
  double u = 0.0;
  Backoff b({100ms, 1000ms, 2.0, 0.5}, [&] { return u; });
  REQUIRE(b.next() == 100ms);
  REQUIRE(b.next() == 200ms);
  REQUIRE(b.next() == 400ms);
  REQUIRE(b.next() == 800ms);
  REQUIRE(b.next() == 1000ms);
  REQUIRE(b.next() == 1000ms);
  REQUIRE(b.attempts() == 6);
  u = 0.5;
  REQUIRE(b.next() == 1250ms);  // 1000 * (1 + 0.5 * 0.5)
  b.reset();
  REQUIRE(b.next() == 125ms);
}

TEST_CASE("backoff tolerates a broken random source and huge attempt counts") {
  Backoff b({10ms, 50ms, 3.0, 1.0}, [] { return 7.0; });
  for (int i = 0; i < 2000; ++i) {
    auto d = b.next();
    REQUIRE(d >= 10ms);
    REQUIRE(d <= 50ms);
  }
}

TEST_CASE("backoff with a seeded source is deterministic and within bounds") {
  Backoff a({100ms, 10s, 2.0, 0.5}, make_uniform_random(42));
  Backoff c({100ms, 10s, 2.0, 0.5}, make_uniform_random(42));
  for (int i = 0; i < 20; ++i) {
    auto x = a.next();
    REQUIRE(x == c.next());
    REQUIRE(x <= 15s);
  }
}
