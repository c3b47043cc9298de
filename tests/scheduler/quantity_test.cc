// Kubernetes quantities into milli-units (scheduler/quantity.h).
#include "scheduler/quantity.h"

#include <catch2/catch.hpp>

using namespace gpuslice::scheduler;
using Catch::Matchers::Contains;

TEST_CASE("quantities parse into milli-units", "[quantity]") {
  CHECK(parse_quantity_milli("4").value() == 4000);
  CHECK(parse_quantity_milli("500m").value() == 500);
  CHECK(parse_quantity_milli("1.5").value() == 1500);
  CHECK(parse_quantity_milli("1Ki").value() == 1024000);
  CHECK(parse_quantity_milli("16Gi").value() == (int64_t(16) << 30) * 1000);
  CHECK(parse_quantity_milli("2k").value() == 2000000);
  CHECK(parse_quantity_milli("1e3").value() == 1000000);
  CHECK(parse_quantity_milli("0.0001").value() == 1);  // rounded up to one milli-unit
  CHECK(parse_quantity_milli("+3").value() == 3000);
  for (const char* bad : {"", "-1", "abc", "1X", "1e", "1e999", "99999999999999999999"}) {
    auto r = parse_quantity_milli(bad);
    INFO(bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.message(), Contains(std::string("\"") + bad + "\""));
  }
}
