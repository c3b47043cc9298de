#include "common/json_patch.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
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

TEST_CASE("test ops: equal values pass, others fail and change nothing; an absent member equals null") {
  const auto doc = boost::json::parse(R"({"metadata":{"annotations":{"lock":"a"},"name":"n"},"list":[1,2]})");
  auto run = [&](Patch p) { return apply_patch(doc, p); };
  // Test-and-set: passes when the value is as expected.
  auto swapped = run({{PatchOp::Kind::test, "/metadata/annotations/lock", "a"},
                      {PatchOp::Kind::add, "/metadata/annotations/lock", "b"}});
  REQUIRE(swapped.ok());
  CHECK(swapped->at_pointer("/metadata/annotations/lock") == "b");
  // Another value: the whole patch fails, naming the op.
  auto stale = run({{PatchOp::Kind::test, "/metadata/annotations/lock", "x"},
                    {PatchOp::Kind::add, "/metadata/annotations/lock", "b"}});
  REQUIRE_FALSE(stale.ok());
  CHECK(stale.message().find("patch op 0 (test /metadata/annotations/lock)") != std::string::npos);
  // evanphx/json-patch v4 (kube-apiserver's): an absent member tests equal to null, a present one does not.
  CHECK(run({{PatchOp::Kind::test, "/metadata/annotations/other", nullptr}}).ok());
  CHECK_FALSE(run({{PatchOp::Kind::test, "/metadata/annotations/lock", nullptr}}).ok());
  CHECK_FALSE(run({{PatchOp::Kind::test, "/metadata/annotations/other", "a"}}).ok());
  // ... but its parent must exist.
  CHECK_FALSE(run({{PatchOp::Kind::test, "/metadata/labels/x", nullptr}}).ok());
  // Arrays and the whole document.
  CHECK(run({{PatchOp::Kind::test, "/list/1", 2}}).ok());
  CHECK_FALSE(run({{PatchOp::Kind::test, "/list/2", nullptr}}).ok());
  CHECK(run({{PatchOp::Kind::test, "", doc}}).ok());
  CHECK_FALSE(run({{PatchOp::Kind::test, "", boost::json::object{}}}).ok());
  // Serialized with its value, null included.
  auto text = boost::json::parse(serialize_patch({{PatchOp::Kind::test, "/a", nullptr}}));
  CHECK(text.as_array()[0].as_object().at("op") == "test");
  CHECK(text.as_array()[0].as_object().at("value").is_null());
}

TEST_CASE("serialize_patch and append_patch write the bytes of boost::json::serialize(patch_to_json(...))") {
  Patch p;
  p.push_back({PatchOp::Kind::add, "/spec/containers/0/resources/limits/nvidia.com~1gpu", boost::json::value("1")});
  p.push_back(
      {PatchOp::Kind::replace, "/metadata/annotations/a\"b\\c\n", boost::json::parse(R"({"x":[1,2.5,null,true]})")});
  p.push_back({PatchOp::Kind::remove, "/metadata/labels/x", {}});
  p.push_back({PatchOp::Kind::test, "/a", nullptr});
  p.push_back({PatchOp::Kind::add, "/spec/containers/0/env/-", boost::json::parse(R"({"name":"N","value":"v"})")});
  for (size_t n = 0; n <= p.size(); ++n) {
    Patch part(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(n));
    const std::string want = boost::json::serialize(patch_to_json(part));
    CHECK(serialize_patch(part) == want);
    std::string out = "x";
    append_patch(out, part);
    CHECK(out == "x" + want);
  }
}
