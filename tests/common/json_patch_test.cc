#include "common/json_patch.h"

#include <boost/json/parse.hpp>
#include <catch2/catch.hpp>

using namespace gpuslice;

TEST_CASE("JSON pointer tokens escape ~ and /") {
  CHECK(json_pointer_escape("nvidia.com/gpu") == "nvidia.com~1gpu");
  CHECK(json_pointer_escape("a~b/c") == "a~0b~1c");
  std::string out;
  REQUIRE(json_pointer_unescape("a~0b~1c", out));
  CHECK(out == "a~b/c");
  CHECK_FALSE(json_pointer_unescape("a~2", out));
  CHECK_FALSE(json_pointer_unescape("a~", out));
}

TEST_CASE("patches serialize as RFC 6902 arrays") {
  Patch p;
  p.push_back({PatchOp::Kind::add, "/spec/schedulerName", boost::json::value("gpuslice-scheduler")});
  p.push_back({PatchOp::Kind::remove, "/metadata/labels/x", {}});
  auto v = boost::json::parse(serialize_patch(p));
  REQUIRE(v.as_array().size() == 2);
  CHECK(v.as_array()[0].as_object().at("op") == "add");
  CHECK(v.as_array()[0].as_object().at("value") == "gpuslice-scheduler");
  CHECK(v.as_array()[1].as_object().at("op") == "remove");
  CHECK_FALSE(v.as_array()[1].as_object().contains("value"));
}
