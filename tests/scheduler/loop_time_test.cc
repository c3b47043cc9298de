#include "scheduler/loop_time.h"

#include <catch2/catch.hpp>

using namespace gpuslice::scheduler;
using namespace std::chrono;

TEST_CASE("rfc3339 formats UTC seconds and micro fractions") {
  // 2026-11-30T07:48:24Z = 1796024904 (date -u -d ... +%s)
  WallTime t{seconds(1796024904) + microseconds(123456)};
  CHECK(format_rfc3339(t) == "2026-11-30T07:48:24Z");
  CHECK(format_rfc3339(t, 6) == "2026-11-30T07:48:24.123456Z");
  CHECK(format_rfc3339(WallTime{}) == "1970-01-01T00:00:00Z");
  CHECK(format_rfc3339(WallTime{seconds(951782400)}) == "2000-02-29T00:00:00Z");
}

TEST_CASE("rfc3339 parses offsets and fractions") {
  auto z = parse_rfc3339("2026-11-30T07:48:24Z");
  REQUIRE(z.ok());
  CHECK(duration_cast<seconds>(z->time_since_epoch()).count() == 1796024904);
  auto off = parse_rfc3339("2026-11-30T15:48:24+08:00");
  REQUIRE(off.ok());
  CHECK(*off == *z);
  auto neg = parse_rfc3339("2026-11-29T23:48:24-08:00");
  REQUIRE(neg.ok());
  CHECK(*neg == *z);
  auto frac = parse_rfc3339("2026-11-30T07:48:24.5Z");
  REQUIRE(frac.ok());
  CHECK(duration_cast<milliseconds>(*frac - *z).count() == 500);
}

TEST_CASE("rfc3339 round-trips") {
  for (int64_t s : {0LL, 1LL, 86399LL, 951782400LL, 1796024904LL, 4102444800LL}) {
    WallTime t{seconds(s) + microseconds(s % 1000000)};
    auto back = parse_rfc3339(format_rfc3339(t, 6));
    REQUIRE(back.ok());
    CHECK(*back == t);
  }
}

TEST_CASE("rfc3339 rejects malformed text and quotes it") {
  for (const char* bad : {"", "2026-11-30", "2026-11-30 07:48:24Z", "2026-13-30T07:48:24Z", "2026-11-30T07:48:24",
                          "2026-11-30T07:48:24+0800", "2026-11-30T07:48:24.Z", "2026-11-30T07:48:24Zx",
                          "Requesting_2026-11-30 07:48:24"}) {
    auto r = parse_rfc3339(bad);
    CHECK_FALSE(r.ok());
    if (!r.ok()) {
      CHECK(r.message().find(std::string("\"") + bad) == 0);
    }
  }
}
