// Kubernetes quantities (common/quantity.h): milli-units for the node-level fit, whole numbers for GPU resources.
#include "common/quantity.h"

#include <catch2/catch.hpp>

using namespace gpuslice;
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

TEST_CASE("whole quantities") {
  CHECK(parse_whole_quantity("20000").value() == 20000);
  CHECK(parse_whole_quantity("2k").value() == 2000);
  CHECK(parse_whole_quantity("1Ki").value() == 1024);
  CHECK(parse_whole_quantity("3000m").value() == 3);
  CHECK_FALSE(parse_whole_quantity("1500m").ok());
  CHECK_FALSE(parse_whole_quantity("-1").ok());
  CHECK_FALSE(parse_whole_quantity("1e3").ok());
  CHECK_FALSE(parse_whole_quantity("99999999999999999999").ok());
  CHECK(parse_whole_quantity("+3").value() == 3);
  CHECK(parse_whole_quantity("1Gi").value() == int64_t(1) << 30);
  CHECK(parse_whole_quantity("4T").value() == 4000000000000);
  // Messages quote the text and say what is wrong with it (the webhook prefixes the container and resource).
  CHECK(parse_whole_quantity("").message() == "\"\" is empty");
  CHECK(parse_whole_quantity("-1").message() == "\"-1\" is negative");
  for (const char* bad : {"1.5", "1.0", "1500m", "1e3", "1E3", "2Pi", "1u", "abc", "+", "1X", "1 "}) {
    INFO(bad);
    CHECK(parse_whole_quantity(bad).message() == std::string("\"") + bad + "\" is not a whole number");
  }
  CHECK(parse_whole_quantity("99999999999999999999").message() == "\"99999999999999999999\" is too large");
  CHECK(parse_whole_quantity("99999999999Ti").message() == "\"99999999999Ti\" is too large");
}
