// YAML -> JSON conversion of manifests (simulate/manifest.h).
#include "simulate/manifest.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>

using namespace gpuslice::simulate;
using Catch::Matchers::Contains;
namespace json = boost::json;

TEST_CASE("YAML scalars: quoted stay strings, plain ints stay ints", "[manifest]") {
  auto v = yaml_to_json(R"(
a: 3
b: "3"
c: '10'
d: true
e: "true"
f: 1.5
g: ~
h: 20000Mi
i: -7
j: 0x1F
k: [1, "x", null]
l: 99999999999999999999999
m: !!str 42
)");
  REQUIRE(v.ok());
  const json::object& o = v->as_object();
  CHECK(o.at("a") == json::value(3));
  CHECK(o.at("b") == json::value("3"));
  CHECK(o.at("c") == json::value("10"));
  CHECK(o.at("d") == json::value(true));
  CHECK(o.at("e") == json::value("true"));
  CHECK(o.at("f") == json::value(1.5));
  CHECK(o.at("g").is_null());
  CHECK(o.at("h") == json::value("20000Mi"));
  CHECK(o.at("i") == json::value(-7));
  CHECK(o.at("j") == json::value(31));
  CHECK(o.at("k") == json::parse(R"([1,"x",null])"));
  CHECK(o.at("l") == json::value("99999999999999999999999"));
  CHECK(o.at("m") == json::value("42"));
}

TEST_CASE("YAML errors carry line and column and JSON input is accepted", "[manifest]") {
  auto bad = yaml_to_json("a: [1, 2\nb: 3\n");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.message(), Contains("line "));
  auto j = yaml_to_json(R"({"kind":"Pod","spec":{"n":1}})");
  REQUIRE(j.ok());
  CHECK(j->at_pointer("/spec/n") == json::value(1));
}

TEST_CASE("manifests: multi-document, Lists expanded, document index in errors", "[manifest]") {
  auto m = parse_manifests(R"(
kind: Node
metadata: {name: a}
---
---
apiVersion: v1
kind: List
items:
  - {kind: Pod, metadata: {name: p1}}
  - {kind: Pod, metadata: {name: p2}}
---
kind: ResourceQuota
metadata: {name: q}
)",
                           "f.yaml");
  REQUIRE(m.ok());
  REQUIRE(m->size() == 4);
  CHECK(m->at(0).object.at("kind") == json::value("Node"));
  CHECK(m->at(1).document == 2);
  CHECK(m->at(2).object.at("metadata").at("name") == json::value("p2"));
  CHECK(m->at(3).document == 3);

  auto no_kind = parse_manifests("kind: Node\n---\nmetadata: {name: x}\n", "nodes.yaml");
  REQUIRE_FALSE(no_kind.ok());
  CHECK(no_kind.message() == "nodes.yaml: document 1: kind: missing");
  auto scalar = parse_manifests("just text\n", "x.yaml");
  REQUIRE_FALSE(scalar.ok());
  CHECK_THAT(scalar.message(), Contains("x.yaml: document 0: must be a mapping"));
  auto item = parse_manifests("kind: List\nitems: [{metadata: {}}]\n", "l.yaml");
  REQUIRE_FALSE(item.ok());
  CHECK_THAT(item.message(), Contains("l.yaml: document 0: items[0].kind: missing"));
  auto syntax = parse_manifests("kind: [\n", "s.yaml");
  REQUIRE_FALSE(syntax.ok());
  CHECK_THAT(syntax.message(), Contains("s.yaml: invalid YAML at line"));
}

TEST_CASE("long plain scalars convert without deep recursion", "[manifest]") {
  std::string digits(200000, '7');
  auto v =
      yaml_to_json("a: " + digits + "\nb: " + std::string(200000, 'x') + "\nc: 1." + std::string(1000, '5') + "\n");
  REQUIRE(v.ok());
  CHECK(v->at("a").as_string().size() == digits.size());  // too large for an integer: kept as text
  CHECK(v->at("b").as_string().size() == 200000);
  CHECK(v->at("c").is_double());
  auto nested = yaml_to_json(std::string(300, '[') + std::string(300, ']'));
  REQUIRE_FALSE(nested.ok());
  CHECK_THAT(nested.message(), Contains("nesting deeper than"));
}
