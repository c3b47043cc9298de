// YAML -> JSON conversion of manifests (simulate/manifest.h).
#include "simulate/manifest.h"
#include "tests/fuzz/yaml_reference.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

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
  CHECK_THAT(nested.message(), Contains("line 1: nesting deeper than 128 levels"));
}

TEST_CASE("manifests: the event-based reader gives what yaml-cpp's node graph gave, on every YAML file of the repo",
          "[manifest]") {
  // The examples, the webhook's golden pods, the e2e manifests, the kustomize tree, the chart's values and the lab's
  // files: whatever simulate or config reading meets in practice. The reference is the reader this one replaced
  // (tests/fuzz/yaml_reference.h).
  size_t files = 0;
  size_t documents = 0;
  for (const char* dir : {"examples", "tests/webhook/testdata", "tests/e2e/manifests", "manifests", "lab", "charts"}) {
    for (const auto& e :
         std::filesystem::recursive_directory_iterator(std::filesystem::path(GPUSLICE_SOURCE_DIR) / dir)) {
      if (!e.is_regular_file() || (e.path().extension() != ".yaml" && e.path().extension() != ".yml") ||
          e.path().string().find("/templates/") != std::string::npos ||
          e.path().string().find("/.state/") != std::string::npos) {
        continue;  // chart templates are Go templates, not YAML
      }
      std::ifstream in(e.path());
      std::stringstream text;
      text << in.rdbuf();
      auto reference = gpuslice::testing::reference_documents(text.str());
      auto now = gpuslice::yaml_to_json_documents(text.str());
      INFO(e.path().string());
      REQUIRE(reference.has_value());
      REQUIRE(now.ok());
      CHECK(now.value() == reference.value());
      ++files;
      documents += now->size();
    }
  }
  CHECK(files >= 40);
  CHECK(documents >= files);
}

TEST_CASE("manifests: alias bombs, cycles and undefined aliases name the file, the document and the anchor",
          "[manifest]") {
  std::string bomb = "kind: Node\nmetadata: {name: a}\n---\nkind: Pod\nl0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    bomb += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) {
      bomb += (j != 0 ? ", *l" : "*l") + std::to_string(i - 1);
    }
    bomb += "]\n";
  }
  auto laughs = parse_manifests(bomb, "pods.yaml");
  REQUIRE_FALSE(laughs.ok());
  CHECK_THAT(laughs.message(), Contains("pods.yaml: document 1: line "));
  CHECK_THAT(laughs.message(), Contains("aliases expand to more than 400000 nodes"));
  auto cycle = parse_manifests("kind: Pod\nspec: &s {containers: [*s]}\n", "c.yaml");
  REQUIRE_FALSE(cycle.ok());
  CHECK(cycle.message() ==
        "c.yaml: document 0: line 2, column 24: alias *s is inside the node anchored &s (an alias cycle)");
  auto undefined = parse_manifests("kind: Pod\nspec: *nowhere\n", "u.yaml");
  REQUIRE_FALSE(undefined.ok());
  CHECK(undefined.message() ==
        "u.yaml: document 0: line 2, column 7: alias *nowhere has no anchor &nowhere before it in its document");
}
