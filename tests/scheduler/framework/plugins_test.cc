// Per-plugin behaviour of the default profile through schedule(): the hard constraints of issue 11.
#include "scheduler/framework/plugins.h"
#include "scheduler/schedule.h"
#include "tests/scheduler/sched_fixtures.h"

#include <boost/json/parse.hpp>
#include <catch2/catch.hpp>

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
namespace json = boost::json;

namespace {

Snapshot cluster(std::vector<NodeSpec> nodes) {
  Snapshot s;
  for (const NodeSpec& n : nodes) {
    REQUIRE(s.upsert_node(node(n)));
  }
  return s;
}

json::object P(std::string_view text) {
  return json::parse(text).as_object();
}

Decision decide(const Snapshot& s, const json::object& pod) {
  auto info = parse_pod(pod, gpuslice::DeviceConfig{});
  REQUIRE(info.ok());
  return schedule(s, *info, ScheduleOptions{});
}

const char* kWeb = R"({"metadata":{"name":"%N","namespace":"default","labels":{"app":"web"}},
  "spec":{%S "containers":[{"name":"c","image":"x","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"1000"}}}],
  "affinity":{"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[
    {"labelSelector":{"matchLabels":{"app":"web"}},"topologyKey":"kubernetes.io/hostname"}]}}}})";

std::string fill(std::string t, const std::string& name, const std::string& extra) {
  t.replace(t.find("%N"), 2, name);
  t.replace(t.find("%S"), 2, extra);
  return t;
}

}  // namespace

TEST_CASE("InterPodAffinity: required anti-affinity on hostname keeps the second replica off the node") {
  Snapshot s = cluster({NodeSpec{"n1", {card("GPU-1")}}});
  Decision first = decide(s, P(fill(kWeb, "web-1", "")));
  REQUIRE(first.scheduled);
  REQUIRE(s.upsert_pod(P(fill(kWeb, "web-1", R"("nodeName":"n1",)"))));
  Decision second = decide(s, P(fill(kWeb, "web-2", "")));
  CHECK_FALSE(second.scheduled);
  CHECK(second.message == "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules.");

  REQUIRE(s.upsert_node(node(NodeSpec{"n2", {card("GPU-2")}})));
  Decision again = decide(s, P(fill(kWeb, "web-2", "")));
  REQUIRE(again.scheduled);
  CHECK(again.node == "n2");
}

TEST_CASE("InterPodAffinity: an existing pod's anti-affinity repels a pod without terms (symmetry)") {
  Snapshot s = cluster({NodeSpec{"n1", {card("GPU-1")}}});
  REQUIRE(s.upsert_pod(P(fill(kWeb, "web-1", R"("nodeName":"n1",)"))));
  Decision d = decide(s, P(R"({"metadata":{"name":"plain","labels":{"app":"web"}},
      "spec":{"containers":[{"name":"c","image":"x"}]}})"));
  CHECK_FALSE(d.scheduled);
  CHECK(d.message == "0/1 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules.");
  // Another namespace is not matched by a term without namespaces.
  Decision other = decide(s, P(R"({"metadata":{"name":"plain","namespace":"other","labels":{"app":"web"}},
      "spec":{"containers":[{"name":"c","image":"x"}]}})"));
  CHECK(other.scheduled);
}

TEST_CASE("InterPodAffinity: required affinity needs a matching pod in the domain, or matches itself first") {
  Snapshot s =
      cluster({NodeSpec{"n1", {card("GPU-1")}, {{"zone", "a"}}}, NodeSpec{"n2", {card("GPU-2")}, {{"zone", "b"}}}});
  const char* aff =
      R"({"metadata":{"name":"%N","labels":{"app":"db"}},"spec":{%S "containers":[{"name":"c","image":"x"}],
    "affinity":{"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[
      {"labelSelector":{"matchLabels":{"app":"db"}},"topologyKey":"zone"}]}}}})";
  Decision first = decide(s, P(fill(aff, "db-1", "")));
  REQUIRE(first.scheduled);  // no pod matches anywhere and it matches its own term
  REQUIRE(s.upsert_pod(P(fill(aff, "db-1", R"("nodeName":"n2",)"))));
  Decision second = decide(s, P(fill(aff, "db-2", "")));
  REQUIRE(second.scheduled);
  CHECK(second.node == "n2");
  // A pod with affinity to app=db but not itself labelled: only zone b.
  Decision d = decide(s, P(R"({"metadata":{"name":"client"},"spec":{"containers":[{"name":"c","image":"x"}],
    "affinity":{"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[
      {"labelSelector":{"matchLabels":{"app":"db"}},"topologyKey":"zone"}]}}}})"));
  REQUIRE(d.scheduled);
  CHECK(d.node == "n2");
}

TEST_CASE("InterPodAffinity: namespaceSelector and mismatchLabelKeys") {
  Snapshot s = cluster({NodeSpec{"n1", {card("GPU-1")}}});
  REQUIRE(s.objects().upsert_namespace(P(R"({"metadata":{"name":"team-a","labels":{"tier":"gold"}}})")));
  REQUIRE(s.upsert_pod(P(R"({"metadata":{"name":"x","namespace":"team-a","labels":{"app":"web","tenant":"t1"}},
      "spec":{"nodeName":"n1","containers":[{"name":"c","image":"x"}]}})")));
  const char* anti = R"({"metadata":{"name":"y","namespace":"default","labels":{"tenant":"%N"}},"spec":{%S
    "containers":[{"name":"c","image":"x"}],"affinity":{"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[
    {"labelSelector":{"matchLabels":{"app":"web"}},"namespaceSelector":{"matchLabels":{"tier":"gold"}},
     "mismatchLabelKeys":["tenant"],"topologyKey":"kubernetes.io/hostname"}]}}}})";
  CHECK(decide(s, P(fill(anti, "t1", ""))).scheduled);        // same tenant value: term does not match x
  CHECK_FALSE(decide(s, P(fill(anti, "t2", ""))).scheduled);  // another tenant: x repels it
}

TEST_CASE("NodePorts: same hostPort clashes; other protocol or distinct hostIPs do not") {
  Snapshot s = cluster({NodeSpec{"n1", {card("GPU-1")}}});
  REQUIRE(s.upsert_pod(P(R"({"metadata":{"name":"a"},"spec":{"nodeName":"n1","containers":[{"name":"c","image":"x",
      "ports":[{"containerPort":80,"hostPort":8080,"hostIP":"10.0.0.1"}]}]}})")));
  auto want = [](std::string port) {
    return P(R"({"metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"x","ports":[)" + port + "]}]}}");
  };
  Decision d = decide(s, want(R"({"containerPort":80,"hostPort":8080})"));
  CHECK_FALSE(d.scheduled);
  CHECK(d.message == "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports.");
  CHECK(decide(s, want(R"({"containerPort":80,"hostPort":8080,"protocol":"UDP"})")).scheduled);
  CHECK(decide(s, want(R"({"containerPort":80,"hostPort":8080,"hostIP":"10.0.0.2"})")).scheduled);
  CHECK_FALSE(decide(s, want(R"({"containerPort":80,"hostPort":8080,"hostIP":"10.0.0.1"})")).scheduled);
  CHECK(decide(s, want(R"({"containerPort":8080})")).scheduled);
}

TEST_CASE("PodTopologySpread: DoNotSchedule keeps the skew within maxSkew, minDomains counts missing domains") {
  Snapshot s =
      cluster({NodeSpec{"a1", {card("GPU-1")}, {{"zone", "a"}}}, NodeSpec{"b1", {card("GPU-2")}, {{"zone", "b"}}}});
  REQUIRE(s.upsert_pod(P(
      R"({"metadata":{"name":"p0","labels":{"app":"s"}},"spec":{"nodeName":"a1","containers":[{"name":"c","image":"x"}]}})")));
  const char* spread = R"({"metadata":{"name":"p","labels":{"app":"s"}},"spec":{"containers":[{"name":"c","image":"x"}],
    "topologySpreadConstraints":[{"maxSkew":1,"topologyKey":"zone","whenUnsatisfiable":"DoNotSchedule",%N
      "labelSelector":{"matchLabels":{"app":"s"}}}]}})";
  std::string t = spread;
  t.replace(t.find("%N"), 2, "");
  Decision d = decide(s, P(t));
  REQUIRE(d.scheduled);
  CHECK(d.node == "b1");
  REQUIRE(s.upsert_pod(P(
      R"({"metadata":{"name":"p1","labels":{"app":"s"}},"spec":{"nodeName":"a1","containers":[{"name":"c","image":"x"}]}})")));
  // a has 2, b has 0. Restricted to zone a by nodeSelector: with nodeAffinityPolicy Honor (default) only zone a
  // is a domain, so the skew is 2 + 1 - 2 = 1 and it fits; with Ignore, zone b's 0 is the minimum and it does not.
  auto only_a = P(t);
  only_a["spec"].as_object()["nodeSelector"] = json::object{{"zone", "a"}};
  CHECK(decide(s, only_a).node == "a1");
  std::string ig = spread;
  ig.replace(ig.find("%N"), 2, R"("nodeAffinityPolicy":"Ignore",)");
  auto only_a_ignore = P(ig);
  only_a_ignore["spec"].as_object()["nodeSelector"] = json::object{{"zone", "a"}};
  Decision blocked = decide(s, only_a_ignore);
  CHECK_FALSE(blocked.scheduled);
  CHECK(blocked.message.find("node(s) didn't match pod topology spread constraints") != std::string::npos);
  // minDomains 3 with two domains: the global minimum is 0, so zone b (0 pods) still takes one.
  std::string md = spread;
  md.replace(md.find("%N"), 2, R"("minDomains":3,)");
  CHECK(decide(s, P(md)).node == "b1");
  // A node without the key is unresolvable with the upstream text.
  REQUIRE(s.upsert_node(node(NodeSpec{"nolabel", {card("GPU-3")}})));
  auto pinned = P(t);
  pinned["spec"].as_object()["nodeName"] = "nolabel";
  Decision missing = decide(s, pinned);
  CHECK(missing.message.find("1 node(s) didn't match pod topology spread constraints (missing required label)") !=
        std::string::npos);
}

TEST_CASE("DynamicResources: pods with resourceClaims stay Pending with a message") {
  Snapshot s = cluster({NodeSpec{"n1", {card("GPU-1")}}});
  Decision d = decide(s, P(R"({"metadata":{"name":"dra"},"spec":{"containers":[{"name":"c","image":"x"}],
      "resourceClaims":[{"name":"gpu","resourceClaimTemplateName":"t"}]}})"));
  CHECK_FALSE(d.scheduled);
  CHECK(d.message.find("gpuslice does not allocate DRA claims") != std::string::npos);
  CHECK(d.message.rfind("0/1 nodes are available: pod uses spec.resourceClaims", 0) == 0);
}

TEST_CASE("VolumeBinding / VolumeZone / VolumeRestrictions / NodeVolumeLimits") {
  Snapshot s = cluster({NodeSpec{"n1", {card("GPU-1")}, {{"topology.kubernetes.io/zone", "z1"}}},
                        NodeSpec{"n2", {card("GPU-2")}, {{"topology.kubernetes.io/zone", "z2"}}}});
  auto with_claim = [](std::string name, std::string claim) {
    return P(R"({"metadata":{"name":")" + name + R"("},"spec":{"containers":[{"name":"c","image":"x"}],
        "volumes":[{"name":"v","persistentVolumeClaim":{"claimName":")" +
             claim + R"("}}]}})");
  };
  Decision missing = decide(s, with_claim("p", "nope"));
  CHECK(missing.message == "0/2 nodes are available: persistentvolumeclaim \"nope\" not found.");

  REQUIRE(s.objects().upsert_claim(
      P(R"({"metadata":{"name":"unbound","namespace":"default"},"spec":{"accessModes":["ReadWriteOnce"]}})")));
  CHECK(decide(s, with_claim("p", "unbound")).message ==
        "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims.");

  // Bound to a local PV on n2: only n2.
  REQUIRE(s.objects().upsert_volume(P(R"({"metadata":{"name":"pv-local"},"spec":{"capacity":{"storage":"1Gi"},
      "nodeAffinity":{"required":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"In","values":["n2"]}]}]}}}})")));
  REQUIRE(s.objects().upsert_claim(P(
      R"({"metadata":{"name":"data","namespace":"default"},"spec":{"volumeName":"pv-local","accessModes":["ReadWriteOncePod"]}})")));
  Decision local = decide(s, with_claim("p", "data"));
  REQUIRE(local.scheduled);
  CHECK(local.node == "n2");
  auto pinned = with_claim("p", "data");
  pinned["spec"].as_object()["nodeSelector"] = json::object{{"kubernetes.io/hostname", "n1"}};
  CHECK(decide(s, pinned).message ==
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had volume node "
        "affinity conflict.");

  // ReadWriteOncePod: a second pod using the claim is refused.
  auto user = with_claim("user", "data");
  user["spec"].as_object()["nodeName"] = "n2";
  REQUIRE(s.upsert_pod(user));
  CHECK(decide(s, with_claim("p2", "data")).message ==
        "0/2 nodes are available: node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod "
        "access mode.");

  // Zone-labelled PV in z1.
  REQUIRE(s.objects().upsert_volume(
      P(R"({"metadata":{"name":"pv-z1","labels":{"topology.kubernetes.io/zone":"z1"}},"spec":{}})")));
  REQUIRE(s.objects().upsert_claim(
      P(R"({"metadata":{"name":"zoned","namespace":"default"},"spec":{"volumeName":"pv-z1"}})")));
  Decision z = decide(s, with_claim("p3", "zoned"));
  REQUIRE(z.scheduled);
  CHECK(z.node == "n1");

  // WaitForFirstConsumer: refused with a message unless the caller selects volume nodes.
  REQUIRE(s.objects().upsert_storage_class(P(R"({"metadata":{"name":"wffc"},"provisioner":"csi.example.com",
      "volumeBindingMode":"WaitForFirstConsumer","allowedTopologies":[{"matchLabelExpressions":[{"key":"topology.kubernetes.io/zone","values":["z2"]}]}]})")));
  REQUIRE(s.objects().upsert_claim(
      P(R"({"metadata":{"name":"late","namespace":"default"},"spec":{"storageClassName":"wffc"}})")));
  CHECK(decide(s, with_claim("p4", "late")).message.find("waits for its first consumer") != std::string::npos);
  auto info = parse_pod(with_claim("p4", "late"), gpuslice::DeviceConfig{});
  ScheduleOptions opt;
  opt.select_volume_nodes = true;
  Decision w = schedule(s, *info, opt);
  REQUIRE(w.scheduled);
  CHECK(w.node == "n2");
  CHECK(w.claims_to_select == std::vector<std::string>{"late"});

  // CSI attach limit 1 on n2, already used by a pod there.
  REQUIRE(s.objects().upsert_csi_node(
      P(R"({"metadata":{"name":"n2"},"spec":{"drivers":[{"name":"csi.example.com","allocatable":{"count":1}}]}})")));
  REQUIRE(s.objects().upsert_claim(
      P(R"({"metadata":{"name":"late2","namespace":"default"},"spec":{"storageClassName":"wffc"}})")));
  auto holder = with_claim("holder", "late2");
  holder["spec"].as_object()["nodeName"] = "n2";
  REQUIRE(s.upsert_pod(holder));
  Decision lim = schedule(s, *info, opt);
  CHECK_FALSE(lim.scheduled);
  CHECK(lim.message.find("node(s) exceed max volume count") != std::string::npos);
}

TEST_CASE("NodePorts and InterPodAffinity see an assumed (not yet bound) GPU pod: the two reported bugs") {
  // The loop assumes each decision before the API shows it; the next decision must already see its ports and
  // labels, or a burst of replicas lands on one node.
  Snapshot s = cluster({NodeSpec{"n1", {card("GPU-1")}}});
  auto gpu_pod = [](std::string name, std::string extra) {
    return P(R"({"metadata":{"name":")" + name + R"(","namespace":"default","labels":{"app":"web"}},"spec":{)" + extra +
             R"("containers":[{"name":"c","image":"x","ports":[{"containerPort":80,"hostPort":8080}],
             "resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"1000"}}}]}})");
  };
  auto first = parse_pod(gpu_pod("web-1", ""), gpuslice::DeviceConfig{});
  REQUIRE(first.ok());
  Decision d1 = schedule(s, *first, ScheduleOptions{});
  REQUIRE(d1.scheduled);
  REQUIRE(s.assume(*first, d1.node, d1.devices, 0));
  Decision d2 = decide(s, gpu_pod("web-2", ""));
  CHECK_FALSE(d2.scheduled);
  CHECK(d2.message == "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports.");
  // hostIP 0.0.0.0 (the default) clashes with any address; two specific addresses do not clash.
  auto at = [&](std::string name, std::string ip) {
    return P(R"({"metadata":{"name":")" + name + R"("},"spec":{"containers":[{"name":"c","image":"x",
        "ports":[{"containerPort":80,"hostPort":9090,"hostIP":")" +
             ip + R"("}]}]}})");
  };
  REQUIRE(s.upsert_pod([&] {
    auto p = at("bound", "127.0.0.1");
    p["spec"].as_object()["nodeName"] = "n1";
    return p;
  }()));
  CHECK_FALSE(decide(s, at("wild", "0.0.0.0")).scheduled);
  CHECK(decide(s, at("other", "127.0.0.2")).scheduled);
  CHECK_FALSE(decide(s, at("same", "127.0.0.1")).scheduled);

  // Anti-affinity through assume(): the second replica waits.
  Snapshot t = cluster({NodeSpec{"n1", {card("GPU-1")}}});
  auto rep = parse_pod(P(fill(kWeb, "web-1", "")), gpuslice::DeviceConfig{});
  REQUIRE(rep.ok());
  Decision r1 = schedule(t, *rep, ScheduleOptions{});
  REQUIRE(r1.scheduled);
  REQUIRE(t.assume(*rep, r1.node, r1.devices, 0));
  Decision r2 = decide(t, P(fill(kWeb, "web-2", "")));
  CHECK_FALSE(r2.scheduled);
  CHECK(r2.message == "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules.");
  // A pod with no GPU counts as well (every pod on the node, GPU or not).
  Snapshot u = cluster({NodeSpec{"n1", {card("GPU-1")}}});
  REQUIRE(u.upsert_pod(P(R"({"metadata":{"name":"cpu-web","namespace":"default","labels":{"app":"web"}},
      "spec":{"nodeName":"n1","containers":[{"name":"c","image":"x"}]}})")));
  CHECK(decide(u, P(fill(kWeb, "web-9", ""))).message ==
        "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules.");
}
