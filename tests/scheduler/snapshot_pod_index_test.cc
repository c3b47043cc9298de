// The snapshot's pod index (Snapshot::for_each_pod_maybe_matching) and its use by InterPodAffinity and
// PodTopologySpread: on randomized snapshots, kept current through upsert/remove/assume/forget, the indexed path
// must decide exactly as the walk over every pod (ScheduleOptions::use_pod_index = false).
#include "scheduler/framework/pod_facts.h"
#include "scheduler/schedule.h"
#include "scheduler/snapshot.h"
#include "tests/scheduler/sched_fixtures.h"

#include <boost/json/serialize.hpp>
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
namespace json = boost::json;

namespace {

const std::vector<std::string> kNamespaces = {"ns-a", "ns-b", "ns-c"};
const std::vector<std::string> kApps = {"web", "db", "cache", "batch"};
const std::vector<std::string> kTiers = {"front", "back"};
const std::vector<std::string> kZones = {"z1", "z2", "z3"};

struct Gen {
  std::mt19937 rng;
  explicit Gen(uint32_t seed) : rng(seed) {}
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }
  bool coin(int percent) { return pick(100) < percent; }
  const std::string& of(const std::vector<std::string>& v) { return v[static_cast<size_t>(pick(int(v.size())))]; }

  json::object labels() {
    json::object l;
    if (coin(85)) {
      l["app"] = of(kApps);
    }
    if (coin(50)) {
      l["tier"] = of(kTiers);
    }
    if (coin(10)) {
      l["canary"] = "yes";
    }
    return l;
  }

  // Every operator, matchLabels, {} and the occasional label no pod carries.
  json::object selector() {
    json::object s;
    const int shape = pick(10);
    if (shape == 0) {
      return s;  // {}: every pod
    }
    if (shape <= 4) {
      s["matchLabels"] = json::object{{"app", coin(90) ? of(kApps) : std::string("none")}};
    }
    json::array exprs;
    const int n = shape <= 4 ? pick(2) : 1 + pick(2);
    for (int i = 0; i < n; ++i) {
      const std::string key = coin(50) ? "app" : coin(70) ? "tier" : "canary";
      const std::vector<std::string>& vals = key == "app" ? kApps : kTiers;
      static const std::vector<std::string> kOps = {"In", "NotIn", "Exists", "DoesNotExist"};
      const std::string& op = of(kOps);
      json::object e{{"key", key}, {"operator", op}};
      if (op == "In" || op == "NotIn") {
        json::array v;
        for (int k = 0, m = 1 + pick(2); k < m; ++k) {
          v.push_back(json::string(of(vals)));  // duplicates allowed
        }
        e["values"] = v;
      }
      exprs.push_back(e);
    }
    s["matchExpressions"] = exprs;
    return s;
  }

  json::object term() {
    json::object t{{"labelSelector", selector()},
                   {"topologyKey", coin(50) ? "kubernetes.io/hostname" : "topology.kubernetes.io/zone"}};
    const int ns = pick(6);
    if (ns == 0) {
      t["namespaces"] = json::array{json::string(of(kNamespaces)), json::string(of(kNamespaces))};
    } else if (ns == 1) {
      t["namespaceSelector"] = json::object{};
    } else if (ns == 2) {
      t["namespaceSelector"] = json::object{{"matchLabels", {{"team", "blue"}}}};
      if (coin(50)) {
        t["namespaces"] = json::array{json::string(of(kNamespaces))};
      }
    }
    return t;
  }

  json::array terms(int max) {
    json::array a;
    for (int i = 0, n = pick(max + 1); i < n; ++i) {
      a.push_back(term());
    }
    return a;
  }

  json::array weighted(int max) {
    json::array a;
    for (int i = 0, n = pick(max + 1); i < n; ++i) {
      a.push_back(json::object{{"weight", 1 + pick(100)}, {"podAffinityTerm", term()}});
    }
    return a;
  }

  // A pod with random labels and, with `constrained`, random affinity terms and spread constraints.
  json::object pod(const std::string& name, const std::string& ns, bool constrained) {
    json::object spec{{"containers", json::array{json::object{{"name", "c"}, {"image", "x"}}}}};
    if (constrained) {
      json::object pa, paa;
      if (coin(40)) {
        pa["requiredDuringSchedulingIgnoredDuringExecution"] = terms(2);
      }
      if (coin(40)) {
        pa["preferredDuringSchedulingIgnoredDuringExecution"] = weighted(2);
      }
      if (coin(50)) {
        paa["requiredDuringSchedulingIgnoredDuringExecution"] = terms(2);
      }
      if (coin(40)) {
        paa["preferredDuringSchedulingIgnoredDuringExecution"] = weighted(2);
      }
      json::object aff;
      if (!pa.empty()) {
        aff["podAffinity"] = pa;
      }
      if (!paa.empty()) {
        aff["podAntiAffinity"] = paa;
      }
      if (!aff.empty()) {
        spec["affinity"] = aff;
      }
      json::array spread;
      for (int i = 0, n = pick(3); i < n; ++i) {
        json::object c{{"maxSkew", 1 + pick(2)},
                       {"topologyKey", coin(50) ? "kubernetes.io/hostname" : "topology.kubernetes.io/zone"},
                       {"whenUnsatisfiable", coin(60) ? "DoNotSchedule" : "ScheduleAnyway"},
                       {"labelSelector", selector()}};
        if (coin(20)) {
          c["minDomains"] = 1 + pick(4);
          c["whenUnsatisfiable"] = "DoNotSchedule";
        }
        spread.push_back(c);
      }
      if (!spread.empty()) {
        spec["topologySpreadConstraints"] = spread;
      }
    }
    json::object meta{{"name", name}, {"namespace", ns}, {"labels", labels()}};
    if (coin(5)) {
      meta["deletionTimestamp"] = "2026-12-01T00:00:00Z";
    }
    return json::object{{"metadata", meta}, {"spec", spec}, {"status", {{"phase", "Running"}}}};
  }
};

std::string node_name(int i) {
  return "n" + std::to_string(i);
}

Snapshot random_cluster(Gen& g, int nodes, int pods, std::vector<json::object>& placed) {
  Snapshot s;
  for (int i = 0; i < nodes; ++i) {
    NodeSpec n{node_name(i), {card("GPU-" + std::to_string(i))}};
    n.labels = {{"kubernetes.io/hostname", node_name(i)}};
    if (i % 7 != 6) {  // a few nodes without a zone
      n.labels.emplace_back("topology.kubernetes.io/zone", kZones[static_cast<size_t>(i) % kZones.size()]);
    }
    REQUIRE(s.upsert_node(node(n)));
  }
  json::object ns_blue{{"metadata", {{"name", "ns-b"}, {"labels", {{"team", "blue"}}}}}};
  REQUIRE(s.objects().upsert_namespace(ns_blue));
  for (int i = 0; i < pods; ++i) {
    json::object p = g.pod("p" + std::to_string(i), g.of(kNamespaces), g.coin(30));
    // Some pods on a node that is not (or no longer) in the snapshot.
    p["spec"].as_object()["nodeName"] = g.coin(5) ? std::string("gone") : node_name(g.pick(nodes));
    REQUIRE(s.upsert_pod(p));
    placed.push_back(p);
  }
  return s;
}

// Both paths, same pod: same outcome, node and message (with every node explained), and the same node without
// explanations (the hot path).
void same_decision(const Snapshot& s, const PodInfo& info) {
  ScheduleOptions indexed;
  ScheduleOptions walked;
  walked.use_pod_index = false;
  Decision a = schedule(s, info, indexed);
  Decision b = schedule(s, info, walked);
  INFO("pod " << info.ns << "/" << info.name);
  CHECK(a.scheduled == b.scheduled);
  CHECK(a.node == b.node);
  CHECK(a.message == b.message);
  indexed.explain_failures = false;
  walked.explain_failures = false;
  Decision c = schedule(s, info, indexed);
  Decision d = schedule(s, info, walked);
  CHECK(c.scheduled == d.scheduled);
  CHECK(c.node == d.node);
}

// The set of pods a query matches, from the index (each visited once) and from every pod.
void same_matches(const Snapshot& s, const LabelSelector& sel, const std::vector<std::string>* nss) {
  auto wanted = [&](const PodRecord& r) {
    if (nss != nullptr && std::find(nss->begin(), nss->end(), r.ns) == nss->end()) {
      return false;
    }
    return sel.matches(r.facts->labels);
  };
  std::set<std::string> all;
  s.for_each_pod([&](const PodRecord& r) {
    if (wanted(r)) {
      all.insert(r.ns + "/" + r.name);
    }
  });
  std::multiset<std::string> visited;
  std::set<std::string> got;
  s.for_each_pod_maybe_matching({Snapshot::PodQuery{&sel, nss}}, true, [&](const PodRecord& r) {
    visited.insert(r.ns + "/" + r.name);
    if (wanted(r)) {
      got.insert(r.ns + "/" + r.name);
    }
  });
  CHECK(got == all);
  CHECK(visited.size() == std::set<std::string>(visited.begin(), visited.end()).size());  // each once
}

}  // namespace

TEST_CASE("pod index: candidates cover every matching pod, each once, for every selector shape") {
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    Gen g(seed);
    std::vector<json::object> placed;
    Snapshot s = random_cluster(g, 8, 120, placed);
    for (int i = 0; i < 40; ++i) {
      json::object sel = g.selector();
      auto parsed = parse_label_selector(sel, "sel");
      REQUIRE(parsed.ok());
      INFO("seed " << seed << " selector " << json::serialize(sel));
      const std::vector<std::string> one{g.of(kNamespaces)};
      const std::vector<std::string> two{g.of(kNamespaces), g.of(kNamespaces)};
      same_matches(s, *parsed, nullptr);
      same_matches(s, *parsed, &one);
      same_matches(s, *parsed, &two);
    }
  }
}

TEST_CASE("pod index: a nil selector visits nothing, an unnarrowable one visits every pod") {
  Gen g(7);
  std::vector<json::object> placed;
  Snapshot s = random_cluster(g, 4, 30, placed);
  LabelSelector nil;  // nothing = true
  int n = 0;
  s.for_each_pod_maybe_matching({Snapshot::PodQuery{&nil, nullptr}}, true, [&](const PodRecord&) { ++n; });
  CHECK(n == 0);
  auto not_in = parse_label_selector(
      json::object{{"matchExpressions",
                    json::array{json::object{{"key", "app"}, {"operator", "NotIn"}, {"values", json::array{"web"}}}}}},
      "sel");
  REQUIRE(not_in.ok());
  s.for_each_pod_maybe_matching({Snapshot::PodQuery{&*not_in, nullptr}}, true, [&](const PodRecord&) { ++n; });
  CHECK(n == static_cast<int>(s.pod_count()));
  // matchLabels narrows to the pods carrying that label (here: none carry app=none).
  auto none = parse_label_selector(json::object{{"matchLabels", {{"app", "none"}}}}, "sel");
  REQUIRE(none.ok());
  int m = 0;
  s.for_each_pod_maybe_matching({Snapshot::PodQuery{&*none, nullptr}}, true, [&](const PodRecord&) { ++m; });
  CHECK(m == 0);
}

TEST_CASE("pod index: InterPodAffinity and PodTopologySpread decide as the full walk on randomized snapshots") {
  for (uint32_t seed = 1; seed <= 25; ++seed) {
    Gen g(1000 + seed);
    std::vector<json::object> placed;
    Snapshot s = random_cluster(g, 7, 60, placed);
    INFO("seed " << seed);
    for (int round = 0; round < 12; ++round) {
      json::object p = g.pod("new-" + std::to_string(round), g.of(kNamespaces), true);
      auto info = parse_pod(p, gpuslice::DeviceConfig{});
      REQUIRE(info.ok());
      INFO("round " << round << " pod " << json::serialize(p));
      same_decision(s, *info);
      // Keep the index busy between rounds: assume the decision (or forget it), replace, move and delete pods.
      Decision d = schedule(s, *info, ScheduleOptions{});
      if (d.scheduled) {
        REQUIRE(s.assume(*info, d.node, d.devices, 0));
        if (g.coin(30)) {
          CHECK(s.forget(info->ns, info->name));
        }
      }
      const size_t victim = static_cast<size_t>(g.pick(static_cast<int>(placed.size())));
      json::object& old = placed[victim];
      const std::string ns(old["metadata"].as_object()["namespace"].as_string());
      const std::string name(old["metadata"].as_object()["name"].as_string());
      switch (g.pick(3)) {
        case 0:
          s.remove_pod(ns, name);
          break;
        case 1: {  // new labels and terms, same name
          json::object fresh = g.pod(name, ns, g.coin(30));
          fresh["spec"].as_object()["nodeName"] = node_name(g.pick(7));
          REQUIRE(s.upsert_pod(fresh));
          old = fresh;
          break;
        }
        default:  // moved to another node
          old["spec"].as_object()["nodeName"] = node_name(g.pick(7));
          REQUIRE(s.upsert_pod(old));
          break;
      }
      same_decision(s, *info);
    }
    // Every assumption expired: the index forgets them too.
    s.expire_assumed(1000, 10);
    for (int i = 0; i < 5; ++i) {
      json::object p = g.pod("after-" + std::to_string(i), g.of(kNamespaces), true);
      auto info = parse_pod(p, gpuslice::DeviceConfig{});
      REQUIRE(info.ok());
      same_decision(s, *info);
    }
  }
}
