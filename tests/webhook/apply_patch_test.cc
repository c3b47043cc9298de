// gpuslice::apply_patch (common/json_patch.h) against nlohmann-json's RFC 6902 implementation.
#include "webhook_test_support.h"

using namespace gpuslice;
using nlohmann::json;

namespace {

Patch from_json(const std::string& text) {
  Patch p;
  const boost::json::value parsed = boost::json::parse(text);
  for (const auto& v : parsed.as_array()) {
    const auto& o = v.as_object();
    std::string op(o.at("op").as_string());
    PatchOp::Kind k = op == "add"       ? PatchOp::Kind::add
                      : op == "replace" ? PatchOp::Kind::replace
                                        : PatchOp::Kind::remove;
    p.push_back({k, std::string(o.at("path").as_string()), o.contains("value") ? o.at("value") : boost::json::value()});
  }
  return p;
}

}  // namespace

TEST_CASE("apply_patch agrees with nlohmann on add, replace, remove and array append") {
  const std::string doc = R"({"a":{"b":[1,2,3],"c/d":{"e~f":1}},"s":"x","n":null})";
  for (
      std::string patch : {
          R"([{"op":"add","path":"/a/b/-","value":4}])",
          R"([{"op":"add","path":"/a/b/0","value":0}])",
          R"([{"op":"add","path":"/a/b/3","value":9}])",
          R"([{"op":"add","path":"/a/new","value":{"k":[1]}}])",
          R"([{"op":"add","path":"/a/c~1d/e~0f","value":2}])",
          R"([{"op":"add","path":"/n","value":{"x":1}}])",
          R"([{"op":"add","path":"/s","value":"replaced by add"}])",
          R"([{"op":"replace","path":"/a/b/1","value":"two"}])",
          R"([{"op":"replace","path":"/s","value":[]}])",
          R"([{"op":"remove","path":"/a/b/0"}])",
          R"([{"op":"remove","path":"/a/c~1d"}])",
          R"([{"op":"replace","path":"","value":{"whole":true}}])",
          R"([{"op":"add","path":"/a/b/-","value":4},{"op":"remove","path":"/a/b/0"},{"op":"add","path":"/z","value":1}])",
      }) {
    INFO(patch);
    auto ours = apply_patch(boost::json::parse(doc), from_json(patch));
    REQUIRE(ours.ok());
    CHECK(json::parse(boost::json::serialize(ours.value())) == json::parse(doc).patch(json::parse(patch)));
  }
}

TEST_CASE("apply_patch errors name the op index and path, and leave the input alone") {
  const auto doc = boost::json::parse(R"({"a":{"b":[1,2,3]},"s":"x"})");
  struct Case {
    std::string patch;
    std::string message;
  };
  for (const Case& c : {
           Case{R"([{"op":"add","path":"/x/y","value":1}])", "patch op 0 (add /x/y): \"x\" does not exist"},
           Case{R"([{"op":"replace","path":"/q","value":1}])", "patch op 0 (replace /q): \"q\" does not exist"},
           Case{R"([{"op":"remove","path":"/a/b/3"}])",
                "patch op 0 (remove /a/b/3): index 3 is past the end of the array"},
           Case{R"([{"op":"add","path":"/a/b/5","value":1}])",
                "patch op 0 (add /a/b/5): index 5 is past the end of the array"},
           Case{R"([{"op":"add","path":"/a/b/01","value":1}])",
                "patch op 0 (add /a/b/01): \"01\" is not an array index"},
           Case{R"([{"op":"replace","path":"/a/b/-","value":1}])",
                "patch op 0 (replace /a/b/-): \"-\" is not an array index"},
           Case{R"([{"op":"add","path":"/s/t","value":1}])",
                "patch op 0 (add /s/t): the parent of \"t\" is neither an object nor an array"},
           Case{R"([{"op":"add","path":"a","value":1}])", "patch op 0 (add a): pointer does not start with \"/\""},
           Case{R"([{"op":"add","path":"/a~2","value":1}])", "patch op 0 (add /a~2): invalid escape in \"a~2\""},
           Case{R"([{"op":"remove","path":""}])", "patch op 0 (remove ): cannot remove the whole document"},
           Case{R"([{"op":"add","path":"/ok","value":1},{"op":"remove","path":"/nope"}])",
                "patch op 1 (remove /nope): \"nope\" does not exist"},
       }) {
    INFO(c.patch);
    auto r = apply_patch(doc, from_json(c.patch));
    REQUIRE_FALSE(r.ok());
    CHECK(r.message() == c.message);
    // nlohmann rejects the same patches, except that it asserts (aborts) on a scalar parent.
    if (c.patch.find("/s/t") == std::string::npos) {
      CHECK_THROWS(json::parse(boost::json::serialize(doc)).patch(json::parse(c.patch)));
    }
  }
  CHECK(boost::json::serialize(doc) == R"({"a":{"b":[1,2,3]},"s":"x"})");
}
