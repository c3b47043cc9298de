// The event-based YAML -> JSON reader (common/yaml_json.h): typing, documents, and each bound on hostile input.
#include "common/yaml_json.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <chrono>
#include <string>

using namespace gpuslice;
using Catch::Matchers::Contains;
namespace json = boost::json;

namespace {
// "Billion laughs": `levels` anchors, each a list of `width` aliases of the one before.
std::string laughs(int levels, int width) {
  std::string y = "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i <= levels; ++i) {
    y += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int j = 0; j < width; ++j) {
      y += (j != 0 ? ", *l" : "*l") + std::to_string(i - 1);
    }
    y += "]\n";
  }
  return y;
}
}  // namespace

TEST_CASE("yaml reader: documents, typing, anchors and aliases as yaml-cpp's nodes gave them", "[yaml]") {
  auto docs = yaml_to_json_documents(R"(
a: &x {n: 1, s: "1", t: true, f: 1.5, z: ~, big: 99999999999999999999}
b: *x
c: [&k key, *k]
*k : aliased key
d: !!str 7
e: !!int "8"
---
---
- 1
- two
...
--- "text"
)");
  REQUIRE(docs.ok());
  REQUIRE(docs->size() == 4);
  CHECK(docs->at(0) == json::parse(R"({"a":{"n":1,"s":"1","t":true,"f":1.5,"z":null,"big":"99999999999999999999"},
    "b":{"n":1,"s":"1","t":true,"f":1.5,"z":null,"big":"99999999999999999999"},"c":["key","key"],
    "key":"aliased key","d":"7","e":8})"));
  CHECK(docs->at(1).is_null());
  CHECK(docs->at(2) == json::parse(R"([1,"two"])"));
  CHECK(docs->at(3) == json::value("text"));

  auto first = yaml_to_json_first("a: 1\n---\nthis: [is not parsed\n");
  REQUIRE(first.ok());
  CHECK(*first == json::parse(R"({"a":1})"));
  auto empty = yaml_to_json_first("");
  REQUIRE(empty.ok());
  CHECK(empty->is_null());
}

TEST_CASE("yaml reader: text scalars for readers that type fields themselves", "[yaml]") {
  YamlReadOptions text;
  text.scalars = YamlScalars::kText;
  auto v = yaml_to_json_first("a: 2\nb: \"2\"\nc: true\nd: ~\ne: [0x1F]\n", text);
  REQUIRE(v.ok());
  CHECK(*v == json::parse(R"({"a":"2","b":"2","c":"true","d":null,"e":["0x1F"]})"));
}

TEST_CASE("yaml reader: an alias cycle is an error naming the anchor", "[yaml]") {
  auto self = yaml_to_json_documents("a: 1\n---\nb: &loop [1, {c: *loop}]\n");
  REQUIRE_FALSE(self.ok());
  CHECK(self.message() ==
        "document 1: line 3, column 18: alias *loop is inside the node anchored &loop (an alias cycle)");
  auto top = yaml_to_json_documents("&a [*a]");
  REQUIRE_FALSE(top.ok());
  CHECK_THAT(top.message(), Contains("alias *a is inside the node anchored &a"));
}

TEST_CASE("yaml reader: an undefined alias is an error naming the anchor", "[yaml]") {
  auto v = yaml_to_json_documents("a: &here 1\n---\nb: *here\n");  // anchors do not cross documents
  REQUIRE_FALSE(v.ok());
  CHECK(v.message() == "document 1: line 3, column 4: alias *here has no anchor &here before it in its document");
}

TEST_CASE("yaml reader: alias expansion is capped at 400000 nodes, quickly", "[yaml]") {
  // 10^9 strings if expanded; fails at the cap, naming it and the document, well under a second.
  auto t0 = std::chrono::steady_clock::now();
  auto bomb = yaml_to_json_documents("kind: Pod\n---\n" + laughs(9, 10));
  auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE_FALSE(bomb.ok());
  CHECK_THAT(bomb.message(), Contains("document 1: "));
  CHECK_THAT(bomb.message(), Contains("aliases expand to more than 400000 nodes"));
  CHECK(took < std::chrono::seconds(5));
  // Below the cap the same shape converts in full: 10 * 10^3 strings plus the lists.
  auto small = yaml_to_json_documents(laughs(3, 10));
  REQUIRE(small.ok());
  CHECK(small->at(0).at("l3").as_array().size() == 10);
  CHECK(small->at(0).at("l3").at(9).at(9).at(9).at(9) == json::value("lol"));
  // The budget is the input's, not each document's: many small documents cannot add up past it.
  std::string many;
  for (int i = 0; i < 100; ++i) {
    many += "---\n" + laughs(3, 10);
  }
  auto spread = yaml_to_json_documents(many);
  REQUIRE_FALSE(spread.ok());
  CHECK_THAT(spread.message(), Contains("aliases expand to more than 400000 nodes"));
}

TEST_CASE("yaml reader: alias expansion is capped in bytes too (one huge string aliased)", "[yaml]") {
  std::string y = "a: &a " + std::string(1 << 20, 'x') + "\nb: [";
  for (int i = 0; i < 100; ++i) {
    y += i != 0 ? ", *a" : "*a";
  }
  y += "]\n";
  auto v = yaml_to_json_documents(y);
  REQUIRE_FALSE(v.ok());
  CHECK_THAT(v.message(), Contains("aliases expand to more than 67108864 bytes of scalars (at alias *a)"));
}

TEST_CASE("yaml reader: nesting deeper than 128 levels is an error naming depth and line", "[yaml]") {
  auto ok = yaml_to_json_first(std::string(128, '[') + "1" + std::string(128, ']'));
  REQUIRE(ok.ok());
  auto deep = yaml_to_json_first("a: 1\nb: " + std::string(129, '[') + "1" + std::string(129, ']'));
  REQUIRE_FALSE(deep.ok());
  CHECK(deep.message() == "document 0: line 2: nesting deeper than 128 levels (depth 129)");
  // Far past yaml-cpp's own guard (500) the cap still answers first.
  auto deeper = yaml_to_json_first(std::string(100000, '[') + std::string(100000, ']'));
  REQUIRE_FALSE(deeper.ok());
  CHECK_THAT(deeper.message(), Contains("nesting deeper than 128 levels"));
  // An alias reaches as deep as what it copies.
  std::string nest = std::string(100, '[') + std::string(100, ']');
  auto via_alias =
      yaml_to_json_first("a: &n " + nest + "\nb: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[*n]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n");
  REQUIRE_FALSE(via_alias.ok());
  CHECK_THAT(via_alias.message(), Contains("nesting deeper than 128 levels (depth 130)"));
}

TEST_CASE("yaml reader: non-scalar keys and syntax errors", "[yaml]") {
  auto key = yaml_to_json_first("a: 1\n? [x]\n: 2\n");
  REQUIRE_FALSE(key.ok());
  CHECK(key.message() == "document 0: line 2: mapping keys must be scalars");
  auto syntax = yaml_to_json_documents("a: [1, 2\nb: 3\n");
  REQUIRE_FALSE(syntax.ok());
  CHECK_THAT(syntax.message(), Contains("invalid YAML at line "));
}

// Found by tests/fuzz/manifest_fuzz.cc (corpus/manifest/regress_stray_comma*): yaml-cpp 0.7 answers a stray top-level
// `,` with an empty document without consuming it, so reading every document looped forever, growing memory
// (jbeder/yaml-cpp#1040). The reader stops there with a syntax error naming the place.
TEST_CASE("yaml reader: a stray comma is a syntax error, not an endless stream of empty documents", "[yaml]") {
  for (const char* text : {"[],", "\"a\",", "{},", "kind: Pod\n---\n[a] ,\n", "[.a]\n [\x14*a],a]\n"}) {
    INFO(text);
    const auto start = std::chrono::steady_clock::now();
    auto docs = yaml_to_json_documents(text);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
    REQUIRE_FALSE(docs.ok());
    CHECK_THAT(docs.message(), Contains("invalid YAML at line ") && Contains("where a node was expected"));
  }
  auto comma = yaml_to_json_documents("[],");
  CHECK(comma.message() == "invalid YAML at line 1, column 3: unexpected token where a node was expected");
  // The first document alone is read as before (the rest is not parsed).
  auto first = yaml_to_json_first("[1],");
  REQUIRE(first.ok());
  CHECK(first.value() == json::array{1});
  // Documents that do progress, empty ones included, are all still read.
  auto empties = yaml_to_json_documents("---\n---\n--- 3\n");
  REQUIRE(empties.ok());
  CHECK(empties->size() == 3);
}
