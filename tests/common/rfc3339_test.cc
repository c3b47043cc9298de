// The one RFC 3339 codec (common/rfc3339.h): the cases of the former scheduler/loop_time and kube/objects copies.
#include "common/rfc3339.h"

#include <catch2/catch.hpp>

using namespace gpuslice;
using namespace std::chrono;

namespace {
WallTime at(int64_t unix_seconds, int64_t micros = 0) {
  return WallTime(duration_cast<WallTime::duration>(seconds(unix_seconds) + microseconds(micros)));
}
}  // namespace

TEST_CASE("rfc3339 formats UTC seconds and micro fractions") {
  // 2026-11-30T07:48:24Z = 1796024904 (date -u -d ... +%s)
  WallTime t{seconds(1796024904) + microseconds(123456)};
  CHECK(format_rfc3339(t) == "2026-11-30T07:48:24Z");
  CHECK(format_rfc3339(t, 6) == "2026-11-30T07:48:24.123456Z");
  CHECK(format_rfc3339(t, 3) == "2026-11-30T07:48:24.123Z");  // truncated, not rounded
  CHECK(format_rfc3339(t, 12) == "2026-11-30T07:48:24.123456000Z");
  CHECK(format_rfc3339(WallTime{}) == "1970-01-01T00:00:00Z");
  CHECK(format_rfc3339(WallTime{seconds(951782400)}) == "2000-02-29T00:00:00Z");
  CHECK(format_rfc3339(at(1796083200, 999999)) == "2026-12-01T00:00:00Z");
  CHECK(format_rfc3339(at(0), 6) == "1970-01-01T00:00:00.000000Z");
}

TEST_CASE("rfc3339 formats times before the epoch") {
  CHECK(format_rfc3339(at(-1, 500000), 6) == "1969-12-31T23:59:59.500000Z");
  CHECK(format_rfc3339(at(-86400)) == "1969-12-31T00:00:00Z");
  CHECK(format_rfc3339(at(-86401)) == "1969-12-30T23:59:59Z");
  auto back = parse_rfc3339("1969-12-31T23:59:59.5Z");
  REQUIRE(back.ok());
  CHECK(*back == at(-1, 500000));
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

  auto t = parse_rfc3339("2026-12-01T00:00:00.123456Z");
  REQUIRE(t);
  CHECK(*t == at(1796083200, 123456));
  auto half_hour = parse_rfc3339("2026-12-01T02:30:00+02:30");
  REQUIRE(half_hour);
  CHECK(*half_hour == at(1796083200));
  CHECK(parse_rfc3339("2026-12-01T00:00:00.1Z").value() == at(1796083200, 100000));
  CHECK(parse_rfc3339("2026-12-01t00:00:00z").value() == at(1796083200));
  // More than 9 fraction digits: nanoseconds kept, the rest ignored (as Go does).
  CHECK(parse_rfc3339("2026-12-01T00:00:00.1234567891Z").value() ==
        WallTime(duration_cast<WallTime::duration>(seconds(1796083200) + nanoseconds(123456789))));
  CHECK(parse_rfc3339("2028-02-29T00:00:00Z").ok());  // a leap day
}

TEST_CASE("rfc3339 round-trips") {
  for (int64_t s : {0LL, 1LL, 86399LL, 951782400LL, 1796024904LL, 4102444800LL}) {
    WallTime t{seconds(s) + microseconds(s % 1000000)};
    auto back = parse_rfc3339(format_rfc3339(t, 6));
    REQUIRE(back.ok());
    CHECK(*back == t);
  }
  const auto now = at(1800000000, 654321);
  CHECK(parse_rfc3339(format_rfc3339(now, 6)).value() == now);
}

TEST_CASE("rfc3339 rejects malformed text and quotes it") {
  for (const char* bad : {"",
                          "2026-11-30",
                          "2026-11-30 07:48:24Z",
                          "2026-13-30T07:48:24Z",
                          "2026-11-30T07:48:24",
                          "2026-11-30T07:48:24+0800",
                          "2026-11-30T07:48:24.Z",
                          "2026-11-30T07:48:24Zx",
                          "Requesting_2026-11-30 07:48:24",
                          "2026-12-01",
                          "2026-13-01T00:00:00Z",
                          "2026-12-01T00:00:00",
                          "2026-12-01T00:00:00.Z",
                          "2026-12-01T00:00:00Zjunk",
                          "2026-12-01T00:00:00+0200",
                          "2026-02-30T00:00:00Z",
                          "2027-02-29T00:00:00Z",
                          "2026-04-31T00:00:00Z",
                          "2026-12-01T24:00:00Z",
                          "2026-12-01T00:00:00+24:00"}) {
    INFO(bad);
    auto r = parse_rfc3339(bad);
    CHECK_FALSE(r.ok());
    if (!r.ok()) {
      CHECK(r.message().find(std::string("\"") + bad) == 0);
    }
  }
  auto unprintable = parse_rfc3339("2026\n12");
  REQUIRE_FALSE(unprintable);
  CHECK(unprintable.message() == "\"2026 12\" is not an RFC 3339 time: expected YYYY-MM-DDTHH:MM:SS");
  auto long_text = parse_rfc3339(std::string(100, 'x'));
  REQUIRE_FALSE(long_text);
  CHECK(long_text.message().find(std::string(64, 'x') + "...\"") == 1);
}

// Found by tests/fuzz/kubeconfig_fuzz.cc (an ExecCredential expirationTimestamp in 4060): seconds past what a
// WallTime's 64-bit nanoseconds hold overflowed in the conversion (UBSan: signed integer overflow). They are
// errors now; the edges of the range still parse.
TEST_CASE("rfc3339 rejects times a WallTime cannot hold") {
  for (const char* far : {"4060-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "2262-04-12T00:00:00Z",
                          "0000-01-01T00:00:00Z", "1677-09-21T00:00:00Z", "2262-04-11T23:59:59-23:59"}) {
    INFO(far);
    auto r = parse_rfc3339(far);
    REQUIRE_FALSE(r.ok());
    CHECK(r.message() ==
          std::string("\"") + far + "\" is not an RFC 3339 time: outside the years 1678 to 2261 a time point holds");
  }
  auto late = parse_rfc3339("2262-04-11T23:47:15.999999999Z");
  REQUIRE(late.ok());
  CHECK(format_rfc3339(*late, 9) == "2262-04-11T23:47:15.999999999Z");
  auto early = parse_rfc3339("1677-09-21T00:12:45Z");
  REQUIRE(early.ok());
  CHECK(format_rfc3339(*early) == "1677-09-21T00:12:45Z");
}
