// PodFacts (scheduler/framework/pod_facts.h): what parse_pod_facts keeps of a pod. The rarely set facts (pod
// (anti-)affinity terms, spread constraints, host ports, volumes, the nominated node) live behind one pointer that
// stays null for a pod without any of them; the accessors read the same values either way. And Labels, the sorted
// vector labels are kept in, read as the std::map it replaced.
#include "scheduler/framework/pod_facts.h"

#include <boost/json/parse.hpp>
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

using namespace gpuslice::scheduler;
namespace json = boost::json;

namespace {

std::shared_ptr<const PodFacts> facts(std::string_view pod) {
  auto f = parse_pod_facts(json::parse(pod).as_object());
  REQUIRE(f.ok());
  return *f;
}

}  // namespace

TEST_CASE("pod facts: a plain GPU pod keeps no extras; its accessors read empty", "[pod_facts]") {
  auto f = facts(R"({"metadata":{"name":"p","namespace":"ns","uid":"u-1","labels":{"app":"a","tier":"x"}},
    "spec":{"nodeName":"n1","priority":7,"containers":[{"name":"c","image":"i",
      "resources":{"limits":{"nvidia.com/gpu":"1"},"requests":{"cpu":"250m","memory":"1Gi"}},
      "ports":[{"containerPort":80}]}],
      "volumes":[{"name":"tok","projected":{"sources":[]}}],
      "tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute"}]},
    "status":{"startTime":"2026-12-06T10:00:00Z"}})");
  CHECK(f->extras == nullptr);
  CHECK(f->labels.size() == 2);
  CHECK(f->node_name == "n1");
  CHECK(f->uid == "u-1");
  CHECK(f->priority == 7);
  CHECK(f->start_unix > 0);
  CHECK(f->nonzero_cpu_milli == 250);
  CHECK(f->nonzero_memory_bytes == 1024LL * 1024 * 1024);
  CHECK(f->nominated_node().empty());
  CHECK(f->affinity().empty());
  CHECK(f->anti_affinity().empty());
  CHECK(f->preferred_affinity().empty());
  CHECK(f->preferred_anti_affinity().empty());
  CHECK(f->spread().empty());
  CHECK(f->host_ports().empty());
  CHECK(f->claims().empty());
  CHECK(f->disks().empty());
  CHECK(f->inline_csi_drivers().empty());
  CHECK(f->unsupported().empty());
  CHECK_FALSE(f->has_pod_affinity());
  CHECK_FALSE(f->has_affinity_score_terms());
  CHECK(&f->affinity() == &no_pod_facts_extras().affinity);
}

TEST_CASE("pod facts: each rarely set fact alone makes the extras, read through the accessors", "[pod_facts]") {
  auto nominated = facts(R"({"metadata":{"name":"p"},"spec":{"containers":[]},"status":{"nominatedNodeName":"n2"}})");
  REQUIRE(nominated->extras != nullptr);
  CHECK(nominated->nominated_node() == "n2");
  CHECK(nominated->affinity().empty());

  // Without a spec: only the nominated node can be set, and it is kept.
  auto no_spec = facts(R"({"metadata":{"name":"p"},"status":{"nominatedNodeName":"n3"}})");
  CHECK(no_spec->nominated_node() == "n3");
  CHECK(facts(R"({"metadata":{"name":"p"}})") == empty_pod_facts());

  auto anti = facts(R"({"metadata":{"name":"p","labels":{"app":"a"}},"spec":{"containers":[],
    "affinity":{"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[
      {"labelSelector":{"matchLabels":{"app":"a"}},"topologyKey":"kubernetes.io/hostname"}],
      "preferredDuringSchedulingIgnoredDuringExecution":[{"weight":5,"podAffinityTerm":{
        "labelSelector":{"matchLabels":{"app":"b"}},"topologyKey":"zone"}}]},
     "podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[
      {"labelSelector":{"matchLabels":{"app":"c"}},"topologyKey":"zone"}],
      "preferredDuringSchedulingIgnoredDuringExecution":[{"weight":3,"podAffinityTerm":{
        "labelSelector":{"matchLabels":{"app":"d"}},"topologyKey":"rack"}}]}}}})");
  REQUIRE(anti->extras != nullptr);
  REQUIRE(anti->anti_affinity().size() == 1);
  CHECK(anti->anti_affinity()[0].topology_key == "kubernetes.io/hostname");
  REQUIRE(anti->preferred_anti_affinity().size() == 1);
  CHECK(anti->preferred_anti_affinity()[0].weight == 5);
  REQUIRE(anti->affinity().size() == 1);
  CHECK(anti->affinity()[0].topology_key == "zone");
  REQUIRE(anti->preferred_affinity().size() == 1);
  CHECK(anti->preferred_affinity()[0].term.topology_key == "rack");
  CHECK(anti->has_pod_affinity());
  CHECK(anti->has_affinity_score_terms());

  auto spread = facts(R"({"metadata":{"name":"p"},"spec":{"containers":[],"topologySpreadConstraints":[
    {"maxSkew":2,"topologyKey":"zone","whenUnsatisfiable":"ScheduleAnyway","labelSelector":{}}]}})");
  REQUIRE(spread->spread().size() == 1);
  CHECK(spread->spread()[0].max_skew == 2);
  CHECK_FALSE(spread->spread()[0].hard);
  CHECK_FALSE(spread->has_pod_affinity());

  auto ports = facts(R"({"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","ports":[
    {"containerPort":80,"hostPort":8080,"protocol":"UDP"}]}]}})");
  REQUIRE(ports->host_ports().size() == 1);
  CHECK(ports->host_ports()[0] == HostPort{"0.0.0.0", "UDP", 8080});

  auto volumes = facts(R"({"metadata":{"name":"p"},"spec":{"containers":[],"volumes":[
    {"name":"data","persistentVolumeClaim":{"claimName":"pvc-1"}},
    {"name":"scratch","ephemeral":{"volumeClaimTemplate":{}}},
    {"name":"disk","gcePersistentDisk":{"pdName":"pd-1","readOnly":true}},
    {"name":"inline","csi":{"driver":"csi.example.com"}}]}})");
  CHECK(volumes->claims() == std::vector<std::string>{"pvc-1", "p-scratch"});
  REQUIRE(volumes->disks().size() == 1);
  CHECK(volumes->disks()[0].kind == "gce");
  CHECK(volumes->disks()[0].read_only);
  CHECK(volumes->inline_csi_drivers() == std::vector<std::string>{"csi.example.com"});
  CHECK(volumes->nominated_node().empty());
}

TEST_CASE("pod facts: the extras are held by one pointer, not inline", "[pod_facts]") {
  // What the snapshot pays per bound pod for the rarely set facts: one pointer, however many kinds there are.
  CHECK(sizeof(PodFacts) < sizeof(PodFactsExtras));
  CHECK(sizeof(PodFacts) <= 184);
}

TEST_CASE("labels: a sorted vector read as the map was: lookup, key order, the first of equal keys", "[pod_facts]") {
  Labels l{{"zone", "a"}, {"app", "web"}, {"tier", "x"}, {"app", "ignored"}};
  REQUIRE(l.size() == 3);
  std::vector<std::string> keys;
  for (const auto& [k, v] : l) {
    keys.push_back(k);
  }
  CHECK(keys == std::vector<std::string>{"app", "tier", "zone"});
  CHECK(l.at("app") == "web");  // std::map's initializer list keeps the first too
  REQUIRE(l.get("zone") != nullptr);
  CHECK(*l.get("zone") == "a");
  CHECK(l.get("zon") == nullptr);
  CHECK(l.get("zonee") == nullptr);
  CHECK(l.get("") == nullptr);
  CHECK(l.find("tier")->second == "x");
  CHECK(l.find("nope") == l.end());
  CHECK(l.count("tier") == 1);
  CHECK(l.count("Tier") == 0);
  CHECK(l.contains("app"));
  CHECK_THROWS_AS(l.at("missing"), std::out_of_range);

  CHECK_FALSE(l.emplace("app", "other"));  // present: kept, as std::map::emplace
  CHECK(l.at("app") == "web");
  CHECK(l.emplace("", "empty key"));  // sorts first
  CHECK(l.begin()->first.empty());
  CHECK(l.emplace("b", "2"));
  l.insert_or_assign("app", "api");
  l.insert_or_assign("z", "last");
  keys.clear();
  for (const auto& kv : l) {
    keys.push_back(kv.first);
  }
  CHECK(keys == std::vector<std::string>{"", "app", "b", "tier", "z", "zone"});
  CHECK(l.at("app") == "api");
  CHECK(Labels{{"a", "1"}, {"b", "2"}} == Labels{{"b", "2"}, {"a", "1"}});
  CHECK_FALSE(Labels{{"a", "1"}} == Labels{{"a", "2"}});
  CHECK(Labels{}.empty());
  CHECK(Labels{}.find("a") == Labels{}.end());
}

TEST_CASE("labels: random sets answer every lookup as std::map does", "[pod_facts]") {
  std::mt19937 rng(18);
  for (int trial = 0; trial < 200; ++trial) {
    std::map<std::string, std::string, std::less<>> want;
    Labels got;
    const int n = static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
      std::string k = "k" + std::to_string(rng() % 16);
      std::string v = "v" + std::to_string(rng() % 4);
      CHECK(got.emplace(k, v) == want.emplace(k, v).second);
    }
    REQUIRE(got.size() == want.size());
    CHECK(std::equal(got.begin(), got.end(), want.begin(), want.end(),
                     [](const auto& a, const auto& b) { return a.first == b.first && a.second == b.second; }));
    for (int k = 0; k < 18; ++k) {
      const std::string key = "k" + std::to_string(k);
      auto w = want.find(key);
      const std::string* g = got.get(key);
      CHECK((g == nullptr) == (w == want.end()));
      if (g != nullptr && w != want.end()) {
        CHECK(*g == w->second);
      }
    }
  }
}

TEST_CASE("labels: selectors match pod labels as before (In, NotIn, Exists, DoesNotExist, matchLabels)",
          "[pod_facts]") {
  auto sel = parse_label_selector(json::parse(R"({"matchLabels":{"app":"web"},"matchExpressions":[
    {"key":"tier","operator":"In","values":["a","b"]},{"key":"canary","operator":"DoesNotExist"},
    {"key":"zone","operator":"Exists"},{"key":"env","operator":"NotIn","values":["prod"]}]})")
                                      .as_object(),
                                  "sel");
  REQUIRE(sel.ok());
  CHECK(sel->matches(Labels{{"app", "web"}, {"tier", "b"}, {"zone", "z1"}}));
  CHECK(sel->matches(Labels{{"app", "web"}, {"tier", "a"}, {"zone", "z1"}, {"env", "dev"}}));
  CHECK_FALSE(sel->matches(Labels{{"app", "web"}, {"tier", "c"}, {"zone", "z1"}}));
  CHECK_FALSE(sel->matches(Labels{{"app", "web"}, {"tier", "a"}}));
  CHECK_FALSE(sel->matches(Labels{{"app", "web"}, {"tier", "a"}, {"zone", "z1"}, {"canary", ""}}));
  CHECK_FALSE(sel->matches(Labels{{"app", "web"}, {"tier", "a"}, {"zone", "z1"}, {"env", "prod"}}));
  CHECK_FALSE(sel->matches(Labels{}));
  CHECK(LabelSelector::everything().matches(Labels{}));
  CHECK_FALSE(LabelSelector{}.matches(Labels{{"app", "web"}}));  // nil: nothing

  // A pod's labels as parsed, and matchLabelKeys merged from them.
  auto f = facts(R"({"metadata":{"name":"p","labels":{"b":"2","a":"1","c":"3"}},"spec":{"containers":[],
    "topologySpreadConstraints":[{"maxSkew":1,"topologyKey":"zone","labelSelector":{},"matchLabelKeys":["c","x"]}]}})");
  CHECK(f->labels == Labels{{"a", "1"}, {"b", "2"}, {"c", "3"}});
  REQUIRE(f->spread().size() == 1);
  REQUIRE(f->spread()[0].selector.requirements.size() == 1);
  CHECK(f->spread()[0].selector.requirements[0].key == "c");
  CHECK(f->spread()[0].selector.requirements[0].values == std::vector<std::string>{"3"});
}
